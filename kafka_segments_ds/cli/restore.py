"""``kafka-segments restore ARCHIVE LOGDIR``: partition directories a stopped broker loads.

The archive's committed records are written with their offsets (:func:`kafka_segments_ds.rewrite.
copy`) into the staging directory ``LOGDIR/.kafka-segments-restore`` (the log dir's file system),
made durable (fsync), then moved by renames into the broker's partition directories: those of a
topic created on the target broker with at least as many partitions and holding no records yet
(the broker's empty segment is replaced). Its ``partition.metadata`` (the target's topic id) is
kept, or written from ``--topic-id`` where the directory does not exist yet;
``leader-epoch-checkpoint`` is written from the leader epochs of the restored batches.

Crash safety: the staging directory's marker (``RESTORE.json``) names the restore (archive,
selection, topic, topic id, and a digest of all the options, whose values may be credentials)
and, once the copy is whole and durable, the files to move per partition. A restore interrupted
anywhere leaves the staging directory; running the same command again finishes it (an
interrupted copy is redone, interrupted moves are completed), while another restore is refused
until it is removed. A segment file is in a partition directory whole or not at all, the ``.log``
files are moved after the other files and from the last segment down (see :func:`place`).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from kafka_segments_ds import iter_batches
from kafka_segments_ds.cli.common import write_lines
from kafka_segments_ds.cli.rewrite import add_write_option
from kafka_segments_ds.errors import (
    InvalidInputError,
    InvalidOptionError,
    KafkaSegmentsError,
    StorageError,
)
from kafka_segments_ds.rewrite import PartitionSummary, copy

NAME = "restore"
OWN_PATHS = True  # ARCHIVE and LOGDIR
SUMMARY = "restore an archive into a stopped broker's log dir"
DESCRIPTION = (
    "Write the committed records of ARCHIVE (a log dir, e.g. one written with preserveOffsets, "
    "or a tiered-storage bucket) into the partition directories of the stopped broker whose "
    "log dir is LOGDIR, every record at its original offset. Create the topic on the target "
    "broker first (as many partitions or more), stop the broker, restore, start it. Choose "
    "what to restore with --option subscribe=TOPIC or assign=JSON; --topic names the target "
    "topic when it differs. Each partition directory must hold no records yet. Aborted "
    "records and transaction markers are not restored (the markers' offsets stay gaps); "
    "records of committed transactions are restored as non-transactional batches. The "
    "copy is staged in LOGDIR/.kafka-segments-restore and renamed into place; if a restore "
    "is interrupted, run the same command again to finish it before starting the broker."
)
PARTITION_METADATA = "partition.metadata"
METADATA_MAX_BYTES = 4096
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# the broker's files of a new, empty partition, replaced by the restored ones
REPLACED_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".deleted")
# the restore's staging directory in LOGDIR (one file system with the partitions: a move is a
# rename), its marker naming the restore and, once the copy is whole, the files to move
STAGING = ".kafka-segments-restore"
DATA = "data"
MARKER = "RESTORE.json"
MARKER_MAX_BYTES = 64 << 20
SELECTION = ("subscribe", "subscribepattern", "assign")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("archive", metavar="ARCHIVE", help="log dir, bucket or URI to restore")
    parser.add_argument("logdir", metavar="LOGDIR", help="the stopped target broker's log dir")
    parser.add_argument(
        "--topic", metavar="NAME", help="the target topic (default: the archive's topic name)"
    )
    parser.add_argument(
        "--topic-id",
        metavar="ID",
        help="the target topic's id (as kafka-topics --describe shows it), for partition "
        "directories the target broker has not created; checked against those it has",
    )
    add_write_option(parser, "the restored segments")


def run(args: argparse.Namespace) -> int:
    logdir = Path(args.logdir)
    if not logdir.is_dir():
        raise StorageError(
            "not a directory (restore takes the target broker's log dir)", str(logdir)
        )
    topic_id = None if args.topic_id is None else parse_topic_id(args.topic_id)
    request = _request(args, topic_id)
    with _broker_stopped(logdir):
        staging = logdir / STAGING
        state = _resumed(staging, request)
        if state is None:
            state = _stage(args, staging, request)
        lines = [_place_partition(logdir, staging / DATA, part) for part in state["partitions"]]
        _finish(staging)
    write_lines(lines or ["nothing restored"], sys.stdout)
    return 0


def parse_topic_id(text: str) -> str:
    """A topic id as Kafka prints it (URL-safe base64 of 16 bytes, no padding), checked."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as err:
        raise InvalidOptionError(f"--topic-id {text!r}: not base64 ({err})") from err
    if len(raw) != 16 or not any(raw):
        raise InvalidOptionError(
            f"--topic-id {text!r}: a topic id is 16 bytes, not zero ({len(raw)} bytes given)"
        )
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_partition_metadata(path: Path) -> str:
    """The topic id of a broker's ``partition.metadata`` (``version: 0`` / ``topic_id: ID``)."""
    with path.open("rb") as handle:  # a few dozen bytes; more is not a partition.metadata
        text = handle.read(METADATA_MAX_BYTES).decode("utf-8", errors="replace")
    fields = dict(line.partition(": ")[::2] for line in text.splitlines() if line.strip())
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise InvalidInputError(
            f"{path}: not a partition.metadata file of version 0 with a topic_id ({text[:80]!r})"
        )
    return parse_topic_id(fields["topic_id"].strip())


def check_target(directory: Path, topic_id: str | None, ours: Iterable[str] = ()) -> str:
    """The target partition directory may be restored into: it holds no records (but the files
    ``ours``, placed by an interrupted run of this restore), and its topic id agrees with
    ``topic_id``; returns the topic id its partition.metadata gets."""
    placed = set(ours)
    if not directory.exists():
        if topic_id is None:
            raise InvalidInputError(
                f"{directory}: no such partition directory: create the topic on the target "
                "broker (with as many partitions) and stop the broker, or give --topic-id"
            )
        return topic_id
    for file in directory.iterdir():
        if file.suffix == ".log" and file.name not in placed and file.stat().st_size:
            raise InvalidInputError(
                f"{file}: holds {file.stat().st_size} bytes of records; restore writes only "
                "into partitions without records (create the topic anew)"
            )
    metadata = directory / PARTITION_METADATA
    if not metadata.exists():
        if topic_id is None:
            raise InvalidInputError(f"{metadata}: missing; give --topic-id")
        return topic_id
    found = read_partition_metadata(metadata)
    if topic_id is not None and found != topic_id:
        raise InvalidInputError(
            f"{metadata}: the target topic's id is {found}, not --topic-id {topic_id}"
        )
    return found


def place(
    staged: Path, target: Path, files: list[str], topic_id: str, epochs: list[tuple[int, int]]
) -> None:
    """Move the staged segment files ``files`` into ``target`` (those moved by an interrupted run
    are there already); write partition.metadata and leader-epoch-checkpoint.

    The broker's own segment files (of its empty segment) go first; then every file but the
    ``.log`` files, then the ``.log`` files from the highest base offset down: a broker shown a
    partition cut short by a crash sees its last segments (its end offset right, its start
    later) with their indexes, never a log ending early at offsets the archive holds records
    at. Each move is a rename within one file system, so a file is there whole or not at all.
    """
    ours = set(files)
    target.mkdir(exist_ok=True)
    for old in target.iterdir():
        placed = old.name in ours and not (staged / old.name).exists()
        if old.suffix in REPLACED_SUFFIXES and not placed:
            old.unlink()
    logs = sorted((name for name in files if name.endswith(".log")), reverse=True)
    for name in [*(name for name in files if not name.endswith(".log")), *logs]:
        if (staged / name).exists():
            os.replace(staged / name, target / name)
        elif not (target / name).exists():
            raise InvalidInputError(
                f"{target / name}: restored by an interrupted run, but neither there nor in "
                f"{staged} now: the partition was changed since; empty it and restore anew"
            )
    _fsync_directory(target)
    _write_atomically(target / PARTITION_METADATA, f"version: 0\ntopic_id: {topic_id}\n")
    lines = ["0", str(len(epochs)), *(f"{epoch} {offset}" for epoch, offset in epochs)]
    _write_atomically(target / LEADER_EPOCH_CHECKPOINT, "\n".join(lines) + "\n")


def leader_epochs(partition_dir: Path) -> list[tuple[int, int]]:
    """(epoch, start offset) where the batches' leader epoch rises, as a broker's leader epoch
    cache holds them; a batch with a lower epoch than one before it (or none, -1) adds none."""
    entries: list[tuple[int, int]] = []
    if not any(partition_dir.glob("*.log")):
        return entries
    for arrow_batch in iter_batches(
        str(partition_dir), ["batchBaseOffset", "leaderEpoch"], iteration="shallow"
    ):
        bases = arrow_batch.column(0).to_pylist()
        for base, epoch in zip(bases, arrow_batch.column(1).to_pylist(), strict=True):
            if epoch is not None and epoch >= 0 and (not entries or epoch > entries[-1][0]):
                entries.append((epoch, base))
    return entries


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


@contextlib.contextmanager
def _broker_stopped(logdir: Path) -> Iterator[None]:
    """Hold the log dir's ``.lock`` as a broker does (a running broker holds it: refused)."""
    lock = logdir / ".lock"
    if not lock.exists():
        yield
        return
    import fcntl

    with lock.open("a") as handle:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            raise StorageError(
                "a broker holds this log dir's .lock: stop the broker before restoring", str(lock)
            ) from err
        try:
            yield
        finally:
            fcntl.lockf(handle, fcntl.LOCK_UN)


def _request(args: argparse.Namespace, topic_id: str | None) -> dict[str, Any]:
    """What names a restore in its marker: the archive, selection and target, and a digest of
    every option (their values may be credentials, not written to the log dir)."""
    options = [[key, value] for key, value in dict(args.option).items()]  # in the order given
    every = json.dumps([options, [[key, value] for key, value in args.write_option]])
    return {
        "archive": args.archive if "://" in args.archive else os.path.abspath(args.archive),
        "selection": [pair for pair in options if pair[0].lower() in SELECTION],
        "topic": args.topic,
        "topic_id": topic_id,
        "options_sha256": hashlib.sha256(every.encode()).hexdigest(),
    }


def _resumed(staging: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """The marker of an interrupted run of this same restore whose copy was whole (its moves
    are then finished); None to stage anew. Another restore's staging is refused."""
    if not staging.exists():
        return None
    marker = staging / MARKER
    if not marker.exists():  # interrupted before its marker: nothing moved yet
        shutil.rmtree(staging)
        _fsync_directory(staging.parent)
        return None
    with marker.open("rb") as handle:
        text = handle.read(MARKER_MAX_BYTES + 1)
    try:
        state = json.loads(text)
        found, phase = state["request"], state["phase"]
    except (ValueError, KeyError, TypeError) as err:
        raise InvalidInputError(
            f"{marker}: not a restore marker ({err}); remove {staging} and empty the partitions "
            "it was restoring"
        ) from err
    if found != request:
        raise InvalidInputError(
            f"{staging}: holds an unfinished restore of {found.get('archive')} (selection "
            f"{found.get('selection')}, topic {found.get('topic')}, other options as given "
            f"then): finish it by running that restore again, or remove {staging} and empty the "
            f"partitions it names in {MARKER}"
        )
    return state if phase == "placing" else None


def _stage(args: argparse.Namespace, staging: Path, request: dict[str, Any]) -> dict[str, Any]:
    """Copy the archive into the staging directory, check the targets, make it all durable and
    mark the staging whole (the files to move per partition)."""
    logdir = staging.parent
    staging.mkdir(exist_ok=True)
    data = staging / DATA
    if data.exists():  # an interrupted copy: redone
        shutil.rmtree(data)
    _write_atomically(staging / MARKER, json.dumps({"request": request, "phase": "copying"}))
    try:
        summaries = copy(
            args.archive,
            data,
            topic=args.topic,
            options=args.option,
            write_options=dict(args.write_option),
        )
        partitions = []
        for summary in summaries:
            name = f"{summary.topic}-{summary.partition}"
            topic_id = check_target(logdir / name, request["topic_id"])
            staged = data / name
            files = sorted(f.name for f in staged.iterdir()) if staged.exists() else []
            partitions.append(
                {
                    "name": name,
                    "topic_id": topic_id,
                    "files": files,
                    "epochs": leader_epochs(staged),
                    "summary": asdict(summary),
                }
            )
    except KafkaSegmentsError:  # refused: the log dir as it was
        shutil.rmtree(staging)
        _fsync_directory(logdir)
        raise
    for directory, _, names in os.walk(data):
        for name in names:
            with open(os.path.join(directory, name), "rb+") as handle:
                os.fsync(handle.fileno())
        _fsync_directory(Path(directory))
    state = {"request": request, "phase": "placing", "partitions": partitions}
    _write_atomically(staging / MARKER, json.dumps(state))
    return state


def _place_partition(logdir: Path, data: Path, part: dict[str, Any]) -> str:
    target = logdir / part["name"]
    check_target(target, part["topic_id"], part["files"])
    epochs = [(int(epoch), int(offset)) for epoch, offset in part["epochs"]]
    place(data / part["name"], target, part["files"], part["topic_id"], epochs)
    return _line(part["name"], PartitionSummary(**part["summary"]), epochs)


def _finish(staging: Path) -> None:
    """Remove the staging directory, its marker last: emptied, it names nothing to resume."""
    shutil.rmtree(staging / DATA, ignore_errors=True)
    (staging / MARKER).unlink()
    staging.rmdir()
    _fsync_directory(staging.parent)


def _fsync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _line(name: str, summary: PartitionSummary, epochs: list[tuple[int, int]]) -> str:
    padded = f"; an empty batch up to its end offset {summary.end_offset}" if summary.padded else ""
    if summary.first_offset < 0:
        return f"{name}: no committed records in the archive; left empty{padded}"
    return (
        f"{name}: {summary.records} records restored, offsets {summary.first_offset}.."
        f"{summary.last_offset}, leader epochs {epochs}{padded}"
    )
