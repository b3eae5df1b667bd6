"""One walk over a segment's ``.log`` through a reused window buffer, for the commands that
need its entries' header facts (``verify``, ``rebuild-index``, ``stats``) rather than its
records: a whole-file read would fault in fresh memory as large as the file (a 1 GiB segment is
Kafka's default), twice the time of the walk."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds.cli.common import storage_error
from kafka_segments_ds.errors import KafkaSegmentsError, StorageError
from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.reader.source import SegmentSource
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import (
    EntryTable,
    entry_table,
    failed_checksums,
    walk_entries,
)
from kafka_segments_ds.records.v2 import CONTROL_ABORT
from kafka_segments_ds.transactions import control_marker

WINDOW_BYTES = 4 << 20  # the window of the commands without read options (readChunkBytes's default)
REMOTE_WINDOW_BYTES = 64 << 20  # the window on an object store: a request each


@dataclass(frozen=True, slots=True, eq=False)
class LogScan:
    """What one walk over a ``.log`` tells (no record decoded)."""

    size: int  # the .log's size the walk was given (the segment's, as listed or stat'ed)
    table: EntryTable  # its whole entries, as scan_entries over the whole file gives them
    aborts: list[int]  # last offsets of the ABORT markers among them (empty without markers)
    zero_tail: bool  # the bytes past the whole entries (if any) are all zero
    bad_checksums: list[int] | None  # positions of the entries failing their CRC; None: unchecked


def scan_log(
    filesystem: pafs.FileSystem,
    segment: SegmentRef,
    shown: str,
    window_bytes: int,
    checksums: bool = False,
    markers: bool = True,
) -> LogScan:
    """Walk ``segment``'s ``.log`` window by window through one reused buffer; with
    ``checksums``, also check each whole entry's CRC (``LogScan.bad_checksums``); without
    ``markers``, leave the ABORT markers unread (``LogScan.aborts`` empty).

    Raises :class:`StorageError` when the file cannot be read, or is shorter than listed."""
    size = segment.size
    source = SegmentSource(filesystem, segment.path, size, shown)
    if not source.is_local:
        window_bytes = max(window_bytes, REMOTE_WINDOW_BYTES)

    def read(position: int, length: int) -> np.ndarray:
        data = source.fill(position, length)
        if data.shape[0] < min(length, size - position):
            raise StorageError(
                f"short read: the file has shrunk below its listed {size} bytes",
                shown,
                position + data.shape[0],
            )
        return data

    parts: list[EntryTable] = []  # positions made file positions
    aborts: list[int] = []
    bad: list[int] = []
    try:
        end, outcome = 0, K.FRAMING_END
        for walked in walk_entries(read, 0, size, window_bytes):
            table = entry_table(
                walked.window, walked.positions, walked.magics, walked.stop, walked.outcome
            )
            if markers:
                aborts += _abort_markers(walked.window, walked.base, table, segment)
            if checksums:
                bad += _failed_checksums(walked.window, walked.base, table)
            parts.append(replace(table, positions=table.positions + walked.base))
            end, outcome = walked.end, walked.outcome
        zero_tail = all(
            not read(at, min(window_bytes, size - at)).any()
            for at in range(end, size, window_bytes)
        )
    except OSError as err:
        raise storage_error(err, shown) from err
    finally:
        source.close()
    table = _joined(parts, end, outcome)
    return LogScan(size, table, aborts, zero_tail, bad if checksums else None)


def _joined(parts: list[EntryTable], end: int, outcome: int) -> EntryTable:
    """One table of the windows' tables."""

    def cat(name: str, dtype: type) -> np.ndarray:
        arrays = [getattr(table, name) for table in parts]
        return np.concatenate(arrays) if arrays else np.empty(0, dtype)

    return EntryTable(
        cat("positions", np.int64),
        cat("sizes", np.int64),
        cat("magics", np.int8),
        cat("last_offsets", np.int64),
        cat("max_timestamps", np.int64),
        end,
        outcome,
    )


def _failed_checksums(window: np.ndarray, base: int, table: EntryTable) -> list[int]:
    """File positions of the whole entries of ``window`` (at file position ``base``) whose
    stored CRC does not match."""
    failed = failed_checksums(window, table.positions, table.magics)
    bad: list[int] = (table.positions[failed] + base).tolist()
    return bad


def _abort_markers(
    window: np.ndarray, base: int, table: EntryTable, segment: SegmentRef
) -> list[int]:
    """Offsets of the ABORT markers among the whole entries of ``window`` (at file position
    ``base``; a damaged control batch is left to the .log finding)."""
    v2 = np.flatnonzero(table.magics == 2)
    attributes_at = 22  # the low byte of the int16: offset 8, length 4, epoch 4, magic 1, crc 4
    control = v2[(window[table.positions[v2] + attributes_at] & 0x20) != 0]
    found = []
    for i in control.tolist():
        position, size = int(table.positions[i]), int(table.sizes[i])
        try:
            marker = control_marker(
                window[position : position + size].tobytes(), segment, base + position
            )
        except KafkaSegmentsError:
            continue
        if marker is not None and marker.type == CONTROL_ABORT:
            found.append(int(table.last_offsets[i]))
    return found
