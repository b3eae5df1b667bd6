"""Writing Kafka log directories: :func:`write_table` here, ``df.write.format("kafkasegments")``
in :mod:`kafka_segments_ds.datasource`; both run the same task and commit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import pyarrow as pa

from kafka_segments_ds.errors import InvalidInputError, InvalidOptionError
from kafka_segments_ds.writer.commit import abort_job, commit_job, prepare_job, recover
from kafka_segments_ds.writer.options import WriteOptions, parse_write_options
from kafka_segments_ds.writer.task import TaskWriter

__all__ = ["WriteOptions", "parse_write_options", "recover", "write_table"]

WriteInput: TypeAlias = (
    pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch] | Any
)
ACCEPTED = (
    "a pyarrow.Table, RecordBatch or RecordBatchReader, an iterable of pyarrow.RecordBatch, "
    "a pandas.DataFrame, or any object with __arrow_c_stream__ (Arrow PyCapsule interface)"
)


def write_table(
    data: WriteInput, path: str | os.PathLike[str], *, mode: str = "append", **options: Any
) -> None:
    """Write Arrow data as Kafka log segments under the log dir ``path`` (created if needed).

    ``data``: a :class:`pyarrow.Table`, ``RecordBatch`` or ``RecordBatchReader``, an iterable
    of ``RecordBatch``, a ``pandas.DataFrame`` (its index is not written) or any object
    exporting ``__arrow_c_stream__``. Columns: ``value`` (binary or string, required) and
    optionally ``key``, ``topic``, ``partition``, ``timestamp``, ``headers``, as in
    ``read_table``'s schema. ``mode`` is ``append`` (continue existing partition logs) or
    ``overwrite`` (replace the topics written; one that would get no rows is refused with
    :class:`OutputExistsError` unless ``allowEmptyOverwrite=true``).
    Options as for ``df.write.format("kafkasegments")``: ``topic``, ``numPartitions``,
    ``growPartitions``, ``compression``, ``compressionLevel``, ``magic``, ``batchBytes``,
    ``batchRecords``, ``segmentBytes``, ``segmentMs``, ``indexIntervalBytes``,
    ``segmentIndexBytes``, ``timestampType``, ``errorIfTopicExists``, ``allowEmptyOverwrite``
    and ``fs.*`` storage settings. Appending with a ``numPartitions`` other than an existing
    topic's count is an error (``growPartitions=true`` grows it); a ``partition`` value outside
    the topic's count is an error.
    All or nothing: on any error the target is left as it was (a log dir the job created is
    removed again).
    """
    if not isinstance(mode, str) or mode.lower() not in ("append", "overwrite"):
        raise InvalidOptionError(f"mode must be append or overwrite, not {mode!r}")
    mode = mode.lower()  # any case, as Spark's DataFrameWriter.mode takes it
    schema, batches = _as_batches(data)
    opts = parse_write_options(options)
    job, filesystem = prepare_job(os.fspath(path), opts, overwrite=mode == "overwrite")
    writer = TaskWriter(job, 0, filesystem)
    try:
        if schema is not None:  # checks the schema even when there are no rows
            writer.write(schema.empty_table())
        for index, batch in enumerate(batches):
            if not isinstance(batch, pa.RecordBatch | pa.Table):
                raise InvalidInputError(
                    f"write_table: item {index} of the iterable is a {_type_name(batch)}, not a "
                    "pyarrow.RecordBatch"
                )
            writer.write(batch)
        commit_job(job, [writer.finish()], filesystem)
    except BaseException:
        writer.abort()
        abort_job(job, filesystem)
        raise


def _as_batches(data: Any) -> tuple[pa.Schema | None, Iterable[Any]]:
    """The schema (when known up front) and the record batches of ``data``."""
    if isinstance(data, pa.Table):
        return data.schema, data.to_batches()
    if isinstance(data, pa.RecordBatch):
        return data.schema, [data]
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, data
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(data, pandas.DataFrame):
        # the index is pandas' row labels, not a Kafka field: never a column
        table = pa.Table.from_pandas(data, preserve_index=False)
        return table.schema, table.to_batches()
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, reader
    if isinstance(data, str | bytes | bytearray | memoryview | Mapping) or not isinstance(
        data, Iterable
    ):
        raise InvalidInputError(
            f"write_table cannot write a {_type_name(data)}; give it {ACCEPTED}"
        )
    return None, data


def _type_name(value: Any) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"
