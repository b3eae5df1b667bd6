"""One test per read-path bug the fuzzer found (run seed:input number in each docstring).

Each builds the smallest log showing the bug and pins the exact outcome.
"""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kafka_segments_ds
from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.builder import encode_legacy_message, encode_legacy_wrapper

from .corpus import GZIP, SNAPPY, TS, _specs, fix_legacy_crc, legacy_wrapper, v2

SEGMENT = "00000000000000000000"


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.ERROR, logger="kafka_segments_ds")
    yield


def write(tmp_path: Path, *entries: bytes) -> str:
    part = tmp_path / "t-0"
    part.mkdir(exist_ok=True)
    path = part / f"{SEGMENT}.log"
    path.write_bytes(b"".join(entries))
    return str(path)


def offsets(path: str, **options: Any) -> list[int]:
    return kafka_segments_ds.read_table(path, **options).column("offset").to_pylist()


def damaged(entry: bytes, at: int = -3) -> bytes:
    out = bytearray(entry)
    out[at] ^= 0x5A
    return bytes(out)


def test_intact_batch_between_two_damaged_entries_is_kept(tmp_path: Path) -> None:
    """1:120, 1:100 -- resynchronising demanded a valid successor, so a batch followed by
    damage was skipped too."""
    path = write(tmp_path, damaged(v2(0, 2)), v2(2, 3), damaged(v2(5, 2)), v2(7, 1))
    assert offsets(path, mode="DROPMALFORMED") == [2, 3, 4, 7]
    garbage = write(tmp_path, bytes(61), v2(0, 2), damaged(v2(2, 2)))
    assert offsets(garbage, mode="DROPMALFORMED") == [0, 1]


def test_legacy_message_after_a_damaged_plain_message_is_kept(tmp_path: Path) -> None:
    """1:550 -- after a damaged uncompressed legacy message (no wrapper, so no verbatim inner
    messages), the next message is taken even when the one after it is damaged too."""
    first = bytearray(encode_legacy_message(offset=0, magic=0, key=b"k", value=b"plain"))
    struct.pack_into(">i", first, 8, 40)  # size lie
    second = encode_legacy_message(offset=1, magic=0, key=b"k", value=b"kept")
    third = damaged(encode_legacy_message(offset=2, magic=0, key=b"k", value=b"gone"))
    path = write(
        tmp_path,
        bytes(first),
        second,
        third,
        encode_legacy_message(offset=3, magic=0, key=None, value=b"v"),
    )
    assert offsets(path, mode="DROPMALFORMED") == [1, 3]


@pytest.mark.parametrize("garbage", [b"\x02" * 17, b"\x02" * 61])
def test_huge_size_field_before_valid_entries_is_damage_not_end_of_data(
    tmp_path: Path, garbage: bytes
) -> None:
    """2:1375, 2:1657, 2:620 -- an entry whose size runs past the end of the file was taken for
    a truncated tail whenever the valid entries after it did not run to the end: everything
    after it vanished without an error, in both modes."""
    path = write(
        tmp_path,
        v2(0, 2),
        garbage,
        v2(2, 2),
        encode_legacy_message(offset=4, magic=1, key=None, value=b"x", timestamp=TS),
        damaged(v2(5, 2)),
    )
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path)
    assert (info.value.path, info.value.position) == (path, len(v2(0, 2)))
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 2, 3, 4]


def test_truncated_wrapper_before_legacy_and_batch_entries_is_damage(tmp_path: Path) -> None:
    """6:5221 -- a legacy entry after a wrapper whose size runs past the end may be one of its
    inner messages; a chain through it that reaches a magic-2 batch proves it is not."""
    nested = legacy_wrapper(
        encode_legacy_message(offset=0, magic=1, key=b"k", value=b"v", timestamp=TS),
        last_offset=2,
        magic=1,
        codec=GZIP,
    )
    cut = bytearray(nested)
    struct.pack_into(">i", cut, 8, 5000)
    tail = [
        encode_legacy_wrapper(
            _specs(3, 2, headers=False), last_offset=4, magic=1, compression=GZIP
        ),
        v2(5, 2),
        damaged(v2(7, 2)),
    ]
    path = write(tmp_path, v2(0, 2), fix_legacy_crc(bytes(cut))[:40], *tail)
    with pytest.raises(CorruptSegmentError):
        offsets(path)
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 3, 4, 5, 6]


@pytest.mark.parametrize("wrapper_offset", [3, 9, 2**45])
def test_magic0_wrapper_offset_must_match_its_last_inner_offset(
    tmp_path: Path, wrapper_offset: int
) -> None:
    """2:2188, 2:2576, 2:2668 -- an offset field (no checksum covers it) that disagreed with the
    wrapper's inner offsets put rows out of order or pushed every later entry out."""
    good = encode_legacy_wrapper(
        _specs(2, 3, headers=False), last_offset=4, magic=0, compression=GZIP
    )
    liar = bytearray(good)
    struct.pack_into(">q", liar, 0, wrapper_offset)
    after = encode_legacy_message(offset=5, magic=0, key=None, value=b"after")
    path = write(tmp_path, v2(0, 2), bytes(liar), after)
    with pytest.raises(CorruptSegmentError, match="last inner offset 4 differs") as info:
        offsets(path)
    assert (info.value.position, info.value.offset) == (len(v2(0, 2)), wrapper_offset)
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 5]


def test_batch_offsets_past_int64_are_rejected(tmp_path: Path) -> None:
    """2:3 -- baseOffset 2^63 - 1 with lastOffsetDelta 2 wrapped to negative offsets."""
    liar = bytearray(v2(0, 3))
    struct.pack_into(">q", liar, 0, 2**63 - 1)
    path = write(tmp_path, bytes(liar), v2(3, 2))
    with pytest.raises(CorruptSegmentError, match="past 2\\^63 - 1"):
        offsets(path)
    assert offsets(path, mode="DROPMALFORMED") == [3, 4]


def test_size_field_landing_exactly_on_the_end_of_the_file(tmp_path: Path) -> None:
    """5:2429 -- a damaged entry whose size pointed exactly at the end of the file was trusted,
    dropping the valid entries inside that span."""
    tail = [v2(4, 2), v2(6, 3)]
    span = sum(len(t) for t in tail)
    bad = bytearray(bytes(20))
    struct.pack_into(">qi", bad, 0, 3, span + 8)  # claims everything to the end
    bad[16] = 0xFF
    path = write(tmp_path, v2(0, 2), bytes(bad), *tail)
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 4, 5, 6, 7, 8]


def _indexed(tmp_path: Path, *entries: bytes) -> tuple[Path, bytes, bytes]:
    path = Path(write(tmp_path, *entries))
    table = scan_entries(path.read_bytes())
    index, timeindex = kidx.build_indexes(
        table.positions, table.sizes, table.last_offsets, table.max_timestamps, 0, 32
    )
    return path, index, timeindex


@pytest.mark.parametrize(
    ("lie", "start", "end"),
    [("position-ahead", 8, None), ("end-early", 0, 8), ("end-early", 4, 8)],
)
def test_lying_offset_index_does_not_change_rows(
    tmp_path: Path, lie: str, start: int, end: int | None
) -> None:
    """2:71 -- an .index entry naming a real batch position for the wrong offsets made an
    offset-bounded read start too late or end too early. Entries here: (5, p1), (8, p2), ...
    where batch i at p_i holds offsets 3i..3i+2."""
    entries = [v2(3 * i, 3) for i in range(8)]
    path, index, _ = _indexed(tmp_path, *entries)
    assert struct.unpack_from(">ii", index, 0)[0] == 5 and len(index) == 7 * 8
    lied = bytearray(index)
    if lie == "position-ahead":  # (8, p2) -> (8, p3): offset 8 is in the batch at p2
        struct.pack_into(">i", lied, 12, struct.unpack_from(">i", lied, 20)[0])
    else:  # (5, p1) -> (7, p1): an end at 8 would stop at p2, before offsets 6 and 7
        struct.pack_into(">i", lied, 0, 7)
    path.with_suffix(".index").write_bytes(bytes(lied))
    options: dict[str, Any] = {"startingOffsets": f'{{"t":{{"0":{start}}}}}'}
    if end is not None:
        options["endingOffsets"] = f'{{"t":{{"0":{end}}}}}'
    want = [o for o in range(24) if o >= start and (end is None or o < end)]
    assert offsets(str(path.parent), **options) == want
    assert offsets(str(path.parent), maxBytesPerPartition=100, **options) == want


@pytest.mark.parametrize(
    ("magic", "size_lie", "tail"),
    [
        (0, lambda size: size ^ 0x41000000, lambda: damaged(v2(11, 2))),  # 777:18961
        (1, lambda size: 2**31 - 1, lambda: b"\x02" * 16),  # 777:32552
    ],
    ids=["bit-flip-magic0", "max-size-magic1"],
)
def test_wrapper_with_only_its_size_field_damaged_bounds_its_inner_messages(
    tmp_path: Path, magic: int, size_lie: Any, tail: Any
) -> None:
    """777:18961, 777:32552 -- a compressed wrapper whose size field (not covered by its CRC)
    ran past the end of the file was taken for a truncated tail: the legacy entries after it
    might have been its inner messages stored verbatim, and their chain ended in more damage.
    Its key and value lengths give an extent its CRC checks, and nothing after that extent
    can be one of its inner messages."""
    plain = [
        encode_legacy_message(offset=o, magic=magic, key=b"k", value=b"plain", timestamp=TS)
        for o in (0, 1)
    ]
    wrapper = bytearray(
        encode_legacy_wrapper(
            _specs(2, 3, headers=False), last_offset=4, magic=magic, compression=GZIP
        )
    )
    (size,) = struct.unpack_from(">i", wrapper, 8)
    struct.pack_into(">i", wrapper, 8, size_lie(size))
    after = [
        encode_legacy_wrapper(
            _specs(first, 3, headers=False), last_offset=first + 2, magic=1, compression=codec
        )
        for first, codec in ((5, GZIP), (8, SNAPPY))
    ]
    path = write(tmp_path, *plain, bytes(wrapper), *after, tail())
    with pytest.raises(CorruptSegmentError, match="damaged size field") as info:
        offsets(path)
    assert (info.value.position, info.value.offset) == (sum(map(len, plain)), 4)
    for chunk in (4096, 1 << 20):
        assert offsets(path, mode="DROPMALFORMED", readChunkBytes=chunk) == [0, 1, *range(5, 11)]


@pytest.mark.parametrize("key_length", [-7, 2**31 - 1], ids=["below-minus-one", "past-the-file"])
def test_damaged_entry_with_an_impossible_key_length_holds_no_inner_message(
    tmp_path: Path, key_length: int
) -> None:
    """2007:82360 -- garbage that looked like a gzip wrapper (magic 0, codec 1) with a size
    running past the end of the file was taken for a truncated wrapper, so the valid legacy
    entries after it (their chain ending in more damage) might have been its inner messages
    stored verbatim, and everything after it was dropped as a truncated tail. Its key length
    is impossible: it cannot reach a value, so it holds no message; the entries are kept."""
    head = [
        encode_legacy_message(offset=o, magic=0, key=b"k", value=b"plain", timestamp=None)
        for o in (0, 1)
    ]
    junk = bytearray(encode_legacy_message(offset=2, magic=0, key=None, value=b"x" * 10))
    struct.pack_into(">i", junk, 8, 25_939_941)  # size: far past the end of the file
    junk[17] = GZIP  # looks like a compressed wrapper
    struct.pack_into(">i", junk, 18, key_length)
    after = [
        encode_legacy_wrapper(
            _specs(first, 3, headers=False), last_offset=first + 2, magic=1, compression=codec
        )
        for first, codec in ((5, GZIP), (8, SNAPPY))
    ]
    more = damaged(after[0])  # CRC broken, size field consistent
    last = encode_legacy_message(offset=20, magic=1, key=None, value=b"last", timestamp=TS)
    path = write(tmp_path, *head, bytes(junk), *after, more, last)
    with pytest.raises(CorruptSegmentError, match="damaged size field") as info:
        offsets(path)
    assert (info.value.position, info.value.offset) == (sum(map(len, head)), 2)
    for chunk in (4096, 1 << 20):
        got = offsets(path, mode="DROPMALFORMED", readChunkBytes=chunk)
        assert got == [0, 1, *range(5, 11), 20]


def test_valid_batch_inside_a_bad_entry_ending_before_zeros_is_no_torn_write(
    tmp_path: Path,
) -> None:
    """2009:26187 -- a bad entry whose size field led to 3 zero bytes before the end of the file
    (the tail of a damaged last entry) was taken for a torn write into a preallocated segment,
    though a valid v2 batch continuing the log lay inside it: past a torn write nothing was
    ever written, so that batch proves the size field is the damage."""
    head = v2(0, 3)
    batch = v2(10, 4)
    last = damaged(
        encode_legacy_message(offset=20, magic=1, key=None, value=b"ends" + bytes(8)), at=20
    )
    bad = bytearray(encode_legacy_message(offset=3, magic=1, key=None, value=b"x" * 10))
    total = len(head) + len(bad) + len(batch) + len(last)
    struct.pack_into(">i", bad, 8, total - 3 - len(head) - 12)  # ends 3 bytes before the end
    path = write(tmp_path, head, bytes(bad), batch, last)
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path)
    assert (info.value.position, info.value.offset) == (len(head), 3)
    for chunk in (4096, 1 << 20):
        got = offsets(path, mode="DROPMALFORMED", readChunkBytes=chunk)
        assert got == [0, 1, 2, 10, 11, 12, 13]


def test_later_chain_reaching_the_end_proves_a_cut_wrapper_damaged(tmp_path: Path) -> None:
    """3003:42070 -- a compressed wrapper cut short (its size runs past the end of the file)
    is followed by valid legacy entries, more damage, then valid entries exactly to the end.
    Only the first candidate's chain was weighed: it broke at the damage, so everything after
    the wrapper was dropped as a truncated tail. A later chain reaching the end of the file
    proves the size field lies, as the first one's would."""
    head = v2(0, 3)
    wrapper = encode_legacy_wrapper(
        _specs(3, 200, headers=False), last_offset=202, magic=1, compression=GZIP
    )
    cut = wrapper[:60]
    chain = [
        encode_legacy_message(offset=o, magic=1, key=b"k", value=b"plain", timestamp=TS)
        for o in (300, 301)
    ]
    last = encode_legacy_message(offset=302, magic=1, key=None, value=b"last", timestamp=TS)
    path = write(tmp_path, head, cut, *chain, b"\xff" * 17, last)
    assert struct.unpack_from(">i", cut, 8)[0] + 12 > len(cut) + 2 * len(chain[0]) + 17 + len(last)
    with pytest.raises(CorruptSegmentError, match="damaged size field") as info:
        offsets(path)
    assert info.value.position == len(head)
    for chunk in (4096, 1 << 20):
        assert offsets(path, mode="DROPMALFORMED", readChunkBytes=chunk) == [0, 1, 2, 300, 301, 302]


def test_zero_tail_inside_a_valid_entry_is_no_torn_write(tmp_path: Path) -> None:
    """1611:21048 -- a cut batch whose size field led into the zero bytes ending the (intact)
    last entry was taken for a torn write into a preallocated segment, dropping that entry."""
    head = v2(0, 3) + v2(3, 1)
    last = encode_legacy_message(offset=10, magic=1, key=None, value=b"ends in zeros" + bytes(8))
    cut = bytearray(v2(4, 5)[:58])
    total = len(head) + len(cut) + len(last)
    struct.pack_into(">i", cut, 8, total - 3 - len(head) - 12)  # ends 3 bytes before the end
    path = write(tmp_path, head, bytes(cut), last)
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 2, 3, 10]


@pytest.mark.parametrize("lead", ["framed", "after-damage"])
def test_no_entry_starts_inside_a_valid_batch_dropped_for_its_offsets(
    tmp_path: Path, lead: str
) -> None:
    """2305:174, 2305:4238 -- a checksum-valid batch whose offsets go back, then a batch cut
    4 bytes into its offset field: the batch's last 4 bytes complete that offset field, so a
    checksum-valid "entry" (no CRC covers the offset field) starts inside the valid batch, with
    offset 3531506008385912842. Resynchronising there invented its rows and dropped the intact
    batch after it. A valid batch's checksum proves its bytes its own: the search passes it
    whole, whether the reader frames it (FAILFAST names it) or meets it searching past damage."""
    good, back, cut, after = v2(0, 3), v2(0, 2), v2(10, 3)[4:], v2(20, 2)
    lead_in = [damaged(v2(3, 2))[:50]] if lead == "after-damage" else []
    path = write(tmp_path, good, *lead_in, back, cut, after)
    inside = len(good) + sum(map(len, lead_in)) + len(back) - 4
    data = Path(path).read_bytes()
    assert struct.unpack_from(">q", data, inside)[0] == 3531506008385912842
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 2, 20, 21]
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path)
    assert info.value.position == len(good)


def test_valid_wrapper_dropped_for_its_offsets_is_skipped_to_its_end(tmp_path: Path) -> None:
    """2306:24812 -- a magic-0 wrapper dropped for its offsets (its first inner offset is not
    above the last good one), then a wrapper with an unknown magic byte whose size field is
    consistent: reading went on by a search from inside the first, which found an inner
    message stored verbatim in the second (offset 2^62 + 1) and dropped the intact entries
    after it. A valid entry's checksum proves its extent: reading goes on at its end, where
    the damaged wrapper is skipped whole."""
    messages = [encode_legacy_message(offset=o, magic=0, key=None, value=b"v") for o in (2, 3)]
    first = legacy_wrapper(b"".join(messages), last_offset=3, magic=0, codec=GZIP)
    rng = random.Random("24812")
    inner = b"".join(
        encode_legacy_message(offset=2**62 + i, magic=0, key=None, value=rng.randbytes(n))
        for i, n in enumerate((20000, 40))
    )
    hidden = bytearray(legacy_wrapper(inner, last_offset=2**62 + 1, magic=0, codec=SNAPPY))
    hidden[16] = 19
    lead = encode_legacy_message(offset=2, magic=0, key=None, value=b"lead")
    after = [encode_legacy_message(offset=o, magic=0, key=None, value=b"a") for o in (5, 6)]
    path = write(tmp_path, lead, first, bytes(hidden), *after)
    assert offsets(path, mode="DROPMALFORMED") == [2, 5, 6]
