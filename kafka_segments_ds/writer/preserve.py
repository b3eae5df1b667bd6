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
from kafka_segments_ds.records.encoder import BatchSettings, BinaryColumn, RecordColumns, encode_v2
from kafka_segments_ds.records.v2 import CRC_START, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK
from kafka_segments_ds.writer.columns import check_record_sizes, record_columns

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
    offsets: np.ndarray = pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False)
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
    values: np.ndarray = pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False)
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
    flags: np.ndarray = pc.fill_null(table.column(name), False).to_numpy(zero_copy_only=False)
    return flags.astype(bool)


def _codes(table: pa.Table, where: str) -> np.ndarray | None:
    if "compression" not in table.column_names:
        return None
    column = table.column("compression")
    codes = pc.index_in(column, value_set=pa.array(CODEC_LABELS))
    unknown = pc.and_(pc.is_valid(column), pc.is_null(codes))
    if pc.any(unknown).as_py():
        row = int(np.argmax(unknown.to_numpy(zero_copy_only=False)))
        raise InvalidInputError(
            f"{where}: row {row} has compression {column[row].as_py()!r}, not one of "
            f"{', '.join(CODEC_LABELS)}"
        )
    filled: np.ndarray = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False)
    return filled.astype(np.int64)


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
    check_record_sizes(columns, settings.compression != CompressionType.NONE)
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
    bases: np.ndarray | None = None
    lasts: np.ndarray | None = None
    if batch_cols:
        bases = _int_column(table, "batchBaseOffset", 0, 0, 2**63 - 1, where)
        lasts = _int_column(table, "batchLastOffset", 0, 0, 2**63 - 1, where)
        assert bases is not None and lasts is not None  # both columns are there
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
    run_starts = np.flatnonzero(cut)
    run_stops = np.append(run_starts[1:], rows)
    if bases is not None and lasts is not None:
        run_bases, run_lasts = bases[run_starts], lasts[run_starts]
        overlap = run_bases[1:] <= run_lasts[:-1]
        if overlap.any():
            k = int(np.argmax(overlap)) + 1
            raise InvalidInputError(
                f"{where}: the batch of offsets [{int(run_bases[k])}, {int(run_lasts[k])}] (row "
                f"{int(run_starts[k])}) overlaps the batch before it, which ends at offset "
                f"{int(run_lasts[k - 1])}"
            )
    else:
        run_bases, run_lasts = offsets[run_starts], offsets[run_stops - 1]
    batches = _Batches(
        columns, offsets, settings, fields, transactional, append, stamps, codecs, bases is None
    )
    # Runs whose rows hold every offset of the batch go through the columnar encoder, many
    # runs per call; the others (gaps inside a batch) through the reference builder.
    whole = (run_stops - run_starts == run_lasts - run_bases + 1) & (
        offsets[run_starts] == run_bases
    )
    codec_of = batches.codec[run_starts]
    sized = batches.sized[run_starts]
    breaks = np.ones(len(run_starts), bool)
    breaks[1:] = (
        ~whole[1:] | ~whole[:-1] | (codec_of[1:] != codec_of[:-1]) | (sized[1:] != sized[:-1])
    )
    bounds = [*np.flatnonzero(breaks).tolist(), len(run_starts)]
    for r0, r1 in itertools.pairwise(bounds):
        first, stop = int(run_starts[r0]), int(run_stops[r1 - 1])
        if whole[r0]:
            batches.stretch(first, stop, cut[first:stop])
        else:
            batches.one(first, stop, int(run_bases[r0]), int(run_lasts[r0]))
    return batches.result()


class _Batches:
    """Collects the batches of one encode_preserved call, in row order."""

    def __init__(
        self,
        columns: RecordColumns,
        offsets: np.ndarray,
        settings: BatchSettings,
        fields: dict[str, np.ndarray | None],
        transactional: np.ndarray | None,
        append: np.ndarray,
        stamps: np.ndarray,
        codecs: np.ndarray | None,
        size_cuts: bool,
    ) -> None:
        rows = len(offsets)
        self.columns, self.offsets, self.settings = columns, offsets, settings
        self.append, self.stamps = append, stamps
        self.transactional = transactional if transactional is not None else np.zeros(rows, bool)
        default = int(settings.compression)
        self.codec: np.ndarray = (
            np.where(codecs >= 0, codecs, default)
            if codecs is not None
            else np.full(rows, default, np.int64)
        )
        self.header = {  # batch header field -> per-row values
            name: values if values is not None else np.full(rows, getattr(settings, attr))
            for name, attr in (
                ("producerId", "producer_id"),
                ("producerEpoch", "producer_epoch"),
                ("baseSequence", "base_sequence"),
                ("leaderEpoch", "leader_epoch"),
            )
            for values in (fields[name],)
        }
        # idempotent batches are never cut by size: one run is one producer batch
        self.sized = np.full(rows, size_cuts, bool) & (self.header["baseSequence"] < 0)
        self.parts: list[bytes] = []
        self.lists: tuple[list[int], ...] = ([], [], [], [], [])  # size, base, last, max, row

    def _run_settings(self, row: int) -> BatchSettings:
        codec = int(self.codec[row])
        changes: dict[str, Any] = {"log_append_time": None}
        if codec != self.settings.compression:
            changes.update(compression=CompressionType(codec), level=None)
        if not self.sized[row]:
            changes.update(batch_bytes=ONE_BATCH, batch_records=ONE_BATCH)
        return replace(self.settings, **changes)

    def stretch(self, first: int, stop: int, cuts: np.ndarray) -> None:
        """Rows ``first:stop``, each run holding consecutive offsets: one columnar encode, then
        each batch's header fields set from its first row."""
        run = self._run_settings(first)
        encoded = encode_v2(_slice(self.columns, first, stop), run, 0, starts=cuts.astype(np.uint8))
        heads = encoded.first_rows + first
        out = np.frombuffer(bytearray(encoded.data), np.uint8)
        positions, sizes = encoded.positions, encoded.sizes

        def put(at: int, values: np.ndarray, dtype: str) -> None:
            width = np.dtype(dtype).itemsize
            index = (positions[:, None] + at + np.arange(width)).ravel()
            out[index] = values.astype(dtype).view(np.uint8)

        put(0, self.offsets[heads], ">i8")  # baseOffset and leader epoch: outside the CRC
        put(12, self.header["leaderEpoch"][heads], ">i4")
        attributes = (out[positions + 21].astype(np.int64) << 8) | out[positions + 22]
        attributes |= np.where(self.transactional[heads], TRANSACTIONAL_MASK, 0)
        attributes |= np.where(self.append[heads], TIMESTAMP_TYPE_MASK, 0)
        put(21, attributes, ">i2")
        put(43, self.header["producerId"][heads], ">i8")
        put(51, self.header["producerEpoch"][heads], ">i2")
        put(53, self.header["baseSequence"][heads], ">i4")
        view = out.data
        crcs = [
            crc32c(view[p + CRC_START : p + size])
            for p, size in zip(positions.tolist(), sizes.tolist(), strict=True)
        ]
        put(17, np.asarray(crcs, np.int64), ">u4")
        self.parts.append(out.tobytes())
        for target, values in zip(
            self.lists,
            (
                sizes,
                self.offsets[heads],
                self.offsets[encoded.last_rows + first],
                encoded.max_timestamps,
                heads,
            ),
            strict=True,
        ):
            target.extend(values.tolist())

    def one(self, first: int, stop: int, base: int, last: int) -> None:
        """One batch with gaps in its offsets: the reference builder."""
        run = replace(
            self._run_settings(first),
            producer_id=int(self.header["producerId"][first]),
            producer_epoch=int(self.header["producerEpoch"][first]),
            base_sequence=int(self.header["baseSequence"][first]),
            leader_epoch=int(self.header["leaderEpoch"][first]),
            log_append_time=int(self.stamps[first]) if self.append[first] else None,
        )
        batch = _encode_one(
            self.columns, self.offsets, first, stop, base, last, run,
            bool(self.transactional[first]),
        )  # fmt: skip
        self.parts.append(batch)
        # the batch's append time (log_append_time above) or its largest timestamp
        top = int(self.stamps[first]) if self.append[first] else int(self.stamps[first:stop].max())
        for target, value in zip(self.lists, (len(batch), base, last, top, first), strict=True):
            target.append(value)

    def result(self) -> PreservedBatches:
        sizes, base_list, last_list, max_list, first_rows = (
            np.asarray(values, np.int64) for values in self.lists
        )
        return PreservedBatches(
            b"".join(self.parts), sizes, base_list, last_list, max_list, first_rows
        )


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
            f"{name}: with preserveOffsets=true the rows start at offset {first} (the base offset "
            f"of their first batch), below {why}; offsets must increase strictly within a "
            "partition, in input order, and a batch's rows must stay in one Spark partition; "
            "nothing was written"
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

    def blob(col: BinaryColumn, i: int) -> bytes | None:
        if not col.valid[i]:
            return None
        return col.data[col.offsets[i] : col.offsets[i + 1]].tobytes()

    hk, hv = columns.header_keys, columns.header_values
    specs = []
    for i in range(first, stop):
        headers = tuple(
            ((blob(hk, h) or b"").decode("utf-8"), blob(hv, h))  # keys are never null
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
