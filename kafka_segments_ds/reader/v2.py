"""The v2 (magic 2) window decoder: a run of record batches -> row arrays, in stages.

1. :func:`_select_batches` parses the headers, checks that offsets increase and stay inside the
   segment, ends the run at the first batch at/after ``end_offset`` (which ends the task only
   if it is kept: a dropped one does not; in FAILFAST mode it ends it unjudged) and prunes
   batches older than the time bound or (shallow reads) before ``start_offset``, those whose
   checksum matches;
2. :func:`_first_bad_batch` finds the first batch whose checksum or header fields are wrong
   (nothing after it is decoded: the reader's damage policy decides what follows);
3. :func:`_decompress_batches` decompresses compressed batches into the window's arena (or
   :func:`_take_decompressed` takes what the read-ahead thread decompressed);
4. :func:`_decode_records` runs the record kernel;
5. :func:`_keep_rows` / :func:`_shallow_rows` filter rows (control records, offset range,
   aborted transactions) and :func:`_add_entries` records the batches' own fields.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kafka_segments_ds.errors import (
    ChecksumError,
    CorruptSegmentError,
    KafkaSegmentsError,
    UnsupportedFormatError,
)
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.reader.rows import (
    ROW_FIELDS,
    V2_OVERHEAD,
    DecodeState,
    Fault,
    Parts,
)
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.compression import decompress
from kafka_segments_ds.records.crc_kernels import batch_crcs_serial

# (status, errpos, rows, row0) of the record kernel over a run's first batches
Decoded = tuple[np.ndarray, np.ndarray, dict[str, np.ndarray], np.ndarray]


@dataclass(frozen=True, slots=True, eq=False)
class Decompressed:
    """A window's compressed batches, decompressed ahead (by the reader's read-ahead thread)."""

    positions: np.ndarray  # the window's batches, in order
    # their decompressed records, one after another, addressed from len(window) on (a view of
    # the read-ahead slot's reused arena buffer)
    arena: memoryview
    src_start: np.ndarray  # where each batch's records start (in the window or the arena) ...
    src_end: np.ndarray  # ... and end


@dataclass(frozen=True, slots=True, eq=False)
class _Run:
    """The batches of a run left to decode, and what the order check saw before the cuts."""

    positions: np.ndarray
    h: np.ndarray  # parsed headers (kernels.H_* columns)
    base_offsets: np.ndarray
    all_positions: np.ndarray  # positions before the end_offset / pruning cuts ...
    all_last: np.ndarray  # ... and their last offsets
    order_fault: Fault | None
    at_end: bool  # the last batch is the first at/after end_offset: kept, it ends the task


def decode_v2_run(
    state: DecodeState,
    window: np.ndarray,
    base: int,
    positions: np.ndarray,
    parts: Parts,
    scratch_free: bool,
    checksums: tuple[np.ndarray, np.ndarray] | None,
    decompressed: Decompressed | None = None,
) -> Fault | None:
    """Decode the v2 batches at ``positions`` of ``window`` (file position ``base``) into
    ``parts``, up to the first malformed one, which is returned."""
    opts = state.options
    run = _select_batches(state, window, base, positions)
    n = run.positions.shape[0]
    if n == 0:
        return None if state.reached_end else run.order_fault
    h = run.h
    ends = run.positions + h[:, K.H_LENGTH] + 12
    # `cut` = index of the first bad batch
    cut, errors = _first_bad_batch(opts, window, run.positions, h, ends, checksums)
    src_start = run.positions + V2_OVERHEAD
    src_end = ends.copy()
    deep = opts.deep
    decoded = None
    fault_error: CorruptSegmentError | None = None
    if deep and cut:
        ahead = _take_decompressed(decompressed, run.positions, h, parts)
        if ahead is None:
            cut = _decompress_batches(opts, window, h, src_start, src_end, parts, cut, errors)
        else:
            src_start, src_end = ahead
    if deep and cut:
        decoded = _decode_records(window, parts, h, src_start, src_end, cut, scratch_free)
        cut, fault_error = _first_record_fault(window, decoded, src_start, cut)
    if fault_error is None and cut < n:
        fault_error = errors[cut]
    if fault_error is None and run.at_end:
        # the batch at/after end_offset is kept: the task ends before it (its rows are all
        # past the end), and nothing after it is the task's concern, damage neither
        state.reached_end = True
        cut -= 1
    if cut:
        if decoded is not None:
            _keep_rows(state, parts, h, cut, decoded[2], decoded[3])
        elif not deep:
            _shallow_rows(state, run.positions, h, cut, parts)
        _add_entries(state, parts, base + run.positions[:cut], h[:cut])
    if fault_error is None:
        return None if state.reached_end else run.order_fault
    # the order check ran ahead: the offsets seen so far end before this fault
    prior = np.flatnonzero(run.all_positions < run.positions[cut])
    state.last_offset = int(run.all_last[prior[-1]]) if prior.shape[0] else state.last_offset_in
    return Fault(base + int(run.positions[cut]), int(run.base_offsets[cut]), fault_error)


# -- 1. which batches ---------------------------------------------------------------------


def _select_batches(
    state: DecodeState, window: np.ndarray, base: int, positions: np.ndarray
) -> _Run:
    """Headers of the run's batches, cut at the first one out of order (reported as the run's
    ``order_fault``) and after the first at/after ``end_offset``, pruned of batches that cannot
    hold wanted rows (never that one: whether it ends the task depends on its being kept)."""
    b = state.bounds
    h = K.parse_v2_headers(window, positions)
    base_offsets = h[:, K.H_BASE_OFFSET]
    last_offsets = base_offsets + h[:, K.H_LOD]
    order_fault = _check_order(state, base, positions, base_offsets, last_offsets)
    if order_fault is not None:
        cut = int(np.searchsorted(positions, order_fault.position - base))
        positions, h = positions[:cut], h[:cut]
        base_offsets, last_offsets = base_offsets[:cut], last_offsets[:cut]
    all_positions, all_last = positions, last_offsets
    # offsets increase through a log: the first batch at/after end_offset ends the task if the
    # reader keeps it; one it drops (records that do not decode) does not, the batches after
    # it may hold offsets below the end (20260601:94), so the run goes on from there. In
    # FAILFAST mode a dropped batch raises, so no batch after it is returned either way: it
    # ends the task unjudged (damage wholly past the end does not fail the read)
    at_end = False
    if b.end_offset is not None:
        beyond = np.flatnonzero(base_offsets >= b.end_offset)
        if beyond.shape[0]:
            at_end = state.options.drop_malformed
            state.reached_end = not at_end
            cut = int(beyond[0]) + int(at_end)
            positions, h = positions[:cut], h[:cut]
            base_offsets, last_offsets = base_offsets[:cut], last_offsets[:cut]
    keep = None
    if b.start_offset is not None and not state.options.deep:
        # (a deep read decodes batches before the start and drops their rows: a batch whose
        # records do not decode is then dropped as in a read without a start, and its offsets
        # do not move the order check on)
        keep = last_offsets >= b.start_offset
    if b.min_max_timestamp is not None:
        late = h[:, K.H_MAX_TS] >= b.min_max_timestamp
        keep = late if keep is None else keep & late
    if keep is not None and at_end:
        keep[-1] = True
    if keep is not None and not keep.all():
        _keep_from_first_unchecked(keep, window, positions, h)
        positions, h = positions[keep], h[keep]
        base_offsets = base_offsets[keep]
    return _Run(positions, h, base_offsets, all_positions, all_last, order_fault, at_end)


def _keep_from_first_unchecked(
    keep: np.ndarray, window: np.ndarray, positions: np.ndarray, h: np.ndarray
) -> None:
    """Prune nothing from the first batch to prune whose checksum fails (whatever
    ``verifyChecksums`` says): its size field, which framed what follows it, is not proven, so
    it is decoded and judged as in a read without bounds (the damage policy resynchronises
    after it); the rows it and the batches after it hold are still filtered by the bounds."""
    pruned = np.flatnonzero(~keep)
    ends = positions[pruned] + h[pruned, K.H_LENGTH] + 12
    bad = np.flatnonzero(batch_checksums(window, positions[pruned], ends) != h[pruned, K.H_CRC])
    if bad.shape[0]:
        keep[int(pruned[int(bad[0])]) :] = True


def _check_order(
    state: DecodeState,
    base: int,
    positions: np.ndarray,
    base_offsets: np.ndarray,
    last_offsets: np.ndarray,
) -> Fault | None:
    """Offsets must increase from entry to entry and stay inside the segment's range.

    Advances ``last_offset`` over the good entries; returns the first bad one as a fault.
    """
    b = state.bounds
    previous = np.empty_like(last_offsets)
    previous[0] = state.last_offset
    previous[1:] = last_offsets[:-1]
    bad = (base_offsets <= previous) | (last_offsets < base_offsets)  # int64 overflow
    if b.next_base is not None:
        bad |= last_offsets >= b.next_base
    found = np.flatnonzero(bad)
    state.last_offset_in = state.last_offset
    if found.shape[0] == 0:
        state.last_offset = int(last_offsets[-1])
        return None
    i = int(found[0])
    if i:
        state.last_offset = int(last_offsets[i - 1])
    first, last, prev = int(base_offsets[i]), int(last_offsets[i]), int(previous[i])
    if last < first:
        reason = f"lastOffsetDelta takes the offsets of batch {first} below it or past 2^63 - 1"
    elif first <= prev:
        reason = f"offsets not increasing: batch offsets {first}..{last} after offset {prev}"
    else:
        reason = f"batch offsets {first}..{last} reach the next segment's base offset {b.next_base}"
    return Fault(base + int(positions[i]), first, CorruptSegmentError(reason))


# -- 2. checksums and header fields -------------------------------------------------------


def _first_bad_batch(
    opts: ReadOptions,
    window: np.ndarray,
    positions: np.ndarray,
    h: np.ndarray,
    ends: np.ndarray,
    checksums: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[int, dict[int, CorruptSegmentError]]:
    """(index of the first bad batch or the run's length, the error at that index).

    Checksums first: a damaged header field is reported as the checksum mismatch it is, and
    nothing damaged gets decompressed.
    """
    n = positions.shape[0]
    lengths = ends - positions
    codecs = h[:, K.H_ATTRIBUTES] & 0x07
    counts = h[:, K.H_COUNT]
    cut = n
    errors: dict[int, CorruptSegmentError] = {}
    make: Callable[[int], CorruptSegmentError]
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
                f"CRC-32C mismatch: stored {int(stored[i]):#010x}, computed {int(actual[i]):#010x}"
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
    return cut, errors


# -- 3. decompression ---------------------------------------------------------------------


def _decompress_batches(
    opts: ReadOptions,
    window: np.ndarray,
    h: np.ndarray,
    src_start: np.ndarray,
    src_end: np.ndarray,
    parts: Parts,
    cut: int,
    errors: dict[int, CorruptSegmentError],
) -> int:
    """Decompress the compressed batches of [0, cut) into the arena and point their record
    ranges (``src_start``/``src_end``) there; returns the new ``cut`` (a batch that does not
    decompress is bad, its error in ``errors``)."""
    codecs = h[:, K.H_ATTRIBUTES] & 0x07
    compressed = np.flatnonzero(codecs[:cut] != 0)
    if not compressed.shape[0]:
        return cut
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
        src_end[compressed].tolist(),
        h[compressed, K.H_COUNT].tolist(),
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
    return cut


# -- 4. records ---------------------------------------------------------------------------


def _decode_records(
    window: np.ndarray,
    parts: Parts,
    h: np.ndarray,
    src_start: np.ndarray,
    src_end: np.ndarray,
    cut: int,
    scratch_free: bool,
) -> Decoded:
    """Run the record kernel over batches [0, cut): (status, errpos, rows, row0)."""
    counts = h[:cut, K.H_COUNT]
    row0 = np.zeros(cut, np.int64)
    np.cumsum(counts[:-1], out=row0[1:])
    total = int(row0[-1] + counts[-1])
    get = _scratch if scratch_free else (lambda _n, k: np.empty(k, np.int64))
    r = {f: get(f, total) for f in ROW_FIELDS}
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


def _first_record_fault(
    window: np.ndarray, decoded: Decoded, src_start: np.ndarray, cut: int
) -> tuple[int, CorruptSegmentError | None]:
    """The first batch of [0, cut) whose records did not decode, and why (else cut, None)."""
    status, errpos = decoded[0], decoded[1]
    failed = np.flatnonzero(status[:cut])
    if not failed.shape[0]:
        return cut, None
    cut = int(failed[0])
    where = "decompressed records" if src_start[cut] >= window.shape[0] else "records"
    return cut, CorruptSegmentError(
        f"{K.RECORD_ERRORS[int(status[cut])]} (byte "
        f"{int(errpos[cut] - src_start[cut])} of the batch's {where})"
    )


def decompress_ahead(
    window: np.ndarray,
    positions: np.ndarray,
    magics: np.ndarray,
    checksums: tuple[np.ndarray, np.ndarray] | None,
    max_decompressed_bytes: int,
    arena_buffer: Callable[[int], np.ndarray],
    called_off: Callable[[], bool] | None = None,
) -> Decompressed | None:
    """Decompress a window's compressed batches ahead of time (the reader's read-ahead thread:
    the codecs release the GIL), unless ``called_off()`` says before a batch that the reader
    will not take this window (None).

    Only for the undamaged case: every entry a magic-2 batch with a plausible header and,
    given ``checksums`` (the window's computed CRC-32C, when they are verified), a matching
    one; some batches compressed, all decompressing within ``max_decompressed_bytes``.
    Anything else returns None, and :func:`decode_v2_run` decompresses in the foreground; it
    makes every check and decides what to keep either way.

    The record kernel runs on the main thread, after this: reading, framing, checksumming and
    decompressing a window keep the helper thread busy longer than the kernel and the column
    gathers keep the main thread, and with the kernel on the helper's side too the main
    thread waited (on a 2-core machine, ``benchmarks/bench_decode.py``'s logs of 1M records:
    a default-threads read of the plain log took 0.047 s with the kernel on the main thread
    and 0.067 s with it on the helper; of the lz4 log, 0.113 s and 0.126 s).

    ``arena_buffer(n)`` returns ``n`` bytes of a buffer reused from window to window
    to hold the arena. A new one each window is a large block malloc'd on the helper thread:
    glibc serves it from that thread's arena and hands the pages back to the system when it is
    freed, so every window faulted them in again (15,000-50,000 page faults a read of the lz4
    log of ``bench_decode.py``, 0.096 s against 0.069 s with one thread).
    """
    n = positions.shape[0]
    if n == 0 or not (magics == 2).all():
        return None
    h = K.parse_v2_headers(window, positions)
    counts = h[:, K.H_COUNT]
    lengths = h[:, K.H_LENGTH] + 12
    codecs = h[:, K.H_ATTRIBUTES] & 0x07
    if not codecs.any():
        return None
    if (
        (counts < 0).any()
        or (h[:, K.H_LOD] < 0).any()
        or (codecs > 4).any()
        or ((codecs == 0) & (counts > (lengths - V2_OVERHEAD) // 7)).any()
    ):
        return None
    if checksums is not None:
        computed = _lookup_checksums(checksums, positions)
        if computed is None or (computed != h[:, K.H_CRC]).any():
            return None
    start = positions + V2_OVERHEAD
    end = positions + lengths
    compressed = np.flatnonzero(codecs)
    mv = window.data
    blobs = []
    address = window.shape[0]
    for i, codec, begin, stop, count in zip(
        compressed.tolist(),
        codecs[compressed].tolist(),
        start[compressed].tolist(),
        end[compressed].tolist(),
        counts[compressed].tolist(),
        strict=True,
    ):
        if called_off is not None and called_off():
            return None
        try:
            data = decompress(codec, mv[begin:stop], magic=2, max_bytes=max_decompressed_bytes)
        except KafkaSegmentsError:
            return None  # decompressed (and reported) in the foreground
        if count > len(data) // 7:
            return None
        blobs.append(data)
        start[i] = address
        address += len(data)
        end[i] = address
    out = arena_buffer(address - window.shape[0]).data
    at = 0
    for blob in blobs:
        out[at : at + len(blob)] = blob
        at += len(blob)
    return Decompressed(positions, out, start, end)


def _take_decompressed(
    ahead: Decompressed | None, positions: np.ndarray, h: np.ndarray, parts: Parts
) -> tuple[np.ndarray, np.ndarray] | None:
    """The record ranges of the batches at ``positions`` (headers ``h``) from what the
    read-ahead decompressed, its arena now the window's, if it covered exactly these, the
    arena is still empty and every batch's record count fits its records (else None: the
    foreground decompresses, and reports a count that does not fit, before the record kernel
    sizes its row arrays by the counts)."""
    if ahead is None or parts.arena_base != parts.window_size:
        return None
    n = positions.shape[0]
    if n > ahead.positions.shape[0] or not (ahead.positions[:n] == positions).all():
        return None
    start, end = ahead.src_start[:n], ahead.src_end[:n]
    if (h[:n, K.H_COUNT] > (end - start) // 7).any():
        return None
    parts.to_arena(ahead.arena)
    return start, end


# -- 5. rows and entries ------------------------------------------------------------------


def _keep_rows(
    state: DecodeState,
    parts: Parts,
    h: np.ndarray,
    cut: int,
    r: dict[str, np.ndarray],
    row0: np.ndarray,
) -> None:
    """Rows of the good batches [0, cut), filtered, appended to the window's parts."""
    counts = h[:cut, K.H_COUNT]
    total = int(row0[cut - 1] + counts[-1])
    r = {f: a[:total] for f, a in r.items()}
    keep = _row_filter(state, r["offset"], h[:cut], counts)
    if state.want_entry:
        r["entry"] = np.repeat(
            np.arange(parts.entry_count, parts.entry_count + cut, dtype=np.int64), counts
        )
    if keep is not None:
        r = {f: a[keep] for f, a in r.items()}
    # scratch arrays are reused by the next window: the Arrow build copies what it keeps
    parts.rows.append(r)


def _row_filter(
    state: DecodeState, offsets: np.ndarray, h: np.ndarray, counts: np.ndarray
) -> np.ndarray | None:
    """Rows to keep (None = all): no control records, offset range, no aborted data."""
    b = state.bounds
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


def _shallow_rows(
    state: DecodeState, positions: np.ndarray, h: np.ndarray, cut: int, parts: Parts
) -> None:
    """One row per good batch of [0, cut) (iteration=shallow): the batch's value bytes."""
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
    if state.want_entry:
        r["entry"] = np.arange(parts.entry_count, parts.entry_count + cut, dtype=np.int64)
    b = state.bounds
    keep = np.ones(cut, bool)
    if b.start_offset is not None:  # batches kept back from pruning (their checksum failed)
        keep &= r["offset"] >= b.start_offset
    if state.options.read_committed:
        # what a read_committed consumer sees: no markers, no aborted batches
        keep &= (attrs & 0x20) == 0
        if b.aborted:
            txn = (attrs & 0x10) != 0
            keep &= ~(txn & aborted_mask(h[:, K.H_PRODUCER_ID], h[:, K.H_BASE_OFFSET], b.aborted))
    if not keep.all():
        r = {f: a[keep] for f, a in r.items()}
    parts.rows.append(r)


def _add_entries(state: DecodeState, parts: Parts, positions: np.ndarray, h: np.ndarray) -> None:
    """The good batches' own fields (for the metadata columns)."""
    n = positions.shape[0]
    if state.want_entry:
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


def _lookup_checksums(
    checksums: tuple[np.ndarray, np.ndarray] | None, positions: np.ndarray
) -> np.ndarray | None:
    """Precomputed CRC-32C of the batches at ``positions``, if all of them were computed."""
    if checksums is None:
        return None
    known, values = checksums
    if known.shape == positions.shape and (known == positions).all():
        return values  # the usual case, the same batches (no search: it drops the GIL)
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
    pool: dict[str, np.ndarray] = _SCRATCH.__dict__.setdefault("pool", {})
    buf = pool.get(name)
    if buf is None or buf.shape[0] < n:
        buf = np.empty(max(n, 1024) + (n >> 2), np.int64)
        pool[name] = buf
    return buf[:n]
