"""Spark glue: the ``kafkasegments`` Python data source. The only module importing pyspark.

Spark imports this module (through ``pyspark_kafkasegments``) at every data source lookup, so
the read and write machinery (planning, reader, writer: numpy kernels) is imported only where
a method needs it.
"""

from __future__ import annotations

import datetime
import inspect
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

# pyspark is optional (the [spark] extra, or the pyspark a platform provides): say what to
# install before the imports below fail on a missing module or a pyspark without Python data
# sources (3.x)
OLDEST_SPARK = (4, 0)
NEWEST_TESTED_SPARK = (4, 3)  # newer releases run, with one line logged
# The first Spark planning each query afresh, so that pushed filters can prune (option
# pushFilters=auto): SPARK-58551 (apache/spark#57752) fixes the plan reuse pinned by
# tests/spark/test_pushdown_canary.py on master, for 4.4 or 5.0. The later of the two until a
# release is seen to pass the canary's opposite: pruning on a Spark with the reuse loses rows.
FIXED_PUSHDOWN_SPARK = (5, 0)
_INSTALL = "pip install 'kafka-segments-ds[spark]' (or use the pyspark 4.0+ your platform provides)"


def spark_version(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a pyspark version string (``4.0.5``, ``4.1.0.dev1``, ``4.4.0rc1``)."""
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        return (0, 0)


def check_spark_version(version: str) -> str | None:
    """Refuse a pyspark older than 4.0 (ImportError naming what to install); for one newer
    than the newest tested, the line to log (it runs: Spark keeps the API compatible)."""
    found = spark_version(version)
    if found < OLDEST_SPARK:
        raise ImportError(
            "the kafkasegments Spark data source needs pyspark 4.0 or later (Python data "
            f"sources); this is pyspark {version}: {_INSTALL}"
        )
    if found > NEWEST_TESTED_SPARK:
        return (
            f"pyspark {version} is newer than the newest release kafka-segments-ds was tested "
            f"with ({'.'.join(map(str, NEWEST_TESTED_SPARK))}); report any problem"
        )
    return None


try:
    import pyspark
except ImportError as err:
    raise ModuleNotFoundError(
        f"the kafkasegments Spark data source needs pyspark 4.0 or later, which is not "
        f"installed: {_INSTALL}",
        name="pyspark",
    ) from err
if (_untested := check_spark_version(pyspark.__version__)) is not None:
    logging.getLogger(__name__).warning(_untested)

from pyspark import TaskContext
from pyspark.errors import AnalysisException
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

try:  # pyspark 4.1+: a streaming sink taking Arrow batches (4.0: rows)
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamSinkBase
except ImportError:  # pyspark 4.0
    _StreamSinkBase = DataSourceStreamWriter  # type: ignore[misc,assignment]

try:  # pyspark 4.1+: filters pushed into a Python data source
    from pyspark.sql.datasource import (
        EqualNullSafe,
        EqualTo,
        Filter,
        GreaterThan,
        GreaterThanOrEqual,
        In,
        LessThan,
        LessThanOrEqual,
    )

    _HAS_FILTERS = True
except ImportError:  # pyspark 4.0
    _HAS_FILTERS = False

from kafka_segments_ds.errors import InvalidInputError, InvalidOptionError
from kafka_segments_ds.options import (
    ReadOptions,
    StreamOptions,
    parse_read_options,
    parse_stream_options,
)
from kafka_segments_ds.schema import BY_NAME, check_columns, default_columns, spark_ddl

if TYPE_CHECKING:
    from kafka_segments_ds.planning import Pruning
    from kafka_segments_ds.scan_task import ScanTask
    from kafka_segments_ds.streaming.planner import Offsets, StreamPlanner
    from kafka_segments_ds.writer.sink import SinkSpec
    from kafka_segments_ds.writer.task import JobSpec, TaskResult


def takes_filters(push_filters: str, version: str) -> bool:
    """Whether the reader takes pushed filters, by the option pushFilters (true | false | auto)
    and the pyspark version (auto: from :data:`FIXED_PUSHDOWN_SPARK`)."""
    if push_filters == "false":
        return False
    if not _HAS_FILTERS:
        if push_filters == "true":
            raise InvalidOptionError(
                f"option pushFilters=true needs pyspark 4.1 or later (pyspark {version} pushes "
                "no filters into a Python data source)"
            )
        return False
    return push_filters == "true" or spark_version(version) >= FIXED_PUSHDOWN_SPARK


def pruning_from_filters(filters: Iterable[Filter]) -> Pruning:
    """The bounds that the filters (all ANDed) put on topic, partition, offset and timestamp
    (the lowest, in ms): what no row of the result lies outside. Other filters, and values of
    other types than the column's, bound nothing."""
    from kafka_segments_ds.planning import Pruning

    topics: set[str] | None = None
    partitions: set[int] | None = None
    spans: dict[str, tuple[int | None, int | None]] = {
        "partition": (None, None),
        "offset": (None, None),
    }
    min_ms: int | None = None
    for flt in filters:
        column = getattr(flt, "attribute", None)
        value: Any = getattr(flt, "value", None)
        values = tuple(value) if isinstance(flt, In) else (value,)
        equal = isinstance(flt, EqualTo | EqualNullSafe | In)
        if column == ("timestamp",):
            if (equal or isinstance(flt, GreaterThan | GreaterThanOrEqual)) and all(
                isinstance(v, datetime.datetime) for v in values
            ):
                ms = min((_epoch_ms(v) for v in values), default=None)
                if ms is not None:
                    min_ms = ms if min_ms is None else max(min_ms, ms)
        elif column == ("topic",):
            if equal and all(isinstance(v, str) for v in values):
                topics = set(values) if topics is None else topics & set(values)
        elif column in (("partition",), ("offset",)) and all(_is_int(v) for v in values):
            low, high = spans[column[0]]
            if equal:
                if column == ("partition",):
                    partitions = set(values) if partitions is None else partitions & set(values)
                low = max(low or 0, min(values, default=0))
                high = _lowest(high, max(values, default=-1) + 1)
            elif isinstance(flt, GreaterThan | GreaterThanOrEqual):
                low = max(low or 0, value + isinstance(flt, GreaterThan))
            elif isinstance(flt, LessThan | LessThanOrEqual):
                high = _lowest(high, value + isinstance(flt, LessThanOrEqual))
            spans[column[0]] = (low, high)
    (partition_low, partition_high), (offset_low, offset_high) = spans.values()
    if partitions is not None:
        partitions = {p for p in partitions if _within(p, partition_low, partition_high)}
    return Pruning(
        topics=None if topics is None else frozenset(topics),
        partitions=None if partitions is None else frozenset(partitions),
        partition_low=partition_low,
        partition_high=None if partition_high is None else max(partition_high, 0),
        offset_low=offset_low,
        offset_high=None if offset_high is None else max(offset_high, 0),
        min_timestamp=min_ms,
    )


def _lowest(bound: int | None, value: int) -> int:
    return value if bound is None else min(bound, value)


def _within(value: int, low: int | None, high: int | None) -> bool:
    return (low is None or value >= low) and (high is None or value < high)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _epoch_ms(value: datetime.datetime) -> int:
    """Milliseconds since the epoch, rounded down, of an aware datetime or a naive one in this
    process's time zone (as pyspark gives timestamps)."""
    aware = value if value.tzinfo is not None else value.astimezone()
    return (aware - _EPOCH) // datetime.timedelta(milliseconds=1)


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


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
    ``maxDecompressedBytes``, ``maxBatchBytes``, ``readChunkBytes``, and ``fs.*`` storage
    settings.

    Input partitions are packed much as Spark packs files: segments (and byte ranges of large
    segments, cut at ``.index`` positions) are taken in (topic, partition, offset) order into
    partitions reading at most ``maxBytesPerPartition`` (default 128 MiB), balanced over at
    least ``minPartitions`` partitions (default: Spark's default parallelism, or the cores of
    the machine planning the read) with each segment weighing its size plus
    ``openCostInBytes`` (default 4 MiB, as ``spark.sql.files.openCostInBytes``). A Python data
    source's Spark task costs tens of milliseconds, so the open cost only balances partitions
    and does not count towards ``maxBytesPerPartition``: many small segments make few tasks.

    ``spark.readStream.format("kafkasegments").load(path)`` reads what the archive gains at
    each trigger, with offsets in Spark's Kafka source's JSON form (``{"topic":{"0":123}}``,
    the next offset to read) and that source's stream options: ``startingOffsets`` (earliest /
    latest / JSON; default latest), ``startingTimestamp``, ``startingOffsetsByTimestamp``,
    ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and ``maxTriggerDelay`` (read limits:
    pyspark 4.2+), ``failOnDataLoss``; ``Trigger.AvailableNow`` reads what is there when the
    query starts and stops (see :mod:`kafka_segments_ds.streaming`).

    ``pushFilters`` (true | false | auto): whether the reader takes the filters Spark pushes
    (comparisons on ``topic``, ``partition``, ``offset``, ``timestamp``) to skip segments and
    batches; Spark still applies every filter. ``auto`` (default) takes them only on a Spark
    from :data:`FIXED_PUSHDOWN_SPARK`: up to 4.3, Spark reuses the partitions planned for a query
    with pushed filters for a later query on the same DataFrame that pushes none, which would
    return too few rows (``tests/spark/test_pushdown_canary.py``); prune with the offset and
    timestamp options there. A reader taking filters needs
    ``spark.sql.python.filterPushdown.enabled`` on (Spark refuses it otherwise).
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

    def schema(self) -> str | StructType:
        # Spark asks a batch and a streaming read alike, before either: take a stream's options
        # too (a batch read refuses them in reader())
        try:
            _, opts = self._parsed()
        except InvalidOptionError as err:
            try:
                opts = parse_stream_options(self._paths()[1])[0]
            except InvalidOptionError:
                raise err from None
        columns = default_columns(opts.include_headers, opts.include_metadata)
        if opts.decode:  # valueFormat / keyFormat: the reader schemas' types (schemas.decode)
            from pyspark.sql.pandas.types import from_arrow_schema

            from kafka_segments_ds.schemas.decode import spark_read_schema, wants_decoding

            if wants_decoding(opts):
                return from_arrow_schema(spark_read_schema(self._paths()[0], opts, columns))
        return spark_ddl(columns)

    def reader(self, schema: StructType) -> DataSourceReader:
        paths, opts = self._parsed()
        decoded = None
        if opts.decode:
            from kafka_segments_ds.schemas.decode import bind_registry, raw_columns, wants_decoding

            if wants_decoding(opts):
                opts = bind_registry(opts, paths)
                decoded = (raw_columns(opts, schema.names), _arrow_schema(schema))
        columns = decoded[0] if decoded else schema_columns(schema)
        cls = KafkaSegmentsReader
        if takes_filters(opts.push_filters, pyspark.__version__):
            cls = KafkaSegmentsFilteringReader
        reader = cls(paths, opts, columns)
        reader.decoded_schema = decoded[1] if decoded else None
        return reader

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        paths, options = self._paths()
        if not paths:
            raise InvalidOptionError(
                "no path given: "
                'spark.readStream.format("kafkasegments").load("/path/to/kafka-logs")'
            )
        opts, stream = parse_stream_options(options)
        if any(k in ("valueformat", "keyformat") and v.lower() != "raw" for k, v in opts.decode):
            raise InvalidOptionError("valueFormat / keyFormat are for batch reads (spark.read)")
        limits = [
            name
            for name, value in (
                ("maxOffsetsPerTrigger", stream.max_offsets_per_trigger),
                ("minOffsetsPerTrigger", stream.min_offsets_per_trigger),
            )
            if value is not None
        ]
        if limits and not _HAS_ADMISSION_CONTROL:
            raise InvalidOptionError(
                f"option {limits[0]} needs pyspark 4.2 or later (the Python streaming source API "
                "of this pyspark has no read limits)"
            )
        return KafkaSegmentsStreamReader(paths, opts, stream, schema_columns(schema))

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

        write_options = parse_write_options(options)
        check_write_schema(_arrow_schema(schema), write_options.preserve_offsets)
        # refused here, on the driver, rather than by every task
        if "topic" not in schema.names and write_options.topic is None:
            raise InvalidInputError(
                "no topic: give a 'topic' column or the option topic (.option('topic', 'name'))"
            )
        if "headers" in schema.names and write_options.magic < 2:
            raise InvalidInputError(
                f"magic {write_options.magic} has no record headers: drop the 'headers' column "
                "or use magic 2"
            )
        job, filesystem = prepare_job(paths[0], write_options, overwrite)
        return KafkaSegmentsWriter(job, filesystem)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafka_segments_ds.writer.sink import prepare_sink

        arrow_schema = _arrow_schema(schema)
        spec = prepare_sink(*self._paths(), overwrite, arrow_schema)
        return KafkaSegmentsStreamWriter(spec, arrow_schema)


def schema_columns(schema: StructType) -> tuple[str, ...]:
    """The columns of the schema Spark passes a reader (the source's own, or the user's
    ``.schema(...)``): known names with the catalogue's types, else refused naming them."""
    names = [field.name for field in schema.fields]
    columns = check_columns(names)
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidOptionError(f"column(s) {', '.join(repeated)} given twice in the schema")
    wrong = [
        f"{field.name} {field.dataType.simpleString()} (must be {BY_NAME[field.name].spark_ddl})"
        for field in schema.fields
        if field.dataType.simpleString() != BY_NAME[field.name].spark_ddl
    ]
    if wrong:
        raise InvalidOptionError(f"schema column type(s) do not match: {', '.join(wrong)}")
    return columns


def register_source(spark: Any) -> None:
    """``spark.dataSource.register`` of the source, which a Spark Connect server may have found
    already: pyspark 4.1+ replaces it, 4.0 refuses a name it knows (then it is registered)."""
    try:
        spark.dataSource.register(KafkaSegmentsDataSource)
    except AnalysisException as err:
        if err.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise


@dataclass(frozen=True)
class SegmentScanPartition(InputPartition):
    """The scan tasks of one Spark task, read in turn (none: the one empty partition of an
    empty result)."""

    tasks: tuple[ScanTask, ...]

    def __init__(self, tasks: tuple[ScanTask, ...]) -> None:  # InputPartition wants a value
        object.__setattr__(self, "tasks", tasks)
        object.__setattr__(self, "value", len(tasks))


class KafkaSegmentsReader(DataSourceReader):
    """Plans scan tasks and packs them into input partitions on the driver; streams Arrow
    batches on executors."""

    def __init__(self, paths: list[str], options: ReadOptions, columns: tuple[str, ...]):
        self.paths = paths
        self.options = options
        self.columns = columns
        self.pruning: Pruning | None = None  # from pushed filters (KafkaSegmentsFilteringReader)
        self.decoded_schema: pa.Schema | None = None  # valueFormat / keyFormat: Spark's types

    def partitions(self) -> Sequence[InputPartition]:
        from kafka_segments_ds.planning import plan_partitions, plan_scan
        from kafka_segments_ds.reader import read_task

        plan = plan_scan(
            self.paths, self.options, pruning=self.pruning, split=False, read_records=read_task
        )
        min_partitions = self.options.min_partitions or default_parallelism()
        packed = plan_partitions(plan.tasks, self.options, min_partitions)
        if not packed:
            return [SegmentScanPartition(())]
        return [SegmentScanPartition(tasks) for tasks in packed]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = _read_partition(partition, self.options, self.columns)
        if self.decoded_schema is None:
            return batches
        from kafka_segments_ds.schemas.decode import cast_batches

        return cast_batches(batches, self.decoded_schema)


class KafkaSegmentsFilteringReader(KafkaSegmentsReader):
    """The reader taking Spark's pushed filters (``pushFilters`` option): a class of its own,
    as Spark refuses a reader implementing ``pushFilters`` while
    ``spark.sql.python.filterPushdown.enabled`` is off."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Prune by the filters Spark can push, and hand every one back: Spark applies them
        all to the rows read, so the result is exact whatever the pruning skips."""
        self.pruning = pruning_from_filters(filters)
        return list(filters)


def _read_partition(
    partition: InputPartition, options: ReadOptions, columns: tuple[str, ...]
) -> Iterator[pa.RecordBatch]:
    """An input partition's batches, small ones joined (batch and streaming reads)."""
    from kafka_segments_ds.reader import join_small_batches, read_tasks
    from kafka_segments_ds.records import kernels

    context = TaskContext.get()
    cpus = context.cpus() if context is not None else None
    if cpus:
        kernels.use_task_cpus(cpus)
    batches = read_tasks(partition.tasks, options, columns)  # type: ignore[attr-defined]
    return join_small_batches(batches, options)


try:  # pyspark 4.2+: read limits (admission control) and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    _HAS_ADMISSION_CONTROL = True
    _STREAM_MIXINS: tuple[type, ...] = (SupportsTriggerAvailableNow,)
except ImportError:  # pyspark 4.0 and 4.1: latestOffset() only; AvailableNow reads all in one batch
    _HAS_ADMISSION_CONTROL = False
    _STREAM_MIXINS = ()


class KafkaSegmentsStreamReader(DataSourceStreamReader, *_STREAM_MIXINS):  # type: ignore[misc]
    """``spark.readStream`` of an archive: offsets as Spark's Kafka source writes them
    (``{"topic":{"0":123}}``, next offset to read); micro-batches read like a batch read.

    Spark keeps one instance for the query's life in its streaming source worker (so what the
    planner learnt about the archive is kept between triggers), and pickles another, fresh one
    for ``read`` on executors: construction does no I/O."""

    def __init__(
        self,
        paths: list[str],
        options: ReadOptions,
        stream: StreamOptions,
        columns: tuple[str, ...],
    ) -> None:
        self.paths = paths
        self.options = options
        self.stream = stream
        self.columns = columns
        self._planner: StreamPlanner | None = None

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_planner"] = None  # executors only read
        return state

    @property
    def planner(self) -> StreamPlanner:
        if self._planner is None:
            from kafka_segments_ds.streaming.planner import StreamPlanner

            self._planner = StreamPlanner(self.paths, self.options, self.stream)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        return offsets_to_json(self.planner.initial_offsets())

    def latestOffset(
        self,
        start: dict[str, Any] | None = None,
        limit: object | None = None,
    ) -> dict[str, Any]:
        """pyspark 4.2+ passes the batch's start and a read limit; 4.0 and 4.1 pass neither."""
        max_offsets = min_offsets = None
        if _HAS_ADMISSION_CONTROL and not isinstance(limit, ReadAllAvailable | None):
            # A ReadLimit holds one limit: the one getDefaultReadLimit gave, the other from
            # the options (the engine passes ReadAllAvailable to have both ignored).
            max_offsets = (
                limit.max_rows
                if isinstance(limit, ReadMaxRows)
                else self.stream.max_offsets_per_trigger
            )
            min_offsets = (
                limit.min_rows
                if isinstance(limit, ReadMinRows)
                else self.stream.min_offsets_per_trigger
            )
        begin = None if start is None else offsets_from_json(start)
        return offsets_to_json(self.planner.next_offsets(begin, max_offsets, min_offsets))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.stream.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.stream.max_offsets_per_trigger)
        if self.stream.min_offsets_per_trigger is not None:
            return ReadMinRows(self.stream.min_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:  # type: ignore[type-arg]
        reported = self.planner.reported
        return None if reported is None else offsets_to_json(reported)

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def partitions(
        self,
        start: dict,  # type: ignore[type-arg]
        end: dict,  # type: ignore[type-arg]
    ) -> Sequence[InputPartition]:
        packed = self.planner.plan(
            offsets_from_json(start), offsets_from_json(end), default_parallelism()
        )
        return [SegmentScanPartition(tasks) for tasks in packed]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(partition, self.options, self.columns)

    def commit(self, end: dict) -> None:  # type: ignore[type-arg]
        """Nothing to release: the archive is read, never consumed."""


def offsets_to_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """The planner's offsets as the streaming Offset Spark keeps in its checkpoint:
    ``{("t", 0): 5}`` -> ``{"t": {"0": 5}}`` (Spark's Kafka source's JSON), topics and
    partitions in order (Spark compares offsets as JSON text: the same offsets must always
    read the same)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Any) -> Offsets:
    """The inverse of :func:`offsets_to_json`, checked (a checkpoint may be edited by hand)."""
    if not isinstance(data, Mapping):
        raise InvalidOptionError(f'stream offsets must look like {{"topic":{{"0":23}}}}: {data!r}')
    out: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise InvalidOptionError(f"stream offsets of topic {topic!r} must be an object")
        for partition, offset in parts.items():
            if (
                not str(partition).isdigit()
                or isinstance(offset, bool)
                or not isinstance(offset, int)
                or offset < 0
            ):
                raise InvalidOptionError(
                    f"stream offset {topic}-{partition} = {offset!r} is not an offset"
                )
            out[(str(topic), int(partition))] = offset
    return out


def default_parallelism() -> int:
    """Spark's default parallelism where this process knows it (a driver), else its cores.

    Spark plans a Python data source's partitions in a Python worker with no SparkContext; on
    the driver's machine, its cores are what local mode runs on.
    """
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    if context is not None:
        return int(context.defaultParallelism)
    return os.cpu_count() or 1


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


class KafkaSegmentsStreamWriter(_StreamSinkBase):
    """``writeStream``: each micro-batch a preserveOffsets write, recorded with its batch id
    (:mod:`kafka_segments_ds.writer.sink`)."""

    def __init__(self, spec: SinkSpec, schema: pa.Schema) -> None:
        self.spec = spec
        self.schema = schema

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from kafka_segments_ds.writer.sink import write_task

        context = TaskContext.get()
        task_id = context.partitionId() if context is not None else 0
        if _StreamSinkBase is DataSourceStreamWriter:  # pyspark 4.0 hands rows
            iterator = _rows_as_arrow(iterator, self.schema)
        return TaskCommit(write_task(self.spec, task_id, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from kafka_segments_ds.writer.sink import commit_batch

        results = [m.result for m in messages if isinstance(m, TaskCommit)]
        commit_batch(self.spec, results, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from kafka_segments_ds.writer.sink import abort_batch

        results = [m.result for m in messages if isinstance(m, TaskCommit)]
        abort_batch(self.spec, results, batchId)


def _rows_as_arrow(rows: Iterator[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """pyspark 4.0's sink rows as Arrow batches of up to 10,000 rows (timestamps come as naive
    datetimes in local time)."""
    stamps = [f.name for f in schema if pa.types.is_timestamp(f.type)]
    while True:
        chunk = [row.asDict(recursive=True) for _, row in zip(range(10_000), rows, strict=False)]
        if not chunk:
            return
        for row in chunk:
            for name in stamps:
                if row[name] is not None and row[name].tzinfo is None:
                    row[name] = row[name].astimezone(datetime.UTC)
        yield pa.RecordBatch.from_pylist(chunk, schema=schema)


def _arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of the rows Spark hands the writer, timestamps in UTC."""
    # pyspark 4.2 replaced to_arrow_schema's timestamp_utc=True (4.0, 4.1) by timezone=...
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(schema, timezone="UTC")
    return to_arrow_schema(schema)
