"""The streaming sink: ``writeStream.format("kafkasegments")`` archives a live topic, offsets kept.

Each micro-batch is a ``preserveOffsets=true`` write (the rows of Spark's Kafka source carry
``offset``, ``timestamp``, ``timestampType`` and, with ``includeHeaders``, ``headers``):

* Tasks (executors) stage their chunks in a staging directory of their own,
  ``<log dir>/.kafkasegments-staging-sink-task-<uuid>-<sink>``, since a task is not told its batch.
* The driver's commit of batch ``N`` publishes the chunks the tasks' messages name with one
  journal (:mod:`kafka_segments_ds.writer.commit`), which also moves the sink's batch record
  ``<log dir>/.kafkasegments-sink/<sink>.json`` (batch id and the offsets per partition it
  wrote) into place, after the segments, and names the sink and batch in its ``note``. The
  batch is in the archive exactly when the record says so.
* A batch Spark runs again with an id already recorded (a query killed after the sink's commit
  but before Spark's own commit log, then restarted from its checkpoint) changes nothing when
  it holds the same offsets, and is refused when it does not (another query's archive under
  the same sink id). A commit of this sink interrupted after its journal is finished first.

The sink id is the option ``sinkId`` (letters, digits, ``.``, ``_``, ``-``), else derived from
the ``checkpointLocation`` option; a query with neither is refused (Spark's session-wide
``spark.sql.streaming.checkpointLocation`` does not reach a data source, and a fixed or random
id would let two queries share staging, or lose a restarted query's record). Queries writing
into one log dir need ids of their own. Whatever the ids, a batch can never be written twice:
its offsets would go back in the log, which ``preserveOffsets`` refuses.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds.errors import InvalidInputError, InvalidOptionError
from kafka_segments_ds.fs import display_path, resolve
from kafka_segments_ds.journal import JOURNAL, STAGING_PREFIX, list_dir, pending_commits
from kafka_segments_ds.writer.columns import check_write_schema
from kafka_segments_ds.writer.commit import (
    abort_job,
    apply_journal,
    commit_job,
    prepare_job,
)
from kafka_segments_ds.writer.options import WriteOptions, parse_write_options
from kafka_segments_ds.writer.task import JobSpec, TaskResult, TaskWriter

SINK_DIR = ".kafkasegments-sink"  # in the log dir: one batch record per sink id
SINK_STAGING = f"{STAGING_PREFIX}sink-"
RECORD_VERSION = 1
SINK_OPTIONS = {"sinkid": "sinkId"}  # the sink's own options (beyond the writer's)
_SINK_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")
# options of the query (not of the writer) that Spark may hand the sink with the others
_QUERY_OPTIONS = ("checkpointlocation", "queryname", "outputmode")
Ranges = dict[str, dict[str, list[int]]]  # topic -> partition -> [first offset, last offset]


@dataclass(frozen=True)
class SinkSpec:
    """What the sink's tasks and commits need (picklable; built from the options)."""

    root: str  # the log dir as resolved for the filesystem
    options: WriteOptions
    sink_id: str

    @property
    def record_path(self) -> str:
        """The batch record, relative to the log dir."""
        return f"{SINK_DIR}/{self.sink_id}.json"

    def new_staging(self, kind: str) -> str:
        """A fresh staging directory of this sink: ``<SINK_STAGING><kind>-<uuid>-<sink id>``
        (the id last, after a fixed-length uuid: one sink's names never match another's)."""
        return f"{self.root}/{SINK_STAGING}{kind}-{uuid.uuid4().hex}-{self.sink_id}"

    def is_own_staging(self, name: str) -> bool:
        pattern = (
            rf"{re.escape(SINK_STAGING)}(task|commit)-[0-9a-f]{{32}}-{re.escape(self.sink_id)}"
        )
        return re.fullmatch(pattern, name) is not None

    def filesystem(self) -> pafs.FileSystem:
        return resolve(self.root, self.options.storage_options())[0]


def prepare_sink(
    paths: Sequence[str],
    options: Mapping[str, Any],
    overwrite: bool,
    schema: pa.Schema | None = None,
) -> SinkSpec:
    """Validate the sink's target (one log dir), options and the stream's schema (driver)."""
    if len(paths) != 1:
        raise InvalidOptionError(
            'give one target log dir: df.writeStream.format("kafkasegments")'
            '.option("checkpointLocation", ...).start("/path/to/kafka-logs")'
        )
    if overwrite:
        raise InvalidOptionError(
            "the kafkasegments sink appends: use outputMode('append') (an archive of a topic "
            "is never replaced by a query's complete output)"
        )
    sink_id = None
    checkpoint = None
    write_options: dict[str, Any] = {}
    for key, value in options.items():
        lowered = key.lower()
        if lowered in SINK_OPTIONS:
            sink_id = str(value)
        elif lowered == "checkpointlocation":
            checkpoint = str(value)
        elif lowered not in _QUERY_OPTIONS:
            write_options[key] = value
    preserve = [v for k, v in write_options.items() if k.lower() == "preserveoffsets"]
    if preserve and str(preserve[0]).strip().lower() != "true":
        raise InvalidOptionError(
            "the kafkasegments sink always keeps the rows' offsets (preserveOffsets=true); "
            f"preserveOffsets={preserve[0]} is not possible here"
        )
    if not preserve:
        write_options["preserveOffsets"] = "true"
    opts = parse_write_options(write_options)
    if opts.error_if_topic_exists:
        raise InvalidOptionError(
            "errorIfTopicExists=true would refuse every micro-batch after the first: not an "
            "option of the sink"
        )
    if sink_id is not None and (not _SINK_ID.fullmatch(sink_id) or sink_id in (".", "..")):
        raise InvalidOptionError(
            f"option sinkId {sink_id[:40]!r} must be 1 to 100 ASCII letters, digits, '.', '_' "
            "or '-'"
        )
    if schema is not None:
        check_write_schema(schema, preserve_offsets=True)
        if "topic" not in schema.names and opts.topic is None:
            raise InvalidInputError(
                "no topic: give a 'topic' column (Spark's Kafka source has one) or the option topic"
            )
    filesystem, root = resolve(str(paths[0]), opts.storage_options())
    root = root.rstrip("/") or "/"
    if filesystem.get_file_info(root).type == pafs.FileType.File:
        raise InvalidOptionError(f"{display_path(filesystem, root)} is a file; give a directory")
    if sink_id is None:
        if not checkpoint:
            raise InvalidOptionError(
                "the kafkasegments sink needs the query's option checkpointLocation "
                "(.option(\"checkpointLocation\", ...), as Spark's file sink does; Spark's "
                "spark.sql.streaming.checkpointLocation setting does not reach a data source) or "
                "the option sinkId naming the query's batch record in the log dir: it is what "
                "keeps a restarted query's micro-batches exactly once, and what keeps two queries "
                "writing into one log dir apart"
            )
        sink_id = "checkpoint-" + hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
    return SinkSpec(root, opts, sink_id)


# --------------------------------------------------------------------------------------------
# Tasks (executors)
# --------------------------------------------------------------------------------------------


def write_task(
    spec: SinkSpec, task_id: int, batches: Iterable[pa.RecordBatch | pa.Table]
) -> TaskResult:
    """Stage one task's rows; the result goes to the driver's :func:`commit_batch`."""
    filesystem = spec.filesystem()
    staging = spec.new_staging("task")
    filesystem.create_dir(staging, recursive=True)
    # No partition counts: the source's partition column is the topic's (a topic that grows
    # in Kafka grows in the archive); the commit never shrinks one.
    job = JobSpec(spec.root, staging, spec.options, int(time.time() * 1000))
    try:
        writer = TaskWriter(job, task_id, filesystem)
        try:
            for batch in batches:
                writer.write(batch)
            return writer.finish()
        except BaseException:
            writer.abort()
            raise
    except BaseException:
        with contextlib.suppress(OSError):
            filesystem.delete_dir(staging)
        raise


# --------------------------------------------------------------------------------------------
# Commit and abort (driver)
# --------------------------------------------------------------------------------------------


def batch_ranges(results: Sequence[TaskResult]) -> Ranges:
    """Per topic and partition, the first and last offset the batch writes."""
    ranges: Ranges = {}
    for result in results:
        for chunk in result.chunks:
            if not chunk.records:
                continue
            first, last = int(chunk.first_offsets[0]), int(chunk.last_offsets[-1])
            span = ranges.setdefault(chunk.topic, {}).setdefault(
                str(chunk.partition), [first, last]
            )
            span[0], span[1] = min(span[0], first), max(span[1], last)
    return ranges


def read_record(spec: SinkSpec, filesystem: pafs.FileSystem) -> dict[str, Any] | None:
    """The sink's batch record (None before its first commit)."""
    path = f"{spec.root}/{spec.record_path}"
    if filesystem.get_file_info(path).type != pafs.FileType.File:
        return None
    with filesystem.open_input_stream(path) as stream:
        data = stream.read()
    try:
        record = json.loads(data)
        int(record["batchId"])
        dict(record["ranges"])
    except (ValueError, KeyError, TypeError) as err:
        raise InvalidInputError(
            f"{display_path(filesystem, path)}: not a batch record of the kafkasegments sink "
            f"({err}); it says which micro-batches are in the archive: restore it, or remove "
            "it only if no query will run again from its checkpoint"
        ) from err
    return dict(record)


def commit_batch(spec: SinkSpec, results: Sequence[TaskResult], batch_id: int) -> bool:
    """Publish micro-batch ``batch_id``; False when it was committed before (nothing done)."""
    filesystem = spec.filesystem()
    try:
        _finish_own_commits(spec, filesystem)
        ranges = batch_ranges(results)
        record = read_record(spec, filesystem)
        if record is not None and _already_committed(spec, filesystem, record, batch_id, ranges):
            return False
        job = _commit_job_spec(spec, filesystem)
        content = {
            "version": RECORD_VERSION,
            "sinkId": spec.sink_id,
            "batchId": batch_id,
            "ranges": ranges,
            "committedMs": int(time.time() * 1000),
        }
        try:
            commit_job(
                job,
                results,
                filesystem,
                extra={spec.record_path: json.dumps(content, sort_keys=True).encode()},
                note={"sinkId": spec.sink_id, "batchId": batch_id},
            )
        except BaseException:
            abort_job(job, filesystem)
            raise
        return True
    finally:
        remove_task_staging(spec, filesystem)


def _commit_job_spec(spec: SinkSpec, filesystem: pafs.FileSystem) -> JobSpec:
    """The batch's commit job, staged under this sink's prefix: a commit killed before its
    journal leaves staging that the sink's next commit removes."""
    job, _ = prepare_job(spec.root, spec.options, overwrite=False)
    filesystem.delete_dir(job.staging)
    staging = spec.new_staging("commit")
    filesystem.create_dir(staging, recursive=False)
    return replace(job, staging=staging)


def _already_committed(
    spec: SinkSpec,
    filesystem: pafs.FileSystem,
    record: Mapping[str, Any],
    batch_id: int,
    ranges: Ranges,
) -> bool:
    last = int(record["batchId"])
    where = display_path(filesystem, f"{spec.root}/{spec.record_path}")
    if last < batch_id:
        return False
    if last == batch_id and record["ranges"] == ranges:
        return True  # Spark runs the batch again: it is in the archive
    raise InvalidInputError(
        f"micro-batch {batch_id} cannot follow batch {last}, which sink {spec.sink_id!r} "
        f"committed last ({where}"
        + (
            f", with other offsets: {record['ranges']} then, {ranges} now"
            if last == batch_id
            else ""
        )
        + "): a query with a new checkpoint writes into the archive of another one. Give each "
        "query its own option sinkId (a new query continuing an archive: a new sinkId); "
        "nothing was written"
    )


def abort_batch(spec: SinkSpec, results: Sequence[TaskResult], batch_id: int) -> None:
    """Drop a failed micro-batch's staged chunks; the archive is unchanged."""
    remove_task_staging(spec, spec.filesystem())


def remove_task_staging(spec: SinkSpec, filesystem: pafs.FileSystem) -> None:
    """Remove the staging directories of this sink (no task of it runs between its
    micro-batches): those of the tasks the commit used, of failed or speculative attempts, and
    of a commit killed before its journal; never one holding a journal."""
    for entry in list_dir(filesystem, spec.root):
        if entry.type != pafs.FileType.Directory:
            continue
        if not spec.is_own_staging(entry.base_name):
            continue
        if filesystem.get_file_info(f"{entry.path}/{JOURNAL}").type == pafs.FileType.File:
            continue  # a decided commit: finished by _finish_own_commits
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_dir(entry.path)


def _finish_own_commits(spec: SinkSpec, filesystem: pafs.FileSystem) -> None:
    """Finish a commit of this sink interrupted after its journal (the query was killed)."""
    for path in pending_commits(filesystem, spec.root):
        with filesystem.open_input_stream(path) as stream:
            journal = json.loads(stream.read())
        if journal.get("note", {}).get("sinkId") == spec.sink_id:
            apply_journal(filesystem, posixpath.dirname(path), journal)
