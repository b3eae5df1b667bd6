"""JSON lines written a column at a time, for ``dump --format jsonl``.

Formatting each row with ``json.dumps`` costs microseconds per record and dominates a dump. Here
each column is a *piece*: integers, UTF-8 strings to escape, or ready-made fragments, read
straight from the Arrow buffers. The compiled kernels of :mod:`.jsonl_kernels` size every row,
then write each piece into one output buffer. Only what has no bulk form (headers,
``--key/--value base64|json|escaped``, byte strings that are not UTF-8) is formatted per row with
``json.dumps`` and then copied in as a ready-made fragment. The output is byte for byte what
``json.dumps(row, ensure_ascii=False)`` gives for the same row.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_segments_ds.cli import jsonl_kernels as J
from kafka_segments_ds.cli.common import bool_values, int64_values, render_bytes, valid_flags

_LINE_END = np.frombuffer(b"}\n", np.uint8)
_EMPTY = np.empty(0, np.uint8)


@dataclass(frozen=True, slots=True)
class Piece:
    """One column's fragments: ``int`` (values), ``text`` (UTF-8 to escape), ``raw`` (JSON
    fragments as they are) or ``hex`` (bytes to show as quoted hex digits)."""

    kind: str
    values: np.ndarray  # int64 values, or the offsets into ``data``
    data: np.ndarray
    valid: np.ndarray  # bool per row


def jsonl_bytes(arrow_batch: pa.RecordBatch, key: str, value: str) -> memoryview:
    """The rows of ``arrow_batch`` as UTF-8 JSON lines (each ending in a newline).

    ``key``/``value`` are the renderings of those byte columns (utf8 | hex | base64 | json);
    ``timestamp`` is written as epoch milliseconds, as in the per-row output.
    """
    n = arrow_batch.num_rows
    if n == 0:
        return memoryview(b"")
    lengths = np.full(n, _LINE_END.size, np.int64)
    parts = []
    for i, name in enumerate(arrow_batch.schema.names):
        label = ("{" if i == 0 else ", ") + json.dumps(name) + ": "
        literal = np.frombuffer(label.encode(), np.uint8)
        piece = column_piece(name, arrow_batch.column(name), key if name == "key" else value)
        piece_lengths = _lengths(piece)
        lengths += literal.size + piece_lengths
        parts.append((literal, piece, piece_lengths))
    cursor = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1], out=cursor[1:])
    out = np.empty(int(cursor[-1] + lengths[-1]), np.uint8)
    for literal, piece, piece_lengths in parts:
        J.write_literal(literal, out, cursor)
        _write(piece, piece_lengths, out, cursor)
    J.write_literal(_LINE_END, out, cursor)
    return out.data  # the array's buffer, without a copy


def column_piece(name: str, column: pa.Array, encoding: str) -> Piece:
    """How ``column`` is written: ``encoding`` applies to binary columns."""
    kind = column.type
    if name == "timestamp":
        # microseconds in Arrow, epoch milliseconds in the output (Arrow's division truncates)
        micros = int64_values(column)
        millis = micros // 1000
        millis += (micros < 0) & (millis * 1000 != micros)
        return Piece("int", millis, _EMPTY, valid_flags(column))
    if pa.types.is_integer(kind):
        return Piece("int", int64_values(column), _EMPTY, valid_flags(column))
    if pa.types.is_boolean(kind):
        return _booleans_piece(column)
    if pa.types.is_string(kind):
        return _buffers_piece("text", column)
    if pa.types.is_binary(kind):
        if encoding == "hex":
            return _buffers_piece("hex", column)
        if encoding in ("utf8", "escaped"):
            try:
                pc.cast(column, pa.string())  # only validates: the kernels escape valid UTF-8
            except pa.ArrowInvalid:  # not UTF-8: Python's replacement rules, per row
                return _per_row(
                    column, lambda v: json.dumps(render_bytes(v, encoding), ensure_ascii=False)
                )
            piece = _buffers_piece("text", column)
            if encoding == "escaped" and _has_backslash(piece):  # (doubled: render_bytes)
                return _per_row(
                    column, lambda v: json.dumps(render_bytes(v, encoding), ensure_ascii=False)
                )
            return piece
        if encoding == "base64":
            return _per_row(column, lambda v: '"' + base64.b64encode(v).decode("ascii") + '"')
        return _per_row(column, lambda v: json.dumps(render_bytes(v, encoding), ensure_ascii=False))
    return _per_row(column, lambda v: json.dumps(_plain(v, encoding), ensure_ascii=False))


def _lengths(piece: Piece) -> np.ndarray:
    if piece.kind == "int":
        return J.int_lengths(piece.values, piece.valid)
    if piece.kind == "text":
        return J.escaped_lengths(piece.values, piece.data, piece.valid)
    return J.raw_lengths(piece.values, piece.valid, piece.kind == "hex")


def _write(piece: Piece, lengths: np.ndarray, out: np.ndarray, cursor: np.ndarray) -> None:
    if piece.kind == "int":
        J.write_ints(piece.values, piece.valid, out, cursor)
    elif piece.kind == "text":
        J.write_escaped(piece.values, piece.data, piece.valid, lengths, out, cursor)
    else:
        J.write_raw(piece.values, piece.data, piece.valid, piece.kind == "hex", out, cursor)


def _buffers_piece(kind: str, column: pa.Array) -> Piece:
    """A piece over the offsets and data buffers of a binary or string array (no copy)."""
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, len(column) + 1, column.offset * 4)
    data = _EMPTY if buffers[2] is None else np.frombuffer(buffers[2], np.uint8)
    return Piece(kind, offsets, data, valid_flags(column))


def _has_backslash(piece: Piece) -> bool:
    """Whether the values of a text piece hold a backslash."""
    if piece.values.shape[0] < 2:
        return False
    return bool((piece.data[int(piece.values[0]) : int(piece.values[-1])] == 0x5C).any())


def _per_row(column: pa.Array, render: Callable[[Any], str]) -> Piece:
    """Each row rendered by Python (``pa.array`` over the texts would import pandas)."""
    texts = [None if v is None else render(v).encode() for v in column.to_pylist()]
    offsets = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(np.fromiter((0 if t is None else len(t) for t in texts), np.int64), out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise OverflowError("a batch's rendered rows exceed 2 GiB")
    data = np.frombuffer(b"".join(t for t in texts if t is not None), np.uint8)
    valid = np.fromiter((t is not None for t in texts), np.bool_, len(texts))
    return Piece("raw", offsets.astype(np.int32), data, valid)


_TRUE_FALSE = np.frombuffer(b"true\0false", np.uint8).reshape(2, 5)


def _booleans_piece(column: pa.Array) -> Piece:
    """``true`` / ``false`` per row, from the bitmaps (not ``pc.if_else`` with ``pa.scalar``
    arguments, which imports pandas)."""
    flags = bool_values(column)
    lengths = np.where(flags, 4, 5)
    offsets = np.zeros(flags.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    rows = _TRUE_FALSE[np.where(flags, 0, 1)]
    data = rows[np.arange(5) < lengths[:, None]]
    return Piece("raw", offsets.astype(np.int32), np.ascontiguousarray(data), valid_flags(column))


def _plain(value: Any, encoding: str) -> Any:
    """A nested value (headers) made JSON-ready: byte strings rendered with ``encoding``."""
    if isinstance(value, bytes):
        return render_bytes(value, encoding)
    if isinstance(value, list):
        return [_plain(v, encoding) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, encoding) for k, v in value.items()}
    return value
