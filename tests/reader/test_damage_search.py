"""Damaged input read with DROPMALFORMED: nothing invented, nothing lost (issue 23, point 5).

Each log is a fuzz input (run seed:input number, rebuilt by tests/fuzz) or the smallest log
showing the bug; each test pins the exact offsets.
"""

from __future__ import annotations

import itertools
import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import pytest

import kafka_segments_ds
from kafka_segments_ds import InvalidOptionError
from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import ChecksumError
from kafka_segments_ds.layout import discover
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.planning import plan_scan
from kafka_segments_ds.ranges import log_end_offset
from kafka_segments_ds.reader.damage import DamageKind, collect_damage
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import as_array, scan_entries
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_legacy_message
from tests.fuzz.corpus import TS, legacy_wrapper, v2
from tests.fuzz.judge import make_input
from tests.reader.test_damage_events import in_memory_resync

SEGMENT = "00000000000000000000"


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.ERROR, logger="kafka_segments_ds")
    yield


def write(tmp_path: Path, data: bytes) -> str:
    part = tmp_path / "t-0"
    part.mkdir(exist_ok=True)
    (part / f"{SEGMENT}.log").write_bytes(data)
    return str(part)


def fuzz_log(tmp_path: Path, run_seed: int, number: int) -> str:
    return write(tmp_path, make_input(run_seed, number)["mutant"].data)


def offsets(path: str, **options: Any) -> list[int]:
    table = kafka_segments_ds.read_table(path, mode="DROPMALFORMED", **options)
    return table.column("offset").to_pylist()


def test_search_stops_where_a_passed_valid_entry_ends(tmp_path: Path) -> None:
    """2307:22073 -- after the damaged gzip wrapper at byte 40 the search passes the valid
    wrapper at 326 (it may be one of the damaged wrapper's inner messages), which ends at 475,
    where a wrapper with magic byte 100 and a size field leading exactly to the intact wrapper
    at 5623 starts. That entry is skipped whole: its message stored verbatim at 5550 (offset
    2^62 + 59) was returned and the wrapper at 5623 (offsets 11, 12) dropped."""
    path = fuzz_log(tmp_path, 2307, 22073)
    assert offsets(path) == [0, 11, 12]
    assert offsets(path, verifyChecksums=False) == [0, 11, 12]


def test_search_skips_a_bad_magic_wrapper_with_a_consistent_size(tmp_path: Path) -> None:
    """777001:164 -- a batch cut to 84 bytes (its size field leads nowhere) is followed by a
    snappy magic-1 wrapper whose magic byte is 19 and whose size field leads exactly to the end
    of the file. The search from byte 1 took the message stored verbatim at 20173 (offset 1): a
    phantom row. Nothing intact is in the file."""
    path = fuzz_log(tmp_path, 777001, 164)
    assert offsets(path) == []
    assert offsets(path, iteration="shallow") == []


def test_header_fields_of_a_damaged_batch_are_no_enclosing_wrapper(tmp_path: Path) -> None:
    """424242:19849 -- after the damaged batch at 420 the search finds the intact lz4 wrapper
    at 569 (offsets 10008..10010). Bytes inside the damaged batch's header at 436 read as an
    entry whose size field leads exactly to the end of the file; only a wrapper whose key and
    value lengths also end there holds the candidate verbatim, so the wrapper is kept."""
    path = fuzz_log(tmp_path, 424242, 19849)
    assert offsets(path) == [*range(8), 10008, 10009, 10010]


def test_pruning_for_the_start_offset_does_not_trust_a_damaged_size(tmp_path: Path) -> None:
    """777001:944 -- a batch cut to 27 bytes whose size field (133) still claims 145 bytes,
    then an intact batch of offsets 0..3 at byte 27. A read from offset 3 pruned the damaged
    batch (offsets 0..2, before the start) unchecked, so its size field framed the next entry
    at 145, inside the intact batch: offset 3 was lost."""
    path = fuzz_log(tmp_path, 777001, 944)
    assert offsets(path) == [0, 1, 2, 3]
    start = '{"t":{"0":3}}'
    assert offsets(path, startingOffsets=start) == [3]
    assert offsets(path, startingOffsets='{"t":{"0":1}}') == [1, 2, 3]
    assert offsets(path, startingOffsets=start, iteration="shallow") == [3]
    assert offsets(path, startingOffsets=start, verifyChecksums=False) == [3]


@pytest.mark.parametrize("with_index", [False, True], ids=["hop", "index"])
@pytest.mark.parametrize("limit", [100, 200])
def test_every_split_drops_a_batch_going_back(tmp_path: Path, limit: int, with_index: bool) -> None:
    """A checksum-valid batch 0..2 after batches 0..11: a whole-segment read drops it (offsets
    not increasing); a byte-range split starting at it returned its rows again. So does the
    batch 5..6 after it (5 is not above 11), and a piece cut right after the batch going back
    must know that too. Cut where the entries are walked, or at .index positions."""
    entries = [v2(0, 4), v2(4, 4), v2(8, 4), v2(0, 3), v2(5, 2), v2(12, 2)]
    data = b"".join(entries)
    path = write(tmp_path, data)
    if with_index:
        table = scan_entries(data)
        ordered = [0, 1, 2, 5]  # the entries a broker indexed: offsets increase
        index, _ = kidx.build_indexes(
            table.positions[ordered],
            table.sizes[ordered],
            table.last_offsets[ordered],
            table.max_timestamps[ordered],
            0,
            32,
        )
        (Path(path) / f"{SEGMENT}.index").write_bytes(index)
    whole = list(range(14))
    assert offsets(path) == whole
    assert offsets(path, maxBytesPerPartition=limit) == whole
    assert offsets(path, maxBytesPerPartition=limit, iteration="shallow") == [3, 7, 11, 13]


def test_a_deep_read_from_an_offset_drops_an_undecodable_batch_before_it(tmp_path: Path) -> None:
    """99:774 -- the checksum-valid batch at 0 (offsets 0..2) holds records that do not decode,
    a damaged batch follows, then a batch of offsets 0..3. The whole read drops the batch at 0,
    so 0..3 follows in order. A read from offset 3 pruned the batch at 0 undecoded: its offsets
    moved the order check on and the batch 0..3 was dropped as going back (offset 3 lost)."""
    path = fuzz_log(tmp_path, 99, 774)
    assert offsets(path) == [0, 1, 2, 3]
    assert offsets(path, startingOffsets='{"t":{"0":3}}') == [3]


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ((515151, 44564), [0, 1, 2, 3, 4]),
        ((515151, 48828), [0, 1, 8, 9, 10]),
        ((515151, 88992), [0, 1, 2, 3, 4, 8, 9]),
    ],
    ids=["44564", "48828", "88992"],
)
def test_search_skips_a_bad_magic_wrapper_at_a_passed_entrys_end(
    tmp_path: Path, case: tuple[int, int], expected: list[int]
) -> None:
    """515151:44564 -- after the damaged batch at 138 the search passes the valid batch at 240
    (offset 2, not above 2), which ends at 6457, where a gzip wrapper with magic byte 109 and a
    size field leading exactly to the intact batch at 26600 (offsets 3, 4) starts. Its inner
    messages, stored verbatim, chain only to 26596 (the payload's last 4 bytes are no message),
    so the wrapper was not seen as enclosing them: two phantom rows were returned and the batch
    at 26600 dropped. :48828 and :88992 are the same shape (collide + badmagic)."""
    path = fuzz_log(tmp_path, *case)
    assert offsets(path) == expected
    assert offsets(path, verifyChecksums=False) == expected


@pytest.mark.parametrize(
    ("case", "expected", "unverified"),
    [
        ((515151, 122538), [*range(5), *range(7, 13), *range(18, 23)], None),
        ((424242, 102607), [*range(10), *range(10005, 10011)], [10011, 10012]),
    ],
    ids=["122538", "102607"],
)
def test_a_consistent_entry_ending_the_file_carries_the_proof_of_damage(
    tmp_path: Path, case: tuple[int, int], expected: list[int], unverified: list[int] | None
) -> None:
    """515151:122538 -- a compressed wrapper (a bomb) at 454 whose size field runs past the end
    of the file, then intact wrappers at 5040 and 5190 (offsets 18..22) that may be its inner
    messages, then a wrapper with magic byte 100 whose size field leads exactly to the end of
    the file. The chain of valid entries from 5040 stopped at that wrapper, so the bomb was
    taken for a truncated tail and 18..22 lost; a consistent entry is skipped whole and the
    chain goes on to the end. 424242:102607: the same with a legacy message whose CRC is
    damaged as the entry ending the file (read without checksums it is returned)."""
    path = fuzz_log(tmp_path, *case)
    assert offsets(path) == expected
    assert offsets(path, verifyChecksums=False) == expected + (unverified or [])


def test_log_end_counts_entries_after_an_undecodable_batch(tmp_path: Path) -> None:
    """515151:39109 -- the checksum-valid batch at 129 (offset 10) holds records that do not
    decode, so the reader drops it and returns the batches after it, 3..4 up to 10..16 (rows
    up to 15). The tail walk counted the batch at 129 and passed over the rest as going back:
    the log end was 11 and a read from offset 15 was refused as past the end of the log."""
    path = fuzz_log(tmp_path, 515151, 39109)
    rows = [0, 1, 2, 3, 4, 6, 7, 10, 12, 15]
    assert offsets(path) == rows
    filesystem = pafs.LocalFileSystem()
    (part,) = discover(str(tmp_path), filesystem)
    assert log_end_offset(filesystem, part.segments[-1]) == 17
    assert offsets(path, startingOffsets='{"t":{"0":15}}') == [15]
    assert offsets(path, startingOffsets='{"t":{"0":17}}') == []
    with pytest.raises(InvalidOptionError, match=r"log end offset of .* is 17"):
        offsets(path, startingOffsets='{"t":{"0":18}}')


def test_a_cut_batch_checksum_valid_over_the_next_one_does_not_hide_it(tmp_path: Path) -> None:
    """616161:140956 -- the checksum-valid batch at 38 (offset 10, records that do not decode)
    was cut to 140 bytes, but its size field leads to 181, 3 bytes into the intact batch at 178
    (offsets 0..2), whose first 3 bytes equal the 3 cut (zeros). The reader skipped the batch
    at 38 whole to 181, found an unknown magic byte there and no entry after it: 0..2 lost."""
    path = fuzz_log(tmp_path, 616161, 140956)
    assert offsets(path) == [0, 1, 2]
    assert offsets(path, startingOffsets='{"t":{"0":1}}') == [1, 2]


def test_an_overlapped_batch_is_read_only_at_the_next_offset(tmp_path: Path) -> None:
    """20261126:107090 -- reading stood at byte 171, an unknown magic byte; one byte back, a
    checksum-valid batch (record key-10003) whose offset field no CRC covers was damaged: its
    first byte (borrowed from the entry before) matched the next offset's, the rest did not.
    Read there, it returned record 10003 at offset 565157600297491, and the batches 10004..10009
    after it were dropped as going back. Its base offset must be the next offset itself."""
    path = fuzz_log(tmp_path, 20261126, 107090)
    assert offsets(path) == [0, 1, 2, 3, 4, 10004, 10005, 10006, 10007, 10008, 10009]


def _overlapping_log() -> tuple[bytes, int]:
    """Batches 0..1, 2..3 cut 3 bytes short, 4..6: the cut batch's size field still counts the
    3 bytes, and the first 3 bytes of the batch 4..6 that took their place equal what was cut
    (zeros), so its CRC-32C holds over its stated extent. Returns the log and where the batch
    4..6 starts."""
    specs = [RecordSpec(b"value-2", b"key-2"), RecordSpec(b"value-3\x00\x00", b"key-3")]
    cut = encode_batch(specs, base_offset=2)
    assert cut.endswith(b"\x00\x00\x00")  # the value's two zeros, then no headers
    head, following = v2(0, 2), v2(4, 3)
    assert following.startswith(b"\x00\x00\x00")
    return head + cut[:-3] + following, len(head) + len(cut) - 3


@pytest.mark.parametrize("with_index", [False, True], ids=["hop", "index"])
def test_a_batch_overlapped_by_a_checksum_valid_one_is_read(
    tmp_path: Path, with_index: bool
) -> None:
    """616161:140956's shape -- a batch cut 3 bytes short, followed by an intact batch whose
    first 3 bytes equal what was cut: the cut batch is checksum-valid over its stated extent,
    so reading stood 3 bytes into the intact batch, found no entry there and lost 4..6. A
    batch whose own CRC-32C checks, starting at most its offset and length fields back, running
    past that point, and whose offset field's bytes before it are those of the next offset
    (here 4: zeros), is read; a byte-range split (cut where the entries are walked, or at the
    .index position of the batch 4..6) returns the same rows as a whole-segment read."""
    data, overlapped = _overlapping_log()
    path = write(tmp_path, data)
    if with_index:
        table = scan_entries(data[:overlapped] + data[overlapped + 3 :])  # as the broker wrote
        positions = table.positions.copy()
        positions[-1] = overlapped
        index, _ = kidx.build_indexes(
            positions, table.sizes, table.last_offsets, table.max_timestamps, 0, 32
        )
        (Path(path) / f"{SEGMENT}.index").write_bytes(index)
    whole = list(range(7))
    with collect_damage() as events:
        assert offsets(path) == whole
    # the bytes 3 into the batch 4..6, where reading stood: no entry, nothing skipped
    assert [(e.kind, e.position, e.records, e.skipped_bytes) for e in events] == [
        (DamageKind.UNFRAMED, overlapped + 3, 0, 0)
    ]
    assert offsets(path, verifyChecksums=False) == whole
    assert offsets(path, iteration="shallow") == [1, 3, 6]
    assert offsets(path, startingOffsets='{"t":{"0":4}}') == [4, 5, 6]
    for limit in (40, 100, 150, 200, 250, 300):
        assert offsets(path, maxBytesPerPartition=limit) == whole


def test_a_batch_stored_inside_a_valid_batch_is_not_read(tmp_path: Path) -> None:
    """A valid batch whose last record's value is a whole batch (offsets 10..12) verbatim,
    then bytes that frame no entry: the stored batch ends inside the valid one, so it is no
    batch the valid one overlaps (it would be a row no entry of the log holds)."""
    stored = v2(10, 3)
    outer = encode_batch([RecordSpec(stored, b"k")], base_offset=0)
    path = write(tmp_path, outer + b"\x07" * 80)
    assert offsets(path) == [0]


def test_search_stops_where_a_batchs_checksum_proves_it_ends(tmp_path: Path) -> None:
    """A search past damage (17 bytes of 0xff after the batch 0..2) passes the valid batch
    0..1 (offsets go back); at its end a batch 3..4 whose size field grew by the length of the
    next batch, so it leads exactly to the intact batch 7..8. Its own CRC-32C proves it ends
    where the intact batch 5..6 starts, and :meth:`Resync.resume_after` resumes there when
    reading frames it; the search skipped it whole to 7..8 and lost 5..6. A byte-range split
    cut at the .index position of 5..6 read them: it differed from the whole-segment read."""
    good, back, grown, proven, after = v2(0, 3), v2(0, 2), v2(3, 2), v2(5, 2), v2(7, 2)
    damaged = bytearray(grown)
    struct.pack_into(">i", damaged, 8, len(grown) - 12 + len(proven))
    data = good + b"\xff" * 17 + back + bytes(damaged) + proven + after
    path = write(tmp_path, data)
    whole = [0, 1, 2, 5, 6, 7, 8]
    assert offsets(path) == whole
    assert offsets(path, verifyChecksums=False) == whole
    table = scan_entries(proven + after)
    start = len(good) + 17 + len(back) + len(grown)
    index, _ = kidx.build_indexes(
        table.positions + start, table.sizes, table.last_offsets, table.max_timestamps, 0, 32
    )
    (Path(path) / f"{SEGMENT}.index").write_bytes(index)
    for limit in (360, 400, 460):  # cut at 352 (5..6), or not cut
        assert offsets(path, maxBytesPerPartition=limit) == whole


def test_torn_write_check_reads_a_damaged_size_fields_extent_in_bounded_pieces() -> None:
    """A bad entry whose size field leads 1.5 MiB on, into the trailing zeros of a valid batch
    (offsets 0..0, not above the last good offset 100) that ends the file 30 bytes after that
    point: no torn write, since that batch runs past where the size field leads. The search for
    it read the whole 1.5 MiB at once; no read asks for more than 1 MiB and a header now."""
    tail = encode_batch([RecordSpec(b"v" + bytes(40), b"k")], base_offset=0)
    assert tail.endswith(bytes(41))
    end = 3 << 19
    bad = bytearray(b"\x07" * (end - len(tail) + 30))  # its last 30 bytes after ``end``
    struct.pack_into(">qi", bad, 0, 0, end - 12)  # offset 0, size field leading to ``end``
    asked: list[int] = []
    assert not in_memory_resync(bytes(bad) + tail, 100, asked).is_torn_write(0)
    assert max(asked) <= (1 << 20) + 64
    zeros = bytes(bad) + bytes(len(tail))  # zeros from ``end`` on
    assert in_memory_resync(zeros, 100).is_torn_write(0)


def _split_order_log(damaged_at: int) -> bytes:
    """Batches 0..2, a batch 100..101 with byte ``damaged_at`` flipped, 3..4."""
    damaged = bytearray(v2(100, 2))
    damaged[damaged_at] ^= 0x55
    return v2(0, 3) + bytes(damaged) + v2(3, 2)


def _write_indexed(tmp_path: Path, data: bytes, with_index: bool) -> str:
    """``data`` as a segment, with an ``.index`` entry for each entry whose last offset goes
    above the ones before it, if asked."""
    path = write(tmp_path, data)
    if with_index:
        table = scan_entries(data)
        keep = table.last_offsets >= np.maximum.accumulate(table.last_offsets)
        index, _ = kidx.build_indexes(
            table.positions[keep],
            table.sizes[keep],
            table.last_offsets[keep],
            table.max_timestamps[keep],
            0,
            1,
        )
        (Path(path) / f"{SEGMENT}.index").write_bytes(index)
    return path


@pytest.mark.parametrize("with_index", [False, True], ids=["hop", "index"])
@pytest.mark.parametrize("limit", [None, 60, 100, 129, 200, 238, 250])
def test_a_dropped_batch_does_not_raise_a_pieces_order_floor(
    tmp_path: Path, limit: int, with_index: bool
) -> None:
    """A byte-range piece starts above the last offset the entries before it reach by the
    reader's rules; the damaged batch 100..101, which the reader drops, counted there, so the
    pieces after it dropped 3..4 as offsets going back. Damage in its records: dropped also
    without checksums (they do not decode); damage in its stored CRC: kept without checksums,
    and then 3..4 go back in every read."""
    options = {} if limit is None else {"maxBytesPerPartition": limit}
    (tmp_path / "records").mkdir()
    (tmp_path / "crc").mkdir()
    path = _write_indexed(tmp_path / "records", _split_order_log(-3), with_index)
    assert offsets(path, **options) == [0, 1, 2, 3, 4]
    assert offsets(path, verifyChecksums=False, **options) == [0, 1, 2, 3, 4]
    shallow = {"iteration": "shallow", "verifyChecksums": False, **options}
    assert offsets(path, **shallow) == [2, 101]  # its records are not decoded
    path = _write_indexed(tmp_path / "crc", _split_order_log(17), with_index)
    assert offsets(path, **options) == [0, 1, 2, 3, 4]
    assert offsets(path, verifyChecksums=False, **options) == [0, 1, 2, 100, 101]
    assert offsets(path, iteration="shallow", **options) == [2, 4]  # a row per batch


def test_a_dropped_wrapper_does_not_raise_a_pieces_order_floor(tmp_path: Path) -> None:
    """616161:140956, split at every entry start: the checksum-valid magic-0 zstd wrapper at
    byte 0, whose contents the reader drops, set the order floor of every later piece to 0, and
    the split read returned nothing of 0..2."""
    data = make_input(616161, 140956)["mutant"].data
    path = write(tmp_path, data)
    assert offsets(path) == [0, 1, 2]
    starts = K.hop_entries(as_array(data), 0, len(data))[0].tolist()
    assert len(starts) > 1
    for start in starts[1:]:
        assert offsets(path, maxBytesPerPartition=start) == [0, 1, 2], start


def test_a_batch_going_back_over_a_dropped_one_sets_the_order_floor(tmp_path: Path) -> None:
    """A checksum-damaged batch 0..10 (dropped), 5..20 (kept: nothing kept before it), 15..16
    (dropped: it goes back), 21..22: a piece after any cut starts above 20, as the whole read
    stands there; the dropped batch's offsets set no floor, and neither do those of 15..16."""
    damaged = bytearray(v2(0, 11))
    damaged[-3] ^= 0x55
    parts = [bytes(damaged), v2(5, 16), v2(15, 2), v2(21, 2)]
    path = write(tmp_path, b"".join(parts))
    whole = list(range(5, 23))
    assert offsets(path) == whole
    for cut in itertools.accumulate(len(p) for p in parts[:-1]):
        assert offsets(path, maxBytesPerPartition=cut) == whole, cut


@pytest.mark.parametrize(
    ("run_seed", "number"),
    [
        (981558216, 2701),
        (981558216, 2711),
        *((121212, n) for n in (479, 740, 3031, 3451, 4245, 6221, 9201, 9676)),
    ],
)
def test_a_split_read_cuts_only_where_the_whole_read_frames(
    tmp_path: Path, run_seed: int, number: int
) -> None:
    """Pieces were cut where the planning walk framed an entry, but after damage the whole
    read's search passed over that spot or resumed before it, and the split read lost rows or
    returned rows the whole read drops (121212:740 returned [1] for none). A cut now stands only
    where the walk to it framed whole, checksum-valid entries: split at every entry start and at
    a third and a tenth of the log, the rows are the whole read's."""
    made = make_input(run_seed, number)
    data, options = made["mutant"].data, made["options"]
    path = write(tmp_path, data)
    whole = offsets(path, **options)
    starts = K.hop_entries(as_array(data), 0, len(data))[0].tolist()
    limits = sorted({*starts[1:], max(1, len(data) // 3), max(1, len(data) // 10)})
    for limit in limits:
        assert offsets(path, maxBytesPerPartition=limit, **options) == whole, limit


@pytest.mark.parametrize("with_index", [False, True], ids=["hop", "index"])
@pytest.mark.parametrize("per_piece", [1, 2, 3])
def test_an_intact_segment_keeps_its_cuts(tmp_path: Path, with_index: bool, per_piece: int) -> None:
    """Eight intact batches of 3 records (129 to 133 bytes) split every ``per_piece`` batches,
    as before cuts were checked: each piece starts above the last offset of those before it."""
    batches = [v2(3 * i, 3) for i in range(8)]
    at = [0, *itertools.accumulate(len(b) for b in batches)]
    limit = per_piece * max(len(b) for b in batches)
    assert limit < (per_piece + 1) * min(len(b) for b in batches)
    path = _write_indexed(tmp_path, b"".join(batches), with_index)
    plan = plan_scan(path, parse_read_options(maxBytesPerPartition=limit))
    got = [(t.start_position, t.end_position, t.after_offset) for t in plan.tasks]
    want = [
        (at[i], at[i + per_piece] if i + per_piece < 8 else None, 3 * i - 1 if i else None)
        for i in range(0, 8, per_piece)
    ]
    assert got == want
    assert offsets(path, maxBytesPerPartition=limit) == list(range(24))


@pytest.mark.parametrize("with_index", [False, True], ids=["hop", "index"])
def test_a_cut_after_an_index_position_sees_the_damage_before_it(
    tmp_path: Path, with_index: bool
) -> None:
    """Six batches 0..17 with the intact log's ``.index``; batch 1 has a payload bit flip and a
    size field that leads exactly to batch 4, so the whole read passes over 6..11. The walk to a
    cut started at the last index position before it and never saw the damage: split at 258,
    387 or 400 bytes, the read returned 6..11 too. With DROPMALFORMED the walk now starts at
    the piece before."""
    batches = [v2(3 * i, 3) for i in range(6)]
    at = [0, *itertools.accumulate(len(b) for b in batches)]
    damaged = bytearray(batches[1])
    damaged[-3] ^= 0x55  # the CRC fails
    struct.pack_into(">i", damaged, 8, at[4] - at[1] - 12)
    path = write(tmp_path, batches[0] + bytes(damaged) + b"".join(batches[2:]))
    if with_index:
        good = scan_entries(b"".join(batches))
        index, _ = kidx.build_indexes(
            good.positions, good.sizes, good.last_offsets, good.max_timestamps, 0, 1
        )
        (Path(path) / f"{SEGMENT}.index").write_bytes(index)
    whole = [0, 1, 2, *range(12, 18)]
    assert offsets(path) == whole
    for limit in sorted({*at[1:-1], 200, 258, 300, 387, 400}):
        assert offsets(path, maxBytesPerPartition=limit) == whole, limit
        # FAILFAST walks from the index position (planning reads no more than an index
        # interval per cut): the piece that meets the damage fails the read, as a whole read
        with pytest.raises(ChecksumError) as failed:
            kafka_segments_ds.read_table(path, maxBytesPerPartition=limit)
        assert failed.value.position == at[1], limit


def test_a_shallow_read_of_entry_columns_counts_expanded_wrappers(tmp_path: Path) -> None:
    """Gzip magic-1 wrappers of 0..5 and 3..8, then a plain message at 7. A shallow read that
    wants each row's entry (batchBaseOffset) expands the wrappers as a deep read does, drops the
    second as going back and keeps 7; planning counted the second wrapper's offset 8 as the
    floor, and the piece after it dropped 7. A cut stands now where the floor is the same
    whether or not the reader expands wrappers."""

    def inner(numbers: range) -> bytes:
        return b"".join(
            encode_legacy_message(
                offset=o, magic=1, key=b"k", value=b"v%d" % o, timestamp=TS, attributes=0
            )
            for o in numbers
        )

    w1 = legacy_wrapper(inner(range(6)), last_offset=5, magic=1, codec=1)
    w2 = legacy_wrapper(inner(range(3, 9)), last_offset=8, magic=1, codec=1)
    w3 = encode_legacy_message(offset=7, magic=1, key=b"k", value=b"x", timestamp=TS, attributes=0)
    tail = v2(9, 2)
    path = write(tmp_path, w1 + w2 + w3 + tail)
    ends = list(itertools.accumulate(len(e) for e in (w1, w2, w3)))
    cases = {
        ("offset",): ([5, 8, 10], [0, 1, 2, 3, 4, 5, 7, 9, 10]),
        ("offset", "batchBaseOffset"): ([5, 7, 10], [0, 1, 2, 3, 4, 5, 7, 9, 10]),
    }
    for columns, (shallow, deep) in cases.items():
        for iteration, want in (("shallow", shallow), ("deep", deep)):
            options = {"iteration": iteration, "columns": list(columns)}
            assert offsets(path, **options) == want, (columns, iteration)
            for limit in sorted({*ends, 40, 100}):
                got = offsets(path, maxBytesPerPartition=limit, **options)
                assert got == want, (columns, iteration, limit)
    # the cut before the second wrapper stands (floor 5 either way); those after it go
    options = parse_read_options(iteration="shallow", maxBytesPerPartition=len(w1))
    plan = plan_scan(path, options)
    got = [(t.start_position, t.end_position, t.after_offset) for t in plan.tasks]
    assert got == [(0, ends[0], None), (ends[0], None, 5)]
