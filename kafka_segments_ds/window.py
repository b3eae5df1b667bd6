"""Decode one window of ``.log`` bytes (complete entries) into one Arrow record batch.

The window decoder never applies a damage policy: it decodes entries in file order up to the
first malformed one and reports that one as a :class:`Fault`; ``reader.py`` decides whether to
raise or to resynchronise after it.

Row arrays address keys and values in one space: positions below ``len(window)`` are in the
window itself, positions above it are in the window's arena of decompressed data (and of
legacy messages, which the reference decoder hands over as bytes).
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from kafka_segments_ds.errors import (
    ChecksumError,
    CorruptSegmentError,
    UnsupportedFormatError,
)
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.compression import CODEC_LABELS, decompress
from kafka_segments_ds.records.crc_kernels import batch_crcs_serial
from kafka_segments_ds.records.legacy import (
    LegacyMessage,
    decode_legacy_message,
    expand_wrapper,
)
from kafka_segments_ds.schema import BY_NAME, HEADER_TYPE, TIMESTAMP_TYPE, arrow_schema

V2_OVERHEAD = 61
_MAX_MS = (2**63 - 1) // 1000
GATHER_LIMIT = 1 << 30  # key/value bytes per Arrow array chunk (binary offsets are int32)
_ROW_FIELDS = ("offset", "ts", "ts_type", "kpos", "klen", "vpos", "vlen", "hpos", "hcount")
_ENTRY_FIELDS = (
    "position",
    "magic",
    "codec",
    "base_offset",
    "last_offset",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "attributes",
    "leader_epoch",
)


@dataclass(frozen=True, slots=True)
class Fault:
    """The first malformed entry of a window: its file position and (if known) offset."""

    position: int
    offset: int | None
    error: CorruptSegmentError


@dataclass(frozen=True, slots=True)
class TaskBounds:
    """What a window decoder needs to know of its ScanTask."""

    topic: str | None
    partition: int | None
    segment: str
    start_offset: int | None
    end_offset: int | None
    min_max_timestamp: int | None
    aborted: tuple[tuple[int, int, int], ...]
    segment_base: int = 0  # offsets in the segment are >= its base offset ...
    next_base: int | None = None  # ... and below the next segment's
    include_control: bool = False  # control records as rows (offset lookups count them)


@dataclass(frozen=True, slots=True, eq=False)
class Predecoded:
    """Record-kernel output for a window of uncompressed magic-2 batches, computed ahead."""

    positions: np.ndarray
    status: np.ndarray
    errpos: np.ndarray
    rows: dict[str, np.ndarray]
    row0: np.ndarray


def predecode(
    window: np.ndarray, positions: np.ndarray, magics: np.ndarray, pool: dict[str, np.ndarray]
) -> Predecoded | None:
    """Run the record kernel over a window ahead of time (the reader's read-ahead thread).

    Only for the plain case: every entry an uncompressed magic-2 batch with a plausible
    header. Anything else returns None and is decoded by :meth:`WindowDecoder.decode`, which
    also makes every check and decides what to keep. ``pool`` holds reusable row arrays.
    """
    n = positions.shape[0]
    if n == 0 or not (magics == 2).all():
        return None
    h = K.parse_v2_headers(window, positions)
    counts = h[:, K.H_COUNT]
    lengths = h[:, K.H_LENGTH] + 12
    if (
        (h[:, K.H_ATTRIBUTES] & 0x07).any()
        or (counts < 0).any()
        or (h[:, K.H_LOD] < 0).any()
        or (counts > (lengths - V2_OVERHEAD) // 7).any()
    ):
        return None
    row0 = np.zeros(n, np.int64)
    np.cumsum(counts[:-1], out=row0[1:])
    total = int(row0[-1] + counts[-1])
    rows = {}
    for name in _ROW_FIELDS:
        buf = pool.get(name)
        if buf is None or buf.shape[0] < total:
            buf = pool[name] = np.empty(max(total, 1024) + (total >> 2), np.int64)
        rows[name] = buf[:total]
    status = np.zeros(n, np.int32)
    errpos = np.zeros(n, np.int64)
    start = positions + V2_OVERHEAD
    K.use_threads(0)  # this runs beside the main thread: keep to one core
    K.decode_v2_records(
        window,
        np.empty(0, np.uint8),
        start,
        positions + lengths,
        counts,
        row0,
        h[:, K.H_BASE_OFFSET],
        h[:, K.H_BASE_TS],
        h[:, K.H_MAX_TS],
        ((h[:, K.H_ATTRIBUTES] & 0x08) != 0).astype(np.int8),
        h[:, K.H_LOD],
        rows["offset"],
        rows["ts"],
        rows["ts_type"],
        rows["kpos"],
        rows["klen"],
        rows["vpos"],
        rows["vlen"],
        rows["hpos"],
        rows["hcount"],
        status,
        errpos,
    )
    return Predecoded(positions, status, errpos, rows, row0)


class _Parts:
    """Row and entry arrays of the runs of one window, plus its arena."""

    def __init__(self, window_size: int) -> None:
        self.rows: list[dict[str, np.ndarray]] = []
        self.entries: list[dict[str, np.ndarray]] = []
        self.entry_count = 0
        self.arena: list[bytes] = []
        self.window_size = window_size
        self.arena_base = window_size  # address of the next arena byte
        self._joined: np.ndarray | None = np.empty(0, np.uint8)

    def to_arena(self, blob: bytes) -> int:
        address = self.arena_base
        self.arena.append(blob)
        self.arena_base += len(blob)
        self._joined = None
        return address

    def to_arena_many(self, blobs: list[bytes]) -> None:
        """Append blobs in order (their addresses follow on from ``arena_base``)."""
        if blobs:
            joined = blobs[0] if len(blobs) == 1 else b"".join(blobs)
            self.to_arena(joined)

    def arena_array(self) -> np.ndarray:
        """The arena as one array (joined once per change)."""
        if self._joined is None:
            self._joined = np.frombuffer(
                self.arena[0] if len(self.arena) == 1 else b"".join(self.arena), np.uint8
            )
        return self._joined


def _merged(fields: tuple[str, ...], parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The runs' arrays as one set (no copy for the usual single run)."""
    if len(parts) == 1:
        return parts[0]
    return {f: np.concatenate([p[f] for p in parts]) for f in fields}


class WindowDecoder:
    """Decodes windows of one task; keeps scratch buffers between windows."""

    def __init__(self, options: ReadOptions, bounds: TaskBounds, columns: tuple[str, ...]):
        self.options = options
        self.bounds = bounds
        self.columns = columns
        self.schema = arrow_schema(columns)
        # batch-level metadata columns need each row's entry ("segment" is per task)
        self.want_entry = any(BY_NAME[c].group == "metadata" and c != "segment" for c in columns)
        self.reached_end = False  # an entry at or past end_offset was seen
        # offsets strictly increase through a log: the last offset of the last good entry
        self.last_offset = bounds.segment_base - 1
        self._constants: dict[str, pa.Array] = {}  # topic/partition/segment columns

    # -- entry point ----------------------------------------------------------------------

    def decode(
        self,
        window: np.ndarray,
        base: int,
        positions: np.ndarray,
        magics: np.ndarray,
        checksums: tuple[np.ndarray, np.ndarray] | None = None,
        predecoded: Predecoded | None = None,
    ) -> tuple[pa.RecordBatch | None, Fault | None]:
        """Decode the complete entries at ``positions`` of ``window`` (file position ``base``).

        ``checksums`` may carry CRC-32C values already computed for magic-2 batches (by
        position), and ``predecoded`` the record kernel's output, as the reader's read-ahead
        computes them.
        """
        parts = _Parts(window.shape[0])
        fault: Fault | None = None
        n = positions.shape[0]
        idx = 0
        if magics.shape[0] and (magics == 2).all():
            run_bounds = [(0, n, True)]
        else:
            run_bounds = []
            while idx < n:
                end = idx
                is_v2 = magics[idx] == 2
                while end < n and (magics[end] == 2) == is_v2:
                    end += 1
                run_bounds.append((idx, end, bool(is_v2)))
                idx = end
        scratch_free = len(run_bounds) == 1
        outlier = int(
            K.first_offset_outlier(
                K.entry_last_offsets(window, positions, magics), self.last_offset
            )
        )
        if outlier >= 0:
            # decode up to the outlier, then report it (the reader resumes after it)
            p = int(positions[outlier])
            offset = int.from_bytes(window[p : p + 8].tobytes(), "big", signed=True)
            outlier_fault = Fault(
                base + p,
                offset,
                CorruptSegmentError(
                    "offset out of order with the entries around it (damaged offset field)"
                ),
            )
            run_bounds = [(s, min(e, outlier), v) for s, e, v in run_bounds if s < outlier]
        for start, end, is_v2 in run_bounds:
            run = positions[start:end]
            if is_v2:
                fault = self._v2_run(window, base, run, parts, scratch_free, checksums, predecoded)
            else:
                fault = self._legacy_run(window, base, run, parts)
            if fault is not None or self.reached_end:
                break
        if fault is None and not self.reached_end and outlier >= 0:
            fault = outlier_fault
        if not parts.rows:
            return None, fault
        rows = _merged(_ROW_FIELDS + (("entry",) if self.want_entry else ()), parts.rows)
        entries = _merged(_ENTRY_FIELDS, parts.entries) if self.want_entry else {}
        if rows["offset"].shape[0] == 0:
            return None, fault
        return self._to_arrow(window, parts.arena_array(), rows, entries), fault

    # -- magic 2 --------------------------------------------------------------------------

    def _v2_run(
        self,
        window: np.ndarray,
        base: int,
        positions: np.ndarray,
        parts: _Parts,
        scratch_free: bool,
        checksums: tuple[np.ndarray, np.ndarray] | None,
        predecoded: Predecoded | None = None,
    ) -> Fault | None:
        opts = self.options
        b = self.bounds
        h = K.parse_v2_headers(window, positions)
        base_offsets = h[:, K.H_BASE_OFFSET]
        last_offsets = base_offsets + h[:, K.H_LOD]
        order_fault = self._check_order(base, positions, base_offsets, last_offsets)
        if order_fault is not None:
            cut = int(np.searchsorted(positions, order_fault.position - base))
            positions, h = positions[:cut], h[:cut]
            base_offsets, last_offsets = base_offsets[:cut], last_offsets[:cut]
        all_positions, all_last = positions, last_offsets
        # offsets increase through a log: the first batch at/after end_offset ends the task
        if b.end_offset is not None:
            beyond = np.flatnonzero(base_offsets >= b.end_offset)
            if beyond.shape[0]:
                self.reached_end = True
                cut = int(beyond[0])
                positions, h = positions[:cut], h[:cut]
                base_offsets, last_offsets = base_offsets[:cut], last_offsets[:cut]
        keep = None
        if b.start_offset is not None:
            keep = last_offsets >= b.start_offset
        if b.min_max_timestamp is not None:
            late = h[:, K.H_MAX_TS] >= b.min_max_timestamp
            keep = late if keep is None else keep & late
        if keep is not None and not keep.all():
            positions, h = positions[keep], h[keep]
            base_offsets, last_offsets = base_offsets[keep], last_offsets[keep]
        n = positions.shape[0]
        if n == 0:
            return order_fault
        lengths = h[:, K.H_LENGTH] + 12
        ends = positions + lengths
        attrs = h[:, K.H_ATTRIBUTES]
        codecs = attrs & 0x07
        counts = h[:, K.H_COUNT]
        # `cut` = index of the first bad batch. Checksums first: a damaged header field is
        # reported as the checksum mismatch it is, and nothing damaged gets decompressed.
        cut = n
        errors: dict[int, CorruptSegmentError] = {}
        if opts.verify_checksums and cut:
            actual = _lookup_checksums(checksums, positions[:cut])
            if actual is None:
                actual = batch_checksums(window, positions[:cut], ends[:cut])
            stored = h[:cut, K.H_CRC]
            bad = np.flatnonzero(actual != stored)
            if bad.shape[0]:
                i = int(bad[0])
                cut = i
                errors[i] = ChecksumError(
                    f"CRC-32C mismatch: stored {int(stored[i]):#010x}, computed "
                    f"{int(actual[i]):#010x}"
                )
        # structural checks, vectorised
        for mask, make in (
            (counts < 0, lambda i: CorruptSegmentError(f"negative record count {int(counts[i])}")),
            (
                h[:, K.H_LOD] < 0,
                lambda i: CorruptSegmentError(f"negative lastOffsetDelta {int(h[i, K.H_LOD])}"),
            ),
            (
                codecs > 4,
                lambda i: UnsupportedFormatError(f"unknown compression codec id {int(codecs[i])}"),
            ),
            (
                (codecs == 0) & (counts > (lengths - V2_OVERHEAD) // 7),
                lambda i: CorruptSegmentError(
                    f"record count {int(counts[i])} cannot fit in {int(lengths[i]) - 61} bytes"
                ),
            ),
        ):
            bad = np.flatnonzero(mask[:cut])
            if bad.shape[0]:
                cut = int(bad[0])
                errors[cut] = make(cut)
        deep = opts.deep
        src_start = positions + V2_OVERHEAD
        src_end = ends.copy()
        if deep and cut:
            compressed = np.flatnonzero(codecs[:cut] != 0)
            if compressed.shape[0]:
                # one Python step per compressed batch (the codec call): keep it to plain ints
                mv = window.data
                run_arena: list[bytes] = []
                address = parts.arena_base
                done: list[int] = []
                starts, stops = [], []
                limit = opts.max_decompressed_bytes
                for i, codec, begin, end, count in zip(
                    compressed.tolist(),
                    codecs[compressed].tolist(),
                    src_start[compressed].tolist(),
                    ends[compressed].tolist(),
                    counts[compressed].tolist(),
                    strict=True,
                ):
                    try:
                        data = decompress(codec, mv[begin:end], magic=2, max_bytes=limit)
                    except CorruptSegmentError as err:
                        cut = i
                        errors[i] = err
                        break
                    if count > len(data) // 7:
                        cut = i
                        errors[i] = CorruptSegmentError(
                            f"record count {count} cannot fit in {len(data)} decompressed bytes"
                        )
                        break
                    done.append(i)
                    starts.append(address)
                    address += len(data)
                    stops.append(address)
                    run_arena.append(data)
                if done:
                    src_start[done] = starts
                    src_end[done] = stops
                    parts.to_arena_many(run_arena)
        decoded = None
        if deep and cut:
            decoded = _reuse(predecoded, positions, cut)
            if decoded is None:
                decoded = self._decode_records(
                    window, parts, h, src_start, src_end, cut, scratch_free
                )
        fault_error: CorruptSegmentError | None = None
        if decoded is not None:
            status, errpos = decoded[0], decoded[1]
            failed = np.flatnonzero(status[:cut])
            if failed.shape[0]:
                cut = int(failed[0])
                where = "decompressed records" if src_start[cut] >= window.shape[0] else "records"
                fault_error = CorruptSegmentError(
                    f"{K.RECORD_ERRORS[int(status[cut])]} (byte "
                    f"{int(errpos[cut] - src_start[cut])} of the batch's {where})"
                )
        if fault_error is None and cut < n:
            fault_error = errors[cut]
        if cut:
            if decoded is not None:
                self._keep_rows(parts, h, cut, decoded[2], decoded[3])
            elif not deep:
                self._v2_shallow(positions, h, cut, parts)
            self._add_entries(parts, base + positions[:cut], h[:cut])
        if fault_error is None:
            return order_fault
        # the order check ran ahead: the offsets seen so far end before this fault
        prior = np.flatnonzero(all_positions < positions[cut])
        self.last_offset = int(all_last[prior[-1]]) if prior.shape[0] else self.last_offset_in
        return Fault(base + int(positions[cut]), int(base_offsets[cut]), fault_error)

    def _check_order(
        self, base: int, positions: np.ndarray, base_offsets: np.ndarray, last_offsets: np.ndarray
    ) -> Fault | None:
        """Offsets must increase from entry to entry and stay inside the segment's range.

        Advances ``last_offset`` over the good entries; returns the first bad one as a fault.
        """
        b = self.bounds
        previous = np.empty_like(last_offsets)
        previous[0] = self.last_offset
        previous[1:] = last_offsets[:-1]
        bad = (base_offsets <= previous) | (last_offsets < base_offsets)  # int64 overflow
        if b.next_base is not None:
            bad |= last_offsets >= b.next_base
        found = np.flatnonzero(bad)
        self.last_offset_in = self.last_offset
        if found.shape[0] == 0:
            self.last_offset = int(last_offsets[-1])
            return None
        i = int(found[0])
        if i:
            self.last_offset = int(last_offsets[i - 1])
        first, last, prev = int(base_offsets[i]), int(last_offsets[i]), int(previous[i])
        if last < first:
            reason = f"lastOffsetDelta takes the offsets of batch {first} below it or past 2^63 - 1"
        elif first <= prev:
            reason = f"offsets not increasing: batch offsets {first}..{last} after offset {prev}"
        else:
            reason = (
                f"batch offsets {first}..{last} reach the next segment's base offset {b.next_base}"
            )
        return Fault(base + int(positions[i]), first, CorruptSegmentError(reason))

    def _decode_records(
        self,
        window: np.ndarray,
        parts: _Parts,
        h: np.ndarray,
        src_start: np.ndarray,
        src_end: np.ndarray,
        cut: int,
        scratch_free: bool,
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """Run the record kernel over batches [0, cut): (status, errpos, rows, row0)."""
        counts = h[:cut, K.H_COUNT]
        row0 = np.zeros(cut, np.int64)
        np.cumsum(counts[:-1], out=row0[1:])
        total = int(row0[-1] + counts[-1])
        get = _scratch if scratch_free else (lambda _n, k: np.empty(k, np.int64))
        r = {f: get(f, total) for f in _ROW_FIELDS}
        status = np.zeros(cut, np.int32)
        errpos = np.zeros(cut, np.int64)
        log_append = ((h[:cut, K.H_ATTRIBUTES] & 0x08) != 0).astype(np.int8)
        K.use_threads(int((src_end[:cut] - src_start[:cut]).sum()))
        K.decode_v2_records(
            window,
            parts.arena_array(),
            src_start[:cut],
            src_end[:cut],
            counts,
            row0,
            h[:cut, K.H_BASE_OFFSET],
            h[:cut, K.H_BASE_TS],
            h[:cut, K.H_MAX_TS],
            log_append,
            h[:cut, K.H_LOD],
            r["offset"],
            r["ts"],
            r["ts_type"],
            r["kpos"],
            r["klen"],
            r["vpos"],
            r["vlen"],
            r["hpos"],
            r["hcount"],
            status,
            errpos,
        )
        return status, errpos, r, row0

    def _keep_rows(
        self, parts: _Parts, h: np.ndarray, cut: int, r: dict[str, np.ndarray], row0: np.ndarray
    ) -> None:
        """Rows of the good batches [0, cut), filtered, appended to the window's parts."""
        counts = h[:cut, K.H_COUNT]
        total = int(row0[cut - 1] + counts[-1])
        r = {f: a[:total] for f, a in r.items()}
        keep = self._row_filter(r["offset"], h[:cut], counts)
        if self.want_entry:
            r["entry"] = np.repeat(
                np.arange(parts.entry_count, parts.entry_count + cut, dtype=np.int64), counts
            )
        if keep is not None:
            r = {f: a[keep] for f, a in r.items()}
        # scratch arrays are reused by the next window: the Arrow build copies what it keeps
        parts.rows.append(r)

    def _row_filter(
        self, offsets: np.ndarray, h: np.ndarray, counts: np.ndarray
    ) -> np.ndarray | None:
        """Rows to keep (None = all): no control records, offset range, no aborted data."""
        b = self.bounds
        attrs = h[:, K.H_ATTRIBUTES]
        keep = None
        control = (attrs & 0x20) != 0
        if control.any() and not b.include_control:
            keep = ~np.repeat(control, counts)
        if b.start_offset is not None and offsets.shape[0] and offsets[0] < b.start_offset:
            low = offsets >= b.start_offset
            keep = low if keep is None else keep & low
        if b.end_offset is not None and offsets.shape[0] and offsets.max() >= b.end_offset:
            high = offsets < b.end_offset
            keep = high if keep is None else keep & high
        if b.aborted:
            txn = (attrs & 0x10) != 0
            if txn.any():
                pid = np.repeat(h[:, K.H_PRODUCER_ID], counts)
                hit = np.repeat(txn, counts) & aborted_mask(pid, offsets, b.aborted)
                keep = ~hit if keep is None else keep & ~hit
        return keep

    def _v2_shallow(self, positions: np.ndarray, h: np.ndarray, cut: int, parts: _Parts) -> None:
        h = h[:cut]
        attrs = h[:, K.H_ATTRIBUTES]
        r = {
            "offset": h[:, K.H_BASE_OFFSET] + h[:, K.H_LOD],
            "ts": h[:, K.H_MAX_TS].copy(),
            "ts_type": ((attrs & 0x08) != 0).astype(np.int32),
            "kpos": np.zeros(cut, np.int64),
            "klen": np.full(cut, -1, np.int64),
            "vpos": positions[:cut] + V2_OVERHEAD,
            "vlen": h[:, K.H_LENGTH] + 12 - V2_OVERHEAD,
            "hpos": np.zeros(cut, np.int64),
            "hcount": np.zeros(cut, np.int64),
        }
        if self.want_entry:
            r["entry"] = np.arange(parts.entry_count, parts.entry_count + cut, dtype=np.int64)
        b = self.bounds
        if self.options.read_committed:
            # what a read_committed consumer sees: no markers, no aborted batches
            keep = (attrs & 0x20) == 0
            if b.aborted:
                txn = (attrs & 0x10) != 0
                keep &= ~(
                    txn & aborted_mask(h[:, K.H_PRODUCER_ID], h[:, K.H_BASE_OFFSET], b.aborted)
                )
            r = {f: a[keep] for f, a in r.items()}
        parts.rows.append(r)

    def _add_entries(self, parts: _Parts, positions: np.ndarray, h: np.ndarray) -> None:
        n = positions.shape[0]
        if self.want_entry:
            parts.entries.append(
                {
                    "position": positions,
                    "magic": np.full(n, 2, np.int64),
                    "codec": h[:, K.H_ATTRIBUTES] & 0x07,
                    "base_offset": h[:, K.H_BASE_OFFSET],
                    "last_offset": h[:, K.H_BASE_OFFSET] + h[:, K.H_LOD],
                    "producer_id": h[:, K.H_PRODUCER_ID],
                    "producer_epoch": h[:, K.H_PRODUCER_EPOCH],
                    "base_sequence": h[:, K.H_BASE_SEQ],
                    "attributes": h[:, K.H_ATTRIBUTES],
                    "leader_epoch": h[:, K.H_EPOCH],
                }
            )
        parts.entry_count += n

    # -- magic 0 / 1 ----------------------------------------------------------------------

    def _legacy_run(
        self, window: np.ndarray, base: int, positions: np.ndarray, parts: _Parts
    ) -> Fault | None:
        opts = self.options
        b = self.bounds
        mv = window.data
        rows: dict[str, list[int]] = {f: [] for f in _ROW_FIELDS if f not in ("hpos", "hcount")}
        row_entry: list[int] = []
        entries: dict[str, list[int]] = {f: [] for f in _ENTRY_FIELDS}
        fault = None
        for p in positions.tolist():
            try:
                message = decode_legacy_message(mv, p, verify_checksum=opts.verify_checksums)
                compressed = message.compression != 0  # raises for zstd or ids 5-7
            except CorruptSegmentError as err:
                offset = int.from_bytes(window[p : p + 8].tobytes(), "big", signed=True)
                # the decoder's position is the entry's own (window-relative) start
                fault = Fault(base + p, offset, type(err)(err.reason))
                break
            inner: list[LegacyMessage] = []
            try:
                if compressed and (opts.deep or self.want_entry):
                    inner = expand_wrapper(
                        message,
                        verify_checksum=opts.verify_checksums,
                        max_bytes=opts.max_decompressed_bytes,
                    )
            except CorruptSegmentError as err:
                where = (
                    ""
                    if err.position is None
                    else f" (byte {err.position} of the decompressed wrapper payload)"
                )
                fault = Fault(base + p, message.offset, type(err)(err.reason + where))
                break
            first = inner[0].offset if inner else message.offset
            # a magic-1 wrapper with offset 0 (old librdkafka) keeps its relative offsets
            last = max(message.offset, inner[-1].offset) if inner else message.offset
            problem = None
            if first <= self.last_offset:
                problem = f"offsets not increasing: offset {first} after offset {self.last_offset}"
            elif any(a.offset >= z.offset for a, z in itertools.pairwise(inner)):
                problem = "inner message offsets of a compressed wrapper are not increasing"
            elif b.next_base is not None and last >= b.next_base:
                problem = f"offset {last} reaches the next segment's base offset {b.next_base}"
            if problem is not None:
                fault = Fault(base + p, message.offset, CorruptSegmentError(problem))
                break
            self.last_offset = last
            if b.start_offset is not None and message.offset < b.start_offset:
                continue  # the offset field is the last offset, also for wrappers
            if b.end_offset is not None and first >= b.end_offset:
                self.reached_end = True
                break
            entry = parts.entry_count + len(entries["position"])
            for name, value in zip(
                _ENTRY_FIELDS,
                (
                    base + p,
                    message.magic,
                    int(message.compression),
                    first,
                    message.offset,
                    -1,
                    -1,
                    -1,
                    message.attributes,
                    -1,
                ),
                strict=True,
            ):
                entries[name].append(value)
            for m in inner if (compressed and opts.deep) else [message]:
                if opts.deep and (
                    (b.start_offset is not None and m.offset < b.start_offset)
                    or (b.end_offset is not None and m.offset >= b.end_offset)
                ):
                    continue
                for blob, pos_name, len_name in (
                    (m.key, "kpos", "klen"),
                    (m.value, "vpos", "vlen"),
                ):
                    if blob is None:
                        rows[pos_name].append(0)
                        rows[len_name].append(-1)
                    else:
                        rows[pos_name].append(parts.to_arena(blob))
                        rows[len_name].append(len(blob))
                rows["offset"].append(m.offset)
                rows["ts"].append(m.timestamp)
                rows["ts_type"].append(m.timestamp_type)
                row_entry.append(entry)
        count = len(entries["position"])
        if count:
            r = {f: np.array(v, np.int64) for f, v in rows.items()}
            r["ts_type"] = r["ts_type"].astype(np.int32)
            r["hpos"] = np.zeros(len(row_entry), np.int64)
            r["hcount"] = np.zeros(len(row_entry), np.int64)
            if self.want_entry:
                r["entry"] = np.array(row_entry, np.int64)
                parts.entries.append({f: np.array(v, np.int64) for f, v in entries.items()})
            parts.rows.append(r)
            parts.entry_count += count
        return fault

    # -- Arrow ----------------------------------------------------------------------------

    def _to_arrow(
        self,
        window: np.ndarray,
        arena: np.ndarray,
        r: dict[str, np.ndarray],
        entries: dict[str, np.ndarray],
    ) -> pa.RecordBatch:
        n = r["offset"].shape[0]
        b = self.bounds
        out = []
        for name in self.columns:
            if name == "key":
                out.append(binary_column(window, arena, r["kpos"], r["klen"]))
            elif name == "value":
                out.append(binary_column(window, arena, r["vpos"], r["vlen"]))
            elif name == "topic":
                out.append(self._constant("topic", b.topic, pa.string(), n))
            elif name == "partition":
                out.append(self._constant("partition", b.partition, pa.int32(), n))
            elif name == "offset":
                out.append(_fixed_width(r["offset"], pa.int64()))
            elif name == "timestamp":
                out.append(timestamp_column(r["ts"]))
            elif name == "timestampType":
                out.append(_fixed_width(r["ts_type"], pa.int32()))
            elif name == "headers":
                out.append(headers_column(window, arena, r["hpos"], r["hcount"]))
            elif name == "segment":
                out.append(self._constant("segment", b.segment, pa.string(), n))
            else:
                out.append(self._metadata(name, r["entry"], entries))
        return pa.RecordBatch.from_arrays(out, schema=self.schema)

    def _constant(self, name: str, value: object, arrow_type: pa.DataType, n: int) -> pa.Array:
        """A column holding one value: a slice of an array built once per task."""
        cached = self._constants.get(name)
        if cached is None or len(cached) < n:
            cached = pa.repeat(pa.scalar(value, arrow_type), max(n, 4096))
            self._constants[name] = cached
        return cached.slice(0, n)

    def _metadata(self, name: str, ent: np.ndarray, e: dict[str, np.ndarray]) -> pa.Array:
        if name == "compression":
            return pa.DictionaryArray.from_arrays(
                pa.array(e["codec"][ent].astype(np.int32)), pa.array(CODEC_LABELS)
            ).cast(pa.string())
        if name in ("isTransactional", "isControl"):
            bit = 0x10 if name == "isTransactional" else 0x20
            flags = (e["magic"][ent] == 2) & ((e["attributes"][ent] & bit) != 0)
            return pa.array(flags, pa.bool_())
        source, arrow_type = {
            "magic": ("magic", pa.int8()),
            "batchBaseOffset": ("base_offset", pa.int64()),
            "batchLastOffset": ("last_offset", pa.int64()),
            "producerId": ("producer_id", pa.int64()),
            "producerEpoch": ("producer_epoch", pa.int16()),
            "baseSequence": ("base_sequence", pa.int32()),
            "leaderEpoch": ("leader_epoch", pa.int32()),
            "position": ("position", pa.int64()),
        }[name]
        return pa.array(e[source][ent].astype(arrow_type.to_pandas_dtype()), arrow_type)


def aborted_mask(
    pid: np.ndarray, offsets: np.ndarray, aborted: tuple[tuple[int, int, int], ...]
) -> np.ndarray:
    """True where (producer, offset) lies in an aborted transaction's [first, last] span."""
    spans = np.array(aborted, np.int64).reshape(-1, 3)
    out = np.zeros(offsets.shape[0], bool)
    for producer in np.unique(pid).tolist():
        mine = spans[spans[:, 0] == producer]
        if mine.shape[0] == 0:
            continue
        mine = mine[np.argsort(mine[:, 1], kind="stable")]
        sel = pid == producer
        off = offsets[sel]
        k = np.searchsorted(mine[:, 1], off, side="right") - 1
        out[sel] = (k >= 0) & (off <= mine[np.maximum(k, 0), 2])
    return out


_SCRATCH = threading.local()


def _reuse(
    predecoded: Predecoded | None, positions: np.ndarray, cut: int
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray] | None:
    """The read-ahead's kernel output for batches [0, cut), if it decoded exactly these."""
    if predecoded is None:
        return None
    n = positions.shape[0]
    if n > predecoded.positions.shape[0] or not (predecoded.positions[:n] == positions).all():
        return None
    return (
        predecoded.status[:cut],
        predecoded.errpos[:cut],
        predecoded.rows,
        predecoded.row0[:cut],
    )


def _lookup_checksums(
    checksums: tuple[np.ndarray, np.ndarray] | None, positions: np.ndarray
) -> np.ndarray | None:
    """Precomputed CRC-32C of the batches at ``positions``, if all of them were computed."""
    if checksums is None:
        return None
    known, values = checksums
    at = np.searchsorted(known, positions)
    if at.shape[0] and (at[-1] >= known.shape[0] or not (known[at] == positions).all()):
        return None
    return values[at]


def batch_checksums(window: np.ndarray, positions: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC-32C of each batch (bytes [21, end) of its entry)."""
    out = np.empty(positions.shape[0], np.int64)
    batch_crcs_serial(window, positions + 21, ends, out)
    return out


def _scratch(name: str, n: int) -> np.ndarray:
    """A reusable int64 array of at least ``n`` (per thread; contents die with the window)."""
    pool = _SCRATCH.__dict__.setdefault("pool", {})
    buf = pool.get(name)
    if buf is None or buf.shape[0] < n:
        buf = np.empty(max(n, 1024) + (n >> 2), np.int64)
        pool[name] = buf
    return buf[:n]


def _allocate(n: int, dtype: type) -> tuple[pa.Buffer, np.ndarray]:
    """An output buffer from Arrow's pool (which reuses freed memory) and a numpy view of it."""
    buf = pa.allocate_buffer(n * np.dtype(dtype).itemsize)
    return buf, np.frombuffer(buf, dtype, n)


def _fixed_width(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    buf, view = _allocate(values.shape[0], arrow_type.to_pandas_dtype())
    np.copyto(view, values, casting="unsafe")
    return pa.Array.from_buffers(arrow_type, values.shape[0], [None, buf])


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def binary_column(
    window: np.ndarray,
    arena: np.ndarray,
    pos: np.ndarray,
    length: np.ndarray,
    arrow_type: pa.DataType | None = None,
) -> pa.Array:
    """Gather ``[pos, pos + length)`` slices (length -1 = null) into a binary/string array."""
    arrow_type = arrow_type or pa.binary()
    n = pos.shape[0]
    bounds = [0, n]
    if (
        window.shape[0] + arena.shape[0] > GATHER_LIMIT
        and int(np.maximum(length, 0).sum()) > GATHER_LIMIT
    ):
        # keep the int32 offsets valid: cut into pieces
        cum = np.cumsum(np.maximum(length, 0))
        bounds = [0]
        while bounds[-1] < n:
            done = int(cum[bounds[-1] - 1]) if bounds[-1] else 0
            bounds.append(
                max(int(np.searchsorted(cum, done + GATHER_LIMIT, "right")), bounds[-1] + 1)
            )
    pieces = []
    for lo, hi in itertools.pairwise(bounds):
        offsets_buf, offsets = _allocate(hi - lo + 1, np.int32)
        size = K.binary_offsets(length[lo:hi], offsets)
        data_buf, data = _allocate(size, np.uint8)
        K.use_threads(size)
        if K.gather_into(window, arena, pos[lo:hi], length[lo:hi], offsets, data):
            raise AssertionError("decoded slice outside its buffer")  # a decoder bug, not data
        pieces.append(
            pa.Array.from_buffers(
                arrow_type, hi - lo, [_validity(length[lo:hi] >= 0), offsets_buf, data_buf]
            )
        )
    return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


def timestamp_column(ts_ms: np.ndarray) -> pa.Array:
    """Kafka milliseconds -> Arrow timestamp[us, UTC]; -1 (no timestamp) -> null."""
    valid = ts_ms != -1
    # a millisecond value this far out (garbage, ±292,000 years) has no microsecond form
    out_of_range = (ts_ms > _MAX_MS) | (ts_ms < -_MAX_MS)
    if out_of_range.any():
        valid &= ~out_of_range
        ts_ms = np.where(out_of_range, 0, ts_ms)
    buf, micros = _allocate(ts_ms.shape[0], np.int64)
    np.multiply(ts_ms, 1000, out=micros)
    return pa.Array.from_buffers(TIMESTAMP_TYPE, ts_ms.shape[0], [_validity(valid), buf])


def headers_column(
    window: np.ndarray, arena: np.ndarray, hpos: np.ndarray, hcount: np.ndarray
) -> pa.Array:
    """list<struct<key string, value binary>> from the header sections of the rows."""
    n = hpos.shape[0]
    list_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(hcount, out=list_offsets[1:])
    total = int(list_offsets[-1])
    h_kpos = np.empty(total, np.int64)
    h_klen = np.empty(total, np.int64)
    h_vpos = np.empty(total, np.int64)
    h_vlen = np.empty(total, np.int64)
    K.decode_v2_headers(window, arena, hpos, hcount, h_kpos, h_klen, h_vpos, h_vlen)
    keys = binary_column(window, arena, h_kpos, h_klen, pa.string())
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        # Java decodes header keys with replacement characters; do the same.
        raw = binary_column(window, arena, h_kpos, h_klen)
        keys = pa.array([v.decode("utf-8", errors="replace") for v in raw.to_pylist()], pa.string())
    values = binary_column(window, arena, h_vpos, h_vlen)
    struct = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), struct, type=HEADER_TYPE)
