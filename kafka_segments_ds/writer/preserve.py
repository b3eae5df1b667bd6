"""``preserveOffsets=true``: rows carry their offsets and batch fields; batches are rebuilt so.

Batches are runs of rows that can share one batch header. A run ends where ``producerId``,
``producerEpoch``, ``baseSequence``, ``isTransactional``, ``leaderEpoch``, ``timestampType`` or
``compression`` change (columns that are absent take the writer's defaults), where a
LogAppendTime row's timestamp changes (the batch holds one append time), and:

* with ``batchBaseOffset``/``batchLastOffset`` columns (the reader's), where the batch changes:
  each batch gets its original base offset, last offset delta and offset deltas, so records a
  log cleaner removed stay gaps inside the batch, and an idempotent batch keeps the sequence
  numbers Kafka derives from it (record sequence = baseSequence + offsetDelta, last sequence =
  baseSequence + lastOffsetDelta, as ``DefaultRecordBatch`` defines them);
* without them, at every gap in the offsets: each batch's base offset is its first row's; a
  run of non-idempotent rows is cut by ``batchBytes``/``batchRecords``; a run of idempotent rows
  (``baseSequence`` >= 0) is one batch, as a change of ``baseSequence`` separates producer
  batches.

Control records (``isControl`` true) are refused: the reader's deep rows never hold them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_segments_ds.errors import InvalidInputError
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.records.checksums import crc32c
from kafka_segments_ds.records.compression import CODEC_LABELS, CompressionType
from kafka_segments_ds.records.encoder import BatchSettings, RecordColumns, encode_v2
from kafka_segments_ds.records.v2 import CRC_START, TRANSACTIONAL_MASK
from kafka_segments_ds.writer.columns import record_columns

INT32_MAX = 2**31 - 1
ONE_BATCH = 1 << 62  # batch_bytes / batch_records that never cut a run
# batch header fields from rows: column -> (default when absent, smallest, largest)
HEADER_COLUMNS = {
    "producerId": (-1, -1, 2**63 - 1),
    "producerEpoch": (-1, -1, 2**15 - 1),
    "baseSequence": (-1, -1, INT32_MAX),
    "leaderEpoch": (None, -1, INT32_MAX),  # None: the writer's (BatchSettings.leader_epoch)
    "timestampType": (None, -1, 1),  # None: the option timestampType
}


@dataclass(frozen=True)
class PreservedBatches:
    """Encoded batches, end to end, with absolute offsets."""

    data: bytes
    sizes: np.ndarray  # int64 per batch
    base_offsets: np.ndarray
    last_offsets: np.ndarray
    max_timestamps: np.ndarray
    first_rows: np.ndarray  # row of each batch's first record


def row_offsets(table: pa.Table, where: str) -> np.ndarray:
    """The ``offset`` column as int64, refusing nulls and negative values."""
    column = table.column("offset")
    if column.null_count:
        row = int(np.argmax(~pc.is_valid(column).to_numpy(zero_copy_only=False)))
        raise InvalidInputError(f"{where}: row {row} has a null offset (preserveOffsets=true)")
    offsets = pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False)
    if len(offsets) and offsets.min() < 0:
        row = int(np.argmax(offsets < 0))
        raise InvalidInputError(f"{where}: row {row} has offset {int(offsets[row])} < 0")
    return offsets


def check_increasing(offsets: np.ndarray, previous: int, where: str) -> None:
    """Offsets must increase strictly, after ``previous`` (-1: none yet)."""
    if not len(offsets):
        return
    before = np.concatenate(([previous], offsets[:-1]))
    bad = offsets <= before
    if bad.any():
        row = int(np.argmax(bad))
        raise InvalidInputError(
            f"{where}: offset {int(offsets[row])} follows offset {int(before[row])} (row {row} "
            "of the partition's rows in this batch of input): with preserveOffsets=true the "
            "offsets of a partition must increase strictly in input order"
        )


def _int_column(
    table: pa.Table, name: str, default: int | None, low: int, high: int, where: str
) -> np.ndarray | None:
    """The column ``name`` as int64 within [low, high] (None when absent: ``default`` applies)."""
    if name not in table.column_names:
        return None
    column = table.column(name)
    if column.null_count:
        row = int(np.argmax(~pc.is_valid(column).to_numpy(zero_copy_only=False)))
        raise InvalidInputError(f"{where}: row {row} has a null {name}")
    values = pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False)
    bad = (values < low) | (values > high)
    if bad.any():
        row = int(np.argmax(bad))
        raise InvalidInputError(
            f"{where}: row {row} has {name} {int(values[row])}, outside [{low}, {high}]"
        )
    return values


def _bool_column(table: pa.Table, name: str) -> np.ndarray | None:
    if name not in table.column_names:
        return None
    return pc.fill_null(table.column(name), False).to_numpy(zero_copy_only=False).astype(bool)


def _codes(table: pa.Table, where: str) -> np.ndarray | None:
    if "compression" not in table.column_names:
        return None
    labels = table.column("compression").to_pylist()
    try:
        return np.fromiter(
            (-1 if label is None else CODEC_LABELS.index(label) for label in labels),
            np.int64,
            len(labels),
        )
    except ValueError:
        bad = next(label for label in labels if label is not None and label not in CODEC_LABELS)
        raise InvalidInputError(
            f"{where}: compression {bad!r} is not one of {', '.join(CODEC_LABELS)}"
        ) from None


def encode_preserved(
    table: pa.Table, offsets: np.ndarray, settings: BatchSettings, where: str
) -> PreservedBatches:
    """Encode the rows of one partition (offsets already checked to increase) as batches."""
    rows = table.num_rows
    control = _bool_column(table, "isControl")
    if control is not None and control.any():
        row = int(np.argmax(control))
        raise InvalidInputError(
            f"{where}: row {row} (offset {int(offsets[row])}) is a control record: "
            "preserveOffsets=true does not write transaction markers; filter isControl rows out"
        )
    fields = {name: _int_column(table, name, *spec, where) for name, spec in HEADER_COLUMNS.items()}
    transactional = _bool_column(table, "isTransactional")
    codecs = _codes(table, where)
    # timestamps: null stays "none" (-1) rather than taking the write time
    stamps_valid = (
        pc.is_valid(table.column("timestamp")).to_numpy(zero_copy_only=False)
        if "timestamp" in table.column_names
        else None
    )
    columns = record_columns(table, 0)
    if stamps_valid is not None and not stamps_valid.all():
        columns = replace(columns, timestamps=np.where(stamps_valid, columns.timestamps, -1))
    stamps = columns.timestamps
    types = fields["timestampType"]
    append = (
        types == 1
        if types is not None
        else np.full(rows, settings.log_append_time is not None, bool)
    )
    if types is None and settings.log_append_time is not None:
        stamps = np.full(rows, settings.log_append_time, np.int64)
        columns = replace(columns, timestamps=stamps)
    cut = np.zeros(rows, bool)
    if rows:
        cut[0] = True
    keys = [v for v in (*fields.values(), transactional, codecs) if v is not None]
    keys.append(append)
    keys.append(np.where(append, stamps, -2))  # one append time per batch
    batch_cols = [c for c in ("batchBaseOffset", "batchLastOffset") if c in table.column_names]
    if len(batch_cols) == 1:
        raise InvalidInputError(
            f"{where}: give both batchBaseOffset and batchLastOffset, or neither"
        )
    bases = lasts = None
    if batch_cols:
        bases = _int_column(table, "batchBaseOffset", 0, 0, 2**63 - 1, where)
        lasts = _int_column(table, "batchLastOffset", 0, 0, 2**63 - 1, where)
        bad = (bases > offsets) | (lasts < offsets) | (lasts - bases > INT32_MAX)
        if bad.any():
            row = int(np.argmax(bad))
            raise InvalidInputError(
                f"{where}: row {row} has offset {int(offsets[row])} outside its batch "
                f"[{int(bases[row])}, {int(lasts[row])}] (batchBaseOffset, batchLastOffset; "
                f"a batch spans at most {INT32_MAX} offsets)"
            )
        keys += [bases, lasts]
    else:
        cut[1:] |= np.diff(offsets) != 1
    for key in keys:
        cut[1:] |= key[1:] != key[:-1]
    starts = [*np.flatnonzero(cut).tolist(), rows]
    parts: list[bytes] = []
    first_rows: list[int] = []
    sizes: list[int] = []
    base_list: list[int] = []
    last_list: list[int] = []
    max_list: list[int] = []
    given = {  # BatchSettings field -> its column (absent: the settings' value)
        field: fields[name]
        for field, name in (
            ("producer_id", "producerId"),
            ("producer_epoch", "producerEpoch"),
            ("base_sequence", "baseSequence"),
            ("leader_epoch", "leaderEpoch"),
        )
        if fields[name] is not None
    }
    for first, stop in itertools.pairwise(starts):
        run = replace(settings, **{k: int(v[first]) for k, v in given.items()})
        if codecs is not None and codecs[first] >= 0:
            run = replace(run, compression=CompressionType(int(codecs[first])), level=None)
        run = replace(run, log_append_time=int(stamps[first]) if append[first] else None)
        transactional_run = bool(transactional[first]) if transactional is not None else False
        if bases is not None:
            base, last = int(bases[first]), int(lasts[first])
            if base_list and base <= last_list[-1]:
                raise InvalidInputError(
                    f"{where}: the batch of offsets [{base}, {last}] (row {first}) overlaps the "
                    f"batch before it, which ends at offset {last_list[-1]}"
                )
        else:
            base, last = int(offsets[first]), int(offsets[stop - 1])
        whole = stop - first == last - base + 1 and int(offsets[first]) == base
        if bases is not None or run.base_sequence >= 0:
            run = replace(run, batch_bytes=ONE_BATCH, batch_records=ONE_BATCH)
        if whole:
            encoded = encode_v2(_slice(columns, first, stop), run, base)
            data = bytes(encoded.data)
            if transactional_run:
                data = _mark_transactional(data, encoded.positions, encoded.sizes)
            parts.append(data)
            first_rows.extend((encoded.first_rows + first).tolist())
            sizes.extend(encoded.sizes.tolist())
            base_list.extend((encoded.first_rows + base).tolist())
            last_list.extend((encoded.last_rows + base).tolist())
            max_list.extend(encoded.max_timestamps.tolist())
            continue
        batch = _encode_one(columns, offsets, first, stop, base, last, run, transactional_run)
        parts.append(batch)
        first_rows.append(first)
        sizes.append(len(batch))
        base_list.append(base)
        last_list.append(last)
        max_list.append(run.log_append_time if append[first] else int(stamps[first:stop].max()))
    return PreservedBatches(
        b"".join(parts),
        np.asarray(sizes, np.int64),
        np.asarray(base_list, np.int64),
        np.asarray(last_list, np.int64),
        np.asarray(max_list, np.int64),
        np.asarray(first_rows, np.int64),
    )


def _mark_transactional(data: bytes, positions: np.ndarray, sizes: np.ndarray) -> bytes:
    """Set the transactional attribute of each batch in ``data`` and redo its CRC-32C."""
    out = bytearray(data)
    for p, size in zip(positions.tolist(), sizes.tolist(), strict=True):
        attributes = int.from_bytes(out[p + 21 : p + 23], "big") | TRANSACTIONAL_MASK
        out[p + 21 : p + 23] = attributes.to_bytes(2, "big")
        crc = crc32c(memoryview(out)[p + CRC_START : p + size])
        out[p + 17 : p + 21] = crc.to_bytes(4, "big")
    return bytes(out)


def check_chunk_start(chunk: Any, after: int, log_end: int, name: str) -> int:
    """A staged chunk's first batch must start at or after ``after`` (the partition's end, or
    the offset after an earlier task's rows); returns the offset after the chunk."""
    first = int(chunk.first_offsets[0])
    if first < after:
        if after == log_end:
            why = f"the partition's end, offset {log_end}: a write cannot go back in the log"
        else:
            why = f"offset {after - 1}, the last offset of rows an earlier Spark partition wrote"
        raise InvalidInputError(
            f"{name}: with preserveOffsets=true the rows start at offset {first}, below {why} "
            "(offsets must increase strictly within a partition, in input order); nothing "
            "was written"
        )
    return int(chunk.last_offsets[-1]) + 1


def _slice(columns: RecordColumns, first: int, stop: int) -> RecordColumns:
    """Rows ``first:stop`` of ``columns`` (binary columns keep their absolute offsets)."""
    keys, values = columns.keys, columns.values
    return RecordColumns(
        columns.timestamps[first:stop],
        replace(keys, offsets=keys.offsets[first : stop + 1], valid=keys.valid[first:stop]),
        replace(values, offsets=values.offsets[first : stop + 1], valid=values.valid[first:stop]),
        columns.header_rows[first : stop + 1],
        columns.header_keys,
        columns.header_values,
    )


def _encode_one(
    columns: RecordColumns,
    offsets: np.ndarray,
    first: int,
    stop: int,
    base: int,
    last: int,
    run: BatchSettings,
    transactional: bool,
) -> bytes:
    """One batch with offset deltas from ``base`` (gaps kept) and ``last - base`` as its last
    offset delta: the reference builder, record by record."""

    def blob(col, i):  # type: ignore[no-untyped-def]
        if not col.valid[i]:
            return None
        return col.data[col.offsets[i] : col.offsets[i + 1]].tobytes()

    hk, hv = columns.header_keys, columns.header_values
    specs = []
    for i in range(first, stop):
        headers = tuple(
            (blob(hk, h).decode("utf-8"), blob(hv, h))
            for h in range(int(columns.header_rows[i]), int(columns.header_rows[i + 1]))
        )
        specs.append(
            RecordSpec(
                value=blob(columns.values, i),
                key=blob(columns.keys, i),
                timestamp=int(columns.timestamps[i]),
                headers=headers,
                offset_delta=int(offsets[i]) - base,
            )
        )
    return encode_batch(
        specs,
        base_offset=base,
        compression=run.compression,
        timestamp_type=1 if run.log_append_time is not None else 0,
        log_append_time=run.log_append_time,
        producer_id=run.producer_id,
        producer_epoch=run.producer_epoch,
        base_sequence=run.base_sequence,
        is_transactional=transactional,
        leader_epoch=run.leader_epoch,
        last_offset_delta=last - base,
        level=run.level,
    )
