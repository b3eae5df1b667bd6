"""The latest offset of a stream's partition (the tail of its active segment) past damage.

Where the framing of the active segment breaks before its end, the batch reader's damage rules
decide: an append in progress (an entry cut short by the end of the file, zeros of a
preallocated segment) ends the data; damage raises in FAILFAST mode, naming the file, byte
position and offset, and is passed over in DROPMALFORMED mode, so the micro-batches read every
intact record and a damaged segment never holds the partition back until it rolls.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.errors import CorruptSegmentError, UnsupportedFormatError
from kafka_segments_ds.layout import discover, segment_file_name
from kafka_segments_ds.options import parse_stream_options
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.streaming.planner import StreamPlanner, scan_tail

TS0 = 1_700_000_000_000
PER_BATCH = 3


def batch(first: int) -> bytes:
    specs = [
        RecordSpec(key=b"k", value=b"v%d" % o, timestamp=TS0 + o)
        for o in range(first, first + PER_BATCH)
    ]
    return encode_batch(specs, base_offset=first)


def active_segment(tmp_path: Path, batches: int) -> tuple[Path, list[int]]:
    """A partition directory t-0 whose one (active) segment holds ``batches`` batches of 3
    records; the batches' byte positions."""
    directory = tmp_path / "logs" / "t-0"
    directory.mkdir(parents=True)
    data, positions = b"", []
    for i in range(batches):
        positions.append(len(data))
        data += batch(i * PER_BATCH)
    (directory / segment_file_name(0, ".log")).write_bytes(data)
    return directory / segment_file_name(0, ".log"), positions


def damage(path: Path, position: int, replacement: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[position : position + len(replacement)] = replacement
    path.write_bytes(bytes(data))


def append(path: Path, first: int, count: int) -> None:
    with path.open("ab") as f:
        for i in range(count):
            f.write(batch(first + i * PER_BATCH))


def streamed(planner: StreamPlanner, start: dict, end: dict) -> list[int]:
    return sorted(
        o
        for tasks in planner.plan(start, end, 2)
        for b in read_tasks(tasks, planner.options, ("offset",))
        for o in b.column(0).to_pylist()
    )


# the size field of the third batch: below the minimum (bad framing), or past the end of the
# file with the valid batches after it (a damaged size field the reader proves)
DAMAGES = {
    "size-below-minimum": (8, (5).to_bytes(4, "big")),
    "size-past-the-end": (8, (1 << 30).to_bytes(4, "big")),
    "unknown-magic": (16, b"\x07"),
}


@pytest.fixture(params=DAMAGES.values(), ids=DAMAGES.keys())
def damaged(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, int, bytes]:
    """An active segment of 5 batches whose third is damaged: (.log, its position, the
    bytes written over it)."""
    where, replacement = request.param
    log, positions = active_segment(tmp_path, 5)
    damage(log, positions[2] + where, replacement)
    return log, positions[2], replacement


def test_failfast_stream_raises_at_damage_in_the_active_segment(
    tmp_path: Path, damaged: tuple[Path, int, bytes]
) -> None:
    log, position, replacement = damaged
    planner = StreamPlanner([str(tmp_path / "logs")], *parse_stream_options({}))
    expected = UnsupportedFormatError if replacement == b"\x07" else CorruptSegmentError
    with pytest.raises(expected) as caught:
        planner.next_offsets({("t", 0): 0})
    assert (caught.value.path, caught.value.position, caught.value.offset) == (
        str(log),
        position,
        6,
    )
    # the batch reader says the same of the same bytes
    with pytest.raises(expected) as batch_error:
        read_table(str(tmp_path / "logs"))
    assert str(batch_error.value) == str(caught.value)


def test_dropmalformed_stream_goes_past_damage_in_the_active_segment(
    tmp_path: Path, damaged: tuple[Path, int, bytes]
) -> None:
    log = damaged[0]
    planner = StreamPlanner(
        [str(tmp_path / "logs")],
        *parse_stream_options({"startingOffsets": "earliest", "mode": "DROPMALFORMED"}),
    )
    start = planner.initial_offsets()
    assert start == {("t", 0): 0}
    end = planner.next_offsets(start)
    assert end == {("t", 0): 15}
    intact = [0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 14]
    assert streamed(planner, start, end) == intact
    batch_read = read_table(str(tmp_path / "logs"), mode="DROPMALFORMED", columns=["offset"])
    assert batch_read.column("offset").to_pylist() == intact
    # appends after the damage: the next trigger reads them (the tail walks on from its end)
    append(log, 15, 2)
    after = planner.next_offsets(end)
    assert after == {("t", 0): 21}
    assert streamed(planner, end, after) == list(range(15, 21))


def test_an_append_in_progress_is_not_damage(tmp_path: Path) -> None:
    """FAILFAST: a batch cut short by the end of the file (a broker appending), or a head not
    yet whole, ends the data quietly; the batch counts once whole."""
    log, _ = active_segment(tmp_path, 2)
    rest = batch(6)
    planner = StreamPlanner([str(tmp_path / "logs")], *parse_stream_options({}))
    for cut in (5, 16, 30, len(rest) - 1):
        with log.open("ab") as f:
            f.write(rest[:cut])
        assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 6}
        with log.open("r+b") as f:
            f.truncate(log.stat().st_size - cut)
    append(log, 6, 1)
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 9}


def test_a_preallocated_segment_written_in_place(tmp_path: Path) -> None:
    """Zeros after the entries (log.preallocate=true) end the data; entries written over
    them are found at later triggers, without any error in FAILFAST mode."""
    log, _ = active_segment(tmp_path, 2)
    written = log.stat().st_size
    with log.open("ab") as f:
        f.write(bytes(4096))
    planner = StreamPlanner([str(tmp_path / "logs")], *parse_stream_options({}))
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 6}
    more = batch(6) + batch(9)
    with log.open("r+b") as f:
        f.seek(written)
        f.write(more[:20])  # a head being written: not damage
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 6}
    with log.open("r+b") as f:
        f.seek(written)
        f.write(more)
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 12}


def test_scan_tail_of_damage_is_logged_once_and_remembered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """DROPMALFORMED: the damage is logged when the tail walk passes it, and the tail it
    gives is walked on from, not past the damage again."""
    log, positions = active_segment(tmp_path, 4)
    damage(log, positions[1] + 8, (5).to_bytes(4, "big"))
    filesystem = pafs.LocalFileSystem()
    options, _ = parse_stream_options({"mode": "DROPMALFORMED"})
    seg = discover(str(tmp_path / "logs"), filesystem)[0].segments[-1]
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.reader.damage"):
        tail = scan_tail(filesystem, seg, None, options)
    assert (tail.end_position, tail.next_offset) == (seg.size, 12)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "dropping malformed entry",
        str(log),
    ]
    caplog.clear()
    append(log, 12, 1)
    seg = discover(str(tmp_path / "logs"), filesystem)[0].segments[-1]
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.reader.damage"):
        grown = scan_tail(filesystem, seg, tail, options)
    assert (grown.end_position, grown.next_offset) == (seg.size, 15)
    assert caplog.records == []


@pytest.mark.parametrize("where", ["end", "middle"])
def test_a_batch_whose_offsets_go_back_does_not_move_the_latest_offset(
    tmp_path: Path, where: str
) -> None:
    """A checksum-valid batch 0..2 after 0..11: the batch reader drops it (DROPMALFORMED) or
    fails on it (FAILFAST), and so does the tail walk. Its last offset used to become the
    partition's latest offset (3): the stream went back."""
    log, _ = active_segment(tmp_path, 4)
    back = len(log.read_bytes())
    with log.open("ab") as f:
        f.write(batch(0))
    if where == "middle":
        append(log, 12, 1)
    latest = 15 if where == "middle" else 12
    filesystem = pafs.LocalFileSystem()
    seg = discover(str(tmp_path / "logs"), filesystem)[0].segments[-1]
    dropping, _ = parse_stream_options({"mode": "DROPMALFORMED"})
    tail = scan_tail(filesystem, seg, None, dropping)
    assert (tail.end_position, tail.next_offset) == (seg.size, latest)
    planner = StreamPlanner([str(tmp_path / "logs")], dropping, parse_stream_options({})[1])
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): latest}
    # one task: a byte-range split starting at the backwards batch cannot tell it goes back
    tasks = planner.plan({("t", 0): 0}, {("t", 0): latest}, 1)
    got = [o for t in tasks for b in read_tasks(t, dropping, ("offset",)) for o in b[0].to_pylist()]
    assert got == list(range(latest))
    with pytest.raises(CorruptSegmentError, match="offsets not increasing") as caught:
        scan_tail(filesystem, seg, None, parse_stream_options({})[0])
    assert (caught.value.path, caught.value.position, caught.value.offset) == (str(log), back, 0)
    # walked on from a known tail, the same
    known = scan_tail(filesystem, replace(seg, size=back), None, dropping)
    assert known.next_offset == 12
    assert scan_tail(filesystem, seg, known, dropping).next_offset == latest


class _GrowsOnOpen:
    """A local filesystem whose file grows by ``more`` right after it is opened (a writer
    appending between the open, which takes the size, and the read)."""

    def __init__(self, path: Path, more: bytes) -> None:
        self.local, self.path, self.more = pafs.LocalFileSystem(), path, more

    def open_input_file(self, path: str) -> object:
        stream = self.local.open_input_file(path)
        if self.more:
            with self.path.open("ab") as f:
                f.write(self.more)
            self.more = b""
        return stream


def test_a_segment_growing_while_its_tail_is_read(tmp_path: Path) -> None:
    """tests/spark/test_streaming.py::...[append] failed once with "short read: asked for 13
    bytes, got 27": the tail ended in 13 bytes of a batch being written, the rest was written
    after the tail check opened the file, and the local read returned all 27 bytes asked for.
    The check reads the file as it was when opened; the next look sees the whole batch."""
    log, _ = active_segment(tmp_path, 2)
    rest = batch(6)
    with log.open("ab") as f:
        f.write(rest[:13])
    local = pafs.LocalFileSystem()
    seg = discover(str(tmp_path / "logs"), local)[0].segments[-1]
    known = scan_tail(local, seg)
    assert (known.end_position, known.next_offset, known.size) == (seg.size - 13, 6, seg.size)
    growing = _GrowsOnOpen(log, rest[13:])
    assert scan_tail(growing, seg, known) == known  # type: ignore[arg-type]
    grown = discover(str(tmp_path / "logs"), local)[0].segments[-1]
    assert grown.size == seg.size - 13 + len(rest)
    tail = scan_tail(local, grown, known)
    assert (tail.end_position, tail.next_offset) == (grown.size, 9)


@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED"])
def test_a_zero_filled_run_inside_the_log_is_damage_not_its_end(tmp_path: Path, mode: str) -> None:
    """Zeros over the third of five batches, with batches after them (a copy with a hole):
    the batch reader resynchronises past them (DROPMALFORMED) or names them (FAILFAST). The
    tail walk used to take them for a preallocated tail, and the stream waited at offset 6
    where the batch read returned 9..14 (fuzz 777:121). Zeros that run to the end of the file
    still end the data (test_a_preallocated_segment_written_in_place)."""
    log, positions = active_segment(tmp_path, 5)
    damage(log, positions[2], bytes(positions[3] - positions[2]))
    options, limits = parse_stream_options({"mode": mode})
    planner = StreamPlanner([str(tmp_path / "logs")], options, limits)
    if mode == "FAILFAST":
        with pytest.raises(CorruptSegmentError) as caught:
            planner.next_offsets({("t", 0): 0})
        assert (caught.value.path, caught.value.position) == (str(log), positions[2])
        with pytest.raises(CorruptSegmentError) as batch_error:
            read_table(str(tmp_path / "logs"))
        assert str(batch_error.value) == str(caught.value)
        return
    end = planner.next_offsets({("t", 0): 0})
    assert end == {("t", 0): 15}
    intact = [0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 14]
    assert streamed(planner, {("t", 0): 0}, end) == intact
    batch_read = read_table(str(tmp_path / "logs"), mode="DROPMALFORMED", columns=["offset"])
    assert batch_read.column("offset").to_pylist() == intact


def test_the_reader_is_asked_only_past_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A walk that stops at the end of the data (an entry being appended, a preallocated zero
    tail) counted every entry as the reader does: it does not read them a second time
    (ranges.reader_next_offset). One that went on past damage does."""
    from kafka_segments_ds.streaming import planner as module

    asked: list[tuple[int, int]] = []
    real = module.reader_next_offset

    def spy(filesystem, seg, start, next_offset, end, options, read_records):  # type: ignore[no-untyped-def]
        asked.append((start, end))
        return real(filesystem, seg, start, next_offset, end, options, read_records)

    monkeypatch.setattr(module, "reader_next_offset", spy)
    log, positions = active_segment(tmp_path, 3)
    options, limits = parse_stream_options({"mode": "DROPMALFORMED"})
    planner = StreamPlanner([str(tmp_path / "logs")], options, limits)
    with log.open("ab") as f:
        f.write(batch(9)[:30])  # being appended
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 9}
    with log.open("ab") as f:
        f.write(bytes(8192))  # and a preallocated tail after it
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 9}
    assert asked == []
    damage(log, positions[1] + 8, (5).to_bytes(4, "big"))  # damage inside: walked past
    planner = StreamPlanner([str(tmp_path / "logs")], options, limits)
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 9}
    assert asked == [(0, positions[2] + len(batch(6)))]
