"""Helpers shared by the ``kafka-segments`` commands: output, paths, argument types."""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import posixpath
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds.errors import (
    NoKafkaDataError,
    StorageError,
)
from kafka_segments_ds.fs import display_path, read_file, resolve
from kafka_segments_ds.layout import (
    SWAP_SUFFIX,
    PartitionLog,
    SegmentRef,
    merge_partitions,
    segment_file_name,
)
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.reader.damage import SUMMARY as DAMAGE_SUMMARY
from kafka_segments_ds.selection import (
    PATH_ERRORS,
    check_selection,
    discover_root,
    no_data_message,
    select_partitions,
)
from kafka_segments_ds.tiered import load_private_keys

PROG = "kafka-segments"

# Exit statuses, the same for every command. When several apply, verify reports the first of
# EXIT_UNUSABLE, EXIT_DAMAGED, EXIT_INDEX that occurred.
EXIT_OK = 0
EXIT_DAMAGED = 1  # damaged log data (.log: CRC, framing, offsets, truncated tail)
EXIT_UNUSABLE = 2  # usage error, no Kafka data at PATH, a file that cannot be read
EXIT_INDEX = 3  # only index files are wrong: a broker (or rebuild-index) rebuilds them
EXIT_INTERRUPTED = 130
EXIT_STATUS_HELP = """\
exit status:
  0    ok
  1    damaged log data (.log CRC, framing, offsets, truncated tail)
  2    usage error, no Kafka data at PATH, or a file that cannot be read
  3    only index files (.index/.timeindex/.txnindex) are wrong: rebuild-index fixes them
  130  interrupted"""
# Lines are written in chunks of about this many bytes (one flush per chunk, not per line).
WRITE_CHUNK_BYTES = 1 << 16


class PipeClosed(Exception):
    """The reader of stdout went away (``kafka-segments dump ... | head``)."""


def write_lines(lines: Iterable[str], stream: TextIO) -> None:
    """Write each line; a closed pipe raises :class:`PipeClosed`."""
    write_chunks((line + "\n" for line in lines), stream)


def write_chunks(chunks: Iterable[str | bytes | memoryview], stream: TextIO) -> None:
    """Write text chunks (each ends with a newline), flushing about every 64 KiB.

    Small chunks are gathered so that ``dump`` does not pay a system call per line, yet a slow
    producer of lines (a progress-sized read) still shows its output as it goes. Binary chunks
    (UTF-8) go to the stream's binary buffer when it has one, skipping a decode.
    """
    pending: list[bytes | memoryview] = []
    size = 0
    try:
        for chunk in chunks:
            data = chunk.encode() if isinstance(chunk, str) else chunk
            if len(data) >= WRITE_CHUNK_BYTES:  # big enough on its own: no copy into a join
                _write_bytes(b"".join(pending), stream)
                _write_bytes(data, stream)
                pending.clear()
                size = 0
                continue
            pending.append(data)
            size += len(data)
            if size >= WRITE_CHUNK_BYTES:
                _write_bytes(b"".join(pending), stream)
                pending.clear()
                size = 0
        _write_bytes(b"".join(pending), stream)
    except BrokenPipeError as err:
        raise PipeClosed from err


def _write_bytes(data: bytes | memoryview, stream: TextIO) -> None:
    binary = getattr(stream, "buffer", None)
    if binary is None:
        stream.write(bytes(data).decode())
        stream.flush()
    else:
        stream.flush()  # text written before must come first
        binary.write(data)
        binary.flush()


def render_bytes(data: bytes | None, encoding: str) -> Any:
    """Render a key/value for JSON output: utf8 (bad bytes become U+FFFD) | escaped (bad bytes
    as ``\\xNN``, a backslash as two) | hex | base64 | json (embedded when the bytes parse as
    JSON, or the bytes after Confluent's 5-byte wire-format header do, else utf8).

    ``None`` (a tombstone, a null key) stays ``None``; bytes never render as JSON null, so the
    four bytes ``null`` under ``json`` are the string ``"null"``.
    """
    if data is None:
        return None
    if encoding == "hex":
        return data.hex()
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    if encoding == "escaped":
        # a backslash doubled first: the text ``\xff`` shows as ``\\xff``, the byte 0xFF as
        # ``\xff`` (0x5C is never part of a multi-byte UTF-8 sequence)
        return data.replace(b"\\", b"\\\\").decode("utf-8", errors="backslashreplace")
    if encoding == "json":
        # a value in Confluent's wire format (0x00, a 4-byte schema id, JSON): its JSON
        for start in (0, 5) if data[:1] == b"\x00" else (0,):
            parsed = _json_or_none(data[start:])
            if parsed is not None:
                return parsed
    return data.decode("utf-8", errors="replace")


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _json_or_none(data: bytes) -> Any:
    """``data`` parsed as JSON that JSON output can hold again (no NaN or infinity, no lone
    surrogate, nesting Python can write back), else None."""
    try:
        parsed = json.loads(data, parse_constant=_not_json)
        # written inside a row, or a table cell's list of headers: a few levels deeper
        json.dumps([[[[parsed]]]], ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError):
        return None
    return parsed


def iso(ms: int | None) -> str:
    """Epoch milliseconds as an ISO-8601 UTC string (``-`` for none)."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def cut(text: str, width: int) -> str:
    """``text`` shortened to ``width`` characters with an ellipsis."""
    return text if len(text) <= width else text[: width - 1] + "…"


def progress(items: list[Any], quiet: bool, desc: str) -> Iterable[Any]:
    """A tqdm bar on stderr, only when stderr is a terminal and not ``--quiet``."""
    if quiet or not sys.stderr.isatty():
        return items
    from tqdm import tqdm

    bar: Iterable[Any] = tqdm(items, desc=desc, unit="segment", file=sys.stderr, leave=False)
    return bar


def worst_status(statuses: Iterable[int]) -> int:
    """The exit status for several findings: unusable, then damaged, then index-only."""
    seen = set(statuses)
    for status in (EXIT_UNUSABLE, EXIT_DAMAGED, EXIT_INDEX):
        if status in seen:
            return status
    return EXIT_OK


def storage_error(err: OSError, path: str | None) -> StorageError:
    """An OS error (not found, permission denied, ...) as our own error naming ``path``."""
    if isinstance(err, StorageError):
        return err
    reason = err.strerror or str(err) or type(err).__name__
    return StorageError(reason[:1].lower() + reason[1:], path or None)


def read_bytes(filesystem: pafs.FileSystem, path: str) -> bytes:
    """A whole file; OS errors become :class:`StorageError`."""
    try:
        data: bytes = read_file(filesystem, path).to_pybytes()
        return data
    except OSError as err:
        raise storage_error(err, display_path(filesystem, path)) from err


def partitions(
    paths: list[str], options: dict[str, str]
) -> list[tuple[pafs.FileSystem, PartitionLog]]:
    """Every partition under ``paths``, with the filesystem it lives on; each segment once,
    however many of the paths reach it.

    Raises :class:`NoKafkaDataError` for a path without a segment (an empty directory, a
    directory of other files, the parent of a log dir) and :class:`StorageError` for one that
    cannot be listed: pointed at the wrong mount, a check must not pass.
    """
    found: list[tuple[pafs.FileSystem, PartitionLog]] = []
    layout, keys = _tiered_options(options)
    for path in paths:
        filesystem, resolved = resolve(path, options)
        try:
            # tiered-storage buckets come with a view serving their segments as plain ones
            filesystem, parts = discover_root(
                filesystem, resolved, layout, keys, options, check=False
            )
        except PATH_ERRORS as err:
            raise storage_error(err, path) from err
        if not any(part.segments for part in parts):
            raise NoKafkaDataError(no_data_message(path, None))
        found.extend((filesystem, part) for part in parts)
    if len(paths) < 2:
        return found
    where = {part.directory: filesystem for filesystem, part in reversed(found)}
    local = all(isinstance(filesystem, pafs.LocalFileSystem) for filesystem, _ in found)
    location = os.path.realpath if local else None
    merged = merge_partitions((part for _, part in found), location)
    return [(where[part.directory], part) for part in merged]


def selected_partitions(
    paths: list[str], options: dict[str, str]
) -> list[tuple[pafs.FileSystem, PartitionLog]]:
    """:func:`partitions`, narrowed to those ``subscribe`` / ``subscribePattern`` / ``assign``
    select (in (topic, partition) order)."""
    return select(partitions(paths, options), options)


def select(
    found: list[tuple[pafs.FileSystem, PartitionLog]], options: dict[str, str]
) -> list[tuple[pafs.FileSystem, PartitionLog]]:
    """The partitions of ``found`` that ``subscribe`` / ``subscribePattern`` / ``assign``
    select, in (topic, partition) order; a selection naming what is not there is refused as
    a read refuses it (:func:`kafka_segments_ds.selection.check_selection`)."""
    parsed = parse_read_options(options)
    parts = [part for _, part in found]
    chosen = select_partitions(parts, parsed)
    check_selection(parts, chosen, parsed)
    where = {id(part): filesystem for filesystem, part in found}
    return [(where[id(part)], part) for part in chosen]


def _tiered_options(options: dict[str, str]) -> tuple[str, dict[str, bytes]]:
    """The ``layout`` and ``privateKeys`` of ``--option`` (the PEM files read)."""
    wanted = {k: v for k, v in options.items() if k.lower() in ("layout", "privatekeys")}
    parsed = parse_read_options(wanted)
    keys = load_private_keys(dict(parsed.private_keys)) if parsed.private_keys else {}
    return parsed.layout, keys


def sibling(segment: SegmentRef, suffix: str) -> str:
    """Path of another file of the same segment, e.g. its ``.index`` (``.index.swap`` for the
    ``.log.swap`` of an interrupted replacement, read in place of the segments it replaces)."""
    if segment.path.endswith(SWAP_SUFFIX):
        suffix += SWAP_SUFFIX
    return posixpath.join(
        posixpath.dirname(segment.path), segment_file_name(segment.base_offset, suffix)
    )


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``--option KEY=VALUE``."""
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


class _Collect(logging.Handler):
    def __init__(self, summaries: bool) -> None:
        super().__init__(logging.WARNING)
        self.summaries = summaries
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.summaries or not getattr(record, DAMAGE_SUMMARY, False):
            self.messages.append(record.getMessage())


@contextlib.contextmanager
def reader_warnings(summaries: bool = True) -> Iterator[list[str]]:
    """Collect the package's warnings (dropped entries, truncated tails) instead of letting
    Python print them to stderr, so a command reports each one once, where it belongs.
    ``summaries=False``: without the reader's per-task DROPMALFORMED summary lines."""
    handler = _Collect(summaries)
    logger = logging.getLogger("kafka_segments_ds")
    logger.addHandler(handler)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)


def int64_values(column: pa.Array) -> np.ndarray:
    """The values of an integer (or timestamp) column as int64, read from its data buffer; a
    null row's value is whatever the buffer holds there (the writers skip it). Not through
    ``to_numpy`` or ``pc.fill_null``: pyarrow imports pandas for either (0.25 s of a
    ``dump`` or ``verify``)."""
    width = column.type.bit_width // 8
    signed = not pa.types.is_integer(column.type) or pa.types.is_signed_integer(column.type)
    dtype = np.dtype(f"{'i' if signed else 'u'}{width}")  # Arrow buffers: native byte order
    raw = np.frombuffer(column.buffers()[1], dtype, len(column), column.offset * width)
    return raw.astype(np.int64)


def valid_flags(column: pa.Array) -> np.ndarray:
    """A flag per row: not null. From the validity bitmap (a boolean array's ``to_numpy``
    imports pandas)."""
    n = len(column)
    if column.null_count == 0:
        return np.ones(n, np.bool_)
    bitmap = column.buffers()[0]
    if bitmap is None:  # the null type: no bitmap, every row null
        return np.zeros(n, np.bool_)
    return _bits(bitmap, column.offset, n)


def bool_values(column: pa.Array) -> np.ndarray:
    """The values of a boolean column as a numpy bool array, from its data bitmap (a null
    row's value is whatever the bitmap holds there)."""
    return _bits(column.buffers()[1], column.offset, len(column))


def _bits(bitmap: pa.Buffer, offset: int, n: int) -> np.ndarray:
    """Bits ``[offset, offset + n)`` of an Arrow bitmap (least significant bit first)."""
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), count=offset + n, bitorder="little")
    return bits[offset:].astype(np.bool_)


def int_array(values: list[int | None], arrow_type: pa.DataType) -> pa.Array:
    """A signed integer array of ``values`` (None: null), built from buffers: ``pa.array``
    over Python objects imports pandas."""
    valid = np.fromiter((v is not None for v in values), np.bool_, len(values))
    dtype = np.dtype(f"i{arrow_type.bit_width // 8}")
    data = np.fromiter((0 if v is None else v for v in values), dtype, len(values))
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(arrow_type, len(values), [bitmap, pa.py_buffer(data)])
