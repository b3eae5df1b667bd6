"""``kafka-segments dump``: records or batches as JSON lines or a table, and single files.

JSON lines are built a column at a time (:mod:`.jsonl`); the table format and records of
Kafka's internal topics (``--decoder``, :mod:`kafka_segments_ds.internal_topics`) go row by
row. ``--gaps`` interleaves ``{"gap": ...}`` lines where offsets are not consecutive, as
DumpLogSegments' "Non-consecutive offsets" report.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_segments_ds import iter_batches
from kafka_segments_ds.cli.common import cut, iso, render_bytes, write_chunks, write_lines
from kafka_segments_ds.cli.dump_files import FILE_SUFFIXES, dump_file
from kafka_segments_ds.cli.jsonl import jsonl_bytes
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.internal_topics import CHOICES, TOPICS, Decoder, decoder_for
from kafka_segments_ds.schema import default_columns

TABLE_VALUE_WIDTH = 60
TABLE_KEY_WIDTH = 24


NAME = "dump"
SUMMARY = "print records or batches"
DESCRIPTION = "Print records (or batches), or an index or producer-snapshot file."


def add_arguments(dump: argparse.ArgumentParser) -> None:
    dump.add_argument("--shallow", action="store_true", help="one row per batch")
    dump.add_argument("--format", choices=("jsonl", "table"), default="jsonl")
    for name in ("key", "value"):
        dump.add_argument(
            f"--{name}",
            choices=("utf8", "hex", "base64", "json"),
            default="utf8",
            help=f"how to render the {name} bytes (default utf8)",
        )
    dump.add_argument("--include-headers", action="store_true")
    dump.add_argument("--include-metadata", action="store_true")
    dump.add_argument("--from-offset", type=int, metavar="N", help="first offset (inclusive)")
    dump.add_argument("--to-offset", type=int, metavar="N", help="end offset (exclusive)")
    dump.add_argument(
        "--from-timestamp",
        type=int,
        metavar="MS",
        help="start at the first offset with timestamp >= MS (epoch ms)",
    )
    dump.add_argument("--limit", type=int, metavar="N", help="print at most N rows")
    dump.add_argument(
        "--isolation", choices=("read_uncommitted", "read_committed"), default="read_uncommitted"
    )
    dump.add_argument("--mode", choices=("FAILFAST", "DROPMALFORMED"), default="FAILFAST")
    dump.add_argument("--gaps", action="store_true", help="also report offset gaps")
    dump.add_argument(
        "--decoder",
        choices=CHOICES,
        default="auto",
        help="decode the keys and values of Kafka's internal topics: __consumer_offsets "
        "(offsets), __transaction_state (transaction), __cluster_metadata (metadata); "
        "auto (default) picks by topic name",
    )


def run(args: argparse.Namespace) -> int:
    budget = [args.limit if args.limit is not None else sys.maxsize]
    for path in args.paths:
        if path.endswith(FILE_SUFFIXES):
            write_lines(dump_file(path, args.option), sys.stdout)
        else:
            write_chunks(dump_chunks(args, path, budget), sys.stdout)
    return 0


def _reader_options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = dict(args.option)
    opts["iteration"] = "shallow" if args.shallow else "deep"
    opts["includeHeaders"] = args.include_headers
    opts["includeMetadata"] = args.include_metadata
    opts["isolationLevel"] = args.isolation
    opts["mode"] = args.mode
    if args.from_timestamp is not None:
        opts["startingTimestamp"] = args.from_timestamp
    return opts


def _columns(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The columns to print, and those to read (the printed ones plus helpers)."""
    shown = list(default_columns(args.include_headers, args.include_metadata))
    helpers = []
    if args.gaps and args.shallow:
        helpers.append("batchBaseOffset")
    if args.decoder != "none":
        helpers += ["segment", "position"]  # where a record that fails to decode lives
    return shown, shown + [c for c in helpers if c not in shown]


def dump_chunks(
    args: argparse.Namespace, path: str, budget: list[int]
) -> Iterator[str | memoryview]:
    """Text for the records (or batches) under ``path``; ``budget`` holds the rows left."""
    shown, read = _columns(args)
    last_seen: dict[tuple[Any, Any], int] = {}
    if args.format == "table":
        yield f"{'TOPIC-PARTITION':<24} {'OFFSET':>12}  {'TIMESTAMP':<29} {'KEY':<24} VALUE\n"
    for arrow_batch in iter_batches(path, read, **_reader_options(args)):
        arrow_batch = _in_offset_range(arrow_batch, args.from_offset, args.to_offset)
        if arrow_batch.num_rows > budget[0]:
            arrow_batch = arrow_batch.slice(0, budget[0])
        budget[0] -= arrow_batch.num_rows
        start = 0
        gaps = _gaps(arrow_batch, args.shallow, last_seen) if args.gaps else []
        for row, gap in [*gaps, (arrow_batch.num_rows, None)]:
            if row > start:
                yield _format(arrow_batch.slice(start, row - start), shown, args)
            if gap is not None:
                yield json.dumps({"gap": gap}) + "\n"
            start = row
        if budget[0] <= 0:
            return


def _in_offset_range(
    arrow_batch: pa.RecordBatch, first: int | None, end: int | None
) -> pa.RecordBatch:
    if first is None and end is None:
        return arrow_batch
    offsets = arrow_batch.column("offset")
    keep = pc.greater_equal(offsets, first if first is not None else -(2**63))
    if end is not None:
        keep = pc.and_(keep, pc.less(offsets, end))
    return arrow_batch.filter(keep)


def _gaps(
    arrow_batch: pa.RecordBatch, shallow: bool, last_seen: dict[tuple[Any, Any], int]
) -> list[tuple[int, dict[str, Any]]]:
    """``(row, gap)`` for each row whose first offset does not follow the previous row's.

    ``last_seen`` carries the last offset per topic-partition from one Arrow batch to the next.
    """
    if not arrow_batch.num_rows:
        return []
    offsets = arrow_batch.column("offset").to_numpy()
    firsts = arrow_batch.column("batchBaseOffset").to_numpy() if shallow else offsets
    topics = arrow_batch.column("topic")
    partitions = arrow_batch.column("partition")
    found = []
    for start, end in _runs(topics, partitions):
        tp = (topics[start].as_py(), partitions[start].as_py())
        previous = np.empty(end - start, np.int64)
        previous[1:] = offsets[start : end - 1]
        previous[0] = last_seen.get(tp, firsts[start] - 1)
        for i in np.flatnonzero(firsts[start:end] > previous + 1).tolist():
            gap = {"topic": tp[0], "partition": tp[1], "after": int(previous[i])}
            gap["next"] = int(firsts[start + i])
            found.append((start + i, gap))
        last_seen[tp] = int(offsets[end - 1])
    return found


def _runs(topics: pa.Array, partitions: pa.Array) -> list[tuple[int, int]]:
    """``[start, end)`` row ranges of one topic-partition each."""
    n = len(topics)
    changed = pc.or_(
        pc.not_equal(topics.slice(1), topics.slice(0, n - 1)),
        pc.not_equal(partitions.slice(1), partitions.slice(0, n - 1)),
    )
    cuts = np.flatnonzero(pc.fill_null(changed, False).to_numpy(zero_copy_only=False)) + 1
    bounds = [0, *cuts.tolist(), n]
    return list(itertools.pairwise(bounds))


def _format(
    arrow_batch: pa.RecordBatch, shown: list[str], args: argparse.Namespace
) -> str | memoryview:
    """Text for a slice of rows (of one topic-partition or several)."""
    topics = pc.unique(arrow_batch.column("topic")).to_pylist()
    if args.decoder == "auto" and len(topics) > 1 and any(t in TOPICS for t in topics):
        runs = _runs(arrow_batch.column("topic"), arrow_batch.column("partition"))
        pieces = [_format(arrow_batch.slice(a, b - a), shown, args) for a, b in runs]
        return b"".join(p.encode() if isinstance(p, str) else p for p in pieces).decode()
    decoder = decoder_for(args.decoder, topics[0] if topics else None)
    if decoder is None and args.format == "jsonl":
        return jsonl_bytes(arrow_batch.select(shown), args.key, args.value)
    return "".join(_format_row(row, shown, args, decoder) + "\n" for row in _rows(arrow_batch))


def _rows(arrow_batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """Rows of an Arrow batch as dicts, with ``timestamp`` as epoch milliseconds (or None)."""
    columns = {}
    for name in arrow_batch.schema.names:
        column = arrow_batch.column(name)
        if name == "timestamp":
            micros = pc.cast(column, pa.int64()).to_pylist()
            columns[name] = [None if v is None else v // 1000 for v in micros]
        else:
            columns[name] = column.to_pylist()
    names = list(columns)
    for values in zip(*columns.values(), strict=True):
        yield dict(zip(names, values, strict=True))


def _format_row(
    row: dict[str, Any], shown: list[str], args: argparse.Namespace, decoder: Decoder | None
) -> str:
    out = {name: row[name] for name in shown}
    out["key"] = render_bytes(row["key"], args.key)
    out["value"] = render_bytes(row["value"], args.value)
    if decoder is not None:
        try:
            out["key"], out["value"] = decoder(row["key"], row["value"])
        except CorruptSegmentError as err:
            if args.mode == "FAILFAST":
                raise CorruptSegmentError(
                    f"cannot decode a {row['topic']} record: {err.reason}",
                    path=row["segment"],
                    position=row["position"],
                    offset=row["offset"],
                ) from err
            out["decode_error"] = err.reason
    if out.get("headers") is not None:
        out["headers"] = [
            {"key": h["key"], "value": render_bytes(h["value"], args.value)} for h in out["headers"]
        ]
    if args.format == "jsonl":
        return json.dumps(out, ensure_ascii=False)
    key = _cell(out["key"], "")
    value = _cell(out["value"], "null")
    tp = f"{out['topic']}-{out['partition']}" if out["topic"] is not None else "-"
    return (
        f"{cut(tp, 24):<24} {out['offset']:>12}  {iso(out['timestamp']):<29} "
        f"{cut(key, TABLE_KEY_WIDTH):<24} {cut(value, TABLE_VALUE_WIDTH)}"
    )


def _cell(value: Any, null: str) -> str:
    if value is None:
        return null
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)
