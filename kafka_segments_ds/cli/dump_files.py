"""``kafka-segments dump`` of single files other than ``.log``: index files, producer-state
snapshots and KRaft ``.checkpoint`` snapshots."""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Iterator

import pyarrow.fs as pafs

from kafka_segments_ds import index as kidx
from kafka_segments_ds.cli.common import read_bytes
from kafka_segments_ds.errors import CorruptSegmentError, InvalidOptionError
from kafka_segments_ds.fs import resolve
from kafka_segments_ds.internal_topics.kraft_snapshot import SUFFIX as CHECKPOINT_SUFFIX
from kafka_segments_ds.internal_topics.kraft_snapshot import iter_checkpoint, parse_checkpoint_name
from kafka_segments_ds.layout import (
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
    segment_file_name,
)
from kafka_segments_ds.producer_snapshot import SUFFIX as SNAPSHOT_SUFFIX
from kafka_segments_ds.producer_snapshot import parse_producer_snapshot

INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
FILE_SUFFIXES = (*INDEX_SUFFIXES, SNAPSHOT_SUFFIX, CHECKPOINT_SUFFIX)


def dump_file(path: str, options: dict[str, str]) -> Iterator[str]:
    """Lines for one index, producer-snapshot or KRaft snapshot file (chosen by its suffix)."""
    if path.endswith(SNAPSHOT_SUFFIX):
        return dump_snapshot(path, options)
    if path.endswith(CHECKPOINT_SUFFIX):
        return dump_checkpoint(path, options)
    return dump_index(path, options)


def dump_checkpoint(path: str, options: dict[str, str]) -> Iterator[str]:
    """One line per record of a KRaft ``.checkpoint`` snapshot (header and footer control
    records, decoded metadata records), then a summary line."""
    filesystem, resolved = resolve(path, options)
    data = read_bytes(filesystem, resolved)
    named = parse_checkpoint_name(posixpath.basename(resolved))
    try:
        for row in iter_checkpoint(data):
            if "summary" in row:
                row["summary"] = {
                    "file": path,
                    "end_offset": named[0] if named else None,
                    "epoch": named[1] if named else None,
                    **row["summary"],
                }
            yield json.dumps(row, ensure_ascii=False)
    except CorruptSegmentError as err:
        raise err.located(path=path) from err


def dump_snapshot(path: str, options: dict[str, str]) -> Iterator[str]:
    """One line per producer in a ``.snapshot`` file, then a summary line."""
    filesystem, resolved = resolve(path, options)
    data = read_bytes(filesystem, resolved)
    try:
        snapshot = parse_producer_snapshot(data)
    except CorruptSegmentError as err:
        raise err.located(path=path) from err
    for entry in snapshot.entries:
        yield json.dumps(dataclasses.asdict(entry))
    summary = {
        "file": path,
        "version": snapshot.version,
        "crc": snapshot.crc,
        "entries": len(snapshot.entries),
    }
    yield json.dumps({"summary": summary})


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
    data = read_bytes(filesystem, resolved)
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
