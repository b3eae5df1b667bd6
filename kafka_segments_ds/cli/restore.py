"""``kafka-segments restore ARCHIVE LOGDIR``: partition directories a stopped broker loads.

The archive's committed records are written with their offsets (:func:`kafka_segments_ds.rewrite.
copy`) into a staging directory, then moved into the broker's partition directories: those of a
topic created on the target broker with at least as many partitions and holding no records yet
(the broker's empty segment is replaced). Its ``partition.metadata`` (the target's topic id) is
kept, or written from ``--topic-id`` where the directory does not exist yet;
``leader-epoch-checkpoint`` is written from the leader epochs of the restored batches.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kafka_segments_ds import iter_batches
from kafka_segments_ds.cli.common import write_lines
from kafka_segments_ds.cli.rewrite import add_write_option
from kafka_segments_ds.errors import InvalidInputError, InvalidOptionError, StorageError
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
    "records of committed transactions are restored as non-transactional batches."
)
PARTITION_METADATA = "partition.metadata"
METADATA_MAX_BYTES = 4096
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# the broker's files of a new, empty partition, replaced by the restored ones
REPLACED_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".deleted")


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
    with (
        _broker_stopped(logdir),
        tempfile.TemporaryDirectory(prefix="kafka-segments-restore-") as tmp,
    ):
        staged = Path(tmp) / "staged"
        summaries = copy(
            args.archive,
            staged,
            topic=args.topic,
            options=args.option,
            write_options=dict(args.write_option),
        )
        targets = [
            (summary, check_target(logdir / f"{summary.topic}-{summary.partition}", topic_id))
            for summary in summaries
        ]
        lines = []
        for summary, metadata in targets:
            name = f"{summary.topic}-{summary.partition}"
            epochs = place(staged / name, logdir / name, metadata)
            lines.append(_line(name, summary, epochs))
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


def check_target(directory: Path, topic_id: str | None) -> str:
    """The target partition directory may be restored into: it holds no records, and its topic
    id agrees with ``topic_id``; returns the topic id its partition.metadata gets."""
    if not directory.exists():
        if topic_id is None:
            raise InvalidInputError(
                f"{directory}: no such partition directory: create the topic on the target "
                "broker (with as many partitions) and stop the broker, or give --topic-id"
            )
        return topic_id
    for file in directory.iterdir():
        if file.suffix == ".log" and file.stat().st_size:
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


def place(staged: Path, target: Path, topic_id: str) -> list[tuple[int, int]]:
    """Replace the target's segment files by the staged ones; write partition.metadata and
    leader-epoch-checkpoint. Returns the checkpoint's (epoch, start offset) entries."""
    epochs = leader_epochs(staged)
    target.mkdir(exist_ok=True)
    for old in target.iterdir():
        if old.suffix in REPLACED_SUFFIXES:
            old.unlink()
    for ours in sorted(staged.iterdir()):
        shutil.copyfile(ours, target / ours.name)
    _write_atomically(target / PARTITION_METADATA, f"version: 0\ntopic_id: {topic_id}\n")
    lines = ["0", str(len(epochs)), *(f"{epoch} {offset}" for epoch, offset in epochs)]
    _write_atomically(target / LEADER_EPOCH_CHECKPOINT, "\n".join(lines) + "\n")
    return epochs


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
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


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


def _line(name: str, summary: PartitionSummary, epochs: list[tuple[int, int]]) -> str:
    padded = f"; an empty batch up to its end offset {summary.end_offset}" if summary.padded else ""
    if summary.first_offset < 0:
        return f"{name}: no committed records in the archive; left empty{padded}"
    return (
        f"{name}: {summary.records} records restored, offsets {summary.first_offset}.."
        f"{summary.last_offset}, leader epochs {epochs}{padded}"
    )
