"""Tests for kafka_segments_ds.layout: name parsing and segment discovery."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.layout import (
    PartitionLog,
    SegmentRef,
    discover,
    is_special_partition_dir,
    parse_partition_dir_name,
    parse_segment_file_name,
    segment_file_name,
)

UUID = "0123456789abcdef0123456789abcdef"
LOCAL = pafs.LocalFileSystem()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders-0", ("orders", 0)),
        ("my-topic.v2-13", ("my-topic.v2", 13)),
        ("a-b-0", ("a-b", 0)),
        ("__consumer_offsets-49", ("__consumer_offsets", 49)),
        ("__cluster_metadata-0", ("__cluster_metadata", 0)),
        ("t-007", ("t", 7)),
        ("x" * 249 + "-1", ("x" * 249, 1)),
        # Split at the LAST '-': this is topic 'topic-' (a legal name), partition 1.
        ("topic--1", ("topic-", 1)),
        (f"topic-0.{UUID}-delete", None),
        (f"topic-0.{UUID}-future", None),
        (f"topic-0.{UUID}-stray", None),
        ("topic-0-future", None),
        ("topic", None),
        ("topic-", None),
        ("-0", None),
        ("topic-+1", None),
        ("topic- 1", None),
        ("topic-1.5", None),
        ("topic-\u0661", None),  # Arabic-Indic digit one: not an ASCII digit
        ("top ic-0", None),
        ("topic!-0", None),
        (".-0", None),
        ("..-0", None),
        ("x" * 250 + "-1", None),
        ("topic-2147483648", None),  # does not fit Kafka's int partition
        ("topic-2147483647", ("topic", 2147483647)),
    ],
)
def test_parse_partition_dir_name(name: str, expected: tuple[str, int] | None) -> None:
    assert parse_partition_dir_name(name) == expected


@pytest.mark.parametrize(
    ("name", "special"),
    [
        (f"topic-0.{UUID}-delete", True),
        (f"my-topic.v2-12.{UUID}-future", True),
        (f"tru-3.{UUID}-stray", True),
        ("topic-0", False),
        ("topic-0-delete", False),
    ],
)
def test_is_special_partition_dir(name: str, special: bool) -> None:
    assert is_special_partition_dir(name) is special


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("00000000000000000123.log", (123, ".log")),
        ("00000000000000000000.index", (0, ".index")),
        ("00000000000000368769.timeindex", (368769, ".timeindex")),
        ("00000000000000368769.txnindex", (368769, ".txnindex")),
        ("00000000000000368769.snapshot", (368769, ".snapshot")),
        ("00000000000000000123.log.deleted", (123, ".log.deleted")),
        ("00000000000000000123.index.swap", (123, ".index.swap")),
        ("123.log", (123, ".log")),  # any digit count
        ("00000000000000000100-0000000001.checkpoint", None),  # KRaft snapshot
        ("leader-epoch-checkpoint", None),
        ("partition.metadata", None),
        ("meta.properties", None),
        (".lock", None),
        ("00000000000000000123", None),
        ("0000000000000000012a.log", None),
    ],
)
def test_parse_segment_file_name(name: str, expected: tuple[int, str] | None) -> None:
    assert parse_segment_file_name(name) == expected


def test_segment_file_name() -> None:
    assert segment_file_name(123, ".log") == "00000000000000000123.log"
    assert segment_file_name(368769, "timeindex") == "00000000000000368769.timeindex"
    assert parse_segment_file_name(segment_file_name(2**63 - 1, ".index")) == (2**63 - 1, ".index")
    with pytest.raises(ValueError):
        segment_file_name(-1, ".log")


# --------------------------------------------------------------------------------------------
# discover()
# --------------------------------------------------------------------------------------------


def write(path: Path, size: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x01" * size)
    return path


def make_partition(directory: Path, *bases: int, indexes: bool = True) -> None:
    for base in bases:
        write(directory / segment_file_name(base, ".log"), 100 + base)
        if indexes:
            write(directory / segment_file_name(base, ".index"), 8)
            write(directory / segment_file_name(base, ".timeindex"), 12)


def summary(partitions: list[PartitionLog]) -> list[tuple[str | None, int | None, list[int]]]:
    return [(p.topic, p.partition, [s.base_offset for s in p.segments]) for p in partitions]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    root = tmp_path / "kafka-logs-0"  # parses as '<topic>-<partition>': must not confuse us
    for name in (
        "meta.properties",
        ".lock",
        ".kafka_cleanshutdown",
        "recovery-point-offset-checkpoint",
        "log-start-offset-checkpoint",
        "replication-offset-checkpoint",
        "cleaner-offset-checkpoint",
    ):
        write(root / name, 10)
    make_partition(root / "orders-1", 0, 500)
    make_partition(root / "orders-0", 300, 0, 1200)
    make_partition(root / "my-topic.v2-13", 7)
    # Special and unrelated directories are skipped.
    make_partition(root / f"orders-2.{UUID}-delete", 0)
    make_partition(root / f"orders-0.{UUID}-future", 0)
    make_partition(root / f"orders-3.{UUID}-stray", 0)
    make_partition(root / "not a partition", 0)
    (root / "empty-5").mkdir()
    # Files a partition directory holds besides segments.
    p0 = root / "orders-0"
    write(p0 / "leader-epoch-checkpoint", 5)
    write(p0 / "partition.metadata", 5)
    write(p0 / segment_file_name(1200, ".snapshot"), 5)
    write(p0 / segment_file_name(0, ".txnindex"), 34)
    write(p0 / segment_file_name(50, ".log.deleted"), 5)
    write(p0 / segment_file_name(50, ".index.deleted"), 5)
    write(p0 / segment_file_name(900, ".log.cleaned"), 5)
    write(p0 / segment_file_name(2000, ".index"), 8)  # index without a .log
    write(p0 / segment_file_name(2000, ".timeindex"), 12)
    write(p0 / "00000000000000000100-0000000001.checkpoint", 5)
    return root


def test_discover_log_dir(log_dir: Path) -> None:
    partitions = discover(str(log_dir), LOCAL)
    assert summary(partitions) == [
        ("my-topic.v2", 13, [7]),
        ("orders", 0, [0, 300, 1200]),
        ("orders", 1, [0, 500]),
    ]
    orders0 = partitions[1]
    assert orders0.directory == str(log_dir / "orders-0")
    first = orders0.segments[0]
    assert first == SegmentRef(
        path=str(log_dir / "orders-0" / "00000000000000000000.log"),
        base_offset=0,
        size=100,
        index_path=str(log_dir / "orders-0" / "00000000000000000000.index"),
        timeindex_path=str(log_dir / "orders-0" / "00000000000000000000.timeindex"),
        txnindex_path=str(log_dir / "orders-0" / "00000000000000000000.txnindex"),
        index_size=8,
        timeindex_size=12,
        txnindex_size=34,
    )
    assert orders0.segments[1].txnindex_path is None
    assert orders0.segments[1].txnindex_size == 0
    assert pickle.loads(pickle.dumps(partitions)) == partitions


def test_discover_partition_dir(log_dir: Path) -> None:
    partitions = discover(str(log_dir / "orders-0"), LOCAL)
    assert summary(partitions) == [("orders", 0, [0, 300, 1200])]


def test_discover_trailing_slash(log_dir: Path) -> None:
    assert summary(discover(str(log_dir / "orders-1") + "/", LOCAL)) == [("orders", 1, [0, 500])]


def test_discover_unnamed_partition_dir(tmp_path: Path) -> None:
    make_partition(tmp_path / "copied segments", 10, 0, indexes=False)
    partitions = discover(str(tmp_path / "copied segments"), LOCAL)
    assert summary(partitions) == [(None, None, [0, 10])]
    assert partitions[0].segments[0].index_path is None
    assert partitions[0].segments[0].index_size == 0


def test_discover_explicit_special_dir_is_read(log_dir: Path) -> None:
    partitions = discover(str(log_dir / f"orders-2.{UUID}-delete"), LOCAL)
    assert summary(partitions) == [(None, None, [0])]


def test_discover_single_log_file(log_dir: Path) -> None:
    path = log_dir / "orders-0" / "00000000000000000300.log"
    partitions = discover(str(path), LOCAL)
    assert summary(partitions) == [("orders", 0, [300])]
    segment = partitions[0].segments[0]
    assert segment.size == 400
    assert segment.index_path == str(log_dir / "orders-0" / "00000000000000000300.index")


def test_discover_single_log_file_outside_partition_dir(tmp_path: Path) -> None:
    path = write(tmp_path / "00000000000000000042.log", 3)
    assert summary(discover(str(path), LOCAL)) == [(None, None, [42])]


def test_discover_glob_of_partition_dirs(log_dir: Path) -> None:
    partitions = discover(str(log_dir / "orders-*"), LOCAL)
    # The -delete/-future/-stray directories also match 'orders-*' but are skipped.
    assert summary(partitions) == [("orders", 0, [0, 300, 1200]), ("orders", 1, [0, 500])]


def test_discover_glob_of_log_files(log_dir: Path) -> None:
    partitions = discover(str(log_dir / "*-[0-9]*" / "*[!5]00.log"), LOCAL)
    # ...500.log and ...007.log do not match; the .log in the -delete dir does but is skipped.
    assert summary(partitions) == [
        ("orders", 0, [0, 300, 1200]),
        ("orders", 1, [0]),
    ]
    assert partitions[0].segments[1].index_path is not None


def test_discover_glob_mixing_dirs_and_files(log_dir: Path) -> None:
    # Matches meta.properties and checkpoint files too: non-segment files are skipped. Unlike
    # a log dir listing, each matched directory holding segments is read even when it is not
    # named <topic>-<partition>.
    partitions = discover(str(log_dir / "*"), LOCAL)
    assert summary(partitions) == [*summary(discover(str(log_dir), LOCAL)), (None, None, [0])]
    assert partitions[-1].directory == str(log_dir / "not a partition")


def test_discover_glob_of_log_dirs(tmp_path: Path) -> None:
    make_partition(tmp_path / "broker1" / "t-0", 0)
    make_partition(tmp_path / "broker2" / "t-0", 0, 9)
    make_partition(tmp_path / "broker2" / "s-3", 4)
    partitions = discover(str(tmp_path / "broker?"), LOCAL)
    assert summary(partitions) == [("s", 3, [4]), ("t", 0, [0]), ("t", 0, [0, 9])]
    assert [p.directory for p in partitions][1:] == [
        str(tmp_path / "broker1" / "t-0"),
        str(tmp_path / "broker2" / "t-0"),
    ]


def test_discover_a_swap_file_takes_its_segments_place_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """(tests/reader/test_swap.py reads them.) A .swap holding no whole entry replaces only
    the segment of its name, as the broker's loader renames it over that one."""
    make_partition(tmp_path / "t-0", 0, 100)
    write(tmp_path / "t-0" / segment_file_name(0, ".log.swap"), 5)
    with caplog.at_level(logging.WARNING, logger="kafka_segments_ds.layout"):
        partitions = discover(str(tmp_path / "t-0"), LOCAL)
    assert summary(partitions) == [("t", 0, [0, 100])]
    assert partitions[0].segments[0].path.endswith(".log.swap")
    assert "in place of 00000000000000000000.log" in caplog.text


def test_discover_empty_directory(tmp_path: Path) -> None:
    assert discover(str(tmp_path), LOCAL) == []
    write(tmp_path / "t-0" / segment_file_name(0, ".index"), 8)  # an orphan index only
    assert discover(str(tmp_path), LOCAL) == []
    assert discover(str(tmp_path / "t-0"), LOCAL) == []


def test_discover_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        discover(str(tmp_path / "nope"), LOCAL)
    with pytest.raises(FileNotFoundError, match="matches"):
        discover(str(tmp_path / "nope*"), LOCAL)


def test_discover_non_segment_file(tmp_path: Path) -> None:
    path = write(tmp_path / "00000000000000000000.index", 8)
    with pytest.raises(InvalidOptionError, match="not a Kafka segment file"):
        discover(str(path), LOCAL)
