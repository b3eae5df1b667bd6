"""Spark errors early and plainly: a mismatched ``.schema(...)``, a write with no topic, and
headers in a magic 0/1 write are refused on the driver, naming the columns, before any Spark
job (so any task) starts."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from kafka_segments_ds.samples import write_sample_log_dir

pytestmark = pytest.mark.spark_matrix  # all of it, on every pyspark of the matrix


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_log_dir(tmp_path_factory.mktemp("spark-errors"), records_per_partition=20)


def _refused_before_any_job(spark, action: Callable[[], object]) -> str:  # type: ignore[no-untyped-def]
    """Run ``action``, which must fail, in a job group of its own; return the error text after
    checking that Spark started no job for it (no task ran)."""
    context = spark.sparkContext
    group = f"refused-{id(action)}"
    context.setJobGroup(group, "a query that must be refused at planning")
    try:
        with pytest.raises(Exception) as caught:
            action()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    assert list(context.statusTracker().getJobIdsForGroup(group)) == []
    return str(caught.value)


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            "offset string, value binary",
            "InvalidOptionError: schema column type(s) do not match: offset string "
            "(must be bigint)",
        ),
        (
            "key string, value string, partition bigint, timestamp timestamp_ntz",
            "InvalidOptionError: schema column type(s) do not match: key string (must be binary), "
            "value string (must be binary), partition bigint (must be int), "
            "timestamp timestamp_ntz (must be timestamp)",
        ),
        (
            "offset bigint, nope string, Value binary",
            "InvalidOptionError: unknown column(s) ['nope', 'Value']; known columns: key, value, "
            "topic, partition, offset, timestamp, timestampType, headers, magic, compression, "
            "batchBaseOffset, batchLastOffset, producerId, producerEpoch, baseSequence, "
            "isTransactional, isControl, leaderEpoch, segment, position",
        ),
        (
            "headers array<struct<key:string,value:string>>",
            "InvalidOptionError: schema column type(s) do not match: headers "
            "array<struct<key:string,value:string>> (must be "
            "array<struct<key:string,value:binary>>)",
        ),
    ],
    ids=["offset-string", "four-types", "unknown-names", "headers-type"],
)
def test_mismatched_user_schema_is_refused_at_planning(  # type: ignore[no-untyped-def]
    spark, log_dir: Path, schema: str, message: str
) -> None:
    df = spark.read.format("kafkasegments").schema(schema).load(str(log_dir))
    error = _refused_before_any_job(spark, df.collect)
    assert message in error


def test_mismatched_user_schema_of_a_stream_is_refused_at_start(  # type: ignore[no-untyped-def]
    spark, log_dir: Path, tmp_path: Path
) -> None:
    stream = (
        spark.readStream.format("kafkasegments")
        .schema("offset int")
        .option("startingOffsets", "earliest")
        .load(str(log_dir))
    )

    def run() -> None:
        query = (
            stream.writeStream.format("parquet")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start(str(tmp_path / "out"))
        )
        try:
            query.awaitTermination()
        finally:
            query.stop()

    error = _refused_before_any_job(spark, run)
    assert "schema column type(s) do not match: offset int (must be bigint)" in error
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.parquet"))


def test_the_source_schema_given_back_is_accepted(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """``.schema(df.schema)`` of the source's own schema (every catalogue type) reads."""
    full = (
        spark.read.format("kafkasegments")
        .option("includeHeaders", "true")
        .option("includeMetadata", "true")
        .load(str(log_dir))
    )
    again = spark.read.format("kafkasegments").schema(full.schema).load(str(log_dir))
    order = ("topic", "partition", "offset")
    rows = again.orderBy(*order).collect()
    assert len(rows) == 80
    assert rows == full.orderBy(*order).collect()


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        (
            ["X'00' AS value"],
            {},
            "InvalidInputError: no topic: give a 'topic' column or the option topic "
            "(.option('topic', 'name'))",
        ),
        (
            ["X'00' AS value", "array(named_struct('key', 'k', 'value', X'01')) AS headers"],
            {"topic": "t", "magic": "1"},
            "InvalidInputError: magic 1 has no record headers: drop the 'headers' column or "
            "use magic 2",
        ),
        (
            ["X'00' AS value", "array(named_struct('key', 'k', 'value', X'01')) AS headers"],
            {"topic": "t", "magic": "0"},
            "InvalidInputError: magic 0 has no record headers: drop the 'headers' column or "
            "use magic 2",
        ),
    ],
    ids=["no-topic", "headers-magic-1", "headers-magic-0"],
)
def test_write_refused_on_the_driver(  # type: ignore[no-untyped-def]
    spark, tmp_path: Path, columns: list[str], options: dict[str, str], message: str
) -> None:
    writer = spark.range(0, 8, 1, 4).selectExpr(*columns).write.format("kafkasegments")
    for name, value in options.items():
        writer = writer.option(name, value)
    target = tmp_path / "logs"
    error = _refused_before_any_job(spark, lambda: writer.mode("append").save(str(target)))
    assert message in error
    # once, from the driver: no task's traceback repeats it
    assert len(re.findall(re.escape(message.split(": ", 1)[1]), error)) == 1
    assert not target.exists()
