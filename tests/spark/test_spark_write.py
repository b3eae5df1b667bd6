"""df.write.format("kafkasegments"): round trips, modes, a failing task, schema errors.

Every Spark job costs about a second, so each test runs one or two; log dirs to write into are
set up with ``write_table`` (the same task and commit code, no Spark).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2

import kafka_segments_ds as ksd
from kafka_segments_ds.writer.commit import STAGING_PREFIX, abort_job, prepare_job
from kafka_segments_ds.writer.options import parse_write_options
from kafka_segments_ds.writer.task import TaskWriter

ROWS = 400
TASKS = 4  # Spark partitions of the input; ids of task t are t*100 .. t*100+99
PARTITIONS = 3
BASE_MS = 1_700_000_000_000

# Row ``id`` of the input: some null keys, null and empty values, timestamps that go back and
# forth, headers (one carries the id, so the read-back order can be checked; one a null value)
INPUT_SQL = [
    "CASE WHEN id % 5 = 0 THEN NULL ELSE CAST(concat('k', CAST(id % 13 AS STRING)) AS BINARY) END"
    " AS key",
    "CASE WHEN id % 17 = 3 THEN NULL WHEN id % 17 = 4 THEN X'' ELSE CAST(repeat("
    "concat('v', CAST(id AS STRING)), 1 + CAST(id % 9 AS INT)) AS BINARY) END AS value",
    f"timestamp_millis({BASE_MS} + (id * 7919) % 100000 - 50000) AS timestamp",
    "array(named_struct('key', 'id', 'value', CAST(CAST(id AS STRING) AS BINARY)),"
    " named_struct('key', 'ключ', 'value', CASE WHEN id % 3 = 0 THEN NULL ELSE X'00FF' END))"
    " AS headers",
]


def _input_row(i: int) -> dict[str, Any]:
    """What INPUT_SQL makes of row ``i``."""
    key = None if i % 5 == 0 else b"k%d" % (i % 13)
    value = b"" if i % 17 == 4 else None if i % 17 == 3 else (b"v%d" % i) * (1 + i % 9)
    return {
        "key": key,
        "value": value,
        "timestamp": BASE_MS + (i * 7919) % 100000 - 50000,
        "headers": [("id", str(i).encode()), ("ключ", None if i % 3 == 0 else b"\x00\xff")],
    }


def _id(row: dict[str, Any]) -> int:
    return int(row["headers"][0][1])


def _rows_from_table(table: pa.Table) -> list[dict[str, Any]]:
    """read_table rows, timestamps as epoch ms, headers as (key, value) tuples."""
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    rows = table.drop_columns(["timestamp"]).to_pylist()
    for row, us in zip(rows, micros, strict=True):
        row["timestamp"] = None if us is None else us // 1000
        if "headers" in row:
            row["headers"] = [(h["key"], h["value"]) for h in row["headers"]]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def _rows_from_spark(df) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    rows = []
    for row in df.selectExpr("*", "unix_millis(timestamp) AS ms").drop("timestamp").collect():
        item = row.asDict(recursive=True)
        item["timestamp"] = item.pop("ms")
        if "headers" in item:
            item["headers"] = [(h["key"], h["value"]) for h in item["headers"]]
        rows.append(item)
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def _snapshot(root: Path) -> dict[str, tuple[int, str] | None]:
    """Every directory (None) and file (size, sha256) under ``root``."""
    out: dict[str, tuple[int, str] | None] = {}
    for directory, subdirs, files in os.walk(root):
        for name in subdirs:
            out[os.path.relpath(os.path.join(directory, name), root)] = None
        for name in files:
            data = Path(directory, name).read_bytes()
            out[os.path.relpath(os.path.join(directory, name), root)] = (
                len(data),
                hashlib.sha256(data).hexdigest(),
            )
    return out


def _no_staging(root: Path) -> bool:
    return not any(p.name.startswith(STAGING_PREFIX) for p in root.iterdir())


def _seed(root: Path, topic: str, count: int, **options: Any) -> None:
    """``count`` rows ``v0``, ``v1``, ... into ``topic`` with write_table."""
    values = pa.array([b"v%d" % i for i in range(count)])
    ksd.write_table(pa.table({"value": values}), root, topic=topic, **options)


def _values(root: Path, topic: str) -> list[tuple[int, int, bytes]]:
    table = ksd.read_table(root, subscribe=topic)
    return sorted(
        zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


@pytest.mark.spark_matrix
def test_round_trip_through_spark_and_read_table(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target = str(tmp_path / "logs")
    df = spark.range(0, ROWS, 1, TASKS).selectExpr(*INPUT_SQL)
    (
        df.write.format("kafkasegments")
        .mode("append")
        .option("topic", "rt.topic")
        .option("numPartitions", PARTITIONS)
        .option("compression", "lz4")
        .option("batchRecords", 7)
        .option("segmentBytes", 3000)
        .save(target)
    )
    from_spark = _rows_from_spark(
        spark.read.format("kafkasegments").option("includeHeaders", "true").load(target)
    )
    from_table = _rows_from_table(ksd.read_table(target, includeHeaders=True))
    assert from_spark == from_table

    partition_of = {_id(r): r["partition"] for r in from_table}
    assert sorted(partition_of) == list(range(ROWS))
    expected = []
    for partition in range(PARTITIONS):
        ids = [i for i in range(ROWS) if partition_of[i] == partition]  # input order
        for offset, i in enumerate(ids):
            row = _input_row(i)
            if row["key"] is not None:
                assert partition == (murmur2(row["key"]) & 0x7FFFFFFF) % PARTITIONS, i
            expected.append(
                {"topic": "rt.topic", "partition": partition, "offset": offset}
                | row
                | {"timestampType": 0}
            )
    assert from_table == expected
    # null keys: each task spreads its 20 round-robin over the 3 partitions
    spread = Counter(partition_of[i] for i in range(0, ROWS, 5))
    assert all(24 <= spread[p] <= 28 for p in range(PARTITIONS)), spread
    assert len(list((tmp_path / "logs" / "rt.topic-0").glob("*.log"))) > 1  # rolled
    assert _no_staging(tmp_path / "logs")


def test_topic_and_partition_columns_with_log_append_time(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    df = spark.range(0, 60, 1, 3).selectExpr(
        "CASE WHEN id % 3 = 0 THEN 'left' ELSE 'right.t' END AS topic",
        "CASE WHEN id % 4 = 0 THEN NULL ELSE CAST(id % 2 AS INT) END AS partition",
        "CAST(concat('k', CAST(id AS STRING)) AS BINARY) AS key",
        "CAST(id AS STRING) AS value",  # a string value column is written as its UTF-8 bytes
        "timestamp_millis(1000 + id) AS timestamp",
    )
    before = int(time.time() * 1000)
    (
        df.write.format("kafkasegments")
        .mode("append")
        .option("timestampType", "LogAppendTime")
        .option("numPartitions", 2)
        .option("compression", "gzip")
        .save(str(tmp_path))
    )
    after = int(time.time() * 1000)
    rows = _rows_from_table(ksd.read_table(tmp_path))
    stamps = {r["timestamp"] for r in rows}
    assert len(stamps) == 1 and before <= min(stamps) <= after
    expected: dict[tuple[str, int], list[int]] = {}
    for i in range(60):
        topic = "left" if i % 3 == 0 else "right.t"
        key = b"k%d" % i
        partition = (murmur2(key) & 0x7FFFFFFF) % 2 if i % 4 == 0 else i % 2
        expected.setdefault((topic, partition), []).append(i)
    got = [(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows]
    assert got == [
        (topic, partition, offset, b"k%d" % i, str(i).encode())
        for (topic, partition), ids in sorted(expected.items())
        for offset, i in enumerate(ids)
    ]
    assert {r["timestampType"] for r in rows} == {1}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "left-0",
        "left-1",
        "right.t-0",
        "right.t-1",
    ]


def test_append_overwrite_and_error_if_topic_exists(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _seed(tmp_path, "keep", 5, numPartitions=2)
    _seed(tmp_path, "swap", 4)
    kept = {k: v for k, v in _snapshot(tmp_path).items() if k.startswith("keep-")}
    df = spark.range(0, 6, 1, 2).selectExpr(
        "CAST(concat('n', CAST(id AS STRING)) AS BINARY) AS value"
    )

    def save(mode: str, topic: str, **options: str) -> None:
        writer = df.write.format("kafkasegments").mode(mode).option("topic", topic)
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.save(str(tmp_path))

    save("append", "swap")
    old = [(0, i, b"v%d" % i) for i in range(4)]
    new = [(0, 4 + i, b"n%d" % i) for i in range(6)]
    assert _values(tmp_path, "swap") == old + new

    save("overwrite", "swap")
    assert _values(tmp_path, "swap") == [(0, i, b"n%d" % i) for i in range(6)]
    assert {k: v for k, v in _snapshot(tmp_path).items() if k.startswith("keep-")} == kept

    before = _snapshot(tmp_path)
    with pytest.raises(Exception, match=r"OutputExistsError: topic 'keep' already exists"):
        save("append", "keep", errorIfTopicExists="true")
    assert _snapshot(tmp_path) == before
    assert _no_staging(tmp_path)


@pytest.mark.parametrize("tasks", [0, 2], ids=["no tasks", "tasks without rows"])
def test_an_overwrite_with_no_rows_is_refused_unless_allowed(
    spark, tmp_path: Path, tasks: int
) -> None:  # type: ignore[no-untyped-def]
    """A df.write with zero rows does not erase the topic it names (an input empty by
    mistake); allowEmptyOverwrite=true empties it."""
    _seed(tmp_path, "t", 9, numPartitions=2)
    _seed(tmp_path, "keep", 3)
    before = _snapshot(tmp_path)
    df = spark.range(0, 6, 1, max(tasks, 1)).selectExpr("CAST(id AS STRING) AS value")
    df = df.limit(0) if tasks == 0 else df.where("id < 0")
    assert df.count() == 0
    writer = df.write.format("kafkasegments").mode("overwrite").option("topic", "t")
    refused = (
        f"OutputExistsError: overwrite has no rows for topic 't', which exists in {tmp_path}: it "
        "would empty the topic; nothing was changed. Set allowEmptyOverwrite=true to empty it"
    )
    with pytest.raises(Exception, match=re.escape(refused)):
        writer.save(str(tmp_path))
    assert _snapshot(tmp_path) == before
    assert _no_staging(tmp_path)
    writer.option("allowEmptyOverwrite", "true").save(str(tmp_path))
    for partition in range(2):
        assert sorted(os.listdir(tmp_path / f"t-{partition}")) == [
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex",
        ]
        assert (tmp_path / f"t-{partition}" / "00000000000000000000.log").stat().st_size == 0
    assert {k: v for k, v in _snapshot(tmp_path).items() if k.startswith("keep-")} == {
        k: v for k, v in before.items() if k.startswith("keep-")
    }
    assert _no_staging(tmp_path)


def test_failed_task_leaves_target_unchanged(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.functions import udf

    _seed(tmp_path, "t", 7, numPartitions=2, compression="snappy")
    before = _snapshot(tmp_path)

    def value_of(i):  # type: ignore[no-untyped-def]
        if i == 23:  # in the second of four Spark partitions
            raise ValueError("boom at row 23")
        return b"x%d" % i

    value_udf = udf(value_of, "binary", useArrow=False)
    df = spark.range(0, 40, 1, 4).select(value_udf("id").alias("value"))
    with pytest.raises(Exception, match="boom at row 23"):
        df.write.format("kafkasegments").mode("append").option("topic", "t").save(str(tmp_path))
    assert _snapshot(tmp_path) == before
    assert _no_staging(tmp_path)


def test_failed_job_into_a_new_directory_leaves_none(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.functions import udf

    def value_of(i):  # type: ignore[no-untyped-def]
        if i == 7:
            raise ValueError("boom at row 7")
        return b"x%d" % i

    value_udf = udf(value_of, "binary", useArrow=False)
    df = spark.range(0, 10, 1, 2).select(value_udf("id").alias("value"))
    target = tmp_path / "new" / "logs"
    with pytest.raises(Exception, match="boom at row 7"):
        df.write.format("kafkasegments").mode("append").option("topic", "t").save(str(target))
    assert os.listdir(tmp_path) == []


def test_task_starting_after_abort_leaves_nothing(tmp_path: Path) -> None:
    # Spark calls the driver's abort as soon as one task fails, while others may still be
    # starting; such a late task must not recreate the staging directory
    _seed(tmp_path, "t", 3)
    before = _snapshot(tmp_path)
    job, filesystem = prepare_job(str(tmp_path), parse_write_options({"topic": "t"}), False)
    abort_job(job, filesystem)
    with pytest.raises(FileNotFoundError):
        late = TaskWriter(job, 3, filesystem)
        late.write(pa.table({"value": [b"late"]}))
        late.finish()
    assert _snapshot(tmp_path) == before


@pytest.mark.spark_matrix
@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        (["id AS offset", "X'00' AS value"], {}, r"InvalidInputError: unknown column 'offset'"),
        (
            ["CAST(id AS STRING) AS partition", "X'00' AS value"],
            {},
            r"InvalidInputError: column 'partition' must be int, not string",
        ),
        (
            ["id AS value"],
            {},
            r"InvalidInputError: column 'value' must be binary or string, not int64",
        ),
        (
            ["X'00' AS key"],
            {},
            r"InvalidInputError: a 'value' column \(binary or string\) is required",
        ),
        (
            ["X'00' AS value"],
            {"topic": "../escape"},
            r"InvalidOptionError: option topic '\.\./escape' is not a valid",
        ),
        (
            ["'../escape' AS topic", "X'00' AS value"],
            {},
            r"InvalidOptionError: topic column value '\.\./escape' is not a valid",
        ),
    ],
    ids=["offset", "partition-type", "value-type", "no-value", "topic-option", "topic-column"],
)
def test_schema_and_topic_errors(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, columns: list[str], options: dict[str, str], message: str
) -> None:
    writer = spark.range(0, 2, 1, 1).selectExpr(*columns).write.format("kafkasegments")
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception, match=message):
        writer.mode("append").save(str(tmp_path / "logs"))
    assert not (tmp_path / "logs").exists() or list((tmp_path / "logs").iterdir()) == []
    assert not (tmp_path / "escape").exists()


def test_a_kafka_source_job_moved_to_an_archive_keeps_its_options(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Write and read with the options of a job written for Spark's Kafka sink and source:
    only the format name and the path change."""
    frame = spark.range(0, 50, 1, 2).selectExpr(
        "cast(id as string) as key", "cast(concat('v', id) as binary) as value"
    )
    (
        frame.write.format("kafkasegments")
        .mode("append")  # Spark refuses its default ErrorIfExists for Python data sources
        .option("kafka.bootstrap.servers", "broker-1:9092")
        .option("kafka.compression.type", "gzip")
        .option("topic", "orders")
        .save(str(tmp_path))
    )
    got = (
        spark.read.format("kafkasegments")
        .option("kafka.bootstrap.servers", "broker-1:9092")
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", "orders")
        .option("startingOffsets", "earliest")
        .option("kafkaConsumer.pollTimeoutMs", "512")
        .load(str(tmp_path))
        .selectExpr("cast(key as string) as key", "cast(value as string) as value")
        .collect()
    )
    assert sorted((r.key, r.value) for r in got) == sorted((str(i), f"v{i}") for i in range(50))
    table = ksd.read_table(tmp_path, iteration="shallow", includeMetadata=True)
    assert set(table.column("compression").to_pylist()) == {"gzip"}
