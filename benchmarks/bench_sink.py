"""The streaming sink's throughput (issue 21: at least 50 MB/s of lz4 batches on the 2-core
machine): Spark's Kafka source reads a topic of lz4 batches from a real broker (the broker tests'
harness) and ``writeStream.format("kafkasegments")`` archives it, offsets kept, lz4 again.

A broker takes ``--records`` records (``--value-bytes`` each) from its Java producer, lz4,
spread over ``--partitions`` partitions. Then, in one SparkSession with Spark's Kafka connector
(fetched by Maven as benchmarks/bench_broker_spark.py does), alternating ``--repeat`` times after
one untimed run of each: Trigger.AvailableNow queries from the earliest offsets, in micro-batches
of ``--max-offsets`` offsets, into (a) the ``noop`` sink (what reading the topic costs), (b) a
Python data source sink that only counts the Arrow batches Spark hands it (what Spark's Python
streaming sink API costs on top: rows to Arrow in the JVM, Arrow to a Python worker, a Python
process per commit), and (c) the kafkasegments sink (a fresh log dir and checkpoint each time;
the archive's record count is checked). Then (d): the sink's own work without Spark, in this
process: the topic's rows (read from the broker's log dir beforehand, in Arrow batches of 10,000
rows as Spark hands them) through the sink's tasks (one per partition, one after the other) and
its commit. Printed: what the sink archived (records, the ``.log`` bytes of its lz4 batches, the
key and value bytes), each side's median and spread, the MB/s of the archived lz4 batches over
the times of (a) to (d), the sink's time over its peers' in the same round (the machine's load
changes less within a round), and per query the CPU seconds of this process's tree (Spark's JVM
and Python workers; Linux), which depends far less on other load than the time does.
``--arrow-batch`` sets ``spark.sql.execution.arrow.maxRecordsPerBatch``, the rows per Arrow
batch Spark hands a Python sink (Spark's default 10,000).

Usage::

    python benchmarks/bench_sink.py [--records 4000000] [--partitions 2] [--value-bytes 200]
        [--repeat 3] [--max-offsets 1000000] [--arrow-batch 10000] [--data DIR]
        [--connector-version V]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_broker_spark import (
    Broker,
    connector_jars,
    connector_version,
    load,
    session,
    spread,
)

TOPIC = "sink-bench"
PEERS = (("(a)", "noop"), ("(b)", "bench_counting_sink"), ("(c)", "kafkasegments"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-offsets", type=int, default=1_000_000)
    parser.add_argument("--arrow-batch", type=int, default=10_000)
    parser.add_argument("--data", type=Path, help="work dir (default: a temporary one, removed)")
    parser.add_argument("--connector-version", help="default: the installed pyspark's version")
    args = parser.parse_args()
    if args.records < 1 or args.partitions < 1 or args.repeat < 1 or args.max_offsets < 1:
        parser.error("--records, --partitions, --repeat and --max-offsets must be >= 1")

    import pyspark

    version = args.connector_version or connector_version(pyspark.__version__)
    jars = connector_jars(version)
    work = args.data or Path(tempfile.mkdtemp(prefix="bench-sink-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = Broker(work / "broker")
    try:
        broker.start()
        broker.create_topic(TOPIC, args.partitions)
        broker.produce(
            TOPIC,
            args.records,
            compression="lz4",
            value_bytes=args.value_bytes,
            batch_size=64 * 1024,
            linger_ms=20,
        )
        log_bytes = sum(p.stat().st_size for p in broker.log_dir.glob(f"{TOPIC}-*/*.log"))
        print(
            f"{args.records} records ({args.value_bytes}-byte values, lz4) in {args.partitions} "
            f"partitions, {log_bytes / 1e6:.1f} MB of .log; micro-batches of "
            f"{args.max_offsets} offsets; pyspark {pyspark.__version__}, connector {version}; "
            f"{load()}"
        )
        spark = session(jars)
        try:
            return run(spark, broker, work, args, log_bytes)
        finally:
            spark.stop()
    finally:
        broker.close()
        if args.data is None:
            shutil.rmtree(work, ignore_errors=True)


def counting_sink() -> type:
    """A Python data source whose streaming sink only counts the Arrow batches' rows."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

    class Counted(WriterCommitMessage):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class CountingWriter(DataSourceStreamArrowWriter):
        def write(self, iterator: Any) -> Counted:
            return Counted(sum(batch.num_rows for batch in iterator))

        def commit(self, messages: list[Any], batchId: int) -> None:
            pass

    class CountingSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_counting_sink"

        def streamWriter(self, schema: Any, overwrite: bool) -> CountingWriter:
            return CountingWriter()

    return CountingSink


def run(spark: Any, broker: Broker, work: Path, args: argparse.Namespace, log_bytes: int) -> int:
    spark.dataSource.register(counting_sink())
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch))

    runs = iter(range(1_000_000))
    archived: dict[str, int] = {}  # what the sink wrote (the same every run: checked)

    def query(sink: str) -> float:
        number = next(runs)
        out, checkpoint = work / f"archive-{number}", work / f"checkpoint-{number}"
        writer = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.max_offsets))
            .load()
            .writeStream.format(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
        )
        if sink == "kafkasegments":
            writer = writer.option("compression", "lz4")
        cpu = tree_cpu_seconds()
        started = time.perf_counter()
        running = writer.start(str(out)) if sink != "noop" else writer.start()
        running.awaitTermination()
        seconds = time.perf_counter() - started
        if cpu is not None:
            cpus[sink].append(tree_cpu_seconds() - cpu)  # type: ignore[operator]
        if running.exception() is not None:
            raise SystemExit(f"bench_sink: the {sink} query failed: {running.exception()}")
        if sink == "kafkasegments":
            measured = measure_archive(out)
            if measured["records"] != args.records:
                raise SystemExit(
                    f"bench_sink: the archive holds {measured['records']} records, "
                    f"not {args.records}"
                )
            if archived.get("log_bytes", measured["log_bytes"]) != measured["log_bytes"]:
                raise SystemExit("bench_sink: two runs archived different .log bytes")
            archived.update(measured)
            shutil.rmtree(out)
        shutil.rmtree(checkpoint, ignore_errors=True)
        return seconds

    times: dict[str, list[float]] = {"noop": [], "bench_counting_sink": [], "kafkasegments": []}
    cpus: dict[str, list[float]] = {sink: [] for sink in times}
    for sink in times:
        query(sink)  # untimed: class loading, Python workers
        cpus[sink].clear()
    for _ in range(args.repeat):
        for sink in times:
            times[sink].append(query(sink))
    print(
        f"archived: {archived['records']} records, {archived['log_bytes'] / 1e6:.1f} MB of lz4 "
        f"batches in .log files ({archived['payload_bytes'] / 1e6:.1f} MB of keys and values); "
        f"the topic: {log_bytes / 1e6:.1f} MB of .log"
    )
    print("Trigger.AvailableNow from the earliest offsets, Spark's Kafka source into:")
    print(f"  (a) noop sink                 {spread(times['noop'])}")
    print(f"  (b) counting Python sink      {spread(times['bench_counting_sink'])}")
    print(f"  (c) kafkasegments sink        {spread(times['kafkasegments'])}")
    if all(cpus.values()):
        print(
            "  CPU seconds per query, Spark's JVM and Python workers: "
            + ", ".join(
                f"{label} {statistics.median(cpus[sink]):.2f} "
                f"({min(cpus[sink]):.2f}-{max(cpus[sink]):.2f})"
                for label, sink in PEERS
            )
        )
    times["alone"] = sink_alone(broker, work, args.repeat)
    print(f"  (d) the sink's tasks and commit alone, one core: {spread(times['alone'])}")
    mb = archived["log_bytes"] / 1e6
    print(f"MB/s of archived lz4 batches ({mb:.1f} MB) over each side's time:")
    for label, sink in (
        ("(a) noop sink", "noop"),
        ("(b) counting Python sink", "bench_counting_sink"),
        ("(c) kafkasegments sink", "kafkasegments"),
        ("(d) sink alone", "alone"),
    ):
        rates = [mb / t for t in times[sink]]
        print(
            f"  {label:26} median {statistics.median(rates):6.1f} "
            f"(min {min(rates):.1f}, max {max(rates):.1f})"
        )
    for peer, sink in (("noop", "noop"), ("counting", "bench_counting_sink")):
        ratios = [c / p for c, p in zip(times["kafkasegments"], times[sink], strict=True)]
        print(
            f"sink time / {peer} time (same round): median {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
        )
    print(f"goal: sink >= 50 MB/s; {load()}")
    return 0


def tree_cpu_seconds() -> float | None:
    """User and system CPU seconds of this process and its descendants (Spark's JVM, its Python
    workers), finished children they waited for included; None where there is no /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    me = os.getpid()
    total = 0
    for pid, spent in ticks.items():
        ancestor = pid
        while ancestor not in (me, 0) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == me:
            total += spent
    return total / os.sysconf("SC_CLK_TCK")


def measure_archive(out: Path) -> dict[str, int]:
    """Records, .log bytes and key + value bytes of an archive."""
    import pyarrow.compute as pc

    from kafka_segments_ds import read_table

    table = read_table(out, columns=["key", "value"])
    payload = sum(
        int(pc.sum(pc.binary_length(table.column(name))).as_py() or 0) for name in ("key", "value")
    )
    return {
        "records": table.num_rows,
        "log_bytes": sum(p.stat().st_size for p in out.glob(f"{TOPIC}-*/*.log")),
        "payload_bytes": payload,
    }


def sink_alone(broker: Broker, work: Path, repeat: int) -> list[float]:
    """Times of the sink's tasks and commit on the topic's rows, without Spark."""
    import pyarrow.compute as pc

    from kafka_segments_ds import read_table
    from kafka_segments_ds.writer.sink import commit_batch, prepare_sink, write_task

    table = read_table(broker.log_dir, subscribe=TOPIC)
    table = table.combine_chunks()
    partitions = sorted(set(table.column("partition").to_pylist()))
    inputs = [
        table.filter(pc.equal(table.column("partition"), p)).to_batches(10_000) for p in partitions
    ]
    times = []
    for number in range(repeat):
        out = work / f"alone-{number}"
        spec = prepare_sink(
            [str(out)], {"compression": "lz4", "sinkId": "bench"}, False, table.schema
        )
        started = time.perf_counter()
        results = [write_task(spec, task, batches) for task, batches in enumerate(inputs)]
        commit_batch(spec, results, 0)
        times.append(time.perf_counter() - started)
        shutil.rmtree(out)
    return times


if __name__ == "__main__":
    raise SystemExit(main())
