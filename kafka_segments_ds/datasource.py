"""Spark glue: the ``kafkasegments`` Python data source. The only module importing pyspark.

Spark imports this module (through ``pyspark_kafkasegments``) at every data source lookup, so
the read and write machinery (planning, reader, writer: numpy kernels) is imported only where
a method needs it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.options import ReadOptions, parse_read_options
from kafka_segments_ds.schema import check_columns, default_columns, spark_ddl

if TYPE_CHECKING:
    from kafka_segments_ds.scan_task import ScanTask
    from kafka_segments_ds.writer.task import JobSpec, TaskResult


class KafkaSegmentsDataSource(DataSource):
    """Read Apache Kafka log segment files (``.log`` + indexes) without a broker.

    ``spark.read.format("kafkasegments").load(path)`` where ``path`` is a Kafka log dir (of
    ``<topic>-<partition>`` directories), one partition directory, one ``.log`` file, a glob,
    local or any URI pyarrow.fs opens (``s3://``, ``gs://``, ``hdfs://``, ``abfs://``).

    Schema: ``key binary, value binary, topic string, partition int, offset bigint,
    timestamp timestamp, timestampType int``, plus ``headers`` with ``includeHeaders=true`` and
    the metadata columns (``magic, compression, batchBaseOffset, batchLastOffset, producerId,
    producerEpoch, baseSequence, isTransactional, isControl, leaderEpoch, segment, position``)
    with ``includeMetadata=true``. A user schema naming a subset of these columns projects.

    Options (case-insensitive), as in Spark's Kafka source where it has them:
    ``iteration`` (deep | shallow), ``subscribe``, ``subscribePattern``, ``assign``,
    ``startingOffsets`` / ``endingOffsets`` (earliest / latest / JSON, ending exclusive),
    ``startingTimestamp`` / ``endingTimestamp``, ``startingOffsetsByTimestamp`` /
    ``endingOffsetsByTimestamp``, ``startingOffsetsByTimestampStrategy``, ``isolationLevel``
    (read_uncommitted | read_committed), ``includeHeaders``, ``includeMetadata``, ``mode``
    (FAILFAST | DROPMALFORMED), ``verifyChecksums``, ``failOnDataLoss``,
    ``maxDecompressedBytes``, ``maxBatchBytes``, ``readChunkBytes``, ``maxBytesPerPartition``
    (default 128 MiB), ``minPartitions``, and ``fs.*`` storage settings.

    The reader does not implement ``pushFilters`` (so it works whatever
    ``spark.sql.python.filterPushdown.enabled`` says); prune with the offset and timestamp
    options. Spark 4.3 reuses the partitions planned for a query with pushed filters for a later
    query on the same DataFrame that pushes none, which would make pruning by filters return
    too few rows.
    """

    @classmethod
    def name(cls) -> str:
        return "kafkasegments"

    def _paths(self) -> tuple[list[str], dict[str, str]]:
        options = dict(self.options)
        paths: list[str] = []
        for key in list(options):
            lowered = key.lower()
            if lowered == "path":
                paths.append(options.pop(key))
            elif lowered == "paths":
                value = options.pop(key)
                paths.extend(json.loads(value) if value.startswith("[") else [value])
        return paths, options

    def _parsed(self) -> tuple[list[str], ReadOptions]:
        paths, options = self._paths()
        if not paths:
            raise InvalidOptionError(
                'no path given: spark.read.format("kafkasegments").load("/path/to/kafka-logs")'
            )
        return paths, parse_read_options(options)

    def schema(self) -> str:
        _, opts = self._parsed()
        return spark_ddl(default_columns(opts.include_headers, opts.include_metadata))

    def reader(self, schema: StructType) -> DataSourceReader:
        paths, opts = self._parsed()
        columns = check_columns([field.name for field in schema.fields])
        return KafkaSegmentsReader(paths, opts, columns)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        paths, options = self._paths()
        if len(paths) != 1:
            raise InvalidOptionError(
                'give one target log dir: df.write.format("kafkasegments").mode("append")'
                '.save("/path/to/kafka-logs")'
            )
        from kafka_segments_ds.writer.columns import check_write_schema
        from kafka_segments_ds.writer.commit import prepare_job
        from kafka_segments_ds.writer.options import parse_write_options

        check_write_schema(to_arrow_schema(schema, timezone="UTC"))
        job, filesystem = prepare_job(paths[0], parse_write_options(options), overwrite)
        return KafkaSegmentsWriter(job, filesystem)


@dataclass(frozen=True)
class SegmentScanPartition(InputPartition):
    """One scan task; ``None`` for the single empty partition of an empty result."""

    task: ScanTask | None

    def __init__(self, task: ScanTask | None) -> None:  # InputPartition wants a value
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "value", task)


class KafkaSegmentsReader(DataSourceReader):
    """Plans scan tasks on the driver; streams Arrow batches on executors."""

    def __init__(self, paths: list[str], options: ReadOptions, columns: tuple[str, ...]):
        self.paths = paths
        self.options = options
        self.columns = columns

    def partitions(self) -> Sequence[InputPartition]:
        from kafka_segments_ds.planning import plan_scan
        from kafka_segments_ds.reader import read_task

        plan = plan_scan(self.paths, self.options, read_records=read_task)
        if not plan.tasks:
            return [SegmentScanPartition(None)]
        return [SegmentScanPartition(t) for t in plan.tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = partition.task  # type: ignore[attr-defined]
        if task is None:
            return iter(())
        from kafka_segments_ds.reader import read_task

        return read_task(task, self.options, self.columns)


@dataclass(frozen=True)
class TaskCommit(WriterCommitMessage):
    """A task's staged chunks, sent to the driver's commit."""

    result: TaskResult


class KafkaSegmentsWriter(DataSourceArrowWriter):
    """Tasks stage chunks; the driver's commit lays out and publishes segments atomically."""

    def __init__(self, job: JobSpec, filesystem: pafs.FileSystem) -> None:
        self.job = job
        self.filesystem = filesystem

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        context = TaskContext.get()
        task_id = context.partitionId() if context is not None else 0
        from kafka_segments_ds.writer.task import TaskWriter

        writer = TaskWriter(self.job, task_id, self.filesystem)
        try:
            for batch in iterator:
                writer.write(batch)
            return TaskCommit(writer.finish())
        except BaseException:
            writer.abort()
            raise

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        results = [m.result for m in messages if isinstance(m, TaskCommit)]
        from kafka_segments_ds.writer.commit import commit_job

        commit_job(self.job, results, self.filesystem)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from kafka_segments_ds.writer.commit import abort_job

        abort_job(self.job, self.filesystem)
