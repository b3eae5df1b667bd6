"""``kafka-segments verify``: CRCs, framing, offsets and index/log consistency, per file.

Each file gets one line ``LABEL path: details``:

* ``OK``; ``NOTE`` (nothing wrong: a preallocated zero tail of the active segment's index);
* ``INDEX`` (exit 3): an index a broker's lookup would go wrong with, or that fails Kafka's
  sanity checks (``OffsetIndex``/``TimeIndex`` ``sanityCheck``): ``rebuild-index`` fixes it;
* ``ERROR`` (exit 1): damaged log data: CRC, framing, offsets that do not increase, a truncated
  tail (``rebuild-index --truncate`` cuts it as a broker's recovery does);
* ``UNREADABLE`` (exit 2): the file could not be read; verify goes on with the next one.

Index entries are judged by what a broker's lookup relies on (FORMAT §6.2), so every offset
convention Kafka used is accepted: the append's first offset (before 2.0), its last offset (2.0+,
with several batches per append on a follower), a rebuild's batch offsets. Offset gaps are legal
(compaction, control records) and only counted, as DumpLogSegments' "Non-consecutive offsets".
A summary line ends the output.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds import index as kidx
from kafka_segments_ds.cli.common import (
    EXIT_DAMAGED,
    EXIT_INDEX,
    EXIT_OK,
    EXIT_UNUSABLE,
    PROG,
    int64_values,
    progress,
    read_bytes,
    reader_warnings,
    selected_partitions,
    sibling,
    worst_status,
    write_lines,
)
from kafka_segments_ds.cli.log_scan import LogScan, scan_log
from kafka_segments_ds.errors import KafkaSegmentsError
from kafka_segments_ds.fs import display_path
from kafka_segments_ds.layout import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, SegmentRef
from kafka_segments_ds.options import ReadOptions, parse_read_options
from kafka_segments_ds.reader import read_task
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import EntryTable
from kafka_segments_ds.scan_task import ScanTask, segment_bounds

NAME = "verify"
SUMMARY = "check logs and indexes"
DESCRIPTION = (
    "Check CRCs, framing, offsets and index/log consistency of every file; report each file "
    "(OK, NOTE, INDEX, ERROR or UNREADABLE) and a summary line."
)

Finding = tuple[str, str, str]  # (label, file, details)
STATUS = {"OK": EXIT_OK, "NOTE": EXIT_OK, "INDEX": EXIT_INDEX, "ERROR": EXIT_DAMAGED}
STATUS["UNREADABLE"] = EXIT_UNUSABLE
TRUNCATED = "truncated tail"


def add_arguments(verify: argparse.ArgumentParser) -> None:
    """No options beyond the shared ones."""


def verify_segment(
    filesystem: pafs.FileSystem,
    segment: SegmentRef,
    next_base: int | None,
    options: ReadOptions,
    is_last: bool = True,
) -> list[Finding]:
    """One finding per file of the segment (its ``.log`` and index files)."""
    shown = display_path(filesystem, segment.path)
    try:
        scan = scan_log(filesystem, segment, shown, options.read_chunk_bytes)
    except KafkaSegmentsError as err:
        return [("UNREADABLE", shown, str(err))]
    table = scan.table
    report = [_verify_log(filesystem, shown, scan, segment, next_base, options)]
    for path, suffix in (
        (segment.index_path, INDEX_SUFFIX),
        (segment.timeindex_path, TIME_INDEX_SUFFIX),
        (segment.txnindex_path, TXN_INDEX_SUFFIX),
    ):
        if path is None:
            continue
        index_shown = display_path(filesystem, path)
        try:
            data = read_bytes(filesystem, path)
        except KafkaSegmentsError as err:
            report.append(("UNREADABLE", index_shown, str(err)))
            continue
        label, details = _index_finding(suffix, data, scan.size, table, segment, next_base, is_last)
        if suffix == TXN_INDEX_SUFFIX and label == "OK":
            label, details = _unlisted_aborts(data, scan.aborts) or (label, details)
        report.append((label, index_shown, details))
    # (a pinterest layout stores no .txnindex)
    if scan.aborts and segment.txnindex_path is None and options.layout != "pinterest":
        missing = display_path(filesystem, sibling(segment, TXN_INDEX_SUFFIX))
        plural = "s" if len(scan.aborts) > 1 else ""
        report.append(
            (
                "INDEX",
                missing,
                f"missing: the segment holds {len(scan.aborts)} ABORT marker{plural} (first "
                f"at offset {scan.aborts[0]}) that a broker lists in its .txnindex; "
                "read_committed reads here use the markers",
            )
        )
    return report


def _unlisted_aborts(data: bytes, aborts: list[int]) -> tuple[str, str] | None:
    """An INDEX finding for a ``.txnindex`` (its bytes ``data``, parsed whole) that does not
    list every ABORT marker of its segment (an empty or cut-short copy); None when it does."""
    listed = {t.last_offset for t in kidx.parse_txn_index(data)}
    unlisted = [offset for offset in aborts if offset not in listed]
    if not unlisted:
        return None
    return (
        "INDEX",
        f"lists {len(aborts) - len(unlisted)} of the segment's {len(aborts)} ABORT markers "
        f"(first unlisted at offset {unlisted[0]}); read_committed reads use the markers",
    )


def read_segment(
    filesystem: pafs.FileSystem, segment: SegmentRef, options: ReadOptions
) -> Iterator[pa.RecordBatch]:
    """Offsets and positions of every record of ``segment``, checksums verified (FAILFAST).

    Read as one task on the filesystem the segment was listed on (a tiered bucket's view):
    reading its path afresh would list its directory again, once per segment."""
    options = replace(options, mode="FAILFAST", verify_checksums=True)
    task = ScanTask(segment=segment, topic=None, partition=None, filesystem=filesystem)
    return read_task(task, options, ("offset", "position"), filesystem)


def _verify_log(
    filesystem: pafs.FileSystem,
    shown: str,
    scan: LogScan,
    segment: SegmentRef,
    next_base: int | None,
    options: ReadOptions,
) -> Finding:
    table = scan.table
    previous = segment.base_offset - 1
    records = gaps = 0
    first_gap: int | None = None
    with reader_warnings():  # what the reader warns about is reported below
        try:
            for arrow_batch in read_segment(filesystem, segment, options):
                offsets = int64_values(arrow_batch.column("offset"))
                if len(offsets) == 0:
                    continue
                steps = np.diff(np.concatenate(([previous], offsets)))
                bad = np.flatnonzero(steps <= 0)
                if len(bad):
                    i = int(bad[0])
                    where = int(arrow_batch.column("position")[i].as_py())
                    return (
                        "ERROR",
                        shown,
                        f"offset {int(offsets[i])} at byte position {where} does "
                        f"not increase (previous {previous if i == 0 else int(offsets[i - 1])})",
                    )
                # a step > 1 between records is a gap (compaction, control records), not an error
                jumps = np.flatnonzero(steps[1 if records == 0 else 0 :] > 1)
                if len(jumps) and first_gap is None:
                    at = int(jumps[0]) + (1 if records == 0 else 0)
                    first_gap = previous if at == 0 else int(offsets[at - 1])
                gaps += len(jumps)
                previous = int(offsets[-1])
                records += len(offsets)
        except KafkaSegmentsError as err:
            return ("ERROR", shown, str(err))
    if next_base is not None and previous >= next_base:
        return (
            "ERROR",
            shown,
            f"last offset {previous} is not below the next segment's base offset {next_base}",
        )
    details = f"{len(table.positions)} batches, {records} records"
    if records:
        details += f", last offset {previous}"
    if gaps:
        plural = "s" if gaps > 1 else ""
        details += f", {gaps} offset gap{plural} (non-consecutive offsets, first after {first_gap})"
    if table.valid_bytes < scan.size:
        tail = scan.size - table.valid_bytes
        if scan.zero_tail:
            return ("NOTE", shown, f"{details}; zero-filled (preallocated) tail of {tail} bytes")
        if table.outcome == K.FRAMING_PARTIAL:
            return (
                "ERROR",
                shown,
                f"{details}; {TRUNCATED} of {tail} bytes at byte position {table.valid_bytes} "
                "(an entry cut short)",
            )
    return ("OK", shown, details)


def _index_finding(
    suffix: str,
    data: bytes,
    log_size: int,
    table: EntryTable,
    segment: SegmentRef,
    next_base: int | None,
    is_last: bool,
) -> tuple[str, str]:
    """``(label, details)`` for one index file of the segment."""
    if suffix == TXN_INDEX_SUFFIX:
        return _txn_index_finding(data, segment.base_offset)
    if suffix == INDEX_SUFFIX:
        entries, findings = kidx.check_offset_index(
            data, segment.base_offset, table.positions, table.last_offsets, log_size
        )
    else:
        entries, findings = kidx.check_time_index(
            data, segment.base_offset, next_base, table.last_offsets, table.max_timestamps
        )
    details = f"{entries} entries"
    if not findings:
        return "OK", details
    details += "; " + "; ".join(f.message for f in findings)
    if all(f.zero_tail for f in findings) and is_last:
        return "NOTE", details  # the active segment of a running or crashed broker
    return "INDEX", details


def _txn_index_finding(data: bytes, base_offset: int) -> tuple[str, str]:
    """Kafka's sanity check of a ``.txnindex``: whole entries, markers in the segment."""
    try:
        txns = kidx.parse_txn_index(data)
    except KafkaSegmentsError as err:
        return "INDEX", str(err)
    bad = [t for t in txns if t.last_offset < base_offset]
    if bad:
        return (
            "INDEX",
            f"abort marker offset {bad[0].last_offset} is below the segment base offset "
            f"{base_offset}",
        )
    return "OK", f"{len(txns)} aborted transactions"


def summary_lines(findings: list[Finding], partition_count: int) -> list[str]:
    """The summary line, and what to run next when something can be repaired."""
    labels = Counter(label for label, _, _ in findings)
    status = worst_status(STATUS[label] for label in labels)
    logs = sum(path.endswith((".log", ".log.swap")) for _, path, _ in findings)
    plural = "s" if partition_count != 1 else ""
    lines = [
        f"verify: {len(findings)} files checked ({logs} .log, {len(findings) - logs} index) in "
        f"{partition_count} partition{plural}: {labels['OK']} ok, {labels['NOTE']} notes, "
        f"{labels['INDEX']} index problems, {labels['ERROR']} damaged, "
        f"{labels['UNREADABLE']} unreadable; exit status {status}"
    ]
    if any(label == "ERROR" and TRUNCATED in details for label, _, details in findings):
        lines.append(
            f"hint: a broker's recovery truncates a cut-off tail; `{PROG} rebuild-index "
            "--truncate --dry-run PATH` shows what it would cut, then run it without --dry-run"
        )
    if labels["INDEX"]:
        lines.append(
            f"hint: `{PROG} rebuild-index PATH` rewrites .index/.timeindex as a broker's "
            "recovery does (a damaged or missing .txnindex is not rebuilt)"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    options = parse_read_options(args.option)
    parts = selected_partitions(args.paths, args.option)
    work = []
    for filesystem, part in parts:
        for i, segment in enumerate(part.segments):
            last = i + 1 == len(part.segments)
            # the next segment's first offset (tiered copies may overlap: see segment_bounds)
            following = segment_bounds(part.segments, i)[2]
            work.append((filesystem, segment, following, last))
    findings: list[Finding] = []
    for filesystem, segment, following, last in progress(work, args.quiet, "verify"):
        lines = verify_segment(filesystem, segment, following, options, last)
        findings.extend(lines)
        write_lines((f"{label} {path}: {details}" for label, path, details in lines), sys.stdout)
    write_lines(summary_lines(findings, len(parts)), sys.stdout)
    return worst_status(STATUS[label] for label, _, _ in findings)
