"""``kafka-segments stats``: per topic-partition counts, codecs, producers and offsets.

Damage does not stop it: unless ``--option mode=FAILFAST`` is given, malformed entries are
skipped (DROPMALFORMED), counted in the DAMAGED column, each reported once on stderr, and the
exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from kafka_segments_ds.cli.common import (
    EXIT_DAMAGED,
    EXIT_OK,
    iso,
    progress,
    reader_warnings,
    selected_partitions,
    write_lines,
)
from kafka_segments_ds.cli.log_scan import WINDOW_BYTES, scan_log
from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.fs import display_path
from kafka_segments_ds.layout import PartitionLog, SegmentRef
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.planning import segment_tasks
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.reader.damage import DamageKind, collect_damage
from kafka_segments_ds.transactions import OPEN_TRANSACTION_END, collect_aborted

NAME = "stats"
SUMMARY = "per-partition statistics"
DESCRIPTION = (
    "Per topic-partition counts and codecs. Damaged entries are skipped, counted (DAMAGED) and "
    "reported once each on stderr; the exit status is then 1."
)
# Damaged entries are those the reader drops, each well-framed entry of a damaged segment whose
# checksum fails, and cut-off tails (the reader's damage events); the rest (a resync, a re-read)
# is only passed on as a warning.


def add_arguments(stats: argparse.ArgumentParser) -> None:
    stats.add_argument("--format", choices=("jsonl", "table"), default="table")


def partition_stats(
    filesystem: pafs.FileSystem, part: PartitionLog, options: dict[str, str]
) -> dict[str, Any]:
    """Counts for one partition: streamed reads (shallow, deep, and deep read_committed when
    there are transactional batches: without them nothing can be aborted)."""
    options = {**options}
    if not any(key.lower() == "mode" for key in options):
        options["mode"] = "DROPMALFORMED"
    # the reader's per-read DROPMALFORMED totals repeat what the DAMAGED column and line say
    with reader_warnings(summaries=False) as messages, collect_damage() as events:
        stats = _counts(filesystem, part, options)
    damaged = {(e.path, e.position) for e in events if e.kind.is_drop}
    if parse_read_options(options).verify_checksums:
        for segment in part.segments:
            shown = display_path(filesystem, segment.path)
            if any(path == shown for path, _ in damaged):
                damaged.update((shown, at) for at in failed_checksums(filesystem, segment))
    truncated = {(e.path, e.position) for e in events if e.kind is DamageKind.TRUNCATED}
    stats["damaged"] = len(damaged) + len(truncated)
    stats["warnings"] = list(dict.fromkeys(messages))
    return stats


def failed_checksums(filesystem: pafs.FileSystem, segment: SegmentRef) -> list[int]:
    """Byte positions of the well-framed entries of a damaged segment whose checksum fails,
    from its start to where the framing breaks. Each is one damaged entry, though the reader,
    finding no valid entry after the first of them, skips them as bytes that frame no entry."""
    shown = display_path(filesystem, segment.path)
    scan = scan_log(filesystem, segment, shown, WINDOW_BYTES, checksums=True, markers=False)
    return scan.bad_checksums or []


def _counts(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    options: dict[str, Any],
) -> dict[str, Any]:
    """Read the partition's segments as planned tasks on the filesystem they were listed on
    (a tiered bucket's view, whose overlapping copies are read once): no listing per segment."""
    opts = parse_read_options(options)

    def read(
        columns: tuple[str, ...], aborted: tuple[tuple[int, int, int], ...] = (), **changes: Any
    ) -> Iterator[pa.RecordBatch]:
        tasks = segment_tasks(filesystem, part, None, None, aborted)
        return read_tasks(tasks, replace(opts, **changes), columns, filesystem)

    stats: dict[str, Any] = {
        "topic": part.topic,
        "partition": part.partition,
        "segments": len(part.segments),
        "log_bytes": sum(s.size for s in part.segments),
        "batches": 0,
        "records": 0,
    }
    codecs: Counter[str] = Counter()
    magics: Counter[int] = Counter()
    producers: set[int] = set()
    transactional = stored = payload = 0
    shallow_cols = ("value", "magic", "compression", "producerId", "isTransactional")
    for arrow_batch in read(shallow_cols, iteration="shallow"):
        stats["batches"] += arrow_batch.num_rows
        codecs.update(arrow_batch.column("compression").to_pylist())
        magics.update(arrow_batch.column("magic").to_pylist())
        producers.update(p for p in arrow_batch.column("producerId").to_pylist() if p >= 0)
        transactional += sum(bool(t) for t in arrow_batch.column("isTransactional").to_pylist())
        stored += _byte_total(arrow_batch.column("value"))
    first = last = first_ts = last_ts = None
    for arrow_batch in read(("key", "value", "offset", "timestamp")):
        if not arrow_batch.num_rows:
            continue
        stats["records"] += arrow_batch.num_rows
        payload += _byte_total(arrow_batch.column("key")) + _byte_total(arrow_batch.column("value"))
        offsets = arrow_batch.column("offset")
        micros = pc.cast(arrow_batch.column("timestamp"), pa.int64())
        if first is None:
            first, first_ts = offsets[0].as_py(), micros[0].as_py()
        last, last_ts = offsets[-1].as_py(), micros[-1].as_py()
    committed = stats["records"]
    aborted_transactions = 0
    if transactional:
        # each segment's .txnindex where it has one, its ABORT markers where not
        spans = collect_aborted(filesystem, part, opts)
        aborted_transactions = sum(last != OPEN_TRANSACTION_END for _, _, last in spans)
        committed = sum(b.num_rows for b in read(("offset",), spans, read_committed=True))
    stats.update(
        codecs=dict(sorted(codecs.items())),
        compression_ratio_approximate=round(payload / stored, 3) if stored else None,
        magics={str(m): n for m, n in sorted(magics.items())},
        producers=len(producers),
        transactional_batches=transactional,
        aborted_transactions=aborted_transactions,
        aborted_records=stats["records"] - committed,
        first_offset=first,
        last_offset=last,
        first_timestamp=None if first_ts is None else first_ts // 1000,
        last_timestamp=None if last_ts is None else last_ts // 1000,
    )
    return stats


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value


def _offsets(stats: dict[str, Any]) -> str:
    """``first..last``, or ``none (empty)`` for a partition without records."""
    if stats["first_offset"] is None:
        return "none (empty)"
    return f"{stats['first_offset']}..{stats['last_offset']}"


def _byte_total(column: pa.Array) -> int:
    lengths = pc.sum(pc.binary_length(column)).as_py()
    return int(lengths or 0)


_STATS_TABLE = (
    ("TOPIC-PARTITION", lambda s: f"{s['topic']}-{s['partition']}"),
    ("SEGMENTS", lambda s: s["segments"]),
    ("BATCHES", lambda s: s["batches"]),
    ("RECORDS", lambda s: s["records"]),
    ("BYTES", lambda s: s["log_bytes"]),
    ("OFFSETS", lambda s: _offsets(s)),
    ("FIRST-TS", lambda s: iso(s["first_timestamp"])),
    ("LAST-TS", lambda s: iso(s["last_timestamp"])),
    ("CODECS", lambda s: ",".join(f"{c}:{n}" for c, n in s["codecs"].items())),
    ("RATIO~", lambda s: _or_dash(s["compression_ratio_approximate"])),
    ("MAGICS", lambda s: ",".join(f"v{m}:{n}" for m, n in s["magics"].items())),
    ("PRODUCERS", lambda s: s["producers"]),
    ("TXN-BATCHES", lambda s: s["transactional_batches"]),
    ("ABORTED", lambda s: s["aborted_records"]),
    ("DAMAGED", lambda s: s["damaged"]),
)


# reader options that narrow a read to a range: stats counts whole partitions
_RANGE_OPTIONS = (
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
)


def run(args: argparse.Namespace) -> int:
    ranged = [key for key in args.option if key.lower() in _RANGE_OPTIONS]
    if ranged:
        raise InvalidOptionError(
            f"stats counts whole partitions: {', '.join(sorted(ranged))} not supported here "
            "(select partitions with subscribe/assign; dump --from-offset/--to-offset reads a "
            "range)"
        )
    parts = selected_partitions(args.paths, args.option)
    results = []
    for filesystem, part in progress(parts, args.quiet, "stats"):
        result = partition_stats(filesystem, part, args.option)
        for warning in result["warnings"]:
            print(f"warning: {warning}", file=sys.stderr)
        results.append(result)
    status = EXIT_DAMAGED if any(s["damaged"] for s in results) else EXIT_OK
    if args.format == "jsonl":
        write_lines((json.dumps(s) for s in results), sys.stdout)
        return status
    cells = [[str(get(s)) for _, get in _STATS_TABLE] for s in results]
    header = [name for name, _ in _STATS_TABLE]
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *cells]
    ]
    lines.append("RATIO~ is approximate: key+value bytes of the records / stored batch bytes")
    damaged = sum(s["damaged"] for s in results)
    if damaged:
        lines.append(
            f"DAMAGED: {damaged} malformed or truncated entries skipped (see stderr); "
            "`kafka-segments verify` names each file"
        )
    write_lines(lines, sys.stdout)
    return status
