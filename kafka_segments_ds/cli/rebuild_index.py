"""``kafka-segments rebuild-index``: rewrite ``.index``/``.timeindex`` from the ``.log``.

As a broker's recovery does (FORMAT §7.2): entries are validated (framing and CRC) from the start
of the segment; the indexes are built for the valid entries. A ``.log`` with bytes past its last
valid entry (a torn or truncated tail, a damaged batch) is only cut with ``--truncate``, and only
in the partition's last segment (a broker would also delete every later segment: that is left
to the operator); ``--dry-run --truncate`` shows what would be cut. A zero-filled (preallocated)
tail is kept and not indexed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import index as kidx
from kafka_segments_ds.cli.common import (
    EXIT_DAMAGED,
    EXIT_OK,
    EXIT_UNUSABLE,
    non_negative_int,
    partitions,
    progress,
    read_bytes,
    sibling,
    storage_error,
    worst_status,
    write_lines,
)
from kafka_segments_ds.cli.log_scan import WINDOW_BYTES, LogScan, scan_log
from kafka_segments_ds.errors import InvalidOptionError, KafkaSegmentsError
from kafka_segments_ds.fs import display_path
from kafka_segments_ds.layout import INDEX_SUFFIX, TIME_INDEX_SUFFIX, SegmentRef
from kafka_segments_ds.records.batches import EntryTable

NAME = "rebuild-index"
SUMMARY = "rebuild .index/.timeindex from the .log"
DESCRIPTION = (
    "Rebuild .index and .timeindex files as a broker's recovery does, replacing them "
    "atomically. A .log with damaged or cut-off bytes after its valid entries is reported (exit "
    "1); --truncate cuts the partition's last segment there as a broker's recovery does (try "
    "--dry-run --truncate first)."
)


def add_arguments(rebuild: argparse.ArgumentParser) -> None:
    rebuild.add_argument(
        "--index-interval-bytes",
        type=non_negative_int,
        default=kidx.DEFAULT_INDEX_INTERVAL_BYTES,
        metavar="N",
        help="bytes between index entries, as the broker's index.interval.bytes (default "
        f"{kidx.DEFAULT_INDEX_INTERVAL_BYTES}; 0 indexes every entry)",
    )
    rebuild.add_argument("--dry-run", action="store_true", help="only print what would change")
    rebuild.add_argument(
        "--truncate",
        action="store_true",
        help="cut the last segment's .log after its last valid entry (a broker's recovery), "
        "and drop .txnindex entries past it",
    )


def write_atomically(path: str, data: bytes) -> None:
    """Temp file in the same directory, fsync, then ``os.replace`` over ``path``. The file
    keeps the permissions of the one it replaces; a new one gets 0666 under the umask (0644
    with the usual 022), as a broker's files."""
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    current = os.umask(0o022)  # the only way to read it; set back at once
    os.umask(current)
    return current


def valid_prefix(scan: LogScan) -> tuple[EntryTable, int, str | None]:
    """The entries a broker's recovery keeps, the byte length they cover, and why the rest
    (if any) is not kept: framing stops, or the first entry whose CRC does not match (``scan``
    walked with checksums)."""
    if scan.bad_checksums is None:
        raise ValueError("valid_prefix needs a scan_log(..., checksums=True)")
    table = scan.table
    if scan.bad_checksums:
        position = scan.bad_checksums[0]
        kept = _first(table, int(np.searchsorted(table.positions, position)))
        return kept, position, f"the entry at byte position {position} fails its CRC"
    if table.valid_bytes == scan.size:
        return table, scan.size, None
    if scan.zero_tail:
        return table, table.valid_bytes, "zero-filled tail"
    return table, table.valid_bytes, f"no whole entry at byte position {table.valid_bytes}"


def _first(table: EntryTable, count: int) -> EntryTable:
    return EntryTable(
        table.positions[:count],
        table.sizes[:count],
        table.magics[:count],
        table.last_offsets[:count],
        table.max_timestamps[:count],
        int(table.positions[count]) if count < len(table.positions) else table.valid_bytes,
        table.outcome,
    )


def rebuild_segment(
    filesystem: pafs.FileSystem,
    segment: SegmentRef,
    interval: int,
    dry_run: bool,
    truncate: bool = False,
    is_last: bool = True,
) -> tuple[list[str], int]:
    """Rebuild one segment's ``.index`` and ``.timeindex``; one line per file, exit status."""
    shown_log = display_path(filesystem, segment.path)
    # the size now, not as listed: what recovery would keep of the file as it is (local only)
    segment = replace(segment, size=os.stat(segment.path).st_size)
    scan = scan_log(filesystem, segment, shown_log, WINDOW_BYTES, checksums=True, markers=False)
    table, end, why = valid_prefix(scan)
    lines: list[str] = []
    if why is not None and why != "zero-filled tail":
        cut = scan.size - end
        if not truncate:
            return [
                f"ERROR {shown_log}: {cut} bytes from byte position {end} are not valid "
                f"entries ({why}); a broker's recovery truncates the .log there: see it with "
                "--dry-run --truncate, then run with --truncate"
            ], EXIT_DAMAGED
        if not is_last:
            return [
                f"ERROR {shown_log}: {cut} bytes from byte position {end} are not valid "
                f"entries ({why}), but this is not the partition's last segment: a broker would "
                "truncate here and delete every later segment; not done"
            ], EXIT_DAMAGED
        verb = "would truncate" if dry_run else "truncated"
        lines.append(f"{verb} {shown_log}: {scan.size} -> {end} bytes ({why})")
        if not dry_run:
            os.truncate(segment.path, end)
        lines += _truncate_txn_index(filesystem, segment, table, dry_run)
    offset_index, time_index = kidx.build_indexes(
        table.positions,
        table.sizes,
        table.last_offsets,
        table.max_timestamps,
        segment.base_offset,
        interval,
    )
    for suffix, new, size in (
        (INDEX_SUFFIX, offset_index, kidx.OFFSET_ENTRY_SIZE),
        (TIME_INDEX_SUFFIX, time_index, kidx.TIME_ENTRY_SIZE),
    ):
        path = sibling(segment, suffix)
        info = filesystem.get_file_info(path)
        old = read_bytes(filesystem, path) if info.type == pafs.FileType.File else None
        before = "missing" if old is None else f"{len(old) // size} entries"
        shown = display_path(filesystem, path)
        if old == new:
            lines.append(f"unchanged {shown}: {len(new) // size} entries")
            continue
        if not dry_run:
            write_atomically(path, new)
        verb = "would write" if dry_run else "wrote"
        lines.append(f"{verb} {shown}: {before} -> {len(new) // size} entries")
    return lines, EXIT_OK


def _truncate_txn_index(
    filesystem: pafs.FileSystem, segment: SegmentRef, table: EntryTable, dry_run: bool
) -> list[str]:
    """Drop the aborted transactions whose ABORT marker was cut off (Kafka truncates the
    transaction index with the log)."""
    if segment.txnindex_path is None:
        return []
    txns = kidx.parse_txn_index(read_bytes(filesystem, segment.txnindex_path))
    end = int(table.last_offsets[-1]) if len(table.last_offsets) else segment.base_offset - 1
    kept = [t for t in txns if t.last_offset <= end]
    if len(kept) == len(txns):
        return []
    shown = display_path(filesystem, segment.txnindex_path)
    if not dry_run:
        write_atomically(segment.txnindex_path, kidx.encode_txn_index(kept))
    verb = "would write" if dry_run else "wrote"
    return [f"{verb} {shown}: {len(txns)} -> {len(kept)} aborted transactions"]


def run(args: argparse.Namespace) -> int:
    work: list[tuple[pafs.FileSystem, SegmentRef, bool]] = []
    for filesystem, part in partitions(args.paths, args.option):
        if not isinstance(filesystem, pafs.LocalFileSystem):
            raise InvalidOptionError("rebuild-index writes local files only")
        count = len(part.segments)
        work.extend((filesystem, s, i + 1 == count) for i, s in enumerate(part.segments))
    statuses = []
    for filesystem, segment, last in progress(work, args.quiet, "rebuild-index"):
        try:
            lines, status = rebuild_segment(
                filesystem, segment, args.index_interval_bytes, args.dry_run, args.truncate, last
            )
        except KafkaSegmentsError as err:
            status = EXIT_UNUSABLE if isinstance(err, OSError) else EXIT_DAMAGED
            lines = [f"ERROR {display_path(filesystem, segment.path)}: {err}"]
        except OSError as err:
            status = EXIT_UNUSABLE
            lines = [f"ERROR {storage_error(err, display_path(filesystem, segment.path))}"]
        statuses.append(status)
        write_lines(lines, sys.stdout)
    return worst_status(statuses)
