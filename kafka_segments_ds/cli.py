"""``kafka-segments``: dump, verify, stats and rebuild-index for Kafka log segments.

Every command streams through :func:`kafka_segments_ds.iter_batches` (bounded memory) or reads
one segment at a time. Exit status: 0 ok, 1 ``verify``/``rebuild-index`` found errors, 2 bad
input (missing path, corrupt data in ``dump``/``stats``, bad option), 130 interrupted.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import posixpath
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone
from typing import Any, TextIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from kafka_segments_ds import index as kidx
from kafka_segments_ds import iter_batches
from kafka_segments_ds.errors import InvalidOptionError, KafkaSegmentsError
from kafka_segments_ds.fs import display_path, read_file, resolve
from kafka_segments_ds.layout import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    PartitionLog,
    SegmentRef,
    discover,
    parse_segment_file_name,
    segment_file_name,
)
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import EntryTable, scan_entries

PROG = "kafka-segments"
TABLE_VALUE_WIDTH = 60
TABLE_KEY_WIDTH = 24
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


class PipeClosed(Exception):
    """The reader of stdout went away (``kafka-segments dump ... | head``)."""


# --------------------------------------------------------------------------------------------
# Output helpers
# --------------------------------------------------------------------------------------------


def write_lines(lines: Iterable[str], stream: TextIO) -> None:
    """Write and flush each line as it comes; a closed pipe raises :class:`PipeClosed`."""
    try:
        for line in lines:
            stream.write(line + "\n")
            stream.flush()
    except BrokenPipeError as err:
        raise PipeClosed from err


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


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _progress(items: list[Any], quiet: bool, desc: str) -> Iterable[Any]:
    """A tqdm bar on stderr, only when stderr is a terminal and not ``--quiet``."""
    if quiet or not sys.stderr.isatty():
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="segment", file=sys.stderr, leave=False)


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


# --------------------------------------------------------------------------------------------
# Paths and partitions
# --------------------------------------------------------------------------------------------


def _partitions(
    paths: list[str], options: dict[str, str]
) -> list[tuple[pafs.FileSystem, PartitionLog]]:
    found: list[tuple[pafs.FileSystem, PartitionLog]] = []
    for path in paths:
        filesystem, resolved = resolve(path, options)
        found.extend((filesystem, part) for part in discover(resolved, filesystem))
    return found


def _label(part: PartitionLog) -> str:
    return part.directory if part.topic is None else f"{part.topic}-{part.partition}"


def _sibling(segment: SegmentRef, suffix: str) -> str:
    return posixpath.join(
        posixpath.dirname(segment.path), segment_file_name(segment.base_offset, suffix)
    )


# --------------------------------------------------------------------------------------------
# dump
# --------------------------------------------------------------------------------------------


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


def _dump_rows(args: argparse.Namespace, path: str, budget: list[int]) -> Iterator[str]:
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
        f"{_cut(tp, 24):<24} {row['offset']:>12}  {_iso(row['timestamp']):<29} "
        f"{_cut(key, TABLE_KEY_WIDTH):<24} {_cut(value, TABLE_VALUE_WIDTH)}"
    )


def dump_index(path: str, options: dict[str, str]) -> Iterator[str]:
    """Lines for one ``.index`` / ``.timeindex`` / ``.txnindex`` file and a summary line."""
    filesystem, resolved = resolve(path, options)
    name = posixpath.basename(resolved)
    parsed = parse_segment_file_name(name)
    if parsed is None:
        raise InvalidOptionError(
            f"{path}: expected <20-digit base offset>.index/.timeindex/.txnindex"
        )
    base_offset, suffix = parsed
    data = read_file(filesystem, resolved).to_pybytes()
    directory = posixpath.dirname(resolved)
    if suffix == TXN_INDEX_SUFFIX:
        entries = kidx.parse_txn_index(data)
        for txn in entries:
            yield json.dumps(
                {
                    "producer_id": txn.producer_id,
                    "first_offset": txn.first_offset,
                    "last_offset": txn.last_offset,
                    "last_stable_offset": txn.last_stable_offset,
                }
            )
        yield json.dumps(
            {"summary": {"file": path, "entries": len(entries), "ignored": 0, "problem": None}}
        )
        return
    if suffix == INDEX_SUFFIX:
        log_info = filesystem.get_file_info(
            posixpath.join(directory, segment_file_name(base_offset, ".log"))
        )
        log_size = int(log_info.size) if log_info.type == pafs.FileType.File else None
        index: kidx.OffsetIndex | kidx.TimeIndex
        index = kidx.parse_offset_index(data, base_offset, log_size)
        for offset, position in zip(index.offsets.tolist(), index.positions.tolist(), strict=True):
            yield json.dumps({"offset": offset, "position": position})
    elif suffix == TIME_INDEX_SUFFIX:
        # The next segment's base offset bounds this segment's time-index offsets.
        later = sorted(
            int(info.base_name.partition(".")[0])
            for info in filesystem.get_file_info(pafs.FileSelector(directory))
            if (p := parse_segment_file_name(info.base_name)) is not None
            and p[1] == ".log"
            and p[0] > base_offset
        )
        tindex = kidx.parse_time_index(data, base_offset, later[0] if later else None)
        index = tindex
        for ts, offset in zip(tindex.timestamps.tolist(), tindex.offsets.tolist(), strict=True):
            yield json.dumps({"timestamp": ts, "offset": offset})
    else:
        raise InvalidOptionError(f"{path}: not a .index, .timeindex or .txnindex file")
    summary = {
        "file": path,
        "entries": len(index),
        "ignored": index.ignored,
        "problem": index.problem,
    }
    yield json.dumps({"summary": summary})


def cmd_dump(args: argparse.Namespace) -> int:
    budget = [args.limit if args.limit is not None else sys.maxsize]
    for path in args.paths:
        if path.endswith(INDEX_SUFFIXES):
            write_lines(dump_index(path, args.option), sys.stdout)
        else:
            write_lines(_dump_rows(args, path, budget), sys.stdout)
    return 0


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


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
    records = 0
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


def cmd_verify(args: argparse.Namespace) -> int:
    work = []
    for filesystem, part in _partitions(args.paths, args.option):
        for i, segment in enumerate(part.segments):
            following = part.segments[i + 1].base_offset if i + 1 < len(part.segments) else None
            work.append((filesystem, segment, following))
    errors = 0
    for filesystem, segment, following in _progress(work, args.quiet, "verify"):
        lines = verify_segment(filesystem, segment, following, args.option)
        errors += sum(status == "ERROR" for status, _, _ in lines)
        write_lines((f"{status} {path}: {details}" for status, path, details in lines), sys.stdout)
    return 1 if errors else 0


# --------------------------------------------------------------------------------------------
# stats
# --------------------------------------------------------------------------------------------


def partition_stats(
    filesystem: pafs.FileSystem, part: PartitionLog, options: dict[str, str]
) -> dict[str, Any]:
    """Counts for one partition: three streamed reads (shallow, deep, deep read_committed)."""
    paths = [display_path(filesystem, s.path) for s in part.segments]
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
    ("FIRST-TS", lambda s: _iso(s["first_timestamp"])),
    ("LAST-TS", lambda s: _iso(s["last_timestamp"])),
    ("CODECS", lambda s: ",".join(f"{c}:{n}" for c, n in s["codecs"].items())),
    ("RATIO~", lambda s: s["compression_ratio_approximate"]),
    ("MAGICS", lambda s: ",".join(f"v{m}:{n}" for m, n in s["magics"].items())),
    ("PRODUCERS", lambda s: s["producers"]),
    ("TXN-BATCHES", lambda s: s["transactional_batches"]),
    ("ABORTED", lambda s: s["aborted_records"]),
)


def cmd_stats(args: argparse.Namespace) -> int:
    parts = _partitions(args.paths, args.option)
    results = [
        partition_stats(filesystem, part, args.option)
        for filesystem, part in _progress(parts, args.quiet, "stats")
    ]
    if args.format == "jsonl":
        write_lines((json.dumps(s) for s in results), sys.stdout)
        return 0
    cells = [[str(get(s)) for _, get in _STATS_TABLE] for s in results]
    header = [name for name, _ in _STATS_TABLE]
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *cells]
    ]
    lines.append("RATIO~ is approximate: key+value bytes of the records / stored batch bytes")
    write_lines(lines, sys.stdout)
    return 0


# --------------------------------------------------------------------------------------------
# rebuild-index
# --------------------------------------------------------------------------------------------


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
        path = _sibling(segment, suffix)
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


def cmd_rebuild_index(args: argparse.Namespace) -> int:
    work: list[tuple[pafs.FileSystem, SegmentRef]] = []
    for filesystem, part in _partitions(args.paths, args.option):
        if not isinstance(filesystem, pafs.LocalFileSystem):
            raise InvalidOptionError("rebuild-index writes local files only")
        work.extend((filesystem, segment) for segment in part.segments)
    errors = 0
    for filesystem, segment in _progress(work, args.quiet, "rebuild-index"):
        try:
            lines = rebuild_segment(filesystem, segment, args.index_interval_bytes, args.dry_run)
        except KafkaSegmentsError as err:
            errors += 1
            lines = [f"ERROR {display_path(filesystem, segment.path)}: {err}"]
        write_lines(lines, sys.stdout)
    return 1 if errors else 0


# --------------------------------------------------------------------------------------------
# Argument parsing and main
# --------------------------------------------------------------------------------------------


def _key_value(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "paths", nargs="+", metavar="PATH", help="log dir, partition dir, .log file, glob or URI"
    )
    common.add_argument(
        "--option",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="reader option, e.g. fs.s3.region=eu-west-1",
    )
    common.add_argument("--quiet", action="store_true", help="no progress bar")

    dump = commands.add_parser(
        "dump",
        parents=[common],
        help="print records or batches",
        description="Print records (or batches), or an index file.",
    )
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
    dump.set_defaults(run=cmd_dump)

    verify = commands.add_parser(
        "verify",
        parents=[common],
        help="check logs and indexes",
        description="Check CRCs, offsets and index/log consistency; "
        "exit 1 when any ERROR is reported.",
    )
    verify.set_defaults(run=cmd_verify)

    stats = commands.add_parser(
        "stats",
        parents=[common],
        help="per-partition statistics",
        description="Per topic-partition counts and codecs.",
    )
    stats.add_argument("--format", choices=("jsonl", "table"), default="table")
    stats.set_defaults(run=cmd_stats)

    rebuild = commands.add_parser(
        "rebuild-index",
        parents=[common],
        help="rebuild .index/.timeindex from the .log",
        description="Rebuild .index and .timeindex files as a "
        "broker's recovery does, replacing them atomically.",
    )
    rebuild.add_argument(
        "--index-interval-bytes", type=int, default=kidx.DEFAULT_INDEX_INTERVAL_BYTES, metavar="N"
    )
    rebuild.add_argument("--dry-run", action="store_true", help="only print what would change")
    rebuild.set_defaults(run=cmd_rebuild_index)
    return parser


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file descriptor (e.g. captured in tests)


def main(argv: list[str] | None = None) -> int:
    """Run the ``kafka-segments`` command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    args.option = dict(args.option)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except PipeClosed:
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (KafkaSegmentsError, OSError) as err:  # FileNotFoundError is an OSError
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
