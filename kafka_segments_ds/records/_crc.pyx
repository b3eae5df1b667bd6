# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""CRC-32C over numpy byte buffers, compiled (the C is in _crc32c.h).

x86-64 with SSE 4.2 (detected at import with cpuid): the crc32 instruction in three interleaved
streams; elsewhere a slicing-by-8 table walk. Both give what :func:`crc32c.crc32c` gives.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uint32_t

from kafka_segments_ds.records._crc32c cimport (
    ksds_crc32c,
    ksds_crc_init,
    ksds_crc_tables,
    ksds_hardware,
)

import numpy as np

ksds_crc_init()
HARDWARE = bool(ksds_hardware)


cdef inline const uint8_t *_ptr(const uint8_t[::1] buf) noexcept nogil:
    return &buf[0] if buf.shape[0] else <const uint8_t *>0


def crc32c_range(buf, Py_ssize_t start, Py_ssize_t end):
    """CRC-32C of ``buf[start:end]`` (any C-contiguous buffer of bytes); a range outside
    ``buf`` raises ValueError."""
    # the raw buffer protocol: a typed memoryview costs a microsecond, a 64 KiB CRC five
    cdef Py_buffer view
    cdef uint32_t crc
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or end < start or end > view.len:
            raise ValueError(f"range [{start}, {end}) outside a buffer of {view.len} bytes")
        with nogil:
            crc = ksds_crc32c(<const uint8_t *>view.buf + start, <size_t>(end - start))
    finally:
        PyBuffer_Release(&view)
    return np.uint32(crc)


def crc32c_tables_range(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    """:func:`crc32c_range` through the portable table walk, whatever the CPU (for tests)."""
    if start < 0 or end < start or end > buf.shape[0]:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")
    return np.uint32(ksds_crc_tables(_ptr(buf) + start, <size_t>(end - start)))


def batch_crcs_serial(const uint8_t[::1] buf, starts, ends, out):
    """``out[i]`` = CRC-32C of ``buf[starts[i]:ends[i]]``; a range outside ``buf`` gives -1
    (all ones), which matches no stored checksum. ``out`` is int64 or uint32."""
    cdef const int64_t[:] s = np.asarray(starts, np.int64)
    cdef const int64_t[:] e = np.asarray(ends, np.int64)
    cdef Py_ssize_t n = s.shape[0], i, size = buf.shape[0]
    if e.shape[0] < n or out.shape[0] < n:
        raise ValueError("starts, ends and out differ in length")
    cdef int64_t[:] out64
    cdef uint32_t[:] out32
    cdef bint wide = out.dtype == np.int64
    if wide:
        out64 = out
    else:
        out32 = out
    cdef const uint8_t *base = _ptr(buf)
    cdef int64_t value
    with nogil:
        for i in range(n):
            if s[i] < 0 or e[i] < s[i] or e[i] > size:
                value = -1
            else:
                value = ksds_crc32c(base + s[i], <size_t>(e[i] - s[i]))
            if wide:
                out64[i] = value
            else:
                out32[i] = <uint32_t>value


batch_crcs = batch_crcs_serial  # one thread: see kernels.use_threads
