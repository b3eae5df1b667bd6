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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import (
    ChecksumError,
    CorruptSegmentError,
    KafkaSegmentsError,
    LimitExceededError,
    UnsupportedFormatError,
)
from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.checksums import crc32, crc32c
from kafka_segments_ds.records.compression import CODEC_LABELS, decompress
from kafka_segments_ds.records.legacy import LegacyMessage, decode_legacy_message, expand_wrapper
from kafka_segments_ds.schema import HEADER_TYPE, TIMESTAMP_TYPE, arrow_schema

log = logging.getLogger(__name__)

_GATHER_LIMIT = 1 << 30  # bytes of key+value data per Arrow batch (binary offsets are int32)
_V2_OVERHEAD = 61


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
    is_last_segment: bool = True


@dataclass(slots=True)
class _Entries:
    """Entry-level (batch / top-level message) metadata of one window, file positions."""

    position: list[int] = field(default_factory=list)
    magic: list[int] = field(default_factory=list)
    codec: list[int] = field(default_factory=list)
    base_offset: list[int] = field(default_factory=list)
    last_offset: list[int] = field(default_factory=list)
    producer_id: list[int] = field(default_factory=list)
    producer_epoch: list[int] = field(default_factory=list)
    base_sequence: list[int] = field(default_factory=list)
    attributes: list[int] = field(default_factory=list)
    leader_epoch: list[int] = field(default_factory=list)

    def add(self, position: int, magic: int, codec: int, base: int, last: int,
            pid: int = -1, pepoch: int = -1, bseq: int = -1, attrs: int = 0,
            epoch: int = -1) -> int:
        self.position.append(position)
        self.magic.append(magic)
        self.codec.append(codec)
        self.base_offset.append(base)
        self.last_offset.append(last)
        self.producer_id.append(pid)
        self.producer_epoch.append(pepoch)
        self.base_sequence.append(bseq)
        self.attributes.append(attrs)
        self.leader_epoch.append(epoch)
        return len(self.position) - 1


class _Rows:
    """Row arrays accumulated for one window, in file order once finished."""

    def __init__(self) -> None:
        self.parts: list[dict[str, np.ndarray]] = []
        self.order: list[int] = []  # entry index of each part's first row (to restore order)
        self.arena: list[bytes] = []
        self.arena_size = 0

    def to_arena(self, blob: bytes | None) -> tuple[int, int]:
        if blob is None:
            return 0, -1
        pos = self.arena_size
        self.arena.append(blob)
        self.arena_size += len(blob)
        return pos, len(blob)

    def add(self, first_entry: int, **arrays: np.ndarray) -> None:
        self.parts.append(arrays)
        self.order.append(first_entry)

    def finish(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        names = ("offset", "ts", "ts_type", "src", "kpos", "klen", "vpos", "vlen", "hpos",
                 "hcount", "entry")
        if not self.parts:
            empty = {n: np.empty(0, np.int64) for n in names}
            return empty, np.empty(0, np.uint8)
        order = np.argsort(np.array(self.order, np.int64), kind="stable")
        parts = [self.parts[i] for i in order]
        rows = {n: np.concatenate([p[n] for p in parts]) for n in names}
        arena = np.frombuffer(b"".join(self.arena), np.uint8) if self.arena else np.empty(0, np.uint8)
        return rows, arena


class _Source:
    """Ranged reads of one file."""

    def __init__(self, filesystem: pafs.FileSystem, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self._file = filesystem.open_input_file(path)

    def read(self, position: int, length: int) -> np.ndarray:
        length = max(0, min(length, self.size - position))
        buf = self._file.read_at(length, position)
        return np.frombuffer(buf, np.uint8)

    def close(self) -> None:
        self._file.close()


def read_task(
    task: ScanTask,
    options: ReadOptions,
    columns: tuple[str, ...],
    filesystem: pafs.FileSystem | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decode ``task`` into Arrow record batches with exactly ``columns``."""
    if filesystem is None:
        filesystem, _ = kfs.resolve(task.segment.path, options.storage_options())
    source = _Source(filesystem, task.segment.path, task.segment.size)
    try:
        yield from _TaskReader(task, options, columns, source).run()
    finally:
        source.close()


class _TaskReader:
    def __init__(
        self, task: ScanTask, options: ReadOptions, columns: tuple[str, ...], source: _Source
    ) -> None:
        self.task = task
        self.options = options
        self.columns = columns
        self.source = source
        self.schema = arrow_schema(columns)
        self.file_end = source.size
        self.range_end = source.size if task.end_position is None else min(
            task.end_position, source.size
        )
        self.done = False
        self.need_headers = "headers" in columns
        self.skipped_tail = 0
        self.failed = False  # DROPMALFORMED found no valid entry after a bad one

    # -- window loop -------------------------------------------------------------------------

    def run(self) -> Iterator[pa.RecordBatch]:
        pos = self.task.start_position
        chunk = self.options.read_chunk_bytes
        want = chunk
        while pos < self.range_end and not self.done:
            window = self.source.read(pos, want)
            positions, magics, outcome, stop = K.hop_entries(window, 0, window.shape[0])
            # entries must start inside the task's range
            keep = positions + pos < self.range_end
            if not keep.all():
                positions, magics = positions[keep], magics[keep]
                self.done = True
            next_pos = pos + stop
            if positions.shape[0]:
                batch, resume = self._decode_window(window, pos, positions, magics)
                if batch is not None and batch.num_rows:
                    yield batch
                if resume is not None:  # DROPMALFORMED dropped an entry: continue there
                    pos, want = resume, chunk
                    continue
            if self.done or next_pos >= self.range_end:
                break
            if outcome == K.FRAMING_END:
                pos, want = next_pos, chunk
            elif outcome == K.FRAMING_PARTIAL:
                header = self.source.read(next_pos, 12)
                size = int.from_bytes(header[8:12].tobytes(), "big", signed=True) if (
                    header.shape[0] >= 12) else -1
                entry_len = 12 + size
                if header.shape[0] >= 12 and size >= 14 and next_pos + entry_len <= self.file_end:
                    if entry_len > self.options.max_batch_bytes:
                        resume = self._fail(LimitExceededError(
                            f"entry of {entry_len} bytes exceeds maxBatchBytes "
                            f"{self.options.max_batch_bytes}"), next_pos)
                        if resume is None:
                            break
                        pos, want = resume, chunk
                        continue
                    pos, want = next_pos, max(chunk, entry_len)
                    continue
                # An entry that runs past the end of the file: a truncated tail, unless valid
                # entries follow (then its size field is damaged).
                resume = self._past_eof(next_pos)
                if resume is None:
                    break
                pos, want = resume, chunk
            else:
                resume = self._bad_framing(next_pos, outcome)
                if resume is None:
                    break
                pos, want = resume, chunk

    def _fail(self, err: CorruptSegmentError, position: int, offset: int | None = None
              ) -> int | None:
        """FAILFAST: raise located. DROPMALFORMED: return the resume position (None = stop)."""
        located = err.located(path=self.task.segment.path, position_shift=0, offset=offset)
        if located.position is None:
            located = type(err)(err.reason, path=self.task.segment.path, position=position,
                                offset=offset if offset is not None else err.offset)
        if not self.options.drop_malformed:
            raise located from err
        log.warning("dropping malformed entry: %s", located)
        resume = self._resync(position)
        if resume is None:
            self.failed = self.done = True
        return resume

    def _past_eof(self, position: int) -> int | None:
        found = self._resync(position, quiet=True)
        if found is None:
            self.skipped_tail = self.file_end - position
            if self._is_zero(position, self.file_end):
                log.info("%s: zero-filled tail from byte %d", self.source.path, position)
            else:
                log.warning(
                    "%s: %d bytes of a truncated entry at the end of the file ignored",
                    self.source.path, self.skipped_tail,
                )
            return None
        err = CorruptSegmentError("entry size runs past the end of the file but valid entries "
                                  "follow (damaged size field)")
        return self._fail(err, position)

    def _bad_framing(self, position: int, outcome: int) -> int | None:
        if self._is_zero(position, self.file_end):
            log.info("%s: zero-filled (preallocated) tail from byte %d", self.source.path, position)
            self.skipped_tail = self.file_end - position
            return None
        head = self.source.read(position, 17)
        if head.shape[0] < 17:
            return None
        size = int.from_bytes(head[8:12].tobytes(), "big", signed=True)
        offset = int.from_bytes(head[0:8].tobytes(), "big", signed=True)
        magic = int(head[16])
        if outcome == K.FRAMING_SHORT_BATCH:
            reason = f"batch length {size} below the minimum 49"
            err: CorruptSegmentError = CorruptSegmentError(reason)
        elif magic > 2:
            err = UnsupportedFormatError(f"unknown magic byte {magic} (size field {size})")
        else:
            err = CorruptSegmentError(f"entry size {size} below the minimum 14")
        return self._fail(err, position, offset)

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

    def _resync(self, position: int, quiet: bool = False) -> int | None:
        """First position > ``position`` holding a well-framed entry with a valid checksum."""
        step = max(self.options.read_chunk_bytes, 1 << 20)
        start = position + 1
        while start < self.range_end:
            window = self.source.read(start, step + 64)
            limit = min(window.shape[0], self.range_end - start)
            rel = 0
            while rel < limit:
                cand = _find_candidate(window, rel, limit)
                if cand < 0:
                    break
                absolute = start + cand
                if self._entry_is_valid(absolute):
                    if not quiet:
                        log.warning("%s: resynchronised at byte %d", self.source.path, absolute)
                    return absolute
                rel = cand + 1
            start += step
        return None

    def _entry_is_valid(self, position: int) -> bool:
        head = self.source.read(position, 17)
        if head.shape[0] < 17:
            return False
        size = int.from_bytes(head[8:12].tobytes(), "big", signed=True)
        magic = int(head[16])
        if size < 14 or magic > 2 or position + 12 + size > self.file_end:
            return False
        if size + 12 > self.options.max_batch_bytes:
            return False
        entry = self.source.read(position, 12 + size)
        if magic == 2:
            if size < 49:
                return False
            stored = int.from_bytes(entry[17:21].tobytes(), "big")
            return crc32c(memoryview(entry)[21:]) == stored
        stored = int.from_bytes(entry[12:16].tobytes(), "big")
        return crc32(memoryview(entry)[16:]) == stored

    # -- one window --------------------------------------------------------------------------

    def _decode_window(
        self, window: np.ndarray, base: int, positions: np.ndarray, magics: np.ndarray
    ) -> tuple[pa.RecordBatch | None, int | None]:
        entries = _Entries()
        rows = _Rows()
        resume: int | None = None
        v2_mask = magics == 2
        # Group consecutive runs so rows stay in file order even in mixed-magic segments.
        idx = 0
        n = positions.shape[0]
        while idx < n and resume is None and not self.done:
            run_end = idx
            is_v2 = bool(v2_mask[idx])
            while run_end < n and bool(v2_mask[run_end]) == is_v2:
                run_end += 1
            if is_v2:
                resume = self._decode_v2_run(window, base, positions[idx:run_end], entries, rows)
            else:
                resume = self._decode_legacy_run(window, base, positions[idx:run_end], entries,
                                                 rows)
            idx = run_end
        row_arrays, arena = rows.finish()
        if not entries.position:
            return None, resume
        return self._to_arrow(window, arena, row_arrays, entries), resume

    def _decode_v2_run(
        self, window: np.ndarray, base: int, positions: np.ndarray, entries: _Entries,
        rows: _Rows,
    ) -> int | None:
        opts = self.options
        task = self.task
        headers = K.parse_v2_headers(window, positions)
        base_offsets = headers[:, K.H_BASE_OFFSET]
        lods = headers[:, K.H_LOD]
        last_offsets = base_offsets + lods
        keep = np.ones(positions.shape[0], bool)
        stop_at = positions.shape[0]
        if task.end_offset is not None:
            beyond = np.nonzero(base_offsets >= task.end_offset)[0]
            if beyond.shape[0]:
                stop_at = int(beyond[0])
                keep[stop_at:] = False
                self.done = True
        if task.start_offset is not None:
            keep &= last_offsets >= task.start_offset
        if task.min_max_timestamp is not None:
            keep &= headers[:, K.H_MAX_TS] >= task.min_max_timestamp
        selected = np.nonzero(keep)[0]
        if selected.shape[0] == 0:
            return None
        attrs = headers[:, K.H_ATTRIBUTES]
        codecs = attrs & 0x07
        deep = opts.deep
        n_sel = selected.shape[0]
        b_src = np.zeros(n_sel, np.int8)
        b_start = np.empty(n_sel, np.int64)
        b_end = np.empty(n_sel, np.int64)
        b_count = np.empty(n_sel, np.int64)
        first_entry = len(entries.position)
        bad: int | None = None  # index into selected of the first malformed batch
        bad_err: CorruptSegmentError | None = None
        arena_parts: list[bytes] = []
        arena_size = 0
        for j in range(n_sel):
            i = int(selected[j])
            p = int(positions[i])
            h = headers[i]
            length = int(h[K.H_LENGTH])
            end = p + 12 + length
            err = self._check_v2_header(window, p, end, h)
            if err is None and deep:
                count = int(h[K.H_COUNT])
                codec = int(codecs[i])
                if codec == 0:
                    region = (0, p + _V2_OVERHEAD, end)
                else:
                    try:
                        data = decompress(codec, memoryview(window)[p + _V2_OVERHEAD:end],
                                          magic=2, max_bytes=opts.max_decompressed_bytes)
                    except CorruptSegmentError as exc:
                        err = exc
                    else:
                        region = (1, arena_size, arena_size + len(data))
                        arena_parts.append(data)
                        arena_size += len(data)
                if err is None:
                    if count > (region[2] - region[1]) // 7:
                        err = CorruptSegmentError(
                            f"record count {count} cannot fit in {region[2] - region[1]} bytes")
                    else:
                        b_src[j], b_start[j], b_end[j] = region
                        b_count[j] = count
            if err is not None:
                bad, bad_err = j, err
                break
            entries.add(
                base + p, 2, int(codecs[i]), int(base_offsets[i]), int(last_offsets[i]),
                int(h[K.H_PRODUCER_ID]), int(h[K.H_PRODUCER_EPOCH]), int(h[K.H_BASE_SEQ]),
                int(h[K.H_ATTRIBUTES]), int(h[K.H_EPOCH]),
            )
        n_ok = n_sel if bad is None else bad
        if n_ok:
            sel = selected[:n_ok]
            if deep:
                # a record-level fault in an earlier batch comes first in file order
                resume = self._decode_v2_records(
                    window, base, positions, headers, sel, b_src[:n_ok], b_start[:n_ok],
                    b_end[:n_ok], b_count[:n_ok], arena_parts, first_entry, entries, rows,
                )
                if resume is not None or self.failed:
                    return resume
            else:
                self._shallow_v2_rows(positions, headers, sel, first_entry, rows)
        if bad is None:
            return None
        assert bad_err is not None
        i = int(selected[bad])
        return self._fail(bad_err, base + int(positions[i]), int(base_offsets[i]))

    def _check_v2_header(
        self, window: np.ndarray, p: int, end: int, h: np.ndarray
    ) -> CorruptSegmentError | None:
        if h[K.H_COUNT] < 0:
            return CorruptSegmentError(f"negative record count {int(h[K.H_COUNT])}")
        if h[K.H_LOD] < 0:
            return CorruptSegmentError(f"negative lastOffsetDelta {int(h[K.H_LOD])}")
        codec = int(h[K.H_ATTRIBUTES]) & 0x07
        if codec > 4:
            return UnsupportedFormatError(f"unknown compression codec id {codec}")
        if self.options.verify_checksums:
            actual = crc32c(memoryview(window)[p + 21:end])
            if actual != int(h[K.H_CRC]):
                return ChecksumError(
                    f"CRC-32C mismatch: stored {int(h[K.H_CRC]):#010x}, computed {actual:#010x}")
        if codec != 0 and h[K.H_COUNT] > 0 and end - p == _V2_OVERHEAD:
            return CorruptSegmentError("compressed batch with records has no payload")
        return None

    def _decode_v2_records(
        self, window: np.ndarray, base: int, positions: np.ndarray, headers: np.ndarray,
        sel: np.ndarray, b_src: np.ndarray, b_start: np.ndarray, b_end: np.ndarray,
        b_count: np.ndarray, arena_parts: list[bytes], first_entry: int, entries: _Entries,
        rows: _Rows,
    ) -> int | None:
        h = headers[sel]
        # Rows point into the window (src 0) or this run's decompressed arena (src 1), which
        # is parked in the window's arena so that the gathers see a single src-1 buffer.
        blob = b"".join(arena_parts)
        arena = np.frombuffer(blob, np.uint8)
        arena_shift = rows.arena_size
        if blob:
            rows.arena.append(blob)
            rows.arena_size += len(blob)
        b_row0 = np.zeros(sel.shape[0], np.int64)
        if sel.shape[0] > 1:
            np.cumsum(b_count[:-1], out=b_row0[1:])
        total = int(b_count.sum())
        r_offset = np.empty(total, np.int64)
        r_ts = np.empty(total, np.int64)
        r_kpos = np.empty(total, np.int64)
        r_klen = np.empty(total, np.int64)
        r_vpos = np.empty(total, np.int64)
        r_vlen = np.empty(total, np.int64)
        r_hpos = np.empty(total, np.int64)
        r_hcount = np.empty(total, np.int64)
        status = np.zeros(sel.shape[0], np.int32)
        errpos = np.zeros(sel.shape[0], np.int64)
        log_append = ((h[:, K.H_ATTRIBUTES] & 0x08) != 0).astype(np.int8)
        K.decode_v2_records(
            window, arena, b_src, b_start, b_end, b_count, b_row0,
            h[:, K.H_BASE_OFFSET].copy(), h[:, K.H_BASE_TS].copy(), h[:, K.H_MAX_TS].copy(),
            log_append, h[:, K.H_LOD].copy(), r_offset, r_ts, r_kpos, r_klen, r_vpos, r_vlen,
            r_hpos, r_hcount, status, errpos,
        )
        resume = None
        n_ok = sel.shape[0]
        failed = np.nonzero(status)[0]
        if failed.shape[0]:
            j = int(failed[0])
            i = int(sel[j])
            where = "decompressed records" if b_src[j] else "batch"
            rel = int(errpos[j] - b_start[j])
            err = CorruptSegmentError(
                f"{K.RECORD_ERRORS[int(status[j])]} ({where} byte {rel} after the header)")
            resume = self._fail(err, base + int(positions[i]), int(h[j, K.H_BASE_OFFSET]))
            n_ok = j
            # forget entries registered for batches from the failed one on
            for lst in (entries.position, entries.magic, entries.codec, entries.base_offset,
                        entries.last_offset, entries.producer_id, entries.producer_epoch,
                        entries.base_sequence, entries.attributes, entries.leader_epoch):
                del lst[first_entry + n_ok:]
        if n_ok == 0:
            return resume
        nrows = int(b_row0[n_ok - 1] + b_count[n_ok - 1])
        entry_of_row = np.repeat(np.arange(first_entry, first_entry + n_ok, dtype=np.int64),
                                 b_count[:n_ok])
        src = np.repeat(b_src[:n_ok].astype(np.int64), b_count[:n_ok])
        shift = np.where(src == 1, arena_shift, 0)
        ts_type = np.repeat(log_append[:n_ok].astype(np.int64), b_count[:n_ok])
        control = np.repeat((h[:n_ok, K.H_ATTRIBUTES] & 0x20) != 0, b_count[:n_ok])
        keep = ~control
        r_offset = r_offset[:nrows]
        if self.task.start_offset is not None:
            keep &= r_offset >= self.task.start_offset
        if self.task.end_offset is not None:
            keep &= r_offset < self.task.end_offset
        if self.task.aborted:
            txn = np.repeat((h[:n_ok, K.H_ATTRIBUTES] & 0x10) != 0, b_count[:n_ok])
            pid = np.repeat(h[:n_ok, K.H_PRODUCER_ID], b_count[:n_ok])
            keep &= ~(txn & _aborted_mask(pid, r_offset, self.task.aborted))
        rows.add(
            first_entry,
            offset=r_offset[keep], ts=r_ts[:nrows][keep], ts_type=ts_type[keep], src=src[keep],
            kpos=(r_kpos[:nrows] + shift)[keep], klen=r_klen[:nrows][keep],
            vpos=(r_vpos[:nrows] + shift)[keep], vlen=r_vlen[:nrows][keep],
            hpos=(r_hpos[:nrows] + shift)[keep], hcount=r_hcount[:nrows][keep],
            entry=entry_of_row[keep],
        )
        return resume

    def _shallow_v2_rows(
        self, positions: np.ndarray, headers: np.ndarray, sel: np.ndarray, first_entry: int,
        rows: _Rows,
    ) -> None:
        h = headers[sel]
        last = h[:, K.H_BASE_OFFSET] + h[:, K.H_LOD]
        n = sel.shape[0]
        keep = np.ones(n, bool)
        if self.task.aborted:
            txn = (h[:, K.H_ATTRIBUTES] & 0x10) != 0
            keep &= ~(txn & _aborted_mask(h[:, K.H_PRODUCER_ID], h[:, K.H_BASE_OFFSET],
                                          self.task.aborted))
        p = positions[sel]
        rows.add(
            first_entry,
            offset=last[keep], ts=h[keep, K.H_MAX_TS],
            ts_type=((h[keep, K.H_ATTRIBUTES] & 0x08) != 0).astype(np.int64),
            src=np.zeros(int(keep.sum()), np.int64),
            kpos=np.zeros(int(keep.sum()), np.int64), klen=np.full(int(keep.sum()), -1, np.int64),
            vpos=(p + _V2_OVERHEAD)[keep], vlen=(h[:, K.H_LENGTH] + 12 - _V2_OVERHEAD)[keep],
            hpos=np.zeros(int(keep.sum()), np.int64), hcount=np.zeros(int(keep.sum()), np.int64),
            entry=np.arange(first_entry, first_entry + n, dtype=np.int64)[keep],
        )

    def _decode_legacy_run(
        self, window: np.ndarray, base: int, positions: np.ndarray, entries: _Entries,
        rows: _Rows,
    ) -> int | None:
        opts = self.options
        task = self.task
        mv = memoryview(window)
        cols: dict[str, list[int]] = {k: [] for k in (
            "offset", "ts", "ts_type", "kpos", "klen", "vpos", "vlen", "entry")}
        first_entry = len(entries.position)
        resume = None
        for p in positions.tolist():
            try:
                message = decode_legacy_message(mv, p, verify_checksum=opts.verify_checksums)
                codec = message.compression
            except CorruptSegmentError as exc:
                offset = int.from_bytes(window[p:p + 8].tobytes(), "big", signed=True)
                resume = self._fail(exc, base + p, offset)
                break
            if task.start_offset is not None and message.offset < task.start_offset:
                continue  # the offset field is the last offset, also for wrappers
            compressed = codec != 0
            inner: list[LegacyMessage] = []
            if compressed and (opts.deep or opts.include_metadata):
                try:
                    inner = expand_wrapper(message, verify_checksum=opts.verify_checksums,
                                           max_bytes=opts.max_decompressed_bytes)
                except CorruptSegmentError as exc:
                    resume = self._fail(exc, base + p, message.offset)
                    break
            first = inner[0].offset if inner else message.offset
            if task.end_offset is not None and first >= task.end_offset:
                self.done = True
                break
            entry = entries.add(base + p, message.magic, int(codec), first, message.offset,
                                attrs=message.attributes)
            emit = inner if (compressed and opts.deep) else [message]
            for m in emit:
                if opts.deep and (
                    (task.start_offset is not None and m.offset < task.start_offset)
                    or (task.end_offset is not None and m.offset >= task.end_offset)
                ):
                    continue
                kpos, klen = rows.to_arena(m.key)
                vpos, vlen = rows.to_arena(m.value)
                cols["offset"].append(m.offset)
                cols["ts"].append(m.timestamp)
                cols["ts_type"].append(m.timestamp_type)
                cols["kpos"].append(kpos)
                cols["klen"].append(klen)
                cols["vpos"].append(vpos)
                cols["vlen"].append(vlen)
                cols["entry"].append(entry)
        n = len(cols["offset"])
        if n or len(entries.position) > first_entry:
            arrays = {k: np.array(v, np.int64) for k, v in cols.items()}
            arrays["src"] = np.ones(n, np.int64)
            arrays["hpos"] = np.zeros(n, np.int64)
            arrays["hcount"] = np.zeros(n, np.int64)
            rows.add(first_entry, **arrays)
        return resume

    # -- Arrow -------------------------------------------------------------------------------

    def _to_arrow(
        self, window: np.ndarray, arena: np.ndarray, r: dict[str, np.ndarray], entries: _Entries
    ) -> pa.RecordBatch:
        n = r["offset"].shape[0]
        if n == 0:
            return pa.RecordBatch.from_pylist([], schema=self.schema)
        src = r["src"].astype(np.int8)
        rows = np.arange(n, dtype=np.int64)
        out: dict[str, pa.Array] = {}
        ent = r["entry"]
        for name in self.columns:
            if name == "key":
                out[name] = _binary(window, arena, src, r["kpos"], r["klen"], rows)
            elif name == "value":
                out[name] = _binary(window, arena, src, r["vpos"], r["vlen"], rows)
            elif name == "topic":
                out[name] = (pa.nulls(n, pa.string()) if self.task.topic is None
                             else pa.repeat(pa.scalar(self.task.topic, pa.string()), n))
            elif name == "partition":
                out[name] = (pa.nulls(n, pa.int32()) if self.task.partition is None
                             else pa.repeat(pa.scalar(self.task.partition, pa.int32()), n))
            elif name == "offset":
                out[name] = pa.array(r["offset"], pa.int64())
            elif name == "timestamp":
                ts = r["ts"]
                valid = ts != -1
                # far outside the representable range only with garbage; keep it null-free
                ts_us = np.where(valid, ts, 0).astype(np.int64) * 1000
                out[name] = pa.array(ts_us, TIMESTAMP_TYPE, mask=~valid)
            elif name == "timestampType":
                out[name] = pa.array(r["ts_type"].astype(np.int32), pa.int32())
            elif name == "headers":
                out[name] = _headers(window, arena, src, r["hpos"], r["hcount"])
            else:
                out[name] = self._metadata(name, ent, entries)
        return pa.RecordBatch.from_arrays([out[c] for c in self.columns], schema=self.schema)

    def _metadata(self, name: str, ent: np.ndarray, entries: _Entries) -> pa.Array:
        def pick(values: list[int], dtype: type) -> np.ndarray:
            return np.asarray(values, np.int64)[ent].astype(dtype)

        if name == "magic":
            return pa.array(pick(entries.magic, np.int8), pa.int8())
        if name == "compression":
            codes = pick(entries.codec, np.int32)
            return pa.DictionaryArray.from_arrays(
                pa.array(codes), pa.array(CODEC_LABELS)).cast(pa.string())
        if name == "batchBaseOffset":
            return pa.array(pick(entries.base_offset, np.int64), pa.int64())
        if name == "batchLastOffset":
            return pa.array(pick(entries.last_offset, np.int64), pa.int64())
        if name == "producerId":
            return pa.array(pick(entries.producer_id, np.int64), pa.int64())
        if name == "producerEpoch":
            return pa.array(pick(entries.producer_epoch, np.int16), pa.int16())
        if name == "baseSequence":
            return pa.array(pick(entries.base_sequence, np.int32), pa.int32())
        if name == "isTransactional":
            attrs = pick(entries.attributes, np.int64)
            magic = pick(entries.magic, np.int64)
            return pa.array((magic == 2) & ((attrs & 0x10) != 0), pa.bool_())
        if name == "isControl":
            attrs = pick(entries.attributes, np.int64)
            magic = pick(entries.magic, np.int64)
            return pa.array((magic == 2) & ((attrs & 0x20) != 0), pa.bool_())
        if name == "leaderEpoch":
            return pa.array(pick(entries.leader_epoch, np.int32), pa.int32())
        if name == "segment":
            return pa.repeat(pa.scalar(self.task.segment.path, pa.string()), ent.shape[0])
        if name == "position":
            return pa.array(pick(entries.position, np.int64), pa.int64())
        raise KafkaSegmentsError(f"unknown column {name}")


def _find_candidate(window: np.ndarray, start: int, limit: int) -> int:
    return int(K.find_entry_candidate(window, start, limit))


def _aborted_mask(pid: np.ndarray, offsets: np.ndarray,
                  aborted: tuple[tuple[int, int, int], ...]) -> np.ndarray:
    """True where (producer, offset) lies in an aborted transaction's [first, last] range."""
    spans = np.array(aborted, np.int64).reshape(-1, 3)
    out = np.zeros(offsets.shape[0], bool)
    for producer in np.unique(pid):
        mine = spans[spans[:, 0] == producer]
        if mine.shape[0] == 0:
            continue
        mine = mine[np.argsort(mine[:, 1], kind="stable")]
        sel = pid == producer
        off = offsets[sel]
        k = np.searchsorted(mine[:, 1], off, side="right") - 1
        hit = (k >= 0) & (off <= mine[np.maximum(k, 0), 2])
        out[sel] = hit
    return out


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _binary(
    window: np.ndarray, arena: np.ndarray, src: np.ndarray, pos: np.ndarray, length: np.ndarray,
    rows: np.ndarray, arrow_type: pa.DataType | None = None,
) -> pa.Array:
    arrow_type = arrow_type or pa.binary()
    pieces = []
    sizes = np.maximum(length[rows], 0)
    bounds = _split_points(sizes)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        sel = rows[lo:hi]
        offsets, data = K.gather_binary(window, arena, src, pos, length, sel)
        valid = length[sel] >= 0
        pieces.append(pa.Array.from_buffers(
            arrow_type, sel.shape[0],
            [_validity(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
        ))
    if len(pieces) == 1:
        return pieces[0]
    return pa.concat_arrays(pieces)


def _split_points(sizes: np.ndarray) -> list[int]:
    total = int(sizes.sum())
    if total <= _GATHER_LIMIT:
        return [0, sizes.shape[0]]
    cum = np.cumsum(sizes)
    points = [0]
    while points[-1] < sizes.shape[0]:
        start_bytes = int(cum[points[-1] - 1]) if points[-1] else 0
        nxt = int(np.searchsorted(cum, start_bytes + _GATHER_LIMIT, side="right"))
        points.append(max(nxt, points[-1] + 1))
    return points


def _headers(
    window: np.ndarray, arena: np.ndarray, src: np.ndarray, hpos: np.ndarray, hcount: np.ndarray
) -> pa.Array:
    n = hpos.shape[0]
    list_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(hcount, out=list_offsets[1:])
    total = int(list_offsets[-1])
    h_kpos = np.empty(total, np.int64)
    h_klen = np.empty(total, np.int64)
    h_vpos = np.empty(total, np.int64)
    h_vlen = np.empty(total, np.int64)
    rows = np.arange(n, dtype=np.int64)
    K.decode_v2_headers(window, arena, src, hpos, hcount, rows, h_kpos, h_klen, h_vpos, h_vlen)
    h_src = np.repeat(src, hcount)
    all_h = np.arange(total, dtype=np.int64)
    keys = _binary(window, arena, h_src, h_kpos, h_klen, all_h, pa.string())
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        # Java decodes header keys with replacement characters; do the same.
        raw = _binary(window, arena, h_src, h_kpos, h_klen, all_h)
        keys = pa.array([b.decode("utf-8", errors="replace") for b in raw.to_pylist()],
                        pa.string())
    values = _binary(window, arena, h_src, h_vpos, h_vlen, all_h)
    struct = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), struct, type=HEADER_TYPE)


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
            window = source.read(pos, min(want, 1 << 20) if want <= options.read_chunk_bytes
                                 else want)
            positions, magics, outcome, stop = K.hop_entries(window, 0, window.shape[0])
            v2 = positions[magics == 2]
            headers = K.parse_v2_headers(window, v2)
            for i in range(v2.shape[0]):
                p = int(v2[i])
                length = int(headers[i, K.H_LENGTH]) + 12
                absolute = pos + p

                def read_entry(absolute: int = absolute, length: int = length) -> bytes:
                    return source.read(absolute, length).tobytes()

                yield absolute, headers[i], read_entry
            if outcome == K.FRAMING_END:
                pos += stop
                want = options.read_chunk_bytes
            elif outcome == K.FRAMING_PARTIAL and stop > 0:
                pos += stop
                want = options.read_chunk_bytes
            elif outcome == K.FRAMING_PARTIAL and pos + window.shape[0] < segment.size:
                size = int.from_bytes(window[8:12].tobytes(), "big", signed=True)
                if size < 14 or pos + 12 + size > segment.size:
                    return
                want = 12 + size
            else:
                return
    finally:
        source.close()
