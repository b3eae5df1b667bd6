"""``kafka-segments dump``: records or batches as JSON lines or a table, and single files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kafka_segments_ds import iter_batches
from kafka_segments_ds.cli.common import cut, iso, render_bytes, write_lines
from kafka_segments_ds.cli.dump_files import FILE_SUFFIXES, dump_file

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


def run(args: argparse.Namespace) -> int:
    budget = [args.limit if args.limit is not None else sys.maxsize]
    for path in args.paths:
        if path.endswith(FILE_SUFFIXES):
            write_lines(dump_file(path, args.option), sys.stdout)
        else:
            write_lines(dump_rows(args, path, budget), sys.stdout)
    return 0


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


def dump_rows(args: argparse.Namespace, path: str, budget: list[int]) -> Iterator[str]:
    """Lines for the records (or batches) under ``path``; ``budget`` holds the rows left."""
    opts = _reader_options(args)
    columns = None
    if args.gaps:
        from kafka_segments_ds.schema import default_columns

        columns = list(default_columns(args.include_headers, args.include_metadata))
        columns += [c for c in ("batchBaseOffset",) if c not in columns]
    last_seen: dict[tuple[Any, Any], int] = {}
    if args.format == "table":
        yield f"{'TOPIC-PARTITION':<24} {'OFFSET':>12}  {'TIMESTAMP':<29} {'KEY':<24} VALUE"
    for arrow_batch in iter_batches(path, columns, **opts):
        for row in _rows(arrow_batch):
            offset = row["offset"]
            if args.from_offset is not None and offset < args.from_offset:
                continue
            if args.to_offset is not None and offset >= args.to_offset:
                continue
            if budget[0] <= 0:
                return
            budget[0] -= 1
            if args.gaps:
                tp = (row["topic"], row["partition"])
                first = row.pop("batchBaseOffset") if args.shallow else offset
                if not args.include_metadata:
                    row.pop("batchBaseOffset", None)
                previous = last_seen.get(tp)
                if previous is not None and first > previous + 1:
                    gap = {"topic": tp[0], "partition": tp[1], "after": previous, "next": first}
                    yield json.dumps({"gap": gap})
                last_seen[tp] = offset
            yield _format_row(row, args)


def _format_row(row: dict[str, Any], args: argparse.Namespace) -> str:
    row["key"] = render_bytes(row["key"], args.key)
    row["value"] = render_bytes(row["value"], args.value)
    if "headers" in row and row["headers"] is not None:
        row["headers"] = [
            {"key": h["key"], "value": render_bytes(h["value"], args.value)} for h in row["headers"]
        ]
    if args.format == "jsonl":
        return json.dumps(row, ensure_ascii=False)
    key = "" if row["key"] is None else str(row["key"])
    value = "null" if row["value"] is None else str(row["value"])
    tp = f"{row['topic']}-{row['partition']}" if row["topic"] is not None else "-"
    return (
        f"{cut(tp, 24):<24} {row['offset']:>12}  {iso(row['timestamp']):<29} "
        f"{cut(key, TABLE_KEY_WIDTH):<24} {cut(value, TABLE_VALUE_WIDTH)}"
    )
