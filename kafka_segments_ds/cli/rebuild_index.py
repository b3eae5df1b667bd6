"""``kafka-segments rebuild-index``: rewrite ``.index``/``.timeindex`` from the ``.log``."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import pyarrow.fs as pafs

from kafka_segments_ds import index as kidx
from kafka_segments_ds.cli.common import partitions, progress, sibling, write_lines
from kafka_segments_ds.errors import InvalidOptionError, KafkaSegmentsError
from kafka_segments_ds.fs import display_path, read_file
from kafka_segments_ds.layout import INDEX_SUFFIX, TIME_INDEX_SUFFIX, SegmentRef

NAME = "rebuild-index"
SUMMARY = "rebuild .index/.timeindex from the .log"
DESCRIPTION = (
    "Rebuild .index and .timeindex files as a broker's recovery does, replacing them atomically."
)


def add_arguments(rebuild: argparse.ArgumentParser) -> None:
    rebuild.add_argument(
        "--index-interval-bytes", type=int, default=kidx.DEFAULT_INDEX_INTERVAL_BYTES, metavar="N"
    )
    rebuild.add_argument("--dry-run", action="store_true", help="only print what would change")


def write_atomically(path: str, data: bytes) -> None:
    """Temp file in the same directory, fsync, then ``os.replace`` over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def rebuild_segment(
    filesystem: pafs.FileSystem, segment: SegmentRef, interval: int, dry_run: bool
) -> list[str]:
    """Rebuild one segment's ``.index`` and ``.timeindex``; one line per file."""
    log = read_file(filesystem, segment.path).to_pybytes()
    offset_index, time_index = kidx.rebuild_indexes(log, segment.base_offset, interval)
    lines = []
    for suffix, new, size in (
        (INDEX_SUFFIX, offset_index, kidx.OFFSET_ENTRY_SIZE),
        (TIME_INDEX_SUFFIX, time_index, kidx.TIME_ENTRY_SIZE),
    ):
        path = sibling(segment, suffix)
        info = filesystem.get_file_info(path)
        old = read_file(filesystem, path).to_pybytes() if info.type == pafs.FileType.File else None
        before = "missing" if old is None else f"{len(old) // size} entries"
        shown = display_path(filesystem, path)
        if old == new:
            lines.append(f"unchanged {shown}: {len(new) // size} entries")
            continue
        if not dry_run:
            write_atomically(path, new)
        verb = "would write" if dry_run else "wrote"
        lines.append(f"{verb} {shown}: {before} -> {len(new) // size} entries")
    return lines


def run(args: argparse.Namespace) -> int:
    work: list[tuple[pafs.FileSystem, SegmentRef]] = []
    for filesystem, part in partitions(args.paths, args.option):
        if not isinstance(filesystem, pafs.LocalFileSystem):
            raise InvalidOptionError("rebuild-index writes local files only")
        work.extend((filesystem, segment) for segment in part.segments)
    errors = 0
    for filesystem, segment in progress(work, args.quiet, "rebuild-index"):
        try:
            lines = rebuild_segment(filesystem, segment, args.index_interval_bytes, args.dry_run)
        except KafkaSegmentsError as err:
            errors += 1
            lines = [f"ERROR {display_path(filesystem, segment.path)}: {err}"]
        write_lines(lines, sys.stdout)
    return 1 if errors else 0
