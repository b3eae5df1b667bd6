"""Helpers shared by the ``kafka-segments`` commands: output, paths, argument types."""

from __future__ import annotations

import argparse
import base64
import json
import posixpath
import sys
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any, TextIO

import pyarrow.fs as pafs

from kafka_segments_ds.fs import resolve
from kafka_segments_ds.layout import PartitionLog, SegmentRef, discover, segment_file_name

PROG = "kafka-segments"
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
    """Render a key/value for JSON output: utf8 | hex | base64 | json (utf8 when not JSON)."""
    if data is None:
        return None
    if encoding == "hex":
        return data.hex()
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    if encoding == "json":
        try:
            return json.loads(data)
        except ValueError:
            pass
    return data.decode("utf-8", errors="replace")


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

    return tqdm(items, desc=desc, unit="segment", file=sys.stderr, leave=False)


def partitions(
    paths: list[str], options: dict[str, str]
) -> list[tuple[pafs.FileSystem, PartitionLog]]:
    """Every partition under ``paths``, with the filesystem it lives on."""
    found: list[tuple[pafs.FileSystem, PartitionLog]] = []
    for path in paths:
        filesystem, resolved = resolve(path, options)
        found.extend((filesystem, part) for part in discover(resolved, filesystem))
    return found


def sibling(segment: SegmentRef, suffix: str) -> str:
    """Path of another file of the same segment, e.g. its ``.index``."""
    return posixpath.join(
        posixpath.dirname(segment.path), segment_file_name(segment.base_offset, suffix)
    )


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``--option KEY=VALUE``."""
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value
