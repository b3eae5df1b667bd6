"""Writing Kafka log directories: :func:`write_table` here, ``df.write.format("kafkasegments")``
in :mod:`kafka_segments_ds.datasource`; both run the same task and commit code."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, TypeAlias

import pyarrow as pa

from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.writer.commit import abort_job, commit_job, prepare_job, recover
from kafka_segments_ds.writer.options import WriteOptions, parse_write_options
from kafka_segments_ds.writer.task import TaskWriter

__all__ = ["WriteOptions", "parse_write_options", "recover", "write_table"]

WriteInput: TypeAlias = pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch]


def write_table(
    data: WriteInput, path: str | os.PathLike[str], *, mode: str = "append", **options: Any
) -> None:
    """Write Arrow data as Kafka log segments under the log dir ``path`` (created if needed).

    Columns: ``value`` (binary or string, required) and optionally ``key``, ``topic``,
    ``partition``, ``timestamp``, ``headers``, as in ``read_table``'s schema. ``mode`` is
    ``append`` (continue existing partition logs) or ``overwrite`` (replace the topics written).
    Options as for ``df.write.format("kafkasegments")``: ``topic``, ``numPartitions``,
    ``compression``, ``compressionLevel``, ``magic``, ``batchBytes``, ``batchRecords``,
    ``segmentBytes``, ``segmentMs``, ``indexIntervalBytes``, ``segmentIndexBytes``,
    ``timestampType``, ``errorIfTopicExists`` and ``fs.*`` storage settings.
    All or nothing: on any error the target is left as it was.
    """
    if mode not in ("append", "overwrite"):
        raise InvalidOptionError(f"mode must be append or overwrite, not {mode!r}")
    opts = parse_write_options(options)
    job, filesystem = prepare_job(os.fspath(path), opts, overwrite=mode == "overwrite")
    writer = TaskWriter(job, 0, filesystem)
    try:
        if isinstance(data, pa.Table):
            batches: Iterable[pa.RecordBatch] = data.to_batches()
            writer.write(data.slice(0, 0))  # checks the schema even when there are no rows
        elif isinstance(data, pa.RecordBatch):
            batches = [data]
        else:
            batches = data
        for batch in batches:
            writer.write(batch)
        commit_job(job, [writer.finish()], filesystem)
    except BaseException:
        writer.abort()
        abort_job(job, filesystem)
        raise
