"""The driver side of a write: job setup, the commit that lays out segments, abort, recovery.

Protocol (the same on every filesystem pyarrow.fs opens):

1. ``prepare_job`` picks a staging directory ``<target>/.kafkasegments-staging-<job id>``.
2. Tasks write chunk files under it (:mod:`kafka_segments_ds.writer.task`); failed, retried and
   speculative attempts leave files there that no commit message names, so they are never used.
3. ``commit_job`` gives each chunk its base offset (per topic-partition, chunks in task order,
   after the existing log in ``append`` mode), lays the entries out in segments exactly as a broker
   appending them would (rolls, ``.index``/``.timeindex``), all still inside the staging
   directory. Nothing under the target has changed so far; ``abort_job`` just deletes staging.
4. It then writes a journal (``_COMMIT.json``) listing what to delete (``overwrite``: the written
   topics' partition directories) and which files to move where, and applies it: deletions, then
   moves (index files before their ``.log``), then removes the staging directory.

Once the journal exists the commit is decided: an interrupted commit is finished by
:func:`recover` (idempotent) and never rolled back. While a journal exists, :func:`plan_scan`
refuses to read the log dir, so readers of this package see the target before or after a
commit, never in between — on object stores too, where a "move" is a copy and a delete.
"""

from __future__ import annotations

import json
import posixpath
import struct
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds.errors import (
    CorruptSegmentError,
    InvalidOptionError,
    OutputExistsError,
)
from kafka_segments_ds.fs import display_path, resolve
from kafka_segments_ds.index import encode_offset_index, encode_time_index
from kafka_segments_ds.journal import JOURNAL, STAGING_PREFIX
from kafka_segments_ds.journal import list_dir as _listing
from kafka_segments_ds.journal import refuse_pending as _refuse_pending
from kafka_segments_ds.layout import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    discover,
    parse_partition_dir_name,
    segment_file_name,
)
from kafka_segments_ds.records.builder import encode_legacy_message
from kafka_segments_ds.records.compression import CODEC_MASK, compress, decompress
from kafka_segments_ds.tail import segment_tail
from kafka_segments_ds.writer.options import INT32_MAX, WriteOptions
from kafka_segments_ds.writer.preserve import check_chunk_start
from kafka_segments_ds.writer.task import ChunkResult, JobSpec, TaskResult

COPY_BLOCK_BYTES = 8 << 20  # entries copied from a chunk to a segment in runs of about this
_ENTRY_HEAD = struct.Struct(">qi")


# --------------------------------------------------------------------------------------------
# Job setup
# --------------------------------------------------------------------------------------------


def prepare_job(
    path: str, options: WriteOptions, overwrite: bool
) -> tuple[JobSpec, pafs.FileSystem]:
    """Validate the target and describe the job for the tasks (driver)."""
    filesystem, root = resolve(str(path), options.storage_options())
    root = root.rstrip("/") or "/"
    info = filesystem.get_file_info(root)
    if info.type == pafs.FileType.File:
        raise InvalidOptionError(f"{display_path(filesystem, root)} is a file; give a directory")
    existing = existing_partitions(filesystem, root)
    if info.type == pafs.FileType.Directory:
        _refuse_pending(filesystem, root)
        _refuse_partition_dir(filesystem, root)
    topic = options.topic
    if options.error_if_topic_exists and topic is not None and topic in existing:
        raise OutputExistsError(
            f"topic {topic!r} already exists in {display_path(filesystem, root)} "
            "(errorIfTopicExists=true)"
        )
    counts, conflicts = partition_counts(existing, options, overwrite)
    if topic is not None and topic in conflicts:
        raise InvalidOptionError(f"{conflicts[topic]} ({display_path(filesystem, root)})")
    job = JobSpec(
        root=root,
        staging=f"{root}/{STAGING_PREFIX}{uuid.uuid4().hex}",
        options=options,
        now_ms=int(time.time() * 1000),
        partition_counts=counts,
        overwrite=overwrite,
        count_conflicts=conflicts,
        created_dirs=_missing_dirs(filesystem, root),
    )
    # Tasks create their directories in it non-recursively, so a task that starts after
    # abort_job removed it fails instead of leaving staging files behind.
    filesystem.create_dir(job.staging, recursive=True)
    return job, filesystem


def partition_counts(
    existing: dict[str, dict[int, str]], options: WriteOptions, overwrite: bool
) -> tuple[dict[str, int], dict[str, str]]:
    """Per existing topic, the partition count a write keeps (keys hash over it, partition
    values stay below it), and the topics the options would resize, with the reason.

    Kafka never shrinks a topic, and a key stays in its partition only while the count is
    fixed: appending with another ``numPartitions`` is refused; growing takes
    ``growPartitions=true``. ``overwrite`` replaces the topics written, so any count goes.
    """
    counts: dict[str, int] = {}
    conflicts: dict[str, str] = {}
    wanted = options.num_partitions
    for name, parts in existing.items():
        current = max(parts) + 1
        counts[name] = current
        if wanted is None or wanted == current:
            continue
        if overwrite or (options.grow_partitions and wanted > current):
            counts[name] = wanted
            continue
        if wanted < current:
            conflicts[name] = (
                f"topic {name!r} has {current} partitions, numPartitions is {wanted}: Kafka never "
                "shrinks a topic, and keys would move to other partitions; write with "
                f"numPartitions={current} (or without it), or mode overwrite to replace the topic"
            )
        else:
            conflicts[name] = (
                f"topic {name!r} has {current} partitions, numPartitions is {wanted}: growing a "
                f"topic moves keys to other partitions; set growPartitions=true to grow it to "
                f"{wanted} (as kafka-topics --alter --partitions {wanted} does), or write with "
                f"numPartitions={current} (or without it)"
            )
    return counts, conflicts


def _missing_dirs(filesystem: pafs.FileSystem, root: str) -> tuple[str, ...]:
    """``root`` and its parents that do not exist yet, deepest first: the job creates them,
    and an aborted job removes them again (a failed job leaves the target as it was)."""
    missing: list[str] = []
    path = root
    while "/" in path.strip("/") and filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        missing.append(path)
        parent = posixpath.dirname(path)
        if parent == path:
            break
        path = parent
    return tuple(missing)


def existing_partitions(filesystem: pafs.FileSystem, root: str) -> dict[str, dict[int, str]]:
    """``topic -> partition -> directory`` of the plain partition directories under ``root``."""
    found: dict[str, dict[int, str]] = defaultdict(dict)
    for entry in _listing(filesystem, root):
        if entry.type != pafs.FileType.Directory:
            continue
        parsed = parse_partition_dir_name(entry.base_name)
        if parsed is not None:
            found[parsed[0]][parsed[1]] = entry.path
    return dict(found)


def _refuse_partition_dir(filesystem: pafs.FileSystem, root: str) -> None:
    for entry in _listing(filesystem, root):
        if entry.type == pafs.FileType.File and entry.base_name.endswith(LOG_SUFFIX):
            raise InvalidOptionError(
                f"{display_path(filesystem, root)} holds segment files: it is a partition "
                "directory; give the log dir that holds the <topic>-<partition> directories"
            )


# --------------------------------------------------------------------------------------------
# Segment layout
# --------------------------------------------------------------------------------------------


class _SegmentLog:
    """Writes entries into segments of one partition directory as a broker's appends would."""

    def __init__(self, filesystem: pafs.FileSystem, directory: str, options: WriteOptions):
        self.fs = filesystem
        self.directory = directory
        self.opts = options
        self.max_index_entries = options.segment_index_bytes // 8
        self.max_time_entries = options.segment_index_bytes // 12
        self.stream: Any = None
        self.bases: list[int] = []

    def _open(self, base: int, source: str | None = None) -> None:
        self.base = base
        self.bases.append(base)
        path = f"{self.directory}/{segment_file_name(base, LOG_SUFFIX)}"
        if source is None:
            self.stream = self.fs.open_output_stream(path)
        else:  # a staged chunk that is the whole segment: moved, not copied
            self.fs.move(source, path)
            self.stream = _Adopted()
        self.size = 0
        self.bytes_since_entry = 0
        self.first_max_ts: int | None = None
        self.max_ts = -1
        self.offset_of_max = base
        self.index: tuple[list[int], list[int]] = ([], [])
        self.times: tuple[list[int], list[int]] = ([], [])

    def needs_roll(self, size: int, last_offset: int, max_ts: int) -> bool:
        """Kafka's roll rules before an append (FORMAT.md §7.3; no jitter)."""
        if self.stream is None:
            return True
        if self.size == 0:
            return False
        first = self.first_max_ts
        return (
            self.size > self.opts.segment_bytes - size
            or (first is not None and first >= 0 and max_ts - first > self.opts.segment_ms)
            or len(self.index[0]) >= self.max_index_entries
            or len(self.times[0]) >= self.max_time_entries - 1
            or last_offset - self.base > INT32_MAX
        )

    def roll(self, base: int) -> None:
        if self.stream is not None:
            self._close()
        self._open(base)

    def account(self, size: int, last_offset: int, max_ts: int) -> None:
        """Index bookkeeping for one entry appended at the current end (LogSegment.append)."""
        if self.first_max_ts is None:
            self.first_max_ts = max_ts
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.offset_of_max = last_offset
        if self.bytes_since_entry > self.opts.index_interval_bytes:
            self.index[0].append(last_offset)
            self.index[1].append(self.size)
            self._time_entry()
            self.bytes_since_entry = 0
        self.bytes_since_entry += size
        self.size += size

    def _time_entry(self) -> None:
        times, offsets = self.times
        if self.max_ts > (times[-1] if times else -1):
            times.append(self.max_ts)
            offsets.append(self.offset_of_max)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.stream.write(data)

    def _close(self) -> None:
        self.stream.close()
        self._time_entry()  # the entry a broker adds when the segment rolls or closes
        base = self.base
        offsets = np.asarray(self.index[0], np.int64), np.asarray(self.index[1], np.int64)
        times = np.asarray(self.times[0], np.int64), np.asarray(self.times[1], np.int64)
        for suffix, data in (
            (INDEX_SUFFIX, encode_offset_index(offsets, base)),
            (TIME_INDEX_SUFFIX, encode_time_index(times, base)),
        ):
            with self.fs.open_output_stream(
                f"{self.directory}/{segment_file_name(base, suffix)}"
            ) as out:
                out.write(data)

    def close(self) -> None:
        if self.stream is not None:
            self._close()
            self.stream = None

    def adopt(self, chunk: ChunkResult) -> bool:
        """Take a staged chunk of absolute offsets (``preserveOffsets``) as a segment of its own,
        moved into place and its entries only accounted for: what appending them would write,
        when no entry after its first would roll the segment (checked conservatively) and no
        segment is open. False (nothing done) otherwise: the chunk is to be copied."""
        opts = self.opts
        count = len(chunk.sizes)
        total = int(chunk.sizes.sum()) if count else 0
        if self.stream is not None or not count or total > opts.segment_bytes:
            return False
        first_ts = int(chunk.max_timestamps[0])
        if first_ts >= 0 and int(chunk.max_timestamps.max()) - first_ts > opts.segment_ms:
            return False
        index_entries = min(count, total // (opts.index_interval_bytes + 1) + 1)
        if index_entries + 1 >= self.max_time_entries or index_entries >= self.max_index_entries:
            return False
        base = int(chunk.first_offsets[0])
        if int(chunk.last_offsets[-1]) - base > INT32_MAX:
            return False
        if self.fs.get_file_info(chunk.path).size != total:
            return False  # not entries end to end: copied, which checks them
        self._open(base, source=chunk.path)
        for size, last, max_ts in zip(
            chunk.sizes.tolist(),
            chunk.last_offsets.tolist(),
            chunk.max_timestamps.tolist(),
            strict=True,
        ):
            self.account(size, last, max_ts)
        return True


class _Adopted:
    """The stream of a segment moved into place whole: nothing more is written to it."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        raise AssertionError("a segment taken whole from a staged chunk is not appended to")

    def close(self) -> None:
        pass


def _rebase_offsets(buffer: bytearray, positions: np.ndarray, delta: int) -> None:
    """Add ``delta`` to the int64 offset field at each entry start in ``buffer``."""
    if delta == 0 or not len(positions):
        return
    data = np.frombuffer(buffer, np.uint8)
    idx = (positions[:, None] + np.arange(8)).ravel()
    values = data[idx].view(">i8") + delta
    data[idx] = values.astype(">i8").view(np.uint8)


def _rebase_magic0_wrapper(entry: bytes, delta: int, where: str, level: int | None) -> bytes:
    """A magic-0 compressed wrapper stores absolute inner offsets: rebuild it with them moved."""
    offset, _ = _ENTRY_HEAD.unpack_from(entry)
    attributes = entry[17]
    key_length = struct.unpack_from(">i", entry, 18)[0]
    key = None if key_length < 0 else entry[22 : 22 + key_length]
    at = 22 + max(key_length, 0)
    value_length = struct.unpack_from(">i", entry, at)[0]
    payload = entry[at + 4 : at + 4 + value_length]
    codec = attributes & CODEC_MASK
    inner = bytearray(decompress(codec, payload, magic=0))
    positions = []
    pos = 0
    while pos + 12 <= len(inner):
        positions.append(pos)
        pos += 12 + _ENTRY_HEAD.unpack_from(inner, pos)[1]
    if pos != len(inner):
        raise CorruptSegmentError("staged magic-0 wrapper does not frame", path=where)
    _rebase_offsets(inner, np.asarray(positions, np.int64), delta)
    return encode_legacy_message(
        offset=offset + delta,
        magic=0,
        key=key,
        value=compress(codec, inner, magic=0, level=level),
        attributes=attributes,
    )


def _copy_chunk(
    filesystem: pafs.FileSystem, chunk: ChunkResult, base: int, log: _SegmentLog
) -> None:
    """Append a staged chunk's entries, offsets moved up by ``base``, to the partition log."""
    reencode = chunk.magic == 0 and chunk.compressed
    count = len(chunk.sizes)
    sizes = chunk.sizes.tolist()
    firsts = (chunk.first_offsets + base).tolist()
    lasts = (chunk.last_offsets + base).tolist()
    max_ts = chunk.max_timestamps.tolist()
    with filesystem.open_input_stream(chunk.path) as source:

        def flush(run: list[int]) -> None:
            if not run:
                return
            length = sum(sizes[i] for i in run)
            data = bytearray(source.read(length))
            if len(data) != length:
                raise CorruptSegmentError(
                    f"staged chunk is short: wanted {length} bytes, got {len(data)}",
                    path=chunk.path,
                )
            starts = np.cumsum([0] + [sizes[i] for i in run[:-1]]).astype(np.int64)
            _rebase_offsets(data, starts, base)
            log.write(data)
            run.clear()

        run: list[int] = []
        run_bytes = 0
        for i in range(count):
            entry: bytes | None = None
            size = sizes[i]
            if reencode:
                flush(run)
                raw = source.read(size)
                entry = _rebase_magic0_wrapper(raw, base, chunk.path, log.opts.compression_level)
                size = len(entry)
            if log.needs_roll(size, lasts[i], max_ts[i]):
                flush(run)
                run_bytes = 0
                log.roll(firsts[i])
            log.account(size, lasts[i], max_ts[i])
            if entry is not None:
                log.write(entry)
                continue
            run.append(i)
            run_bytes += size
            if run_bytes >= COPY_BLOCK_BYTES:
                flush(run)
                run_bytes = 0
        flush(run)


# --------------------------------------------------------------------------------------------
# Existing logs (append mode)
# --------------------------------------------------------------------------------------------


def log_end_offset(filesystem: pafs.FileSystem, directory: str) -> tuple[int, list[str]]:
    """The next offset of an existing partition log, and the files of an empty last segment
    whose name the next segment will take (to be replaced)."""
    partitions = discover(directory, filesystem)
    if not partitions or not partitions[0].segments:
        return 0, []
    segments = partitions[0].segments
    last = segments[-1]
    if last.size == 0:
        # its own files (an empty .log.swap's are .index.swap, ...)
        stale = [last.path] + [
            path for path in (last.index_path, last.timeindex_path, last.txnindex_path) if path
        ]
        return last.base_offset, stale
    # the next offset follows the last entry the reader returns; the writer appends only after
    # entries that all count by the reader's rules (tail.py), up to the end of the file
    tail = segment_tail(filesystem, last)
    if tail.end_position != last.size:
        raise CorruptSegmentError(
            "cannot append after a damaged or partly written segment (check it with "
            "kafka-segments verify)",
            path=display_path(filesystem, last.path),
            position=tail.end_position,
        )
    return tail.next_offset, []


# --------------------------------------------------------------------------------------------
# Commit, abort, recovery
# --------------------------------------------------------------------------------------------


def commit_job(
    job: JobSpec,
    results: Sequence[TaskResult],
    filesystem: pafs.FileSystem,
    *,
    extra: Mapping[str, bytes] | None = None,
    note: Mapping[str, Any] | None = None,
) -> None:
    """Lay out and publish the chunks of ``results`` (one per successful task).

    ``extra``: files (path relative to the log dir -> content) published by the same journal,
    after the segments (the streaming sink's batch record); ``note`` is kept in the journal.
    """
    fs = filesystem
    opts = job.options
    chunks: dict[tuple[str, int], list[ChunkResult]] = defaultdict(list)
    for result in sorted(results, key=lambda r: r.task_id):
        for chunk in result.chunks:
            if chunk.records:
                chunks[(chunk.topic, chunk.partition)].append(chunk)
    existing = existing_partitions(fs, job.root)
    written = {topic for topic, _ in chunks} | ({opts.topic} if opts.topic else set())
    clash = sorted(written & set(existing))
    if opts.error_if_topic_exists and clash:
        raise OutputExistsError(
            f"topic {clash[0]!r} already exists in {display_path(fs, job.root)} "
            "(errorIfTopicExists=true)"
        )
    if job.overwrite and opts.topic in existing and all(t != opts.topic for t, _ in chunks):
        _refuse_emptying(opts, fs, job.root)
    # A written topic has partitions 0..n-1 (as many as hashing used, or as the highest
    # partition written needs), empty ones included.
    wanted = set(chunks)
    for topic in written:
        count = max([job.partitions_of(topic)] + [p + 1 for t, p in chunks if t == topic])
        wanted.update((topic, p) for p in range(count))
    out_root = f"{job.staging}/out"
    delete_dirs: list[str] = []
    delete_files: list[str] = []
    moves: list[tuple[str, str]] = []
    create_dirs: list[str] = []
    if job.overwrite:
        for topic in sorted(written & set(existing)):
            delete_dirs.extend(existing[topic][p] for p in sorted(existing[topic]))
    for topic, partition in sorted(wanted):
        name = f"{topic}-{partition}"
        target = f"{job.root}/{name}"
        current = None if job.overwrite else existing.get(topic, {}).get(partition)
        if current is not None and (topic, partition) not in chunks:
            continue  # append mode: an existing partition that gets no rows stays as it is
        start, stale = log_end_offset(fs, current) if current is not None else (0, [])
        delete_files.extend(stale)
        staged = f"{out_root}/{name}"
        fs.create_dir(staged, recursive=True)
        log = _SegmentLog(fs, staged, opts)
        base = start
        staged_chunks = chunks.get((topic, partition), [])
        for chunk in staged_chunks:
            if opts.preserve_offsets:  # offsets as the rows give them: checked, not moved
                base = check_chunk_start(chunk, base, start, name)
                # a partition's only chunk is usually a whole segment: moved, not copied
                if len(staged_chunks) > 1 or not log.adopt(chunk):
                    _copy_chunk(fs, chunk, 0, log)
                continue
            _copy_chunk(fs, chunk, base, log)
            base += chunk.records
        if not log.bases:
            log.roll(start)  # an empty partition has one empty segment, as Kafka creates it
        log.close()
        create_dirs.append(target)
        for segment_base in log.bases:
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):  # the .log last
                file_name = segment_file_name(segment_base, suffix)
                moves.append((f"{staged}/{file_name}", f"{target}/{file_name}"))
    for number, (relative, content) in enumerate(sorted((extra or {}).items())):
        staged = f"{job.staging}/extra-{number}"
        with fs.open_output_stream(staged) as out:
            out.write(content)
        target = f"{job.root}/{relative}"
        create_dirs.append(posixpath.dirname(target))
        moves.append((staged, target))
    journal = {
        "version": 1,
        "note": dict(note or {}),
        "delete_dirs": delete_dirs,
        "delete_files": delete_files,
        "create_dirs": create_dirs,
        "moves": moves,
        "deleted": False,
    }
    _write_journal(fs, job.staging, journal)
    apply_journal(fs, job.staging, journal)


def _refuse_emptying(opts: WriteOptions, fs: pafs.FileSystem, root: str) -> None:
    """``overwrite`` with no rows for the existing topic ``opts.topic`` would leave it empty:
    refused unless ``allowEmptyOverwrite=true`` (an input empty by mistake must not erase a
    topic). Only the ``topic`` option can name a topic that gets no rows."""
    if opts.allow_empty_overwrite:
        return
    raise OutputExistsError(
        f"overwrite has no rows for topic {opts.topic!r}, which exists in "
        f"{display_path(fs, root)}: it would empty the topic; nothing was changed. Set "
        "allowEmptyOverwrite=true to empty it"
    )


def _write_journal(fs: pafs.FileSystem, staging: str, journal: dict[str, Any]) -> None:
    temporary = f"{staging}/{JOURNAL}.tmp"
    with fs.open_output_stream(temporary) as out:
        out.write(json.dumps(journal).encode())
    fs.move(temporary, f"{staging}/{JOURNAL}")


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)


def apply_journal(fs: pafs.FileSystem, staging: str, journal: dict[str, Any]) -> None:
    """Carry out a decided commit; safe to repeat after an interruption at any point."""
    if not journal["deleted"]:
        for directory in journal["delete_dirs"]:
            if _exists(fs, directory):
                fs.delete_dir(directory)
        for path in journal["delete_files"]:
            if _exists(fs, path):
                fs.delete_file(path)
        journal["deleted"] = True
        _write_journal(fs, staging, journal)
    for directory in journal["create_dirs"]:
        fs.create_dir(directory, recursive=True)
    for source, target in journal["moves"]:
        if _exists(fs, source):
            fs.move(source, target)
    fs.delete_dir(staging)


def abort_job(job: JobSpec, filesystem: pafs.FileSystem) -> None:
    """Undo an uncommitted job: the target is left exactly as before (staging removed).

    A job whose journal was written is past its decision point and is finished instead.
    """
    if _exists(filesystem, f"{job.staging}/{JOURNAL}"):
        _recover_staging(filesystem, job.staging)
        return
    _remove_staging(filesystem, job.staging)
    for directory in job.created_dirs:  # deepest first; only while they are empty
        if _exists(filesystem, directory):
            if _listing(filesystem, directory):
                break
            filesystem.delete_dir(directory)


# Spark calls abort as soon as one task fails; the job's other running tasks are cancelled,
# not awaited, so for a moment they can still be creating files in staging. A removal racing
# with them fails ("directory not empty"): try again until it succeeds or the settle time is
# over. On a local or HDFS-like filesystem nothing recreates staging once it is gone (task
# directories and chunk files are created non-recursively); on an object store a late task
# can still put an object under the staging prefix, which readers never list (a dot
# directory) and recover() removes as abandoned staging.
ABORT_SETTLE_SECONDS = 30.0


def _remove_staging(fs: pafs.FileSystem, staging: str) -> None:
    deadline = time.monotonic() + ABORT_SETTLE_SECONDS
    pause = 0.05
    while _exists(fs, staging):
        try:
            fs.delete_dir(staging)
        except OSError:  # noqa: PERF203 - retried while cancelled tasks settle
            if time.monotonic() >= deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def _recover_staging(fs: pafs.FileSystem, staging: str) -> None:
    with fs.open_input_stream(f"{staging}/{JOURNAL}") as stream:
        journal = json.loads(stream.read())
    apply_journal(fs, staging, journal)


def recover(path: str, *, dry_run: bool = False, **storage: str) -> list[str]:
    """Finish interrupted commits in the log dir ``path`` and remove abandoned staging
    directories (of jobs that never reached their commit). Returns what was done (with
    ``dry_run``, what would be done, doing nothing).

    Only run it when no write job is running against ``path``.
    """
    fs, root = resolve(str(path), storage)
    root = root.rstrip("/") or "/"
    done = []
    for entry in _listing(fs, root):
        if entry.type != pafs.FileType.Directory or not entry.base_name.startswith(STAGING_PREFIX):
            continue
        decided = _exists(fs, f"{entry.path}/{JOURNAL}")
        what = "finish commit" if decided else "remove abandoned staging"
        if dry_run:
            done.append(f"would {what} {entry.base_name}")
            continue
        if decided:
            _recover_staging(fs, entry.path)
        else:
            fs.delete_dir(entry.path)
        done.append(
            f"{'finished commit' if decided else 'removed abandoned staging'} {entry.base_name}"
        )
    return done
