# Big-endian reads and Kafka varints over raw byte pointers, for the compiled kernels.
# Every read takes the end of the bytes it may use; a varint that runs past it fails.
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef inline int64_t read_i64(const uint8_t *p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline int64_t read_i32(const uint8_t *p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8)
                     | <uint32_t>p[3])


cdef inline int64_t read_i16(const uint8_t *p) noexcept nogil:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline Py_ssize_t unsigned_varint(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                                       int max_bytes, uint64_t *out) noexcept nogil:
    """Next position, or -1 when the varint runs past ``end`` or over ``max_bytes``."""
    cdef uint64_t raw = 0
    cdef int shift = 0, i
    cdef uint8_t b
    for i in range(max_bytes):
        if pos >= end:
            return -1
        b = buf[pos]
        pos += 1
        raw |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            out[0] = raw
            return pos
        shift += 7
    return -1


cdef inline Py_ssize_t varint(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                              int64_t *value) noexcept nogil:
    """Zigzag varint (int32 range; the bits past 32 of a fifth byte dropped, as Java does)."""
    cdef Py_ssize_t after = short_zigzag(buf, pos, end, value)
    return after if after >= 0 else zigzag_varint(buf, pos, end, 5, value)


cdef inline Py_ssize_t varlong(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                               int64_t *value) noexcept nogil:
    cdef Py_ssize_t after = short_zigzag(buf, pos, end, value)
    return after if after >= 0 else zigzag_varint(buf, pos, end, 10, value)


cdef inline Py_ssize_t short_zigzag(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                                    int64_t *value) noexcept nogil:
    """A one- or two-byte varint (most lengths, deltas and counts), or -1 for the others:
    small, so that it inlines into the loops."""
    cdef int64_t b
    if pos + 1 < end:
        b = buf[pos]
        if b < 0x80:
            value[0] = (b >> 1) ^ -(b & 1)
            return pos + 1
        if buf[pos + 1] < 0x80:
            b = (b & 0x7F) | (<int64_t>buf[pos + 1] << 7)
            value[0] = (b >> 1) ^ -(b & 1)
            return pos + 2
    return -1


cdef inline Py_ssize_t zigzag_varint(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                                     int max_bytes, int64_t *value) noexcept nogil:
    """The general case of varint (``max_bytes`` 5) and varlong (10)."""
    cdef uint64_t raw = 0
    pos = unsigned_varint(buf, pos, end, max_bytes, &raw)
    if pos < 0:
        value[0] = 0
        return -1
    if max_bytes == 5:
        raw &= <uint64_t>0xFFFFFFFF
    value[0] = (<int64_t>(raw >> 1)) ^ -(<int64_t>(raw & 1))
    return pos


cdef inline Py_ssize_t blob(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end,
                            int64_t *length, Py_ssize_t *data) noexcept nogil:
    """Length-prefixed bytes: next position; -1 bad varint, -2 bad length (< -1 or past end).
    ``length`` -1 is null."""
    cdef int64_t n = 0
    pos = varint(buf, pos, end, &n)
    if pos < 0:
        return -1
    if n < -1:
        return -2
    length[0] = n
    data[0] = pos
    if n == -1:
        return pos
    if pos + n > end:
        return -2
    return pos + n


cdef inline const uint8_t *ptr(const uint8_t[::1] buf) noexcept nogil:
    return &buf[0] if buf.shape[0] else <const uint8_t *>0


cdef inline bint offsets_ordered(const void *offsets, bint wide, Py_ssize_t n) noexcept nogil:
    """Arrow offsets[0..n] (int64 when ``wide``, else int32) non-negative, non-decreasing."""
    cdef Py_ssize_t i
    cdef int64_t previous = 0, value
    for i in range(n + 1):
        value = (<const int64_t *>offsets)[i] if wide else (<const int32_t *>offsets)[i]
        if value < previous:
            return False
        previous = value
    return True
