"""Kafka segment index files: ``.index``, ``.timeindex`` and ``.txnindex``.

All integers are big-endian. Offsets inside ``.index`` and ``.timeindex`` are stored relative to
the segment's base offset (the 20-digit number in the file name) as int32.

Offset index ``<base>.index`` (FORMAT §6.2), 8-byte entries::

    0  int32  relative_offset   offset - base_offset
    4  int32  position          byte position in the .log of the first byte of an append

Sparse: one entry at most per append, added when more than ``index.interval.bytes`` (default
4096) were written since the previous entry, so the first entry never points at position 0. The
offset is the first offset of the append (0.8.0-1.1.x) or its last offset (2.0.0+); recovery
rebuilds with the batch's last offset at the batch's position. Both fields strictly increase.

Time index ``<base>.timeindex`` (FORMAT §6.3), 12-byte entries::

    0  int64  timestamp         largest timestamp seen up to and including the batch holding O
    8  int32  relative_offset   O - base_offset

Written together with offset-index entries, but only when the timestamp is strictly greater than
the previous entry's, so timestamps strictly increase and offsets never decrease. A finished
segment ends with an extra entry carrying the segment's max timestamp (added on roll/close).

Both files are preallocated (``segment.index.bytes``, default 10 MiB) and zero-filled while the
segment is active; they are trimmed on roll or clean close (FORMAT §6.4). A reader therefore stops
at the first entry that breaks monotonicity: see :func:`parse_offset_index`. An unusable index is
never an error here; the entries that survive are returned and the caller falls back to scanning.

Transaction index ``<base>.txnindex`` (FORMAT §6.5), 34-byte entries, not preallocated::

    0  int16  version             0
    2  int64  producer_id
    10 int64  first_offset        first offset of the aborted transaction's data
    18 int64  last_offset         offset of the ABORT marker
    26 int64  last_stable_offset  partition LSO when the abort completed

It is strict: a malformed ``.txnindex`` raises :class:`CorruptIndexError`, because silently
dropping an aborted transaction would surface aborted records under read_committed.

``check_offset_index`` / ``check_time_index`` (``kafka-segments verify``) judge an index against
its ``.log``: Kafka's sanity checks plus what a broker's lookup relies on, under every offset
convention Kafka has written (see :func:`check_offset_index`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kafka_segments_ds.errors import CorruptIndexError

INT32_MAX = 2**31 - 1
DEFAULT_INDEX_INTERVAL_BYTES = 4096
NO_TIMESTAMP = -1

# One numpy dtype per on-disk layout. Structured dtypes are packed (no alignment padding), so
# their itemsize is exactly the entry size on disk.
_OFFSET_ENTRY = np.dtype(
    [
        ("relative_offset", ">i4"),  # offset - base_offset
        ("position", ">i4"),  # byte position in the .log
    ]
)
_TIME_ENTRY = np.dtype(
    [
        ("timestamp", ">i8"),  # max timestamp so far
        ("relative_offset", ">i4"),  # offset of the batch carrying it, minus base_offset
    ]
)
_TXN_ENTRY = np.dtype(
    [
        ("version", ">i2"),  # must be 0
        ("producer_id", ">i8"),
        ("first_offset", ">i8"),
        ("last_offset", ">i8"),  # the ABORT marker
        ("last_stable_offset", ">i8"),
    ]
)
OFFSET_ENTRY_SIZE = _OFFSET_ENTRY.itemsize  # 8
TIME_ENTRY_SIZE = _TIME_ENTRY.itemsize  # 12
TXN_ENTRY_SIZE = _TXN_ENTRY.itemsize  # 34

_EMPTY_INT64 = np.zeros(0, dtype=np.int64)
_EMPTY_INT64.flags.writeable = False


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An offset-index entry: the append starting at ``position`` contains ``offset``."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A time-index entry: no record with a timestamp above ``timestamp`` precedes ``offset``."""

    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """A ``.txnindex`` entry: ``producer_id``'s data in [first_offset, last_offset] is aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True, eq=False)
class OffsetIndex:
    """The usable prefix of a ``.index`` file, with absolute offsets."""

    base_offset: int
    offsets: np.ndarray  # int64 absolute offsets, strictly increasing
    positions: np.ndarray  # int64 .log byte positions, strictly increasing
    ignored: int  # raw entries dropped (zero tail, non-monotonic, past the .log end)
    problem: str | None  # why entries were dropped; None when every entry was used

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True, slots=True, eq=False)
class TimeIndex:
    """The usable prefix of a ``.timeindex`` file, with absolute offsets."""

    base_offset: int
    timestamps: np.ndarray  # int64, strictly increasing
    offsets: np.ndarray  # int64 absolute, non-decreasing
    ignored: int
    problem: str | None

    def __len__(self) -> int:
        return len(self.timestamps)


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def _frozen(values: np.ndarray) -> np.ndarray:
    """Return an int64 copy that cannot be modified (the index value objects are frozen)."""
    out = np.ascontiguousarray(values, dtype=np.int64).copy()
    out.flags.writeable = False
    return out


def _first_false(mask: np.ndarray) -> int:
    """Index of the first False in ``mask``, or ``len(mask)`` when all are True."""
    bad = np.flatnonzero(~mask)
    return int(bad[0]) if len(bad) else len(mask)


def _entries(
    data: bytes | memoryview, dtype: np.dtype, kind: str
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """View ``data`` as whole entries; a partial trailing entry is noted as a problem."""
    raw_bytes = np.frombuffer(data, dtype=np.uint8)
    count, rest = divmod(len(raw_bytes), dtype.itemsize)
    problems = []
    if rest:
        problems.append(
            f"{kind} length {len(raw_bytes)} is not a multiple of {dtype.itemsize}; "
            f"ignored the trailing {rest} bytes"
        )
    entries = np.frombuffer(data, dtype=dtype, count=count)
    return raw_bytes, entries, problems


def _describe_cut(raw_bytes: np.ndarray, entry_size: int, cut: int, count: int, why: str) -> str:
    """Explain why entries from slot ``cut`` on were dropped."""
    if not raw_bytes[cut * entry_size : count * entry_size].any():
        # Kafka preallocates index files and trims them only on roll or clean close.
        return (
            f"zero-filled tail of {count - cut} slots from entry {cut} "
            "(preallocated index of an active or uncleanly stopped segment)"
        )
    return why


def parse_offset_index(
    data: bytes | memoryview, base_offset: int, log_size: int | None = None
) -> OffsetIndex:
    """Parse a ``.index`` file, keeping its longest valid prefix (never raises on content).

    Entries are used up to, not including, the first slot ``i > 0`` whose relative offset or
    position is not greater than the previous slot's (this also stops at a zero tail), or the
    first slot with a negative field. With ``log_size``, entries pointing at or past the end of
    the ``.log`` are dropped too. A length that is not a multiple of 8 keeps the whole entries.
    """
    raw_bytes, raw, problems = _entries(data, _OFFSET_ENTRY, ".index")
    count = len(raw)
    rel = raw["relative_offset"].astype(np.int64)
    pos = raw["position"].astype(np.int64)

    cut = count
    why = ""
    if count:
        if rel[0] < 0 or pos[0] < 0:
            cut = 0
            why = f"entry 0 has a negative field (relative offset {rel[0]}, position {pos[0]})"
        else:
            # Once entry 0 is non-negative, strictly increasing entries are all positive, so this
            # single test covers Kafka's "relative offset 0 at i > 0" zero-tail marker as well.
            cut = 1 + _first_false((rel[1:] > rel[:-1]) & (pos[1:] > pos[:-1]))
            if cut < count:
                why = (
                    f"entry {cut} (relative offset {rel[cut]}, position {pos[cut]}) does not "
                    f"increase after entry {cut - 1} (relative offset {rel[cut - 1]}, "
                    f"position {pos[cut - 1]})"
                )
            if cut == 1 and rel[0] == 0 and pos[0] == 0:
                # A lone (0, 0) is an unwritten slot: Kafka never indexes position 0, and the
                # entry would add nothing over the implicit (base_offset, 0) anyway.
                cut = 0
    if cut < count:
        problems.append(_describe_cut(raw_bytes, OFFSET_ENTRY_SIZE, cut, count, why))

    used = cut
    if log_size is not None:
        # Positions strictly increase, so the in-range entries form a prefix.
        used = int(np.searchsorted(pos[:cut], log_size, side="left"))
        if used < cut:
            problems.append(
                f"{cut - used} entries point at or past the end of the .log ({log_size} bytes)"
            )

    return OffsetIndex(
        base_offset=base_offset,
        offsets=_frozen(rel[:used] + base_offset),
        positions=_frozen(pos[:used]),
        ignored=count - used,
        problem="; ".join(problems) or None,
    )


def parse_time_index(
    data: bytes | memoryview, base_offset: int, next_base_offset: int | None = None
) -> TimeIndex:
    """Parse a ``.timeindex`` file, keeping its longest valid prefix (never raises on content).

    Entries are used up to, not including, the first slot ``i > 0`` whose timestamp is not
    greater than the previous one (this stops at a zero tail) or whose offset decreases. Entry 0
    must have a timestamp >= 0 (Kafka appends only timestamps above the initial -1) and an offset
    >= ``base_offset``. With ``next_base_offset``, entries at or past it are dropped.
    """
    raw_bytes, raw, problems = _entries(data, _TIME_ENTRY, ".timeindex")
    count = len(raw)
    ts = raw["timestamp"].astype(np.int64)
    rel = raw["relative_offset"].astype(np.int64)

    cut = count
    why = ""
    if count:
        if ts[0] < 0 or rel[0] < 0:
            cut = 0
            why = f"entry 0 has a negative field (timestamp {ts[0]}, relative offset {rel[0]})"
        else:
            # Offsets may repeat (never decrease); timestamps must strictly increase.
            cut = 1 + _first_false((ts[1:] > ts[:-1]) & (rel[1:] >= rel[:-1]))
            if cut < count:
                why = (
                    f"entry {cut} (timestamp {ts[cut]}, relative offset {rel[cut]}) does not "
                    f"follow entry {cut - 1} (timestamp {ts[cut - 1]}, "
                    f"relative offset {rel[cut - 1]})"
                )
            if cut == 1 and ts[0] == 0 and rel[0] == 0:
                # An all-zero file is a preallocated, never-written index.
                cut = 0
    if cut < count:
        problems.append(_describe_cut(raw_bytes, TIME_ENTRY_SIZE, cut, count, why))

    used = cut
    if next_base_offset is not None:
        # Offsets are non-decreasing, so the entries below the next segment form a prefix.
        used = int(np.searchsorted(rel[:cut], next_base_offset - base_offset, side="left"))
        if used < cut:
            problems.append(
                f"{cut - used} entries have offsets at or past the next segment's base offset "
                f"{next_base_offset}"
            )

    return TimeIndex(
        base_offset=base_offset,
        timestamps=_frozen(ts[:used]),
        offsets=_frozen(rel[:used] + base_offset),
        ignored=count - used,
        problem="; ".join(problems) or None,
    )


def parse_txn_index(data: bytes | memoryview) -> list[AbortedTxn]:
    """Parse a ``.txnindex`` file strictly; raise :class:`CorruptIndexError` on bad content.

    A trailing region of zero bytes (from the first all-zero entry to the end of the file) is
    accepted as the end: the file is not preallocated, but a copy taken mid-write may be padded.
    """
    raw_bytes = np.frombuffer(data, dtype=np.uint8)
    count, rest = divmod(len(raw_bytes), TXN_ENTRY_SIZE)
    entries = np.frombuffer(data, dtype=_TXN_ENTRY, count=count)

    # An all-zero entry cannot be real (the ABORT marker and the aborted data would share
    # offset 0), so the first one can only start padding.
    rows = raw_bytes[: count * TXN_ENTRY_SIZE].reshape(count, TXN_ENTRY_SIZE)
    end = _first_false(np.asarray(rows.any(axis=1)))
    tail_start = end * TXN_ENTRY_SIZE
    if tail_start < len(raw_bytes):
        if raw_bytes[tail_start:].any():
            if end < count:
                raise CorruptIndexError(
                    f".txnindex entry {end} at byte position {tail_start} is all zeros "
                    "but later bytes are not"
                )
            raise CorruptIndexError(
                f".txnindex length {len(raw_bytes)} is not a multiple of {TXN_ENTRY_SIZE}: "
                f"entry {count} at byte position {tail_start} has only {rest} bytes"
            )
        entries = entries[:end]

    versions = entries["version"]
    bad = np.flatnonzero(versions != 0)
    if len(bad):
        i = int(bad[0])
        raise CorruptIndexError(
            f".txnindex entry {i} at byte position {i * TXN_ENTRY_SIZE}: "
            f"version {int(versions[i])}, expected 0"
        )
    return [
        AbortedTxn(int(pid), int(first), int(last), int(lso))
        for pid, first, last, lso in zip(
            entries["producer_id"].tolist(),
            entries["first_offset"].tolist(),
            entries["last_offset"].tolist(),
            entries["last_stable_offset"].tolist(),
            strict=True,
        )
    ]


# --------------------------------------------------------------------------------------------
# Lookup
# --------------------------------------------------------------------------------------------


def lookup_offset(index: OffsetIndex, target: int) -> OffsetPosition:
    """Largest entry with offset <= ``target``; ``(base_offset, 0)`` when there is none.

    Scanning batches forward from the returned position reaches ``target`` (or the first batch
    after it): the append at that position contains an offset <= ``target``.
    """
    i = int(np.searchsorted(index.offsets, target, side="right")) - 1
    if i < 0:
        return OffsetPosition(index.base_offset, 0)
    return OffsetPosition(int(index.offsets[i]), int(index.positions[i]))


def lookup_position_after(index: OffsetIndex, target: int) -> int | None:
    """An exclusive end position: every record with offset < ``target`` lies before it.

    Returns ``None`` when the index cannot bound it (read to the end of the segment).
    """
    # An entry (O_k, P_k) says "the append starting at P_k contains offset O_k". That holds for
    # every convention Kafka used: the append's first offset (0.8-1.1), its last offset (2.0+),
    # the batch's base or last offset or first deep offset (recovery rebuilds). The append lies
    # wholly before P_{k+1}, which starts a later append, and offsets strictly increase through
    # the log, so every record at a position >= P_{k+1} has an offset > O_k.
    #
    # Hence, for the first k with O_k >= target - 1, every record at or after P_{k+1} has an
    # offset >= target: reading [start, P_{k+1}) covers all offsets < target. P_k itself would
    # do for pre-2.0 indexes (O_k is the first offset there) but not for 2.0+ ones, where the
    # append at P_k may start below target; the version is not recorded, so use P_{k+1}.
    k = int(np.searchsorted(index.offsets, target - 1, side="left"))
    if k + 1 >= len(index.offsets):
        return None
    return int(index.positions[k + 1])


def lookup_timestamp(index: TimeIndex, target: int) -> TimestampOffset:
    """Largest entry with timestamp <= ``target``; ``(-1, base_offset)`` when there is none.

    Records with a timestamp >= ``target`` can only be at or after the batch holding the returned
    offset (FORMAT §6.3, Kafka's ``findOffsetByTimestamp``).
    """
    i = int(np.searchsorted(index.timestamps, target, side="right")) - 1
    if i < 0:
        return TimestampOffset(NO_TIMESTAMP, index.base_offset)
    return TimestampOffset(int(index.timestamps[i]), int(index.offsets[i]))


def segment_max_timestamp(index: TimeIndex) -> int | None:
    """The segment's max timestamp from its last entry, or ``None`` when it cannot be trusted.

    Only a finished (rolled or cleanly closed) segment's index ends with the max-timestamp entry
    and such an index is trimmed. ``None`` when the index is empty or entries were dropped (a
    zero tail means the segment was active or the broker stopped uncleanly, so the last entry
    may be stale). The caller must still not use this for the partition's last segment.
    """
    if len(index.timestamps) == 0 or index.ignored:
        return None
    return int(index.timestamps[-1])


# --------------------------------------------------------------------------------------------
# Checks (``kafka-segments verify``)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexFinding:
    """A problem in an index file. ``zero_tail`` marks unused preallocated slots: normal for a
    partition's active segment (copy of a running or crashed broker), a defect elsewhere."""

    message: str
    zero_tail: bool = False


def _sanity_findings(
    raw_bytes: np.ndarray, entry_size: int, kind: str, usable: int, why: str
) -> list[IndexFinding]:
    """Length and dropped-slot findings shared by both index kinds."""
    findings = []
    count, rest = divmod(len(raw_bytes), entry_size)
    if rest:
        findings.append(
            IndexFinding(
                f"{kind} length {len(raw_bytes)} is not a multiple of {entry_size}: the last "
                f"entry is cut after {rest} bytes"
            )
        )
    if usable < count:
        if not raw_bytes[usable * entry_size : count * entry_size].any():
            findings.append(
                IndexFinding(
                    f"zero-filled tail of {count - usable} slots from entry {usable} "
                    "(preallocated index of an active or uncleanly stopped segment)",
                    zero_tail=True,
                )
            )
        else:
            findings.append(IndexFinding(why))
    return findings


def check_offset_index(
    data: bytes | memoryview,
    base_offset: int,
    positions: np.ndarray,
    last_offsets: np.ndarray,
    log_size: int,
) -> tuple[int, list[IndexFinding]]:
    """Entries of a ``.index`` and the findings a broker's lookup would suffer from.

    ``positions``/``last_offsets`` describe the ``.log``'s entries (batches, legacy messages).
    Besides Kafka's sanity checks (whole entries, last offset >= base) and monotonicity, every
    entry (O, P) must satisfy what ``lookup`` relies on: P starts an entry of the ``.log`` and
    no record at a position before P has an offset >= O (else a lookup of that offset starts at
    P and misses it). That holds for every convention Kafka used: the append's first offset
    (before 2.0), its last offset (2.0+; a follower appends several batches at once), the batch
    last or base offset of a rebuild.
    """
    raw_bytes = np.frombuffer(data, dtype=np.uint8)
    raw = np.frombuffer(data, dtype=_OFFSET_ENTRY, count=len(raw_bytes) // OFFSET_ENTRY_SIZE)
    index = parse_offset_index(data, base_offset)
    usable = len(index)
    why = ""
    if usable < len(raw):
        rel, pos = int(raw["relative_offset"][usable]), int(raw["position"][usable])
        why = f"entry {usable} (offset {base_offset + rel}, position {pos}) "
        why += (
            "has a negative field"
            if usable == 0
            else f"does not increase after entry {usable - 1} (offset "
            f"{int(index.offsets[-1])}, position {int(index.positions[-1])})"
        )
    findings = _sanity_findings(raw_bytes, OFFSET_ENTRY_SIZE, ".index", usable, why)
    if len(raw) and int(raw["relative_offset"][-1]) < 0:
        findings.append(
            IndexFinding(
                f"the last entry's offset {base_offset + int(raw['relative_offset'][-1])} is "
                f"below the base offset {base_offset}"
            )
        )
    past = int(np.searchsorted(index.positions, log_size, side="left"))
    if past < usable:
        findings.append(
            IndexFinding(
                f"{usable - past} entries point at or past the end of the .log ({log_size} "
                f"bytes), first entry {past} (offset {int(index.offsets[past])}, "
                f"position {int(index.positions[past])})"
            )
        )
    for k, (offset, position) in enumerate(
        zip(index.offsets[:past].tolist(), index.positions[:past].tolist(), strict=True)
    ):
        i = int(np.searchsorted(positions, position))
        if i >= len(positions) or positions[i] != position:
            findings.append(
                IndexFinding(
                    f"entry {k} (offset {offset}, position {position}): no batch of the .log "
                    "starts at that position"
                )
            )
            break
        if i and last_offsets[i - 1] >= offset:
            findings.append(
                IndexFinding(
                    f"entry {k} (offset {offset}, position {position}): the batch at position "
                    f"{int(positions[i - 1])} holds offsets up to {int(last_offsets[i - 1])}, "
                    f"so a lookup of offset {offset} would start after it and miss them"
                )
            )
            break
    return usable, findings


def check_time_index(
    data: bytes | memoryview,
    base_offset: int,
    next_base_offset: int | None,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
) -> tuple[int, list[IndexFinding]]:
    """Entries of a ``.timeindex`` and its findings: Kafka's sanity checks, timestamps and
    offsets that go backwards, offsets outside the segment, and entries (T, O) that claim a
    max timestamp T below a timestamp stored at or before the batch holding O (a lookup by
    time would start after that record)."""
    raw_bytes = np.frombuffer(data, dtype=np.uint8)
    raw = np.frombuffer(data, dtype=_TIME_ENTRY, count=len(raw_bytes) // TIME_ENTRY_SIZE)
    index = parse_time_index(data, base_offset)
    usable = len(index)
    why = ""
    if usable < len(raw):
        ts, rel = int(raw["timestamp"][usable]), int(raw["relative_offset"][usable])
        why = f"entry {usable} (timestamp {ts}, offset {base_offset + rel}) "
        if usable == 0:
            why += "has a negative field"
        elif ts < int(index.timestamps[-1]):
            why += f"goes back in time after entry {usable - 1} (timestamp {index.timestamps[-1]})"
        elif ts == int(index.timestamps[-1]):
            why += f"repeats the timestamp of entry {usable - 1}"
        else:
            why += f"goes back to a lower offset after entry {usable - 1} ({index.offsets[-1]})"
    findings = _sanity_findings(raw_bytes, TIME_ENTRY_SIZE, ".timeindex", usable, why)
    end = usable
    if next_base_offset is not None:
        end = int(np.searchsorted(index.offsets, next_base_offset, side="left"))
        if end < usable:
            findings.append(
                IndexFinding(
                    f"{usable - end} entries have offsets at or past the next segment's base "
                    f"offset {next_base_offset}, first entry {end} (offset "
                    f"{int(index.offsets[end])})"
                )
            )
    running_max = np.maximum.accumulate(max_timestamps) if len(max_timestamps) else max_timestamps
    for k, (ts, offset) in enumerate(
        zip(index.timestamps[:end].tolist(), index.offsets[:end].tolist(), strict=True)
    ):
        i = int(np.searchsorted(last_offsets, offset, side="left"))
        if i >= len(last_offsets):
            findings.append(
                IndexFinding(
                    f"entry {k} (timestamp {ts}, offset {offset}): the .log ends before that offset"
                )
            )
            break
        if running_max[i] > ts:
            findings.append(
                IndexFinding(
                    f"entry {k} (timestamp {ts}, offset {offset}): a record at or before that "
                    f"offset has timestamp {int(running_max[i])}, so a lookup by time would "
                    "start after it"
                )
            )
            break
    return usable, findings


# --------------------------------------------------------------------------------------------
# Encoding and building
# --------------------------------------------------------------------------------------------


def _as_array(values: Sequence[int] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if len(array) and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64)


def _check_int32(values: np.ndarray, name: str) -> None:
    if len(values) and (values.min() < 0 or values.max() > INT32_MAX):
        bad = values[(values < 0) | (values > INT32_MAX)][0]
        raise ValueError(f"{name} {int(bad)} does not fit a non-negative int32")


def _check_increasing(values: np.ndarray, name: str, strict: bool = True) -> None:
    ok = values[1:] > values[:-1] if strict else values[1:] >= values[:-1]
    i = _first_false(ok)
    if i < len(ok):
        order = "strictly increasing" if strict else "non-decreasing"
        raise ValueError(
            f"{name} must be {order}: entry {i + 1} ({int(values[i + 1])}) follows {int(values[i])}"
        )


def encode_offset_index(
    entries: Sequence[OffsetPosition] | tuple[np.ndarray, np.ndarray], base_offset: int
) -> bytes:
    """Encode ``.index`` bytes from entries or an ``(offsets, positions)`` pair of arrays.

    Offsets are absolute; raise ``ValueError`` unless both fields strictly increase and fit int32
    (relative to ``base_offset`` for offsets).
    """
    if (
        isinstance(entries, tuple)
        and len(entries) == 2
        and not isinstance(entries[0], OffsetPosition)
    ):
        offsets = _as_array(entries[0], "offsets")
        positions = _as_array(entries[1], "positions")
    else:
        offsets = _as_array([e.offset for e in entries], "offsets")
        positions = _as_array([e.position for e in entries], "positions")
    if len(offsets) != len(positions):
        raise ValueError(f"{len(offsets)} offsets but {len(positions)} positions")
    relative = offsets - base_offset
    _check_int32(relative, "relative offset")
    _check_int32(positions, "position")
    _check_increasing(relative, "offsets")
    _check_increasing(positions, "positions")
    out = np.empty(len(offsets), dtype=_OFFSET_ENTRY)
    out["relative_offset"] = relative
    out["position"] = positions
    return out.tobytes()


def encode_time_index(
    entries: Sequence[TimestampOffset] | tuple[np.ndarray, np.ndarray], base_offset: int
) -> bytes:
    """Encode ``.timeindex`` bytes from entries or a ``(timestamps, offsets)`` pair of arrays.

    Raise ``ValueError`` unless timestamps are >= 0 and strictly increase and offsets are
    non-decreasing and fit int32 relative to ``base_offset``.
    """
    if (
        isinstance(entries, tuple)
        and len(entries) == 2
        and not isinstance(entries[0], TimestampOffset)
    ):
        timestamps = _as_array(entries[0], "timestamps")
        offsets = _as_array(entries[1], "offsets")
    else:
        timestamps = _as_array([e.timestamp for e in entries], "timestamps")
        offsets = _as_array([e.offset for e in entries], "offsets")
    if len(timestamps) != len(offsets):
        raise ValueError(f"{len(timestamps)} timestamps but {len(offsets)} offsets")
    relative = offsets - base_offset
    _check_int32(relative, "relative offset")
    if len(timestamps) and timestamps[0] < 0:
        raise ValueError(f"timestamp {int(timestamps[0])} is negative")
    _check_increasing(timestamps, "timestamps")
    _check_increasing(relative, "offsets", strict=False)
    out = np.empty(len(timestamps), dtype=_TIME_ENTRY)
    out["timestamp"] = timestamps
    out["relative_offset"] = relative
    return out.tobytes()


def encode_txn_index(entries: Sequence[AbortedTxn]) -> bytes:
    """``.txnindex`` bytes (version 0) for ``entries``."""
    out = np.zeros(len(entries), dtype=_TXN_ENTRY)
    for i, txn in enumerate(entries):
        out[i] = (0, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
    return out.tobytes()


def build_indexes(
    positions: np.ndarray,
    sizes: np.ndarray,
    last_offsets: np.ndarray,
    max_timestamps: np.ndarray,
    base_offset: int,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> tuple[bytes, bytes]:
    """Build ``(.index, .timeindex)`` bytes the way a 2.0+ broker's recovery does (FORMAT §6.2/3).

    One element per batch, in log order. Walking the batches with ``last_entry = 0``: the running
    max timestamp and the last offset of the first batch reaching it are updated first; then if
    ``position - last_entry > index_interval_bytes`` an offset entry (batch last offset, batch
    position) is added, with a time entry (running max, its offset) when that timestamp exceeds
    the previous time entry's (initially -1). Finally the roll/close time entry is added on the
    same condition.
    """
    positions = _as_array(positions, "positions")
    sizes = _as_array(sizes, "sizes")
    last_offsets = _as_array(last_offsets, "last_offsets")
    max_timestamps = _as_array(max_timestamps, "max_timestamps")
    count = len(positions)
    if not len(sizes) == len(last_offsets) == len(max_timestamps) == count:
        raise ValueError("positions, sizes, last_offsets and max_timestamps differ in length")
    if index_interval_bytes < 0:
        raise ValueError(f"index_interval_bytes must be >= 0, got {index_interval_bytes}")
    if count == 0:
        return b"", b""
    _check_int32(positions, "position")
    _check_int32(last_offsets - base_offset, "relative offset")
    _check_increasing(last_offsets, "last_offsets")
    if np.any(positions[1:] < positions[:-1] + sizes[:-1]) or np.any(sizes <= 0):
        raise ValueError("batches must have positive sizes and must not overlap")

    # Running max timestamp (starting from Kafka's initial -1) and the batch that first set it:
    # a batch updates the max only when strictly greater, so ties keep the earlier batch.
    running_max = np.maximum.accumulate(np.maximum(max_timestamps, NO_TIMESTAMP))
    previous_max = np.concatenate(([NO_TIMESTAMP], running_max[:-1]))
    carrier = np.maximum.accumulate(np.where(max_timestamps > previous_max, np.arange(count), -1))
    offset_of_max = np.where(carrier >= 0, last_offsets[np.maximum(carrier, 0)], base_offset)

    # The entry rule depends on the previous entry, so jump from entry to entry; that costs one
    # binary search per entry rather than a Python step per batch (bisect on a list is several
    # times faster than np.searchsorted on scalars).
    position_list = positions.tolist()
    selected = []
    last_entry = 0
    while True:
        i = bisect.bisect_right(position_list, last_entry + index_interval_bytes)
        if i >= count:
            break
        selected.append(i)
        last_entry = position_list[i]
    chosen = np.asarray(selected, dtype=np.int64)

    # running_max is non-decreasing, so "greater than the last appended entry" is the same as
    # "greater than the previous candidate"; the close entry follows the same rule.
    candidates = np.append(chosen, count - 1)
    cand_ts = running_max[candidates]
    keep = cand_ts > np.concatenate(([NO_TIMESTAMP], cand_ts[:-1]))
    time_ts = cand_ts[keep]
    time_offsets = offset_of_max[candidates][keep]

    offset_index = encode_offset_index((last_offsets[chosen], positions[chosen]), base_offset)
    time_index = encode_time_index((time_ts, time_offsets), base_offset)
    return offset_index, time_index


def rebuild_indexes(
    log: bytes | bytearray | memoryview,
    base_offset: int,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
) -> tuple[bytes, bytes]:
    """``(.index, .timeindex)`` bytes for a whole ``.log``, as a broker's recovery writes them.

    Raises :class:`CorruptSegmentError` when the log cannot be framed to its end (a broker would
    truncate there; rebuilding an index for a damaged log is refused instead).
    """
    from kafka_segments_ds.records.batches import require_complete, scan_entries

    table = scan_entries(log)
    require_complete(table, len(log))
    return build_indexes(
        table.positions,
        table.sizes,
        table.last_offsets,
        table.max_timestamps,
        base_offset,
        index_interval_bytes,
    )
