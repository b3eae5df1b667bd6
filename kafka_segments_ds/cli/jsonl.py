"""JSON lines built a column at a time, for ``dump --format jsonl``.

Formatting each row with ``json.dumps`` costs microseconds per record and dominates a dump. Here
every column becomes an Arrow string array of JSON fragments with Arrow compute kernels and
numpy (numbers cast to text, byte strings escaped or hex-encoded in bulk), and the fragments are
joined element-wise into lines. Only what has no bulk form (headers, ``--value json``, byte
strings holding control characters or invalid UTF-8) goes through ``json.dumps`` per row. The
output is byte-for-byte what ``json.dumps(row, ensure_ascii=False)`` gives for the same row.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_segments_ds.cli.common import render_bytes

_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)
# byte -> its two hex digits
_HEX_PAIRS = np.stack([_HEX_DIGITS[np.arange(256) >> 4], _HEX_DIGITS[np.arange(256) & 15]], 1)
_QUOTE = pa.scalar('"')
_NULL = pa.scalar("null")
_CONTROL_LIMIT = 0x20  # json.dumps escapes every character below this
_BACKSLASH, _DOUBLE_QUOTE = 0x5C, 0x22


def jsonl_text(arrow_batch: pa.RecordBatch, key: str, value: str) -> str:
    """The rows of ``arrow_batch`` as JSON lines (each ending in a newline).

    ``key``/``value`` are the renderings of those byte columns (utf8 | hex | base64 | json);
    ``timestamp`` is written as epoch milliseconds, as in the per-row output.
    """
    if arrow_batch.num_rows == 0:
        return ""
    parts: list[pa.Array | pa.Scalar] = []
    for i, name in enumerate(arrow_batch.schema.names):
        column = arrow_batch.column(name)
        encoding = key if name == "key" else value
        parts.append(pa.scalar(("{" if i == 0 else ", ") + json.dumps(name) + ": "))
        parts.append(json_fragments(name, column, encoding))
    parts.append(pa.scalar("}\n"))
    lines = pc.binary_join_element_wise(*parts, "")
    return _concatenated(lines)


def json_fragments(name: str, column: pa.Array, encoding: str) -> pa.Array:
    """The JSON text of each value of ``column`` (``null`` for nulls)."""
    kind = column.type
    if name == "timestamp":
        column = pc.divide(pc.cast(column, pa.int64()), 1000)
        kind = column.type
    if pa.types.is_integer(kind):
        text = pc.cast(column, pa.string())
    elif pa.types.is_boolean(kind):
        text = pc.if_else(column, pa.scalar("true"), pa.scalar("false"))
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        text = _bytes_fragments(column, encoding)
    elif pa.types.is_string(kind):
        text = _string_fragments(column)
    else:
        text = _per_row(column, lambda v: json.dumps(_plain(v, encoding), ensure_ascii=False))
    return pc.fill_null(text, _NULL)


def _bytes_fragments(column: pa.Array, encoding: str) -> pa.Array:
    if encoding == "hex":
        return _quoted(_hex(column))
    if encoding == "base64":
        return _per_row(column, lambda v: '"' + base64.b64encode(v).decode("ascii") + '"')
    if encoding == "json":
        return _per_row(column, lambda v: json.dumps(render_bytes(v, "json"), ensure_ascii=False))
    try:
        text = pc.cast(column, pa.string())
    except pa.ArrowInvalid:  # some value is not UTF-8: Python's replacement rules, per row
        return _per_row(
            column, lambda v: json.dumps(v.decode("utf-8", "replace"), ensure_ascii=False)
        )
    return _string_fragments(text)


def _string_fragments(column: pa.Array) -> pa.Array:
    data = _value_bytes(column)
    if data is not None and np.any(data < _CONTROL_LIMIT):
        return _per_row(column, lambda v: json.dumps(v, ensure_ascii=False))
    if data is None or np.any(data == _BACKSLASH):
        column = pc.replace_substring(column, "\\", "\\\\")
    if data is None or np.any(data == _DOUBLE_QUOTE):
        column = pc.replace_substring(column, '"', '\\"')
    return _quoted(column)


def _quoted(column: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(_QUOTE, column, _QUOTE, "")


def _hex(column: pa.Array) -> pa.Array:
    """Lower-case hex of each byte string, built from the Arrow buffers in one numpy pass."""
    offsets = np.frombuffer(column.buffers()[1], np.int32, len(column) + 1, column.offset * 4)
    data = _value_bytes(column)
    digits = _HEX_PAIRS[data].reshape(-1) if data is not None else np.empty(0, np.uint8)
    rebased = (offsets - offsets[0]) * 2
    text = pa.StringArray.from_buffers(
        len(column), pa.py_buffer(rebased.astype(np.int32)), pa.py_buffer(digits)
    )
    if column.null_count:
        text = pc.if_else(pc.is_null(column), pa.scalar(None, pa.string()), text)
    return text


def _value_bytes(column: pa.Array) -> np.ndarray | None:
    """The bytes of all values of a binary/string array, or None for a layout not handled."""
    if not (pa.types.is_binary(column.type) or pa.types.is_string(column.type)):
        return None
    buffers = column.buffers()
    if buffers[2] is None:
        return np.empty(0, np.uint8)
    offsets = np.frombuffer(buffers[1], np.int32, len(column) + 1, column.offset * 4)
    start, end = int(offsets[0]), int(offsets[-1])
    return np.frombuffer(buffers[2], np.uint8, end - start, start)


def _per_row(column: pa.Array, render: Callable[[Any], str]) -> pa.Array:
    return pa.array([None if v is None else render(v) for v in column.to_pylist()], pa.string())


def _plain(value: Any, encoding: str) -> Any:
    """A nested value (headers) made JSON-ready: byte strings rendered with ``encoding``."""
    if isinstance(value, bytes):
        return render_bytes(value, encoding)
    if isinstance(value, list):
        return [_plain(v, encoding) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, encoding) for k, v in value.items()}
    return value


def _concatenated(lines: pa.Array) -> str:
    """All values of a string array (no nulls) as one string."""
    data = _value_bytes(lines)
    return "" if data is None else data.tobytes().decode("utf-8")
