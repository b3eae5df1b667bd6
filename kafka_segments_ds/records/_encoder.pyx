# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled kernels of the columnar magic-2 encoder (:mod:`kafka_segments_ds.records.encoder`)
and of Kafka's default partitioner (murmur2).

Binary columns come as (offsets, data, valid) numpy arrays; offsets are int32 or int64 as Arrow
holds them and are read through :func:`_column` without a copy.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from kafka_segments_ds.records._bytes cimport offsets_ordered as _ordered

from kafka_segments_ds.records._crc32c cimport ksds_crc32c, ksds_crc_init

import numpy as np

ksds_crc_init()

cdef enum:
    V2_HEADER_SIZE = 61
    BATCH_LENGTH_BASE = 49
    CRC_START = 21


cdef struct Column:
    const void *offsets
    bint wide  # int64 offsets (else int32)
    const uint8_t *data
    const uint8_t *valid  # NULL: every row valid
    Py_ssize_t rows  # offsets hold rows + 1 entries
    Py_ssize_t size  # bytes in data


cdef inline int64_t off(const Column *c, Py_ssize_t i) noexcept nogil:
    if c.wide:
        return (<const int64_t *>c.offsets)[i]
    return (<const int32_t *>c.offsets)[i]


def _u8(a):
    a = np.asarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else np.ascontiguousarray(a, np.uint8)


cdef list _column(Column *c, offsets, data, valid, Py_ssize_t rows):
    """Fill ``c`` from numpy arrays, checking that every slice lies inside ``data``."""
    offsets = np.asarray(offsets)
    if offsets.dtype == np.int32 or offsets.dtype == np.int64:
        offsets = np.ascontiguousarray(offsets)
    else:
        offsets = np.ascontiguousarray(offsets, np.int64)
    keep = [offsets]
    if offsets.shape[0] < rows + 1:
        raise ValueError("binary column: fewer offsets than rows + 1")
    c.wide = offsets.dtype == np.int64
    c.offsets = <const void *><size_t>offsets.ctypes.data
    if not _ordered(c.offsets, c.wide, rows):
        raise ValueError("binary column: negative or decreasing offsets")
    c.rows = rows
    c.data = NULL  # None: sizes only, the data is not read
    c.size = 0
    if data is not None:
        data = np.ascontiguousarray(data, np.uint8)
        keep.append(data)
        if rows and offsets[rows] > data.shape[0]:
            raise ValueError("binary column: offsets past the end of the data")
        c.data = <const uint8_t *><size_t>data.ctypes.data
        c.size = data.shape[0]
    if valid is None:
        c.valid = NULL
    else:
        valid = _u8(valid)
        if valid.shape[0] < rows:
            raise ValueError("binary column: fewer validity flags than rows")
        keep.append(valid)
        c.valid = <const uint8_t *><size_t>valid.ctypes.data
    return keep


cdef inline int varint_size(uint64_t zigzagged) noexcept nogil:
    """Bytes of an unsigned varint: 1 + (bit length - 1) // 7."""
    cdef int bits = 64 - __builtin_clzll(zigzagged | 1)
    return 1 + (bits - 1) // 7


cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


cdef inline uint64_t zigzag(int64_t value) noexcept nogil:
    return (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)


cdef inline bint is_valid(const Column *c, Py_ssize_t i) noexcept nogil:
    return c.valid == NULL or c.valid[i] != 0


cdef inline int64_t blob_size(const Column *c, Py_ssize_t i) noexcept nogil:
    if not is_valid(c, i):
        return 1  # varint -1
    cdef int64_t length = off(c, i + 1) - off(c, i)
    return varint_size(zigzag(length)) + length


cdef inline int64_t body_size(
    Py_ssize_t i, int64_t offset_delta, int64_t timestamp_delta, const Column *keys,
    const Column *values, const int64_t *header_rows, const Column *hk, const Column *hv,
) noexcept nogil:
    cdef int64_t size = 1 + varint_size(zigzag(timestamp_delta)) + varint_size(zigzag(offset_delta))
    size += blob_size(keys, i) + blob_size(values, i)
    cdef int64_t first = header_rows[i], last = header_rows[i + 1], h, key_length
    size += varint_size(zigzag(last - first))
    for h in range(first, last):
        key_length = off(hk, h + 1) - off(hk, h)
        size += varint_size(zigzag(key_length)) + key_length
        size += blob_size(hv, h)
    return size


cdef list _columns(Column *cols, Py_ssize_t rows, key_off, key_data, key_valid, val_off, val_data,
                   val_valid, header_rows, hk_off, hk_data, hv_off, hv_data, hv_valid):
    """cols[0..3] = keys, values, header keys, header values; header_rows checked."""
    hr = np.ascontiguousarray(header_rows, np.int64)
    if hr.shape[0] < rows + 1:
        raise ValueError("header_rows: fewer than rows + 1")
    if not _ordered(<const void *><size_t>hr.ctypes.data, True, rows):
        raise ValueError("header_rows: negative or decreasing")
    headers = int(hr[rows]) if rows else 0
    keep = [hr]
    keep += _column(&cols[0], key_off, key_data, key_valid, rows)
    keep += _column(&cols[1], val_off, val_data, val_valid, rows)
    keep += _column(&cols[2], hk_off, hk_data, None, headers)
    keep += _column(&cols[3], hv_off, hv_data, hv_valid, headers)
    return keep


def plan_batches(timestamps, key_off, key_valid, val_off, val_valid, header_rows, hk_off, hv_off,
                 hv_valid, int64_t batch_bytes, int64_t batch_records, int64_t[::1] body_sizes,
                 int64_t[::1] batch_starts, int64_t[::1] region_sizes, starts=None):
    """Cut rows into batches; fill each record's body size and each batch's first row.

    A batch takes records while its size stays within ``batch_bytes`` and its count within
    ``batch_records``; a record that alone exceeds ``batch_bytes`` gets a batch of its own (as a
    producer does). ``starts`` (uint8 per row, optional): rows where a batch must start.
    ``batch_starts[count]`` is set to the row count. Returns the batch count.
    The sizes need only the offsets: data arrays are not read here.
    """
    cdef const int64_t[::1] ts = np.ascontiguousarray(timestamps, np.int64)
    cdef Py_ssize_t rows = ts.shape[0]
    if body_sizes.shape[0] < rows or batch_starts.shape[0] < rows + 1 or region_sizes.shape[0] < rows:
        raise ValueError("plan_batches: output arrays shorter than the rows")
    cdef bint has_forced = starts is not None
    cdef const uint8_t[::1] forced = np.ascontiguousarray(
        starts if has_forced else np.zeros(1, np.uint8), np.uint8)
    if has_forced and forced.shape[0] < rows:
        raise ValueError("plan_batches: starts shorter than the rows")
    cdef Column cols[4]
    keep = _columns(cols, rows, key_off, None, key_valid, val_off, None, val_valid, header_rows,
                    hk_off, None, hv_off, None, hv_valid)
    cdef const int64_t *hr = <const int64_t *><size_t>keep[0].ctypes.data
    cdef Py_ssize_t batches = 0, count = 0, i = 0
    cdef int64_t region = 0, base_ts = 0, body, total
    with nogil:
        while i < rows:
            if count == 0:
                base_ts = ts[i]
                batch_starts[batches] = i
            body = body_size(i, count, ts[i] - base_ts, &cols[0], &cols[1], hr, &cols[2],
                             &cols[3])
            total = varint_size(zigzag(body)) + body
            if count > 0 and (V2_HEADER_SIZE + region + total > batch_bytes
                              or count >= batch_records or (has_forced and forced[i])):
                region_sizes[batches] = region  # close the batch; row i starts the next one
                batches += 1
                count = 0
                region = 0
                continue
            body_sizes[i] = body
            region += total
            count += 1
            i += 1
        if count > 0:
            region_sizes[batches] = region
            batches += 1
        batch_starts[batches] = rows
    return batches


cdef inline Py_ssize_t put_varint(uint8_t *out, Py_ssize_t pos, uint64_t zigzagged) noexcept nogil:
    while zigzagged >= 0x80:
        out[pos] = <uint8_t>((zigzagged & 0x7F) | 0x80)
        zigzagged >>= 7
        pos += 1
    out[pos] = <uint8_t>zigzagged
    return pos + 1


cdef inline Py_ssize_t put_varint_in(uint8_t *out, Py_ssize_t pos, uint64_t zigzagged,
                                     Py_ssize_t end) noexcept nogil:
    """put_varint, or -1 (nothing written) when it would pass ``end``."""
    if pos < 0 or varint_size(zigzagged) > end - pos:
        return -1
    return put_varint(out, pos, zigzagged)


cdef inline Py_ssize_t put_blob(uint8_t *out, Py_ssize_t pos, const Column *c, Py_ssize_t i,
                                Py_ssize_t end) noexcept nogil:
    """Length-prefixed row i of ``c`` (-1 = null), or -1 (nothing written) past ``end``."""
    if pos < 0 or pos >= end:
        return -1
    if not is_valid(c, i):
        out[pos] = 1  # zigzag(-1)
        return pos + 1
    cdef int64_t start = off(c, i), length = off(c, i + 1) - start
    pos = put_varint_in(out, pos, zigzag(length), end)
    if pos < 0 or length > end - pos:
        return -1
    memcpy(out + pos, c.data + start, length)
    return pos + length


cdef inline void put_be(uint8_t *out, Py_ssize_t pos, int64_t value, int width) noexcept nogil:
    cdef int j
    for j in range(width):
        out[pos + width - 1 - j] = <uint8_t>((value >> (8 * j)) & 0xFF)


cdef struct Header:
    const int64_t *base_offsets
    const int64_t *region_lengths
    int64_t attributes
    const int64_t *last_offset_deltas
    const int64_t *base_timestamps
    const int64_t *max_timestamps
    const int64_t *record_counts
    int64_t leader_epoch
    int64_t producer_id
    int64_t producer_epoch
    int64_t base_sequence


cdef list _header(Header *h, tuple fields, Py_ssize_t batches):
    arrays = [np.ascontiguousarray(fields[k], np.int64) for k in (0, 1, 3, 4, 5, 6)]
    for a in arrays:
        if a.shape[0] < batches:
            raise ValueError("header arrays shorter than the batch count")
    h.base_offsets = <const int64_t *><size_t>arrays[0].ctypes.data
    h.region_lengths = <const int64_t *><size_t>arrays[1].ctypes.data
    h.attributes = fields[2]
    h.last_offset_deltas = <const int64_t *><size_t>arrays[2].ctypes.data
    h.base_timestamps = <const int64_t *><size_t>arrays[3].ctypes.data
    h.max_timestamps = <const int64_t *><size_t>arrays[4].ctypes.data
    h.record_counts = <const int64_t *><size_t>arrays[5].ctypes.data
    h.leader_epoch = fields[7]
    h.producer_id = fields[8]
    h.producer_epoch = fields[9]
    h.base_sequence = fields[10]
    return arrays


cdef inline void write_header(uint8_t *out, Py_ssize_t p, Py_ssize_t b,
                              const Header *h) noexcept nogil:
    """Batch b's 61-byte header at ``p``, except the CRC (FORMAT.md §4.1)."""
    put_be(out, p, h.base_offsets[b], 8)
    put_be(out, p + 8, BATCH_LENGTH_BASE + h.region_lengths[b], 4)
    put_be(out, p + 12, h.leader_epoch, 4)
    out[p + 16] = 2
    put_be(out, p + 21, h.attributes, 2)
    put_be(out, p + 23, h.last_offset_deltas[b], 4)
    put_be(out, p + 27, h.base_timestamps[b], 8)
    put_be(out, p + 35, h.max_timestamps[b], 8)
    put_be(out, p + 43, h.producer_id, 8)
    put_be(out, p + 51, h.producer_epoch, 2)
    put_be(out, p + 53, h.base_sequence, 4)
    put_be(out, p + 57, h.record_counts[b], 4)


def encode_records(Py_ssize_t batches, batch_starts, region_positions, body_sizes, timestamps,
                   key_off, key_data, key_valid, val_off, val_data, val_valid, header_rows,
                   hk_off, hk_data, hv_off, hv_data, hv_valid, uint8_t[::1] out, tuple header):
    """Write batch b's records at ``region_positions[b]`` (sizes from :func:`plan_batches`).

    With a non-empty ``header[0]`` the records follow their header in place: write the header
    and the CRC too, while the batch is still in cache. The planned sizes are checked against
    ``out`` before anything is written.
    """
    cdef const int64_t[::1] starts = np.ascontiguousarray(batch_starts, np.int64)
    cdef const int64_t[::1] regions = np.ascontiguousarray(region_positions, np.int64)
    cdef const int64_t[::1] bodies = np.ascontiguousarray(body_sizes, np.int64)
    cdef const int64_t[::1] ts = np.ascontiguousarray(timestamps, np.int64)
    if batches < 0 or starts.shape[0] < batches + 1 or regions.shape[0] < batches:
        raise ValueError("encode_records: batch arrays shorter than the batch count")
    cdef Py_ssize_t rows = starts[batches] if batches else 0
    if rows > ts.shape[0] or rows > bodies.shape[0]:
        raise ValueError("encode_records: fewer rows than the batches span")
    cdef Column cols[4]
    keep = _columns(cols, rows, key_off, key_data, key_valid, val_off, val_data, val_valid,
                    header_rows, hk_off, hk_data, hv_off, hv_data, hv_valid)
    cdef const int64_t *hr = <const int64_t *><size_t>keep[0].ctypes.data
    cdef Header h
    cdef bint plain = len(header[0]) > 0
    if plain:
        keep += _header(&h, header, batches)
    # Each batch must fit in ``out`` with its planned record sizes; each record is then written
    # within its planned size (a write past it stops the kernel), so ``out`` is never overrun.
    cdef Py_ssize_t b, i, pos, first, start, limit = out.shape[0], bad = -1, rec_end
    cdef int64_t base_ts, h0, h1, k, body
    with nogil:
        for b in range(batches):
            first = starts[b]
            if first < 0 or first >= starts[b + 1] or regions[b] < (V2_HEADER_SIZE if plain else 0):
                bad = b
                break
            pos = regions[b]
            for i in range(first, starts[b + 1]):
                if bodies[i] < 6:
                    bad = b
                    break
                pos += varint_size(zigzag(bodies[i])) + bodies[i]
            if bad >= 0 or pos > limit:
                bad = b
                break
    if bad >= 0:
        raise ValueError(f"encode_records: batch {bad} does not fit its plan or the output")
    cdef uint8_t *o = &out[0] if out.shape[0] else <uint8_t *>0
    with nogil:
        for b in range(batches):
            pos = regions[b]
            first = starts[b]
            base_ts = ts[first]
            for i in range(first, starts[b + 1]):
                pos = put_varint(o, pos, zigzag(bodies[i]))
                rec_end = pos + bodies[i]
                o[pos] = 0  # record attributes
                pos = put_varint_in(o, pos + 1, zigzag(ts[i] - base_ts), rec_end)
                pos = put_varint_in(o, pos, zigzag(i - first), rec_end)
                pos = put_blob(o, pos, &cols[0], i, rec_end)
                pos = put_blob(o, pos, &cols[1], i, rec_end)
                h0 = hr[i]
                h1 = hr[i + 1]
                pos = put_varint_in(o, pos, zigzag(h1 - h0), rec_end)
                k = h0
                while k < h1 and pos >= 0:
                    pos = put_blob(o, pos, &cols[2], k, rec_end)  # keys: never null
                    pos = put_blob(o, pos, &cols[3], k, rec_end)
                    k += 1
                if pos != rec_end:  # the plan's size is not this record's
                    bad = i
                    break
            if bad >= 0:
                break
            if plain:
                start = regions[b] - V2_HEADER_SIZE
                write_header(o, start, b, &h)
                put_be(o, start + 17, ksds_crc32c(o + start + CRC_START, pos - start - CRC_START), 4)
    if bad >= 0:
        raise ValueError(f"encode_records: record {bad} does not match its planned size")


def write_headers(uint8_t[::1] out, positions, sizes, tuple header):
    """Write every batch's header at ``positions`` and its CRC-32C over the complete batch."""
    cdef const int64_t[::1] pos = np.ascontiguousarray(positions, np.int64)
    cdef const int64_t[::1] size = np.ascontiguousarray(sizes, np.int64)
    cdef Py_ssize_t n = pos.shape[0], b, total = out.shape[0]
    if size.shape[0] < n:
        raise ValueError("positions and sizes differ in length")
    for b in range(n):
        if pos[b] < 0 or size[b] < V2_HEADER_SIZE or pos[b] + size[b] > total:
            raise ValueError(f"batch {b} does not fit in the output")
    cdef Header h
    keep = _header(&h, header, n)
    cdef uint8_t *o = &out[0] if total else <uint8_t *>0
    with nogil:
        for b in range(n):
            write_header(o, pos[b], b, &h)
            put_be(o, pos[b] + 17, ksds_crc32c(o + pos[b] + CRC_START, size[b] - CRC_START), 4)


def murmur2(offsets, data, int32_t[:] out):
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c) of each key, as a signed int32."""
    cdef Py_ssize_t rows = out.shape[0], i, j, full, start, length
    cdef Column c
    keep = _column(&c, offsets, data, None, rows)
    cdef uint32_t m = 0x5BD1E995, h, k
    cdef Py_ssize_t rest
    with nogil:
        for i in range(rows):
            start = off(&c, i)
            length = off(&c, i + 1) - start
            h = (<uint32_t>0x9747B28C) ^ <uint32_t>length
            full = length & ~3
            for j in range(0, full, 4):
                k = (<uint32_t>c.data[start + j] | (<uint32_t>c.data[start + j + 1] << 8)
                     | (<uint32_t>c.data[start + j + 2] << 16)
                     | (<uint32_t>c.data[start + j + 3] << 24))
                k *= m
                k ^= k >> 24
                k *= m
                h *= m
                h ^= k
            rest = length & 3
            if rest == 3:
                h ^= <uint32_t>c.data[start + full + 2] << 16
            if rest >= 2:
                h ^= <uint32_t>c.data[start + full + 1] << 8
            if rest >= 1:
                h ^= <uint32_t>c.data[start + full]
                h *= m
            h ^= h >> 13
            h *= m
            h ^= h >> 15
            out[i] = <int32_t>h
