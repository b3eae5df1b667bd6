"""Execute one ScanTask: read a byte range of a ``.log`` and yield Arrow record batches.

The range is read in windows of ``readChunkBytes`` aligned to entry boundaries, so memory stays
bounded whatever the segment size. In each window the numba kernels hop the entry framing, parse
magic-2 headers and decode records into row arrays; legacy (magic 0/1) entries go through the
reference decoder. Rows are filtered (offset range, control records, aborted transactions) and
gathered straight into Arrow buffers.

Damage policy lives here and only here: decoders always raise; FAILFAST re-raises with the file,
position and offset; DROPMALFORMED drops the bad entry and resynchronises at the next entry whose
framing and checksum are valid.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import (
    CorruptSegmentError,
    LimitExceededError,
    StorageError,
    UnsupportedFormatError,
)
from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import has_valid_checksum
from kafka_segments_ds.window import (
    Predecoded,
    TaskBounds,
    WindowDecoder,
    batch_checksums,
    predecode,
)

log = logging.getLogger(__name__)
SHORT_READ_ATTEMPTS = 2
MAX_REREADS = 8  # entries read again because their bytes changed, per task


def _be(buf: np.ndarray, start: int, stop: int) -> int:
    """The signed big-endian integer in ``buf[start:stop]``."""
    return int.from_bytes(buf[start:stop].tobytes(), "big", signed=True)


@dataclass(frozen=True, slots=True)
class ScanTask:
    """One unit of reading: entries of one segment that START in [start_position, end_position).

    ``start_offset``/``end_offset`` (inclusive/exclusive) filter rows; ``min_max_timestamp`` lets
    the reader skip magic-2 batches whose maxTimestamp is below it (pruning only, rows are not
    filtered by time). ``aborted`` holds (producerId, firstOffset, lastOffset) of aborted
    transactions for read_committed.
    """

    segment: SegmentRef
    topic: str | None
    partition: int | None
    start_position: int = 0
    end_position: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    min_max_timestamp: int | None = None
    aborted: tuple[tuple[int, int, int], ...] = ()
    next_base_offset: int | None = None  # offsets of this segment must stay below it
    # where the segment lives (pickles, so executors reopen it); None = resolve the path
    filesystem: pafs.FileSystem | None = None
    include_control: bool = False  # return control records as rows (internal lookups)


_PREFETCH_POOL: ThreadPoolExecutor | None = None


@dataclass(frozen=True, slots=True, eq=False)
class _Scan:
    """A window with its entry framing (and, when read ahead, its batches' CRC-32C)."""

    window: np.ndarray
    positions: np.ndarray
    magics: np.ndarray
    outcome: int
    stop: int
    checksums: tuple[np.ndarray, np.ndarray] | None  # (v2 batch positions, computed CRC-32C)
    predecoded: Predecoded | None = None  # record-kernel output (plain windows, read ahead)


def scan(window: np.ndarray, checksums: bool, pool: dict[str, np.ndarray] | None = None) -> _Scan:
    """Frame ``window``; on the read-ahead thread also checksum it and, given a row ``pool``,
    run the record kernel over it (both release the GIL while the main thread works)."""
    positions, magics, outcome, stop = K.hop_entries(window, 0, window.shape[0])
    sums = None
    if checksums:
        v2 = positions[magics == 2]
        if v2.shape[0]:
            ends = v2 + K.parse_v2_headers(window, v2)[:, K.H_LENGTH] + 12
            sums = (v2, batch_checksums(window, v2, ends))
    ahead = predecode(window, positions, magics, pool) if pool is not None else None
    return _Scan(window, positions, magics, int(outcome), int(stop), sums, ahead)


def _prefetch_pool() -> ThreadPoolExecutor:
    global _PREFETCH_POOL
    if _PREFETCH_POOL is None:
        _PREFETCH_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kafka-segments-read")
    return _PREFETCH_POOL


class _Source:
    """Ranged reads of one file.

    ``scan_window`` hands out windows from two reused buffers: one is being decoded while the
    next window is read ahead into the other (``prefetch``, on a helper thread; the read
    releases the GIL). A window is fully copied out before the next ``scan_window`` call.
    ``read`` returns independent bytes. Local files use ``os.pread`` rather than a memory
    map: a map turns a concurrent truncation of the file into a SIGBUS.
    """

    def __init__(
        self, filesystem: pafs.FileSystem, path: str, size: int, shown: str | None = None
    ) -> None:
        self.path = path
        self.shown = path if shown is None else shown  # the path in messages
        self.size = size
        self._fd: int | None = None
        self._file = None
        if isinstance(filesystem, pafs.LocalFileSystem):
            self._fd = os.open(path, os.O_RDONLY)
        else:
            self._file = filesystem.open_input_file(path)
        self._buffers = [bytearray(0), bytearray(0)]
        # row arrays for windows decoded ahead, one set per buffer (see window.predecode)
        self._row_pools: list[dict[str, np.ndarray]] = [{}, {}]
        self.predecode = False
        self._current = 0  # the buffer of the window handed out last
        self._pending: tuple[int, int, Future[_Scan]] | None = None

    def _clip(self, position: int, length: int) -> int:
        return max(0, min(length, self.size - position))

    def read(self, position: int, length: int) -> np.ndarray:
        length = self._clip(position, length)
        if self._fd is not None:
            return np.frombuffer(os.pread(self._fd, length, position), np.uint8)
        return np.frombuffer(self._read_remote(position, length), np.uint8)

    def _read_remote(self, position: int, length: int) -> bytes:
        """A ranged read from an object store, checked for length: the listing said how big
        the object is, so a shorter answer is a cut-off response, never the end of the data.
        It is tried again once (pyarrow retries only failed requests, not short ones)."""
        assert self._file is not None
        got = b""
        for _ in range(SHORT_READ_ATTEMPTS):
            try:
                got = self._file.read_at(length, position)
            except OSError as err:
                raise StorageError(
                    f"reading {length} bytes failed: {err}", self.shown, position
                ) from err
            if len(got) == length:
                return got
            log.warning(
                "%s: asked for %d bytes at byte %d, got %d; reading again",
                self.shown,
                length,
                position,
                len(got),
            )
        raise StorageError(
            f"short read: asked for {length} bytes, got {len(got)} "
            f"({SHORT_READ_ATTEMPTS} attempts)",
            self.shown,
            position,
        )

    def _fill(self, slot: int, position: int, length: int) -> np.ndarray:
        if self._fd is None:
            return self.read(position, length)
        if len(self._buffers[slot]) < length:
            self._buffers[slot] = bytearray(length)
        buffer = self._buffers[slot]
        view = memoryview(buffer)[:length]
        got = 0
        while got < length:  # pread may return short; 0 means the file shrank
            n = os.preadv(self._fd, [view[got:]], position + got)
            if n == 0:
                break
            got += n
        return np.frombuffer(buffer, np.uint8, got)

    def prefetch(self, position: int, length: int, checksums: bool) -> None:
        """Start reading (and framing, and checksumming) the window ``scan_window(position,
        length)`` will most likely ask for, on a helper thread: the kernels and crc32c release
        the GIL, so this overlaps with decoding the current window."""
        self._settle()
        length = self._clip(position, length)
        if length:
            future = _prefetch_pool().submit(
                self._scan, 1 - self._current, position, length, checksums
            )
            self._pending = (position, length, future)

    def _scan(self, slot: int, position: int, length: int, checksums: bool) -> _Scan:
        pool = self._row_pools[slot] if self.predecode else None
        return scan(self._fill(slot, position, length), checksums, pool)

    def _settle(self) -> _Scan | None:
        """Wait for a read-ahead in flight (its buffer must be quiet); return its window."""
        if self._pending is None:
            return None
        future = self._pending[2]
        self._pending = None
        try:
            return future.result()
        except OSError:
            return None  # read again in the foreground, where the error is reported

    def scan_window(self, position: int, length: int) -> _Scan:
        """The window at ``position`` (the read-ahead one if it matches), framed."""
        length = self._clip(position, length)
        pending = self._pending
        ahead = self._settle()
        self._current = 1 - self._current
        if pending is not None and ahead is not None and pending[:2] == (position, length):
            return ahead
        return scan(self._fill(self._current, position, length), checksums=False)

    def close(self) -> None:
        self._settle()
        if self._fd is not None:
            os.close(self._fd)
        if self._file is not None:
            self._file.close()


def read_task(
    task: ScanTask,
    options: ReadOptions,
    columns: tuple[str, ...],
    filesystem: pafs.FileSystem | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decode ``task`` into Arrow record batches with exactly ``columns``."""
    if filesystem is None:
        filesystem = task.filesystem
    if filesystem is None:
        filesystem, _ = kfs.resolve(task.segment.path, options.storage_options())
    shown = kfs.display_path(filesystem, task.segment.path)
    source = _Source(filesystem, task.segment.path, task.segment.size, shown)
    source.predecode = options.deep
    try:
        yield from _TaskReader(task, options, columns, source, shown).run()
    finally:
        source.close()


class _TaskReader:
    def __init__(
        self,
        task: ScanTask,
        options: ReadOptions,
        columns: tuple[str, ...],
        source: _Source,
        shown: str,
    ) -> None:
        self.task = task
        self.shown = shown  # the segment's path in messages and the `segment` column
        self.options = options
        self.columns = columns
        self.source = source
        self.file_end = source.size
        self.rereads = 0
        self.checked_end: tuple[int, int | None] | None = None  # _may_be_inner's last wrapper
        self.range_end = (
            source.size if task.end_position is None else min(task.end_position, source.size)
        )
        self.decoder = WindowDecoder(
            options,
            TaskBounds(
                task.topic,
                task.partition,
                shown,
                task.start_offset,
                task.end_offset,
                task.min_max_timestamp,
                task.aborted,
                task.segment.base_offset,
                task.next_base_offset,
                task.include_control,
            ),
            columns,
        )

    # -- window loop -------------------------------------------------------------------------

    def run(self) -> Iterator[pa.RecordBatch]:
        pos = self.task.start_position
        chunk = self.options.read_chunk_bytes
        want = chunk
        while pos < self.range_end:
            scanned = self.source.scan_window(pos, want)
            window, positions, magics = scanned.window, scanned.positions, scanned.magics
            outcome, stop = scanned.outcome, scanned.stop
            # entries must start inside the task's range
            keep = positions + pos < self.range_end
            reaches_end = not keep.all()
            if reaches_end:
                positions, magics = positions[keep], magics[keep]
            next_pos = pos + stop
            if (
                (outcome == K.FRAMING_END or (outcome == K.FRAMING_PARTIAL and stop > 0))
                and not reaches_end
                and next_pos < self.range_end
            ):
                # the usual next window
                self.source.prefetch(next_pos, chunk, self.options.verify_checksums)
            if positions.shape[0]:
                batch, fault = self.decoder.decode(
                    window, pos, positions, magics, scanned.checksums, scanned.predecoded
                )
                if batch is not None and batch.num_rows:
                    yield batch
                if fault is not None:  # raises in FAILFAST mode
                    rel = fault.position - pos
                    size = _be(window, rel + 8, rel + 12) if rel + 12 <= window.shape[0] else 0
                    seen = window[rel : rel + 12 + max(size, 0)].tobytes()
                    resume = self._fail(fault.error, fault.position, fault.offset, seen)
                    if resume is None:
                        break
                    pos, want = resume, chunk
                    continue
            if reaches_end or self.decoder.reached_end:
                break
            if next_pos >= self.range_end:
                break
            if outcome == K.FRAMING_END:
                pos, want = next_pos, chunk
            elif outcome == K.FRAMING_PARTIAL:
                header = self.source.read(next_pos, 12)
                size = _be(header, 8, 12) if (header.shape[0] >= 12) else -1
                entry_len = 12 + size
                if header.shape[0] >= 12 and size >= 14 and next_pos + entry_len <= self.file_end:
                    if entry_len > self.options.max_batch_bytes:
                        resume = self._fail(
                            LimitExceededError(
                                f"entry of {entry_len} bytes exceeds maxBatchBytes "
                                f"{self.options.max_batch_bytes}"
                            ),
                            next_pos,
                        )
                        if resume is None:
                            break
                        pos, want = resume, chunk
                        continue
                    pos, want = next_pos, max(chunk, entry_len)
                    continue
                resume = self._past_eof(next_pos)
                if resume is None:
                    break
                pos, want = resume, chunk
            else:
                resume = self._bad_framing(next_pos, outcome, window[stop : stop + 17].tobytes())
                if resume is None:
                    break
                pos, want = resume, chunk

    def _fail(
        self,
        err: CorruptSegmentError,
        position: int,
        offset: int | None = None,
        seen: bytes | None = None,
    ) -> int | None:
        """FAILFAST: raise, naming file, entry position and offset. DROPMALFORMED: log, and
        return where the next valid entry starts (None: nothing valid follows). Either way a
        torn last write of a segment being written in place is the end of the data (``seen``:
        the entry's bytes as they were decoded)."""
        if self._is_torn_write(position, err):
            return None
        if self._changed_since_read(position, seen):
            return position  # decode it again as it is now
        reason = err.reason
        if err.position is not None:  # decoders report positions inside the entry's payload
            reason = f"{reason} (at byte {err.position} inside the entry)"
        located = type(err)(
            reason,
            path=self.shown,
            position=position,
            offset=offset if offset is not None else err.offset,
        )
        if not self.options.drop_malformed:
            raise located from err
        log.warning("dropping malformed entry: %s", located)
        return self._resync(position)

    def _is_torn_write(self, position: int, err: CorruptSegmentError) -> bool:
        """Whether the bad entry at ``position`` is one a broker was still writing.

        With ``preallocate=true`` a broker writes into a zero-filled file, so a copy (or a read)
        taken meanwhile ends in a partly written entry and zeros: as for a truncated tail, that
        is the end of the data, not damage.
        """
        head = self.source.read(position, 17)
        if head.shape[0] < 17:
            return False
        size = _be(head, 8, 12)
        end = position + 12 + (size if size >= 14 else 0)
        if end < self.file_end and self._is_zero(end, self.file_end):
            log.info(
                "%s: entry at byte %d torn by a write into a zero-filled segment: end of data (%s)",
                self.shown,
                position,
                err,
            )
            return True
        return False

    def _changed_since_read(self, position: int, seen: bytes | None) -> bool:
        """Whether the bad entry at ``position`` reads differently now and is valid: it was
        being written in place while read (preallocated segment), or the first read came back
        wrong (pyarrow pads a short S3 response to the length asked). A few per task."""
        if seen is None or self.rereads >= MAX_REREADS:
            return False
        if self.source.read(position, len(seen)).tobytes() == seen:
            return False
        if not self._entry_is_valid(position):
            return False
        self.rereads += 1
        self.checked_end = None
        log.warning(
            "%s: entry at byte %d changed since it was read; reading it again", self.shown, position
        )
        return True

    def _past_eof(self, position: int) -> int | None:
        """An entry at ``position`` runs past the end of the file.

        That is the end of the data, as for a broker (a copy taken while the broker was
        appending, or a truncated copy), unless a valid entry whose offsets follow on starts
        later: then this entry's size field is damaged. An entry that may be an inner message
        of this one (a truncated wrapper storing it verbatim) proves damage only when valid
        entries follow it exactly to the end of the file or include a magic-2 batch.
        """
        candidate = self._scan_for_entry(position + 1, position)
        if candidate is not None and (
            not self._may_be_inner(candidate, position)
            or any(self._walk_chain(candidate, self.file_end))
        ):
            err = CorruptSegmentError(
                "entry size runs past the end of the file, but valid entries follow "
                f"from byte {candidate} (damaged size field)"
            )
            return self._fail(err, position, self._offset_field(position))
        skipped = self.file_end - position
        if self._is_zero(position, self.file_end):
            log.info("%s: zero-filled tail from byte %d", self.source.path, position)
        else:
            log.warning(
                "%s: truncated entry at byte %d: %d bytes at the end of the file ignored",
                self.source.path,
                position,
                skipped,
            )
        return None

    def _chain_reaches(self, position: int, target: int) -> bool:
        """Whether valid entries follow each other from ``position`` exactly to ``target``; at
        the end of the file also to a zero tail too long to be the lz4 end mark that ends a
        wrapper's payload."""
        return self._walk_chain(position, target)[0]

    def _walk_chain(self, position: int, target: int) -> tuple[bool, bool]:
        """(:meth:`_chain_reaches`, whether a magic-2 batch is on the chain)."""
        batch = False
        while position < target:
            if (
                target == self.file_end
                and target - position >= 17
                and self._is_zero(position, target)
            ):
                return True, batch
            if not self._entry_is_valid(position):
                return False, batch
            head = self.source.read(position, 17)
            batch = batch or int(head[16]) == 2
            position += 12 + _be(head, 8, 12)
        return position == target, batch

    def _bad_framing(self, position: int, outcome: int, seen: bytes) -> int | None:
        if self._is_zero(position, self.file_end):
            log.info("%s: zero-filled (preallocated) tail from byte %d", self.source.path, position)
            return None
        head = self.source.read(position, 17)
        if head.shape[0] < 17:
            return None
        size = _be(head, 8, 12)
        offset = _be(head, 0, 8)
        magic = int(head[16])
        if outcome == K.FRAMING_SHORT_BATCH:
            reason = f"batch length {size} below the minimum 49"
            err: CorruptSegmentError = CorruptSegmentError(reason)
        elif magic > 2:
            err = UnsupportedFormatError(f"unknown magic byte {magic} (size field {size})")
        else:
            err = CorruptSegmentError(f"entry size {size} below the minimum 14")
        return self._fail(err, position, offset, seen)

    def _is_zero(self, start: int, end: int) -> bool:
        step = 4 * 1024 * 1024
        while start < end:
            block = self.source.read(start, min(step, end - start))
            if block.shape[0] == 0:
                return True
            if block.any():
                return False
            start += block.shape[0]
        return True

    def _resync(self, position: int) -> int | None:
        """Where reading resumes after the damaged entry at ``position`` (None: nothing follows).

        If the damaged entry's size field leads to a valid entry (or exactly to the end), trust
        it, unless valid entries found inside the damaged one chain exactly to that place (the
        size field grew over whole entries). Otherwise take the first later position holding a
        valid entry (see :meth:`_scan_for_entry`).
        """
        head = self.source.read(position, 12)
        following = None
        if head.shape[0] == 12:
            claimed = position + 12 + _be(head, 8, 12)
            if claimed in (self.range_end, self.file_end) or (
                position + 26 <= claimed < self.range_end and self._entry_is_valid(claimed)
            ):
                following = min(claimed, self.range_end)
        candidate = self._scan_for_entry(position + 1, position, following)
        if following is None:
            return candidate
        if candidate is not None and self._chain_reaches(candidate, following):
            return candidate  # the size field skipped whole entries: it was the damage
        return following if following < self.range_end else None

    def _scan_for_entry(
        self, start: int, damaged: int | None = None, stop: int | None = None
    ) -> int | None:
        """First position in [``start``, ``stop``) holding a well-framed entry with a valid
        checksum whose offsets can follow the last good entry.

        One that may be an inner message of the ``damaged`` entry, stored verbatim, must also
        be followed by a valid entry. Others need no valid successor: it may be damaged too.
        """
        step = max(self.options.read_chunk_bytes, 1 << 20)
        stop = self.range_end if stop is None else stop
        while start < stop:
            window = self.source.read(start, step + 64)
            limit = min(window.shape[0], stop - start)
            rel = 0
            while rel < limit:
                cand = int(K.find_entry_candidate(window, rel, limit))
                if cand < 0:
                    break
                absolute = start + cand
                if (
                    self._entry_is_valid(absolute)
                    and self._offsets_may_follow(absolute)
                    and (
                        damaged is None
                        or not self._may_be_inner(absolute, damaged)
                        or self._successor_is_valid(absolute)
                    )
                ):
                    log.warning("%s: resynchronised at byte %d", self.source.path, absolute)
                    return absolute
                rel = cand + 1
            start += step
        return None

    def _may_be_inner(self, position: int, damaged: int) -> bool:
        """Whether the legacy entry at ``position`` could be an inner message of a compressed
        legacy wrapper at ``damaged``, stored verbatim (lz4/gzip stored blocks, snappy
        literals). Neither the wrapper's size field (it may be the damage) nor the candidate's
        offset field (the compressor may fold those 8 bytes into a match while the CRC-covered
        rest stays literal) can rule that out, but the wrapper's checksum can: when its key and
        value lengths give an extent its CRC checks, its inner messages all lie before that end
        (see :meth:`_checked_legacy_end`)."""
        outer = self.source.read(damaged, 18)
        if outer.shape[0] < 18 or outer[16] > 1 or not 1 <= (outer[17] & 0x07) <= 3:
            return False
        if self._magic(position) >= 2:
            return False
        if self.checked_end is None or self.checked_end[0] != damaged:
            # one CRC per damaged wrapper, however many candidates are weighed against it
            self.checked_end = (damaged, self._checked_legacy_end(damaged))
        end = self.checked_end[1]
        return end is None or position < end

    def _checked_legacy_end(self, position: int) -> int | None:
        """Where the legacy message at ``position`` ends by its key and value lengths, if its
        CRC checks over exactly those bytes; else None.

        The CRC covers the magic byte through the end of the value but not the size field, so
        a message whose only damage is its size field still proves its own extent this way
        (a false match is a 2^-32 chance). O(1) reads plus one CRC over the message.
        """
        head = self.source.read(position, 30)
        if head.shape[0] < 30 or head[16] > 1:
            return None
        at = 18 if head[16] == 0 else 26  # key length
        key = _be(head, at, at + 4)
        if key < -1:
            return None
        at += 4 + max(key, 0)  # value length
        field = self.source.read(position + at, 4)
        if field.shape[0] < 4:
            return None
        value = _be(field, 0, 4)
        if value < -1:
            return None
        end = at + 4 + max(value, 0)  # the entry's length: 12 + size
        if position + end > self.file_end or end > self.options.max_batch_bytes:
            return None
        if not has_valid_checksum(self.source.read(position, end)):
            return None
        return position + end

    def _offset_field(self, position: int) -> int:
        return _be(self.source.read(position, 8), 0, 8)

    def _magic(self, position: int) -> int:
        return int(self.source.read(position + 16, 1)[0])

    def _offsets_may_follow(self, position: int) -> bool:
        """Whether the entry at ``position`` has offsets above the last good entry's and below
        the next segment's base offset."""
        head = self.source.read(position, 27)
        last = _be(head, 0, 8)
        if int(head[16]) == 2:
            last += _be(head, 23, 27)
        first = _be(head, 0, 8)
        next_base = self.task.next_base_offset
        return first > self.decoder.last_offset and (next_base is None or last < next_base)

    def _successor_is_valid(self, position: int) -> bool:
        """Whether the entry after the (valid) one at ``position`` is valid too, or the end.

        One valid-looking entry is not enough: a damaged compressed wrapper can hold its inner
        messages verbatim, each with a correct checksum.
        """
        head = self.source.read(position, 12)
        following = position + 12 + _be(head, 8, 12)
        if following in (self.range_end, self.file_end):
            return True
        return self._entry_is_valid(following) or self._is_zero(following, self.file_end)

    def _entry_is_valid(self, position: int) -> bool:
        head = self.source.read(position, 17)
        if head.shape[0] < 17:
            return False
        size = _be(head, 8, 12)
        magic = int(head[16])
        if size < 14 or magic > 2 or position + 12 + size > self.file_end:
            return False
        if size + 12 > self.options.max_batch_bytes:
            return False
        return has_valid_checksum(self.source.read(position, 12 + size))


def iter_v2_headers(
    filesystem: pafs.FileSystem, segment: SegmentRef, options: ReadOptions
) -> Iterator[tuple[int, np.ndarray, Callable[[], bytes]]]:
    """Hop the entries of a segment without decoding records.

    Yields ``(position, header fields, read_entry)`` for each magic-2 batch, where the header
    fields are indexed by the ``kernels.H_*`` constants and ``read_entry()`` returns the whole
    batch. Stops quietly at the first entry that cannot be framed (the reader reports it).
    """
    source = _Source(filesystem, segment.path, segment.size)
    try:
        pos = 0
        want = options.read_chunk_bytes
        while pos < segment.size:
            window = source.read(pos, want)
            positions, magics, outcome, stop = K.hop_entries(window, 0, window.shape[0])
            v2 = positions[magics == 2]
            headers = K.parse_v2_headers(window, v2)
            for i in range(v2.shape[0]):
                absolute = pos + int(v2[i])
                length = int(headers[i, K.H_LENGTH]) + 12

                def read_entry(absolute: int = absolute, length: int = length) -> bytes:
                    return source.read(absolute, length).tobytes()

                yield absolute, headers[i], read_entry
            if outcome == K.FRAMING_PARTIAL and stop == 0:
                # one entry larger than the window: widen the window to hold it
                if window.shape[0] < 17:
                    return  # truncated tail
                size = _be(window, 8, 12)
                if pos + 12 + size > segment.size:
                    return  # truncated tail
                want = 12 + size
                continue
            if outcome != K.FRAMING_END and outcome != K.FRAMING_PARTIAL:
                return  # damaged framing or zero tail: the reader reports it
            pos += stop
            want = options.read_chunk_bytes
    finally:
        source.close()
