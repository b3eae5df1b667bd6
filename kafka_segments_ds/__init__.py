"""Read Apache Kafka log segment files (``.log`` + indexes) directly into Arrow and Spark.

Public API: :func:`read_table`, :func:`iter_batches`, :func:`write_table`, :func:`recover`,
:func:`register`, :func:`schemas` and the exceptions in :mod:`kafka_segments_ds.errors`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kafka_segments_ds.errors import (
    ChecksumError,
    CommitInProgressError,
    CorruptIndexError,
    CorruptSegmentError,
    DataLossError,
    InvalidInputError,
    InvalidOptionError,
    KafkaSegmentsError,
    LimitExceededError,
    MissingCodecError,
    NoKafkaDataError,
    OutputExistsError,
    SchemaError,
    StorageError,
    UndecodableValueError,
    UnsafePathError,
    UnsupportedFormatError,
)

if TYPE_CHECKING:
    import pyarrow as pa

__version__ = "0.1.0"

__all__ = [
    "ChecksumError",
    "CommitInProgressError",
    "CorruptIndexError",
    "CorruptSegmentError",
    "DataLossError",
    "InvalidInputError",
    "InvalidOptionError",
    "KafkaSegmentsError",
    "LimitExceededError",
    "MissingCodecError",
    "NoKafkaDataError",
    "OutputExistsError",
    "SchemaError",
    "StorageError",
    "UndecodableValueError",
    "UnsafePathError",
    "UnsupportedFormatError",
    "__version__",
    "iter_batches",
    "read_table",
    "recover",
    "register",
    "schemas",
    "write_table",
]


def register(spark: Any) -> None:
    """Register the ``kafkasegments`` data source with a SparkSession (classic or Connect).

    Not needed when the package is installed in the Python that runs Spark's workers: Spark
    finds ``pyspark_kafkasegments`` itself. Use it when the package is only on ``sys.path`` of
    the driver. Idempotent: on a classic session it does nothing when Spark already resolves
    ``kafkasegments``; on a Connect session it registers the same class again, which the
    server accepts.

    Parameters
    ----------
    spark
        A :class:`pyspark.sql.SparkSession`, classic or Spark Connect.
    """
    from kafka_segments_ds.datasource import KafkaSegmentsDataSource, register_source

    if _is_registered(spark, KafkaSegmentsDataSource.name()):
        return
    register_source(spark)


def _is_registered(spark: Any, name: str) -> bool:
    """True if a classic session already resolves ``name`` (auto-registered or registered)."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:
        return False  # Spark Connect: the client cannot ask the server
    return bool(jsession.sessionState().dataSourceManager().dataSourceExists(name))


def schemas(
    path: str | os.PathLike[str] | list[str], schemasTopic: str = "_schemas", **storage: str
) -> list[Any]:
    """Every schema of the Schema Registry archived under ``path``: its ``schemasTopic`` replayed
    as the registry does (or, for an ``http(s)://`` URL, a live registry's), as
    :class:`~kafka_segments_ds.schemas.registry.SchemaVersion` (subject, version, id, type,
    schema, references, deleted), by subject and version; soft-deleted versions included.
    ``storage``: ``fs.*`` options of remote storage."""
    from kafka_segments_ds.schemas import read_schemas

    where = [os.fspath(p) for p in path] if isinstance(path, list) else os.fspath(path)
    return list(read_schemas(where, schemasTopic, **storage))


def iter_batches(
    path: str | os.PathLike[str] | list[str], columns: list[str] | None = None, **options: Any
) -> Iterator[pa.RecordBatch]:
    """Stream the records under ``path`` as Arrow record batches of bounded size.

    Takes the same arguments as :func:`read_table`; memory stays bounded by the read window
    (``readChunkBytes``) and the decompressed size of the batches in it. Batches are those of
    the read windows; the small ones of small segments are joined, in order, into batches of
    ``batchRows`` rows (default 32,768; at most four read windows of bytes).
    """
    from kafka_segments_ds.options import parse_read_options
    from kafka_segments_ds.planning import plan_scan
    from kafka_segments_ds.reader import join_small_batches, read_task, read_tasks
    from kafka_segments_ds.schema import check_columns, default_columns

    opts = parse_read_options(options)
    cols = (
        check_columns(columns)
        if columns is not None
        else default_columns(opts.include_headers, opts.include_metadata)
    )
    # one sequential reader: split segments only when the caller asked for it
    split = any(k.lower() in ("maxbytesperpartition", "minpartitions") for k in options)
    plan = plan_scan(path, opts, split=split, read_records=read_task)
    if opts.decode:
        opts = _bind_decoding(path, opts, cols, plan.tasks)
    if not cols:  # no columns, one row per record all the same (a count), like pyarrow's readers
        for arrow_batch in join_small_batches(read_tasks(plan.tasks, opts, ("offset",)), opts):
            yield arrow_batch.select([])
        return
    yield from join_small_batches(read_tasks(plan.tasks, opts, cols), opts)


def read_table(
    path: str | os.PathLike[str] | list[str], columns: list[str] | None = None, **options: Any
) -> pa.Table:
    """Read Kafka log segments into a :class:`pyarrow.Table`.

    Parameters
    ----------
    path
        A log dir of ``<topic>-<partition>`` directories, one partition directory, one ``.log``
        file, a glob, or a list of those. Local paths or URIs pyarrow.fs understands
        (``s3://``, ``gs://``, ``hdfs://``, ``abfs://``, ``file://``).
    columns
        Column names to return (any of the catalogue, see the README); default: Spark's Kafka
        source columns, plus ``headers`` / metadata columns when those options are set. An
        empty list gives a table with no columns and one row per record (a count).
    **options
        Reader options, names case-insensitive, values as Python values or strings:
        ``iteration`` (``deep`` | ``shallow``), ``subscribe``, ``subscribePattern``, ``assign``,
        ``startingOffsets`` / ``endingOffsets`` (``earliest`` / ``latest`` / JSON, ending
        exclusive), ``startingTimestamp`` / ``endingTimestamp``,
        ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``, ``isolationLevel``,
        ``includeHeaders``, ``includeMetadata``, ``mode`` (``FAILFAST`` | ``DROPMALFORMED``),
        ``verifyChecksums``, ``failOnDataLoss``, ``maxDecompressedBytes``, ``maxBatchBytes``,
        ``readChunkBytes``, ``batchRows``; ``fs.*`` keys configure remote storage;
        ``valueFormat`` / ``keyFormat`` (``raw`` | ``avro`` | ``protobuf`` | ``json`` |
        ``auto``), ``schemaRegistry``, ``valueSchemaSubject``, ``valueSchemaVersion``,
        ``includeRawValue`` and their key twins decode values in Confluent's wire format with
        the Schema Registry archived beside them (docs/options.md).

    Returns
    -------
    pyarrow.Table
        One row per record (deep) or per batch / wrapper message (shallow), in
        (topic, partition, offset) order.

    Raises
    ------
    InvalidOptionError
        Unknown option or bad value.
    CorruptSegmentError
        Malformed data with ``mode=FAILFAST``; the message names file, byte position and offset.
    DataLossError
        Requested offsets are gone from the archive and ``failOnDataLoss`` is true.
    NoKafkaDataError
        A path holds no Kafka log segment, or ``subscribe`` / ``subscribePattern`` / ``assign``
        names what is not there (``allowEmpty=true``: 0 rows instead).
    StorageError
        The storage cannot be reached or read (names the URI and the endpoint).
    UndecodableValueError
        With ``valueFormat``/``keyFormat`` and ``mode=FAILFAST``: a value that does not decode
        (names topic, partition, offset and schema id).
    """
    import pyarrow as pa

    from kafka_segments_ds.options import parse_read_options
    from kafka_segments_ds.schema import arrow_schema, check_columns, default_columns

    opts = parse_read_options(options)
    cols = (
        check_columns(columns)
        if columns is not None
        else default_columns(opts.include_headers, opts.include_metadata)
    )
    batches = list(iter_batches(path, list(cols), **options))
    schema = arrow_schema(cols)
    if opts.decode:  # the decoded columns' types (one reader schema per column, checked)
        from kafka_segments_ds.schemas.decode import decoded_read_schema

        schema = batches[0].schema if batches else decoded_read_schema(path, opts, schema)
    return pa.Table.from_batches(batches, schema=schema)


def _bind_decoding(
    path: str | os.PathLike[str] | list[str], opts: Any, cols: tuple[str, ...], tasks: Any
) -> Any:
    """``opts`` with the schema registry bound to ``path``, after checking that the read's
    topics share one reader schema per decoded column (the column's type)."""
    from kafka_segments_ds.schema import arrow_schema
    from kafka_segments_ds.schemas.decode import bind_registry, decoded_schema, wants_decoding

    if not wants_decoding(opts):
        return opts
    opts = bind_registry(opts, path)
    decoded_schema(opts, arrow_schema(cols), sorted({t.topic for t in tasks}, key=str))
    return opts


def write_table(
    data: Any, path: str | os.PathLike[str], *, mode: str = "append", **options: Any
) -> None:
    """Write Arrow data as Kafka log segments; see :func:`kafka_segments_ds.writer.write_table`.

    ``data``: a pyarrow Table, RecordBatch or RecordBatchReader, an iterable of RecordBatch, a
    pandas DataFrame, or any object with ``__arrow_c_stream__``; anything else is refused with
    :class:`InvalidInputError` before the target is touched.
    """
    from kafka_segments_ds.writer import write_table as write

    write(data, path, mode=mode, **options)


def recover(path: str | os.PathLike[str], *, dry_run: bool = False, **storage: str) -> list[str]:
    """Finish interrupted commits under a log dir; see :func:`kafka_segments_ds.writer.recover`."""
    from kafka_segments_ds.writer import recover as finish

    return finish(os.fspath(path), dry_run=dry_run, **storage)
