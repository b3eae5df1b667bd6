"""Spark Connect: a local Connect server (started once per session, in a directory of its own)
and client scripts that read, write and register, as a user of a managed platform would."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import kafka_segments_ds as ksd

pytestmark = pytest.mark.slow

CLIENT = """
import json, sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
"""

# No register(): the server found the source itself (pyspark_kafkasegments in its worker Python).
READ = (
    CLIENT
    + """
df = (spark.read.format("kafkasegments").option("includeHeaders", "true")
      .option("subscribe", "orders,legacy.events").load(sys.argv[2]))
rows = df.selectExpr("topic", "partition", "offset", "hex(key)", "hex(value)",
                     "size(headers)", "unix_millis(timestamp)")
print(json.dumps([list(r) for r in rows.orderBy("topic", "partition", "offset").collect()]))
"""
)

REGISTER_WRITE = (
    CLIENT
    + """
import kafka_segments_ds
kafka_segments_ds.register(spark)
kafka_segments_ds.register(spark)  # idempotent
(spark.range(0, 300, 1, 3)
    .selectExpr("cast(concat('k', id % 7) as binary) as key",
                "cast(concat('v', id) as binary) as value",
                "timestamp_millis(1700000000000 + id) as timestamp")
    .write.format("kafkasegments").mode("append").option("topic", "events")
    .option("numPartitions", "2").save(sys.argv[2]))
back = (spark.read.format("kafkasegments").schema("partition int, offset bigint")
        .load(sys.argv[2]).groupBy("partition").count().orderBy("partition"))
print(json.dumps([list(r) for r in back.collect()]))
"""
)

BAD_RANGE = (
    CLIENT
    + """
try:
    (spark.read.format("kafkasegments").option("subscribe", "orders")
     .option("startingOffsets", '{"orders":{"0":100}}')
     .option("endingOffsets", '{"orders":{"0":50}}')
     .load(sys.argv[2]).collect())
    print(json.dumps("no error"))
except Exception as err:
    print(json.dumps(f"{type(err).__name__}: {err}"))
"""
)


# A stream on the server, driven from the client: AvailableNow into Parquet with a checkpoint.
STREAM = (
    CLIENT
    + """
query = (spark.readStream.format("kafkasegments").option("startingOffsets", "earliest")
         .option("subscribe", "orders").load(sys.argv[2])
         .selectExpr("partition", "offset")
         .writeStream.format("parquet").option("path", sys.argv[3] + "/out")
         .option("checkpointLocation", sys.argv[3] + "/checkpoint")
         .trigger(availableNow=True).start())
query.awaitTermination()
back = spark.read.parquet(sys.argv[3] + "/out").orderBy("partition", "offset")
print(json.dumps([list(r) for r in back.collect()]))
"""
)


def _expected_rows(table: pa.Table) -> list[list[Any]]:
    rows = [
        [
            r["topic"],
            r["partition"],
            r["offset"],
            None if r["key"] is None else r["key"].hex().upper(),
            None if r["value"] is None else r["value"].hex().upper(),
            len(r["headers"]),
            None if r["timestamp"] is None else int(r["timestamp"].timestamp() * 1000),
        ]
        for r in table.to_pylist()
    ]
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


@pytest.mark.spark_matrix
def test_connect_reads_auto_registered_source(
    connect_url: str, spark_script: Callable[..., Any], sample_dir: Path, tmp_path: Path
) -> None:
    got = spark_script(READ, connect_url, str(sample_dir), cwd=tmp_path)
    expected = _expected_rows(
        ksd.read_table(str(sample_dir), includeHeaders=True, subscribe="orders,legacy.events")
    )
    assert len(expected) > 1000
    assert got == expected


def test_connect_register_is_idempotent_and_writes(
    connect_url: str, spark_script: Callable[..., Any], tmp_path: Path
) -> None:
    target = tmp_path / "out"
    counts = spark_script(REGISTER_WRITE, connect_url, str(target), cwd=tmp_path)
    table = ksd.read_table(str(target), columns=["partition", "offset", "key", "value"])
    assert table.num_rows == 300
    by_partition = {p: table.filter(pa.compute.equal(table["partition"], p)) for p in (0, 1)}
    assert counts == [[p, by_partition[p].num_rows] for p in (0, 1)]
    for part in by_partition.values():
        assert part["offset"].to_pylist() == list(range(part.num_rows))
    values = sorted(int(v[1:]) for v in table["value"].to_pylist())
    assert values == list(range(300))
    # a key always lands in the same partition
    key_partitions: dict[bytes, set[int]] = {}
    for key, partition in zip(
        table["key"].to_pylist(), table["partition"].to_pylist(), strict=True
    ):
        key_partitions.setdefault(key, set()).add(partition)
    assert sorted(key_partitions) == [b"k%d" % i for i in range(7)]
    assert all(len(p) == 1 for p in key_partitions.values())


def test_connect_impossible_range_reaches_the_client(
    connect_url: str, spark_script: Callable[..., Any], sample_dir: Path, tmp_path: Path
) -> None:
    message = spark_script(BAD_RANGE, connect_url, str(sample_dir), cwd=tmp_path)
    assert "InvalidOptionError" in message
    assert "Beginning offset 100 is after the ending offset 50 for topic orders partition 0" in (
        message
    )


def test_connect_example_runs_against_a_server(
    connect_url: str, script_env: dict[str, str], sample_dir: Path, tmp_path: Path
) -> None:
    example = Path(__file__).parents[2] / "examples" / "spark_connect.py"
    done = subprocess.run(
        [sys.executable, str(example), connect_url, str(sample_dir)],
        cwd=tmp_path,
        env=script_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    table = ksd.read_table(str(sample_dir), columns=["topic", "partition"])
    expected = [
        f"{topic}-{partition}: {count} records"
        for (topic, partition), count in sorted(
            Counter(
                zip(table["topic"].to_pylist(), table["partition"].to_pylist(), strict=True)
            ).items()
        )
    ]
    orders = sum(1 for t in table["topic"].to_pylist() if t == "orders")
    expected.append(f"orders-copy: {orders} records in 2 partitions")
    assert done.stdout.splitlines() == expected


def test_connect_stream_available_now(
    connect_url: str, spark_script: Callable[..., Any], sample_dir: Path, tmp_path: Path
) -> None:
    """``spark.readStream`` from a Connect client: the server runs the stream (its source
    worker and the micro-batches); every record of the topic once, in the Parquet sink."""
    got = spark_script(STREAM, connect_url, str(sample_dir), str(tmp_path), cwd=tmp_path)
    table = ksd.read_table(str(sample_dir), subscribe="orders", columns=["partition", "offset"])
    expected = sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))
    assert len(expected) > 100
    assert [tuple(r) for r in got] == expected
