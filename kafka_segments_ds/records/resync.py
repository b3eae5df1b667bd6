"""Resynchronisation forensics: what the bytes around a damaged entry prove, on a read callable.

:class:`Resync` answers the questions the damage policy (:mod:`kafka_segments_ds.reader.damage`)
asks after a bad entry -- where the next valid entry starts whose offsets can follow, whether a
bad entry is a torn write or a damaged size field, how many records a dropped entry held -- from
``read(position, length)`` alone (an array of at most ``length`` bytes, fewer at the end of the
file). The batch reader passes its segment source's ``read``; a stream's tail walk passes its
ranged reads. It decides nothing: FAILFAST / DROPMALFORMED is the policy's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import (
    EntryHead,
    decode_entry_head,
    has_valid_checksum,
    probe_entry,
)
from kafka_segments_ds.records.checksums import crc32c_update
from kafka_segments_ds.records.legacy import decode_legacy_message, expand_wrapper

log = logging.getLogger(__name__)
PROOF_SCAN_BYTES = 64 << 20  # the most of a damaged entry searched for its own true end
CHAIN_TARGETS = 16  # valid entries chained from a candidate an enclosing entry may lead to
OVERLAP_BYTES = 12  # the most of a batch (offset and length fields) an entry before may hold
STRADDLE_SCAN_BYTES = 1 << 20  # bytes read at a time when looking for an entry across an end

Read = Callable[[int, int], np.ndarray]
"""``read(position, length)``: the bytes there, fewer at the end of the file."""


def be_int(buf: np.ndarray, start: int, stop: int) -> int:
    """The signed big-endian integer in ``buf[start:stop]``."""
    return int.from_bytes(buf[start:stop].tobytes(), "big", signed=True)


def _plausible_size(head: np.ndarray) -> bool:
    """Whether the size field of the entry whose first 17 bytes are ``head`` is no smaller
    than the smallest entry its magic byte allows (an unknown magic byte: the smallest of
    any), so the size field may be true whatever else was damaged."""
    if head.shape[0] < 17:
        return False
    return be_int(head, 8, 12) >= (49 if head[16] == 2 else 14)


@dataclass(frozen=True, slots=True)
class Held:
    """What a dropped entry held by its own headers."""

    magic: int
    end: int  # where its size field says it ends
    records: int | None  # a batch's record count, a wrapper's inner messages (None: unknown)


class Resync:
    """The forensics of one segment read: ``read`` its bytes, ``file_end`` its size, entries
    starting before ``range_end`` belong to the read, ``last_offset()`` is the last offset of
    the last good entry, offsets stay below ``next_base_offset``. ``path`` names the file in
    the log lines about where reading resynchronised."""

    def __init__(
        self,
        read: Read,
        *,
        path: str,
        file_end: int,
        range_end: int,
        last_offset: Callable[[], int],
        next_base_offset: int | None,
        read_chunk_bytes: int,
        max_batch_bytes: int,
        max_decompressed_bytes: int,
        logged: bool = True,
    ) -> None:
        self.read = read
        self.path = path
        self.logged = logged  # False: no log lines (a walk that follows a read's resynchronisation)
        self.file_end = file_end
        self.range_end = range_end
        self.last_offset = last_offset
        self.next_base_offset = next_base_offset
        self.read_chunk_bytes = read_chunk_bytes
        self.max_batch_bytes = max_batch_bytes
        self.max_decompressed_bytes = max_decompressed_bytes
        self.checked_end: tuple[int, int | None] | None = None  # _may_be_inner's last wrapper

    def forget(self) -> None:
        """Drop what was learnt of the bytes (they changed since they were read)."""
        self.checked_end = None

    # -- what a dropped entry held ---------------------------------------------------------

    def held(self, position: int) -> Held | None:
        """What the entry at ``position`` holds by its headers; None when it frames no entry
        inside the file."""
        head = decode_entry_head(self.read(position, 61), position)
        if head is None or position + head.length > self.file_end:
            return None
        end = position + head.length
        if head.magic == 2:
            return Held(2, end, max(be_int(self.read(position + 57, 4), 0, 4), 0))
        return Held(head.magic, end, self._legacy_records(position, head))

    def _legacy_records(self, position: int, head: EntryHead) -> int | None:
        """How many records a legacy entry holds: 1, or a wrapper's inner messages if its
        payload still expands (None when it does not)."""
        if head.codec == 0:
            return 1
        if head.length > self.max_batch_bytes:
            return None
        try:
            data = self.read(position, head.length).tobytes()
            message = decode_legacy_message(data, 0, verify_checksum=False)
            inner = expand_wrapper(
                message, verify_checksum=False, max_bytes=self.max_decompressed_bytes
            )
        except CorruptSegmentError:
            return None
        return len(inner)

    # -- torn writes and damaged size fields -----------------------------------------------

    def is_torn_write(self, position: int) -> bool:
        """Whether the bad entry at ``position`` is one a broker was still writing into a
        zero-filled (preallocated) file: zeros from where its size field leads to the end of
        the file. Not when a valid entry starts inside it and runs past that point (past a torn
        write nothing was ever written, so such an entry's trailing zeros are its own data and
        the bad entry's size field is the damage), nor when a valid entry whose offsets follow
        on lies inside it and cannot be one of its inner messages, nor when a valid batch
        starting before it runs through it (:meth:`overlapped_batch`)."""
        head = self.read(position, 17)
        if head.shape[0] < 17:
            return False
        size = be_int(head, 8, 12)
        end = position + 12 + (size if size >= 14 else 0)
        return (
            end < self.file_end
            and self.is_zero(end, self.file_end)
            and not self._entry_straddles(position, end)
            and not self._follows_inside(position, end)
            and self.overlapped_batch(position, quiet=True) is None
        )

    def _follows_inside(self, position: int, end: int) -> bool:
        """Whether a valid entry in (``position``, ``end``) continues the log and cannot be an
        inner message of the bad entry at ``position``."""
        candidate = self.scan_for_entry(position + 1, position, end, quiet=True)
        return candidate is not None and not self._may_be_inner(candidate, position)

    def _entry_straddles(self, position: int, end: int) -> bool:
        """Whether a valid entry starts in (``position``, ``end``) and ends past ``end``. Read
        STRADDLE_SCAN_BYTES at a time (``end`` comes from an untrusted size field)."""
        start = position + 1
        while start < end:
            window = self.read(start, min(STRADDLE_SCAN_BYTES, end - start) + 16)
            limit = end - 16 - start  # a candidate's first 17 bytes lie before ``end``
            rel = 0
            while rel < limit:
                cand = int(K.find_entry_candidate(window, rel, limit))
                if cand < 0:
                    break
                entry = self.probe(start + cand)
                if entry is not None and start + cand + entry.length > end:
                    return True
                rel = cand + 1
            if window.shape[0] == 0:
                return False
            start += STRADDLE_SCAN_BYTES
        return False

    def proof_of_damage(self, position: int, quiet: bool) -> int | None:
        """For an entry at ``position`` running past the end of the file: a valid batch the
        entry before it overlaps (:meth:`overlapped_batch`), or the first later valid entry
        whose offsets follow on when valid entries from there prove its size field damaged
        rather than the file truncated (see :meth:`_damage_proven`); else None."""
        overlapped = self.overlapped_batch(position, quiet=True)
        if overlapped is not None:
            return overlapped
        candidate = self.scan_for_entry(position + 1, position, quiet=quiet)
        if candidate is not None and self._damage_proven(candidate, position):
            return candidate
        return None

    def _damage_proven(self, candidate: int | None, damaged: int) -> bool:
        """Whether valid entries from ``candidate`` on prove that the entry at ``damaged``,
        which runs past the end of the file, is damaged rather than truncated: one that cannot
        be its inner message, or a chain of valid entries reaching the end of the file or
        holding a magic-2 batch. Each chain is walked once: a candidate on a broken chain
        breaks where it does, so the next one is looked for past that point."""
        while candidate is not None:
            if not self._may_be_inner(candidate, damaged):
                return True
            reached, batch, stop = self._chain_walk(candidate, self.file_end)
            link = self._consistent_link(stop)
            while not (reached or batch) and link is not None:  # a damaged entry skipped whole
                reached, batch, broken = self._chain_walk(link, self.file_end)
                link = self._consistent_link(broken)
            if reached or batch:
                return True
            candidate = self.scan_for_entry(stop + 1, damaged, quiet=True)
        return False

    def _consistent_link(self, position: int) -> int | None:
        """Where the entry at ``position`` ends when its size field is plausible and leads
        exactly to the end of the range or the file, or to a valid entry: a damaged entry
        skipped whole (as :meth:`resume_after` skips it), where a chain of valid entries broken
        at ``position`` goes on (515151:122538: intact wrappers after a truncated-looking bomb,
        then a wrapper with an unknown magic byte ending exactly at the end of the file)."""
        head = self.read(position, 17)
        if not _plausible_size(head):
            return None
        end = position + 12 + be_int(head, 8, 12)
        if end in (self.range_end, self.file_end) or (
            end < self.file_end and self.entry_is_valid(end)
        ):
            return end
        return None

    def _chain_reaches(self, position: int, target: int) -> bool:
        """Whether valid entries follow each other from ``position`` exactly to ``target``; at
        the end of the file also to a zero tail too long to be the lz4 end mark that ends a
        wrapper's payload."""
        return self._chain_walk(position, target)[0]

    def _chain_walk(self, position: int, target: int) -> tuple[bool, bool, int]:
        """(:meth:`_chain_reaches`, whether a magic-2 batch is on the chain, where the chain
        stops: ``target`` or the first position holding no valid entry)."""
        batch = False
        while position < target:
            if (
                target == self.file_end
                and target - position >= 17
                and self.is_zero(position, target)
            ):
                return True, batch, target
            entry = self.probe(position)
            if entry is None:
                return False, batch, position
            batch = batch or entry.magic == 2
            position += entry.length
        return position == target, batch, position

    def is_zero(self, start: int, end: int) -> bool:
        step = 4 * 1024 * 1024
        while start < end:
            block = self.read(start, min(step, end - start))
            if block.shape[0] == 0:
                return True
            if block.any():
                return False
            start += block.shape[0]
        return True

    # -- where reading resumes -------------------------------------------------------------

    def overlapped_batch(self, position: int, quiet: bool = False) -> int | None:
        """Where a batch starts that the entry before ``position`` overlaps, when the bytes at
        ``position`` frame no valid entry (616161:140956: a batch cut 3 bytes short whose size
        field still counts them, and the 3 bytes of the next batch that took their place equal
        what was cut, so its checksum holds over its stated extent and reading stood 3 bytes
        into the next batch). None when there is none; ``quiet``: found without a log line.

        The first position at most OVERLAP_BYTES back (the offset and length fields) holding a
        whole magic-2 batch whose CRC-32C checks, which runs past ``position`` and whose
        offsets follow the last good entry. Its CRC covers all it holds from its attributes on,
        which lie past ``position``: not in the entry before, so it is no batch stored
        verbatim there. Its length field decides what the CRC covers (a wrong one checks by a
        2^-32 chance). No CRC covers its offset field, and the bytes of it lying before
        ``position`` belong to the entry before as much as to it: its base offset must be the
        offset after the last good entry's (2305:174: the last 4 bytes of a valid batch read as
        the high bytes of the offset field of a batch cut there made offset
        3531506008385912842; 20261126:107090: a batch with a damaged offset field, its first
        byte borrowed and matching, returned record 10003 at offset 565157600297491 and the
        batches after it were dropped as going back), or a valid entry must start where it ends
        and go on from its last offset (:meth:`_continued`). A gap there (compaction) with no
        such successor loses the batch rather than risk an invented offset."""
        low = max(position - OVERLAP_BYTES, 0)
        if position >= self.range_end or low >= position:
            return None
        data = self.read(low, position - low + 17)
        expected = ((self.last_offset() + 1) % 2**64).to_bytes(8, "big")
        for rel in np.flatnonzero(data[16 : 16 + position - low] == 2).tolist():
            start = low + rel
            follows = data[rel : rel + 8].tobytes() == expected
            entry = self.probe(start)
            if (
                entry is not None
                and entry.magic == 2
                and start + entry.length > position
                and self._offsets_may_follow(start)
                and (follows or self._continued(entry))
            ):
                if not quiet and self.logged:
                    log.warning(
                        "%s: resynchronised at byte %d, inside the entry before byte %d",
                        self.path,
                        start,
                        position,
                    )
                return start
        return None

    def _past_crossing_batch(self, position: int, resume: int) -> int:
        """``resume``, the end of the damaged entry at ``position`` by its size field, unless a
        whole magic-2 batch with a valid CRC-32C starts inside that extent and runs past it:
        no entry stored verbatim inside the damaged one crosses its end, so the batch is real,
        and the entry at ``resume`` lies inside it, its offset field taken from the batch's
        last bytes (20261205:118899: offset 7507784484795580684 returned, and the intact
        batches after it dropped as going back). Then reading resumes at the batch when its
        offsets go on from the last good entry's, else at its end (it is skipped whole)."""
        if resume - position > min(PROOF_SCAN_BYTES, self.max_batch_bytes):
            return resume
        if resume >= self.file_end:
            return resume  # no whole entry runs past the end of the file
        data = self.read(position + 1, resume - position - 1 + 17)
        magics = np.flatnonzero(data[16 : 16 + resume - position - 1] == 2)
        sizes = np.array([be_int(data, int(r) + 8, int(r) + 12) for r in magics], np.int64)
        ends = position + 1 + magics + 12 + sizes
        plausible = (sizes >= 49) & (ends > resume) & (ends <= self.file_end)
        expected = (self.last_offset() + 1) % 2**64
        for rel in magics[plausible].tolist():  # probed only where the size runs past it
            entry = self.probe(position + 1 + rel)
            if entry is None or entry.magic != 2 or entry.position + entry.length <= resume:
                continue
            if self._offsets_may_follow(entry.position) and (
                entry.offset % 2**64 == expected or self._continued(entry)
            ):
                return entry.position
            return entry.position + entry.length
        return resume

    def _overlapping_end(self, position: int) -> int | None:
        """Where a whole magic-2 batch with a valid CRC-32C ends that starts at most
        OVERLAP_BYTES before ``position`` and runs past it, whatever its offsets (None: none).
        Its checksum proves its extent, as for a valid entry dropped for its offsets: nothing
        inside it is a resynchronisation point. A scan from ``position`` found an entry just
        before its end whose offset field took the batch's last byte, and returned records
        at offset 8646911284551352329 (20261205:10579, 20261203:114249)."""
        low = max(position - OVERLAP_BYTES, 0)
        if low >= position:
            return None
        data = self.read(low, position - low + 17)
        for rel in np.flatnonzero(data[16 : 16 + position - low] == 2).tolist():
            entry = self.probe(low + rel)
            if entry is not None and entry.magic == 2 and entry.position + entry.length > position:
                return entry.position + entry.length
        return None

    def _continued(self, entry: EntryHead) -> bool:
        """Whether a valid entry starts where the batch ``entry`` ends and its offsets go on
        exactly from it: the offset field of ``entry`` is then its own, not borrowed bytes that
        happen to frame it (20261201:13494: a checksum-valid batch whose records do not decode
        ran 4 bytes into the batch of offset 10003, after offset 3, and the batches from 10004
        on followed it). A wrong offset field continues the next entry's offsets by chance
        only."""
        following = entry.position + entry.length
        return (
            following < self.file_end
            and self.entry_is_valid(following)
            and self.offset_field(following) % 2**64 == (entry.last_offset + 1) % 2**64
        )

    def resume_after(self, position: int) -> int | None:
        """Where reading resumes after the damaged entry at ``position`` (None: nothing follows).

        An entry whose size field is plausible and consistent -- it leads to a valid entry or
        exactly to the end -- is skipped whole, whatever its damage (checksum, framing, an
        unknown magic byte): no position inside its declared extent is a resynchronisation
        point (a compressed legacy wrapper can hold its inner messages verbatim, each with a
        valid checksum), unless the entry's own checksum proves that it ends earlier, where a
        valid entry starts (only its size field, which no checksum covers, was damaged; a
        magic-2 CRC does not cover the magic byte either), or, with an unknown magic byte,
        valid entries inside chain exactly to where the size field leads and the first cannot
        be an inner message (:meth:`_chain_inside`). Otherwise take the first later position
        holding a valid entry (see :meth:`scan_for_entry`); for bytes that are no entry at
        all (an impossible size), valid entries found inside that chain exactly to where the
        size field leads win over it. A checksum-valid entry (dropped for its offsets) is
        skipped whole and reading goes on at its end, whatever is there: its checksum proves
        its extent. Bytes that are no valid entry come after one that overlapped a valid batch
        (:meth:`overlapped_batch`): reading resumes at that batch, before ``position``, or,
        when its offsets do not follow, at its end (:meth:`_overlapping_end`).
        """
        whole = self.probe(position)
        if whole is not None:  # valid, dropped for its offsets: reading goes on at its end
            end = position + whole.length
            return end if end < self.range_end else None
        overlapped = self.overlapped_batch(position)
        if overlapped is not None:
            return overlapped
        skipped = self._overlapping_end(position)
        if skipped is not None:  # a valid batch whose offsets do not follow: skipped whole
            return skipped if skipped < self.range_end else None
        head = self.read(position, 17)
        following = self._consistent_following(position, head)
        if following is not None and _plausible_size(head):
            if int(head[16]) > 2:
                inside = self._chain_inside(position, following)
                if inside is not None:
                    return inside
            resume = self._proven_end(position, following)
            if resume is None:
                resume = following
            resume = self._past_crossing_batch(position, resume)
            return resume if resume < self.range_end else None
        candidate = self.scan_for_entry(position + 1, position, following)
        if following is None:
            return candidate
        if candidate is not None and self._chain_reaches(candidate, following):
            return candidate  # the size field skipped whole entries: it was the damage
        return following if following < self.range_end else None

    def _consistent_following(self, position: int, head: np.ndarray) -> int | None:
        """Where the entry at ``position`` (``head``: its first bytes) ends, capped at the end
        of the range, when its size field is consistent: it leads exactly to the end of the
        range or the file, or to a valid entry before the end of the range. Else None."""
        if head.shape[0] < 12:
            return None
        claimed = position + 12 + be_int(head, 8, 12)
        if claimed in (self.range_end, self.file_end) or (
            position + 26 <= claimed < self.range_end and self.entry_is_valid(claimed)
        ):
            return min(claimed, self.range_end)
        return None

    def _chain_inside(self, position: int, following: int) -> int | None:
        """For the entry at ``position`` whose magic byte is unknown and whose size field leads
        to ``following``: the first valid entry inside it, if valid entries chain from there
        exactly to ``following`` (the size field covered them: bytes that are no entry at all
        came first) and it cannot be an inner message of this entry read as a compressed
        legacy wrapper (whose CRC covers the magic byte, so it cannot bound them)."""
        candidate = self.scan_for_entry(position + 1, position, following, quiet=True)
        if (
            candidate is None
            or self._may_be_inner_of_unknown(candidate, position)
            or not self._chain_reaches(candidate, following)
        ):
            return None
        if self.logged:
            log.warning("%s: resynchronised at byte %d", self.path, candidate)
        return candidate

    def _may_be_inner_of_unknown(self, position: int, damaged: int) -> bool:
        """Whether the legacy entry at ``position`` lies in the value of the entry at
        ``damaged`` (an unknown magic byte) read as a compressed magic-0 or magic-1 wrapper."""
        outer = self.read(damaged, 18)
        if outer.shape[0] < 18 or not 1 <= (outer[17] & 0x07) <= 3:
            return False
        if self.magic(position) >= 2:
            return False
        starts = [self._value_start(damaged, magic) for magic in (0, 1)]
        return any(start is not None and position >= start for start in starts)

    def _proven_end(self, position: int, following: int) -> int | None:
        """Where the damaged entry at ``position`` ends by its own stored checksum, if that is
        before ``following`` and a valid entry starts there: the CRC covers the entry's bytes
        but not its size field, so an entry whose only damage is a grown size field still
        proves its true extent (a false match is a 2^-32 chance)."""
        head = self.read(position, 21)
        if int(head[16]) < 2:
            end = self._checked_legacy_end(position)
            if end is not None and end < following and self.entry_is_valid(end):
                return end
            return None
        if following - position > min(PROOF_SCAN_BYTES, self.max_batch_bytes):
            return None
        data = self.read(position, following - position)
        view = data.data
        stored = int.from_bytes(head[17:21].tobytes(), "big")
        rel = 61  # a batch is at least its 61-byte header
        crc, done = 0, 21  # CRC-32C of bytes [21, done), carried from candidate to candidate
        while rel < data.shape[0]:
            cand = int(K.find_entry_candidate(data, rel, data.shape[0]))
            if cand < 0:
                return None
            crc, done = crc32c_update(view[done:cand], crc), cand
            if crc == stored and self.entry_is_valid(position + cand):
                return position + cand
            rel = cand + 1
        return None

    def scan_for_entry(
        self, start: int, damaged: int | None = None, stop: int | None = None, quiet: bool = False
    ) -> int | None:
        """First position in [``start``, ``stop``) holding a well-framed entry with a valid
        checksum whose offsets can follow the last good entry.

        One that may be an inner message of the ``damaged`` entry, stored verbatim, must also
        be followed by a valid entry. Others need no valid successor: it may be damaged too.
        A valid entry passed over (its offsets do not follow) is passed whole: its checksum
        proves its bytes its own, so no entry starts inside it. Nor does one start inside an
        entry whose size field is consistent (:meth:`_enclosing_end`).
        """
        step = max(self.read_chunk_bytes, 1 << 20)
        stop = self.range_end if stop is None else stop
        passed = origin = start  # the end of the last valid entry passed over
        while start < stop:
            window = self.read(start, step + 64)
            limit = min(window.shape[0], stop - start)
            rel = max(passed - start, 0)
            while rel < limit:
                cand = int(K.find_entry_candidate(window, rel, limit))
                if cand < 0:
                    break
                absolute = start + cand
                entry = self.probe(absolute)
                if entry is None:
                    rel = cand + 1
                    continue
                if self._offsets_may_follow(absolute) and (
                    damaged is None
                    or not self._may_be_inner(absolute, damaged)
                    or self._successor_is_valid(absolute)
                ):
                    enclosing = self._enclosing_end(absolute, passed, passed > origin)
                    if enclosing is None:
                        if not quiet and self.logged:
                            log.warning("%s: resynchronised at byte %d", self.path, absolute)
                        return absolute
                    # inside a damaged entry whose size field is consistent: skipped whole
                    passed = enclosing
                    rel = enclosing - start
                    continue
                passed = absolute + entry.length
                rel = cand + entry.length
            start += step
        return None

    def _enclosing_end(self, candidate: int, searched: int, framed: bool) -> int | None:
        """The end of an entry starting in [``searched``, ``candidate``) that holds the valid
        entry at ``candidate`` and whose size field is plausible and consistent: it leads to
        an entry of the chain of valid entries from ``candidate`` or to the end. Such an entry
        is skipped whole whatever its damage (an unknown magic byte: no valid entry to stop
        at), as when framing reaches it: ``candidate`` is then a message stored verbatim in
        its payload. Not when a legacy entry's checksum proves it ends by ``candidate``.

        At ``searched`` when ``framed`` (the end of a valid entry the search passed over: an
        entry boundary) the entry there is judged as :meth:`resume_after` judges it when
        reading frames it (:meth:`_consistent_end`: same bound, same checksum proof).
        Elsewhere, where the bytes of entry headers make small size fields by chance, only a
        compressed wrapper with an unknown magic byte that may hold the legacy ``candidate``
        verbatim, whose offset field lies above the last good entry's and below the offset
        field of the entry its size field leads to, and whose key and value lengths, read as a
        magic-0 or magic-1 message, end where its size field does.
        Looked for at most PROOF_SCAN_BYTES back; None when there is none."""
        low = max(searched, candidate - PROOF_SCAN_BYTES)
        if candidate <= low:
            return None
        if framed and low == searched:
            boundary = self._consistent_end(searched, candidate)
            if boundary is not None:
                return boundary
        targets = self._chain_ends(candidate)
        ceilings = {
            t: (self.offset_field(t) if t + 8 <= self.file_end else 2**63) for t in targets.tolist()
        }
        floor = self.last_offset()
        verbatim = self.magic(candidate) < 2  # may be an inner message stored verbatim
        block = 1 << 20
        at = low
        while at < candidate:
            count = min(block, candidate - at)
            data = self.read(at, count + 17)
            count = min(count, data.shape[0] - 17)
            if count <= 0:
                return None
            wide = data.astype(np.int64)
            sizes = (
                (wide[8 : 8 + count] << 24)
                | (wide[9 : 9 + count] << 16)
                | (wide[10 : 10 + count] << 8)
                | wide[11 : 11 + count]
            )
            sizes[sizes >= 1 << 31] -= 1 << 32
            magics = data[16 : 16 + count]
            ends = at + np.arange(count, dtype=np.int64) + 12 + sizes
            hits = np.flatnonzero((sizes >= np.where(magics == 2, 49, 14)) & np.isin(ends, targets))
            for i in hits.tolist():
                position = at + i
                offset = be_int(data, i, i + 8)
                end = int(ends[i])
                if framed and position == searched:
                    continue  # judged by _consistent_end, as resume_after judges it
                if not (
                    verbatim
                    and magics[i] > 2
                    and 1 <= (data[i + 17] & 0x07) <= 3
                    and floor < offset < ceilings[end]
                    and end in self._legacy_layout_ends(position)
                ):
                    continue
                if magics[i] < 2:
                    checked = self._checked_legacy_end(position)
                    if checked is not None and checked <= candidate:
                        continue
                return end
            at += count
        return None

    def _consistent_end(self, position: int, candidate: int) -> int | None:
        """Where the entry at the entry boundary ``position`` ends, when its size field is
        plausible, leads past ``candidate`` and is consistent as :meth:`resume_after` judges
        it (to a valid entry before the end of the range, or exactly to the end), and no
        checksum proves that the entry ends by ``candidate``; where its checksum proves it
        ends past ``candidate``, that end (:meth:`_proven_end`, as :meth:`resume_after`
        resumes there). The chain from ``candidate`` need not reach that end: a wrapper's
        payload holds more than its inner messages (515151:44564: a gzip wrapper with an
        unknown magic byte, whose last inner message ends 4 bytes before it does)."""
        head = self.read(position, 17)
        if not _plausible_size(head):
            return None
        end = self._consistent_following(position, head)
        if end is None or end <= candidate:
            return None
        if int(head[16]) < 2:
            checked = self._checked_legacy_end(position)
            if checked is not None and checked <= candidate:
                return None
        proven = self._proven_end(position, end)
        if proven is not None:
            return proven if proven > candidate else None
        return end

    def _chain_ends(self, position: int) -> np.ndarray:
        """Where the first CHAIN_TARGETS valid entries chained from ``position`` end, and the
        ends of the range and the file."""
        ends = {self.range_end, self.file_end}
        for _ in range(CHAIN_TARGETS):
            entry = self.probe(position)
            if entry is None:
                break
            position += entry.length
            ends.add(position)
        return np.fromiter(sorted(ends), np.int64)

    # -- inner messages of compressed legacy wrappers --------------------------------------

    def _may_be_inner(self, position: int, damaged: int) -> bool:
        """Whether the legacy entry at ``position`` could be an inner message of a compressed
        legacy wrapper at ``damaged``, stored verbatim (lz4/gzip stored blocks, snappy
        literals). Neither the wrapper's size field (it may be the damage) nor the candidate's
        offset field (the compressor may fold those 8 bytes into a match while the CRC-covered
        rest stays literal) can rule that out, but the wrapper's checksum can: when its key and
        value lengths give an extent its CRC checks, its inner messages all lie before that end
        (see :meth:`_checked_legacy_end`)."""
        outer = self.read(damaged, 18)
        if outer.shape[0] < 18 or outer[16] > 1 or not 1 <= (outer[17] & 0x07) <= 3:
            return False
        if self.magic(position) >= 2:
            return False
        value_start = self._value_start(damaged)
        if value_start is None or position < value_start:
            return False  # not inside a compressed value this entry can hold
        if self.checked_end is None or self.checked_end[0] != damaged:
            # one CRC per damaged wrapper, however many candidates are weighed against it
            self.checked_end = (damaged, self._checked_legacy_end(damaged))
        end = self.checked_end[1]
        return end is None or position < end

    def _value_start(self, position: int, magic: int | None = None) -> int | None:
        """Where the value of the legacy message at ``position`` starts by its key and value
        length fields; None when they are impossible (a key length below -1 or running past
        the file, a null or negative value length): then it is no wrapper holding messages.

        A wrapper cut short by the end of the file keeps these fields (they precede its
        value); a size field and key length both torn is damage this rule cannot see through
        (RELIABILITY R3c). ``magic``: read with that magic's layout."""
        magic = self.magic(position) if magic is None else magic
        at = 18 if magic == 0 else 26  # key length
        field = self.read(position + at, 4)
        if field.shape[0] < 4:
            return None
        key = be_int(field, 0, 4)
        if key < -1:
            return None
        at = position + at + 4 + max(key, 0)  # value length
        field = self.read(at, 4) if at + 4 <= self.file_end else field[:0]
        if field.shape[0] < 4 or be_int(field, 0, 4) < 0:
            return None
        return at + 4

    def _legacy_layout_ends(self, position: int) -> set[int]:
        """Where the entry at ``position`` ends by its key and value lengths, read as a magic-0
        and as a magic-1 message (those that are possible)."""
        ends = set()
        for magic in (0, 1):
            start = self._value_start(position, magic)
            if start is not None:
                ends.add(start + be_int(self.read(start - 4, 4), 0, 4))
        return ends

    def _checked_legacy_end(self, position: int) -> int | None:
        """Where the legacy message at ``position`` ends by its key and value lengths, if its
        CRC checks over exactly those bytes; else None.

        The CRC covers the magic byte through the end of the value but not the size field, so
        a message whose only damage is its size field still proves its own extent this way
        (a false match is a 2^-32 chance). O(1) reads plus one CRC over the message.
        """
        head = self.read(position, 30)
        if head.shape[0] < 30 or head[16] > 1:
            return None
        at = 18 if head[16] == 0 else 26  # key length
        key = be_int(head, at, at + 4)
        if key < -1:
            return None
        at += 4 + max(key, 0)  # value length
        field = self.read(position + at, 4)
        if field.shape[0] < 4:
            return None
        value = be_int(field, 0, 4)
        if value < -1:
            return None
        end = at + 4 + max(value, 0)  # the entry's length: 12 + size
        if position + end > self.file_end or end > self.max_batch_bytes:
            return None
        if not has_valid_checksum(self.read(position, end)):
            return None
        return position + end

    # -- single entries --------------------------------------------------------------------

    def offset_field(self, position: int) -> int:
        return be_int(self.read(position, 8), 0, 8)

    def magic(self, position: int) -> int:
        return int(self.read(position + 16, 1)[0])

    def _offsets_may_follow(self, position: int) -> bool:
        """Whether the entry at ``position`` has offsets above the last good entry's and below
        the next segment's base offset."""
        head = self.read(position, 27)
        last = be_int(head, 0, 8)
        if int(head[16]) == 2:
            last += be_int(head, 23, 27)
        first = be_int(head, 0, 8)
        next_base = self.next_base_offset
        return first > self.last_offset() and (next_base is None or last < next_base)

    def _successor_is_valid(self, position: int) -> bool:
        """Whether the entry after the (valid) one at ``position`` is valid too, or the end.

        One valid-looking entry is not enough: a damaged compressed wrapper can hold its inner
        messages verbatim, each with a correct checksum.
        """
        head = self.read(position, 12)
        following = position + 12 + be_int(head, 8, 12)
        if following in (self.range_end, self.file_end):
            return True
        return self.entry_is_valid(following) or self.is_zero(following, self.file_end)

    def probe(self, position: int) -> EntryHead | None:
        """The entry at ``position`` if a whole valid one starts there."""
        return probe_entry(self.read, position, self.file_end, max_bytes=self.max_batch_bytes)

    def entry_is_valid(self, position: int) -> bool:
        return self.probe(position) is not None
