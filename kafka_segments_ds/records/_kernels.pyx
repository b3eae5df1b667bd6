# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled columnar kernels: entry framing, batch headers, magic-2 records, binary gathers.

The implementation behind :mod:`kafka_segments_ds.records.kernels` (read its docstring for the
contract). Every length read from the buffer is checked against the bytes that remain before it
is used; the positions and sizes the *caller* passes (batch spans, output arrays) are checked
once up front and a violation raises ValueError (a caller bug, never a data error).
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.string cimport memcpy, memset

from kafka_segments_ds.records._bytes cimport (
    blob,
    ptr,
    read_i16,
    read_i32,
    read_i64,
    varint,
    varlong,
)

import numpy as np

cdef enum:
    FRAMING_END = 0
    FRAMING_PARTIAL = 1
    FRAMING_BAD = 2
    FRAMING_SHORT_BATCH = 3
    N_HEADER_FIELDS = 12


def _i64(a):
    return np.ascontiguousarray(a, np.int64)


def _varint(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end):
    """(value, next position or -1) of the zigzag varint at ``pos`` (for tests)."""
    if pos < 0 or end > buf.shape[0]:
        raise ValueError("range outside the buffer")
    cdef int64_t value = 0
    pos = varint(ptr(buf), pos, end, &value)
    return value, pos


def _varlong(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end):
    """(value, next position or -1) of the zigzag varlong at ``pos`` (for tests)."""
    if pos < 0 or end > buf.shape[0]:
        raise ValueError("range outside the buffer")
    cdef int64_t value = 0
    pos = varlong(ptr(buf), pos, end, &value)
    return value, pos


# The per-entry kernels (hop, headers, offsets) keep the GIL: they take microseconds, and a
# thread that drops the GIL may wait a whole switch interval (5 ms) to get it back.
def hop_entries(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    if start < 0 or end > buf.shape[0] or start > end:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")
    cdef const uint8_t *b = ptr(buf)
    cdef Py_ssize_t count = 0, pos = start, i
    cdef int outcome = FRAMING_END
    cdef int64_t size
    cdef uint8_t magic
    # pass 1: count (entries are >= 26 bytes, so this loop is bounded by the input)
    while True:
        if end - pos < 17:
            outcome = FRAMING_END if pos == end else FRAMING_PARTIAL
            break
        size = read_i32(b + pos + 8)
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
        count += 1
        pos += 12 + size
    positions = np.empty(count, np.int64)
    magics = np.empty(count, np.int8)
    cdef int64_t[::1] p_out = positions
    cdef int8_t[::1] m_out = magics
    pos = start
    for i in range(count):
        p_out[i] = pos
        m_out[i] = <int8_t>b[pos + 16]
        pos += 12 + read_i32(b + pos + 8)
    return positions, magics, outcome, pos


def parse_v2_headers(const uint8_t[::1] buf, positions):
    cdef const int64_t[:] pos = _i64(positions)
    cdef Py_ssize_t n = pos.shape[0], i, size = buf.shape[0]
    for i in range(n):
        if pos[i] < 0 or pos[i] + 61 > size:
            raise ValueError(f"no 61-byte batch header at position {pos[i]} of {size} bytes")
    out = np.empty((n, N_HEADER_FIELDS), np.int64)
    cdef int64_t[:, ::1] o = out
    cdef const uint8_t *p
    for i in range(n):
        p = ptr(buf) + pos[i]
        o[i, 0] = read_i64(p)
        o[i, 1] = read_i32(p + 8)
        o[i, 2] = read_i32(p + 12)
        o[i, 3] = read_i32(p + 17) & <int64_t>0xFFFFFFFF
        o[i, 4] = read_i16(p + 21)
        o[i, 5] = read_i32(p + 23)
        o[i, 6] = read_i64(p + 27)
        o[i, 7] = read_i64(p + 35)
        o[i, 8] = read_i64(p + 43)
        o[i, 9] = read_i16(p + 51)
        o[i, 10] = read_i32(p + 53)
        o[i, 11] = read_i32(p + 57)
    return out


cdef inline int64_t *_out(int64_t[::1] a) noexcept:
    return &a[0] if a.shape[0] else <int64_t *>0


def decode_v2_records(
    const uint8_t[::1] src0,
    const uint8_t[::1] src1,
    b_start, b_end, b_count, b_row0, b_base_offset, b_base_ts, b_max_ts, b_log_append, b_lod,
    int64_t[::1] r_offset,
    int64_t[::1] r_ts,
    int64_t[::1] r_ts_type,
    int64_t[::1] r_kpos,
    int64_t[::1] r_klen,
    int64_t[::1] r_vpos,
    int64_t[::1] r_vlen,
    int64_t[::1] r_hpos,
    int64_t[::1] r_hcount,
    int32_t[::1] b_status,
    int64_t[::1] b_errpos,
):
    cdef const int64_t[:] start = _i64(b_start)
    cdef const int64_t[:] stop = _i64(b_end)
    cdef const int64_t[:] count = _i64(b_count)
    cdef const int64_t[:] row0 = _i64(b_row0)
    cdef const int64_t[:] base_offsets = _i64(b_base_offset)
    cdef const int64_t[:] base_tss = _i64(b_base_ts)
    cdef const int64_t[:] max_tss = _i64(b_max_ts)
    cdef const int8_t[:] log_appends = np.asarray(b_log_append, np.int8)
    cdef const int64_t[:] lods = _i64(b_lod)
    cdef Py_ssize_t nb = start.shape[0], b
    cdef Py_ssize_t len0 = src0.shape[0], len1 = src1.shape[0], rows = r_offset.shape[0]
    if min(stop.shape[0], count.shape[0], row0.shape[0], base_offsets.shape[0],
           base_tss.shape[0], max_tss.shape[0], log_appends.shape[0], lods.shape[0],
           b_status.shape[0], b_errpos.shape[0]) < nb:
        raise ValueError("batch arrays differ in length")
    if min(r_ts.shape[0], r_ts_type.shape[0], r_kpos.shape[0], r_klen.shape[0], r_vpos.shape[0],
           r_vlen.shape[0], r_hpos.shape[0], r_hcount.shape[0]) < rows:
        raise ValueError("row arrays differ in length")
    for b in range(nb):
        if start[b] < len0:
            ok = 0 <= start[b] <= stop[b] <= len0
        else:
            ok = start[b] <= stop[b] <= len0 + len1
        if not ok or row0[b] < 0 or row0[b] + max(count[b], 0) > rows:
            raise ValueError(f"batch {b}: span or rows outside the buffers")
    cdef const uint8_t *buf
    cdef Py_ssize_t shift, pos, end, rstart, rend, hpos, kpos, vpos, dummy
    cdef int64_t row, base_offset, base_ts, max_ts, lod, previous, length, ts_delta, delta
    cdef int64_t klen, vlen, hcount, hk, hv, k, _h
    cdef bint log_append
    cdef int status
    # plain pointers, held in registers: a store through a memoryview reloads its fields
    cdef int64_t *o_offset = _out(r_offset)
    cdef int64_t *o_ts = _out(r_ts)
    cdef int64_t *o_ts_type = _out(r_ts_type)
    cdef int64_t *o_kpos = _out(r_kpos)
    cdef int64_t *o_klen = _out(r_klen)
    cdef int64_t *o_vpos = _out(r_vpos)
    cdef int64_t *o_vlen = _out(r_vlen)
    cdef int64_t *o_hpos = _out(r_hpos)
    cdef int64_t *o_hcount = _out(r_hcount)
    with nogil:
        for b in range(nb):
            if start[b] >= len0:
                shift = len0
                buf = ptr(src1)
            else:
                shift = 0
                buf = ptr(src0)
            pos = start[b] - shift
            end = stop[b] - shift
            row = row0[b]
            base_offset = base_offsets[b]
            base_ts = base_tss[b]
            max_ts = max_tss[b]
            log_append = log_appends[b] != 0
            lod = lods[b]
            previous = -1
            status = 0
            k = 0
            while k < count[b]:
                k += 1
                rstart = pos
                pos = varint(buf, pos, end, &length)
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
                pos = varlong(buf, pos, rend, &ts_delta)
                if pos < 0:
                    status = 1
                    pos = rstart
                    break
                pos = varint(buf, pos, rend, &delta)
                if pos < 0:
                    status = 1
                    pos = rstart
                    break
                if delta <= previous or delta > lod:
                    status = 3
                    pos = rstart
                    break
                previous = delta
                klen = 0
                kpos = 0
                pos = blob(buf, pos, rend, &klen, &kpos)
                if pos < 0:
                    status = 4 if pos == -2 else 1
                    pos = rstart
                    break
                vlen = 0
                vpos = 0
                pos = blob(buf, pos, rend, &vlen, &vpos)
                if pos < 0:
                    status = 4 if pos == -2 else 1
                    pos = rstart
                    break
                pos = varint(buf, pos, rend, &hcount)
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
                    hk = 0
                    pos = blob(buf, pos, rend, &hk, &dummy)
                    if pos < 0 or hk < 0:
                        status = 6
                        break
                    pos = blob(buf, pos, rend, &hv, &dummy)
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
                o_offset[row] = base_offset + delta
                o_ts[row] = max_ts if log_append else base_ts + ts_delta
                o_ts_type[row] = 1 if log_append else 0
                o_kpos[row] = kpos + shift
                o_klen[row] = klen
                o_vpos[row] = vpos + shift
                o_vlen[row] = vlen
                o_hpos[row] = hpos + shift
                o_hcount[row] = hcount
                row += 1
            if status == 0 and pos != end:
                status = 8
            b_status[b] = status
            b_errpos[b] = pos + shift


def decode_v2_headers(
    const uint8_t[::1] src0,
    const uint8_t[::1] src1,
    r_hpos,
    r_hcount,
    int64_t[:] h_kpos,
    int64_t[:] h_klen,
    int64_t[:] h_vpos,
    int64_t[:] h_vlen,
):
    cdef const int64_t[:] hpos = _i64(r_hpos)
    cdef const int64_t[:] hcount = _i64(r_hcount)
    cdef Py_ssize_t n = hpos.shape[0], r, len0 = src0.shape[0], len1 = src1.shape[0]
    cdef Py_ssize_t total = h_kpos.shape[0]
    if hcount.shape[0] < n:
        raise ValueError("r_hpos and r_hcount differ in length")
    if min(h_klen.shape[0], h_vpos.shape[0], h_vlen.shape[0]) < total:
        raise ValueError("header arrays differ in length")
    cdef const uint8_t *buf
    cdef Py_ssize_t shift, pos, end, kpos, vpos, h = 0
    cdef int64_t klen, vlen, j
    with nogil:
        for r in range(n):
            if hpos[r] >= len0:
                shift = len0
                buf = ptr(src1)
                end = len1
            else:
                shift = 0
                buf = ptr(src0)
                end = len0
            pos = hpos[r] - shift
            if pos < 0 or pos > end:
                continue  # not a position of the decoder: never read outside the buffer
            for j in range(hcount[r]):
                if h >= total:
                    break
                kpos = vpos = 0
                klen = vlen = 0
                pos = blob(buf, pos, end, &klen, &kpos)
                if pos >= 0:
                    pos = blob(buf, pos, end, &vlen, &vpos)
                if pos < 0:  # not validated by the decoder: an empty header, never a wild read
                    break
                h_kpos[h] = kpos + shift
                h_klen[h] = klen
                h_vpos[h] = vpos + shift
                h_vlen[h] = vlen
                h += 1


def binary_offsets(length, int32_t[:] offsets):
    cdef const int64_t[:] ln = _i64(length)
    cdef Py_ssize_t n = ln.shape[0], i
    if offsets.shape[0] < n + 1:
        raise ValueError("offsets need one more slot than lengths")
    cdef int64_t total = 0
    offsets[0] = 0
    for i in range(n):
        if ln[i] > 0:
            total += ln[i]
        offsets[i + 1] = <int32_t>total
    return total


cdef extern from "_gather.h" nogil:
    int64_t ksds_gather(uint8_t *out, int64_t size, const uint8_t *in0, int64_t len0,
                        const uint8_t *in1, int64_t len1, const int64_t *p, const int64_t *ln,
                        const int32_t *off, int64_t n, int stream)
    int ksds_populate(uint8_t *start, size_t length)
    int ksds_mapped(const uint8_t *at)

# Outputs from this size up are written with non-temporal stores (see _gather.h): smaller ones
# may still be in the cache when they are read next.
STREAM_MIN_BYTES = 1 << 20


def gather_into(
    const uint8_t[::1] src0,
    const uint8_t[::1] src1,
    pos,
    length,
    offsets,
    uint8_t[::1] data,
):
    cdef const int64_t[::1] p = _i64(pos)
    cdef const int64_t[::1] ln = _i64(length)
    cdef const int32_t[::1] off = np.ascontiguousarray(offsets, np.int32)
    cdef Py_ssize_t n = p.shape[0], len0 = src0.shape[0], len1 = src1.shape[0]
    cdef Py_ssize_t size = data.shape[0]
    if ln.shape[0] < n or off.shape[0] < n:
        raise ValueError("pos, length and offsets differ in length")
    cdef int64_t bad = 0
    cdef int stream = size >= STREAM_MIN_BYTES
    cdef uint8_t *out = &data[0] if size else <uint8_t *>0
    cdef const uint8_t *in0 = ptr(src0)
    cdef const uint8_t *in1 = ptr(src1)
    if n == 0:
        return 0
    with nogil:
        bad = ksds_gather(out, size, in0, len0, in1, len1, &p[0], &ln[0], &off[0], n, stream)
    return bad


def populate(uint8_t[::1] data, Py_ssize_t start, Py_ssize_t stop):
    """Fault the whole pages of ``data[start:stop]`` in, writable, changing no byte (GIL
    released); False where the kernel cannot (not Linux 5.14+) or the range holds no whole
    page."""
    if not 0 <= start <= stop <= data.shape[0]:
        raise ValueError(f"range [{start}, {stop}) outside a buffer of {data.shape[0]} bytes")
    if start == stop:
        return False
    cdef int done
    cdef uint8_t *at = &data[start]
    with nogil:
        done = ksds_populate(at, <size_t>(stop - start))
    return done == 1


def mapped(const uint8_t[::1] data, Py_ssize_t at):
    """Whether the page holding ``data[at]`` is mapped (None: unknown)."""
    if not 0 <= at < data.shape[0]:
        raise ValueError(f"position {at} outside a buffer of {data.shape[0]} bytes")
    cdef int state = ksds_mapped(&data[at])
    return None if state < 0 else state == 1


def find_entry_candidate(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t limit):
    cdef Py_ssize_t n = buf.shape[0], p
    cdef Py_ssize_t last = min(limit, n - 17 + 1)
    cdef const uint8_t *b = ptr(buf)
    cdef uint8_t magic
    cdef int64_t size
    cdef Py_ssize_t found = -1
    if start < 0:
        start = 0
    with nogil:
        for p in range(start, last):
            magic = b[p + 16]
            if magic > 2:
                continue
            size = read_i32(b + p + 8)
            if size < 14 or (magic == 2 and size < 49):
                continue
            # the attributes byte of magic 0/1 (codec <= 3); at the very end, where it is not
            # in the buffer, the framing alone decides (the caller confirms with the checksum)
            if magic < 2 and p + 17 < n and (b[p + 17] & 0x07) > 3:
                continue
            found = p
            break
    return found


def entry_last_offsets(const uint8_t[::1] buf, positions, magics):
    cdef const int64_t[:] pos = _i64(positions)
    cdef const int8_t[:] mag = np.asarray(magics, np.int8)
    cdef Py_ssize_t n = pos.shape[0], i, size = buf.shape[0]
    if mag.shape[0] < n:
        raise ValueError("positions and magics differ in length")
    for i in range(n):
        if pos[i] < 0 or pos[i] + (27 if mag[i] == 2 else 8) > size:
            raise ValueError(f"no entry header at position {pos[i]} of {size} bytes")
    out = np.empty(n, np.int64)
    cdef int64_t[::1] o = out
    for i in range(n):
        o[i] = read_i64(ptr(buf) + pos[i])
        if mag[i] == 2:
            o[i] += read_i32(ptr(buf) + pos[i] + 23)
    return out

