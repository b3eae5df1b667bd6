"""The latest offset of a stream, and the log end of the ``startingOffsets`` check, are 1 + the
last offset of the last batch the reader returns (kafka_segments_ds.tail): a batch whose
records do not decode is dropped by the reader, and the batches after it whose offsets go back
from it are returned (fuzz 515151:39109); a batch whose offsets go back over one the reader
returns is dropped, whatever its last offset (the reverted b81c39b lost appended records).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import InvalidOptionError, read_table
from kafka_segments_ds.layout import discover, segment_file_name
from kafka_segments_ds.options import ReadOptions, parse_read_options, parse_stream_options
from kafka_segments_ds.ranges import log_end_offset
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_legacy_message
from kafka_segments_ds.records.checksums import crc32c
from kafka_segments_ds.records.compression import CompressionType
from kafka_segments_ds.streaming.planner import StreamPlanner
from kafka_segments_ds.tail import NO_FLOOR, records_decode
from tests.fuzz.corpus import legacy_wrapper
from tests.fuzz.judge import make_input

TP = ("t", 0)


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.ERROR, logger="kafka_segments_ds")
    yield


def batch(first: int, last: int) -> bytes:
    """A batch of records first..last, one per offset."""
    specs = [
        RecordSpec(key=b"k", value=b"v%d" % o, timestamp=1000 + o) for o in range(first, last + 1)
    ]
    return encode_batch(specs, base_offset=first)


def undecodable(first: int, last: int) -> bytes:
    """A checksum-valid batch first..last whose first record's length field is -1: the reader
    drops it (the record kernel refuses it), the tail walk's checksum and offsets accept it."""
    data = bytearray(batch(first, last))
    data[61] = 0x01  # zigzag varint -1
    data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    return bytes(data)


def log_dir(tmp_path: Path, *entries: bytes) -> tuple[Path, Path]:
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    log = part / segment_file_name(0, ".log")
    log.write_bytes(b"".join(entries))
    return tmp_path / "logs", log


def dropping_planner(logs: Path) -> StreamPlanner:
    dropping, limits = parse_stream_options({"mode": "DROPMALFORMED"})
    return StreamPlanner([str(logs)], dropping, limits)


def streamed(planner: StreamPlanner, start: int, end: int) -> list[int]:
    return [
        o
        for tasks in planner.plan({TP: start}, {TP: end}, 1)
        for b in read_tasks(tasks, planner.options, ("offset",))
        for o in b.column(0).to_pylist()
    ]


def batch_offsets(logs: Path, **options: str) -> list[int]:
    table = read_table(str(logs), mode="DROPMALFORMED", **options)
    return table.column("offset").to_pylist()


def log_end(logs: Path, options: ReadOptions | None = None) -> int | None:
    filesystem = pafs.LocalFileSystem()
    (part,) = discover(str(logs), filesystem)
    if options is None:
        return log_end_offset(filesystem, part.segments[-1])
    return log_end_offset(filesystem, part.segments[-1], options)


def test_a_stream_emits_what_follows_a_batch_that_does_not_decode(tmp_path: Path) -> None:
    """515151:39109 -- the checksum-valid batch at 129 (offset 10) holds records that do not
    decode: the reader returns the batches after it, 3..4 up to 10..16 (rows up to 15). The
    stream's latest offset stopped at 11: rows 12 and 15 were never emitted."""
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    (part / segment_file_name(0, ".log")).write_bytes(make_input(515151, 39109)["mutant"].data)
    rows = [0, 1, 2, 3, 4, 6, 7, 10, 12, 15]
    assert batch_offsets(tmp_path / "logs") == rows
    planner = dropping_planner(tmp_path / "logs")
    assert planner.next_offsets({TP: 0}) == {TP: 17}
    assert streamed(planner, 0, 17) == rows
    assert log_end(tmp_path / "logs") == 17


def test_a_batch_going_back_over_a_returned_one_does_not_move_the_latest_offset(
    tmp_path: Path,
) -> None:
    """A 0..10, B 5..20 (goes back: the reader drops it), C 11..12: the latest offset is 13,
    and 13..20 appended later are all emitted. Bounding the latest offset by every
    checksum-valid entry passed over (b81c39b, reverted) made it 21 and lost them."""
    logs, log = log_dir(tmp_path, batch(0, 10), batch(5, 20), batch(11, 12))
    assert batch_offsets(logs) == list(range(13))
    planner = dropping_planner(logs)
    assert planner.next_offsets({TP: 0}) == {TP: 13}
    assert streamed(planner, 0, 13) == list(range(13))
    with log.open("ab") as f:
        f.write(batch(13, 20))
    assert planner.next_offsets({TP: 13}) == {TP: 21}
    assert streamed(planner, 13, 21) == list(range(13, 21))
    assert batch_offsets(logs) == list(range(21))


def test_starting_offsets_past_what_the_reader_returns_are_refused(tmp_path: Path) -> None:
    """The same log: its end is 13, not 21 (B's last offset + 1, the lenient bound that let a
    start of 15 read 0 rows without a word)."""
    logs, _ = log_dir(tmp_path, batch(0, 10), batch(5, 20), batch(11, 12))
    for start in (14, 15, 20):
        with pytest.raises(InvalidOptionError, match=r"log end offset of .* is 13: "):
            batch_offsets(logs, startingOffsets=f'{{"t":{{"0":{start}}}}}')
    assert batch_offsets(logs, startingOffsets='{"t":{"0":12}}') == [12]
    assert batch_offsets(logs, startingOffsets='{"t":{"0":13}}') == []
    assert log_end(logs) == 13


def test_a_last_batch_that_does_not_decode_is_not_the_latest_offset(tmp_path: Path) -> None:
    """A 0..10, then U 11..20 whose records do not decode: the reader returns 0..10, so the
    latest offset is 11 (it was 21), and C 15..16 appended after U, which the reader returns,
    is emitted (the tail walk passed over it as going back from U: never emitted)."""
    logs, log = log_dir(tmp_path, batch(0, 10), undecodable(11, 20))
    assert batch_offsets(logs) == list(range(11))
    planner = dropping_planner(logs)
    assert planner.next_offsets({TP: 0}) == {TP: 11}
    assert log_end(logs) == 11
    with pytest.raises(InvalidOptionError, match=r"log end offset of .* is 11: "):
        batch_offsets(logs, startingOffsets='{"t":{"0":15}}')
    with log.open("ab") as f:
        f.write(batch(15, 16))
    assert batch_offsets(logs) == [*range(11), 15, 16]
    assert planner.next_offsets({TP: 11}) == {TP: 17}
    assert streamed(planner, 11, 17) == [15, 16]
    assert log_end(logs) == 17
    # shallow iteration does not decode records: the reader returns U (one row per batch, its
    # last offset) and drops C, and so does the log end
    assert batch_offsets(logs, iteration="shallow") == [10, 20]
    assert log_end(logs, parse_read_options({"iteration": "shallow"})) == 21


def test_a_micro_batch_is_not_cut_at_a_dropped_batch_at_its_end_offset(tmp_path: Path) -> None:
    """A 0..2, U 10..10 whose records do not decode, C 4..7, D 8..9 (20260601:94, a
    decompression bomb): the reader returns A, C and D, so the latest offset is 10. A
    micro-batch [0, 10) bounded by end offset 10 ended at U (its first offset is 10) and
    returned 0..2 only, and 4..9 were never emitted."""
    logs, _ = log_dir(tmp_path, batch(0, 2), undecodable(10, 10), batch(4, 7), batch(8, 9))
    rows = [0, 1, 2, *range(4, 10)]
    assert batch_offsets(logs) == rows
    planner = dropping_planner(logs)
    assert planner.next_offsets({TP: 0}) == {TP: 10}
    assert streamed(planner, 0, 10) == rows
    assert streamed(planner, 3, 10) == rows[3:]
    assert log_end(logs) == 10


def test_unchecked_checksums_keep_the_entries_the_walk_passed_over(tmp_path: Path) -> None:
    """verifyChecksums=false (424242:15801): the reader returns A 0..1 whose checksum fails,
    which the tail walk passes over, and drops U 2..3 whose records do not decode. Decoding U
    took the latest offset back to 0 (A never emitted); the walk now counts A as the reader
    returns it, so the latest offset is 2, exactly."""
    a = bytearray(batch(0, 1))
    a[17] ^= 0xFF  # the stored CRC
    logs, _ = log_dir(tmp_path, bytes(a), undecodable(2, 3))
    assert batch_offsets(logs, verifyChecksums="false") == [0, 1]
    unchecked, limits = parse_stream_options({"mode": "DROPMALFORMED", "verifyChecksums": "false"})
    planner = StreamPlanner([str(logs)], unchecked, limits)
    assert planner.next_offsets({TP: 0}) == {TP: 2}
    assert streamed(planner, 0, 2) == [0, 1]


def test_a_legacy_wrapper_the_reader_drops_does_not_hold_the_log_end(tmp_path: Path) -> None:
    """20261126:5886 -- a gzip wrapper (offset 0) whose contents expand past
    maxDecompressedBytes is dropped by the reader, which then returns batch 0..3 after it. The
    tail walk counted the wrapper on its checksum, so batch 0..3 went back over it and the log
    end was 1: a startingOffsets of 3 (a row the reader returns) was refused."""
    inner = encode_legacy_message(offset=0, magic=1, key=None, value=b"x" * 4096, timestamp=1)
    wrapper = legacy_wrapper(inner, last_offset=0, magic=1, codec=CompressionType.GZIP)
    logs, _ = log_dir(tmp_path, wrapper, batch(0, 3))
    limit = {"maxDecompressedBytes": "1024"}
    assert batch_offsets(logs, **limit) == [0, 1, 2, 3]
    assert batch_offsets(logs, startingOffsets='{"t":{"0":3}}', **limit) == [3]
    assert log_end(logs, parse_read_options({"mode": "DROPMALFORMED", **limit})) == 4
    dropping, limits = parse_stream_options({"mode": "DROPMALFORMED", **limit})
    planner = StreamPlanner([str(logs)], dropping, limits)
    assert planner.next_offsets({TP: 0}) == {TP: 4}
    assert streamed(planner, 0, 4) == [0, 1, 2, 3]
    # within the limit the wrapper's message is returned and the batch goes back over it
    assert batch_offsets(logs) == [0]
    assert log_end(logs, parse_read_options({"mode": "DROPMALFORMED"})) == 1


def test_unchecked_checksums_emit_each_row_once(tmp_path: Path) -> None:
    """verifyChecksums=false: A 0..2, C 3..5 whose checksum fails (its records decode), E 1..1
    (goes back: dropped). The reader returns C. When the tail walk passed over it (latest offset
    3), the micro-batch [0, 3) was cut at the tail's position only and emitted 0..5, and once
    F 6..8 was appended, [3, 9) emitted 3..5 again. The walk counts C now: latest offset 6."""
    c = bytearray(batch(3, 5))
    at = bytes(c).index(b"v4")
    c[at + 1] ^= 0x01  # "v4" -> "v5": the CRC fails, the records decode
    logs, log = log_dir(tmp_path, batch(0, 2), bytes(c), batch(1, 1))
    assert batch_offsets(logs, verifyChecksums="false") == list(range(6))
    unchecked, limits = parse_stream_options({"mode": "DROPMALFORMED", "verifyChecksums": "false"})
    planner = StreamPlanner([str(logs)], unchecked, limits)
    assert planner.next_offsets({TP: 0}) == {TP: 6}
    assert streamed(planner, 0, 6) == list(range(6))
    with log.open("ab") as f:
        f.write(batch(6, 8))
    assert planner.next_offsets({TP: 6}) == {TP: 9}
    assert streamed(planner, 6, 9) == [6, 7, 8]


def legacy_messages(offsets: range) -> bytes:
    return b"".join(
        encode_legacy_message(offset=o, magic=1, key=b"k", value=b"v%d" % o, timestamp=1000 + o)
        for o in offsets
    )


def gzip_wrapper(offsets: range) -> bytes:
    return legacy_wrapper(
        legacy_messages(offsets), last_offset=offsets[-1], magic=1, codec=CompressionType.GZIP
    )


def test_a_legacy_wrapper_whose_first_inner_offset_goes_back_does_not_move_the_log_end(
    tmp_path: Path,
) -> None:
    """Gzip wrappers W1 0..5, W2 3..8: the reader drops W2 (its first inner offset, 3, goes
    back), so the log end is 6. The tail walk compared W2's offset field (8) only and said 9:
    startingOffsets 7 to 9 were accepted and read no row."""
    logs, _ = log_dir(tmp_path, gzip_wrapper(range(6)), gzip_wrapper(range(3, 9)))
    assert batch_offsets(logs) == list(range(6))
    assert log_end(logs) == 6
    for start in (7, 9):
        with pytest.raises(InvalidOptionError, match=r"log end offset of .* is 6: "):
            batch_offsets(logs, startingOffsets=f'{{"t":{{"0":{start}}}}}')
    assert batch_offsets(logs, startingOffsets='{"t":{"0":6}}') == []
    planner = dropping_planner(logs)
    assert planner.next_offsets({TP: 0}) == {TP: 6}
    assert streamed(planner, 0, 6) == list(range(6))


def test_a_legacy_wrapper_goes_back_only_over_what_the_reader_returns(tmp_path: Path) -> None:
    """W1 0..2, G (offset 5) whose gzip payload does not decompress (dropped), W3 3..6: W3's
    first inner offset goes back over G, which the reader drops, not over W1: W3 is returned
    and the log end is 7."""
    garbage = encode_legacy_message(
        offset=5, magic=1, key=None, value=b"not gzip", timestamp=1005, attributes=1
    )
    logs, _ = log_dir(tmp_path, gzip_wrapper(range(3)), garbage, gzip_wrapper(range(3, 7)))
    assert batch_offsets(logs) == list(range(7))
    assert log_end(logs) == 7
    planner = dropping_planner(logs)
    assert planner.next_offsets({TP: 0}) == {TP: 7}
    assert streamed(planner, 0, 7) == list(range(7))


def unchecked_planner(logs: Path) -> StreamPlanner:
    unchecked, limits = parse_stream_options({"mode": "DROPMALFORMED", "verifyChecksums": "false"})
    return StreamPlanner([str(logs)], unchecked, limits)


def bad_checksum(first: int, last: int) -> bytes:
    """A batch first..last whose CRC fails and whose records decode."""
    data = bytearray(batch(first, last))
    at = bytes(data).index(b"v%d" % last)
    data[at] ^= 0x02  # "v5" -> "t5"
    return bytes(data)


@pytest.mark.parametrize(("case", "latest"), [("20261128:1108", 10), ("20261128:503", 5)])
def test_unchecked_streams_emit_what_the_batch_read_returns(
    case: str, latest: int, tmp_path: Path
) -> None:
    """verifyChecksums=false. 1108: batches 0..2, 3, 4..7, 8..9 whose CRC fails, 4..5 (goes
    back): the reader returns 8..9, the walk passed over it (latest offset 8, rows 8, 9 never
    emitted). 503: 0..1, 2, a gzip wrapper (offset 3) that does not decompress, 3..4: the
    reader drops the wrapper and returns 3..4; the walk did not decode (latest offset 4)."""
    seed, number = (int(x) for x in case.split(":"))
    made = make_input(seed, number)
    logs, log = log_dir(tmp_path)
    log.write_bytes(made["mutant"].data)
    options = {k: str(v).lower() for k, v in made["options"].items()}
    assert options["verifyChecksums"] == "false"
    assert batch_offsets(logs, **options) == list(range(latest))
    stream_options, limits = parse_stream_options({**options, "mode": "DROPMALFORMED"})
    planner = StreamPlanner([str(logs)], stream_options, limits)
    assert planner.next_offsets({TP: 0}) == {TP: latest}
    assert streamed(planner, 0, latest) == list(range(latest))


def test_an_unchecked_last_batch_whose_checksum_fails_is_emitted(tmp_path: Path) -> None:
    """verifyChecksums=false: 0..2, then 3..5 whose CRC fails ending the file in a nonzero
    byte: whole, returned by the reader, and emitted by the stream (latest offset 6, not 3)."""
    logs, _ = log_dir(tmp_path, batch(0, 2), bad_checksum(3, 5))
    assert batch_offsets(logs, verifyChecksums="false") == list(range(6))
    planner = unchecked_planner(logs)
    assert planner.next_offsets({TP: 0}) == {TP: 6}
    assert streamed(planner, 0, 6) == list(range(6))


@pytest.mark.parametrize(("hole", "zeros_after"), [(-10, 4096), (-10, 0), (-20, 4096)])
def test_an_unchecked_entry_still_being_written_waits(
    hole: int, zeros_after: int, tmp_path: Path
) -> None:
    """verifyChecksums=false: 0..2, then 3..5 with 10 bytes not written yet (zeros; its CRC
    fails) at its end or 10 bytes before it, followed by a preallocated segment's zeros to the
    end of the file, or ending the file (its last bytes zeros): it may still be being written,
    so the latest offset stays 3; once written, it is 6 and 3..5 are emitted once. The records
    decode (the zeros fall in the last record's value): only the zeros tell it is not whole."""
    specs = [
        RecordSpec(key=b"k", value=b"v%d" % o + b"x" * 30, timestamp=1000 + o) for o in (3, 4, 5)
    ]
    whole = encode_batch(specs, base_offset=3)
    torn = whole[:hole] + bytes(10) + whole[len(whole) + hole + 10 :]
    assert len(torn) == len(whole)
    assert torn.endswith(bytes(10)) == (hole == -10)
    assert records_decode(1 << 20)(np.frombuffer(torn, np.uint8), NO_FLOOR)
    logs, log = log_dir(tmp_path, batch(0, 2), torn, bytes(zeros_after))
    planner = unchecked_planner(logs)
    assert planner.next_offsets({TP: 0}) == {TP: 3}
    assert streamed(planner, 0, 3) == [0, 1, 2]
    with log.open("r+b") as f:
        f.seek(len(batch(0, 2)))
        f.write(whole)
    assert planner.next_offsets({TP: 3}) == {TP: 6}
    assert streamed(planner, 3, 6) == [3, 4, 5]
