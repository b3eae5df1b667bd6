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
from kafka_segments_ds.cli.common import (
    bool_values,
    cut,
    int64_values,
    iso,
    non_negative_int,
    partitions,
    positive_int,
    render_bytes,
    select,
    valid_flags,
    write_chunks,
    write_lines,
)
from kafka_segments_ds.cli.dump_batches import BATCH_FIELDS, with_batch_fields
from kafka_segments_ds.cli.dump_files import FILE_SUFFIXES, dump_file
from kafka_segments_ds.cli.jsonl import jsonl_bytes
from kafka_segments_ds.errors import CorruptSegmentError, InvalidOptionError
from kafka_segments_ds.fs import display_path
from kafka_segments_ds.internal_topics import CHOICES, TOPICS, Decoder, decoder_for
from kafka_segments_ds.layout import PartitionLog
from kafka_segments_ds.options import ReadOptions, parse_read_options
from kafka_segments_ds.ranges import log_end_offset
from kafka_segments_ds.reader import read_task
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.schema import default_columns

TABLE_VALUE_WIDTH = 60
TABLE_KEY_WIDTH = 24


NAME = "dump"
SUMMARY = "print records or batches"
DESCRIPTION = """\
Print records (--deep, the default) or batches (--shallow), or one index, producer-snapshot or
KRaft .checkpoint file. Offset and time ranges go through the reader's index lookups, so only
the segments and batches that hold them are decoded.

Renderings of key/value bytes (--key/--value): utf8 (default: bytes that are not UTF-8 become
U+FFFD, and a note on stderr says how many), escaped (UTF-8, other bytes as \\xNN, a
backslash as \\\\), hex, base64, json (the bytes embedded as JSON when they parse, else as a
utf8 string; a value in Confluent's wire format, 0x00 and a schema id before JSON, as that
JSON). Decoded with the Schema Registry archived in the same log dir (its _schemas topic;
--option schemaRegistry=... for another): avro, protobuf, auto (by the schema's type), as the
reader options valueFormat/keyFormat. In JSON lines a tombstone (null value) is null, never the
string "null"; in a table it is <null>.

Spellings of Kafka's kafka-dump-log.sh are accepted: --files a,b (the paths), --deep-iteration
(= --deep), --print-data-log (always on here: records are printed with their data),
--max-bytes N (only the entries within the first N bytes of each .log file)."""

RENDERINGS = ("utf8", "escaped", "hex", "base64", "json")
DECODED = ("avro", "protobuf", "auto")  # decoded with the archived schemas (valueFormat)
# Reader options the CLI also has flags for: option name (lower case) -> (flag, args attribute)
FLAG_OPTIONS = {
    "isolationlevel": ("--isolation", "isolation"),
    "mode": ("--mode", "mode"),
    "iteration": ("--deep/--shallow", "iteration"),
    "includeheaders": ("--include-headers", "include_headers"),
    "includemetadata": ("--include-metadata", "include_metadata"),
}
RANGE_OPTIONS = {
    "startingoffsets": "--from-offset",
    "endingoffsets": "--to-offset",
    "startingtimestamp": "--from-timestamp",
    "endingtimestamp": "--to-timestamp",
}


def add_arguments(dump: argparse.ArgumentParser) -> None:
    dump.add_argument(
        "--files",
        action="append",
        default=[],
        metavar="A,B",
        help="comma-separated paths (kafka-dump-log.sh spelling), added to PATH",
    )
    depth = dump.add_mutually_exclusive_group()
    depth.add_argument(
        "--deep",
        "--deep-iteration",
        dest="iteration",
        action="store_const",
        const="deep",
        help="one row per record, inside compressed batches (default; --deep-iteration is "
        "kafka-dump-log.sh's spelling)",
    )
    depth.add_argument(
        "--shallow",
        dest="iteration",
        action="store_const",
        const="shallow",
        help="one row per batch",
    )
    dump.add_argument(
        "--print-data-log",
        action="store_true",
        help="accepted for kafka-dump-log.sh users; records are always printed with key and value",
    )
    dump.add_argument(
        "--max-bytes",
        type=positive_int,
        metavar="N",
        help="only entries lying within the first N bytes of each .log file (kafka-dump-log.sh)",
    )
    dump.add_argument("--format", choices=("jsonl", "table"), default="jsonl")
    for name in ("key", "value"):
        dump.add_argument(
            f"--{name}",
            choices=RENDERINGS + DECODED,
            default="utf8",
            help=f"how to render or decode the {name} (default utf8; see above)",
        )
    dump.add_argument("--include-headers", action="store_true", default=None)
    dump.add_argument("--include-metadata", action="store_true", default=None)
    dump.add_argument(
        "--from-offset",
        type=non_negative_int,
        metavar="N",
        help="first offset (inclusive); a partition whose log starts later starts there",
    )
    dump.add_argument(
        "--to-offset", type=non_negative_int, metavar="N", help="end offset (exclusive)"
    )
    dump.add_argument(
        "--from-timestamp",
        type=non_negative_int,
        metavar="MS",
        help="start at the first offset with timestamp >= MS (epoch ms) in each partition; a "
        "partition with none (an idle topic) gives no rows",
    )
    dump.add_argument(
        "--to-timestamp",
        type=non_negative_int,
        metavar="MS",
        help="stop before the first offset with timestamp >= MS in each partition (exclusive)",
    )
    dump.add_argument(
        "--limit", type=non_negative_int, metavar="N", help="print at most N rows in all"
    )
    dump.add_argument("--isolation", choices=("read_uncommitted", "read_committed"))
    dump.add_argument("--mode", choices=("FAILFAST", "DROPMALFORMED"))
    dump.add_argument("--gaps", action="store_true", help="also report offset gaps")
    dump.add_argument(
        "--decoder",
        choices=CHOICES,
        help="decode the keys and values of Kafka's internal topics: __consumer_offsets "
        "(offsets), __transaction_state (transaction), __cluster_metadata (metadata), "
        "__share_group_state (share), __remote_log_metadata (remote); auto (default) picks "
        "by topic name; a shallow dump shows batches, and decodes none",
    )


def run(args: argparse.Namespace) -> int:
    paths = list(args.paths) + [p for group in args.files for p in group.split(",") if p]
    if not paths:
        raise InvalidOptionError("dump needs a PATH (or --files a,b)")
    _settle_options(args)
    first, end = args.from_offset, args.to_offset
    if first is not None and end is not None and first > end:
        raise InvalidOptionError(f"--from-offset {first} is after --to-offset {end}")
    budget = [args.limit if args.limit is not None else sys.maxsize]
    notes: dict[str, int] = {}
    # the log paths are read as one input (each record once, however many of them reach it),
    # where the first of them is; subscribe/assign select among the partitions of all of them,
    # and a selection naming what is not there is an error
    logs = [path for path in paths if not path.endswith(FILE_SUFFIXES)]
    chosen = select(partitions(logs, args.option), args.option) if logs else []
    for path in paths:
        if path.endswith(FILE_SUFFIXES):
            write_lines(dump_file(path, args.option), sys.stdout)
            continue
        if path is not logs[0]:
            continue
        found = chosen
        if args.max_bytes is not None:
            for filesystem, part in found:
                for segment in part.segments:
                    shown = display_path(filesystem, segment.path)
                    with filesystem.open_input_file(segment.path) as stream:
                        head = stream.read(args.max_bytes)
                    cut = scan_entries(head).valid_bytes  # entries wholly within the bytes
                    chunks = dump_chunks(args, shown, budget, [], notes, cut, [(filesystem, part)])
                    write_chunks(chunks, sys.stdout)
        else:
            write_chunks(dump_chunks(args, logs, budget, found, notes), sys.stdout)
    for column, count in notes.items():
        print(
            f"note: {count} {column}s are not valid UTF-8: shown with U+FFFD for the bad bytes "
            f"(--{column} escaped, hex or base64 show every byte)",
            file=sys.stderr,
        )
    return 0


def _settle_options(args: argparse.Namespace) -> None:
    """Reconcile ``--option`` with the flags: an option is honoured unless a flag says
    otherwise; a flag and an option that disagree are refused, naming the flag."""
    given = {key.lower(): (key, value) for key, value in args.option.items()}
    if given:
        parsed = parse_read_options(dict(args.option))  # validates names and values
        values = {
            "isolationlevel": "read_committed" if parsed.read_committed else "read_uncommitted",
            "mode": parsed.mode,
            "iteration": parsed.iteration,
            "includeheaders": parsed.include_headers,
            "includemetadata": parsed.include_metadata,
        }
        for lowered, (flag, attr) in FLAG_OPTIONS.items():
            if lowered not in given:
                continue
            key = given[lowered][0]
            flag_value = getattr(args, attr)
            if flag_value is not None and flag_value != values[lowered]:
                raise InvalidOptionError(
                    f"--option {key}={given[lowered][1]} contradicts {flag}; give one of them"
                )
            setattr(args, attr, values[lowered])
        for lowered, flag in RANGE_OPTIONS.items():
            if lowered in given and getattr(args, flag[2:].replace("-", "_")) is not None:
                raise InvalidOptionError(f"give {flag} or --option {given[lowered][0]}, not both")
    args.iteration = args.iteration or "deep"
    args.shallow = args.iteration == "shallow"
    if args.shallow and args.decoder not in (None, "auto", "none"):
        raise InvalidOptionError(
            f"--decoder {args.decoder} decodes records: a shallow dump shows batches (drop "
            "--shallow)"
        )
    args.decoder = "none" if args.shallow else args.decoder or "auto"
    args.include_headers = bool(args.include_headers)
    args.include_metadata = bool(args.include_metadata)
    args.isolation = args.isolation or "read_uncommitted"
    args.mode = args.mode or "FAILFAST"


def _reader_options(
    args: argparse.Namespace, found: list[tuple[Any, PartitionLog]]
) -> tuple[dict[str, Any], bool]:
    """Reader options for ``found``, and whether rows must still be filtered by offset (for
    partitions the options cannot name: a directory not called ``<topic>-<partition>``)."""
    opts: dict[str, Any] = {k: v for k, v in args.option.items() if k.lower() not in FLAG_OPTIONS}
    opts["iteration"] = args.iteration
    opts["includeHeaders"] = args.include_headers
    opts["includeMetadata"] = args.include_metadata
    opts["isolationLevel"] = args.isolation
    opts["mode"] = args.mode
    for column, option in (("key", "keyFormat"), ("value", "valueFormat")):
        if getattr(args, column) in DECODED:
            opts[option] = getattr(args, column)
    if args.limit is not None and not any(k.lower() == "batchrows" for k in opts):
        # small segments are joined into batches of batchRows rows: --limit N reads no more
        opts["batchRows"] = max(1, min(args.limit, 32768))
    if args.from_timestamp is not None:
        opts["startingTimestamp"] = args.from_timestamp
        # a partition without a record at or after the time (an idle topic) gives no rows
        if not any(k.lower() == "startingoffsetsbytimestampstrategy" for k in opts):
            opts["startingOffsetsByTimestampStrategy"] = "latest"
    if args.to_timestamp is not None:
        opts["endingTimestamp"] = args.to_timestamp
    named = [(fs, p) for fs, p in found if p.topic is not None]
    unnamed = len(named) < len(found)
    read_options = parse_read_options(opts)  # the log end by the rules of this read
    for bound, option in ((args.from_offset, "startingOffsets"), (args.to_offset, "endingOffsets")):
        if bound is None or not named:
            continue
        # every selected partition is named (a partial list is refused, as by Spark), each
        # range clipped to what the partition holds, as kafka-dump-log.sh does per file
        by_topic: dict[str, dict[str, int]] = {}
        for filesystem, part in named:
            at = bound
            if option == "startingOffsets":
                at = _clipped_start(filesystem, part, bound, read_options)
            by_topic.setdefault(str(part.topic), {})[str(part.partition)] = at
        opts[option] = json.dumps(by_topic)
        if option == "startingOffsets" and not any(k.lower() == "failondataloss" for k in opts):
            # "records from offset N": a log that starts later simply starts later
            opts["failOnDataLoss"] = False
    return opts, unnamed or not found


def _clipped_start(filesystem: Any, part: PartitionLog, offset: int, options: ReadOptions) -> int:
    """``offset``, or the partition's log end offset (read with ``options``) when the log ends
    before it (an empty range there rather than a refusal)."""
    if not part.segments or offset <= part.segments[-1].base_offset:
        return offset
    end = log_end_offset(filesystem, part.segments[-1], options, read_task)
    return offset if end is None else min(offset, end)


def _columns(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The columns to print, and those to read (the printed ones plus helpers)."""
    shown = list(default_columns(args.include_headers, args.include_metadata))
    helpers = []
    if args.gaps and args.shallow:
        helpers.append("batchBaseOffset")
    if args.shallow:  # where each batch's header is, for size, crc, count and lastSequence
        helpers += ["segment", "position"]
    if args.decoder != "none":
        helpers += ["segment", "position"]  # where a record that fails to decode lives
    if args.max_bytes is not None:
        helpers += ["position"]
    read = shown + [c for c in dict.fromkeys(helpers) if c not in shown]
    return shown + list(BATCH_FIELDS) if args.shallow else shown, read


def dump_chunks(
    args: argparse.Namespace,
    path: str | list[str],
    budget: list[int],
    found: list[tuple[Any, PartitionLog]],
    notes: dict[str, int] | None = None,
    end_position: int | None = None,
    segments_of: list[tuple[Any, PartitionLog]] | None = None,
) -> Iterator[str | memoryview]:
    """Text for the records (or batches) under ``path``; ``budget`` holds the rows left.

    ``end_position`` (one ``.log`` file): only entries that start before it. ``segments_of``:
    the partitions whose segment files shallow rows come from (default ``found``)."""
    shown, read = _columns(args)
    segment_files = {
        display_path(filesystem, segment.path): (filesystem, segment.path)
        for filesystem, part in (found if segments_of is None else segments_of)
        for segment in part.segments
    }
    last_seen: dict[tuple[Any, Any], int] = {}
    opts, filter_offsets = _reader_options(args, found)
    if args.format == "table":
        yield _table_header(shown)
    if budget[0] <= 0:
        return
    for arrow_batch in iter_batches(path, read, **opts):
        if filter_offsets:
            arrow_batch = _in_offset_range(arrow_batch, args.from_offset, args.to_offset)
        if end_position is not None:
            arrow_batch, done = _within_bytes(arrow_batch, end_position)
            if done and not arrow_batch.num_rows:
                return
        if arrow_batch.num_rows > budget[0]:
            arrow_batch = arrow_batch.slice(0, budget[0])
        budget[0] -= arrow_batch.num_rows
        if args.shallow:
            arrow_batch = with_batch_fields(arrow_batch, segment_files, args.option)
        if notes is not None:
            _note_invalid_utf8(arrow_batch, args, notes)
        start = 0
        gaps = _gaps(arrow_batch, args.shallow, last_seen) if args.gaps else []
        for row, gap in [*gaps, (arrow_batch.num_rows, None)]:
            if row > start:
                yield format_batch(arrow_batch.slice(start, row - start), shown, args)
            if gap is not None:
                yield json.dumps({"gap": gap}) + "\n"
            start = row
        if budget[0] <= 0:
            return


def _within_bytes(arrow_batch: pa.RecordBatch, end: int) -> tuple[pa.RecordBatch, bool]:
    """Rows of entries that start below ``end``, and whether a later row did not (the reader
    then stops: positions increase through a file)."""
    positions = int64_values(arrow_batch.column("position"))
    keep = int(np.searchsorted(positions, end, side="left"))
    return arrow_batch.slice(0, keep), keep < arrow_batch.num_rows


def _note_invalid_utf8(
    arrow_batch: pa.RecordBatch, args: argparse.Namespace, notes: dict[str, int]
) -> None:
    for column in ("key", "value"):
        if getattr(args, column) != "utf8" or column not in arrow_batch.schema.names:
            continue
        data = arrow_batch.column(column)
        try:
            pc.cast(data, pa.string())
        except pa.ArrowInvalid:
            bad = sum(1 for v in data.to_pylist() if v is not None and not _is_utf8(v))
            notes[column] = notes.get(column, 0) + bad


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


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
    offsets = int64_values(arrow_batch.column("offset"))
    firsts = int64_values(arrow_batch.column("batchBaseOffset")) if shallow else offsets
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
    cuts = np.flatnonzero(bool_values(changed) & valid_flags(changed)) + 1  # null: no change
    bounds = [0, *cuts.tolist(), n]
    return list(itertools.pairwise(bounds))


def format_batch(
    arrow_batch: pa.RecordBatch, shown: list[str], args: argparse.Namespace
) -> str | memoryview:
    """Text for a slice of rows (of one topic-partition or several)."""
    topics = pc.unique(arrow_batch.column("topic")).to_pylist()
    if args.decoder == "auto" and len(topics) > 1 and any(t in TOPICS for t in topics):
        runs = _runs(arrow_batch.column("topic"), arrow_batch.column("partition"))
        pieces = [format_batch(arrow_batch.slice(a, b - a), shown, args) for a, b in runs]
        return b"".join(p.encode() if isinstance(p, str) else p for p in pieces).decode()
    decoder = decoder_for(args.decoder, topics[0] if topics else None)
    if decoder is None and args.format == "jsonl" and not _decoding(args):
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


def _decoding(args: argparse.Namespace) -> bool:
    return args.key in DECODED or args.value in DECODED


def _bytes_rendering(rendering: str) -> str:
    """How bytes are shown under ``rendering`` (headers stay bytes when values are decoded)."""
    return rendering if rendering in RENDERINGS else "utf8"


def _render(value: Any, rendering: str) -> Any:
    if rendering in DECODED:
        from kafka_segments_ds.schemas.decode import json_value

        return json_value(value)
    return render_bytes(value, rendering)


def _format_row(
    row: dict[str, Any], shown: list[str], args: argparse.Namespace, decoder: Decoder | None
) -> str:
    out = {name: row[name] for name in shown}
    out["key"] = _render(row["key"], args.key)
    out["value"] = _render(row["value"], args.value)
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
            {"key": h["key"], "value": render_bytes(h["value"], _bytes_rendering(args.value))}
            for h in out["headers"]
        ]
    if args.format == "jsonl":
        return json.dumps(out, ensure_ascii=False)
    tp = f"{out['topic']}-{out['partition']}" if out["topic"] is not None else "-"
    cells = [
        f"{cut(escape(tp), 24):<24}",
        f"{out['offset']:>12}",
        f"{iso(out['timestamp']):<29}",
        f"{cut(_cell(out['key']), TABLE_KEY_WIDTH):<{TABLE_KEY_WIDTH}}",
        cut(_cell(out["value"]), TABLE_VALUE_WIDTH),
    ]
    extra = [name for name in shown if name not in _TABLE_BASE]
    if "decode_error" in out:
        extra.append("decode_error")
    if extra:
        cells[-1] = f"{cells[-1]:<{TABLE_VALUE_WIDTH}}"
        cells += [f"{name}={_cell(out[name])}" for name in extra]
    return " ".join(cells).rstrip()


_TABLE_BASE = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value")


def _table_header(shown: list[str]) -> str:
    header = (
        f"{'TOPIC-PARTITION':<24} {'OFFSET':>12} {'TIMESTAMP':<29} {'KEY':<{TABLE_KEY_WIDTH}} VALUE"
    )
    extra = [name for name in shown if name not in _TABLE_BASE]
    if extra:
        header = f"{header:<{24 + 12 + 29 + TABLE_KEY_WIDTH + 4 + TABLE_VALUE_WIDTH}} "
        header += " ".join(name.upper() for name in extra)
    return header.rstrip() + "\n"


# Control characters would break a table row: shown as JSON escapes (\n, \t, \u001b, ...):
# C0, DEL, C1 (U+0085 is a line break to some terminals, U+009B a terminal's escape) and the
# line and paragraph separators U+2028/U+2029.
_ESCAPES = {c: json.dumps(chr(c))[1:-1] for c in (*range(32), *range(127, 160), 0x2028, 0x2029)}


def escape(text: str) -> str:
    """``text`` with control characters and line separators escaped, so one row stays one
    line."""
    return text.translate(_ESCAPES)


def _cell(value: Any) -> str:
    """A table cell: ``<null>`` for a null (a tombstone's value), JSON for nested values."""
    if value is None:
        return "<null>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return escape(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    return escape(str(value))
