"""``kafka-segments verify``: CRCs, framing, offsets and index/log consistency, per file.

Covers what DumpLogSegments' ``--verify-index-only`` and ``--index-sanity-check`` do: every
offset-index entry must point at the start of the batch holding its offset, every time-index
entry at a batch of the segment. Offset gaps are legal (compaction, control records) and only
counted, as DumpLogSegments' "Non-consecutive offsets" report does.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import index as kidx
from kafka_segments_ds import iter_batches
from kafka_segments_ds.cli.common import partitions, progress, write_lines
from kafka_segments_ds.errors import KafkaSegmentsError
from kafka_segments_ds.fs import display_path, read_file
from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import EntryTable, scan_entries

NAME = "verify"
SUMMARY = "check logs and indexes"
DESCRIPTION = "Check CRCs, offsets and index/log consistency; exit 1 when any ERROR is reported."


def add_arguments(verify: argparse.ArgumentParser) -> None:
    """No options beyond the shared ones."""


def _first_offsets(log: bytes, table: EntryTable) -> np.ndarray:
    """First offset of each entry where the header says it (magic 2), else -1 (legacy)."""
    firsts = np.full(len(table.positions), -1, np.int64)
    for i, (pos, magic) in enumerate(
        zip(table.positions.tolist(), table.magics.tolist(), strict=True)
    ):
        if magic == 2:
            firsts[i] = int.from_bytes(log[pos : pos + 8], "big", signed=True)
    return firsts


def _containing_entry(
    offset: int, table: EntryTable, firsts: np.ndarray, base_offset: int
) -> int | None:
    """Index of the entry whose offsets include ``offset``, or None."""
    i = int(np.searchsorted(table.last_offsets, offset, side="left"))
    if i >= len(table.last_offsets):
        return None
    previous_last = int(table.last_offsets[i - 1]) if i else base_offset - 1
    low = max(previous_last + 1, int(firsts[i]))
    return i if low <= offset else None


def verify_segment(
    filesystem: pafs.FileSystem,
    segment: SegmentRef,
    next_base: int | None,
    options: dict[str, str],
) -> list[tuple[str, str, str]]:
    """``(status, file, details)`` lines for one segment's ``.log`` and index files."""
    shown = display_path(filesystem, segment.path)
    log = read_file(filesystem, segment.path).to_pybytes()
    table = scan_entries(log)
    warnings: list[str] = []
    if table.valid_bytes < len(log):
        tail = len(log) - table.valid_bytes
        if not any(log[table.valid_bytes :]):
            warnings.append(f"zero-filled (preallocated) tail of {tail} bytes")
        elif table.outcome == K.FRAMING_PARTIAL:
            warnings.append(f"truncated tail of {tail} bytes at byte position {table.valid_bytes}")
    report = [_verify_log(shown, segment, next_base, options, warnings, len(table.positions))]
    if report[0][0] == "ERROR":
        return report  # index checks against an unreadable log would only repeat the error
    firsts = _first_offsets(log, table)
    if segment.index_path is not None:
        report.append(_verify_offset_index(filesystem, segment, table, firsts))
    if segment.timeindex_path is not None:
        report.append(_verify_time_index(filesystem, segment, table, firsts, next_base))
    if segment.txnindex_path is not None:
        path = display_path(filesystem, segment.txnindex_path)
        try:
            txns = kidx.parse_txn_index(read_file(filesystem, segment.txnindex_path).to_pybytes())
        except KafkaSegmentsError as err:
            report.append(("ERROR", path, str(err)))
        else:
            bad = [t for t in txns if t.last_offset < segment.base_offset]
            if bad:
                report.append(
                    (
                        "ERROR",
                        path,
                        f"abort marker offset {bad[0].last_offset} is "
                        f"below the segment base offset {segment.base_offset}",
                    )
                )
            else:
                report.append(("OK", path, f"{len(txns)} aborted transactions"))
    return report


def _verify_log(
    shown: str,
    segment: SegmentRef,
    next_base: int | None,
    options: dict[str, str],
    warnings: list[str],
    entries: int,
) -> tuple[str, str, str]:
    opts: dict[str, Any] = {**options, "mode": "FAILFAST", "verifyChecksums": True}
    previous = segment.base_offset - 1
    records = gaps = 0
    first_gap: int | None = None
    try:
        for arrow_batch in iter_batches(shown, ["offset", "position"], **opts):
            offsets = arrow_batch.column("offset").to_numpy()
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
    details = f"{entries} batches, {records} records"
    if records:
        details += f", last offset {previous}"
    if gaps:
        plural = "s" if gaps > 1 else ""
        details += f", {gaps} offset gap{plural} (non-consecutive offsets, first after {first_gap})"
    if warnings:
        return ("WARN", shown, f"{details}; " + "; ".join(warnings))
    return ("OK", shown, details)


def _verify_offset_index(
    filesystem: pafs.FileSystem, segment: SegmentRef, table: EntryTable, firsts: np.ndarray
) -> tuple[str, str, str]:
    assert segment.index_path is not None
    shown = display_path(filesystem, segment.index_path)
    data = read_file(filesystem, segment.index_path).to_pybytes()
    index = kidx.parse_offset_index(data, segment.base_offset, segment.size)
    starts = table.positions
    for offset, position in zip(index.offsets.tolist(), index.positions.tolist(), strict=True):
        i = int(np.searchsorted(starts, position))
        if i >= len(starts) or starts[i] != position:
            return (
                "ERROR",
                shown,
                f"entry (offset {offset}, position {position}): position "
                "is not the start of an entry in the .log",
            )
        if _containing_entry(offset, table, firsts, segment.base_offset) != i:
            return (
                "ERROR",
                shown,
                f"entry (offset {offset}, position {position}): the batch "
                f"at that position holds offsets up to {int(table.last_offsets[i])}, "
                "not this one",
            )
    details = f"{len(index)} entries"
    if index.ignored:
        return ("WARN", shown, f"{details}, {index.ignored} ignored: {index.problem}")
    return ("OK", shown, details)


def _verify_time_index(
    filesystem: pafs.FileSystem,
    segment: SegmentRef,
    table: EntryTable,
    firsts: np.ndarray,
    next_base: int | None,
) -> tuple[str, str, str]:
    assert segment.timeindex_path is not None
    shown = display_path(filesystem, segment.timeindex_path)
    data = read_file(filesystem, segment.timeindex_path).to_pybytes()
    index = kidx.parse_time_index(data, segment.base_offset, next_base)
    # parse_time_index keeps only the monotonic prefix; what it dropped is reported below.
    for ts, offset in zip(index.timestamps.tolist(), index.offsets.tolist(), strict=True):
        if _containing_entry(offset, table, firsts, segment.base_offset) is None:
            return (
                "ERROR",
                shown,
                f"entry (timestamp {ts}, offset {offset}): no batch in the .log holds that offset",
            )
    details = f"{len(index)} entries"
    if index.ignored:
        return ("WARN", shown, f"{details}, {index.ignored} ignored: {index.problem}")
    return ("OK", shown, details)


def run(args: argparse.Namespace) -> int:
    work = []
    for filesystem, part in partitions(args.paths, args.option):
        for i, segment in enumerate(part.segments):
            following = part.segments[i + 1].base_offset if i + 1 < len(part.segments) else None
            work.append((filesystem, segment, following))
    errors = 0
    for filesystem, segment, following in progress(work, args.quiet, "verify"):
        lines = verify_segment(filesystem, segment, following, args.option)
        errors += sum(status == "ERROR" for status, _, _ in lines)
        write_lines((f"{status} {path}: {details}" for status, path, details in lines), sys.stdout)
    return 1 if errors else 0
