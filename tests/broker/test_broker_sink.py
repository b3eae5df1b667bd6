"""The kafkasegments streaming sink fed by Spark's Kafka source from a real broker: the archive
equals the topics record for record (offsets, timestamps and their types, keys, values, headers;
transaction markers leave gaps) after the query was killed mid-stream (the whole process group,
Python and JVM, SIGKILL) and restarted from its checkpoint with Trigger.AvailableNow.

The query runs in processes of its own (tests/broker/sink_query.py): Spark's Kafka connector
(fetched by Maven, as benchmarks/bench_broker_spark.py does) must be on the JVM's classpath
when it starts, which the shared SparkSession's is not."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.errors import CommitInProgressError
from kafka_segments_ds.writer.sink import SINK_DIR

from .kafka_broker import Broker, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
QUERY = HERE / "sink_query.py"
BENCH = HERE.parents[1] / "benchmarks" / "bench_broker_spark.py"
TOPICS = ("sink-create-time", "sink-append-time")
QUERY_TIMEOUT_S = 600


def connector_jars() -> str:
    """Spark's Kafka connector for the installed pyspark, as the benchmark fetches it."""
    spec = importlib.util.spec_from_file_location("bench_broker_spark", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    import pyspark

    jars = bench.connector_jars(bench.connector_version(pyspark.__version__))
    return ",".join(str(j) for j in jars)


def query_command(broker: Broker, out: Path, checkpoint: Path, jars: str, mode: str) -> list[str]:
    options = json.dumps({"compression": "lz4", "segmentBytes": "65536"})
    return [
        sys.executable,
        str(QUERY),
        broker.bootstrap,
        ",".join(TOPICS),
        str(out),
        str(checkpoint),
        jars,
        mode,
        "300",
        options,
    ]


def last_batch(out: Path) -> int:
    records = list((out / SINK_DIR).glob("*.json")) if (out / SINK_DIR).exists() else []
    return max((json.loads(p.read_text())["batchId"] for p in records), default=-1)


def produce(broker: Broker, tag: str, count: int, **options: Any) -> None:
    common: dict[str, Any] = dict(headers=2, null_key_every=5, null_value_every=9, value_bytes=60)
    for topic in TOPICS:
        broker.produce(topic, count, tag=tag, **{**common, **options})


def test_archive_equals_topics_across_a_killed_query(broker: Broker, tmp_path: Path) -> None:
    jars = connector_jars()
    broker.create_topic(TOPICS[0], 3, internal_segment_bytes=32 * 1024)
    broker.create_topic(TOPICS[1], 2, message_timestamp_type="LogAppendTime")
    produce(broker, "lz4", 900, compression="lz4", linger_ms=5)
    produce(
        broker,
        "txn",
        300,
        transactional_id="sink-txn",
        producers=2,
        txn_records=10,
        abort_every=3,
        compression="zstd",
    )
    out, checkpoint = tmp_path / "archive", tmp_path / "checkpoint"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    log = (tmp_path / "forever.log").open("w")
    running = subprocess.Popen(
        query_command(broker, out, checkpoint, jars, "forever"),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: Python and the JVM killed together
    )
    try:
        waited = time.monotonic()
        while last_batch(out) < 2:
            assert running.poll() is None, (tmp_path / "forever.log").read_text()[-4000:]
            assert time.monotonic() - waited < QUERY_TIMEOUT_S, "no micro-batch committed"
            time.sleep(0.2)
        produce(broker, "gzip", 400, compression="gzip")  # while the query runs
        time.sleep(1.0)
    finally:
        os.killpg(running.pid, signal.SIGKILL)
        running.wait(timeout=60)
        log.close()
    killed_at = last_batch(out)
    produce(broker, "after", 300, compression="lz4")
    done = subprocess.run(
        query_command(broker, out, checkpoint, jars, "available-now"),
        env=env,
        capture_output=True,
        text=True,
        timeout=QUERY_TIMEOUT_S,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert last_batch(out) > killed_at
    archived = table_rows(read_table(out, includeHeaders=True))
    by_topic = {topic: [r for r in archived if r[0] == topic] for topic in TOPICS}
    for topic in TOPICS:
        want = broker.consume(topic)
        assert len(want) > 900 + 400 + 300  # and the transactions' records, aborted ones too
        assert by_topic[topic] == want, topic
    assert {r[7] for r in by_topic[TOPICS[0]]} == {0}
    assert {r[7] for r in by_topic[TOPICS[1]]} == {1}
    # the transaction markers are gaps in the archive's offsets, as in the topic
    offsets = [r[2] for r in by_topic[TOPICS[0]] if r[1] == 0]
    assert offsets[-1] + 1 > len(offsets)
    assert not [n for n in os.listdir(out) if n.startswith(".kafkasegments-staging-")]
    try:
        read_table(out)
    except CommitInProgressError as err:  # pragma: no cover - reported with the log dir
        pytest.fail(f"a commit was left pending: {err}")


@pytest.mark.bench
def test_bench_sink_runs(broker_tools: None, tmp_path: Path) -> None:
    """Smoke run of benchmarks/bench_sink.py on tiny data (it starts a broker of its own): it
    exits 0 having printed what it archived, each side's times, the MB/s and the ratios. No
    timing is asserted."""
    script = HERE.parents[1] / "benchmarks" / "bench_sink.py"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [sys.executable, str(script), "--records", "3001", "--partitions", "3"]
    command += ["--repeat", "1", "--max-offsets", "1000", "--data", str(tmp_path / "data")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}"
    lines = done.stdout.splitlines()
    assert lines[0].startswith("3001 records (200-byte values, lz4) in 3 partitions, ")
    assert sum(line.startswith("  (a) noop sink                 median ") for line in lines) == 1
    assert sum(line.startswith("  (c) kafkasegments sink        median ") for line in lines) == 1
    assert sum(line.startswith("archived: 3001 records, ") for line in lines) == 1
    assert any(line.startswith("MB/s of archived lz4 batches (") for line in lines)
    assert any(line.startswith("  (c) kafkasegments sink     median ") for line in lines)
    assert any(line.startswith("  (d) sink alone             median ") for line in lines)
    assert any(line.startswith("sink time / counting time (same round): median ") for line in lines)
    assert lines[-1].startswith("goal: sink >= 50 MB/s; load average ")
