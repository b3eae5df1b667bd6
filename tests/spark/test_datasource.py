"""spark.read.format("kafkasegments") against read_table: same rows, same options."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_log_dir(
        tmp_path_factory.mktemp("spark-logs"), records_per_partition=600, segment_bytes=16 * 1024
    )


def _rows_from_spark(df) -> list[dict]:  # type: ignore[no-untyped-def]
    rows = []
    for row in df.collect():
        item = row.asDict(recursive=True)
        if item.get("timestamp") is not None:
            item["timestamp"] = item["timestamp"].astimezone(tz=None).timestamp()
        rows.append(item)
    return sorted(rows, key=lambda r: (r.get("topic"), r.get("partition"), r.get("offset")))


def _rows_from_table(table: pa.Table) -> list[dict]:
    rows = []
    for item in table.to_pylist():
        if item.get("timestamp") is not None:
            item["timestamp"] = item["timestamp"].timestamp()
        if item.get("headers") is not None:
            item["headers"] = [dict(h) for h in item["headers"]]
        rows.append(item)
    return sorted(rows, key=lambda r: (r.get("topic"), r.get("partition"), r.get("offset")))


@pytest.mark.spark_matrix
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"includeHeaders": "true", "includeMetadata": "true"},
        {"iteration": "shallow", "includeMetadata": "true"},
        {"isolationLevel": "read_committed", "subscribe": "orders"},
        {
            "startingOffsets": '{"orders":{"0":100,"1":200}}',
            "endingOffsets": '{"orders":{"0":150,"1":-1}}',
            "subscribe": "orders",
        },
        {"subscribePattern": "legacy.*"},
    ],
    ids=["default", "headers+metadata", "shallow", "read_committed", "offsets", "pattern"],
)
@pytest.mark.parametrize("pushdown", ["true", "false"])
def test_dataframe_equals_read_table(spark, log_dir: Path, options: dict, pushdown: str) -> None:  # type: ignore[no-untyped-def]
    spark.conf.set("spark.sql.python.filterPushdown.enabled", pushdown)
    try:
        reader = spark.read.format("kafkasegments")
        for key, value in options.items():
            reader = reader.option(key, value)
        df = reader.load(str(log_dir))
        expected = ksd.read_table(str(log_dir), **options)
        assert df.columns == expected.column_names
        got = _rows_from_spark(df)
        assert len(got) == expected.num_rows
        assert got == _rows_from_table(expected)
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")


def test_where_filters_are_exact_and_do_not_leak_between_queries(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    df = spark.read.format("kafkasegments").load(str(log_dir))
    total = ksd.read_table(str(log_dir)).num_rows
    picked = df.where("topic = 'orders' and partition = 0 and offset between 10 and 14")
    assert [r.offset for r in picked.orderBy("offset").collect()] == [10, 11, 12, 13, 14]
    # a later query on the same DataFrame without filters sees everything again
    assert df.count() == total


def test_user_schema_projects_columns(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    df = (
        spark.read.format("kafkasegments")
        .schema("offset bigint, value binary, topic string")
        .option("subscribe", "metrics-v1")
        .load(str(log_dir))
    )
    assert df.columns == ["offset", "value", "topic"]
    expected = ksd.read_table(
        str(log_dir), columns=["offset", "value", "topic"], subscribe="metrics-v1"
    )
    got = sorted((r.offset, bytes(r.value), r.topic) for r in df.collect())
    assert got == sorted(
        zip(
            expected["offset"].to_pylist(),
            expected["value"].to_pylist(),
            expected["topic"].to_pylist(),
            strict=False,
        )
    )


def test_unknown_column_in_user_schema_is_a_clear_error(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    df = spark.read.format("kafkasegments").schema("offset bigint, nope string").load(str(log_dir))
    with pytest.raises(Exception, match=r"unknown column.*nope"):
        df.collect()


def test_bad_option_is_a_clear_error(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception, match=r"InvalidOptionError|iteration must be one of"):
        spark.read.format("kafkasegments").option("iteration", "sideways").load(
            str(log_dir)
        ).collect()


def test_no_kafka_data_is_an_error_unless_allow_empty(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "empty-0").mkdir()
    df = spark.read.format("kafkasegments").load(str(tmp_path))
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    with pytest.raises(Exception, match=rf"NoKafkaDataError.*{tmp_path}: no Kafka log segments"):
        df.count()
    allowed = spark.read.format("kafkasegments").option("allowEmpty", "true").load(str(tmp_path))
    assert allowed.count() == 0


def test_a_path_list_reads_each_record_once(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    reader = spark.read.format("kafkasegments")
    paths = [str(log_dir), f"file://{log_dir}/orders-0", str(log_dir), f"{log_dir}/orders-*"]
    assert reader.load(paths).count() == reader.load(str(log_dir)).count() == 2396
    with pytest.raises(Exception, match=r"NoKafkaDataError.*subscribe names topics that are not"):
        reader.option("subscribe", "nope").load(str(log_dir)).count()
    with pytest.raises(Exception, match=r"you must specify all TopicPartitions"):
        reader.option("startingOffsets", '{"orders":{"0":5}}').option("subscribe", "orders").load(
            str(log_dir)
        ).count()


def test_corrupt_data_reaches_the_driver_under_our_error_name(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kafka_segments_ds.records.builder import RecordSpec, encode_batch

    part = tmp_path / "broken-0"
    part.mkdir()
    good = encode_batch([RecordSpec(b"a", b"k", 1)], base_offset=0)
    bad = bytearray(encode_batch([RecordSpec(b"b", b"k", 2)], base_offset=1))
    bad[-1] ^= 0xFF
    (part / "00000000000000000000.log").write_bytes(good + bytes(bad))
    df = spark.read.format("kafkasegments").load(str(part))
    with pytest.raises(Exception, match=rf"ChecksumError.*byte position {len(good)}.*offset 1"):
        df.collect()
    dropped = spark.read.format("kafkasegments").option("mode", "DROPMALFORMED").load(str(part))
    assert [r.offset for r in dropped.collect()] == [0]


def test_reads_from_s3_with_credentials_as_options(spark, log_dir: Path, moto_s3) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.fs as pafs

    with moto_s3("lake") as (s3, host, port):
        pafs.copy_files(
            str(log_dir),
            "lake/kafka",
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=s3,
        )
        df = (
            spark.read.format("kafkasegments")
            .option("fs.s3.endpoint", f"http://{host}:{port}")
            .option("fs.s3.accessKey", "k")
            .option("fs.s3.secretKey", "s")
            .option("fs.s3.region", "us-east-1")
            .option("subscribe", "orders")
            .load("s3://lake/kafka")
        )
        expected = ksd.read_table(str(log_dir), subscribe="orders")
        assert _rows_from_spark(df) == _rows_from_table(expected)
