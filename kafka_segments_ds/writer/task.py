"""One write task: rows in, one staged chunk file per topic-partition out.

A task does not know where its records will land in the partition log (that depends on how many
records earlier tasks wrote), so it encodes with offsets counted from 0 within each chunk and
reports, per entry, where it is and which rows it holds. The driver's commit
(:mod:`kafka_segments_ds.writer.commit`) then gives every chunk its base offset and lays the
entries out in segments; rebasing a magic-2 batch or a magic-1 entry only rewrites its offset
field, which no checksum covers.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from kafka_segments_ds.errors import InvalidInputError, InvalidOptionError
from kafka_segments_ds.layout import MAX_PARTITION
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.compression import CompressionType
from kafka_segments_ds.records.encoder import (
    BatchSettings,
    BinaryColumn,
    EncodedBatches,
    RecordColumns,
    encode_v2,
)
from kafka_segments_ds.records.v2 import TIMESTAMP_TYPE_MASK
from kafka_segments_ds.writer.columns import (
    binary_column,
    check_record_sizes,
    check_write_schema,
    key_partitions,
    record_columns,
)
from kafka_segments_ds.writer.options import WriteOptions, validate_topic
from kafka_segments_ds.writer.preserve import check_increasing, encode_preserved, row_offsets

CHUNK_FLUSH_BYTES = 4 << 20  # encode a chunk's pending rows once they hold this much
TASK_PENDING_BYTES = 64 << 20  # ... or once all chunks of the task together hold this much


@dataclass(frozen=True)
class JobSpec:
    """What every task of one write job needs to know (picklable; built on the driver)."""

    root: str  # the target log dir as resolved for the filesystem
    staging: str  # the job's staging directory (resolved path)
    options: WriteOptions
    now_ms: int  # write time: null timestamps and LogAppendTime
    partition_counts: dict[str, int] = field(default_factory=dict)  # existing topics' counts
    overwrite: bool = False  # replace the written topics (else append to them)
    count_conflicts: dict[str, str] = field(default_factory=dict)  # topics numPartitions resizes
    created_dirs: tuple[str, ...] = ()  # made for this job: an abort removes them again

    def partitions_of(self, topic: str) -> int:
        """The partition count keys of ``topic`` are hashed over."""
        return self.partition_counts.get(topic) or self.options.num_partitions or 1

    def partition_bound(self, topic: str) -> int | None:
        """The fixed partition count of ``topic``: partition values must stay below it (None:
        a new topic without numPartitions takes as many partitions as its values need)."""
        return self.partition_counts.get(topic) or self.options.num_partitions

    def batch_settings(self) -> BatchSettings:
        opts = self.options
        return BatchSettings(
            compression=opts.compression,
            level=opts.compression_level,
            batch_bytes=opts.batch_bytes,
            batch_records=opts.batch_records,
            log_append_time=self.now_ms if opts.log_append_time else None,
        )


@dataclass(frozen=True)
class ChunkResult:
    """One staged chunk: a task's records for one topic-partition, entries end to end."""

    topic: str
    partition: int
    path: str
    records: int
    magic: int
    compressed: bool
    positions: np.ndarray
    sizes: np.ndarray
    first_offsets: np.ndarray  # relative to the chunk: the chunk's first record is offset 0
    last_offsets: np.ndarray
    max_timestamps: np.ndarray


@dataclass(frozen=True)
class TaskResult:
    """What a task reports to the driver (Spark's commit message carries it)."""

    task_id: int
    directory: str
    chunks: tuple[ChunkResult, ...]


def encode_legacy(
    columns: RecordColumns, magic: int, settings: BatchSettings, first_offset: int = 0
) -> EncodedBatches:
    """Magic-0/1 entries: one message per record, or compressed wrappers of up to
    ``batch_bytes`` of inner messages / ``batch_records`` records (reference builder; the legacy
    formats are for compatibility, not speed)."""
    if columns.rows and columns.header_rows[-1] > columns.header_rows[0]:
        raise InvalidInputError(f"magic {magic} has no record headers; use magic 2")
    keys, values = columns.keys, columns.values

    def blob(col: BinaryColumn, i: int) -> bytes | None:
        if not col.valid[i]:
            return None
        return col.data[col.offsets[i] : col.offsets[i + 1]].tobytes()

    append_time = settings.log_append_time
    stamps = columns.timestamps if magic == 1 else np.full(columns.rows, -1, np.int64)
    entries: list[bytes] = []
    firsts: list[int] = []
    lasts: list[int] = []
    max_ts: list[int] = []
    if settings.compression == CompressionType.NONE:
        attributes = TIMESTAMP_TYPE_MASK if append_time is not None and magic == 1 else 0
        for i in range(columns.rows):
            ts = int(stamps[i]) if append_time is None or not attributes else append_time
            entries.append(
                encode_legacy_message(
                    offset=first_offset + i,
                    magic=magic,
                    key=blob(keys, i),
                    value=blob(values, i),
                    timestamp=ts,
                    attributes=attributes,
                )
            )
            firsts.append(i)
            lasts.append(i)
            max_ts.append(ts)
    else:
        i = 0
        while i < columns.rows:
            group: list[RecordSpec] = []
            size = 0
            start = i
            while i < columns.rows and len(group) < settings.batch_records:
                spec = RecordSpec(
                    value=blob(values, i), key=blob(keys, i), timestamp=int(stamps[i])
                )
                inner = 12 + (14 if magic == 0 else 22)
                inner += len(spec.key or b"") + len(spec.value or b"")
                if group and size + inner > settings.batch_bytes:
                    break
                group.append(spec)
                size += inner
                i += 1
            entries.append(
                encode_legacy_wrapper(
                    group,
                    last_offset=first_offset + i - 1,
                    magic=magic,
                    compression=settings.compression,
                    timestamp_type=1 if append_time else 0,
                    log_append_time=append_time,
                    level=settings.level,
                )
            )
            firsts.append(start)
            lasts.append(i - 1)
            stamped = [s.timestamp for s in group]
            max_ts.append(append_time if append_time is not None and magic == 1 else max(stamped))
    sizes = np.fromiter((len(e) for e in entries), np.int64, len(entries))
    positions = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    return EncodedBatches(
        b"".join(entries),
        positions,
        sizes,
        np.asarray(firsts, np.int64),
        np.asarray(lasts, np.int64),
        np.asarray(max_ts, np.int64),
    )


class _Chunk:
    """A task's output for one topic-partition: pending rows and the staged file."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        path: str,
        topic: str,
        partition: int,
        buffers: tuple[list[np.ndarray], list[np.ndarray]],
    ) -> None:
        self.path = path
        self.topic = topic
        self.partition = partition
        self.stream = fs.open_output_stream(path)
        # the encoder's buffers are reused by the next encode: object-store streams may still
        # be uploading what they were handed, so they get a copy
        self.copy_writes = not isinstance(fs, pafs.LocalFileSystem)
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.flush_at = CHUNK_FLUSH_BYTES  # grows while flushes leave one unfilled batch
        self.written = 0  # bytes in the staged file
        self.next_offset = 0  # chunk-relative offset of the next record
        self.meta: list[tuple[np.ndarray, ...]] = []
        self.buffers = buffers  # encoder memory, shared by the task's chunks

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.pending_bytes += table.nbytes

    def flush(self, job: JobSpec, final: bool) -> None:
        """Encode pending rows; unless ``final``, keep the rows of a last, unfilled batch."""
        if not self.pending:
            return
        table = pa.concat_tables(self.pending) if len(self.pending) > 1 else self.pending[0]
        settings = job.batch_settings()
        columns = record_columns(table, job.now_ms)
        check_record_sizes(columns, job.options.compression != CompressionType.NONE)
        magic = job.options.magic
        if magic == 2:
            encoded = encode_v2(columns, settings, self.next_offset, self.buffers)
        else:
            encoded = encode_legacy(columns, magic, settings, self.next_offset)
        # Unless final, the last batch may not be full: its rows are encoded again with later rows.
        keep = len(encoded.sizes) if final else len(encoded.sizes) - 1
        if keep <= 0:
            # All pending rows fit one batch: encode again only once they have doubled.
            self.flush_at = max(CHUNK_FLUSH_BYTES, 2 * self.pending_bytes)
            return
        end = int(encoded.positions[keep - 1] + encoded.sizes[keep - 1])
        written = memoryview(encoded.data)[:end]
        self.stream.write(bytes(written) if self.copy_writes else written)
        rows = int(encoded.last_rows[keep - 1]) + 1
        self.meta.append(
            (
                encoded.positions[:keep] + self.written,
                encoded.sizes[:keep],
                encoded.first_rows[:keep] + self.next_offset,
                encoded.last_rows[:keep] + self.next_offset,
                encoded.max_timestamps[:keep],
            )
        )
        self.written += end
        self.next_offset += rows
        rest = table.slice(rows)
        self.pending = [rest] if rest.num_rows else []
        self.pending_bytes = rest.nbytes if rest.num_rows else 0
        self.flush_at = max(CHUNK_FLUSH_BYTES, 2 * self.pending_bytes)

    def result(self, job: JobSpec) -> ChunkResult:
        self.stream.close()
        columns = (
            [
                np.concatenate(parts) if parts else np.zeros(0, np.int64)
                for parts in zip(*self.meta, strict=False)
            ]
            if self.meta
            else [np.zeros(0, np.int64)] * 5
        )
        return ChunkResult(
            self.topic,
            self.partition,
            self.path,
            self.next_offset,
            job.options.magic,
            job.options.compression != CompressionType.NONE,
            *columns,
        )


class _PreservedChunk(_Chunk):
    """preserveOffsets=true: rows carry their offsets; batches as writer/preserve.py forms them.

    ``first_offsets``/``last_offsets`` of the result are absolute: the commit does not rebase."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.where = f"topic {self.topic!r} partition {self.partition}"
        self.last_row_offset = -1  # offset of the last row added
        self.last_batch_offset = -1  # last offset of the last batch written

    def add(self, table: pa.Table) -> None:
        offsets = row_offsets(table, self.where)
        check_increasing(offsets, self.last_row_offset, self.where)
        if len(offsets):
            self.last_row_offset = int(offsets[-1])
        super().add(table)

    def flush(self, job: JobSpec, final: bool) -> None:
        if not self.pending:
            return
        table = pa.concat_tables(self.pending) if len(self.pending) > 1 else self.pending[0]
        offsets = pc.cast(table.column("offset"), pa.int64()).to_numpy(zero_copy_only=False)
        encoded = encode_preserved(table, offsets, job.batch_settings(), self.where)
        count = len(encoded.sizes)
        keep = count if final else count - 1
        if keep <= 0:
            self.flush_at = max(CHUNK_FLUSH_BYTES, 2 * self.pending_bytes)
            return
        if encoded.base_offsets[0] <= self.last_batch_offset:
            raise InvalidInputError(
                f"{self.where}: the batch of offsets [{int(encoded.base_offsets[0])}, "
                f"{int(encoded.last_offsets[0])}] overlaps the batch before it, which ends at "
                f"offset {self.last_batch_offset}"
            )
        end = int(encoded.sizes[:keep].sum())
        self.stream.write(memoryview(encoded.data)[:end])
        rows = int(encoded.first_rows[keep]) if keep < count else table.num_rows
        positions = np.concatenate(([0], np.cumsum(encoded.sizes[: keep - 1]))).astype(np.int64)
        self.meta.append(
            (
                positions + self.written,
                encoded.sizes[:keep],
                encoded.base_offsets[:keep],
                encoded.last_offsets[:keep],
                encoded.max_timestamps[:keep],
            )
        )
        self.last_batch_offset = int(encoded.last_offsets[keep - 1])
        self.written += end
        self.next_offset += rows  # here: the count of rows written
        rest = table.slice(rows)
        self.pending = [rest] if rest.num_rows else []
        self.pending_bytes = rest.nbytes if rest.num_rows else 0
        self.flush_at = max(CHUNK_FLUSH_BYTES, 2 * self.pending_bytes)


class TaskWriter:
    """Writes the rows of one Spark task (or of :func:`write_table`) into staged chunks."""

    def __init__(self, job: JobSpec, task_id: int, filesystem: pafs.FileSystem) -> None:
        self.job = job
        self.task_id = task_id
        self.fs = filesystem
        self.directory = f"{job.staging}/task-{task_id:05d}-{uuid.uuid4().hex[:12]}"
        self.fs.create_dir(self.directory, recursive=False)  # fails once the job is aborted
        self.chunks: dict[tuple[str, int], _Chunk] = {}
        self.spread: dict[str, int] = {}  # next round-robin partition for null keys, per topic
        self.checked = False
        self.buffers: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])  # encoder memory
        # flush every chunk above this; grows while flushes leave batches kept back (as a
        # chunk's flush_at), so kept-back batches are not encoded again at every write
        self.pending_limit = TASK_PENDING_BYTES

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if not self.checked:
            check_write_schema(batch.schema, self.job.options.preserve_offsets)
            self.checked = True
        if batch.num_rows == 0:
            return
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        names, codes = self._topics(table)
        partitions = self._partitions(table, names, codes)
        payload = table.drop_columns([c for c in ("topic", "partition") if c in table.column_names])
        if len(names) == 1 and (partitions == partitions[0]).all():
            self._route(names[0], int(partitions[0]), payload)
        else:
            group = codes.astype(np.int64) * (MAX_PARTITION + 1) + partitions
            order = np.argsort(group, kind="stable")
            cuts = np.flatnonzero(np.diff(group[order])) + 1
            for rows in np.split(order, cuts):
                first = rows[0]
                self._route(names[codes[first]], int(partitions[first]), payload.take(rows))
        pending = sum(c.pending_bytes for c in self.chunks.values())
        if pending > self.pending_limit:
            # Final: with many partitions, the unfilled batches kept back would alone stay over
            # the limit, and every later write would encode them all again. Not with
            # preserveOffsets: a kept-back batch may continue in the next rows (one batch), so
            # the limit grows past what stays pending instead.
            final = not self.job.options.preserve_offsets
            for chunk in self.chunks.values():
                chunk.flush(self.job, final=final)
            kept = sum(c.pending_bytes for c in self.chunks.values())
            self.pending_limit = max(TASK_PENDING_BYTES, 2 * kept)

    def _topics(self, table: pa.Table) -> tuple[list[str], np.ndarray]:
        """The distinct topics of the rows and, per row, the index of its topic."""
        default = self.job.options.topic
        if "topic" not in table.column_names:
            if default is None:
                raise InvalidInputError(
                    "no topic: give a 'topic' column or the option topic (.option('topic', 'name'))"
                )
            return [default], np.zeros(table.num_rows, np.int32)
        column = table.column("topic")
        if column.null_count:
            if default is None:
                raise InvalidInputError(
                    "a row has a null topic and no option topic is given to fill it in"
                )
            column = pc.fill_null(column, default)
        encoded = pc.dictionary_encode(column).combine_chunks()
        names = [validate_topic(t, "topic column value") for t in encoded.dictionary.to_pylist()]
        for name in names:
            if name in self.job.count_conflicts:
                raise InvalidOptionError(self.job.count_conflicts[name])
        return names, encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)

    def _partitions(self, table: pa.Table, names: list[str], codes: np.ndarray) -> np.ndarray:
        """Each row's partition: the ``partition`` column's, else the default partitioner's."""
        rows = table.num_rows
        if "partition" in table.column_names:
            column = table.column("partition")
            try:  # unsigned or 64-bit input: anything past int64 is out of range anyway
                column = pc.cast(column, pa.int64())
            except pa.ArrowInvalid as err:
                raise InvalidInputError(f"partition values out of range: {err}") from err
            given: np.ndarray = pc.fill_null(column, -1).to_numpy().astype(np.int64)
            bad = (
                (given < -1)
                | (given > MAX_PARTITION)
                | ((given == -1) & column.is_valid().to_numpy(zero_copy_only=False))
            )
            if bad.any():
                row = int(np.argmax(bad))
                raise InvalidInputError(
                    f"row {row}: partition {int(given[row])} is not in [0, {MAX_PARTITION}]"
                )
            self._check_bounds(given, names, codes)
            missing = given < 0
        else:
            given = np.full(rows, -1, np.int64)
            missing = np.ones(rows, bool)
        if not missing.any():
            return given
        keys = table.column("key") if "key" in table.column_names else None
        for code, topic in enumerate(names):
            rows_of = np.flatnonzero(missing & (codes == code)) if len(names) > 1 else None
            if rows_of is None and not missing.all():
                rows_of = np.flatnonzero(missing)
            count = self.job.partitions_of(topic)
            if count == 1:
                given[missing if rows_of is None else rows_of] = 0
                continue
            selected = rows if rows_of is None else len(rows_of)
            if keys is None:
                key_column = BinaryColumn.empty(selected)
            else:
                key_column = binary_column(
                    keys if rows_of is None else keys.take(pa.array(rows_of))
                )
            start = self.spread.get(topic, self.task_id)
            assigned = key_partitions(key_column, count, start)
            self.spread[topic] = start + int((key_column.valid == 0).sum())
            if rows_of is None:
                given[:] = assigned
            else:
                given[rows_of] = assigned
        return given

    def _check_bounds(self, given: np.ndarray, names: list[str], codes: np.ndarray) -> None:
        """Partition values must name partitions of the topic's fixed count."""
        for code, topic in enumerate(names):
            bound = self.job.partition_bound(topic)
            if bound is None:
                continue
            outside = given >= bound
            if len(names) > 1:
                outside &= codes == code
            if outside.any():
                row = int(np.argmax(outside))
                why = (
                    "numPartitions"
                    if bound == self.job.options.num_partitions
                    else "the topic's partitions in the target"
                )
                raise InvalidInputError(
                    f"row {row}: partition {int(given[row])} is outside topic {topic!r}'s "
                    f"{bound} partitions (0..{bound - 1}, {why}); growing a topic takes "
                    "numPartitions with growPartitions=true"
                )

    def _route(self, topic: str, partition: int, table: pa.Table) -> None:
        chunk = self.chunks.get((topic, partition))
        if chunk is None:
            path = f"{self.directory}/{topic}-{partition}.log"
            kind = _PreservedChunk if self.job.options.preserve_offsets else _Chunk
            chunk = self.chunks[(topic, partition)] = kind(
                self.fs, path, topic, partition, self.buffers
            )
        chunk.add(table)
        if chunk.pending_bytes >= chunk.flush_at:
            chunk.flush(self.job, final=False)

    def finish(self) -> TaskResult:
        results = []
        for key in sorted(self.chunks):
            chunk = self.chunks[key]
            chunk.flush(self.job, final=True)
            results.append(chunk.result(self.job))
        return TaskResult(self.task_id, self.directory, tuple(results))

    def abort(self) -> None:
        for chunk in self.chunks.values():
            with contextlib.suppress(OSError):
                chunk.stream.close()
        with contextlib.suppress(OSError):
            self.fs.delete_dir(self.directory)
