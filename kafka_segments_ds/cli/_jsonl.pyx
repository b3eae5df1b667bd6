# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled JSON-lines writer kernels (the contract is in :mod:`.jsonl_kernels`).

Every write checks, before the first byte, that each row's fragment fits in ``out`` at its
cursor (the lengths come from the ``*_lengths`` functions over the same arrays).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

from kafka_segments_ds.records._bytes cimport offsets_ordered as _ordered

import numpy as np

cdef const char *HEX = b"0123456789abcdef"
cdef const char *NULL_TEXT = b"null"
cdef uint8_t SHORT_ESCAPES[256]
cdef int64_t EXTRA[256]


cdef void _init_tables():
    cdef int c
    for c in range(256):
        SHORT_ESCAPES[c] = 0
        EXTRA[c] = 5 if c < 32 else 0
    for c, ch in ((8, b"b"), (9, b"t"), (10, b"n"), (12, b"f"), (13, b"r"), (34, b'"'),
                  (92, b"\\")):
        SHORT_ESCAPES[c] = ch[0]
        EXTRA[c] = 1


_init_tables()


cdef struct Column:
    const void *offsets
    bint wide
    const uint8_t *data
    const uint8_t *valid


cdef inline int64_t off(const Column *c, Py_ssize_t i) noexcept nogil:
    if c.wide:
        return (<const int64_t *>c.offsets)[i]
    return (<const int32_t *>c.offsets)[i]


cdef list _column(Column *c, offsets, data, valid, Py_ssize_t *rows):
    offsets = np.asarray(offsets)
    if offsets.dtype != np.int32:
        offsets = np.ascontiguousarray(offsets, np.int64)
    offsets = np.ascontiguousarray(offsets)
    n = offsets.shape[0] - 1
    if n < 0:
        raise ValueError("offsets: at least one entry")
    valid = _u8(valid)
    if valid.shape[0] < n:
        raise ValueError("fewer validity flags than rows")
    keep = [offsets, valid]
    c.wide = offsets.dtype == np.int64
    c.offsets = <const void *><size_t>offsets.ctypes.data
    if not _ordered(c.offsets, c.wide, n):
        raise ValueError("offsets: negative or decreasing")
    c.valid = <const uint8_t *><size_t>valid.ctypes.data
    c.data = NULL
    if data is not None:
        data = np.ascontiguousarray(data, np.uint8)
        if n and offsets[n] > data.shape[0]:
            raise ValueError("offsets past the end of the data")
        keep.append(data)
        c.data = <const uint8_t *><size_t>data.ctypes.data
    rows[0] = n
    return keep


def _u8(a):
    a = np.asarray(a)
    return a.view(np.uint8) if a.dtype == np.bool_ else np.ascontiguousarray(a, np.uint8)


def _check_fits(lengths, out, cursor, Py_ssize_t n):
    lengths = np.asarray(lengths)
    cursor = np.asarray(cursor)
    if lengths.shape[0] < n or cursor.shape[0] < n:
        raise ValueError("lengths/cursor shorter than the rows")
    if n and ((cursor[:n] < 0).any() or (cursor[:n] + lengths[:n] > out.shape[0]).any()):
        raise ValueError("a fragment does not fit in the output buffer")


def escaped_lengths(offsets, data, valid):
    cdef Column c
    cdef Py_ssize_t n, i
    keep = _column(&c, offsets, data, valid, &n)
    result = np.empty(n, np.int64)
    cdef int64_t[::1] out = result
    cdef int64_t start, end, extra, j
    with nogil:
        for i in range(n):
            if not c.valid[i]:
                out[i] = 4
                continue
            start = off(&c, i)
            end = off(&c, i + 1)
            extra = 0
            for j in range(start, end):  # branch-free: a table lookup per byte
                extra += EXTRA[c.data[j]]
            out[i] = end - start + 2 + extra
    return result


cdef inline void _put_null(uint8_t *o, Py_ssize_t p) noexcept nogil:
    memcpy(o + p, NULL_TEXT, 4)


def write_escaped(offsets, data, valid, lengths, uint8_t[::1] out, int64_t[::1] cursor):
    cdef Column c
    cdef Py_ssize_t n, i
    keep = _column(&c, offsets, data, valid, &n)
    cdef const int64_t[::1] ln = np.ascontiguousarray(lengths, np.int64)
    _check_fits(ln, out, cursor, n)
    cdef uint8_t *o = &out[0] if out.shape[0] else <uint8_t *>0
    cdef int64_t p, start, end, j, stop, bad = -1
    cdef uint8_t ch, short
    with nogil:
        for i in range(n):
            p = cursor[i]
            stop = p + ln[i] - 1  # where the closing quote goes
            cursor[i] = p + ln[i]
            if not c.valid[i]:
                if ln[i] != 4:
                    bad = i
                    break
                _put_null(o, p)
                continue
            start = off(&c, i)
            end = off(&c, i + 1)
            if ln[i] < end - start + 2:
                bad = i
                break
            o[p] = 34
            p += 1
            if ln[i] == end - start + 2:  # nothing to escape: a plain copy
                memcpy(o + p, c.data + start, end - start)
                o[p + end - start] = 34
                continue
            for j in range(start, end):
                ch = c.data[j]
                if EXTRA[ch] == 0:
                    if p >= stop:
                        bad = i
                        break
                    o[p] = ch
                    p += 1
                    continue
                if p + 1 + EXTRA[ch] > stop:  # the lengths were not these values' lengths
                    bad = i
                    break
                o[p] = 92
                short = SHORT_ESCAPES[ch]
                if short:
                    o[p + 1] = short
                    p += 2
                else:  # \u00xx
                    o[p + 1] = 117
                    o[p + 2] = 48
                    o[p + 3] = 48
                    o[p + 4] = HEX[ch >> 4]
                    o[p + 5] = HEX[ch & 15]
                    p += 6
            if bad >= 0 or p != stop:
                bad = i
                break
            o[p] = 34
    if bad >= 0:
        raise ValueError(f"row {bad}: lengths are not the escaped lengths of the values")


def raw_lengths(offsets, valid, bint hex_digits):
    cdef Column c
    cdef Py_ssize_t n, i
    keep = _column(&c, offsets, None, valid, &n)
    result = np.empty(n, np.int64)
    cdef int64_t[::1] out = result
    cdef int64_t size
    with nogil:
        for i in range(n):
            size = off(&c, i + 1) - off(&c, i)
            if not c.valid[i]:
                out[i] = 4
            elif hex_digits:
                out[i] = 2 * size + 2
            else:
                out[i] = size
    return result


def write_raw(offsets, data, valid, bint hex_digits, uint8_t[::1] out, int64_t[::1] cursor):
    cdef Column c
    cdef Py_ssize_t n, i
    keep = _column(&c, offsets, data, valid, &n)
    _check_fits(raw_lengths(offsets, valid, hex_digits), out, cursor, n)
    cdef uint8_t *o = &out[0] if out.shape[0] else <uint8_t *>0
    cdef int64_t p, start, end, j
    with nogil:
        for i in range(n):
            p = cursor[i]
            if not c.valid[i]:
                _put_null(o, p)
                cursor[i] = p + 4
                continue
            start = off(&c, i)
            end = off(&c, i + 1)
            if hex_digits:
                o[p] = 34
                p += 1
                for j in range(start, end):
                    o[p] = HEX[c.data[j] >> 4]
                    o[p + 1] = HEX[c.data[j] & 15]
                    p += 2
                o[p] = 34
                p += 1
            else:
                memcpy(o + p, c.data + start, end - start)
                p += end - start
            cursor[i] = p


cdef inline int _digits(uint64_t magnitude) noexcept nogil:
    cdef int size = 1
    while magnitude >= 10:
        magnitude //= 10
        size += 1
    return size


cdef inline uint64_t _magnitude(int64_t v) noexcept nogil:
    return <uint64_t>(-(v + 1)) + 1 if v < 0 else <uint64_t>v  # no overflow at the minimum


def int_lengths(values, valid):
    cdef const int64_t[::1] v = np.ascontiguousarray(values, np.int64)
    valid = _u8(valid)
    cdef const uint8_t[::1] ok = valid
    cdef Py_ssize_t n = v.shape[0], i
    if ok.shape[0] < n:
        raise ValueError("fewer validity flags than values")
    result = np.empty(n, np.int64)
    cdef int64_t[::1] out = result
    with nogil:
        for i in range(n):
            if not ok[i]:
                out[i] = 4
            else:
                out[i] = _digits(_magnitude(v[i])) + (1 if v[i] < 0 else 0)
    return result


def write_ints(values, valid, uint8_t[::1] out, int64_t[::1] cursor):
    cdef const int64_t[::1] v = np.ascontiguousarray(values, np.int64)
    _check_fits(int_lengths(values, valid), out, cursor, v.shape[0])
    valid = _u8(valid)
    cdef const uint8_t[::1] ok = valid
    cdef Py_ssize_t n = v.shape[0], i
    cdef uint8_t *o = &out[0] if out.shape[0] else <uint8_t *>0
    cdef int64_t p
    cdef uint64_t magnitude
    cdef int digits, k
    with nogil:
        for i in range(n):
            p = cursor[i]
            if not ok[i]:
                _put_null(o, p)
                cursor[i] = p + 4
                continue
            if v[i] < 0:
                o[p] = 45
                p += 1
            magnitude = _magnitude(v[i])
            digits = _digits(magnitude)
            for k in range(digits - 1, -1, -1):
                o[p + k] = <uint8_t>(48 + magnitude % 10)
                magnitude //= 10
            cursor[i] = p + digits


def write_literal(const uint8_t[::1] literal, uint8_t[::1] out, int64_t[::1] cursor):
    cdef Py_ssize_t size = literal.shape[0], n = cursor.shape[0], i
    _check_fits(np.full(n, size, np.int64), out, cursor, n)
    cdef uint8_t *o = &out[0] if out.shape[0] else <uint8_t *>0
    cdef const uint8_t *src = &literal[0] if size else <const uint8_t *>0
    with nogil:
        for i in range(n):
            memcpy(o + cursor[i], src, size)
            cursor[i] += size
