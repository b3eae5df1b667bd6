# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled legacy (magic 0/1) message kernels: the implementation behind
:mod:`kafka_segments_ds.records.legacy_kernels` (read its docstring for the contract).

The message checks are those of the reference decoder
(:func:`kafka_segments_ds.records.legacy.decode_legacy_message`), in its order; a message that
fails one stops the walk, and the caller asks the reference decoder what is wrong with it.
CRC-32 (IEEE) of 1 KiB and more is zlib's ``crc32`` when the module is handed its address
(see ``legacy_kernels``); shorter ranges, or all without it, take a slicing-by-8 table walk,
four ranges at a time where there are several (one range's walk waits on its table lookups;
four independent ones fill those waits: 150-byte messages at 5.0 GB/s against 3.3 one by one).
Messages are framed and checksummed a block of :data:`BLOCK` at a time, then decoded, so a
walk that stops early has checksummed at most a block past where it stops.
"""

from libc.stdint cimport int8_t, int64_t, uint8_t, uint32_t

from kafka_segments_ds.records._bytes cimport ptr, read_i32, read_i64

import numpy as np

cdef enum:
    N_FIELDS = 9  # position, offset, magic, attributes, timestamp, kpos, klen, vpos, vlen
    # zlib's crc32 overtakes the (inlined) table walk from ~700 bytes: for a message of 150
    # bytes, 1.2 GB/s against 3.5; for 64 KiB, 6.8 against 3.0 (the development machine)
    ZLIB_MIN_BYTES = 1024
    BLOCK = 64  # messages framed and checksummed ahead of their decoding

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


cdef inline uint32_t _step8(uint32_t c, const uint8_t *p) noexcept nogil:
    c ^= (<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) \
        | (<uint32_t>p[3] << 24)
    return (TABLE[7][c & 0xFF] ^ TABLE[6][(c >> 8) & 0xFF] ^ TABLE[5][(c >> 16) & 0xFF]
            ^ TABLE[4][c >> 24] ^ TABLE[3][p[4]] ^ TABLE[2][p[5]] ^ TABLE[1][p[6]]
            ^ TABLE[0][p[7]])


cdef inline uint32_t _walk(uint32_t c, const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """Continue the (inverted) register ``c`` over ``n`` bytes."""
    while n >= 8:
        c = _step8(c, p)
        p += 8
        n -= 8
    while n > 0:
        c = (c >> 8) ^ TABLE[0][(c ^ p[0]) & 0xFF]
        p += 1
        n -= 1
    return c


cdef uint32_t _crc32_tables(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    return ~_walk(~(<uint32_t>0), p, n)


cdef void _crc32_tables4(const uint8_t *b, const int64_t *lo, const int64_t *hi,
                         uint32_t *out) noexcept nogil:
    """The table walk of four ranges side by side (their common length), then each one's rest."""
    cdef const uint8_t *p0 = b + lo[0]
    cdef const uint8_t *p1 = b + lo[1]
    cdef const uint8_t *p2 = b + lo[2]
    cdef const uint8_t *p3 = b + lo[3]
    cdef uint32_t c0 = ~(<uint32_t>0), c1 = ~(<uint32_t>0), c2 = ~(<uint32_t>0), c3 = ~(<uint32_t>0)
    cdef Py_ssize_t common = hi[0] - lo[0], k, steps
    for k in range(1, 4):
        if hi[k] - lo[k] < common:
            common = hi[k] - lo[k]
    steps = common >> 3
    for k in range(steps):
        c0 = _step8(c0, p0)
        c1 = _step8(c1, p1)
        c2 = _step8(c2, p2)
        c3 = _step8(c3, p3)
        p0 += 8
        p1 += 8
        p2 += 8
        p3 += 8
    common = steps << 3
    out[0] = ~_walk(c0, p0, hi[0] - lo[0] - common)
    out[1] = ~_walk(c1, p1, hi[1] - lo[1] - common)
    out[2] = ~_walk(c2, p2, hi[2] - lo[2] - common)
    out[3] = ~_walk(c3, p3, hi[3] - lo[3] - common)


cdef void _crc32_many(const uint8_t *b, const int64_t *lo, const int64_t *hi, Py_ssize_t n,
                      uint32_t *out) noexcept nogil:
    """``out[i]`` = CRC-32 of ``b[lo[i]:hi[i]]``: four at a time through the tables unless one
    of the four is zlib's (1 KiB or more, zlib in use)."""
    cdef Py_ssize_t i = 0, k
    cdef bint zlib_in_use = _zlib_crc32 != NULL
    cdef bint together
    while i < n:
        together = i + 4 <= n
        if together and zlib_in_use:
            for k in range(i, i + 4):
                if hi[k] - lo[k] >= ZLIB_MIN_BYTES:
                    together = False
        if together:
            _crc32_tables4(b, lo + i, hi + i, out + i)
            i += 4
        else:
            out[i] = crc32_of(b + lo[i], hi[i] - lo[i])
            i += 1


def crc32_range(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    if start < 0 or end < start or end > buf.shape[0]:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")
    return crc32_of(ptr(buf) + start, end - start)


def crc32_tables_range(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    if start < 0 or end < start or end > buf.shape[0]:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")
    return _crc32_tables(ptr(buf) + start, end - start)


def crc32_ranges(const uint8_t[::1] buf, starts, ends):
    cdef const int64_t[::1] lo = np.ascontiguousarray(starts, np.int64)
    cdef const int64_t[::1] hi = np.ascontiguousarray(ends, np.int64)
    cdef Py_ssize_t n = lo.shape[0], i, size = buf.shape[0]
    if hi.shape[0] != n:
        raise ValueError("starts and ends differ in length")
    for i in range(n):
        if lo[i] < 0 or hi[i] < lo[i] or hi[i] > size:
            raise ValueError(f"range [{lo[i]}, {hi[i]}) outside a buffer of {size} bytes")
    sums = np.empty(n, np.uint32)
    cdef uint32_t[::1] s = sums
    if n:
        with nogil:
            _crc32_many(ptr(buf), &lo[0], &hi[0], n, &s[0])
    return sums.astype(np.int64)


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


cdef inline int64_t _framed(const uint8_t *b, Py_ssize_t size, Py_ssize_t pos) noexcept nogil:
    """The end of the message at ``pos`` if its size, magic and size-for-magic checks pass
    (the reference decoder's checks before the CRC's), else -1."""
    cdef int64_t length, magic
    if size - pos < 17:
        return -1
    length = read_i32(b + pos + 8)
    magic = b[pos + 16]
    if magic > 1 or length < (14 if magic == 0 else 22):
        return -1
    if pos + 12 + length > size:
        return -1
    return pos + 12 + length


cdef inline bint _message(const uint8_t *b, Py_ssize_t size, Py_ssize_t pos, bint verify,
                          uint32_t crc, int64_t[:, ::1] out, Py_ssize_t i) noexcept nogil:
    """Decode the message at ``pos`` (its CRC-32 ``crc``, when ``verify``) into column ``i`` of
    ``out``; False when malformed."""
    cdef int64_t mend = _framed(b, size, pos), magic, cursor, stored
    if mend < 0:
        return False
    stored = read_i32(b + pos + 12) & <int64_t>0xFFFFFFFF
    if verify and crc != stored:
        return False
    magic = b[pos + 16]
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


cdef Py_ssize_t _read_block(const uint8_t *b, Py_ssize_t size, const int64_t *pos, Py_ssize_t n,
                            bint verify, int64_t[:, ::1] out, Py_ssize_t first) noexcept nogil:
    """Decode the messages at ``pos[:n]`` (``n`` <= BLOCK) into columns ``first``...: framed,
    then checksummed together, then decoded in order up to the first malformed one; the count
    decoded."""
    cdef int64_t lo[BLOCK]
    cdef int64_t hi[BLOCK]
    cdef uint32_t crcs[BLOCK]
    cdef Py_ssize_t framed = 0, i
    cdef int64_t mend
    while framed < n:
        mend = _framed(b, size, pos[framed])
        if mend < 0:
            break
        lo[framed] = pos[framed] + 16
        hi[framed] = mend
        framed += 1
    if verify:
        _crc32_many(b, lo, hi, framed, crcs)
    for i in range(framed):
        if not _message(b, size, pos[i], verify, crcs[i], out, first + i):
            return i
    return framed


def read_messages(const uint8_t[::1] buf, positions, bint verify):
    cdef const int64_t[::1] pos = np.ascontiguousarray(positions, np.int64)
    cdef Py_ssize_t n = pos.shape[0], i = 0, size = buf.shape[0], step, done
    out = np.empty((N_FIELDS, n), np.int64)
    cdef int64_t[:, ::1] o = out
    cdef const uint8_t *b = ptr(buf)
    for i in range(n):
        if pos[i] < 0 or pos[i] > size:
            raise ValueError(f"position {pos[i]} outside a buffer of {size} bytes")
    i = 0
    with nogil:
        while i < n:
            step = n - i if n - i < BLOCK else BLOCK
            done = _read_block(b, size, &pos[i], step, verify, o, i)
            i += done
            if done < step:
                break
    return out, i


def walk_inner(const uint8_t[::1] buf, bint verify):
    cdef Py_ssize_t size = buf.shape[0], pos = 0, framed = 0, count = 0, step, done, i
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
    starts = np.empty(framed, np.int64)
    cdef int64_t[:, ::1] o = out
    cdef int64_t[::1] at = starts
    with nogil:
        pos = 0
        for i in range(framed):  # the positions pass 1 framed (checked again: costs nothing)
            if size - pos < 12:
                framed = i
                break
            at[i] = pos
            pos += 12 + read_i32(b + pos + 8)
        # Kafka ends the iteration at a message that runs past the end (a short read); one
        # that declares fewer than 14 bytes is bad
        bad = size - pos >= 12 and read_i32(b + pos + 8) < 14
        while count < framed:
            step = framed - count if framed - count < BLOCK else BLOCK
            done = _read_block(b, size, &at[count], step, verify, o, count)
            for i in range(count, count + done):
                if o[3, i] & 0x07:  # a compressed inner message
                    done = i - count
                    break
            count += done
            if done < step:
                bad = True
                break
        pos = at[count] if count < framed else pos
    return out[:, :count], bad, pos
