"""A segment replacement (log compaction, a split) that a broker crash interrupted: the
``.swap`` files are read as the broker's log loader would complete them (FORMAT §7.2)."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.cli import main as cli_main
from kafka_segments_ds.cli.common import sibling
from kafka_segments_ds.layout import discover, segment_file_name
from kafka_segments_ds.records.builder import RecordSpec, encode_batch

LOCAL = pafs.LocalFileSystem()


def _log(offsets: range) -> bytes:
    """One batch per offset, value ``v<offset>``."""
    return b"".join(
        encode_batch([RecordSpec(b"v%d" % o, b"k%d" % (o % 3), 1000 + o)], base_offset=o)
        for o in offsets
    )


def _write(directory: Path, name_offset: int, suffix: str, data: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / segment_file_name(name_offset, suffix)
    path.write_bytes(data)
    return path


def _read(path: Path, **options: str) -> tuple[list[int], list[bytes]]:
    table = read_table(str(path), **options)
    return table.column("offset").to_pylist(), table.column("value").to_pylist()


def test_originals_renamed_deleted_the_swap_holds_the_range(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash after the originals were renamed .deleted and before the .swap became .log:
    the compacted records exist only in the .swap."""
    part = tmp_path / "t-0"
    _write(part, 0, ".log.deleted", _log(range(10)))
    _write(part, 0, ".log.swap", _log(range(7, 10)))  # compaction kept the last of each key
    _write(part, 10, ".log", _log(range(10, 13)))
    with caplog.at_level(logging.WARNING, logger="kafka_segments_ds.layout"):
        got = _read(tmp_path)
    assert got == ([7, 8, 9, 10, 11, 12], [b"v%d" % o for o in range(7, 13)])
    assert "00000000000000000000.log.swap as the broker would" in caplog.text
    assert "already renamed .deleted" in caplog.text
    # a start inside the range it holds is in the archive
    assert _read(tmp_path, startingOffsets='{"t":{"0":8}}')[0] == [8, 9, 10, 11, 12]


def test_originals_still_there_the_swap_replaces_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash before the originals were renamed: every segment from the lowest swap base
    offset up to the highest swap next offset is replaced, as on the broker's restart."""
    part = tmp_path / "t-0"
    _write(part, 0, ".log", _log(range(5)))
    _write(part, 5, ".log", _log(range(5, 10)))
    _write(part, 0, ".log.swap", _log(range(7, 10)))
    _write(part, 10, ".log", _log(range(10, 13)))
    with caplog.at_level(logging.WARNING, logger="kafka_segments_ds.layout"):
        assert _read(part)[0] == [7, 8, 9, 10, 11, 12]
    assert "in place of 00000000000000000000.log, 00000000000000000005.log" in caplog.text
    [partition] = discover(str(part), LOCAL)
    assert [s.path.rsplit("/", 1)[1] for s in partition.segments] == [
        "00000000000000000000.log.swap",
        "00000000000000000010.log",
    ]


def test_a_split_into_several_swaps(tmp_path: Path) -> None:
    """A split (an old segment whose offsets overflowed) leaves several .swap files: the range
    runs from the lowest base offset to the highest next offset; the segment after it stays."""
    part = tmp_path / "t-0"
    _write(part, 0, ".log", _log(range(6)))
    _write(part, 0, ".log.swap", _log(range(3)))
    _write(part, 3, ".log.swap", _log(range(3, 6)))
    _write(part, 6, ".log", _log(range(6, 8)))
    assert _read(part) == (list(range(8)), [b"v%d" % o for o in range(8)])
    [partition] = discover(str(part), LOCAL)
    assert [s.base_offset for s in partition.segments] == [0, 3, 6]


def test_an_unfinished_split_is_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A .swap at or above the lowest .cleaned base offset belongs to a split whose renames
    were cut short (the broker renames a split's .cleaned files to .swap from the highest
    down): the broker deletes it, and the regular segment still holds the data."""
    part = tmp_path / "t-0"
    _write(part, 0, ".log", _log(range(6)))
    _write(part, 0, ".log.cleaned", _log(range(3)))
    _write(part, 3, ".log.swap", _log(range(3, 6)))
    with caplog.at_level(logging.WARNING, logger="kafka_segments_ds.layout"):
        assert _read(part) == (list(range(6)), [b"v%d" % o for o in range(6)])
    assert "00000000000000000003.log.swap belong to an unfinished split" in caplog.text
    [partition] = discover(str(part), LOCAL)
    assert [s.path.rsplit("/", 1)[1] for s in partition.segments] == ["00000000000000000000.log"]


def test_the_swap_is_read_with_its_own_index_files(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    _write(part, 0, ".log", _log(range(5)))
    _write(part, 0, ".index", b"\x00" * 8)  # the original's: positions of other bytes
    _write(part, 0, ".timeindex", b"\x00" * 12)
    _write(part, 0, ".log.swap", _log(range(3, 5)))
    swap_index = _write(part, 0, ".index.swap", b"")
    [partition] = discover(str(part), LOCAL)
    [segment] = partition.segments
    assert segment.path.endswith(".log.swap")
    assert (segment.index_path, segment.timeindex_path, segment.txnindex_path) == (
        str(swap_index),
        None,
        None,
    )
    assert sibling(segment, ".index") == str(swap_index)  # rebuild-index writes the swap's
    assert sibling(segment, ".timeindex").endswith("00000000000000000000.timeindex.swap")


def test_an_empty_swap_replaces_the_segment_of_its_name(tmp_path: Path) -> None:
    """An empty .swap (compaction removed every record) still takes its name's place."""
    part = tmp_path / "t-0"
    _write(part, 0, ".log", _log(range(3)))
    _write(part, 0, ".log.swap", b"")
    _write(part, 3, ".log", _log(range(3, 5)))
    assert _read(part)[0] == [3, 4]


def test_named_log_files_are_read_as_the_broker_would_serve_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A named .log that a .swap replaces reads as the replacement (the same as its directory
    read, so overlapping paths agree); one no .swap replaces reads as named."""
    part = tmp_path / "t-0"
    named = _write(part, 0, ".log", _log(range(5)))
    _write(part, 0, ".log.swap", _log(range(3, 5)))
    later = _write(part, 5, ".log", _log(range(5, 7)))
    with caplog.at_level(logging.WARNING, logger="kafka_segments_ds.layout"):
        assert _read(named)[0] == [3, 4]
    assert "in place of 00000000000000000000.log" in caplog.text
    assert _read(later)[0] == [5, 6]


def test_verify_and_dump_read_the_swap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = tmp_path / "t-0"
    _write(part, 0, ".log.deleted", _log(range(10)))
    _write(part, 0, ".log.swap", _log(range(7, 10)))
    _write(part, 10, ".log", _log(range(10, 13)))
    assert cli_main(["verify", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "00000000000000000000.log.swap: 3 batches, 3 records, last offset 9" in out
    assert "2 files checked (2 .log, 0 index)" in out


def test_a_log_dir_and_one_of_its_files_with_a_swap(tmp_path: Path) -> None:
    """Overlapping paths read each segment once when a .swap replaces the named file too."""
    part = tmp_path / "t-0"
    named = _write(part, 0, ".log", _log(range(10)))
    _write(part, 0, ".log.swap", _log(range(7, 10)))
    _write(part, 10, ".log", _log(range(10, 13)))
    want = [7, 8, 9, 10, 11, 12]
    for paths in ([part, named], [named, part], [part, f"{part}/*.log"]):
        assert read_table([str(p) for p in paths])["offset"].to_pylist() == want
    # a named file no .swap replaces is read as named
    assert _read(part / segment_file_name(10, ".log"))[0] == [10, 11, 12]


def test_a_partition_directory_holding_only_a_swap(tmp_path: Path) -> None:
    part = tmp_path / "t-0"
    _write(part, 0, ".log.deleted", _log(range(10)))
    _write(part, 0, ".log.swap", _log(range(7, 10)))
    for path in (part, tmp_path, f"{tmp_path}/*", f"{tmp_path}/t-*"):
        assert read_table(str(path))["offset"].to_pylist() == [7, 8, 9]
