"""Tests for kafka_segments_ds.index: golden bytes, reader rules, lookups, build, properties."""

from __future__ import annotations

import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import CorruptIndexError
from kafka_segments_ds.index import (
    AbortedTxn,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    build_indexes,
    encode_offset_index,
    encode_time_index,
    lookup_offset,
    lookup_position_after,
    lookup_timestamp,
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
    segment_max_timestamp,
)

BASE = 1000
OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
TXN_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable offset


def offset_bytes(*entries: tuple[int, int]) -> bytes:
    return b"".join(OFFSET_ENTRY.pack(*e) for e in entries)


def time_bytes(*entries: tuple[int, int]) -> bytes:
    return b"".join(TIME_ENTRY.pack(*e) for e in entries)


def as_pairs(index: OffsetIndex | TimeIndex) -> list[tuple[int, int]]:
    if isinstance(index, OffsetIndex):
        return list(zip(index.offsets.tolist(), index.positions.tolist(), strict=True))
    return list(zip(index.timestamps.tolist(), index.offsets.tolist(), strict=True))


# --------------------------------------------------------------------------------------------
# .index
# --------------------------------------------------------------------------------------------


def test_offset_index_golden_bytes() -> None:
    data = bytes.fromhex("00000005 00001010 0000000c 00002020 00000013 00003030".replace(" ", ""))
    index = parse_offset_index(data, BASE)
    assert as_pairs(index) == [(1005, 0x1010), (1012, 0x2020), (1019, 0x3030)]
    assert index.ignored == 0
    assert index.problem is None
    assert index.offsets.dtype == np.int64
    assert not index.offsets.flags.writeable


def test_offset_index_encode_matches_golden() -> None:
    entries = [OffsetPosition(1005, 0x1010), OffsetPosition(1012, 0x2020)]
    assert encode_offset_index(entries, BASE) == offset_bytes((5, 0x1010), (12, 0x2020))
    arrays = (np.array([1005, 1012]), np.array([0x1010, 0x2020]))
    assert encode_offset_index(arrays, BASE) == offset_bytes((5, 0x1010), (12, 0x2020))


def test_offset_index_zero_tail_is_preallocation() -> None:
    data = offset_bytes((5, 4100), (9, 8300), (15, 12500)) + bytes(8 * 100)
    index = parse_offset_index(data, BASE)
    assert as_pairs(index) == [(1005, 4100), (1009, 8300), (1015, 12500)]
    assert index.ignored == 100
    assert index.problem is not None and "zero-filled tail of 100 slots" in index.problem


@pytest.mark.parametrize("slots", [1, 5])
def test_offset_index_all_zero_is_empty(slots: int) -> None:
    index = parse_offset_index(bytes(8 * slots), BASE)
    assert len(index) == 0
    assert index.ignored == slots
    assert "zero-filled" in (index.problem or "")


def test_offset_index_empty_file() -> None:
    index = parse_offset_index(b"", BASE)
    assert len(index) == 0 and index.ignored == 0 and index.problem is None


def test_offset_index_single_real_entry_at_relative_zero() -> None:
    # Relative offset 0 is legal for entry 0 (only later slots with 0 mark the tail).
    index = parse_offset_index(offset_bytes((0, 4200)), BASE)
    assert as_pairs(index) == [(1000, 4200)]


@pytest.mark.parametrize(
    ("entries", "expected_used"),
    [
        ([(5, 100), (4, 200), (9, 300)], 1),  # offset goes back
        ([(5, 100), (5, 200)], 1),  # offset repeats
        ([(5, 100), (9, 100)], 1),  # position repeats
        ([(5, 100), (9, 200), (12, 150)], 2),  # position goes back
        ([(5, 100), (0, 200)], 1),  # relative 0 at i > 0
        ([(-1, 100), (5, 200)], 0),  # negative relative offset
        ([(5, -100), (6, 200)], 0),  # negative position
        ([(5, 100), (-7, 200)], 1),  # relative offset wrapped negative
    ],
)
def test_offset_index_stops_at_first_bad_entry(
    entries: list[tuple[int, int]], expected_used: int
) -> None:
    index = parse_offset_index(offset_bytes(*entries), BASE)
    assert as_pairs(index) == [(BASE + r, p) for r, p in entries[:expected_used]]
    assert index.ignored == len(entries) - expected_used
    assert index.problem is not None
    assert f"entry {expected_used}" in index.problem


def test_offset_index_drops_entries_past_log_size() -> None:
    data = offset_bytes((5, 100), (9, 200), (12, 300), (20, 400))
    index = parse_offset_index(data, BASE, log_size=300)
    assert as_pairs(index) == [(1005, 100), (1009, 200)]  # 300 is not < 300
    assert index.ignored == 2
    assert "2 entries point at or past the end of the .log (300 bytes)" in (index.problem or "")
    assert parse_offset_index(data, BASE, log_size=401).problem is None


def test_offset_index_odd_length_keeps_whole_entries() -> None:
    data = offset_bytes((5, 100), (9, 200)) + b"\x00\x00\x01"
    index = parse_offset_index(data, BASE)
    assert as_pairs(index) == [(1005, 100), (1009, 200)]
    assert index.ignored == 0
    assert "not a multiple of 8" in (index.problem or "")


def test_offset_index_accepts_memoryview_and_pickles() -> None:
    index = parse_offset_index(memoryview(offset_bytes((5, 100), (9, 200))), BASE)
    clone = pickle.loads(pickle.dumps(index))
    assert as_pairs(clone) == as_pairs(index)
    assert clone.base_offset == BASE


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (900, OffsetPosition(BASE, 0)),  # below the base
        (1004, OffsetPosition(BASE, 0)),  # below the first entry
        (1005, OffsetPosition(1005, 100)),  # equal
        (1007, OffsetPosition(1005, 100)),  # between
        (1009, OffsetPosition(1009, 200)),
        (1020, OffsetPosition(1020, 400)),  # the last
        (5000, OffsetPosition(1020, 400)),  # beyond the last
    ],
)
def test_lookup_offset(target: int, expected: OffsetPosition) -> None:
    index = parse_offset_index(offset_bytes((5, 100), (9, 200), (12, 300), (20, 400)), BASE)
    assert lookup_offset(index, target) == expected


def test_lookup_offset_empty_index() -> None:
    assert lookup_offset(parse_offset_index(b"", BASE), 1234) == OffsetPosition(BASE, 0)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (900, 200),  # nothing below the target is in the segment; still bounded by entry 1
        (1005, 200),  # need offsets <= 1004: the append at 100 may hold them (2.0+: ends there)
        (1006, 200),  # need <= 1005: append at 100 holds 1005, all at >= 200 are > 1005
        (1007, 300),  # need <= 1006: may be in the append at 200 (2.0+ indexes its LAST offset)
        (1010, 300),
        (1011, 400),
        (1013, 400),  # need <= 1012: the append at 300 holds 1012, all at >= 400 are > 1012
        (1014, None),  # need <= 1013: may be in the append at 400 (its last offset is 1020)
        (1021, None),  # need <= 1020: the append at 400 holds 1020, no entry after it
        (5000, None),
    ],
)
def test_lookup_position_after(target: int, expected: int | None) -> None:
    index = parse_offset_index(offset_bytes((5, 100), (9, 200), (12, 300), (20, 400)), BASE)
    assert lookup_position_after(index, target) == expected


def test_lookup_position_after_empty_index() -> None:
    assert lookup_position_after(parse_offset_index(b"", BASE), 1005) is None


# --------------------------------------------------------------------------------------------
# .timeindex
# --------------------------------------------------------------------------------------------


def test_time_index_golden_bytes() -> None:
    data = bytes.fromhex(
        "0000018c1a2b3c00 00000004 0000018c1a2b4000 00000004 0000018c1a2b5000 0000000a".replace(
            " ", ""
        )
    )
    index = parse_time_index(data, BASE)
    assert as_pairs(index) == [
        (0x18C1A2B3C00, 1004),
        (0x18C1A2B4000, 1004),  # offsets may repeat
        (0x18C1A2B5000, 1010),
    ]
    assert index.problem is None
    assert segment_max_timestamp(index) == 0x18C1A2B5000


def test_time_index_encode_matches_golden() -> None:
    entries = [TimestampOffset(1_700_000_000_000, 1004), TimestampOffset(1_700_000_000_500, 1010)]
    expected = time_bytes((1_700_000_000_000, 4), (1_700_000_000_500, 10))
    assert encode_time_index(entries, BASE) == expected
    arrays = (np.array([1_700_000_000_000, 1_700_000_000_500]), np.array([1004, 1010]))
    assert encode_time_index(arrays, BASE) == expected


def test_time_index_all_zero_is_empty() -> None:
    index = parse_time_index(bytes(12 * 50), BASE)
    assert len(index) == 0
    assert index.ignored == 50
    assert "zero-filled" in (index.problem or "")
    assert segment_max_timestamp(index) is None


def test_time_index_zero_tail() -> None:
    data = time_bytes((100, 3), (200, 7), (300, 9)) + bytes(12 * 10)
    index = parse_time_index(data, BASE)
    assert as_pairs(index) == [(100, 1003), (200, 1007), (300, 1009)]
    assert index.ignored == 10
    # A zero tail means an active or crashed segment: its last entry is not the segment max.
    assert segment_max_timestamp(index) is None


@pytest.mark.parametrize(
    ("entries", "expected_used"),
    [
        ([(100, 3), (100, 7)], 1),  # timestamp repeats
        ([(100, 3), (90, 7)], 1),  # timestamp goes back
        ([(100, 7), (200, 3)], 1),  # offset goes back
        ([(100, -2), (200, 3)], 0),  # offset below base
        ([(-5, 3), (200, 4)], 0),  # negative timestamp (Kafka only appends > -1)
    ],
)
def test_time_index_stops_at_first_bad_entry(
    entries: list[tuple[int, int]], expected_used: int
) -> None:
    index = parse_time_index(time_bytes(*entries), BASE)
    assert as_pairs(index) == [(t, BASE + r) for t, r in entries[:expected_used]]
    assert index.ignored == len(entries) - expected_used
    assert f"entry {expected_used}" in (index.problem or "")


def test_time_index_drops_offsets_from_next_segment() -> None:
    data = time_bytes((100, 3), (200, 7), (300, 20))
    index = parse_time_index(data, BASE, next_base_offset=1020)
    assert as_pairs(index) == [(100, 1003), (200, 1007)]
    assert index.ignored == 1
    assert "next segment" in (index.problem or "")


def test_time_index_odd_length() -> None:
    index = parse_time_index(time_bytes((100, 3)) + b"\x01" * 5, BASE)
    assert as_pairs(index) == [(100, 1003)]
    assert "not a multiple of 12" in (index.problem or "")
    assert segment_max_timestamp(index) == 100  # nothing was dropped, only trailing bytes


def test_time_index_empty() -> None:
    index = parse_time_index(b"", BASE)
    assert len(index) == 0 and index.problem is None
    assert segment_max_timestamp(index) is None
    assert lookup_timestamp(index, 10) == TimestampOffset(-1, BASE)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (50, TimestampOffset(-1, BASE)),  # below the first entry
        (100, TimestampOffset(100, 1003)),  # equal
        (150, TimestampOffset(100, 1003)),  # between
        (300, TimestampOffset(300, 1009)),
        (10**15, TimestampOffset(300, 1009)),  # beyond the last
    ],
)
def test_lookup_timestamp(target: int, expected: TimestampOffset) -> None:
    index = parse_time_index(time_bytes((100, 3), (200, 7), (300, 9)), BASE)
    assert lookup_timestamp(index, target) == expected


# --------------------------------------------------------------------------------------------
# .txnindex
# --------------------------------------------------------------------------------------------


def test_txn_index_parse() -> None:
    data = TXN_ENTRY.pack(0, 7, 1000, 1010, 1011) + TXN_ENTRY.pack(0, 9, 1005, 1020, 1021)
    assert len(data) == 68
    assert parse_txn_index(data) == [
        AbortedTxn(7, 1000, 1010, 1011),
        AbortedTxn(9, 1005, 1020, 1021),
    ]


def test_txn_index_empty() -> None:
    assert parse_txn_index(b"") == []


def test_txn_index_trailing_zeros_end_the_file() -> None:
    data = TXN_ENTRY.pack(0, 7, 1000, 1010, 1011) + bytes(34 * 2 + 5)
    assert parse_txn_index(data) == [AbortedTxn(7, 1000, 1010, 1011)]


def test_txn_index_bad_length() -> None:
    data = TXN_ENTRY.pack(0, 7, 1000, 1010, 1011) + b"\x00\x00\x01"
    with pytest.raises(CorruptIndexError, match="entry 1 at byte position 34 has only 3 bytes"):
        parse_txn_index(data)


def test_txn_index_bad_version() -> None:
    data = TXN_ENTRY.pack(0, 7, 1000, 1010, 1011) + TXN_ENTRY.pack(1, 9, 1005, 1020, 1021)
    with pytest.raises(CorruptIndexError, match="entry 1 at byte position 34: version 1"):
        parse_txn_index(data)


def test_txn_index_zero_entry_followed_by_data() -> None:
    data = bytes(34) + TXN_ENTRY.pack(0, 9, 1005, 1020, 1021)
    with pytest.raises(CorruptIndexError, match="entry 0 at byte position 0 is all zeros"):
        parse_txn_index(data)


# --------------------------------------------------------------------------------------------
# Encoding errors and build_indexes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entries",
    [
        [OffsetPosition(BASE + 2**31, 100)],  # relative offset overflows int32
        [OffsetPosition(BASE - 1, 100)],  # below the base
        [OffsetPosition(1005, 2**31)],  # position overflows int32
        [OffsetPosition(1005, 100), OffsetPosition(1005, 200)],  # not increasing
    ],
)
def test_encode_offset_index_rejects(entries: list[OffsetPosition]) -> None:
    with pytest.raises(ValueError):
        encode_offset_index(entries, BASE)


def test_encode_time_index_rejects_decreasing_offsets() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        encode_time_index([TimestampOffset(1, 1005), TimestampOffset(2, 1004)], BASE)


def test_build_indexes_hand_computed() -> None:
    # pos, size, last offset, max timestamp; base 1000, interval 100.
    batches = np.array(
        [
            (0, 60, 1002, 500),  # max 500 @1002
            (60, 60, 1005, 400),
            (120, 60, 1007, 700),  # 120 - 0 > 100: entry (1007, 120); time (700, 1007)
            (180, 60, 1010, 700),  # ties keep the earlier carrier
            (240, 60, 1011, 650),  # 240 - 120 > 100: entry (1011, 240); max still 700, no time
            (300, 60, 1015, 900),  # max 900 @1015
            (360, 50, 1016, -1),  # 360 - 240 > 100: entry (1016, 360); time (900, 1015)
            (410, 40, 1020, 950),  # 50 since the last entry: none; close entry (950, 1020)
        ]
    )
    offset_index, time_index = build_indexes(
        batches[:, 0], batches[:, 1], batches[:, 2], batches[:, 3], BASE, 100
    )
    assert offset_index == offset_bytes((7, 120), (11, 240), (16, 360))
    assert time_index == time_bytes((700, 7), (900, 15), (950, 20))


def test_build_indexes_small_segment_only_close_entry() -> None:
    offset_index, time_index = build_indexes(
        np.array([0, 70]), np.array([70, 70]), np.array([1000, 1003]), np.array([5, 3]), BASE
    )
    assert offset_index == b""
    assert time_index == time_bytes((5, 0))


def test_build_indexes_magic0_has_no_time_entries() -> None:
    offset_index, time_index = build_indexes(
        np.array([0, 5000]), np.array([5000, 10]), np.array([1000, 1001]), np.array([-1, -1]), BASE
    )
    assert offset_index == offset_bytes((1, 5000))
    assert time_index == b""


def test_build_indexes_empty() -> None:
    empty = np.zeros(0, dtype=np.int64)
    assert build_indexes(empty, empty, empty, empty, BASE) == (b"", b"")


def test_build_indexes_rejects_overlap() -> None:
    with pytest.raises(ValueError, match="overlap"):
        build_indexes(
            np.array([0, 50]), np.array([60, 60]), np.array([1000, 1001]), np.array([1, 2]), BASE
        )


def test_build_indexes_round_trips_through_parse() -> None:
    positions = np.arange(0, 100 * 1000, 1000)
    sizes = np.full(100, 1000)
    last_offsets = BASE + np.arange(100) * 3 + 2
    max_timestamps = 1_000 + np.arange(100) * 10
    offset_index, time_index = build_indexes(positions, sizes, last_offsets, max_timestamps, BASE)
    oi = parse_offset_index(offset_index, BASE, log_size=100_000)
    ti = parse_time_index(time_index, BASE)
    # An entry every 5 batches (5000 > 4096 bytes), starting with the batch at 5000.
    assert oi.positions.tolist() == list(range(5000, 100_000, 5000))
    assert oi.offsets.tolist() == [BASE + (p // 1000) * 3 + 2 for p in range(5000, 100_000, 5000)]
    assert oi.problem is None and ti.problem is None
    assert segment_max_timestamp(ti) == 1_000 + 99 * 10
    assert ti.offsets[-1] == last_offsets[-1]


# --------------------------------------------------------------------------------------------
# Property: lookups are safe bounds for any index convention and sparsity
# --------------------------------------------------------------------------------------------


@st.composite
def segments(draw: st.DrawFn) -> tuple[list[tuple[int, int, int, int]], list[int], str, int]:
    """Batches (position, size, first offset, last offset), append starts, convention, interval."""
    n = draw(st.integers(1, 30))
    batches = []
    position = 0
    offset = BASE + draw(st.integers(0, 3))
    for _ in range(n):
        count = draw(st.integers(1, 5))
        size = draw(st.integers(1, 300))
        batches.append((position, size, offset, offset + count - 1))
        position += size
        offset += count + draw(st.integers(0, 3))  # gaps are legal (compaction, control)
    convention = draw(st.sampled_from(["append_first", "append_last", "batch_last", "batch_first"]))
    if convention.startswith("batch"):
        starts = list(range(n))
    else:
        splits = draw(st.lists(st.booleans(), min_size=n - 1, max_size=n - 1))
        starts = [0] + [i + 1 for i, split in enumerate(splits) if split]
    interval = draw(st.integers(0, 700))
    return batches, starts, convention, interval


def index_entries(
    batches: list[tuple[int, int, int, int]], starts: list[int], convention: str, interval: int
) -> list[OffsetPosition]:
    """What a broker writes: at most one entry per append, when > interval bytes went by."""
    entries = []
    last_entry = 0
    ends = [*starts[1:], len(batches)]
    for start, end in zip(starts, ends, strict=True):
        position = batches[start][0]
        if position - last_entry > interval:
            if convention in ("append_first", "batch_first"):
                offset = batches[start][2]
            else:
                offset = batches[end - 1][3]
            entries.append(OffsetPosition(offset, position))
            last_entry = position
    return entries


@settings(max_examples=150, deadline=None)
@given(segments(), st.booleans())
def test_lookup_bounds_property(
    segment: tuple[list[tuple[int, int, int, int]], list[int], str, int], pass_log_size: bool
) -> None:
    batches, starts, convention, interval = segment
    entries = index_entries(batches, starts, convention, interval)
    log_size = batches[-1][0] + batches[-1][1]
    index = parse_offset_index(
        encode_offset_index(entries, BASE), BASE, log_size if pass_log_size else None
    )
    assert as_pairs(index) == [(e.offset, e.position) for e in entries]
    boundaries = {b[0] for b in batches} | {log_size}

    for target in range(BASE - 2, batches[-1][3] + 3):
        # lookup_offset agrees with a linear scan ...
        below = [e for e in entries if e.offset <= target]
        found = lookup_offset(index, target)
        assert found == (below[-1] if below else OffsetPosition(BASE, 0))
        # ... and never skips the batch holding the target (or the first one after it).
        holding = [b for b in batches if b[3] >= target]
        assert found.position <= (holding[0][0] if holding else log_size)

        # lookup_position_after covers every batch with an offset below the target.
        end = lookup_position_after(index, target)
        earlier = [b for b in batches if b[2] < target]
        if end is not None:
            assert end in boundaries
            if earlier:
                assert end >= earlier[-1][0] + earlier[-1][1]


# -- checks (kafka-segments verify) ----------------------------------------------------------


def _appends(
    sizes: list[int], counts: list[int], per_append: list[int]
) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
    """Batch positions and last offsets, and ``(first offset, last offset, position)`` of each
    append grouping ``per_append`` consecutive batches (offsets from 0, no gaps)."""
    positions = np.cumsum([0, *sizes[:-1]]).astype(np.int64)
    last_offsets = np.cumsum(counts).astype(np.int64) - 1
    appends = []
    i = 0
    for n in per_append:
        if i >= len(sizes):
            break
        j = min(i + n, len(sizes))
        first = int(last_offsets[i - 1]) + 1 if i else 0
        appends.append((first, int(last_offsets[j - 1]), int(positions[i])))
        i = j
    return positions, last_offsets, appends


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(70, 500), min_size=1, max_size=40),
    st.data(),
)
def test_every_broker_convention_passes(sizes: list[int], data: st.DataObject) -> None:
    counts = data.draw(st.lists(st.integers(1, 5), min_size=len(sizes), max_size=len(sizes)))
    per_append = data.draw(st.lists(st.integers(1, 4), min_size=len(sizes), max_size=len(sizes)))
    positions, last_offsets, appends = _appends(sizes, counts, per_append)
    log_size = int(positions[-1]) + sizes[-1]
    for convention in (0, 1):  # the append's first offset (before 2.0), its last (2.0+)
        entries = [kidx.OffsetPosition(a[convention], a[2]) for a in appends[1:]]
        raw = kidx.encode_offset_index(entries, 0)
        usable, findings = kidx.check_offset_index(raw, 0, positions, last_offsets, log_size)
        assert (usable, findings) == (len(entries), [])
        # each entry, lowered below the batch before it, makes a lookup miss that batch
        for k, (first, _, position) in enumerate(appends[1:]):
            wrong = list(entries)
            wrong[k] = kidx.OffsetPosition(first - 1, position)
            if k and wrong[k - 1].offset >= first - 1:
                continue  # no longer increasing: a different finding
            _, findings = kidx.check_offset_index(
                kidx.encode_offset_index(wrong, 0), 0, positions, last_offsets, log_size
            )
            assert [f.message for f in findings] == [
                f"entry {k} (offset {first - 1}, position {position}): the batch at position "
                f"{int(positions[positions < position][-1])} holds offsets up to {first - 1}, "
                f"so a lookup of offset {first - 1} would start after it and miss them"
            ]


def test_offset_index_sanity_checks() -> None:
    positions = np.array([0, 100, 200], np.int64)
    last_offsets = np.array([9, 19, 29], np.int64)
    good = kidx.encode_offset_index([kidx.OffsetPosition(19, 100)], 0)
    assert kidx.check_offset_index(good, 0, positions, last_offsets, 300) == (1, [])
    # a zero tail (preallocated slots) is marked as such
    usable, findings = kidx.check_offset_index(good + bytes(16), 0, positions, last_offsets, 300)
    assert usable == 1
    assert findings == [
        kidx.IndexFinding(
            "zero-filled tail of 2 slots from entry 1 (preallocated index of an active or "
            "uncleanly stopped segment)",
            zero_tail=True,
        )
    ]
    # cut mid-entry; not increasing; not a batch start
    _, findings = kidx.check_offset_index(good + b"\x00\x00\x00", 0, positions, last_offsets, 300)
    assert [f.message for f in findings] == [
        ".index length 11 is not a multiple of 8: the last entry is cut after 3 bytes"
    ]
    twice = good + struct.pack(">ii", 15, 200)
    _, findings = kidx.check_offset_index(twice, 0, positions, last_offsets, 300)
    assert [f.message for f in findings] == [
        "entry 1 (offset 15, position 200) does not increase after entry 0 (offset 19, "
        "position 100)"
    ]
    inside = kidx.encode_offset_index([kidx.OffsetPosition(19, 150)], 0)
    _, findings = kidx.check_offset_index(inside, 0, positions, last_offsets, 300)
    assert [f.message for f in findings] == [
        "entry 0 (offset 19, position 150): no batch of the .log starts at that position"
    ]


def test_time_index_checks() -> None:
    last_offsets = np.array([9, 19, 29], np.int64)
    max_ts = np.array([100, 300, 200], np.int64)  # CreateTime need not increase
    good = kidx.encode_time_index([kidx.TimestampOffset(100, 9), kidx.TimestampOffset(300, 19)], 0)
    assert kidx.check_time_index(good, 0, None, last_offsets, max_ts) == (2, [])
    # claims the max up to offset 9 is 50, but a record there has 100
    low = kidx.encode_time_index([kidx.TimestampOffset(50, 9)], 0)
    _, findings = kidx.check_time_index(low, 0, None, last_offsets, max_ts)
    assert [f.message for f in findings] == [
        "entry 0 (timestamp 50, offset 9): a record at or before that offset has timestamp "
        "100, so a lookup by time would start after it"
    ]
    past = kidx.encode_time_index([kidx.TimestampOffset(300, 19)], 0)
    _, findings = kidx.check_time_index(past, 0, 15, last_offsets, max_ts)
    assert [f.message for f in findings] == [
        "1 entries have offsets at or past the next segment's base offset 15, first entry 0 "
        "(offset 19)"
    ]
    _, findings = kidx.check_time_index(good + bytes(24), 0, None, last_offsets, max_ts)
    assert [f.zero_tail for f in findings] == [True]


def test_encode_txn_index_round_trip() -> None:
    txns = [kidx.AbortedTxn(7, 10, 20, 21), kidx.AbortedTxn(8, 30, 31, 40)]
    assert kidx.parse_txn_index(kidx.encode_txn_index(txns)) == txns
    assert kidx.encode_txn_index([]) == b""
