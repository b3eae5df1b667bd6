"""Tests for kafka_segments_ds.options: names, values, exclusivity, and the path to read_table."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from kafka_segments_ds import InvalidOptionError, KafkaSegmentsError, read_table
from kafka_segments_ds.options import EARLIEST, LATEST, ReadOptions, parse_read_options


def test_defaults() -> None:
    opts = parse_read_options({})
    assert opts == ReadOptions()
    assert opts.deep
    assert not opts.drop_malformed
    assert opts.starting_offsets is None  # earliest
    assert opts.ending_offsets is None  # latest
    assert opts.read_committed is False
    assert opts.include_headers is False
    assert opts.include_metadata is False
    assert opts.mode == "FAILFAST"
    assert opts.verify_checksums is True
    assert opts.fail_on_data_loss is True
    assert opts.starting_by_timestamp_strategy == "error"
    assert opts.storage == ()


def test_none_and_kwargs_are_accepted() -> None:
    assert parse_read_options(None) == ReadOptions()
    assert parse_read_options(includeHeaders="true").include_headers is True


@pytest.mark.parametrize(
    "name", ["startingOffsets", "startingoffsets", "STARTINGOFFSETS", "StartingOffsets"]
)
def test_names_are_case_insensitive(name: str) -> None:
    opts = parse_read_options({name: '{"t":{"0":5}}'})
    assert opts.starting_offsets == (("t", 0, 5),)


def test_every_known_option_in_odd_case() -> None:
    opts = parse_read_options(
        {
            "ITERATION": "Shallow",
            "SubScribe": "a, b ,",
            "ENDINGOFFSETS": '{"a":{"1":7}}',
            "startingtimestamp": "1000",
            "STARTINGOFFSETSBYTIMESTAMPSTRATEGY": "LATEST",
            "IsolationLevel": "READ_COMMITTED",
            "includeheaders": True,
            "INCLUDEMETADATA": "yes",
            "Mode": "dropmalformed",
            "VERIFYCHECKSUMS": "false",
            "FailOnDataLoss": 0,
            "MAXDECOMPRESSEDBYTES": "2048",
            "maxbatchbytes": 100,
            "READCHUNKBYTES": "8192",
            "MaxBytesPerPartition": "10",
            "MINPARTITIONS": "3",
        }
    )
    assert opts.iteration == "shallow"
    assert not opts.deep
    assert opts.subscribe == ("a", "b")
    assert opts.ending_offsets == (("a", 1, 7),)
    assert opts.starting_timestamp == 1000
    assert opts.starting_by_timestamp_strategy == "latest"
    assert opts.read_committed is True
    assert opts.include_headers is True
    assert opts.include_metadata is True
    assert opts.mode == "DROPMALFORMED"
    assert opts.drop_malformed
    assert opts.verify_checksums is False
    assert opts.fail_on_data_loss is False
    assert opts.max_decompressed_bytes == 2048
    assert opts.max_batch_bytes == 100
    assert opts.read_chunk_bytes == 8192
    assert opts.max_bytes_per_partition == 10
    assert opts.min_partitions == 3


@pytest.mark.parametrize("value", [True, "true", "TRUE", " True ", "1", "yes", 1])
def test_true_values(value: object) -> None:
    assert parse_read_options({"includeHeaders": value}).include_headers is True


@pytest.mark.parametrize("value", [False, "false", "FALSE", "0", "no", 0])
def test_false_values(value: object) -> None:
    assert parse_read_options({"verifyChecksums": value}).verify_checksums is False


def test_unknown_option_is_named() -> None:
    with pytest.raises(InvalidOptionError, match="startingOffset") as info:
        parse_read_options({"startingOffset": "earliest"})
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, KafkaSegmentsError)
    assert "startingoffset'" in str(info.value).lower()


def test_option_given_twice_in_different_case() -> None:
    with pytest.raises(InvalidOptionError, match="twice"):
        parse_read_options({"mode": "FAILFAST"}, MODE="FAILFAST")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"iteration": "wide"}, "iteration"),
        ({"mode": "PERMISSIVE"}, "mode"),
        ({"includeHeaders": "maybe"}, "includeHeaders"),
        ({"includeMetadata": "2"}, "includeMetadata"),
        ({"isolationLevel": "serializable"}, "isolationLevel"),
        ({"startingOffsets": "not json"}, "startingOffsets"),
        ({"endingOffsets": "{not json"}, "endingOffsets"),
        ({"startingOffsets": "[1, 2]"}, "startingOffsets"),
        ({"startingOffsets": '{"t": 5}'}, "startingOffsets"),
        ({"startingOffsets": '{"t": {"0": "5"}}'}, "startingOffsets"),
        ({"startingOffsets": '{"t": {"x": 5}}'}, "startingOffsets"),
        ({"startingOffsets": '{"t": {"-1": 5}}'}, "startingOffsets"),
        # -1 (latest) is no starting point in a batch query; -2 (earliest) is no end point
        ({"startingOffsets": '{"t": {"0": -1}}'}, "startingOffsets"),
        ({"endingOffsets": '{"t": {"0": -2}}'}, "endingOffsets"),
        ({"startingOffsets": '{"t": {"0": -3}}'}, "startingOffsets"),
        ({"startingTimestamp": -1}, "startingTimestamp"),
        ({"startingTimestamp": "-5"}, "startingTimestamp"),
        ({"startingTimestamp": "soon"}, "startingTimestamp"),
        ({"endingTimestamp": -1}, "endingTimestamp"),
        ({"startingOffsetsByTimestamp": "nope"}, "startingOffsetsByTimestamp"),
        ({"endingOffsetsByTimestamp": '{"t": {"0": -7}}'}, "endingOffsetsByTimestamp"),
        ({"startingOffsetsByTimestampStrategy": "earliest"}, "startingOffsetsByTimestampStrategy"),
        ({"subscribe": "a", "subscribePattern": "a.*"}, "subscribePattern"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "assign"),
        ({"subscribePattern": "a", "ASSIGN": '{"a":[0]}'}, "subscribePattern"),
        ({"subscribe": " , "}, "subscribe"),
        ({"subscribePattern": "(unclosed"}, "subscribePattern"),
        ({"assign": '["a"]'}, "assign"),
        ({"assign": '{"a": 0}'}, "assign"),
        ({"assign": "nope"}, "assign"),
        ({"startingOffsets": "earliest", "startingTimestamp": 5}, "startingTimestamp"),
        (
            {"startingOffsets": '{"t":{"0":1}}', "startingOffsetsByTimestamp": '{"t":{"0":1}}'},
            "startingOffsetsByTimestamp",
        ),
        ({"endingOffsets": "latest", "endingTimestamp": 5}, "endingTimestamp"),
        (
            {"endingTimestamp": 5, "endingOffsetsByTimestamp": '{"t":{"0":1}}'},
            "endingOffsetsByTimestamp",
        ),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"readChunkBytes": "10"}, "readChunkBytes"),
        ({"maxBatchBytes": "lots"}, "maxBatchBytes"),
        ({"minPartitions": 0}, "minPartitions"),
    ],
)
def test_bad_values_name_the_option(options: dict[str, object], named: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse_read_options(options)
    assert named.lower() in str(info.value).lower()
    assert isinstance(info.value, ValueError)


def test_starting_and_ending_keywords() -> None:
    opts = parse_read_options({"startingOffsets": " Earliest ", "endingOffsets": "LATEST"})
    assert opts.starting_offsets is None
    assert opts.ending_offsets is None


def test_offsets_json_is_parsed_and_sorted() -> None:
    opts = parse_read_options(
        {
            "startingOffsets": '{"b": {"1": 5, "0": -2}, "a": {"3": 0}}',
            "endingOffsets": '{"a": {"3": -1}, "b": {"0": 10}}',
        }
    )
    assert opts.starting_offsets == (("a", 3, 0), ("b", 0, EARLIEST), ("b", 1, 5))
    assert opts.ending_offsets == (("a", 3, LATEST), ("b", 0, 10))


def test_offsets_accept_python_dicts() -> None:
    opts = parse_read_options({"startingOffsets": {"t": {"0": 4}}})
    assert opts.starting_offsets == (("t", 0, 4),)


def test_timestamp_maps_allow_both_sentinels() -> None:
    opts = parse_read_options(
        {
            "startingOffsetsByTimestamp": '{"t": {"0": 1700000000000, "1": -2, "2": -1}}',
            "endingOffsetsByTimestamp": '{"t": {"0": -1}}',
        }
    )
    assert opts.starting_offsets_by_timestamp == (
        ("t", 0, 1700000000000),
        ("t", 1, EARLIEST),
        ("t", 2, LATEST),
    )
    assert opts.ending_offsets_by_timestamp == (("t", 0, LATEST),)


def test_selectors() -> None:
    assert parse_read_options({"subscribe": "orders,metrics-v1"}).subscribe == (
        "orders",
        "metrics-v1",
    )
    assert parse_read_options({"subscribePattern": "ord.*"}).subscribe_pattern == "ord.*"
    assert parse_read_options({"assign": '{"b": [1, 0], "a": [2]}'}).assign == (
        ("a", 2),
        ("b", 0),
        ("b", 1),
    )


def test_fs_keys_pass_through() -> None:
    opts = parse_read_options(
        {"fs.s3.region": "eu-west-1", "FS.S3.Endpoint": "http://x", "path": "/data"}
    )
    assert dict(opts.storage)["fs.s3.region"] == "eu-west-1"
    assert opts.storage_options()["fs.s3.endpoint"] == "http://x"
    assert opts.storage_options()["fs.s3.region"] == "eu-west-1"


def test_read_options_pickle() -> None:
    opts = parse_read_options(
        {"startingOffsets": '{"t":{"0":5}}', "assign": '{"t":[0]}', "fs.x": "y"}
    )
    assert pickle.loads(pickle.dumps(opts)) == opts


# --------------------------------------------------------------------------------------------
# Through the public API
# --------------------------------------------------------------------------------------------


def test_read_table_rejects_unknown_option(sample_dir: Path) -> None:
    with pytest.raises(InvalidOptionError, match="includeHeader"):
        read_table(str(sample_dir), includeHeader="true")


def test_read_table_rejects_bad_value(sample_dir: Path) -> None:
    with pytest.raises(InvalidOptionError, match="iteration"):
        read_table(str(sample_dir), iteration="wide")


def test_read_table_option_names_case_insensitive(sample_dir: Path) -> None:
    table = read_table(
        str(sample_dir / "metrics-v1-0"),
        INCLUDEHEADERS="TRUE",
        endingoffsets='{"metrics-v1":{"0":3}}',
    )
    assert table.column_names[-1] == "headers"
    assert table.column("offset").to_pylist() == [0, 1, 2]


def test_read_table_fs_options_are_accepted_locally(sample_dir: Path) -> None:
    options: dict[str, Any] = {"fs.some.setting": "x", "endingOffsets": '{"metrics-v1":{"0":2}}'}
    table = read_table(str(sample_dir / "metrics-v1-0"), **options)
    assert table.num_rows == 2


def test_read_table_rejects_unknown_column(sample_dir: Path) -> None:
    with pytest.raises(InvalidOptionError, match="nope"):
        read_table(str(sample_dir), columns=["offset", "nope"])


def test_a_job_moved_from_spark_kafka_source_keeps_its_options(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Broker-only options are ignored (logged once) and kafka.isolation.level is honoured, so
    moving a job means changing only the format name and the path."""
    caplog.set_level("INFO", logger="kafka_segments_ds.options")
    opts = parse_read_options(
        {
            "kafka.bootstrap.servers": "broker-1:9092,broker-2:9092",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.isolation.level": "read_committed",
            "subscribe": "orders",
            "startingOffsets": "earliest",
            "failOnDataLoss": "false",
            "kafkaConsumer.pollTimeoutMs": "512",
            "fetchOffset.numRetries": "3",
            "maxOffsetsPerTrigger": "1000",
            "groupIdPrefix": "job",
        }
    )
    assert opts.read_committed is True
    assert opts.subscribe == ("orders",)
    assert opts.fail_on_data_loss is False
    assert [r.getMessage() for r in caplog.records] == [
        "options that only a broker or a stream uses are ignored: fetchoffset.numretries, "
        "groupidprefix, kafka.bootstrap.servers, kafka.security.protocol, "
        "kafkaconsumer.polltimeoutms, maxoffsetspertrigger"
    ]


def test_isolation_level_given_both_ways_must_agree() -> None:
    assert parse_read_options(
        {"kafka.isolation.level": "read_committed", "isolationLevel": "read_committed"}
    ).read_committed
    with pytest.raises(InvalidOptionError, match="disagree"):
        parse_read_options(
            {"kafka.isolation.level": "read_committed", "isolationLevel": "read_uncommitted"}
        )
    with pytest.raises(InvalidOptionError, match="isolationLevel"):
        parse_read_options({"kafka.isolation.level": "committed"})
