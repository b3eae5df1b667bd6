"""Kernels that write JSON-lines fragments straight into one output byte buffer.

The writer (:mod:`.jsonl`) first asks each column for the byte length of its fragment in every
row (``*_lengths``), sums them into row start positions, then each column writes its fragments at
a per-row cursor (``write_*``) that advances as it goes. String bytes must be valid UTF-8 (the
caller checks); they are escaped exactly as ``json.dumps(..., ensure_ascii=False)`` does: ``"``
and ``\\``, ``\\b \\f \\n \\r \\t``, and ``\\u00xx`` for the other control characters.

They run compiled (``_jsonl.pyx``); the pure-Python versions here are the fallback when the
extension cannot be imported or ``KAFKA_SEGMENTS_DS_PURE_PYTHON=1`` is set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from kafka_segments_ds.records._compiled import load

_NULL = np.frombuffer(b"null", np.uint8)
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
# For each byte below 0x20 (and for " and \): the character after the backslash, or 0 for \u00xx.
_SHORT_ESCAPES = np.zeros(256, np.uint8)
for _byte, _char in ((8, "b"), (9, "t"), (10, "n"), (12, "f"), (13, "r"), (34, '"'), (92, "\\")):
    _SHORT_ESCAPES[_byte] = ord(_char)
# Bytes an escape adds to each input byte: 1 for \x, 5 for \u00xx, 0 for a plain byte.
_EXTRA = np.zeros(256, np.int64)
_EXTRA[:32] = 5
_EXTRA[_SHORT_ESCAPES != 0] = 1


def escaped_lengths(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Length of each value as a quoted JSON string (``null`` for invalid rows)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.int64)
    for i in range(n):
        start, end = np.int64(offsets[i]), np.int64(offsets[i + 1])
        if not valid[i]:
            out[i] = 4
            continue
        out[i] = end - start + 2 + int(_EXTRA[data[start:end]].sum())
    return out


def write_escaped(
    offsets: np.ndarray,
    data: np.ndarray,
    valid: np.ndarray,
    lengths: np.ndarray,
    out: np.ndarray,
    cursor: np.ndarray,
) -> None:
    """Write each value quoted and escaped; ``lengths`` from :func:`escaped_lengths`."""
    for i in range(offsets.shape[0] - 1):
        p = cursor[i]
        cursor[i] = p + lengths[i]
        if not valid[i]:
            out[p : p + 4] = _NULL
            continue
        start, end = np.int64(offsets[i]), np.int64(offsets[i + 1])
        out[p] = 34
        p += 1
        if lengths[i] == end - start + 2:  # nothing to escape: a plain copy
            for j in range(start, end):
                out[p] = data[j]
                p += 1
            out[p] = 34
            continue
        for j in range(start, end):
            c = data[j]
            if _EXTRA[c] == 0:
                out[p] = c
                p += 1
                continue
            out[p] = 92
            short = _SHORT_ESCAPES[c]
            if short:
                out[p + 1] = short
                p += 2
            else:  # \u00xx
                out[p + 1] = 117
                out[p + 2] = 48
                out[p + 3] = 48
                out[p + 4] = _HEX[c >> 4]
                out[p + 5] = _HEX[c & 15]
                p += 6
        out[p] = 34


def raw_lengths(offsets: np.ndarray, valid: np.ndarray, hex_digits: bool) -> np.ndarray:
    """Length of each value copied as is (or as quoted hex digits); ``null`` for invalid rows."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.int64)
    for i in range(n):
        size = offsets[i + 1] - offsets[i]
        if not valid[i]:
            out[i] = 4
        elif hex_digits:
            out[i] = 2 * size + 2
        else:
            out[i] = size
    return out


def write_raw(
    offsets: np.ndarray,
    data: np.ndarray,
    valid: np.ndarray,
    hex_digits: bool,
    out: np.ndarray,
    cursor: np.ndarray,
) -> None:
    for i in range(offsets.shape[0] - 1):
        p = cursor[i]
        if not valid[i]:
            out[p : p + 4] = _NULL
            cursor[i] = p + 4
            continue
        start, end = offsets[i], offsets[i + 1]
        if hex_digits:
            out[p] = 34
            p += 1
            for j in range(start, end):
                out[p] = _HEX[data[j] >> 4]
                out[p + 1] = _HEX[data[j] & 15]
                p += 2
            out[p] = 34
            p += 1
        else:
            out[p : p + end - start] = data[start:end]
            p += end - start
        cursor[i] = p


def int_lengths(values: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Length of each integer in decimal (with its sign); ``null`` for invalid rows."""
    n = values.shape[0]
    out = np.empty(n, np.int64)
    for i in range(n):
        if not valid[i]:
            out[i] = 4
            continue
        v = values[i]
        size = 1
        if v < 0:
            size += 1
            magnitude = np.uint64(-(v + 1)) + np.uint64(1)  # no overflow at the int64 minimum
        else:
            magnitude = np.uint64(v)
        while magnitude >= np.uint64(10):
            magnitude //= np.uint64(10)
            size += 1
        out[i] = size
    return out


def write_ints(values: np.ndarray, valid: np.ndarray, out: np.ndarray, cursor: np.ndarray) -> None:
    for i in range(values.shape[0]):
        p = cursor[i]
        if not valid[i]:
            out[p : p + 4] = _NULL
            cursor[i] = p + 4
            continue
        v = values[i]
        if v < 0:
            out[p] = 45
            p += 1
            magnitude = np.uint64(-(v + 1)) + np.uint64(1)
        else:
            magnitude = np.uint64(v)
        digits = 1
        rest = magnitude
        while rest >= np.uint64(10):
            rest //= np.uint64(10)
            digits += 1
        for k in range(digits - 1, -1, -1):
            out[p + k] = np.uint8(48 + magnitude % np.uint64(10))
            magnitude //= np.uint64(10)
        cursor[i] = p + digits


def write_literal(literal: np.ndarray, out: np.ndarray, cursor: np.ndarray) -> None:
    size = literal.shape[0]
    for i in range(cursor.shape[0]):
        p = cursor[i]
        out[p : p + size] = literal
        cursor[i] = p + size


# the pure-Python kernels by name, whichever path runs (tests compare the two)
PURE_PYTHON: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        escaped_lengths,
        write_escaped,
        raw_lengths,
        write_raw,
        int_lengths,
        write_ints,
        write_literal,
    )
}
_compiled = load("kafka_segments_ds.cli._jsonl")
COMPILED = _compiled is not None
if _compiled is not None:
    escaped_lengths = _compiled.escaped_lengths
    write_escaped = _compiled.write_escaped
    raw_lengths = _compiled.raw_lengths
    write_raw = _compiled.write_raw
    int_lengths = _compiled.int_lengths
    write_ints = _compiled.write_ints
    write_literal = _compiled.write_literal
