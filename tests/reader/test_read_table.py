"""Tests for read_table / iter_batches: columns, discovery, selection, offset and time ranges,
transactions and shallow iteration, checked against brute-force computations."""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kafka_segments_ds import (
    DataLossError,
    InvalidOptionError,
    NoKafkaDataError,
    iter_batches,
    read_table,
)
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.records.compression import CompressionType
from kafka_segments_ds.records.legacy import decode_legacy_message, expand_wrapper
from kafka_segments_ds.schema import arrow_schema

DEFAULT = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
METADATA = (
    "magic",
    "compression",
    "batchBaseOffset",
    "batchLastOffset",
    "producerId",
    "producerEpoch",
    "baseSequence",
    "isTransactional",
    "isControl",
    "leaderEpoch",
    "segment",
    "position",
)
SAMPLE_PARTITIONS = (("legacy.events", 0), ("metrics-v1", 0), ("orders", 0), ("orders", 1))
V2_ATTRIBUTES = struct.Struct(">h")  # at byte 21 of a magic-2 batch
V2_RECORD_COUNT = struct.Struct(">i")  # at byte 57


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def offsets(table: pa.Table) -> list[int]:
    return table.column("offset").to_pylist()


def part_dir(root: Path, topic: str, partition: int) -> str:
    return str(root / f"{topic}-{partition}")


def of_partition(table: pa.Table, topic: str, partition: int) -> pa.Table:
    mask = pc.and_(
        pc.equal(table.column("topic"), topic),
        pc.equal(table.column("partition"), partition),
    )
    return table.filter(mask)


def offset_range(table: pa.Table, start: int | None, end: int | None) -> pa.Table:
    """Brute force: the rows of ``table`` with start <= offset < end."""
    off = table.column("offset")
    mask = pa.array([True] * table.num_rows, pa.bool_())
    if start is not None:
        mask = pc.and_(mask, pc.greater_equal(off, start))
    if end is not None:
        mask = pc.and_(mask, pc.less(off, end))
    return table.filter(mask)


def segment_bases(directory: str | Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in Path(directory).glob("*.log"))


def timestamps_ms(table: pa.Table) -> list[int | None]:
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [None if t is None else t // 1000 for t in micros]


def first_offset_at_or_after(pairs: Sequence[tuple[int, int | None]], target: int) -> int | None:
    """Kafka's offsetsForTimes by brute force: first offset (in offset order) with ts >= target."""
    for offset, ts in sorted(pairs):
        if ts is not None and ts >= target:
            return offset
    return None


def control_records(directory: str | Path) -> list[tuple[int, int]]:
    """(offset, timestamp) of every control record, from a header walk (markers hold one)."""
    out = []
    for log in sorted(Path(directory).glob("*.log")):
        data = log.read_bytes()
        table = scan_entries(data)
        for p, magic, last, max_ts in zip(
            table.positions.tolist(),
            table.magics.tolist(),
            table.last_offsets.tolist(),
            table.max_timestamps.tolist(),
            strict=True,
        ):
            if magic == 2 and V2_ATTRIBUTES.unpack_from(data, p + 21)[0] & 0x20:
                out.append((last, max_ts))
    return out


def same(a: pa.Table, b: pa.Table) -> None:
    """Equal schema and content (chunking aside); on failure, show where the offsets differ."""
    assert a.schema == b.schema
    if not a.equals(b):
        assert offsets(a) == offsets(b)
        assert a.to_pylist() == b.to_pylist()


# --------------------------------------------------------------------------------------------
# columns and types
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, DEFAULT),
        ({"includeHeaders": "true"}, (*DEFAULT, "headers")),
        ({"includeMetadata": True}, (*DEFAULT, *METADATA)),
        ({"includeHeaders": True, "includeMetadata": "true"}, (*DEFAULT, "headers", *METADATA)),
    ],
)
def test_column_order_and_types(
    sample_dir: Path, options: dict[str, Any], expected: tuple[str, ...]
) -> None:
    table = read_table(part_dir(sample_dir, "orders", 1), **options)
    assert tuple(table.column_names) == expected
    assert table.schema == arrow_schema(expected)
    assert table.num_rows > 0


def test_types_are_spark_kafka_types(sample_table: pa.Table) -> None:
    schema = sample_table.schema
    assert schema.field("key").type == pa.binary()
    assert schema.field("value").type == pa.binary()
    assert schema.field("topic").type == pa.string()
    assert schema.field("partition").type == pa.int32()
    assert schema.field("offset").type == pa.int64()
    assert schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("timestampType").type == pa.int32()
    assert schema.field("headers").type == pa.list_(
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    )


@pytest.mark.parametrize(
    "columns",
    [["offset"], ["offset", "key"], ["segment", "value", "offset"], ["headers", "position"]],
)
def test_projection(sample_dir: Path, sample_table: pa.Table, columns: list[str]) -> None:
    table = read_table(str(sample_dir), columns=columns)
    assert table.column_names == columns
    assert table.schema == arrow_schema(tuple(columns))
    same(table, sample_table.select(columns))


@pytest.mark.parametrize("column", [*DEFAULT, "headers", *METADATA])
def test_every_column_alone(sample_dir: Path, sample_table: pa.Table, column: str) -> None:
    table = read_table(part_dir(sample_dir, "legacy.events", 0), columns=[column])
    assert table.column_names == [column]
    same(table, of_partition(sample_table, "legacy.events", 0).select([column]))


def test_projection_ignores_include_options_for_the_column_list(sample_dir: Path) -> None:
    table = read_table(str(sample_dir / "orders-0"), columns=["offset"], includeMetadata="true")
    assert table.column_names == ["offset"]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"includeHeaders": "true", "includeMetadata": "true"},
        {"iteration": "shallow", "includeMetadata": "true"},
        {"isolationLevel": "read_committed"},
        {
            "subscribe": "orders,legacy.events",
            "startingOffsets": '{"orders":{"0":100,"1":333},"legacy.events":{"0":-2}}',
            "endingOffsets": '{"orders":{"0":401,"1":-1},"legacy.events":{"0":150}}',
        },
        {"readChunkBytes": 4096, "includeHeaders": "true"},
    ],
)
def test_iter_batches_agrees_with_read_table(sample_dir: Path, options: dict[str, Any]) -> None:
    batches = list(iter_batches(str(sample_dir), **options))
    table = read_table(str(sample_dir), **options)
    assert batches, "the sample has data for every option set here"
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert all(b.schema == table.schema for b in batches)
    same(pa.Table.from_batches(batches, schema=table.schema), table)


def test_iter_batches_with_columns(sample_dir: Path) -> None:
    batches = list(iter_batches(str(sample_dir / "orders-0"), columns=["offset", "value"]))
    assert all(b.schema.names == ["offset", "value"] for b in batches)
    same(
        pa.Table.from_batches(batches),
        read_table(str(sample_dir / "orders-0"), columns=["offset", "value"]),
    )


def test_small_read_chunks_give_the_same_rows(sample_dir: Path, sample_table: pa.Table) -> None:
    table = read_table(
        str(sample_dir), readChunkBytes=4096, includeHeaders=True, includeMetadata=True
    )
    same(table, sample_table)


# --------------------------------------------------------------------------------------------
# content of the sample (what the generator put in)
# --------------------------------------------------------------------------------------------


def test_rows_are_in_topic_partition_offset_order(sample_table: pa.Table) -> None:
    keys = list(
        zip(
            sample_table.column("topic").to_pylist(),
            sample_table.column("partition").to_pylist(),
            offsets(sample_table),
            strict=True,
        )
    )
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)


def test_sample_record_content(sample_table: pa.Table) -> None:
    orders = pa.Table.from_batches(
        sample_table.filter(pc.equal(sample_table.column("topic"), "orders")).to_batches()
    )
    for row in orders.select(["offset", "headers", "key", "timestampType"]).to_pylist():
        assert row["headers"] == [
            {"key": "source", "value": b"web"},
            {"key": "trace", "value": str(row["offset"]).encode()},
        ]
        assert row["key"].startswith(b"user-")
        assert row["timestampType"] == 0
    legacy = of_partition(sample_table, "legacy.events", 0).to_pylist()
    assert {r["magic"] for r in legacy} == {0, 1, 2}
    for row in legacy:
        if row["magic"] == 0:
            assert row["key"] is None
            assert row["timestamp"] is None
            assert row["timestampType"] == -1
        else:
            assert row["key"] == b"k%d" % row["offset"]
            assert row["timestamp"] is not None
            assert row["timestampType"] == 0
    metrics = of_partition(sample_table, "metrics-v1", 0)
    assert metrics.column("key").null_count == metrics.num_rows
    assert set(metrics.column("compression").to_pylist()) == {"none"}
    assert offsets(metrics) == list(range(metrics.num_rows))


def test_metadata_columns_describe_the_batches(sample_table: pa.Table) -> None:
    for row in sample_table.to_pylist():
        assert row["batchBaseOffset"] <= row["offset"] <= row["batchLastOffset"]
        assert row["isControl"] is False
        assert row["segment"].endswith(".log")
        assert Path(row["segment"]).parent.name == f"{row['topic']}-{row['partition']}"
        base = int(Path(row["segment"]).name[:20])
        assert base <= row["batchBaseOffset"]
    codecs = {
        (t, p): set(of_partition(sample_table, t, p).column("compression").to_pylist())
        for t, p in SAMPLE_PARTITIONS
    }
    assert codecs[("orders", 0)] == {"lz4"}
    assert codecs[("orders", 1)] == {"zstd"}
    assert codecs[("legacy.events", 0)] >= {"gzip", "snappy"}


# --------------------------------------------------------------------------------------------
# discovery
# --------------------------------------------------------------------------------------------


def test_log_dir_reads_every_partition_and_skips_debris(sample_table: pa.Table) -> None:
    parts = set(
        zip(
            sample_table.column("topic").to_pylist(),
            sample_table.column("partition").to_pylist(),
            strict=True,
        )
    )
    # orders-7.<uuid>-delete, .deleted files, .snapshot and checkpoints are not read
    assert parts == set(SAMPLE_PARTITIONS)
    assert not any(
        ".deleted" in s or "-delete" in s for s in sample_table.column("segment").to_pylist()
    )


@pytest.mark.parametrize(("topic", "partition"), SAMPLE_PARTITIONS)
def test_partition_dir(
    sample_dir: Path, sample_table: pa.Table, topic: str, partition: int
) -> None:
    table = read_table(
        part_dir(sample_dir, topic, partition), includeHeaders=True, includeMetadata=True
    )
    same(table, of_partition(sample_table, topic, partition))


def test_topic_names_with_dash_and_dot(sample_table: pa.Table) -> None:
    assert {"legacy.events", "metrics-v1"} <= set(sample_table.column("topic").to_pylist())


def test_single_log_file(sample_dir: Path, sample_table: pa.Table) -> None:
    log = sorted((sample_dir / "orders-1").glob("*.log"))[1]
    table = read_table(str(log), includeHeaders=True, includeMetadata=True)
    expected = sample_table.filter(pc.equal(sample_table.column("segment"), str(log)))
    assert expected.num_rows > 0
    same(table, expected)
    assert set(table.column("topic").to_pylist()) == {"orders"}
    assert set(table.column("partition").to_pylist()) == {1}


def test_glob_of_partition_dirs(sample_dir: Path, sample_table: pa.Table) -> None:
    table = read_table(str(sample_dir / "orders-*"), includeHeaders=True, includeMetadata=True)
    # orders-7.<uuid>-delete matches the glob too, and is skipped
    same(table, sample_table.filter(pc.equal(sample_table.column("topic"), "orders")))


def test_glob_of_log_files(sample_dir: Path, sample_table: pa.Table) -> None:
    table = read_table(
        str(sample_dir / "orders-0" / "*.log"), includeHeaders=True, includeMetadata=True
    )
    same(table, of_partition(sample_table, "orders", 0))


def test_list_of_paths(sample_dir: Path, sample_table: pa.Table) -> None:
    table = read_table(
        [part_dir(sample_dir, "orders", 1), part_dir(sample_dir, "metrics-v1", 0)],
        includeHeaders=True,
        includeMetadata=True,
    )
    expected = pa.concat_tables(
        [of_partition(sample_table, "metrics-v1", 0), of_partition(sample_table, "orders", 1)]
    )
    same(table, expected)


def test_transient_files_and_special_dirs_are_skipped(
    make_partition: Callable[..., Any], log_dir: Path
) -> None:
    part = make_partition("my-topic.v2-3", segment_bytes=200)
    for _ in range(4):
        part.batch([1, 2, 3])
    directory = part.close()
    expected = read_table(str(log_dir))
    assert offsets(expected) == list(range(12))
    assert set(expected.column("topic").to_pylist()) == {"my-topic.v2"}
    assert set(expected.column("partition").to_pylist()) == {3}
    # Valid segment data under names a reader must not read:
    valid = sorted(directory.glob("*.log"))[0].read_bytes()
    for name in (
        "00000000000000000500.log.deleted",
        "00000000000000000600.log.cleaned",
        "00000000000000000700.log.swap",
        "00000000000000000800.snapshot",
    ):
        (directory / name).write_bytes(valid)
    (directory / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (directory / "partition.metadata").write_text("version: 0\n")
    (log_dir / "recovery-point-offset-checkpoint").write_text("0\n1\nmy-topic.v2 3 12\n")
    (log_dir / "meta.properties").write_text("version=1\n")
    for suffix in ("delete", "future", "stray"):
        special = log_dir / f"my-topic.v2-3.0123456789abcdef0123456789abcdef-{suffix}"
        special.mkdir()
        (special / "00000000000000000900.log").write_bytes(valid)
    same(read_table(str(log_dir)), expected)
    same(read_table(str(directory)), expected)
    same(read_table(str(log_dir / "my-topic.v2-*")), expected)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_table(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError):
        read_table([str(tmp_path), str(tmp_path / "nope")], allowEmpty=True)
    with pytest.raises(FileNotFoundError):
        read_table(str(tmp_path / "nope-*"))


@pytest.mark.parametrize(
    ("options", "columns"),
    [
        ({}, DEFAULT),
        ({"includeMetadata": "true", "includeHeaders": "true"}, (*DEFAULT, "headers", *METADATA)),
    ],
)
def test_directory_without_segments_is_empty_with_allow_empty(
    tmp_path: Path, options: dict[str, Any], columns: tuple[str, ...]
) -> None:
    (tmp_path / "t-0").mkdir()
    (tmp_path / "meta.properties").write_text("version=1\n")
    for path in (tmp_path, tmp_path / "t-0"):
        with pytest.raises(NoKafkaDataError, match=f"^{path}: no Kafka log segments"):
            read_table(str(path), **options)
        allowed = {**options, "allowEmpty": "true"}
        table = read_table(str(path), **allowed)
        assert table.num_rows == 0
        assert table.schema == arrow_schema(columns)
        assert list(iter_batches(str(path), **allowed)) == []


# --------------------------------------------------------------------------------------------
# subscribe / subscribePattern / assign
# --------------------------------------------------------------------------------------------


def partitions_of(table: pa.Table) -> set[tuple[str, int]]:
    return set(
        zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(), strict=True)
    )


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"subscribe": "orders"}, {("orders", 0), ("orders", 1)}),
        ({"subscribe": "metrics-v1, legacy.events"}, {("metrics-v1", 0), ("legacy.events", 0)}),
        ({"subscribe": "unknown", "allowEmpty": True}, set()),
        ({"subscribePattern": "ord.*"}, {("orders", 0), ("orders", 1)}),
        ({"subscribePattern": "order", "allowEmpty": True}, set()),  # a full match, not a search
        ({"subscribePattern": "rders", "allowEmpty": True}, set()),
        (
            {"subscribePattern": r"legacy\.events|metrics-v\d"},
            {("metrics-v1", 0), ("legacy.events", 0)},
        ),
        ({"subscribePattern": "legacy.events"}, {("legacy.events", 0)}),
        ({"assign": '{"orders":[1]}'}, {("orders", 1)}),
        ({"assign": '{"orders":[1], "metrics-v1":[0]}'}, {("orders", 1), ("metrics-v1", 0)}),
        ({"assign": '{"orders":[]}'}, set()),
    ],
)
def test_selection(
    sample_dir: Path,
    sample_table: pa.Table,
    options: dict[str, Any],
    expected: set[tuple[str, int]],
) -> None:
    table = read_table(str(sample_dir), includeHeaders=True, includeMetadata=True, **options)
    assert partitions_of(table) == expected
    parts = [of_partition(sample_table, t, p) for t, p in sorted(expected)]
    same(table, pa.concat_tables(parts) if parts else sample_table.slice(0, 0))


# --------------------------------------------------------------------------------------------
# startingOffsets / endingOffsets
# --------------------------------------------------------------------------------------------


def spec(topic: str, partition: int, number: int) -> str:
    return f'{{"{topic}":{{"{partition}":{number}}}}}'


def check_range(
    root: Path, table: pa.Table, topic: str, partition: int, start: int | None, end: int | None
) -> pa.Table:
    options: dict[str, Any] = {"includeHeaders": True, "includeMetadata": True}
    if start is not None:
        options["startingOffsets"] = spec(topic, partition, start)
    if end is not None:
        options["endingOffsets"] = spec(topic, partition, end)
    got = read_table(part_dir(root, topic, partition), **options)
    same(got, offset_range(of_partition(table, topic, partition), start, end))
    return got


@pytest.mark.parametrize(("topic", "partition"), SAMPLE_PARTITIONS)
def test_ranges_at_segment_boundaries(
    sample_dir: Path, sample_table: pa.Table, topic: str, partition: int
) -> None:
    bases = segment_bases(part_dir(sample_dir, topic, partition))
    assert len(bases) >= 4, "the sample must spread each partition over several segments"
    last = offsets(of_partition(sample_table, topic, partition))[-1]
    for k in (1, 2):
        b, nxt = bases[k], bases[k + 1]
        # exactly one segment, exclusive end at the next base
        got = check_range(sample_dir, sample_table, topic, partition, b, nxt)
        assert got.num_rows > 0
        assert set(got.column("segment").to_pylist()) == {
            str(Path(part_dir(sample_dir, topic, partition)) / f"{b:020d}.log")
        }
        if k == 1:
            check_range(sample_dir, sample_table, topic, partition, b - 1, nxt + 1)
            check_range(sample_dir, sample_table, topic, partition, None, b)
        else:
            check_range(sample_dir, sample_table, topic, partition, b + 1, nxt - 1)
            check_range(sample_dir, sample_table, topic, partition, b, None)
        check_range(
            sample_dir,
            sample_table,
            topic,
            partition,
            bases[k - 1],
            bases[min(k + 2, len(bases) - 1)] + 3,
        )
    check_range(sample_dir, sample_table, topic, partition, 0, last + 1)
    check_range(sample_dir, sample_table, topic, partition, last, None)
    assert check_range(sample_dir, sample_table, topic, partition, last, last + 100).num_rows == 1


@pytest.mark.parametrize(("topic", "partition"), SAMPLE_PARTITIONS)
def test_ranges_beyond_the_end_or_empty(
    sample_dir: Path, sample_table: pa.Table, topic: str, partition: int
) -> None:
    last = offsets(of_partition(sample_table, topic, partition))[-1]
    for start, end in ((last + 1, None), (10, 10), (0, 0)):
        got = check_range(sample_dir, sample_table, topic, partition, start, end)
        assert got.num_rows == 0
    # a start past the log end offset, or after the end, is an error (tests/reader/test_ranges.py)
    for start, end in ((last + 1000, None), (last + 5, last + 10), (20, 10)):
        with pytest.raises(InvalidOptionError, match="is after the ending offset"):
            check_range(sample_dir, sample_table, topic, partition, start, end)


def test_ranges_inside_compressed_batches(sample_dir: Path, sample_table: pa.Table) -> None:
    for topic, partition in (("orders", 0), ("orders", 1)):
        rows = of_partition(sample_table, topic, partition).to_pylist()
        batches = sorted(
            {
                (r["batchBaseOffset"], r["batchLastOffset"])
                for r in rows
                if r["batchLastOffset"] - r["batchBaseOffset"] >= 4
            }
        )
        assert len(batches) >= 3
        for base, last in batches[1 :: max(1, len(batches) // 8)]:
            got = check_range(sample_dir, sample_table, topic, partition, base + 1, last - 1)
            assert offsets(got) == list(range(base + 1, last - 1))
            got = check_range(sample_dir, sample_table, topic, partition, base + 2, None)
            assert offsets(got)[0] == base + 2
            got = check_range(sample_dir, sample_table, topic, partition, None, base + 2)
            assert offsets(got)[-1] == base + 1


@pytest.mark.parametrize("magic", [0, 1])
def test_ranges_inside_legacy_wrappers(
    sample_dir: Path, sample_table: pa.Table, magic: int
) -> None:
    rows = of_partition(sample_table, "legacy.events", 0).to_pylist()
    wrappers = sorted(
        {
            (r["batchBaseOffset"], r["batchLastOffset"])
            for r in rows
            if r["magic"] == magic
            and r["compression"] != "none"
            and r["batchLastOffset"] - r["batchBaseOffset"] >= 3
        }
    )
    assert len(wrappers) >= 3
    for base, last in wrappers[1 :: max(1, len(wrappers) // 8)]:
        got = check_range(sample_dir, sample_table, "legacy.events", 0, base + 1, last)
        assert offsets(got) == list(range(base + 1, last))
        got = check_range(sample_dir, sample_table, "legacy.events", 0, last, None)
        assert offsets(got)[0] == last
        got = check_range(sample_dir, sample_table, "legacy.events", 0, base + 1, base + 2)
        assert offsets(got) == [base + 1]


def test_sentinels(sample_dir: Path, sample_table: pa.Table) -> None:
    table = read_table(
        str(sample_dir),
        startingOffsets='{"orders":{"0":500, "1":-2}, "metrics-v1":{"0":-2}, '
        '"legacy.events":{"0":-2}}',
        endingOffsets='{"orders":{"1":300, "0":-1}, "metrics-v1":{"0":42}, '
        '"legacy.events":{"0":-1}}',
        includeHeaders=True,
        includeMetadata=True,
    )
    expected = pa.concat_tables(
        [
            of_partition(sample_table, "legacy.events", 0),
            offset_range(of_partition(sample_table, "metrics-v1", 0), None, 42),
            offset_range(of_partition(sample_table, "orders", 0), 500, None),
            offset_range(of_partition(sample_table, "orders", 1), None, 300),
        ]
    )
    same(table, expected)


@pytest.mark.parametrize(
    "options",
    [
        {"startingOffsets": '{"orders":{"5":1}}'},
        {"endingOffsets": '{"nope":{"0":1}}'},
        {"startingOffsets": '{"orders":{"0":1}}', "subscribe": "metrics-v1"},
        {"endingOffsets": '{"orders":{"1":1}}', "assign": '{"orders":[0]}'},
        {"startingOffsetsByTimestamp": '{"orders":{"9":1}}'},
        {"endingOffsetsByTimestamp": '{"orderz":{"0":1}}'},
    ],
)
def test_offsets_naming_absent_partitions(sample_dir: Path, options: dict[str, Any]) -> None:
    with pytest.raises(InvalidOptionError, match="Offsets"):
        read_table(str(sample_dir), **options)


# --------------------------------------------------------------------------------------------
# failOnDataLoss
# --------------------------------------------------------------------------------------------


@pytest.fixture
def late_partition(make_partition: Callable[..., Any]) -> Path:
    part = make_partition("late-0", next_offset=100, segment_bytes=300)
    for _ in range(6):
        part.batch([5, 6, 7])
    directory = part.close()
    assert segment_bases(directory)[0] == 100
    return directory


def test_fail_on_data_loss(late_partition: Path) -> None:
    with pytest.raises(DataLossError, match="50"):
        read_table(str(late_partition), startingOffsets='{"late":{"0":50}}')
    with pytest.raises(DataLossError):
        read_table(str(late_partition), startingOffsets='{"late":{"0":99}}', failOnDataLoss="true")


def test_fail_on_data_loss_false_starts_at_the_first_offset(late_partition: Path) -> None:
    table = read_table(
        str(late_partition),
        startingOffsets='{"late":{"0":50}}',
        endingOffsets='{"late":{"0":105}}',
        failOnDataLoss="false",
    )
    assert offsets(table) == [100, 101, 102, 103, 104]


def test_no_data_loss_from_the_first_offset(late_partition: Path) -> None:
    assert offsets(read_table(str(late_partition))) == list(range(100, 118))
    assert offsets(read_table(str(late_partition), startingOffsets='{"late":{"0":100}}')) == list(
        range(100, 118)
    )
    assert offsets(read_table(str(late_partition), startingOffsets='{"late":{"0":-2}}')) == list(
        range(100, 118)
    )


def test_start_in_a_gap_between_segments_is_no_data_loss(
    make_partition: Callable[..., Any],
) -> None:
    """A hole inside the log (compaction, a lost middle segment) is skipped as a consumer
    would; only offsets before the first segment count as lost."""
    part = make_partition("gap-0", segment_bytes=150)
    for _ in range(8):
        part.batch([5, 6, 7])
    directory = part.close()
    segs = segment_bases(directory)
    assert len(segs) >= 4
    for path in directory.glob(f"{segs[1]:020d}.*"):
        path.unlink()
    remaining = offsets(read_table(str(directory)))
    assert segs[1] not in remaining
    got = read_table(str(directory), startingOffsets=f'{{"gap":{{"0":{segs[1] + 1}}}}}')
    assert offsets(got) == [o for o in remaining if o >= segs[2]]
    got = read_table(
        str(directory),
        startingOffsets=f'{{"gap":{{"0":{segs[1]}}}}}',
        endingOffsets=f'{{"gap":{{"0":{segs[2] + 2}}}}}',
    )
    assert offsets(got) == [segs[2], segs[2] + 1]


# --------------------------------------------------------------------------------------------
# timestamps (Kafka's offsetsForTimes)
# --------------------------------------------------------------------------------------------


def test_non_monotonic_timestamps_example(make_partition: Callable[..., Any]) -> None:
    part = make_partition("ts-0")
    part.batch([10, 30])
    part.batch([20, 40])
    directory = str(part.close())
    assert offsets(read_table(directory, startingTimestamp=25)) == [1, 2, 3]
    assert offsets(read_table(directory, startingTimestamp=30)) == [1, 2, 3]
    assert offsets(read_table(directory, startingTimestamp=31)) == [3]
    assert offsets(read_table(directory, startingTimestamp=0)) == [0, 1, 2, 3]
    assert offsets(read_table(directory, endingTimestamp=25)) == [0]
    assert offsets(read_table(directory, endingTimestamp=10)) == []
    assert offsets(read_table(directory, endingTimestamp=41)) == [0, 1, 2, 3]
    assert offsets(read_table(directory, startingTimestamp=15, endingTimestamp=35)) == [1, 2]
    assert offsets(
        read_table(
            directory,
            startingOffsetsByTimestamp='{"ts":{"0":25}}',
            endingOffsetsByTimestamp='{"ts":{"0":40}}',
        )
    ) == [1, 2]


INDEX_VARIANTS = {
    "indexed": (),
    "no-indexes": (".index", ".timeindex"),
    "no-timeindex": (".timeindex",),
    "no-offset-index": (".index",),
    "preallocated": (),  # every index replaced by a zero-filled, never-written file
}


@pytest.fixture
def jumbled_partition(
    make_partition: Callable[..., Any], strip_indexes: Callable[..., int], tmp_path: Path
) -> dict[str, Path]:
    """A partition with CreateTime timestamps far out of order (and repeated) across magic 1 and
    magic 2 entries, over many segments with dense sparse-index entries; and copies of it
    without some or all index files, keyed like INDEX_VARIANTS."""
    rng = random.Random(11)
    part = make_partition("jumbled-0", segment_bytes=700, index_interval_bytes=60)
    clock = 1000

    def stamps(n: int) -> list[int]:
        nonlocal clock
        out = [clock + rng.randint(-60, 60) for _ in range(n)]
        clock += 10 * n
        return out

    for _ in range(3):
        part.legacy(magic=1, timestamp=stamps(1)[0])
        part.legacy_wrapper(
            stamps(rng.randint(2, 5)),
            magic=1,
            compression=rng.choice([CompressionType.GZIP, CompressionType.SNAPPY]),
        )
    for _ in range(30):
        codec = rng.choice([CompressionType.NONE, CompressionType.LZ4, CompressionType.ZSTD])
        part.batch(stamps(rng.randint(1, 6)), compression=codec)
    directory = part.close()
    assert len(segment_bases(directory)) >= 6
    assert all(p.stat().st_size > 0 for p in directory.glob("*.index"))
    variants = {}
    for name, suffixes in INDEX_VARIANTS.items():
        copy = tmp_path / name / "jumbled-0"
        shutil.copytree(directory, copy)
        strip_indexes(copy, suffixes)
        if name == "preallocated":
            for path in [*copy.glob("*.index"), *copy.glob("*.timeindex")]:
                path.write_bytes(b"\x00" * 240)
        variants[name] = copy
    return variants


def timestamp_targets(pairs: Sequence[tuple[int, int | None]], picks: int = 6) -> list[int]:
    """Before all data, the extremes, after all data, and record timestamps: some exactly, some
    one below, some one above."""
    stamps = sorted({ts for _, ts in pairs if ts is not None})
    targets = {0, stamps[0] - 1, stamps[0], stamps[-1], stamps[-1] + 1}
    step = max(1, len(stamps) // (picks + 1))
    for i, ts in enumerate(stamps[step:-1:step][:picks]):
        targets.add(ts + (-1, 0, 1)[i % 3])
    return sorted(t for t in targets if t >= 0)


def check_timestamps(
    directory: str, full: pa.Table, pairs: list[tuple[int, int | None]], targets: Sequence[int]
) -> None:
    for target in targets:
        start = first_offset_at_or_after(pairs, target)
        if start is None:
            with pytest.raises(InvalidOptionError, match="timestamp"):
                read_table(directory, columns=["offset"], startingTimestamp=target)
        else:
            got = read_table(directory, columns=["offset"], startingTimestamp=target)
            assert offsets(got) == offsets(offset_range(full, start, None)), target
        got = read_table(directory, columns=["offset"], endingTimestamp=target)
        assert offsets(got) == offsets(offset_range(full, None, start)), target


@pytest.mark.parametrize("variant", INDEX_VARIANTS)
def test_timestamps_against_brute_force(jumbled_partition: dict[str, Path], variant: str) -> None:
    full = read_table(str(jumbled_partition["indexed"]))
    assert offsets(full) == list(range(full.num_rows))
    pairs = list(zip(offsets(full), timestamps_ms(full), strict=True))
    stamps = [ts for _, ts in pairs if ts is not None]
    assert len(stamps) == len(pairs)
    assert stamps != sorted(stamps), "the data must have out-of-order timestamps"
    assert len(set(stamps)) < len(stamps), "and repeated ones"
    directory = jumbled_partition[variant]
    if variant != "indexed":
        same(read_table(str(directory)), full)
    targets = set(timestamp_targets(pairs, picks=24))
    # the first records sit in magic-1 messages and compressed wrappers
    targets |= {ts + d for _, ts in pairs[:16] if ts is not None for d in (0, 1)}
    check_timestamps(str(directory), full, pairs, sorted(targets))


def test_timestamp_maps_match_the_global_options(jumbled_partition: dict[str, Path]) -> None:
    directory = str(jumbled_partition["indexed"])
    full = read_table(directory, columns=["offset", "timestamp"])
    pairs = list(zip(offsets(full), timestamps_ms(full), strict=True))
    stamps = sorted({ts for _, ts in pairs if ts is not None})
    for target in (stamps[len(stamps) // 3], stamps[len(stamps) // 2] + 1, 0):
        start = first_offset_at_or_after(pairs, target)
        by_map = read_table(
            directory, columns=["offset"], startingOffsetsByTimestamp=spec("jumbled", 0, target)
        )
        assert offsets(by_map) == offsets(offset_range(full, start, None))
        by_map = read_table(
            directory, columns=["offset"], endingOffsetsByTimestamp=spec("jumbled", 0, target)
        )
        assert offsets(by_map) == offsets(offset_range(full, None, start))
    after = stamps[-1] + 1
    with pytest.raises(InvalidOptionError):
        read_table(directory, startingOffsetsByTimestamp=spec("jumbled", 0, after))
    assert (
        read_table(
            directory,
            startingOffsetsByTimestamp=spec("jumbled", 0, after),
            startingOffsetsByTimestampStrategy="latest",
        ).num_rows
        == 0
    )


def test_timestamp_window(jumbled_partition: dict[str, Path]) -> None:
    full = read_table(str(jumbled_partition["indexed"]))
    pairs = list(zip(offsets(full), timestamps_ms(full), strict=True))
    stamps = sorted({ts for _, ts in pairs if ts is not None})
    for lo, hi in (
        (stamps[3], stamps[40]),
        (stamps[10], stamps[11]),
        (stamps[20], stamps[-1] + 1),
        (0, stamps[25]),
    ):
        start = first_offset_at_or_after(pairs, lo)
        end = first_offset_at_or_after(pairs, hi)
        expected = offsets(offset_range(full, start, end))
        for directory in jumbled_partition.values():
            got = read_table(
                str(directory), columns=["offset"], startingTimestamp=lo, endingTimestamp=hi
            )
            assert offsets(got) == expected, (directory, lo, hi)


def test_timestamp_window_ending_before_it_starts_is_an_error(
    jumbled_partition: dict[str, Path],
) -> None:
    with pytest.raises(InvalidOptionError, match="Beginning timestamp 30 is after the ending"):
        read_table(str(jumbled_partition["indexed"]), startingTimestamp=30, endingTimestamp=5)


def test_shallow_resolves_timestamps_to_the_same_offsets(
    jumbled_partition: dict[str, Path],
) -> None:
    """offsetsForTimes does not depend on the iteration: shallow + startingTimestamp T reads
    what shallow + startingOffsets offsetsForTimes(T) reads, and likewise for the end."""
    directory = str(jumbled_partition["indexed"])
    full = read_table(directory, columns=["offset", "timestamp"])
    pairs = list(zip(offsets(full), timestamps_ms(full), strict=True))
    for target in timestamp_targets(pairs, picks=10):
        found = first_offset_at_or_after(pairs, target)
        if found is not None:
            by_time = read_table(directory, iteration="shallow", startingTimestamp=target)
            by_offset = read_table(
                directory, iteration="shallow", startingOffsets=spec("jumbled", 0, found)
            )
            same(by_time, by_offset)
        by_time = read_table(directory, iteration="shallow", endingTimestamp=target)
        if found is None:
            by_offset = read_table(directory, iteration="shallow")
        else:
            by_offset = read_table(
                directory, iteration="shallow", endingOffsets=spec("jumbled", 0, found)
            )
        same(by_time, by_offset)


def test_timestamps_with_log_append_time(make_partition: Callable[..., Any]) -> None:
    """Under LogAppendTime every record of a batch carries the batch's maxTimestamp."""
    part = make_partition("lat-0")
    part.batch([50, 100])
    specs = [RecordSpec(value=b"x", timestamp=ts) for ts in (10, 900, 20)]
    part.writer.append(encode_batch(specs, base_offset=2, timestamp_type=1, log_append_time=300), 4)
    part.batch([250, 700])
    directory = str(part.close())
    full = read_table(directory)
    assert timestamps_ms(full) == [50, 100, 300, 300, 300, 250, 700]
    assert full.column("timestampType").to_pylist() == [0, 0, 1, 1, 1, 0, 0]
    # by CreateTime, 900 (offset 3) would be the first timestamp >= 200
    assert offsets(read_table(directory, startingTimestamp=200)) == [2, 3, 4, 5, 6]
    assert offsets(read_table(directory, startingTimestamp=301)) == [6]
    assert offsets(read_table(directory, endingTimestamp=300)) == [0, 1]
    assert offsets(read_table(directory, startingTimestamp=300, endingTimestamp=600)) == [
        2,
        3,
        4,
        5,
    ]


def test_starting_timestamp_over_several_partitions(
    sample_dir: Path, sample_table: pa.Table
) -> None:
    target = 1_700_000_005_000  # inside every sample partition's time range
    table = read_table(
        str(sample_dir),
        startingTimestamp=target,
        endingTimestamp=target + 2500,
        includeHeaders=True,
        includeMetadata=True,
    )
    expected = []
    for topic, partition in SAMPLE_PARTITIONS:
        full = of_partition(sample_table, topic, partition)
        pairs = list(zip(offsets(full), timestamps_ms(full), strict=True))
        pairs += control_records(part_dir(sample_dir, topic, partition))
        start = first_offset_at_or_after(pairs, target)
        end = first_offset_at_or_after(pairs, target + 2500)
        assert start is not None
        expected.append(offset_range(full, start, end))
    same(table, pa.concat_tables(expected))
    assert partitions_of(table) == set(SAMPLE_PARTITIONS)


@pytest.mark.parametrize(("topic", "partition"), SAMPLE_PARTITIONS)
def test_sample_timestamps_against_brute_force(
    sample_dir: Path, sample_table: pa.Table, topic: str, partition: int
) -> None:
    directory = part_dir(sample_dir, topic, partition)
    full = of_partition(sample_table, topic, partition)
    # control records have offsets and timestamps too: Kafka's lookup may land on one
    pairs = list(zip(offsets(full), timestamps_ms(full), strict=True))
    pairs += control_records(directory)
    for target in timestamp_targets(pairs, picks=12):
        start = first_offset_at_or_after(pairs, target)
        if start is None:
            with pytest.raises(InvalidOptionError):
                read_table(directory, columns=["offset"], startingTimestamp=target)
        else:
            got = read_table(directory, columns=["offset"], startingTimestamp=target)
            assert offsets(got) == offsets(offset_range(full, start, None)), target
        got = read_table(directory, columns=["offset"], endingTimestamp=target)
        assert offsets(got) == offsets(offset_range(full, None, start)), target


def test_sample_timestamps_without_indexes(
    sample_dir: Path, sample_dir_without_indexes: Path
) -> None:
    for topic, partition in SAMPLE_PARTITIONS:
        full = read_table(part_dir(sample_dir, topic, partition), columns=["timestamp"])
        stamps = sorted({t for t in timestamps_ms(full) if t is not None})
        for target in stamps[len(stamps) // 9 :: max(1, len(stamps) // 8)]:
            with_index = read_table(
                part_dir(sample_dir, topic, partition),
                startingTimestamp=target,
                endingTimestamp=target + 2000,
            )
            without = read_table(
                part_dir(sample_dir_without_indexes, topic, partition),
                startingTimestamp=target,
                endingTimestamp=target + 2000,
            )
            assert with_index.to_pylist() == without.to_pylist()


def test_timestamp_lookup_counts_control_records(make_partition: Callable[..., Any]) -> None:
    """Kafka's offsetsForTimes walks every record of every batch, control records included
    (FileRecords.searchForTimestamp), so a marker can be the answer."""
    part = make_partition("ctl-0")
    part.batch([10, 20], producer_id=7, transactional=True)
    marker = part.marker(7, commit=True, timestamp=50)
    part.batch([30, 60])
    directory = str(part.close())
    assert marker == 2
    # offsetsForTimes(40) = 2 (the marker): the records after it are read, whatever their time
    assert offsets(read_table(directory, startingTimestamp=40)) == [3, 4]
    assert offsets(read_table(directory, endingTimestamp=40)) == [0, 1]


def test_starting_timestamp_after_all_data(sample_dir: Path) -> None:
    with pytest.raises(InvalidOptionError, match="startingOffsetsByTimestampStrategy"):
        read_table(str(sample_dir), startingTimestamp=4_000_000_000_000)
    with pytest.raises(InvalidOptionError):
        read_table(
            str(sample_dir),
            startingTimestamp=4_000_000_000_000,
            startingOffsetsByTimestampStrategy="error",
        )
    table = read_table(
        str(sample_dir),
        startingTimestamp=4_000_000_000_000,
        startingOffsetsByTimestampStrategy="latest",
    )
    assert table.num_rows == 0
    assert table.schema == arrow_schema(DEFAULT)


def test_ending_timestamp_after_all_data_reads_to_the_end(
    sample_dir: Path, sample_table: pa.Table
) -> None:
    table = read_table(
        str(sample_dir),
        endingTimestamp=4_000_000_000_000,
        includeHeaders=True,
        includeMetadata=True,
    )
    same(table, sample_table)


def test_timestamp_map_sentinels(sample_dir: Path, sample_table: pa.Table) -> None:
    table = read_table(
        str(sample_dir),
        subscribe="orders",
        startingOffsetsByTimestamp='{"orders":{"0":-2, "1":-1}}',
        includeHeaders=True,
        includeMetadata=True,
    )
    # -2 = earliest, -1 = latest (nothing to read in a batch query)
    same(table, of_partition(sample_table, "orders", 0))
    table = read_table(
        str(sample_dir),
        subscribe="orders",
        endingOffsetsByTimestamp='{"orders":{"0":-1, "1":-2}}',
        includeHeaders=True,
        includeMetadata=True,
    )
    same(table, of_partition(sample_table, "orders", 0))


def test_timestamp_map_with_earliest_for_the_other_partition(
    sample_dir: Path, sample_table: pa.Table
) -> None:
    orders0 = of_partition(sample_table, "orders", 0)
    target = timestamps_ms(orders0)[orders0.num_rows // 2]
    assert target is not None
    pairs = list(zip(offsets(orders0), timestamps_ms(orders0), strict=True))
    pairs += control_records(part_dir(sample_dir, "orders", 0))
    start = first_offset_at_or_after(pairs, target)
    table = read_table(
        str(sample_dir),
        subscribe="orders",
        startingOffsetsByTimestamp=f'{{"orders":{{"0":{target},"1":-2}}}}',
        includeHeaders=True,
        includeMetadata=True,
    )
    same(
        table,
        pa.concat_tables(
            [offset_range(orders0, start, None), of_partition(sample_table, "orders", 1)]
        ),
    )


# --------------------------------------------------------------------------------------------
# isolationLevel
# --------------------------------------------------------------------------------------------

DATA_OFFSETS = [0, 1, 2, 3, 4, 5, 6, 8, 9, 12, 13, 16, 17, 18]
COMMITTED_OFFSETS = [0, 1, 4, 5, 8, 9, 16]
MARKER_OFFSETS = [7, 10, 11, 14, 15]


def write_transactions(
    make_partition: Callable[..., Any], segment_bytes: int, compression: int
) -> Path:
    """Interleaved transactions of producers 1-4: aborted, committed, aborted after a commit by
    the same producer, and one left open at the end of the log."""
    part = make_partition("tx-0", segment_bytes=segment_bytes, index_interval_bytes=50)

    def txn(pid: int, n: int) -> list[int]:
        return part.batch([100] * n, producer_id=pid, transactional=True, compression=compression)

    assert part.batch([100, 100], compression=compression) == [0, 1]
    assert txn(1, 2) == [2, 3]
    assert txn(2, 2) == [4, 5]
    assert txn(1, 1) == [6]
    assert part.marker(1, commit=False) == 7
    part.writer.record_abort(1, 2, 7)
    assert part.batch([100]) == [8]
    assert txn(1, 1) == [9]
    assert part.marker(2, commit=True) == 10
    assert part.marker(1, commit=True) == 11
    assert txn(3, 1) == [12]
    assert txn(1, 1) == [13]
    assert part.marker(3, commit=False) == 14
    part.writer.record_abort(3, 12, 14)
    assert part.marker(1, commit=False) == 15
    part.writer.record_abort(1, 13, 15)
    assert part.batch([100]) == [16]
    assert txn(4, 2) == [17, 18]  # never finished
    return part.close()


@pytest.mark.parametrize("segment_bytes", [1 << 20, 250], ids=["one-segment", "many-segments"])
@pytest.mark.parametrize(
    "compression", [CompressionType.NONE, CompressionType.LZ4], ids=["none", "lz4"]
)
@pytest.mark.parametrize("txnindex", [True, False], ids=["txnindex", "markers-only"])
def test_read_committed(
    make_partition: Callable[..., Any], segment_bytes: int, compression: int, txnindex: bool
) -> None:
    directory = write_transactions(make_partition, segment_bytes, compression)
    txn_files = sorted(directory.glob("*.txnindex"))
    assert txn_files, "PartitionWriter.record_abort writes .txnindex files on roll"
    if not txnindex:
        for path in txn_files:
            path.unlink()
    uncommitted = read_table(str(directory), includeMetadata=True)
    assert offsets(uncommitted) == DATA_OFFSETS
    assert not any(uncommitted.column("isControl").to_pylist())
    committed = read_table(str(directory), isolationLevel="read_committed", includeMetadata=True)
    assert offsets(committed) == COMMITTED_OFFSETS
    assert not any(committed.column("isControl").to_pylist())
    explicit = read_table(str(directory), isolationLevel="READ_UNCOMMITTED")
    assert offsets(explicit) == DATA_OFFSETS
    # ranges cut through transactions
    ranged = read_table(
        str(directory),
        isolationLevel="read_committed",
        startingOffsets='{"tx":{"0":3}}',
        endingOffsets='{"tx":{"0":17}}',
    )
    assert offsets(ranged) == [4, 5, 8, 9, 16]
    ranged = read_table(
        str(directory), isolationLevel="read_committed", startingOffsets='{"tx":{"0":13}}'
    )
    assert offsets(ranged) == [16]


@pytest.mark.parametrize("txnindex", [True, False], ids=["txnindex", "markers-only"])
def test_shallow_read_committed_drops_aborted_batches(
    make_partition: Callable[..., Any], txnindex: bool
) -> None:
    directory = write_transactions(make_partition, 250, CompressionType.NONE)
    if not txnindex:
        for path in directory.glob("*.txnindex"):
            path.unlink()
    uncommitted = read_table(str(directory), iteration="shallow", includeMetadata=True)
    # one row per batch, markers included, each at its batch's last offset
    assert offsets(uncommitted) == [1, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18]
    assert [
        o
        for o, c in zip(
            offsets(uncommitted), uncommitted.column("isControl").to_pylist(), strict=True
        )
        if c
    ] == MARKER_OFFSETS
    committed = read_table(
        str(directory), iteration="shallow", includeMetadata=True, isolationLevel="read_committed"
    )
    # aborted batches (last offsets 3, 6, 12, 13), the open transaction (18) and every marker
    # are gone, as for a read_committed consumer
    assert offsets(committed) == [1, 5, 8, 9, 16]
    assert not any(committed.column("isControl").to_pylist())


def test_sample_read_committed(sample_dir: Path, sample_table: pa.Table, tmp_path: Path) -> None:
    orders = pa.Table.from_batches(
        sample_table.filter(pc.equal(sample_table.column("topic"), "orders")).to_batches()
    )
    committed = read_table(
        str(sample_dir),
        subscribe="orders",
        isolationLevel="read_committed",
        includeHeaders=True,
        includeMetadata=True,
    )
    txn_rows = orders.filter(orders.column("isTransactional"))
    # the generator writes one aborted then one committed transaction per partition
    for partition in (0, 1):
        mine = txn_rows.filter(pc.equal(txn_rows.column("partition"), partition))
        batches = sorted(set(mine.column("batchBaseOffset").to_pylist()))
        assert len(batches) == 2
        aborted_base = batches[0]
        expected = of_partition(orders, "orders", partition)
        expected = expected.filter(pc.not_equal(expected.column("batchBaseOffset"), aborted_base))
        same(of_partition(committed, "orders", partition), expected)
        # the same answer from the markers alone
        copy = tmp_path / f"orders-{partition}"
        shutil.copytree(sample_dir / f"orders-{partition}", copy)
        removed = list(copy.glob("*.txnindex"))
        assert len(removed) == 1
        removed[0].unlink()
        without_txnindex = read_table(
            str(copy), isolationLevel="read_committed", includeHeaders=True, includeMetadata=True
        )
        same(without_txnindex.drop_columns(["segment"]), expected.drop_columns(["segment"]))


# --------------------------------------------------------------------------------------------
# shallow iteration
# --------------------------------------------------------------------------------------------


def header_walk(directory: str | Path) -> dict[str, Any]:
    """Deep and shallow row counts and the shallow rows' facts, walking entry headers."""
    deep = 0
    shallow: list[dict[str, Any]] = []
    for log in sorted(Path(directory).glob("*.log")):
        data = log.read_bytes()
        table = scan_entries(data)
        assert table.valid_bytes == len(data)
        for p, size, magic, last, max_ts in zip(
            table.positions.tolist(),
            table.sizes.tolist(),
            table.magics.tolist(),
            table.last_offsets.tolist(),
            table.max_timestamps.tolist(),
            strict=True,
        ):
            if magic == 2:
                attributes = V2_ATTRIBUTES.unpack_from(data, p + 21)[0]
                if not attributes & 0x20:
                    deep += V2_RECORD_COUNT.unpack_from(data, p + 57)[0]
                value: bytes | None = data[p + 61 : p + size]
            else:
                message = decode_legacy_message(data, p)
                deep += len(expand_wrapper(message)) if message.compression else 1
                value = message.value
            shallow.append(
                {
                    "offset": last,
                    "timestamp": None if max_ts == -1 else max_ts,
                    "value": value,
                    "segment": str(log),
                    "position": p,
                }
            )
    return {"deep": deep, "shallow": shallow}


@pytest.mark.parametrize(("topic", "partition"), SAMPLE_PARTITIONS)
def test_deep_and_shallow_counts_match_a_header_walk(
    sample_dir: Path, topic: str, partition: int
) -> None:
    directory = part_dir(sample_dir, topic, partition)
    walk = header_walk(directory)
    deep = read_table(directory)
    shallow = read_table(directory, iteration="shallow", includeMetadata=True)
    assert deep.num_rows == walk["deep"]
    assert shallow.num_rows == len(walk["shallow"])
    assert offsets(shallow) == [e["offset"] for e in walk["shallow"]]
    assert timestamps_ms(shallow) == [e["timestamp"] for e in walk["shallow"]]
    assert shallow.column("value").to_pylist() == [e["value"] for e in walk["shallow"]]
    assert shallow.column("segment").to_pylist() == [e["segment"] for e in walk["shallow"]]
    assert shallow.column("position").to_pylist() == [e["position"] for e in walk["shallow"]]
    assert shallow.column("batchLastOffset").to_pylist() == offsets(shallow)


def test_shallow_on_the_whole_sample(sample_dir: Path, sample_table: pa.Table) -> None:
    shallow = read_table(str(sample_dir), iteration="shallow", includeHeaders=True)
    expected = sum(
        len(header_walk(part_dir(sample_dir, t, p))["shallow"]) for t, p in SAMPLE_PARTITIONS
    )
    assert shallow.num_rows == expected
    assert sample_table.num_rows == sum(
        header_walk(part_dir(sample_dir, t, p))["deep"] for t, p in SAMPLE_PARTITIONS
    )
    v2 = shallow.filter(pc.equal(shallow.column("topic"), "orders"))
    assert v2.column("key").null_count == v2.num_rows
    assert all(h == [] for h in v2.column("headers").to_pylist())


def test_shallow_with_an_offset_range(sample_dir: Path, sample_table: pa.Table) -> None:
    rows = of_partition(sample_table, "orders", 0).to_pylist()
    batches = sorted(
        {
            (r["batchBaseOffset"], r["batchLastOffset"])
            for r in rows
            if r["batchLastOffset"] - r["batchBaseOffset"] >= 4
        }
    )
    (b1, l1), (b2, l2) = batches[2], batches[5]
    shallow = read_table(
        part_dir(sample_dir, "orders", 0),
        iteration="shallow",
        startingOffsets=spec("orders", 0, b1 + 1),
        endingOffsets=spec("orders", 0, b2 + 1),
        includeMetadata=True,
    )
    everything = read_table(
        part_dir(sample_dir, "orders", 0), iteration="shallow", includeMetadata=True
    )
    # the batches holding an offset of [b1 + 1, b2 + 1): from the one holding b1+1 to b2's
    expected = everything.filter(
        pc.and_(
            pc.greater_equal(everything.column("batchLastOffset"), b1 + 1),
            pc.less(everything.column("batchBaseOffset"), b2 + 1),
        )
    )
    same(shallow, expected)
    assert offsets(shallow)[0] == l1
    assert offsets(shallow)[-1] == l2


def test_paths_may_be_pathlike_and_subscribe_a_list(sample_dir) -> None:  # type: ignore[no-untyped-def]
    import pathlib

    as_path = read_table(pathlib.Path(sample_dir), subscribe=["orders"])
    as_text = read_table(str(sample_dir), subscribe="orders")
    assert as_path.equals(as_text) and as_path.num_rows > 0


def test_a_read_does_not_import_pandas(sample_dir: Path, sample_table: pa.Table) -> None:
    """The columns are built from buffers: pa.array and pa.scalar import pandas on first use,
    0.2-0.5 s of a fresh process's first read."""
    code = (
        "import sys\nimport kafka_segments_ds as ksd\n"
        f"t = ksd.read_table({str(sample_dir)!r}, includeHeaders=True, includeMetadata=True)\n"
        "print(t.num_rows, 'pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(sample_table.num_rows), "False"]
