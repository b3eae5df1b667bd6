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
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from kafka_segments_ds import iter_batches
from kafka_segments_ds.cli.common import (
    EXIT_DAMAGED,
    EXIT_OK,
    iso,
    partitions,
    progress,
    reader_warnings,
    write_lines,
)
from kafka_segments_ds.fs import display_path
from kafka_segments_ds.layout import PartitionLog, merge_partitions
from kafka_segments_ds.reader.damage import SUMMARY_MARKER
from kafka_segments_ds.tiered import is_tiered_segment

NAME = "stats"
SUMMARY = "per-partition statistics"
DESCRIPTION = (
    "Per topic-partition counts and codecs. Damaged entries are skipped, counted (DAMAGED) and "
    "reported once each on stderr; the exit status is then 1."
)
# Reader warnings that each mean one damaged entry (the rest, e.g. a resync or a re-read, are
# only passed on).
DAMAGE_MARKERS = ("dropping malformed entry", "truncated entry")


def add_arguments(stats: argparse.ArgumentParser) -> None:
    stats.add_argument("--format", choices=("jsonl", "table"), default="table")


def partition_stats(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    options: dict[str, str],
    source: str | None = None,
) -> dict[str, Any]:
    """Counts for one partition: streamed reads (shallow, deep, and deep read_committed when
    there are transactional batches: without them nothing can be aborted)."""
    options = {**options}
    if not any(key.lower() == "mode" for key in options):
        options["mode"] = "DROPMALFORMED"
    with reader_warnings() as messages:
        stats = _counts(filesystem, part, options, source)
    # the reader's per-read DROPMALFORMED totals repeat what the DAMAGED column and line say
    unique = [w for w in dict.fromkeys(messages) if SUMMARY_MARKER not in w]
    stats["damaged"] = sum(any(m in w for m in DAMAGE_MARKERS) for w in unique)
    stats["warnings"] = unique
    return stats


def _counts(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    options: dict[str, Any],
    source: str | None = None,
) -> dict[str, Any]:
    paths = [display_path(filesystem, s.path) for s in part.segments]
    if source is not None and part.topic is not None and is_tiered_segment(part.segments[0]):
        # tiered segments are read as a partition: overlapping copies are read once
        paths = [source]
        options = {**options, "assign": json.dumps({part.topic: [part.partition]})}
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
    shallow_cols = ["value", "magic", "compression", "producerId", "isTransactional"]
    for arrow_batch in iter_batches(paths, shallow_cols, **{**options, "iteration": "shallow"}):
        stats["batches"] += arrow_batch.num_rows
        codecs.update(arrow_batch.column("compression").to_pylist())
        magics.update(arrow_batch.column("magic").to_pylist())
        producers.update(p for p in arrow_batch.column("producerId").to_pylist() if p >= 0)
        transactional += sum(bool(t) for t in arrow_batch.column("isTransactional").to_pylist())
        stored += _byte_total(arrow_batch.column("value"))
    first = last = first_ts = last_ts = None
    for arrow_batch in iter_batches(paths, ["key", "value", "offset", "timestamp"], **options):
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
    if transactional:
        committed = 0
        committed_opts = {**options, "isolationLevel": "read_committed"}
        for arrow_batch in iter_batches(paths, ["offset"], **committed_opts):
            committed += arrow_batch.num_rows
    stats.update(
        codecs=dict(sorted(codecs.items())),
        compression_ratio_approximate=round(payload / stored, 3) if stored else None,
        magics={str(m): n for m, n in sorted(magics.items())},
        producers=len(producers),
        transactional_batches=transactional,
        aborted_records=stats["records"] - committed,
        first_offset=first,
        last_offset=last,
        first_timestamp=None if first_ts is None else first_ts // 1000,
        last_timestamp=None if last_ts is None else last_ts // 1000,
    )
    return stats


def _byte_total(column: pa.Array) -> int:
    lengths = pc.sum(pc.binary_length(column)).as_py()
    return int(lengths or 0)


_STATS_TABLE = (
    ("TOPIC-PARTITION", lambda s: f"{s['topic']}-{s['partition']}"),
    ("SEGMENTS", lambda s: s["segments"]),
    ("BATCHES", lambda s: s["batches"]),
    ("RECORDS", lambda s: s["records"]),
    ("BYTES", lambda s: s["log_bytes"]),
    ("OFFSETS", lambda s: f"{s['first_offset']}..{s['last_offset']}"),
    ("FIRST-TS", lambda s: iso(s["first_timestamp"])),
    ("LAST-TS", lambda s: iso(s["last_timestamp"])),
    ("CODECS", lambda s: ",".join(f"{c}:{n}" for c, n in s["codecs"].items())),
    ("RATIO~", lambda s: s["compression_ratio_approximate"]),
    ("MAGICS", lambda s: ",".join(f"v{m}:{n}" for m, n in s["magics"].items())),
    ("PRODUCERS", lambda s: s["producers"]),
    ("TXN-BATCHES", lambda s: s["transactional_batches"]),
    ("ABORTED", lambda s: s["aborted_records"]),
    ("DAMAGED", lambda s: s["damaged"]),
)


def run(args: argparse.Namespace) -> int:
    # each partition once, under the first path that reaches it, with every segment the paths do
    by_directory: dict[str, tuple[str, Any, PartitionLog]] = {}
    for path in args.paths:
        for filesystem, part in partitions([path], args.option):
            source, first_filesystem, seen = by_directory.get(
                part.directory, (path, filesystem, None)
            )
            merged = part if seen is None else merge_partitions([seen, part])[0]
            by_directory[part.directory] = (source, first_filesystem, merged)
    parts = list(by_directory.values())
    results = []
    for source, filesystem, part in progress(parts, args.quiet, "stats"):
        result = partition_stats(filesystem, part, args.option, source)
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
