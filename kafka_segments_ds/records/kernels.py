"""Columnar kernels: entry framing, batch headers, magic-2 records, binary gathers.

These walk buffers of ``.log`` bytes and write positions and values into numpy arrays; Python
never sees a record object on this path. Every length read from the buffer is checked against the
bytes that remain before it is used, and output arrays are sized by the caller from bounds that
the input can hold (a record takes at least 7 bytes, a header at least 2).

The functions run compiled (the Cython extension ``_kernels.pyx``, built at install time); when
it cannot be imported, or ``KAFKA_SEGMENTS_DS_PURE_PYTHON=1`` is set, the pure-Python versions
below run instead: the same contract, slowly (see :mod:`._compiled`). Tests run both.

Error codes returned per batch are translated to messages by :data:`RECORD_ERRORS`.
The readable reference for the same logic is :mod:`kafka_segments_ds.records.v2`.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from kafka_segments_ds.records._compiled import load

PARALLEL_MIN_BYTES = 32 << 20  # below this a kernel runs on the calling thread only


def _threads_from_environment() -> int | None:
    """``KAFKA_SEGMENTS_DS_THREADS``: None if unset, empty or 0 (the default)."""
    raw = os.environ.get("KAFKA_SEGMENTS_DS_THREADS", "").strip()
    try:
        threads = int(raw or 0)
    except ValueError:
        threads = -1
    if threads < 0:
        raise ValueError(
            f"KAFKA_SEGMENTS_DS_THREADS={raw!r}: give a number of threads (0 or unset: as many "
            "as CPUs, or a Spark task's CPUs in a Spark task)"
        )
    return threads or None


_ENV_THREADS = _threads_from_environment()
# Threads a read may use: a read-ahead helper (local files: from 2 threads), and for a large
# job the kernels' pool (the kernels release the GIL, so Python threads run them in parallel)
MAX_THREADS = _ENV_THREADS or os.cpu_count() or 1
_LOCAL = threading.local()


def use_task_cpus(cpus: int) -> None:
    """A Spark task's read: as many threads as the task has CPUs (``spark.task.cpus``, 1 by
    default) unless ``KAFKA_SEGMENTS_DS_THREADS`` says otherwise. Spark runs a task on each of
    its cores; a read-ahead thread in each task competes with the other tasks for them
    (``benchmarks/bench_spark.py --case lz4`` on 2 cores, pyspark 4.1 and 4.3, best of 5
    rounds: 1.19-1.41x the Python-source peer with one thread a task in 8 runs, 1.13-1.20x
    with two in 3)."""
    global MAX_THREADS
    if _ENV_THREADS is None:
        MAX_THREADS = max(1, cpus)


_POOL: list[ThreadPoolExecutor] = []
os.register_at_fork(after_in_child=_POOL.clear)  # a forked child (Spark worker) has no threads


def use_threads(work_bytes: int) -> None:
    """Set the thread count of this thread's next kernel calls for a job of ``work_bytes``.

    Waking threads costs more than small jobs take, and on a busy host far more: below
    :data:`PARALLEL_MIN_BYTES` the calling thread does the work alone.
    """
    _LOCAL.threads = 1 if work_bytes < PARALLEL_MIN_BYTES else MAX_THREADS


def _threads() -> int:
    return getattr(_LOCAL, "threads", 1)


def _pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="ksds-kernel"))
    return _POOL[0]


def _in_parallel(kernel: Callable[..., Any], jobs: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``kernel(*job)`` for each job on the shared pool (the kernels drop the GIL)."""
    pool = _pool()
    return [f.result() for f in [pool.submit(kernel, *job) for job in jobs]]


PREFAULT_MIN_BYTES = 1 << 20  # output buffers from this size up may be prefaulted


def prefault_back_half(data: np.ndarray) -> Callable[[], None] | None:
    """Start faulting in the back half of a new output buffer on the kernels' pool, while the
    caller writes it from the front; returns what to call once the caller is done (it waits for
    the helper, or calls it off if it has not started), or None when nothing was started.

    Only where it pays: a buffer of at least PREFAULT_MIN_BYTES whose memory is not mapped yet
    (a process's first read: Arrow's pool has nothing to reuse, and every page is a fault), with
    threads to spare (not KAFKA_SEGMENTS_DS_THREADS=1, not a one-CPU Spark task, not a job already
    split between threads). The pure-Python path does nothing."""
    return None


# Framing outcomes of hop_entries.
FRAMING_END = 0  # consumed the buffer exactly
FRAMING_PARTIAL = 1  # an entry starts at stop but needs bytes past the buffer
FRAMING_BAD = 2  # size < 14 or magic not 0/1/2 at stop
FRAMING_SHORT_BATCH = 3  # magic 2 with batchLength < 49 at stop

RECORD_ERRORS = {
    1: "varint runs past the end of its record or is too long",
    2: "record length does not fit in the batch",
    3: "record offset delta not increasing or beyond lastOffsetDelta",
    4: "invalid key/value length",
    5: "invalid header count",
    6: "invalid header key length",
    7: "record fields do not fill the record's declared length",
    8: "bytes left over after the declared record count (incorrect declared batch size)",
    9: "invalid header value length",
}

# Column order of parse_v2_headers' output.
H_BASE_OFFSET, H_LENGTH, H_EPOCH, H_CRC, H_ATTRIBUTES, H_LOD = 0, 1, 2, 3, 4, 5
H_BASE_TS, H_MAX_TS, H_PRODUCER_ID, H_PRODUCER_EPOCH, H_BASE_SEQ, H_COUNT = 6, 7, 8, 9, 10, 11
N_HEADER_FIELDS = 12

# --------------------------------------------------------------------------------------------
# Pure-Python kernels (the fallback; the compiled ones replace them at the bottom)
# --------------------------------------------------------------------------------------------


def _bytes(buf: np.ndarray) -> memoryview:
    return np.ascontiguousarray(buf, np.uint8).data.cast("B")


def _i32(b: memoryview, p: int) -> int:
    return int.from_bytes(b[p : p + 4], "big", signed=True)


def _i16(b: memoryview, p: int) -> int:
    return int.from_bytes(b[p : p + 2], "big", signed=True)


def _i64(b: memoryview, p: int) -> int:
    return int.from_bytes(b[p : p + 8], "big", signed=True)


def _unsigned(b: memoryview, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    raw = 0
    for shift in range(0, 7 * max_bytes, 7):
        if pos >= end:
            return 0, -1
        byte = b[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return raw, pos
    return 0, -1


def _py_varint(b: memoryview, pos: int, end: int) -> tuple[int, int]:
    raw, pos = _unsigned(b, pos, end, 5)
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def _py_varlong(b: memoryview, pos: int, end: int) -> tuple[int, int]:
    raw, pos = _unsigned(b, pos, end, 10)
    raw &= 0xFFFFFFFFFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def _py_blob(b: memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """(length or -1, data position, next position); next = -1 bad varint, -2 bad length."""
    length, pos = _py_varint(b, pos, end)
    if pos < 0:
        return 0, 0, -1
    if length < -1:
        return 0, 0, -2
    if length == -1:
        return -1, pos, pos
    if pos + length > end:
        return 0, 0, -2
    return length, pos, pos + length


def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """(value, next position or -1) of the zigzag varint at ``pos`` (for tests)."""
    return _py_varint(_bytes(buf), pos, end)


def _varlong(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """(value, next position or -1) of the zigzag varlong at ``pos`` (for tests)."""
    return _py_varlong(_bytes(buf), pos, end)


def _check_range(buf: np.ndarray, start: int, end: int) -> None:
    if start < 0 or end > buf.shape[0] or start > end:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")


def hop_entries(buf: np.ndarray, start: int, end: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Walk entry framing in ``buf[start:end]``.

    Returns ``(positions, magics, outcome, stop)``: entry start positions and magic bytes of the
    complete, plausibly framed entries, then the FRAMING_* outcome and the position where the
    walk stopped. Entry length = 12 + int32 at position + 8.
    """
    _check_range(buf, start, end)
    b = _bytes(buf)
    positions: list[int] = []
    magics: list[int] = []
    pos = start
    while True:
        if end - pos < 17:
            outcome = FRAMING_END if pos == end else FRAMING_PARTIAL
            break
        size = _i32(b, pos + 8)
        magic = b[pos + 16]
        if size < 14 or magic > 2:
            outcome = FRAMING_BAD
            break
        if magic == 2 and size < 49:
            outcome = FRAMING_SHORT_BATCH
            break
        if pos + 12 + size > end:
            outcome = FRAMING_PARTIAL
            break
        positions.append(pos)
        magics.append(magic)
        pos += 12 + size
    return np.array(positions, np.int64), np.array(magics, np.int8), outcome, pos


def parse_v2_headers(buf: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The 61-byte headers of the magic-2 batches at ``positions`` as an int64 [n, 12] array."""
    b = _bytes(buf)
    out = np.empty((len(positions), N_HEADER_FIELDS), np.int64)
    for i, p in enumerate(np.asarray(positions, np.int64).tolist()):
        if p < 0 or p + 61 > len(b):
            raise ValueError(f"no 61-byte batch header at position {p} of {len(b)} bytes")
        out[i] = (
            _i64(b, p), _i32(b, p + 8), _i32(b, p + 12), _i32(b, p + 17) & 0xFFFFFFFF,
            _i16(b, p + 21), _i32(b, p + 23), _i64(b, p + 27), _i64(b, p + 35), _i64(b, p + 43),
            _i16(b, p + 51), _i32(b, p + 53), _i32(b, p + 57),
        )  # fmt: skip
    return out


def _decode_records(
    b: memoryview, pos: int, end: int, count: int, lod: int
) -> tuple[int, int, list[tuple[int, ...]]]:
    """(status, stop position, rows) of one batch's records section (contract as below)."""
    rows: list[tuple[int, ...]] = []
    previous = -1
    for _ in range(count):
        rstart = pos
        length, pos = _py_varint(b, pos, end)
        if pos < 0:
            return 1, rstart, rows
        rend = pos + length
        if length < 6 or rend > end:
            return 2, rstart, rows
        ts_delta, pos = _py_varlong(b, pos + 1, rend)  # after the attributes byte
        if pos < 0:
            return 1, rstart, rows
        delta, pos = _py_varint(b, pos, rend)
        if pos < 0:
            return 1, rstart, rows
        if delta <= previous or delta > lod:
            return 3, rstart, rows
        previous = delta
        klen, kpos, pos = _py_blob(b, pos, rend)
        if pos < 0:
            return (4 if pos == -2 else 1), rstart, rows
        vlen, vpos, pos = _py_blob(b, pos, rend)
        if pos < 0:
            return (4 if pos == -2 else 1), rstart, rows
        hcount, pos = _py_varint(b, pos, rend)
        if pos < 0:
            return 1, rstart, rows
        if hcount < 0 or hcount > (rend - pos) // 2:
            return 5, rstart, rows
        hpos = pos
        for _h in range(hcount):
            hk, _, pos = _py_blob(b, pos, rend)
            if pos < 0 or hk < 0:
                return 6, rstart, rows
            _, _, pos = _py_blob(b, pos, rend)
            if pos < 0:
                return 9, rstart, rows
        if pos != rend:
            return 7, rstart, rows
        rows.append((delta, ts_delta, kpos, klen, vpos, vlen, hpos, hcount))
    return (8 if pos != end else 0), pos, rows


def decode_v2_records(
    src0: np.ndarray,
    src1: np.ndarray,
    b_start: np.ndarray,
    b_end: np.ndarray,
    b_count: np.ndarray,
    b_row0: np.ndarray,
    b_base_offset: np.ndarray,
    b_base_ts: np.ndarray,
    b_max_ts: np.ndarray,
    b_log_append: np.ndarray,
    b_lod: np.ndarray,
    r_offset: np.ndarray,
    r_ts: np.ndarray,
    r_ts_type: np.ndarray,
    r_kpos: np.ndarray,
    r_klen: np.ndarray,
    r_vpos: np.ndarray,
    r_vlen: np.ndarray,
    r_hpos: np.ndarray,
    r_hcount: np.ndarray,
    b_status: np.ndarray,
    b_errpos: np.ndarray,
) -> None:
    """Decode the records sections of magic-2 batches into row arrays.

    Addresses below ``len(src0)`` are in ``src0``, the others in ``src1`` (shifted by
    ``len(src0)``); batch ``b``'s records span ``[b_start[b], b_end[b])`` and fill rows
    ``b_row0[b] .. b_row0[b] + b_count[b]``. Batches are independent; a malformed one gets a
    non-zero ``b_status`` and the address of the fault in ``b_errpos``.
    """
    len0 = src0.shape[0]
    bufs = (_bytes(src0), _bytes(src1))
    for b in range(len(b_start)):
        start, end = int(b_start[b]), int(b_end[b])
        shift = len0 if start >= len0 else 0
        buf = bufs[1 if shift else 0]
        if not 0 <= start - shift <= end - shift <= len(buf):
            raise ValueError(f"batch {b}: span outside the buffers")
        status, stop, rows = _decode_records(
            buf, start - shift, end - shift, int(b_count[b]), int(b_lod[b])
        )
        log_append = int(b_log_append[b]) != 0
        base_offset, base_ts, max_ts = int(b_base_offset[b]), int(b_base_ts[b]), int(b_max_ts[b])
        row = int(b_row0[b])
        for delta, ts_delta, kpos, klen, vpos, vlen, hpos, hcount in rows:
            r_offset[row] = base_offset + delta
            r_ts[row] = max_ts if log_append else base_ts + ts_delta
            r_ts_type[row] = 1 if log_append else 0
            r_kpos[row] = kpos + shift
            r_klen[row] = klen
            r_vpos[row] = vpos + shift
            r_vlen[row] = vlen
            r_hpos[row] = hpos + shift
            r_hcount[row] = hcount
            row += 1
        b_status[b] = status
        b_errpos[b] = stop + shift


def decode_v2_headers(
    src0: np.ndarray,
    src1: np.ndarray,
    r_hpos: np.ndarray,
    r_hcount: np.ndarray,
    h_kpos: np.ndarray,
    h_klen: np.ndarray,
    h_vpos: np.ndarray,
    h_vlen: np.ndarray,
) -> None:
    """Second pass over the (already validated) header sections of the rows."""
    len0 = src0.shape[0]
    bufs = (_bytes(src0), _bytes(src1))
    h = 0
    for hpos, hcount in zip(r_hpos.tolist(), r_hcount.tolist(), strict=True):
        shift = len0 if hpos >= len0 else 0
        buf = bufs[1 if shift else 0]
        pos = hpos - shift
        for _ in range(hcount):
            klen, kpos, pos = _py_blob(buf, pos, len(buf))
            if pos >= 0:
                vlen, vpos, pos = _py_blob(buf, pos, len(buf))
            if pos < 0 or h >= h_kpos.shape[0]:
                break
            h_kpos[h], h_klen[h], h_vpos[h], h_vlen[h] = kpos + shift, klen, vpos + shift, vlen
            h += 1


def binary_offsets(length: np.ndarray, offsets: np.ndarray) -> int:
    """Fill Arrow int32 offsets (n + 1) for slices of ``length`` (-1 = null); return the total.

    The caller keeps the total under 2 GiB so the int32 offsets hold.
    """
    offsets[0] = 0
    np.cumsum(np.maximum(length, 0), out=offsets[1 : len(length) + 1], dtype=offsets.dtype)
    return int(np.maximum(length, 0).sum())


def gather_into(
    src0: np.ndarray,
    src1: np.ndarray,
    pos: np.ndarray,
    length: np.ndarray,
    offsets: np.ndarray,
    data: np.ndarray,
) -> int:
    """Copy the ``[pos, pos + length)`` slices to ``data`` at ``offsets`` (see binary_offsets).

    Returns the number of slices that did not lie inside their source (always 0 for rows from
    the decoder, which validated them; such a slice is left as zeros rather than read).
    """
    len0, len1 = src0.shape[0], src1.shape[0]
    bad = 0
    for o, p, ln in zip(offsets.tolist(), pos.tolist(), length.tolist(), strict=False):
        if ln <= 0:
            continue
        if o < 0 or o + ln > data.shape[0]:
            bad += 1
        elif p >= 0 and p + ln <= len0:
            data[o : o + ln] = src0[p : p + ln]
        elif len0 <= p and p - len0 + ln <= len1:
            data[o : o + ln] = src1[p - len0 : p - len0 + ln]
        else:
            data[o : o + ln] = 0
            bad += 1
    return bad


def find_entry_candidate(buf: np.ndarray, start: int, limit: int) -> int:
    """First position in [start, limit) whose framing looks like an entry, or -1.

    Used to resynchronise after damage; the caller confirms a candidate with its checksum.
    """
    b = _bytes(buf)
    n = len(b)
    for p in range(max(start, 0), min(limit, n - 17 + 1)):
        magic = b[p + 16]
        if magic > 2:
            continue
        size = _i32(b, p + 8)
        if size < 14 or (magic == 2 and size < 49):
            continue
        # magic 0/1: attributes must name a codec <= 3, where the byte is in the buffer
        if magic < 2 and p + 17 < n and (b[p + 17] & 0x07) > 3:
            continue
        return p
    return -1


def entry_last_offsets(buf: np.ndarray, positions: np.ndarray, magics: np.ndarray) -> np.ndarray:
    """Last offset of each entry: baseOffset + lastOffsetDelta (v2), the offset field (0/1)."""
    b = _bytes(buf)
    out = np.empty(len(positions), np.int64)
    for i, (p, magic) in enumerate(zip(positions.tolist(), magics.tolist(), strict=True)):
        if p < 0 or p + (27 if magic == 2 else 8) > len(b):
            raise ValueError(f"no entry header at position {p} of {len(b)} bytes")
        last = _i64(b, p) + (_i32(b, p + 23) if magic == 2 else 0)
        out[i] = (last + 2**63) % 2**64 - 2**63  # wraps as the compiled kernel's int64 does
    return out


# the pure-Python kernels by name, whichever path runs (tests compare the two)
PURE_PYTHON: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        _varint,
        _varlong,
        hop_entries,
        parse_v2_headers,
        decode_v2_records,
        decode_v2_headers,
        binary_offsets,
        gather_into,
        find_entry_candidate,
        entry_last_offsets,
    )
}
_compiled = load("kafka_segments_ds.records._kernels")
COMPILED = _compiled is not None
if _compiled is not None:
    _varint = _compiled._varint
    _varlong = _compiled._varlong
    hop_entries = _compiled.hop_entries
    parse_v2_headers = _compiled.parse_v2_headers
    decode_v2_headers = _compiled.decode_v2_headers
    binary_offsets = _compiled.binary_offsets
    _decode_serial = _compiled.decode_v2_records
    _gather_serial = _compiled.gather_into

    def decode_v2_records(*args: np.ndarray) -> None:  # type: ignore[misc]
        """The compiled kernel; batches split between threads after :func:`use_threads`."""
        batches = len(args[2])
        n = min(_threads(), batches)
        if n <= 1:
            _decode_serial(*args)
            return None
        cuts = np.linspace(0, batches, n + 1).astype(np.int64).tolist()
        jobs = [
            (*args[:2], *(a[lo:hi] for a in args[2:11]), *args[11:20], args[20][lo:hi],
             args[21][lo:hi])
            for lo, hi in itertools.pairwise(cuts)
        ]  # fmt: skip
        _in_parallel(_decode_serial, jobs)
        return None

    def gather_into(
        src0: np.ndarray,
        src1: np.ndarray,
        pos: np.ndarray,
        length: np.ndarray,
        offsets: np.ndarray,
        data: np.ndarray,
    ) -> int:
        """The compiled kernel; rows split between threads (by bytes) after use_threads."""
        rows = len(pos)
        n = min(_threads(), rows)
        if n <= 1:
            return int(_gather_serial(src0, src1, pos, length, offsets, data))
        cuts = np.searchsorted(offsets[:rows], np.linspace(0, data.shape[0], n + 1)[1:-1])
        bounds = [0, *cuts.tolist(), rows]
        jobs = [
            (src0, src1, pos[lo:hi], length[lo:hi], offsets[lo:hi], data)
            for lo, hi in itertools.pairwise(bounds)
        ]
        return sum(_in_parallel(_gather_serial, jobs))

    _mapped = _compiled.mapped
    _populate = _compiled.populate

    def prefault_back_half(data: np.ndarray) -> Callable[[], None] | None:
        size = data.shape[0]
        if size < PREFAULT_MIN_BYTES or MAX_THREADS < 2 or _threads() > 1:
            return None
        half = size // 2
        if _mapped(data, half) is not False:
            return None
        try:
            future = _pool().submit(_populate, data, half, size)
        except RuntimeError:  # the interpreter is shutting down: no new threads
            return None

        def settle() -> None:
            if not future.cancel():
                future.result()

        return settle

    find_entry_candidate = _compiled.find_entry_candidate
    entry_last_offsets = _compiled.entry_last_offsets
