"""Columnar kernels for legacy (magic 0/1) messages: many messages decoded in one call.

A message's fields go to column ``i`` of an int64 array of :data:`N_FIELDS` rows
(:data:`FIELDS`): its position in the buffer, offset field, magic, attributes byte (signed, as
the reference decoder reads it), timestamp (-1 for magic 0), and the position and length of its
key and value (length -1: null, position 0). The checks are the reference decoder's
(:func:`kafka_segments_ds.records.legacy.decode_legacy_message`): the first message that fails
one stops the walk, and the caller asks the reference decoder for the error, so both paths
raise the same one.

* :func:`crc32_ranges`: the CRC-32 of many ranges (the checksums of legacy entries).
* :func:`read_messages`: the messages at given positions (a window's run of legacy entries).
* :func:`walk_inner`: the messages one after another from the start of a wrapper's
  decompressed payload, ending as Kafka does at a message that runs past the end; an inner
  message that is malformed or compressed stops the walk as bad.

Compiled (``_legacy.pyx``; CRC-32 of 1 KiB and more by zlib's ``crc32``, found and checked at
load time, else a slicing-by-8 table walk); without the extension, or with
``KAFKA_SEGMENTS_DS_PURE_PYTHON=1``, the pure-Python versions below run (the tests compare them).
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from kafka_segments_ds.records._compiled import load

FIELDS = ("position", "offset", "magic", "attributes", "timestamp", "kpos", "klen", "vpos", "vlen")
N_FIELDS = len(FIELDS)
POSITION, OFFSET, MAGIC, ATTRIBUTES, TIMESTAMP, KPOS, KLEN, VPOS, VLEN = range(N_FIELDS)
MIN_INNER_ENTRY = 26  # 12 bytes of offset and size, and a magic-0 message of 14


def _blob(b: memoryview, cursor: int, mend: int) -> tuple[int, int, int]:
    """(position, length, next position) of an int32-length field; next -1 when malformed."""
    if cursor + 4 > mend:
        return 0, 0, -1
    n = int.from_bytes(b[cursor : cursor + 4], "big", signed=True)
    cursor += 4
    if n < 0:
        return (0, -1, cursor) if n == -1 else (0, 0, -1)
    if cursor + n > mend:
        return 0, 0, -1
    return cursor, n, cursor + n


def _message(b: memoryview, pos: int, verify: bool) -> tuple[int, ...] | None:
    """The fields of the message at ``pos``, or None when it is malformed."""
    size = len(b)
    if size - pos < 17:
        return None
    length = int.from_bytes(b[pos + 8 : pos + 12], "big", signed=True)
    magic = b[pos + 16]
    if magic > 1 or length < (14 if magic == 0 else 22):
        return None
    mend = pos + 12 + length
    if mend > size:
        return None
    stored = int.from_bytes(b[pos + 12 : pos + 16], "big")
    if verify and zlib.crc32(b[pos + 16 : mend]) != stored:
        return None
    offset = int.from_bytes(b[pos : pos + 8], "big", signed=True)
    timestamp = -1 if magic == 0 else int.from_bytes(b[pos + 18 : pos + 26], "big", signed=True)
    kpos, klen, cursor = _blob(b, pos + (18 if magic == 0 else 26), mend)
    if cursor < 0:
        return None
    vpos, vlen, cursor = _blob(b, cursor, mend)
    if cursor != mend:
        return None
    attributes = b[pos + 17] - (256 if b[pos + 17] > 127 else 0)  # signed, as the reference's
    return pos, offset, magic, attributes, timestamp, kpos, klen, vpos, vlen


def crc32_range(buf: np.ndarray, start: int, end: int) -> int:
    """CRC-32 (IEEE) of ``buf[start:end]``; a range outside ``buf`` raises ValueError."""
    if start < 0 or end < start or end > buf.shape[0]:
        raise ValueError(f"range [{start}, {end}) outside a buffer of {buf.shape[0]} bytes")
    return zlib.crc32(np.ascontiguousarray(buf, np.uint8).data[start:end])


def crc32_tables_range(buf: np.ndarray, start: int, end: int) -> int:
    """:func:`crc32_range` through the compiled table walk (the one zlib's replaces); pure
    Python: the same as crc32_range."""
    return crc32_range(buf, start, end)


def crc32_ranges(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """CRC-32 of each ``buf[starts[i]:ends[i]]`` (int64); a range outside ``buf`` raises
    ValueError."""
    if len(starts) != len(ends):
        raise ValueError("starts and ends differ in length")
    return np.array(
        [crc32_range(buf, lo, hi) for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True)],
        np.int64,
    )


def read_messages(buf: np.ndarray, positions: np.ndarray, verify: bool) -> tuple[np.ndarray, int]:
    """(fields, count): the messages at ``positions`` up to the first malformed one, whose index
    is ``count`` (``len(positions)`` when none is). A position outside ``buf`` raises
    ValueError."""
    b = np.ascontiguousarray(buf, np.uint8).data.cast("B")
    listed = np.asarray(positions, np.int64).tolist()
    for p in listed:
        if p < 0 or p > len(b):
            raise ValueError(f"position {p} outside a buffer of {len(b)} bytes")
    out = np.empty((N_FIELDS, len(listed)), np.int64)
    for i, p in enumerate(listed):
        fields = _message(b, p, verify)
        if fields is None:
            return out, i
        out[:, i] = fields
    return out, len(listed)


def walk_inner(buf: np.ndarray, verify: bool) -> tuple[np.ndarray, bool, int]:
    """(fields, bad, stop) of the messages of a decompressed wrapper payload: ``bad`` when the
    walk stopped at a malformed or compressed message (at ``stop``)."""
    b = np.ascontiguousarray(buf, np.uint8).data.cast("B")
    size = len(b)
    columns: list[tuple[int, ...]] = []
    pos = 0
    bad = False
    while size - pos >= 12:
        length = int.from_bytes(b[pos + 8 : pos + 12], "big", signed=True)
        if length < 14:
            bad = True
            break
        if pos + 12 + length > size:
            break
        fields = _message(b, pos, verify)
        if fields is None or fields[ATTRIBUTES] & 0x07:
            bad = True
            break
        columns.append(fields)
        pos += 12 + length
    out = np.array(columns, np.int64).reshape(-1, N_FIELDS).T.copy()
    return out, bad, pos


# the pure-Python kernels by name, whichever path runs (tests compare the two)
PURE_PYTHON: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (crc32_range, crc32_tables_range, crc32_ranges, read_messages, walk_inner)
}


def _zlib_crc32_address() -> int:
    """The address of ``crc32`` in the system's zlib (``libz.so.1``, on Linux the one Python's
    zlib module loads; elsewhere the library ``find_library("z")`` names), or 0 if none is
    found: over 16 KiB and more about twice the speed of the table walk (6.4-6.8 GB/s against
    3.0 on the development machine), slower below ~700 bytes (where the kernels keep the table
    walk); no zlib header needed at build time. The caller checks it against ``zlib.crc32``
    before use."""
    import ctypes
    import ctypes.util

    name = "libz.so.1" if sys.platform.startswith("linux") else ctypes.util.find_library("z")
    if not name:
        return 0
    try:
        return int(ctypes.cast(ctypes.CDLL(name).crc32, ctypes.c_void_p).value or 0)
    except (OSError, AttributeError, TypeError):
        return 0


def _use_zlib_crc32(compiled: Any) -> bool:
    """Hand the compiled kernels zlib's crc32 if one is found and agrees with ``zlib.crc32`` on
    every length around the switch-over (else they keep the table walk)."""
    compiled.use_zlib_crc32(_zlib_crc32_address())
    if not compiled.zlib_crc32_in_use():
        return False
    sample = np.frombuffer(bytes(range(251)) * 40, np.uint8)  # 10,040 bytes
    for length in (1023, 1024, 1025, 4099, 10_040):
        if int(compiled.crc32_range(sample, 0, length)) != zlib.crc32(sample[:length].data):
            compiled.use_zlib_crc32(0)
            return False
    return True


_compiled = load("kafka_segments_ds.records._legacy")
COMPILED = _compiled is not None
ZLIB_CRC32 = False  # the compiled kernels checksum with zlib's crc32
if _compiled is not None:
    ZLIB_CRC32 = _use_zlib_crc32(_compiled)
    crc32_tables_range = _compiled.crc32_tables_range
    crc32_range = _compiled.crc32_range
    crc32_ranges = _compiled.crc32_ranges
    read_messages = _compiled.read_messages
    walk_inner = _compiled.walk_inner
