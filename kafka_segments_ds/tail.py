"""A segment's tail by the reader's own rules: where its last valid entry ends, and the offset
after it.

Three callers ask this of a partition's last segment: the range check of ``startingOffsets``
(:mod:`~kafka_segments_ds.ranges`), the writer's append (the next offset it gives) and a
stream's latest offset. Each must count exactly the entries the batch reader returns, so the
walk here applies the reader's rules, entry by entry from a start the ``.index`` proves (or
byte 0):

* an entry counts when its framing is plausible, it lies whole in the file, its checksum
  matches, and its offsets follow the last counted entry's (its first offset above that one's
  last, its last offset at or above its first and below the next segment's base offset);
* anything else is damage the caller decides on (``on_damage``): stop there, or go on where the
  reader would resume. A checksum-valid entry whose offsets do not follow is dropped whole by
  the reader (DROPMALFORMED) or raises (FAILFAST); the reader returns none of its records, so
  it never moves the tail.

A legacy entry is ordered by its offset field, the last offset of a compressed wrapper (the
first is inside its compressed payload); the reader also compares the first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import ChecksumError, CorruptSegmentError
from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.records.batches import (
    ENTRY_HEAD_BYTES,
    EntryHead,
    EntryWindow,
    Read,
    as_array,
    decode_entry_head,
    has_valid_checksum,
    probe_entry,
    walk_entries,
)
from kafka_segments_ds.records.checksums import crc32, crc32c

WINDOW_BYTES = 1 << 20  # reads of the walk
MAX_REREADS = 8  # a place ``on_damage`` sends the walk back to (rewritten since read), per walk


@dataclass(frozen=True, slots=True)
class SegmentTail:
    """Where the entries of a segment of ``size`` bytes were walked to."""

    size: int
    end_position: int  # after the last entry counted or passed over as damage
    next_offset: int  # the offset after the last counted entry (the base offset: none)


@dataclass(frozen=True, slots=True)
class Damage:
    """An entry the reader does not return, met by a tail walk."""

    position: int
    offset: int | None  # its offset field, where 8 bytes remain
    last_offset: int  # the last offset of the last counted entry (base offset - 1: none)
    error: CorruptSegmentError | None  # why a whole entry is refused; None: no whole entry
    entry: EntryHead | None  # the whole entry (plausible framing, inside the file)
    checksum_valid: bool  # the whole entry's checksum matches: only its offsets are wrong


OnDamage = Callable[[Damage], "int | None"]
"""``on_damage(damage)``: where the walk goes on (a later position; the same one to read it
again), or None to stop there. It may raise."""


def stop(_: Damage) -> None:
    """The default ``on_damage``: the tail ends where the damage starts."""
    return None


def skip_dropped(damage: Damage) -> int | None:
    """An ``on_damage`` that passes over a checksum-valid entry whose offsets do not follow,
    as DROPMALFORMED drops it whole (FAILFAST raises there when the reader reaches it), and
    stops at any other damage, which only the reader's resynchronisation can see through."""
    if damage.checksum_valid and damage.entry is not None:
        return damage.position + damage.entry.length
    return None


def tail_start(
    filesystem: pafs.FileSystem, seg: SegmentRef, read: Read, check_limit: int | None = None
) -> int:
    """Where a walk of ``seg`` may start: the last ``.index`` position when a whole valid entry
    starts there whose offsets hold the index entry's offset, else 0. The index is not
    checksummed: a damaged one only costs the walk from byte 0."""
    if seg.index_path is None or not seg.index_size or not seg.size:
        return 0
    index = kidx.parse_offset_index(
        memoryview(kfs.read_file(filesystem, seg.index_path)), seg.base_offset, seg.size
    )
    if index.positions.shape[0] == 0:
        return 0
    position, offset = int(index.positions[-1]), int(index.offsets[-1])
    entry = probe_entry(_bounded(read, seg.size), position, seg.size, check_limit=check_limit)
    if entry is None or entry.offset < seg.base_offset or not _holds(entry, offset):
        return 0
    return position


def _bounded(read: Read, size: int) -> Read:
    """``read`` seeing only the first ``size`` bytes (the size the segment was listed with:
    a file growing while it is walked is walked to that size, as the reader reads it)."""

    def bounded(position: int, length: int) -> np.ndarray | bytes:
        return read(position, max(0, min(length, size - position)))

    return bounded


def _holds(entry: EntryHead, offset: int) -> bool:
    """Whether an index entry's ``offset`` can point at ``entry`` (a broker indexes an entry by
    its last offset; older writers by its first)."""
    if entry.magic < 2:
        return offset <= entry.last_offset
    return entry.offset <= offset <= entry.last_offset


def walk_tail(
    read: Read,
    size: int,
    position: int,
    next_offset: int,
    *,
    next_base: int | None = None,
    on_damage: OnDamage = stop,
    check_limit: int | None = None,
) -> SegmentTail:
    """Walk the entries from ``position`` (an entry boundary; the entries before it end with
    offset ``next_offset - 1``) to the end of a file of ``size`` bytes, by the reader's rules
    (module docstring). Entries longer than ``check_limit`` count on their framing alone."""
    read = _bounded(read, size)
    end = position
    rereads = 0
    while position < size:
        damage: Damage | None = None
        framed = position  # where the framing of this pass stops
        for walked in walk_entries(read, position, size, WINDOW_BYTES, size):
            for at in walked.positions.tolist():
                start = walked.base + at
                head = decode_entry_head(walked.window[at : at + ENTRY_HEAD_BYTES], start)
                if head is None:  # hop_entries framed it: a head cut by the window's end
                    head = decode_entry_head(as_array(read(start, ENTRY_HEAD_BYTES)), start)
                    assert head is not None
                framed = start + head.length
                damage = _judge(read, head, walked, at, next_offset, next_base, check_limit)
                if damage is not None:
                    break
                next_offset, end = head.last_offset + 1, framed
            if damage is not None:
                break
        if damage is None:
            if framed >= size:
                return SegmentTail(size, max(end, framed), next_offset)
            damage = _framing_damage(read, framed, next_offset)
        resume = on_damage(damage)
        if resume is None:
            return SegmentTail(size, end, next_offset)
        if resume <= damage.position:  # read it again: it changed since it was read
            rereads += 1
            if rereads > MAX_REREADS:
                return SegmentTail(size, end, next_offset)
        else:
            end = min(resume, size)
        position = resume
    return SegmentTail(size, end, next_offset)


def _judge(
    read: Read,
    head: EntryHead,
    walked: EntryWindow,
    at: int,
    next_offset: int,
    next_base: int | None,
    check_limit: int | None,
) -> Damage | None:
    """None when the whole, plausibly framed entry ``head`` counts; else the damage."""
    last = next_offset - 1
    if check_limit is None or head.length <= check_limit:
        data = walked.window[at : at + head.length]
        if data.shape[0] < head.length:
            data = as_array(read(head.position, head.length))
        if not has_valid_checksum(data):
            return Damage(head.position, head.offset, last, _checksum_error(data), head, False)
    reason = None
    if head.last_offset < head.offset:
        reason = f"lastOffsetDelta takes the offsets of batch {head.offset} below it"
    elif head.offset <= last and head.magic == 2:
        reason = (
            f"offsets not increasing: batch offsets {head.offset}..{head.last_offset} "
            f"after offset {last}"
        )
    elif head.offset <= last:
        reason = f"offsets not increasing: offset {head.offset} after offset {last}"
    elif next_base is not None and head.last_offset >= next_base:
        reason = f"offset {head.last_offset} reaches the next segment's base offset {next_base}"
    if reason is None:
        return None
    return Damage(head.position, head.offset, last, CorruptSegmentError(reason), head, True)


def _checksum_error(entry: np.ndarray) -> ChecksumError:
    """The batch reader's error for an entry whose stored CRC does not match."""
    if entry[16] == 2:
        name, stored, actual = "CRC-32C", entry[17:21], crc32c(entry.data[21:])
    else:
        name, stored, actual = "CRC-32", entry[12:16], crc32(entry.data[16:])
    expected = int.from_bytes(stored.tobytes(), "big")
    return ChecksumError(f"{name} mismatch: stored {expected:#010x}, computed {actual:#010x}")


def _framing_damage(read: Read, position: int, next_offset: int) -> Damage:
    field = bytes(read(position, 8))
    offset = int.from_bytes(field, "big", signed=True) if len(field) == 8 else None
    return Damage(position, offset, next_offset - 1, None, None, False)


def segment_tail(
    filesystem: pafs.FileSystem,
    seg: SegmentRef,
    *,
    next_base: int | None = None,
    on_damage: OnDamage = stop,
    check_limit: int | None = None,
) -> SegmentTail:
    """The tail of ``seg``, walked from :func:`tail_start`."""
    if seg.size == 0:
        return SegmentTail(0, 0, seg.base_offset)
    with kfs.RangeReader(filesystem, seg.path) as read:
        start = tail_start(filesystem, seg, read, check_limit)
        return walk_tail(
            read,
            seg.size,
            start,
            seg.base_offset,
            next_base=next_base,
            on_damage=on_damage,
            check_limit=check_limit,
        )


__all__ = [
    "Damage",
    "OnDamage",
    "SegmentTail",
    "segment_tail",
    "skip_dropped",
    "stop",
    "tail_start",
    "walk_tail",
]
