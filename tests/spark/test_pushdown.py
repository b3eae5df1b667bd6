"""Filter pushdown (option ``pushFilters``): pushed comparisons on topic, partition, offset and
timestamp skip segments and byte ranges, and Spark still applies every filter, so results are
exact. Forced on here (``pushFilters=true``), each query on a fresh DataFrame: pyspark up to 4.3
reuses a pushed-down plan for a later query on the same DataFrame
(``test_pushdown_canary.py``), which is why ``auto`` leaves it off there."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyspark
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir

try:
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
        StringStartsWith,
    )
except ImportError:  # pyspark 4.0: Spark pushes no filters into a Python data source
    pytest.skip("Python data sources take pushed filters from pyspark 4.1", allow_module_level=True)

from kafka_segments_ds.datasource import (
    FIXED_PUSHDOWN_SPARK,
    KafkaSegmentsDataSource,
    KafkaSegmentsFilteringReader,
    KafkaSegmentsReader,
    pruning_from_filters,
    spark_version,
    takes_filters,
)
from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.planning import Pruning
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.schema import default_columns


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_log_dir(
        tmp_path_factory.mktemp("pushdown-logs"), records_per_partition=600, segment_bytes=8192
    )


@pytest.fixture(scope="module")
def table(log_dir: Path) -> pa.Table:
    return ksd.read_table(str(log_dir), includeMetadata=True)


def _cutoff(table: pa.Table) -> datetime.datetime:
    """A timestamp three quarters through metrics-v1's records."""
    stamps = sorted(table.filter(pc.equal(table["topic"], "metrics-v1"))["timestamp"].to_pylist())
    return stamps[len(stamps) * 3 // 4]


def _keys(table: pa.Table) -> list[tuple[str, int, int]]:
    return sorted(
        zip(
            table["topic"].to_pylist(),
            table["partition"].to_pylist(),
            table["offset"].to_pylist(),
            strict=True,
        )
    )


def _plan(log_dir: Path, filters: list) -> tuple[list, pa.Table]:  # type: ignore[type-arg]
    """The scan tasks a filtering reader plans after ``pushFilters``, and the rows they read."""
    options = parse_read_options({"pushFilters": "true", "includeMetadata": "true"})
    reader = KafkaSegmentsFilteringReader([str(log_dir)], options, default_columns(False, True))
    returned = list(reader.pushFilters(filters))
    assert len(returned) == len(filters)
    assert all(a is b for a, b in zip(returned, filters, strict=True))  # Spark applies them all
    tasks = [task for part in reader.partitions() for task in part.tasks]  # type: ignore[attr-defined]
    batches = list(read_tasks(tuple(tasks), options, reader.columns))
    return tasks, pa.Table.from_batches(batches, schema=batches[0].schema)


def test_filters_become_bounds() -> None:
    stamp = datetime.datetime(2023, 11, 14, 22, 13, 49, 3999, tzinfo=datetime.UTC)
    got = pruning_from_filters(
        [
            In(("topic",), ("orders", "metrics-v1")),
            EqualTo(("topic",), "orders"),
            In(("partition",), (0, 1)),
            GreaterThan(("offset",), 99),
            LessThan(("offset",), 180),
            In(("offset",), (50, 150, 170)),
            GreaterThanOrEqual(("timestamp",), stamp),
            StringStartsWith(("topic",), "x"),  # not a bound
            GreaterThan(("partition",), 0),
            EqualTo(("offset",), "7"),  # not an int: not a bound
            EqualTo(("key",), b"k"),
        ]
    )
    assert got == Pruning(
        topics=frozenset({"orders"}),
        partitions=frozenset({1}),
        partition_low=1,
        partition_high=2,
        offset_low=100,
        offset_high=171,
        min_timestamp=1700000029003,
    )
    naive = datetime.datetime(2023, 11, 14, 22, 13, 49, 3000)  # pyspark's local time
    local_seconds = int(naive.astimezone().timestamp())
    assert pruning_from_filters([GreaterThan(("timestamp",), naive)]).min_timestamp == (
        local_seconds * 1000 + 3
    )
    assert pruning_from_filters([In(("offset",), ())]) == Pruning(offset_low=0, offset_high=0)
    assert pruning_from_filters(
        [LessThanOrEqual(("partition",), 3), GreaterThan(("offset",), -5)]
    ) == Pruning(partition_high=4, offset_low=0)


# case -> (the pushed filters, the same condition on an Arrow table)
CASES = {
    "offset": (
        [GreaterThanOrEqual(("offset",), 500)],
        lambda t: pc.greater_equal(t["offset"], 500),
    ),
    "partition": ([EqualTo(("partition",), 1)], lambda t: pc.equal(t["partition"], 1)),
    "partitions": ([GreaterThan(("partition",), 0)], lambda t: pc.greater(t["partition"], 0)),
    "topic": ([EqualTo(("topic",), "orders")], lambda t: pc.equal(t["topic"], "orders")),
    "combined": (
        [EqualTo(("topic",), "orders"), EqualTo(("partition",), 0), LessThan(("offset",), 90)],
        lambda t: pc.and_(
            pc.and_(pc.equal(t["topic"], "orders"), pc.equal(t["partition"], 0)),
            pc.less(t["offset"], 90),
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pushed_filters_read_fewer_segments_and_every_matching_row(
    log_dir: Path, table: pa.Table, case: str
) -> None:
    filters, mask = CASES[case]
    expected = table.filter(mask(table))
    tasks, read = _plan(log_dir, filters)
    # exactly the segments holding matching rows are planned, and the bounds cut no match
    assert sorted({t.segment.path for t in tasks}) == sorted(set(expected["segment"].to_pylist()))
    assert len({t.segment.path for t in tasks}) < len(set(table["segment"].to_pylist()))
    assert _keys(read.filter(mask(read))) == _keys(expected)


def test_a_pushed_timestamp_skips_the_older_part_of_segments(
    log_dir: Path, table: pa.Table
) -> None:
    cutoff = _cutoff(table)
    filters = [EqualTo(("topic",), "metrics-v1"), GreaterThanOrEqual(("timestamp",), cutoff)]
    tasks, read = _plan(log_dir, filters)
    metrics = table.filter(pc.equal(table["topic"], "metrics-v1"))
    expected = metrics.filter(pc.greater_equal(metrics["timestamp"], pa.scalar(cutoff)))
    assert set(_keys(expected)) <= set(_keys(read))
    # batches whose newest record is older than the cutoff were skipped
    assert read.num_rows < metrics.num_rows
    assert {t.min_max_timestamp for t in tasks} == {pruning_from_filters(filters[1:]).min_timestamp}


def test_auto_takes_filters_from_the_fixed_spark_only() -> None:
    assert takes_filters("auto", ".".join(map(str, FIXED_PUSHDOWN_SPARK)) + ".0")
    assert not takes_filters("auto", "4.3.0")
    assert takes_filters("true", "4.3.0")
    assert not takes_filters("false", "9.0.0")
    with pytest.raises(InvalidOptionError, match="pushFilters"):
        parse_read_options({"pushFilters": "sometimes"})
    source = KafkaSegmentsDataSource({"path": "/nowhere", "pushfilters": "TRUE"})
    assert type(source.reader(pyspark.sql.types.StructType())) is KafkaSegmentsFilteringReader
    source = KafkaSegmentsDataSource({"path": "/nowhere"})
    reader = source.reader(pyspark.sql.types.StructType())
    if spark_version(pyspark.__version__) < FIXED_PUSHDOWN_SPARK:  # the canary's Spark
        assert type(reader) is KafkaSegmentsReader
    assert "pushFilters" not in vars(KafkaSegmentsReader)


def _where(spark, log_dir: Path, condition, push: str = "true", **options: str):  # type: ignore[no-untyped-def]
    reader = spark.read.format("kafkasegments").option("pushFilters", push)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(log_dir)).where(condition)


def _spark_keys(df) -> list[tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    return sorted(
        (r.topic, r.partition, r.offset)
        for r in df.select("topic", "partition", "offset").collect()
    )


def test_spark_results_with_pushed_filters_are_exact(spark, log_dir: Path, table: pa.Table) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    cutoff = _cutoff(table)
    frame = table.select(["topic", "partition", "offset", "timestamp"]).to_pandas()
    cases = [
        ("offset >= 500", frame[frame.offset >= 500]),
        (F.col("timestamp") >= F.lit(cutoff), frame[frame.timestamp >= cutoff]),
        ("partition = 1", frame[frame.partition == 1]),
        ("partition > 0", frame[frame.partition > 0]),
        ("topic = 'orders'", frame[frame.topic == "orders"]),
        (
            "topic = 'orders' and partition in (0, 1) and offset between 100 and 149",
            frame[(frame.topic == "orders") & (frame.offset >= 100) & (frame.offset <= 149)],
        ),
    ]
    for condition, expected in cases:
        want = sorted(zip(expected.topic, expected.partition, expected.offset, strict=True))
        assert len(want) > 0
        assert _spark_keys(_where(spark, log_dir, condition)) == want, condition
    # a Spark task per segment: the pruned plan has fewer than the unpruned one
    condition = "topic = 'orders' and partition = 1"
    pruned = _where(spark, log_dir, condition, maxBytesPerPartition="1")
    whole = _where(spark, log_dir, condition, push="false", maxBytesPerPartition="1")
    assert pruned.rdd.getNumPartitions() < whole.rdd.getNumPartitions()


def test_auto_on_this_spark_keeps_later_queries_whole(
    spark, log_dir: Path, table: pa.Table
) -> None:  # type: ignore[no-untyped-def]
    df = spark.read.format("kafkasegments").load(str(log_dir))
    assert (
        df.where("offset >= 500").count() == pc.sum(pc.greater_equal(table["offset"], 500)).as_py()
    )
    assert df.count() == table.num_rows  # no pushed plan to reuse


def test_forced_pushdown_needs_spark_to_push(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        with pytest.raises(Exception, match=re.escape("spark.sql.python.filterPushdown.enabled")):
            _where(spark, log_dir, "offset >= 500").count()
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
