"""Columnar kernels (numba): entry framing, batch headers, magic-2 records, binary gathers.

These walk buffers of ``.log`` bytes and write positions and values into numpy arrays; Python
never sees a record object on this path. Every length read from the buffer is checked against the
bytes that remain before it is used, and output arrays are sized by the caller from bounds that
the input can hold (a record takes at least 7 bytes, a header at least 2).

Error codes returned per batch are translated to messages by :data:`RECORD_ERRORS`.
The readable reference for the same logic is :mod:`kafka_segments_ds.records.v2`.
"""

from __future__ import annotations

import os

# Passive waiting: spinning OpenMP threads steal the cores a loaded host (or Spark's JVM)
# needs; set before numba starts its threading layer, and only if the user has not.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba
import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

PARALLEL_MIN_BYTES = 32 << 20  # below this a kernel runs on the calling thread only
_MAX_THREADS: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]


def use_threads(work_bytes: int) -> None:
    """Set the kernels' thread count for a job of ``work_bytes`` (thread-local in numba).

    Waking a thread pool costs more than small jobs take, and on a busy host far more.
    """
    numba.set_num_threads(1 if work_bytes < PARALLEL_MIN_BYTES else _MAX_THREADS)


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

_U7F = np.uint64(0x7F)
_U1 = np.uint64(1)
_U32MASK = np.uint64(0xFFFFFFFF)


@njit(cache=True, inline="always")
def _read_i32(buf: np.ndarray, p: int) -> int:
    v = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8)
    v |= np.int64(buf[p + 3])
    if v >= 0x80000000:
        v -= 0x100000000
    return v


@njit(cache=True, inline="always")
def _read_i16(buf: np.ndarray, p: int) -> int:
    v = (np.int64(buf[p]) << 8) | np.int64(buf[p + 1])
    if v >= 0x8000:
        v -= 0x10000
    return v


@njit(cache=True, inline="always")
def _read_i64(buf: np.ndarray, p: int) -> int:
    v = np.uint64(0)
    for i in range(8):
        v = (v << np.uint64(8)) | np.uint64(buf[p + i])
    return np.int64(v)


@njit(cache=True, inline="always")
def _unsigned(buf: np.ndarray, pos: int, end: int, max_bytes: int) -> tuple[np.uint64, int]:
    raw = np.uint64(0)
    shift = np.uint64(0)
    for _ in range(max_bytes):
        if pos >= end:
            return np.uint64(0), -1
        b = buf[pos]
        pos += 1
        raw |= (np.uint64(b) & _U7F) << shift
        if b < 0x80:
            return raw, pos
        shift += np.uint64(7)
    return np.uint64(0), -1


@njit(cache=True, inline="always")
def _varint(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    if pos < end:
        b = np.int64(buf[pos])
        if b < 0x80:  # one byte: most lengths, deltas and counts
            return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _unsigned(buf, pos, end, 5)
    raw &= _U32MASK
    return np.int64(raw >> _U1) ^ -np.int64(raw & _U1), pos


@njit(cache=True, inline="always")
def _varlong(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    if pos < end:
        b = np.int64(buf[pos])
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    raw, pos = _unsigned(buf, pos, end, 10)
    return np.int64(raw >> _U1) ^ -np.int64(raw & _U1), pos


@njit(cache=True, nogil=True)
def hop_entries(buf: np.ndarray, start: int, end: int) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Walk entry framing in ``buf[start:end]``.

    Returns ``(positions, magics, outcome, stop)``: entry start positions and magic bytes of the
    complete, plausibly framed entries, then the FRAMING_* outcome and the position where the
    walk stopped. Entry length = 12 + int32 at position + 8.
    """
    count = 0
    pos = start
    outcome = FRAMING_END
    # pass 1: count (entries are >= 26 bytes, so this loop is bounded by the input)
    while True:
        if end - pos < 17:
            outcome = FRAMING_END if pos == end else FRAMING_PARTIAL
            break
        size = _read_i32(buf, pos + 8)
        magic = buf[pos + 16]
        if size < 14 or magic > 2:
            outcome = FRAMING_BAD
            break
        if magic == 2 and size < 49:
            outcome = FRAMING_SHORT_BATCH
            break
        if pos + 12 + size > end:
            outcome = FRAMING_PARTIAL
            break
        count += 1
        pos += 12 + size
    positions = np.empty(count, np.int64)
    magics = np.empty(count, np.int8)
    pos = start
    for i in range(count):
        positions[i] = pos
        magics[i] = buf[pos + 16]
        pos += 12 + _read_i32(buf, pos + 8)
    return positions, magics, outcome, pos


# Column order of parse_v2_headers' output.
H_BASE_OFFSET, H_LENGTH, H_EPOCH, H_CRC, H_ATTRIBUTES, H_LOD = 0, 1, 2, 3, 4, 5
H_BASE_TS, H_MAX_TS, H_PRODUCER_ID, H_PRODUCER_EPOCH, H_BASE_SEQ, H_COUNT = 6, 7, 8, 9, 10, 11
N_HEADER_FIELDS = 12


@njit(cache=True, nogil=True)
def parse_v2_headers(buf: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The 61-byte headers of the magic-2 batches at ``positions`` as an int64 [n, 12] array."""
    out = np.empty((positions.shape[0], N_HEADER_FIELDS), np.int64)
    for i in range(positions.shape[0]):
        p = positions[i]
        out[i, H_BASE_OFFSET] = _read_i64(buf, p)
        out[i, H_LENGTH] = _read_i32(buf, p + 8)
        out[i, H_EPOCH] = _read_i32(buf, p + 12)
        crc = _read_i32(buf, p + 17)
        out[i, H_CRC] = crc + 0x100000000 if crc < 0 else crc
        out[i, H_ATTRIBUTES] = _read_i16(buf, p + 21)
        out[i, H_LOD] = _read_i32(buf, p + 23)
        out[i, H_BASE_TS] = _read_i64(buf, p + 27)
        out[i, H_MAX_TS] = _read_i64(buf, p + 35)
        out[i, H_PRODUCER_ID] = _read_i64(buf, p + 43)
        out[i, H_PRODUCER_EPOCH] = _read_i16(buf, p + 51)
        out[i, H_BASE_SEQ] = _read_i32(buf, p + 53)
        out[i, H_COUNT] = _read_i32(buf, p + 57)
    return out


@njit(cache=True, inline="always")
def _blob(buf: np.ndarray, pos: int, end: int) -> tuple[int, int, int]:
    """(length or -1, data position, next position); next = -1 on error."""
    length, pos = _varint(buf, pos, end)
    if pos < 0:
        return 0, 0, -1
    if length < -1:
        return 0, 0, -2
    if length == -1:
        return -1, pos, pos
    if pos + length > end:
        return 0, 0, -2
    return length, pos, pos + length


@njit(cache=True, parallel=True, nogil=True)
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
    ``b_row0[b] .. b_row0[b] + b_count[b]``. Batches are independent (decoded in parallel); a
    malformed one gets a non-zero ``b_status`` and the address of the fault in ``b_errpos``.
    """
    len0 = src0.shape[0]
    for b in prange(b_start.shape[0]):
        shift = 0
        buf = src0
        if b_start[b] >= len0:
            shift = len0
            buf = src1
        pos = b_start[b] - shift
        end = b_end[b] - shift
        row = b_row0[b]
        base_offset = b_base_offset[b]
        base_ts = b_base_ts[b]
        max_ts = b_max_ts[b]
        log_append = b_log_append[b] != 0
        lod = b_lod[b]
        previous = -1
        status = 0
        for _ in range(b_count[b]):
            rstart = pos
            length, pos = _varint(buf, pos, end)
            if pos < 0:
                status = 1
                pos = rstart
                break
            rend = pos + length
            if length < 6 or rend > end:
                status = 2
                pos = rstart
                break
            pos += 1  # attributes
            ts_delta, pos = _varlong(buf, pos, rend)
            if pos < 0:
                status = 1
                pos = rstart
                break
            delta, pos = _varint(buf, pos, rend)
            if pos < 0:
                status = 1
                pos = rstart
                break
            if delta <= previous or delta > lod:
                status = 3
                pos = rstart
                break
            previous = delta
            klen, kpos, pos = _blob(buf, pos, rend)
            if pos < 0:
                status = 4 if pos == -2 else 1
                pos = rstart
                break
            vlen, vpos, pos = _blob(buf, pos, rend)
            if pos < 0:
                status = 4 if pos == -2 else 1
                pos = rstart
                break
            hcount, pos = _varint(buf, pos, rend)
            if pos < 0:
                status = 1
                pos = rstart
                break
            if hcount < 0 or hcount > (rend - pos) // 2:
                status = 5
                pos = rstart
                break
            hpos = pos
            for _h in range(hcount):
                hk, _hkp, pos = _blob(buf, pos, rend)
                if pos < 0 or hk < 0:
                    status = 6
                    break
                _hv, _hvp, pos = _blob(buf, pos, rend)
                if pos < 0:
                    status = 9
                    break
            if status != 0:
                pos = rstart
                break
            if pos != rend:
                status = 7
                pos = rstart
                break
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
        if status == 0 and pos != end:
            status = 8
        b_status[b] = status
        b_errpos[b] = pos + shift


@njit(cache=True, nogil=True)
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
    h = 0
    for r in range(r_hpos.shape[0]):
        shift = 0
        buf = src0
        if r_hpos[r] >= len0:
            shift = len0
            buf = src1
        pos = r_hpos[r] - shift
        end = buf.shape[0]
        for _ in range(r_hcount[r]):
            klen, kpos, pos = _blob(buf, pos, end)
            vlen, vpos, pos = _blob(buf, pos, end)
            h_kpos[h] = kpos + shift
            h_klen[h] = klen
            h_vpos[h] = vpos + shift
            h_vlen[h] = vlen
            h += 1


@njit(cache=True, nogil=True)
def binary_offsets(length: np.ndarray, offsets: np.ndarray) -> int:
    """Fill Arrow int32 offsets (n + 1) for slices of ``length`` (-1 = null); return the total.

    The caller keeps the total under 2 GiB so the int32 offsets hold.
    """
    total = 0
    offsets[0] = 0
    for i in range(length.shape[0]):
        ln = length[i]
        if ln > 0:
            total += ln
        offsets[i + 1] = total
    return total


@intrinsic
def _copy_bytes(typingctx, dst, dst_at, src, src_at, count):  # type: ignore[no-untyped-def]
    """memcpy(dst + dst_at, src + src_at, count) for uint8 arrays; the caller checks bounds.

    Slice assignment costs several times the copy itself for values of ~100 bytes.
    """
    sig = types.void(dst, dst_at, src, src_at, count)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        dst_value, dst_offset, src_value, src_offset, nbytes = args
        dst_array = context.make_array(signature.args[0])(context, builder, dst_value)
        src_array = context.make_array(signature.args[2])(context, builder, src_value)
        dst_ptr = builder.gep(dst_array.data, [dst_offset])
        src_ptr = builder.gep(src_array.data, [src_offset])
        cgutils.raw_memcpy(builder, dst_ptr, src_ptr, nbytes, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, parallel=True, nogil=True)
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
    len0 = src0.shape[0]
    len1 = src1.shape[0]
    bad = 0
    for i in prange(pos.shape[0]):
        ln = length[i]
        if ln > 0:
            o = offsets[i]
            p = pos[i]
            if o + ln > data.shape[0]:
                bad += 1
            elif p >= 0 and p + ln <= len0:
                _copy_bytes(data, o, src0, p, ln)  # type: ignore[call-arg]
            elif len0 <= p and p - len0 + ln <= len1:
                _copy_bytes(data, o, src1, p - len0, ln)  # type: ignore[call-arg]
            else:
                data[o : o + ln] = 0
                bad += 1
    return bad


@njit(cache=True)
def find_entry_candidate(buf: np.ndarray, start: int, limit: int) -> int:
    """First position in [start, limit) whose framing looks like an entry, or -1.

    Used to resynchronise after damage; the caller confirms a candidate with its checksum.
    """
    last = min(limit, buf.shape[0] - 17 + 1)
    for p in range(start, last):
        magic = buf[p + 16]
        if magic > 2:
            continue
        size = _read_i32(buf, p + 8)
        if size < 14 or (magic == 2 and size < 49):
            continue
        if magic < 2 and (buf[p + 17] & 0x07) > 3:
            continue
        return p
    return -1


@njit(cache=True)
def entry_last_offsets(buf: np.ndarray, positions: np.ndarray, magics: np.ndarray) -> np.ndarray:
    """Last offset of each entry: baseOffset + lastOffsetDelta (v2), the offset field (0/1)."""
    out = np.empty(positions.shape[0], np.int64)
    for i in range(positions.shape[0]):
        p = positions[i]
        out[i] = _read_i64(buf, p)
        if magics[i] == 2:
            out[i] += _read_i32(buf, p + 23)
    return out


@njit(cache=True)
def first_offset_outlier(lasts: np.ndarray, previous: int) -> int:
    """Index of the first entry whose last offset sticks out above its neighbours, or -1.

    An entry is an outlier when it is not below either of the next two entries while those
    two, and the entry before it, are in order: the signature of a damaged offset field
    (not covered by any checksum) rather than of overlapping batches, which break the order
    only once.
    """
    n = lasts.shape[0]
    for i in range(n - 2):
        before = previous if i == 0 else lasts[i - 1]
        if (
            lasts[i] >= lasts[i + 1]
            and lasts[i] >= lasts[i + 2]
            and before < lasts[i + 1] < lasts[i + 2]
        ):
            return i
    return -1
