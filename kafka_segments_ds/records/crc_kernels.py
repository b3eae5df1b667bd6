"""CRC-32C (Castagnoli) of many batches in one call, so checksums cost no Python per batch.

Compiled (``_crc.pyx`` over ``_crc32c.h``): on x86-64 with SSE 4.2, found at import through CPU
detection (cpuid), the ``crc32`` instruction does 8 bytes per step in three interleaved streams;
elsewhere a slicing-by-8 table walk does. Without the extension (or with
``KAFKA_SEGMENTS_DS_PURE_PYTHON=1``) the :mod:`crc32c` package computes each range. All paths
give what :func:`crc32c.crc32c` gives (the tests compare them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kafka_segments_ds.records._compiled import load


def crc32c_range(buf: np.ndarray, start: int, end: int) -> np.uint32:
    """CRC-32C of ``buf[start:end]``; a range outside ``buf`` raises ValueError."""
    import crc32c as _crc32c  # the fallback only: its import costs a fresh process ~15 ms

    if start < 0 or end < start or end > buf.shape[0]:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")
    return np.uint32(_crc32c.crc32c(np.ascontiguousarray(buf, np.uint8).data[start:end]))


def crc32c_tables_range(buf: np.ndarray, start: int, end: int) -> np.uint32:
    """:func:`crc32c_range` through the portable table walk (the same here)."""
    return crc32c_range(buf, start, end)


def batch_crcs_serial(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, out: np.ndarray
) -> None:
    """``out[i]`` = CRC-32C of ``buf[starts[i]:ends[i]]`` on the calling thread. A range outside
    ``buf`` gives -1 (all ones as uint32), which matches no stored checksum."""
    import crc32c as _crc32c

    view = np.ascontiguousarray(buf, np.uint8).data
    size = buf.shape[0]
    for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=False)):
        if start < 0 or end < start or end > size:
            out[i] = -1 if out.dtype.kind == "i" else 0xFFFFFFFF
        else:
            out[i] = _crc32c.crc32c(view[start:end])


batch_crcs = batch_crcs_serial
HARDWARE = False

# the pure-Python kernels by name, whichever path runs (tests compare the two)
PURE_PYTHON: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (crc32c_range, crc32c_tables_range, batch_crcs_serial, batch_crcs)
}
_compiled = load("kafka_segments_ds.records._crc")
COMPILED = _compiled is not None
if _compiled is not None:
    crc32c_range = _compiled.crc32c_range
    crc32c_tables_range = _compiled.crc32c_tables_range
    batch_crcs_serial = _compiled.batch_crcs_serial
    batch_crcs = _compiled.batch_crcs
    HARDWARE = _compiled.HARDWARE
