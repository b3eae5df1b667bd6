# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled legacy (magic 0/1) message kernels: the implementation behind
:mod:`kafka_segments_ds.records.legacy_kernels` (read its docstring for the contract).

The message checks are those of the reference decoder
(:func:`kafka_segments_ds.records.legacy.decode_legacy_message`), in its order; a message that
fails one stops the walk, and the caller asks the reference decoder what is wrong with it.
CRC-32 (IEEE) of 1 KiB and more is zlib's ``crc32`` when the module is handed its address
(see ``legacy_kernels``); shorter ranges, or all without it, take a slicing-by-8 table walk.
"""

from libc.stdint cimport int8_t, int64_t, uint8_t, uint32_t

from kafka_segments_ds.records._bytes cimport ptr, read_i32, read_i64

import numpy as np

cdef enum:
    N_FIELDS = 9  # position, offset, magic, attributes, timestamp, kpos, klen, vpos, vlen
    # zlib's crc32 overtakes the (inlined) table walk from ~700 bytes: for a message of 150
    # bytes, 1.2 GB/s against 3.5; for 64 KiB, 6.8 against 3.0 (the development machine)
    ZLIB_MIN_BYTES = 1024

cdef uint32_t TABLE[8][256]


cdef void _fill_table() noexcept:
    cdef uint32_t c
    cdef int i, k
    for i in range(256):
        c = i
        for k in range(8):
            c = (c >> 1) ^ (<uint32_t>0xEDB88320 if c & 1 else 0)
        TABLE[0][i] = c
    for i in range(256):
        for k in range(1, 8):
            TABLE[k][i] = (TABLE[k - 1][i] >> 8) ^ TABLE[0][TABLE[k - 1][i] & 0xFF]


_fill_table()


ctypedef unsigned long (*zlib_crc32_t)(unsigned long, const unsigned char *, unsigned int) noexcept nogil
cdef zlib_crc32_t _zlib_crc32 = NULL


def use_zlib_crc32(size_t address):
    """Checksum with zlib's ``crc32`` at ``address`` (0: the table walk here)."""
    global _zlib_crc32
    _zlib_crc32 = <zlib_crc32_t>address


def zlib_crc32_in_use():
    return _zlib_crc32 != NULL


cdef uint32_t crc32_of(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    cdef unsigned long c = 0
    cdef Py_ssize_t step
    cdef zlib_crc32_t zlib_crc32 = _zlib_crc32  # (read once: set while a thread checksums)
    if zlib_crc32 == NULL or n < ZLIB_MIN_BYTES:
        return _crc32_tables(p, n)
    while n > 0:  # zlib takes a 32-bit length
        step = n if n < (1 << 30) else (1 << 30)
        c = zlib_crc32(c, p, <unsigned int>step)
        p += step
        n -= step
    return <uint32_t>c


cdef uint32_t _crc32_tables(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t c = ~(<uint32_t>0)
    while n >= 8:
        c ^= (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) \
            | (<uint32_t>p[3] << 24)
        c = (TABLE[7][c & 0xFF] ^ TABLE[6][(c >> 8) & 0xFF] ^ TABLE[5][(c >> 16) & 0xFF]
             ^ TABLE[4][c >> 24] ^ TABLE[3][p[4]] ^ TABLE[2][p[5]] ^ TABLE[1][p[6]]
             ^ TABLE[0][p[7]])
        p += 8
        n -= 8
    while n > 0:
        c = (c >> 8) ^ TABLE[0][(c ^ p[0]) & 0xFF]
        p += 1
        n -= 1
    return ~c


def crc32_range(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    if start < 0 or end < start or end > buf.shape[0]:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")
    return crc32_of(ptr(buf) + start, end - start)


def crc32_tables_range(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    if start < 0 or end < start or end > buf.shape[0]:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")
    return _crc32_tables(ptr(buf) + start, end - start)


def crc32_ranges(const uint8_t[::1] buf, starts, ends):
    cdef const int64_t[:] lo = np.ascontiguousarray(starts, np.int64)
    cdef const int64_t[:] hi = np.ascontiguousarray(ends, np.int64)
    cdef Py_ssize_t n = lo.shape[0], i, size = buf.shape[0]
    if hi.shape[0] != n:
        raise ValueError("starts and ends differ in length")
    for i in range(n):
        if lo[i] < 0 or hi[i] < lo[i] or hi[i] > size:
            raise ValueError(f"range [{lo[i]}, {hi[i]}) outside a buffer of {size} bytes")
    out = np.empty(n, np.int64)
    cdef int64_t[::1] o = out
    cdef const uint8_t *b = ptr(buf)
    with nogil:
        for i in range(n):
            o[i] = crc32_of(b + lo[i], hi[i] - lo[i])
    return out


cdef inline Py_ssize_t _blob(const uint8_t *b, Py_ssize_t cursor, Py_ssize_t mend,
                             int64_t *where, int64_t *length) noexcept nogil:
    """int32 length (-1 null) and bytes inside the message: next position, or -1."""
    cdef int64_t n
    if cursor + 4 > mend:
        return -1
    n = read_i32(b + cursor)
    cursor += 4
    if n < 0:
        if n != -1:
            return -1
        where[0] = 0
        length[0] = -1
        return cursor
    if cursor + n > mend:
        return -1
    where[0] = cursor
    length[0] = n
    return cursor + n


cdef inline bint _message(const uint8_t *b, Py_ssize_t size, Py_ssize_t pos, bint verify,
                          int64_t[:, ::1] out, Py_ssize_t i) noexcept nogil:
    """Decode the message at ``pos`` into column ``i`` of ``out``; False when malformed."""
    cdef int64_t length, magic, mend, cursor, stored
    if size - pos < 17:
        return False
    length = read_i32(b + pos + 8)
    magic = b[pos + 16]
    if magic > 1 or length < (14 if magic == 0 else 22):
        return False
    mend = pos + 12 + length
    if mend > size:
        return False
    stored = read_i32(b + pos + 12) & <int64_t>0xFFFFFFFF
    if verify and crc32_of(b + pos + 16, mend - pos - 16) != stored:
        return False
    out[0, i] = pos
    out[1, i] = read_i64(b + pos)
    out[2, i] = magic
    out[3, i] = <int8_t>b[pos + 17]  # signed, as the reference decoder reads it
    if magic == 0:
        out[4, i] = -1
        cursor = pos + 18
    else:
        out[4, i] = read_i64(b + pos + 18)
        cursor = pos + 26
    cursor = _blob(b, cursor, mend, &out[5, i], &out[6, i])
    if cursor < 0:
        return False
    cursor = _blob(b, cursor, mend, &out[7, i], &out[8, i])
    return cursor == mend


def read_messages(const uint8_t[::1] buf, positions, bint verify):
    cdef const int64_t[:] pos = np.ascontiguousarray(positions, np.int64)
    cdef Py_ssize_t n = pos.shape[0], i, size = buf.shape[0]
    out = np.empty((N_FIELDS, n), np.int64)
    cdef int64_t[:, ::1] o = out
    cdef const uint8_t *b = ptr(buf)
    for i in range(n):
        if pos[i] < 0 or pos[i] > size:
            raise ValueError(f"position {pos[i]} outside a buffer of {size} bytes")
    with nogil:
        for i in range(n):
            if not _message(b, size, pos[i], verify, o, i):
                break
        else:
            i = n
    return out, i


def walk_inner(const uint8_t[::1] buf, bint verify):
    cdef Py_ssize_t size = buf.shape[0], pos = 0, count = 0, framed = 0
    cdef int64_t length
    cdef bint bad = False
    cdef const uint8_t *b = ptr(buf)
    while size - pos >= 12:  # pass 1: the messages the size fields frame (columns to allocate)
        length = read_i32(b + pos + 8)
        if length < 14 or pos + 12 + length > size:
            break
        framed += 1
        pos += 12 + length
    out = np.empty((N_FIELDS, framed), np.int64)
    cdef int64_t[:, ::1] o = out
    pos = 0
    with nogil:
        while size - pos >= 12:
            length = read_i32(b + pos + 8)
            if length < 14:
                bad = True
                break
            if pos + 12 + length > size:
                break  # Kafka ends the iteration at a short read
            if count == framed or not _message(b, size, pos, verify, o, count) or o[3, count] & 0x07:
                bad = True
                break
            count += 1
            pos += 12 + length
    return out[:, :count], bad, pos
