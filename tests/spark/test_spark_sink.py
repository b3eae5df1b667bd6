"""``writeStream.format("kafkasegments")`` on the shared SparkSession, fed by a kafkasegments
``readStream`` of another archive (the columns of Spark's Kafka source, offsets with gaps):
Trigger.AvailableNow runs appending new segments, a micro-batch Spark runs again after a restart
(its commit log entry gone) changing nothing, and a processing-time query whose archive is read
(batch and readStream) while it writes. The broker run is tests/broker/test_broker_sink.py."""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table, write_table
from kafka_segments_ds.writer.sink import SINK_DIR

TS0 = 1_700_000_000_000
# pyspark 4.2+ passes read limits to the source: AvailableNow runs in several micro-batches
HAS_READ_LIMITS = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None
HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def source_rows(partition: int, offsets: list[int]) -> pa.Table:
    return pa.table(
        {
            "key": [None if o % 4 == 0 else b"k%d" % o for o in offsets],
            "value": [b"value-%d" % o * 5 for o in offsets],
            "topic": ["live"] * len(offsets),
            "partition": pa.array([partition] * len(offsets), pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array(
                [datetime.datetime.fromtimestamp((TS0 + o) / 1000, datetime.UTC) for o in offsets],
                pa.timestamp("us", tz="UTC"),
            ),
            "headers": pa.array(
                [[{"key": "n", "value": b"%d" % o}] if o % 3 else [] for o in offsets],
                pa.list_(HEADER),
            ),
        }
    )


def grow(source: Path, start: int, count: int) -> None:
    """``count`` more records in each of 2 partitions, from offset ``start``, every 7th skipped
    (a gap, as a transaction marker leaves)."""
    offsets = [o for o in range(start, start + count) if o % 7 != 6]
    write_table(
        pa.concat_tables(source_rows(partition, offsets) for partition in (0, 1)),
        source,
        preserveOffsets="true",
        numPartitions=2,
        compression="lz4",
        segmentBytes=4096,
    )


def rows(path: Path) -> list[dict[str, Any]]:
    table = read_table(path, includeHeaders=True).select(list(COLUMNS))
    return sorted(table.to_pylist(), key=lambda r: (r["partition"], r["offset"]))


def files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def run_available_now(spark: Any, source: Path, out: Path, checkpoint: Path) -> None:
    reader = (
        spark.readStream.format("kafkasegments")
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if HAS_READ_LIMITS:
        reader = reader.option("maxOffsetsPerTrigger", "40")
    query = (
        reader.load(str(source))
        .writeStream.format("kafkasegments")
        .option("checkpointLocation", str(checkpoint))
        .option("compression", "lz4")
        .option("segmentBytes", "2048")
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination()
    assert query.exception() is None


@pytest.mark.spark_matrix
def test_available_now_runs_and_a_replayed_batch(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source, out, checkpoint = tmp_path / "source", tmp_path / "archive", tmp_path / "checkpoint"
    grow(source, 0, 60)
    run_available_now(spark, source, out, checkpoint)
    assert rows(out) == rows(source)
    segments = sorted(p.name for p in (out / "live-0").glob("*.log"))
    grow(source, 60, 50)
    run_available_now(spark, source, out, checkpoint)
    assert rows(out) == rows(source)
    assert len(rows(out)) == 2 * (110 - 110 // 7)
    # new segments were appended; the earlier ones are still there
    assert set(segments) < {p.name for p in (out / "live-0").glob("*.log")}
    (record,) = (out / SINK_DIR).iterdir()
    last = json.loads(record.read_text())["batchId"]
    assert last == len(os.listdir(checkpoint / "commits")) - 1 - sum(
        n.startswith(".") for n in os.listdir(checkpoint / "commits")
    )
    # Spark committed batch `last` into the sink but its commit log lost it (the query was
    # killed in between): the restart runs the batch again, which changes nothing
    before = files(out)
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    run_available_now(spark, source, out, checkpoint)
    assert (checkpoint / "commits" / str(last)).exists()
    assert files(out) == before


def test_processing_time_query_and_readers_while_it_writes(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source, out, checkpoint = tmp_path / "source", tmp_path / "archive", tmp_path / "checkpoint"
    grow(source, 0, 30)
    query = (
        spark.readStream.format("kafkasegments")
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load(str(source))
        .writeStream.format("kafkasegments")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start(str(out))
    )
    reader = None
    try:
        query.processAllAvailable()
        assert rows(out) == rows(source)
        # a stream reading the archive while the sink appends to it
        reader = (
            spark.readStream.format("kafkasegments")
            .option("startingOffsets", "earliest")
            .load(str(out))
            .writeStream.format("memory")
            .queryName("sink_archive_read")
            .start()
        )
        for start in (30, 60, 90):
            grow(source, start, 30)
            query.processAllAvailable()
            batch = spark.read.format("kafkasegments").load(str(out))
            assert batch.count() == len(rows(source))
        reader.processAllAvailable()
        streamed = spark.sql("select partition, offset from sink_archive_read").collect()
        assert sorted((r.partition, r.offset) for r in streamed) == [
            (r["partition"], r["offset"]) for r in rows(source)
        ]
        assert rows(out) == rows(source)
    finally:
        query.stop()
        if reader is not None:
            reader.stop()


def test_a_query_without_checkpoint_option_or_sink_id_is_refused(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the session's checkpoint setting lets Spark start the query, but does not reach the sink:
    # two such queries would share one sink id (and each other's staging)
    source, out = tmp_path / "source", tmp_path / "archive"
    grow(source, 0, 10)
    key = "spark.sql.streaming.checkpointLocation"
    spark.conf.set(key, str(tmp_path / "checkpoints"))
    try:
        with pytest.raises(Exception) as raised:  # Spark wraps it in a type of its own
            query = (
                spark.readStream.format("kafkasegments")
                .option("startingOffsets", "earliest")
                .load(str(source))
                .writeStream.format("kafkasegments")
                .queryName("sink_without_checkpoint_option")
                .trigger(availableNow=True)
                .start(str(out))
            )
            query.awaitTermination()
    finally:
        spark.conf.unset(key)
    assert "needs the query's option checkpointLocation" in str(raised.value)
    assert not out.exists() or not any(out.iterdir())
