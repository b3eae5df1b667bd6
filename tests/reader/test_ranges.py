"""Impossible ranges are errors (Spark's Kafka source wording); overlapping inputs read each
segment once; an empty column list keeps the row count."""

from __future__ import annotations

import glob
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import InvalidOptionError, read_table
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.layout import discover, merge_partitions
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.ranges import log_end_offset
from kafka_segments_ds.records.builder import RecordSpec, encode_batch

BEGIN_AFTER_END = "Beginning offset {} is after the ending offset {} for topic {} partition {}."


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"startingOffsets": '{"t":{"0":100}}', "endingOffsets": '{"t":{"0":50}}'},
            BEGIN_AFTER_END.format(100, 50, "t", 0),
        ),
        (
            {"startingTimestamp": "2000", "endingTimestamp": "1999"},
            "Beginning timestamp 2000 is after the ending timestamp 1999",
        ),
        (
            {
                "startingOffsetsByTimestamp": '{"t":{"1":30}}',
                "endingOffsetsByTimestamp": '{"t":{"1":20}}',
            },
            "Beginning timestamp 30 is after the ending timestamp 20 for topic t partition 1",
        ),
    ],
    ids=["offsets", "timestamps", "timestamps-by-partition"],
)
def test_start_after_end_is_refused_by_the_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        parse_read_options(options)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "options",
    [
        {"startingOffsets": '{"t":{"0":50}}', "endingOffsets": '{"t":{"0":50}}'},  # empty
        {"startingOffsets": '{"t":{"0":100}}', "endingOffsets": '{"t":{"1":50}}'},  # other part
        {"startingOffsets": '{"t":{"0":-2}}', "endingOffsets": '{"t":{"0":-1}}'},
        {"startingTimestamp": "5", "endingTimestamp": "5"},
    ],
)
def test_possible_ranges_parse(options: dict[str, str]) -> None:
    parse_read_options(options)


@pytest.fixture
def two_segments(make_partition: Callable[..., Any], log_dir: Path) -> Path:
    """t-0: offsets 0..29 in batches of 10 over two segments (base offsets 0 and 20)."""
    part = make_partition("t-0", segment_bytes=400)
    for first in range(0, 30, 10):
        part.batch([1000 + first + i for i in range(10)])
    part.close()
    bases = sorted(int(Path(p).stem) for p in glob.glob(str(log_dir / "t-0" / "*.log")))
    assert len(bases) >= 2
    return log_dir


def test_log_end_offset(two_segments: Path) -> None:
    filesystem = pafs.LocalFileSystem()
    (part,) = discover(str(two_segments), filesystem)
    assert log_end_offset(filesystem, part.segments[-1]) == 30
    # a torn tail (a prefix that claims more bytes than the file holds) is not a known end
    torn = Path(part.segments[-1].path)
    torn.write_bytes(torn.read_bytes() + b"\x00" * 8 + b"\x00\x00\x10\x00")
    (part,) = discover(str(two_segments), filesystem)
    assert log_end_offset(filesystem, part.segments[-1]) is None


def test_start_past_the_end_is_an_error(two_segments: Path) -> None:
    with pytest.raises(InvalidOptionError) as info:
        read_table(str(two_segments), startingOffsets='{"t":{"0":31}}')
    assert str(info.value).startswith(BEGIN_AFTER_END.format(31, 30, "t", 0))
    assert "log end offset" in str(info.value)


def test_start_at_the_end_is_empty(two_segments: Path) -> None:
    assert read_table(str(two_segments), startingOffsets='{"t":{"0":30}}').num_rows == 0
    table = read_table(str(two_segments), startingOffsets='{"t":{"0":29}}')
    assert table["offset"].to_pylist() == [29]


def test_start_after_a_resolved_end_is_an_error(two_segments: Path) -> None:
    # endingTimestamp 1005 resolves to offset 5, after which startingOffsets 12 cannot begin
    with pytest.raises(InvalidOptionError) as info:
        read_table(str(two_segments), startingOffsets='{"t":{"0":12}}', endingTimestamp="1005")
    assert str(info.value).startswith(BEGIN_AFTER_END.format(12, 5, "t", 0))


def test_overlapping_paths_read_each_segment_once(sample_dir: Path) -> None:
    whole = read_table(str(sample_dir), columns=["topic", "partition", "offset"])
    logs = sorted(glob.glob(str(sample_dir / "orders-0" / "*.log")))
    overlapping = [
        str(sample_dir),
        str(sample_dir / "orders-0"),
        logs[1],
        str(sample_dir / "orders-*"),
    ]
    assert read_table(overlapping, columns=["topic", "partition", "offset"]).equals(whole)
    one = read_table([logs[1], str(sample_dir / "orders-0")], columns=["offset"])
    assert one.equals(read_table(str(sample_dir / "orders-0"), columns=["offset"]))


def test_merge_partitions_unions_segments(sample_dir: Path) -> None:
    filesystem = pafs.LocalFileSystem()
    logs = sorted(glob.glob(str(sample_dir / "orders-0" / "*.log")))
    found = discover(logs[2], filesystem) + discover(logs[0], filesystem)
    (merged,) = merge_partitions(found)
    assert [seg.path for seg in merged.segments] == [logs[0], logs[2]]
    assert (merged.topic, merged.partition) == ("orders", 0)


@pytest.mark.parametrize("iteration", ["deep", "shallow"])
def test_empty_column_list_keeps_the_row_count(sample_dir: Path, iteration: str) -> None:
    expected = read_table(str(sample_dir), columns=["offset"], iteration=iteration).num_rows
    table = read_table(str(sample_dir), columns=[], iteration=iteration)
    assert table.num_columns == 0
    assert table.num_rows == expected > 0


def test_log_end_offset_is_not_taken_from_a_damaged_index(tmp_path: Path) -> None:
    """Fuzz 2006:47229: the last ``.index`` entry pointed inside a batch, at bytes that frame
    one "entry" reaching exactly the end of the file; its offset field became the log end and a
    valid startingOffsets was refused. An index position is used only where a checksum-valid
    entry starts; otherwise the hop starts at byte 0."""
    import pyarrow as pa

    from kafka_segments_ds import write_table

    def write(fake: bytes) -> bytes:
        values = [b"value-%d" % i for i in range(5)] + [fake]
        write_table(pa.table({"value": pa.array(values, pa.binary())}), tmp_path, topic="t")
        return (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()

    marker = b"\x7f" * 8  # the fake entry's offset field: 2**63 - 1 - ...
    data = write(marker + b"\x00" * 24)
    position = data.index(marker)
    size = len(data) - position - 12
    fake = marker + size.to_bytes(4, "big") + b"\x00" * 20
    for child in (tmp_path / "t-0").iterdir():
        child.unlink()
    (tmp_path / "t-0").rmdir()
    data = write(fake)
    assert data.index(marker) == position and len(data) == position + 12 + size
    index = tmp_path / "t-0" / "00000000000000000000.index"
    index.write_bytes((5).to_bytes(4, "big") + position.to_bytes(4, "big"))
    filesystem = pafs.LocalFileSystem()
    (part,) = discover(str(tmp_path), filesystem)
    assert log_end_offset(filesystem, part.segments[-1]) == 6
    got = read_table(str(tmp_path), startingOffsets='{"t":{"0":3}}')
    assert got.column("offset").to_pylist() == [3, 4, 5]
    # a last entry whose checksum fails gives no end (the reader reports the damage)
    damaged = bytearray(data)
    damaged[-2] ^= 0xFF
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(bytes(damaged))
    (part,) = discover(str(tmp_path), filesystem)
    assert log_end_offset(filesystem, part.segments[-1]) is None


# -- issue 23 point 5: the log end follows the reader's own ordering rules --------------------


def _batch(first: int, n: int) -> bytes:
    specs = [RecordSpec(b"v%d" % (first + i), key=b"k", timestamp=1000 + i) for i in range(n)]
    return encode_batch(specs, base_offset=first)


def _backwards_log(tmp_path: Path, where: str, indexed: bool) -> tuple[Path, int]:
    """t-0 holding offsets 0..23 (batches 0..9, 10..19, 20..23) and a checksum-valid batch
    0..3 whose offsets go back, at the end or before 20..23; with ``indexed`` an .index whose
    last entry points at that batch with an offset of 27, as the independent fuzz input's
    did. Returns (partition directory, position of the backwards batch)."""
    good = [_batch(0, 10), _batch(10, 10), _batch(20, 4)]
    back = _batch(0, 4)
    entries = [*good, back] if where == "end" else [*good[:2], back, good[2]]
    position = sum(len(e) for e in entries[: entries.index(back)])
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(b"".join(entries))
    if indexed:
        lasts = [9, 19, 23, 27] if where == "end" else [9, 19, 27, 28]
        at = 0
        index = b""
        for entry, last in zip(entries, lasts, strict=True):
            if at:
                index += struct.pack(">ii", last, at)
            at += len(entry)
        (directory / "00000000000000000000.index").write_bytes(index)
    return directory, position


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "no-index"])
@pytest.mark.parametrize("where", ["end", "middle"])
def test_log_end_skips_a_batch_whose_offsets_go_back(
    tmp_path: Path, where: str, indexed: bool
) -> None:
    """The reader drops a checksum-valid batch whose offsets go back (DROPMALFORMED) or fails
    on it (FAILFAST): it is not the log end offset either. It was: "Beginning offset 10 is
    after the ending offset 4" refused a valid startingOffsets."""
    directory, position = _backwards_log(tmp_path, where, indexed)
    filesystem = pafs.LocalFileSystem()
    (part,) = discover(str(tmp_path), filesystem)
    assert log_end_offset(filesystem, part.segments[-1]) == 24
    got = read_table(str(tmp_path), mode="DROPMALFORMED", startingOffsets='{"t":{"0":10}}')
    assert got.column("offset").to_pylist() == list(range(10, 24))
    with pytest.raises(CorruptSegmentError, match="offsets not increasing") as info:
        read_table(str(tmp_path), startingOffsets='{"t":{"0":10}}')
    log = str(directory / "00000000000000000000.log")
    assert (info.value.path, info.value.position, info.value.offset) == (log, position, 0)
    with pytest.raises(InvalidOptionError) as refused:
        read_table(str(tmp_path), mode="DROPMALFORMED", startingOffsets='{"t":{"0":25}}')
    assert str(refused.value).startswith(BEGIN_AFTER_END.format(25, 24, "t", 0))


def test_writer_does_not_append_after_a_batch_whose_offsets_go_back(tmp_path: Path) -> None:
    """The writer's append took its next offset from the last checksum-valid entry: after a
    batch 0..3 following 0..23 it would have given new records offsets 4, 5, ... The reader
    drops that batch (or fails on it): the writer refuses to append, naming where."""
    import pyarrow as pa

    from kafka_segments_ds import write_table

    directory, position = _backwards_log(tmp_path, "end", indexed=True)
    before = (directory / "00000000000000000000.log").read_bytes()
    with pytest.raises(CorruptSegmentError, match="cannot append after a damaged") as info:
        write_table(pa.table({"value": pa.array([b"x"], pa.binary())}), tmp_path, topic="t")
    assert info.value.position == position
    assert (directory / "00000000000000000000.log").read_bytes() == before
