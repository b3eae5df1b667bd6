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
  it never moves the tail;
* with verifyChecksums=false (``verify_checksums=False``) the reader returns a whole entry whose
  checksum fails when its offsets follow and (given ``decodes``) its records decode, so the
  walk counts it then, except where it may still be being written
  (:func:`unchecked_in_progress`). Otherwise it is damage (``checksum_valid`` False), as with
  checks: the reader's damage policy resynchronises past it.

A legacy entry is ordered by its offset field, the last offset of a compressed wrapper (the
first is inside its compressed payload); the reader (deep iteration) also compares the first,
and so does a walk given ``decodes``: a wrapper whose first inner offset is not above the last
counted entry's last offset goes back from it, as an entry whose offset field does.

The walk does not decode records, but the reader (deep iteration) drops a checksum-valid batch
whose records do not decode, and its offsets do not raise the reader's order floor: a later
entry whose offsets go back from it may then be returned (515151:39109). Given ``decodes``
(:func:`records_decode`), the walk asks it lazily, only where it matters: when a checksum-valid
entry's offsets go back, the counted entries it goes back over are decoded from the last one
down, and those that do not decode are uncounted, until one that decodes (the entry is dropped,
as the reader drops it) or none is left above it (the entry counts); and at the end, the last
counted entry is decoded, so the tail's offset is 1 + the last offset of the last entry the
reader returns, never that of an entry it drops nor of one it passes over (a batch whose offsets
go back over a valid one is dropped whatever its last offset).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import ChecksumError, CorruptSegmentError, MissingCodecError
from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.records import kernels as K
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
from kafka_segments_ds.records.compression import decompress
from kafka_segments_ds.records.kept import kept_last_offset

WINDOW_BYTES = 1 << 20  # reads of the walk
MAX_REREADS = 8  # a place ``on_damage`` sends the walk back to (rewritten since read), per walk
ZERO_HEAD_BYTES = 17  # offset, size, epoch/crc, magic: zeros there are no entry (nothing written)
ZERO_TAIL_BYTES = 8  # an entry ending the file in this many zeros may be torn (unchecked)
V2_OVERHEAD = 61  # bytes of a v2 batch before its first record


@dataclass(frozen=True, slots=True)
class SegmentTail:
    """Where the entries of a segment of ``size`` bytes were walked to."""

    size: int
    end_position: int  # after the last entry counted or passed over as damage
    next_offset: int  # the offset after the last counted entry (the base offset: none)
    damaged: bool = False  # a stream's walk went on past damage in this segment
    # it counted an entry whose header does not tell its last offset: a magic-1 wrapper with
    # offset field 0, as a producer writes it (its inner messages keep their numbering 0..n-1)
    guessed: bool = False


Decodes = Callable[[np.ndarray, int], bool]
"""``decodes(entry, floor)``: whether the reader returns the records of a whole, checksum-valid
entry (its bytes) after an entry whose last offset is ``floor`` (:func:`records_decode`; only a
compressed legacy wrapper's first inner offset is compared with it)."""

NO_FLOOR = -(1 << 64)  # below every offset: ``decodes`` asks only whether an entry decodes


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
        memoryview(kfs.read_index_file(filesystem, seg.index_path)), seg.base_offset, seg.size
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
    decodes: Decodes | None = None,
    verify_checksums: bool = True,
) -> SegmentTail:
    """Walk the entries from ``position`` (an entry boundary; the entries before it end with
    offset ``next_offset - 1``) to the end of a file of ``size`` bytes, by the reader's rules
    (module docstring). Entries longer than ``check_limit`` count on their framing alone (and
    are not decoded). ``decodes``: whether the reader returns an entry's records (module
    docstring); None: every checksum-valid entry counts (shallow iteration, the writer).
    ``verify_checksums``: the read's option (False: a whole entry whose checksum fails counts
    unless it may still be being written, module docstring)."""
    read = _bounded(read, size)
    judge = _Judge(read, next_base, check_limit, verify_checksums, decodes)
    kept = _Kept(next_offset, decodes, check_limit, read)
    end = position
    rereads = 0
    guessed = False
    while position < size:
        damage: Damage | None = None
        framed = position  # where the framing of this pass stops
        for walked in walk_entries(read, position, size, WINDOW_BYTES, size):
            kept.window = walked
            for at in walked.positions.tolist():
                start = walked.base + at
                head = decode_entry_head(walked.window[at : at + ENTRY_HEAD_BYTES], start)
                if head is None:  # hop_entries framed it: a head cut by the window's end
                    head = decode_entry_head(as_array(read(start, ENTRY_HEAD_BYTES)), start)
                    assert head is not None
                framed = start + head.length
                damage = judge(head, walked, at, next_offset)
                damage = damage or kept.inner_back(head, next_offset)
                if damage is not None and kept.goes_back(damage):
                    next_offset = kept.floor_below(damage)
                    damage = judge(head, walked, at, next_offset)
                    damage = damage or kept.inner_back(head, next_offset)
                if damage is not None:
                    break
                kept.count(head)
                next_offset, end = head.last_offset + 1, framed
                guessed = guessed or (head.magic == 1 and head.codec != 0 and head.offset == 0)
            if damage is not None:
                break
        if damage is None:
            if framed >= size:
                return SegmentTail(size, max(end, framed), kept.next_offset(), guessed=guessed)
            damage = _framing_damage(read, framed, next_offset)
        floor = kept.next_offset()  # the reader's order floor: the last entry it returns
        if floor < next_offset:  # the last counted ones do not decode (20261130:73)
            next_offset = floor
            damage = replace(damage, last_offset=floor - 1)
        resume = on_damage(damage)
        if resume is None:
            return SegmentTail(size, end, kept.next_offset(), guessed=guessed)
        if resume <= damage.position:  # read it again: it changed since it was read
            rereads += 1
            if rereads > MAX_REREADS:
                return SegmentTail(size, end, kept.next_offset(), guessed=guessed)
        else:
            end = min(resume, size)
        position = resume
    return SegmentTail(size, end, kept.next_offset(), guessed=guessed)


class _Kept:
    """The entries a walk counted, for the reader's order floor (module docstring): entries it
    drops for records that do not decode are uncounted when that is asked."""

    def __init__(
        self, start: int, decodes: Decodes | None, check_limit: int | None, read: Read
    ) -> None:
        self.read = read
        self.window: EntryWindow | None = None  # the walk's last window
        self.start = start  # the next offset before the walk's first entry
        self.end = start  # the next offset after the last counted entry
        self.decodes, self.check_limit = decodes, check_limit
        self.entries: list[EntryHead] = []  # given ``decodes``: those counted
        self.returned: set[int] = set()  # positions of entries that decode
        self.back: set[int] = set()  # positions of wrappers whose first inner offset went back

    def count(self, head: EntryHead) -> None:
        self.end = head.last_offset + 1
        if self.decodes is not None:
            self.entries.append(head)

    def inner_back(self, head: EntryHead, next_offset: int) -> Damage | None:
        """Given ``decodes``, the damage of a compressed legacy wrapper ``head`` that decodes
        but whose first inner offset is not above ``next_offset - 1`` (the reader drops it as
        going back, DROPMALFORMED, or raises, FAILFAST); else None."""
        if not self._wrapper(head) or self._decodes_after(head, next_offset - 1):
            return None
        if not self._returned(head):
            return None  # it does not decode: counted, and uncounted where that matters
        self.back.add(head.position)
        error = CorruptSegmentError(
            f"offsets not increasing: the first offset inside the wrapper at offset "
            f"{head.offset} is not above offset {next_offset - 1}"
        )
        return Damage(head.position, head.offset, next_offset - 1, error, head, True)

    def goes_back(self, damage: Damage) -> bool:
        """Whether ``damage`` is a checksum-valid entry whose offsets go back from the last
        counted entry's, one that may count once entries the reader drops are uncounted."""
        entry = damage.entry
        return (
            self.decodes is not None
            and bool(self.entries)
            and damage.checksum_valid
            and entry is not None
            and (entry.offset <= damage.last_offset or entry.position in self.back)
            and entry.offset <= entry.last_offset
        )

    def floor_below(self, damage: Damage) -> int:
        """Uncount the last counted entries that ``damage``'s entry goes back over and that do
        not decode, down to one that does; the next offset after what is left."""
        entries, entry = self.entries, damage.entry
        assert entry is not None
        while entries and not self._after(entry, entries[-1].last_offset):
            if self._returned(entries[-1]):
                break
            entries.pop()
        return entries[-1].last_offset + 1 if entries else self.start

    def _after(self, head: EntryHead, floor: int) -> bool:
        """Whether the offsets of ``head`` (a compressed wrapper's inner ones) are above
        ``floor``."""
        if head.offset <= floor:
            return False
        return head.position not in self.back or self._decodes_after(head, floor)

    def _wrapper(self, head: EntryHead) -> bool:
        """Whether a walk given ``decodes`` compares the first inner offset of ``head``."""
        return (
            self.decodes is not None
            and head.magic < 2
            and head.codec != 0
            and (self.check_limit is None or head.length <= self.check_limit)
        )

    def _decodes_after(self, head: EntryHead, floor: int) -> bool:
        assert self.decodes is not None
        if not self.decodes(self._bytes(head), floor):
            return False
        self.returned.add(head.position)
        return True

    def next_offset(self) -> int:
        """The offset after the last counted entry the reader returns (ends a walk)."""
        entries = self.entries
        if self.decodes is None:
            return self.end
        while entries and not self._returned(entries[-1]):
            entries.pop()
        return entries[-1].last_offset + 1 if entries else self.start

    def _returned(self, head: EntryHead) -> bool:
        if head.position in self.returned:
            return True
        assert self.decodes is not None
        if self.check_limit is not None and head.length > self.check_limit:
            return True  # counted on its framing alone
        return self._decodes_after(head, NO_FLOOR)

    def _bytes(self, head: EntryHead) -> np.ndarray:
        walked = self.window  # the entry is in it, unless the walk went on past its window
        at = head.position - walked.base if walked is not None else -1
        if walked is not None and at >= 0 and at + head.length <= walked.window.shape[0]:
            return walked.window[at : at + head.length]
        return as_array(self.read(head.position, head.length))


class _Judge:
    """Whether a whole, plausibly framed entry counts, by the reader's rules."""

    def __init__(
        self,
        read: Read,
        next_base: int | None,
        check_limit: int | None,
        verify_checksums: bool,
        decodes: Decodes | None,
    ) -> None:
        self.read, self.next_base, self.decodes = read, next_base, decodes
        self.check_limit, self.verify_checksums = check_limit, verify_checksums

    def __call__(
        self, head: EntryHead, walked: EntryWindow, at: int, next_offset: int
    ) -> Damage | None:
        """None when ``head`` (at ``at`` in ``walked``) counts after an entry whose last offset
        is ``next_offset - 1``; else the damage."""
        last = next_offset - 1
        if self.check_limit is None or head.length <= self.check_limit:
            data = walked.window[at : at + head.length]
            if data.shape[0] < head.length:
                data = as_array(self.read(head.position, head.length))
            if not has_valid_checksum(data):
                damage = Damage(
                    head.position, head.offset, last, _checksum_error(data), head, False
                )
                return None if self._unchecked_counts(head, data, last) else damage
        return _offsets_damage(head, last, self.next_base)

    def _unchecked_counts(self, head: EntryHead, data: np.ndarray, last: int) -> bool:
        """verifyChecksums=false: whether the reader returns ``head`` whose checksum fails (its
        bytes ``data``) after offset ``last`` (module docstring)."""
        if self.verify_checksums or unchecked_in_progress(self.read, head, data):
            return False
        if _offsets_damage(head, last, self.next_base) is not None:
            return False
        return self.decodes is None or self.decodes(data, last)


def unchecked_in_progress(read: Read, head: EntryHead, data: np.ndarray) -> bool:
    """Whether a whole entry ``head`` (its bytes ``data``) whose checksum fails may still be
    being written, so that a walk with verifyChecksums=false does not count it yet: appends are
    sequential, so only the last entry may be, and a preallocated segment's zero bytes make a
    torn one look whole. It may be when the bytes after it (up to ``ZERO_HEAD_BYTES``, where
    a walk meets the next head) are all zeros, at least one of them: no entry was written
    after it (a walk ends at zeros anyway, so its rows are not counted before what follows
    them is written); or when it ends the file and its last ``ZERO_TAIL_BYTES`` bytes are
    zeros (a longer run than an encoder ends an entry with: a record's zero header count,
    lz4's 4-byte end mark). An entry with nonzero bytes after it, or ending the file in a
    nonzero byte, is whole and counts as the reader returns it."""
    after = as_array(read(head.position + head.length, ZERO_HEAD_BYTES))
    if after.any():
        return False
    if after.shape[0] > 0:
        return True  # zeros follow it
    return not data[-ZERO_TAIL_BYTES:].any()  # it ends the file


def _offsets_damage(head: EntryHead, last: int, next_base: int | None) -> Damage | None:
    """The damage of ``head`` whose offsets do not follow ``last`` (or reach ``next_base``)."""
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


def records_decode(max_decompressed_bytes: int, verify_checksums: bool = True) -> Decodes:
    """A walk's ``decodes`` (:func:`walk_tail`), by the batch reader's rules for
    a checksum-valid v2 batch (deep iteration): its record count and lastOffsetDelta are not
    negative, its codec is known, its records decompress within ``max_decompressed_bytes`` and
    the record kernel decodes all of them. A legacy entry counts when it decodes and, a
    compressed wrapper, its inner messages expand within the limit (20261126:5886: a gzip bomb
    wrapper counted on its checksum hid the batch after it that goes back over it) and the
    first of them is above ``floor``; with ``verify_checksums`` (the read's option) the legacy
    message's and inner messages' checksums must match. An entry whose codec is not installed
    counts (the reader raises there)."""

    def decodes(data: np.ndarray, floor: int) -> bool:
        if data.shape[0] > 16 and data[16] in (0, 1):
            try:  # the message decodes, a wrapper's inner messages expand within the limit
                # and the first of them is above ``floor``
                kept = kept_last_offset(
                    data,
                    floor,
                    verify_checksums=verify_checksums,
                    max_decompressed_bytes=max_decompressed_bytes,
                )
            except MissingCodecError:
                return True
            return kept is not None
        if data.shape[0] <= 16 or data[16] != 2:
            return True
        if data.shape[0] <= V2_OVERHEAD:  # no records section: it decodes if it claims none
            return data.shape[0] == V2_OVERHEAD and not data[V2_OVERHEAD - 4 :].any()
        h = K.parse_v2_headers(data, np.zeros(1, np.int64))
        count, lod = int(h[0, K.H_COUNT]), int(h[0, K.H_LOD])
        codec = int(h[0, K.H_ATTRIBUTES]) & 0x07
        if count < 0 or lod < 0 or codec > 4:
            return False
        body = data[V2_OVERHEAD:]
        if codec:
            try:
                unpacked = decompress(codec, body.data, magic=2, max_bytes=max_decompressed_bytes)
            except CorruptSegmentError:
                return False
            except MissingCodecError:
                return True
            body = as_array(unpacked)
        if count > body.shape[0] // 7:  # every record takes at least 7 bytes
            return False
        return _records_status(body, h, count) == 0

    return decodes


def _records_status(body: np.ndarray, h: np.ndarray, count: int) -> int:
    """The record kernel's status for one batch's records section ``body`` (0: decoded)."""
    r_offset, r_ts, r_ts_type, r_kpos, r_klen, r_vpos, r_vlen, r_hpos, r_hcount = (
        np.empty(count, np.int64) for _ in range(9)
    )
    status, errpos = np.zeros(1, np.int32), np.zeros(1, np.int64)
    log_append = ((h[:, K.H_ATTRIBUTES] & 0x08) != 0).astype(np.int8)
    K.decode_v2_records(
        body,
        np.empty(0, np.uint8),
        np.zeros(1, np.int64),
        np.full(1, body.shape[0], np.int64),
        h[:, K.H_COUNT],
        np.zeros(1, np.int64),
        h[:, K.H_BASE_OFFSET],
        h[:, K.H_BASE_TS],
        h[:, K.H_MAX_TS],
        log_append,
        h[:, K.H_LOD],
        r_offset,
        r_ts,
        r_ts_type,
        r_kpos,
        r_klen,
        r_vpos,
        r_vlen,
        r_hpos,
        r_hcount,
        status,
        errpos,
    )
    return int(status[0])


class Recorder:
    """An ``on_damage`` that passes each damage to ``on_damage`` and remembers whether the walk
    went on past damage (``resumed``). A walk that did not count every entry before where it
    stopped by the rules above, as the reader does; past damage the reader resynchronises, and
    its order floor follows the records it returned, which the walk's rules do not see in every
    damaged shape: its caller then asks the reader
    (:func:`~kafka_segments_ds.ranges.reader_next_offset`). The end of the data (an entry being
    appended, a zero-filled tail) stops a walk and is no damage here."""

    def __init__(self, on_damage: OnDamage) -> None:
        self.on_damage, self.resumed = on_damage, False

    def __call__(self, damage: Damage) -> int | None:
        resume = self.on_damage(damage)
        if resume is not None and resume > damage.position:
            self.resumed = True
        return resume


def segment_tail(
    filesystem: pafs.FileSystem,
    seg: SegmentRef,
    *,
    next_base: int | None = None,
    on_damage: OnDamage = stop,
    check_limit: int | None = None,
    max_decompressed_bytes: int | None = None,
    verify_checksums: bool = True,
) -> SegmentTail:
    """The tail of ``seg``, walked from :func:`tail_start`. Given ``max_decompressed_bytes``
    (the read's option), by what the reader returns with deep iteration (:func:`records_decode`);
    else every checksum-valid entry whose offsets follow counts. ``verify_checksums``: the read's
    option (:func:`walk_tail`)."""
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
            decodes=None
            if max_decompressed_bytes is None
            else records_decode(max_decompressed_bytes, verify_checksums),
            verify_checksums=verify_checksums,
        )


__all__ = [
    "Damage",
    "Decodes",
    "OnDamage",
    "Recorder",
    "SegmentTail",
    "records_decode",
    "segment_tail",
    "skip_dropped",
    "stop",
    "tail_start",
    "unchecked_in_progress",
    "walk_tail",
]
