"""``kafka-segments restore``: an archive's partitions into a stopped broker's empty partition
directories, offsets kept, with leader-epoch-checkpoint and partition.metadata; refusals leave
the log dir as it was."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table, write_table
from kafka_segments_ds.cli import main, restore

TOPIC_ID = base64.urlsafe_b64encode(bytes(range(1, 17))).decode().rstrip("=")
OTHER_ID = base64.urlsafe_b64encode(bytes(range(2, 18))).decode().rstrip("=")
COLUMNS = ["partition", "offset", "key", "value", "leaderEpoch", "batchBaseOffset"]


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """Topic ``a``, 2 partitions: partition 0 at offsets 100..119 (leader epochs 2, then 5 from
    110; a gap at 115), partition 1 empty; topic ``b`` one record."""
    offsets = [*range(100, 115), *range(116, 121)]
    write_table(
        pa.table(
            {
                "key": [b"k%d" % o for o in offsets],
                "value": [b"v%d" % o for o in offsets],
                "offset": pa.array(offsets, pa.int64()),
                "partition": pa.array([0] * len(offsets), pa.int32()),
                "leaderEpoch": pa.array([2 if o < 110 else 5 for o in offsets], pa.int32()),
            }
        ),
        tmp_path / "archive",
        topic="a",
        numPartitions=2,
        preserveOffsets="true",
        batchRecords=4,
    )
    write_table(pa.table({"value": [b"x"]}), tmp_path / "archive", topic="b")
    return tmp_path / "archive"


def broker_partition(log_dir: Path, name: str, topic_id: str = TOPIC_ID) -> Path:
    """A partition directory as a broker creates it for a new topic."""
    directory = log_dir / name
    directory.mkdir(parents=True)
    (directory / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
    for suffix in (".log", ".index", ".timeindex"):
        (directory / f"{0:020d}{suffix}").write_bytes(b"" if suffix == ".log" else bytes(12))
    (directory / "leader-epoch-checkpoint").write_text("0\n0\n")
    return directory


def test_restore_into_a_new_topic(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir = tmp_path / "broker"
    for p in range(2):
        broker_partition(log_dir, f"c-{p}")
    status = main(
        ["restore", str(archive), str(log_dir), "--option", "subscribe=a", "--topic", "c"]
    )
    assert status == 0
    assert capsys.readouterr().out.splitlines() == [
        "c-0: 20 records restored, offsets 100..120, leader epochs [(2, 100), (5, 110)]",
        "c-1: no committed records in the archive; left empty",
    ]
    part = log_dir / "c-0"
    assert (part / "leader-epoch-checkpoint").read_text() == "0\n2\n2 100\n5 110\n"
    assert (part / "partition.metadata").read_text() == f"version: 0\ntopic_id: {TOPIC_ID}\n"
    assert sorted(p.name for p in part.glob("*.log"))[0] == f"{100:020d}.log"
    assert not (part / f"{0:020d}.log").exists()  # the broker's empty segment replaced
    assert (log_dir / "c-1" / "leader-epoch-checkpoint").read_text() == "0\n0\n"
    got = read_table(log_dir, COLUMNS, includeMetadata=True)
    assert got.equals(read_table(archive, COLUMNS, subscribe="a", includeMetadata=True))
    assert set(read_table(log_dir, ["topic"])["topic"].to_pylist()) == {"c"}


def test_restore_creates_partition_directories_with_the_topic_id_given(
    archive: Path, tmp_path: Path
) -> None:
    log_dir = tmp_path / "broker"
    log_dir.mkdir()
    assert main(["restore", str(archive), str(log_dir), "--topic-id", TOPIC_ID]) == 0
    for name in ("a-0", "a-1", "b-0"):
        text = (log_dir / name / "partition.metadata").read_text()
        assert text == f"version: 0\ntopic_id: {TOPIC_ID}\n"
    assert read_table(log_dir, ["topic", "offset"]).num_rows == 21


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], log_dir: Path) -> str:
    before = {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()}
    assert main(argv) == 2
    after = {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()}
    assert after == before  # nothing changed
    return capsys.readouterr().err


def test_refusals_leave_the_log_dir_unchanged(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir = tmp_path / "broker"
    broker_partition(log_dir, "a-0")
    base = ["restore", str(archive), str(log_dir)]
    selected = [*base, "--option", "subscribe=a"]
    err = refused(selected, capsys, log_dir)
    assert f"{log_dir / 'a-1'}: no such partition directory" in err
    broker_partition(log_dir, "a-1")
    err = refused([*selected, "--topic-id", OTHER_ID], capsys, log_dir)
    assert f"the target topic's id is {TOPIC_ID}, not --topic-id {OTHER_ID}" in err
    err = refused([*base, "--topic", "c"], capsys, log_dir)
    assert "a new topic name (c) needs one source topic; the selection holds 2: a, b" in err
    err = refused([*selected, "--topic-id", "AAAA"], capsys, log_dir)
    assert "a topic id is 16 bytes" in err
    (log_dir / "a-1" / "partition.metadata").write_bytes(b"x" * 10_000)
    err = refused(selected, capsys, log_dir)
    assert "partition.metadata: not a partition.metadata file of version 0 with a topic_id" in err
    (log_dir / "a-1" / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID}\n")
    (log_dir / "a-1" / f"{0:020d}.log").write_bytes(b"records")
    err = refused(selected, capsys, log_dir)
    assert f"{log_dir / 'a-1' / f'{0:020d}.log'}: holds 7 bytes of records" in err


def test_refused_while_a_broker_holds_the_log_dir(
    archive: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_dir = tmp_path / "broker"
    broker_partition(log_dir, "b-0")
    (log_dir / ".lock").touch()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.lockf(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); sys.stdin.read()",
            str(log_dir / ".lock"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        err = refused(
            ["restore", str(archive), str(log_dir), "--option", "subscribe=b"], capsys, log_dir
        )
        assert "a broker holds this log dir's .lock: stop the broker before restoring" in err
    finally:
        holder.communicate("")
    assert main(["restore", str(archive), str(log_dir), "--option", "subscribe=b"]) == 0


class Crash(BaseException):
    """The process dying: no handler of the restore runs (it is not an Exception)."""


RESTORE_C = ["--option", "subscribe=a", "--topic", "c", "--write-option", "segmentBytes=200"]


def tree(log_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(log_dir)): p.read_bytes() for p in log_dir.rglob("*") if p.is_file()}


def new_broker(log_dir: Path) -> Path:
    for p in range(2):
        broker_partition(log_dir, f"c-{p}")
    return log_dir


def crash_at_move(monkeypatch: pytest.MonkeyPatch, move: int) -> None:
    """Crash the process at its ``move``-th rename (0: the first)."""
    done = [0]
    real = os.replace

    def replace(src: Any, dst: Any) -> None:
        if done[0] == move:
            raise Crash(f"crash at move {move}: {src} -> {dst}")
        done[0] += 1
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def check_interrupted(log_dir: Path, whole: dict[str, bytes]) -> None:
    """What a crash leaves: every segment file is the finished restore's, byte for byte, or
    the broker's own; ours are the last segments (never the first ones without the last); the
    staging directory is there for the re-run."""
    assert (log_dir / ".kafka-segments-restore").is_dir()
    empty = f"{0:020d}"
    for p in range(2):
        part = log_dir / f"c-{p}"
        theirs = {f"{empty}.log": b"", f"{empty}.index": bytes(12), f"{empty}.timeindex": bytes(12)}
        for file in part.iterdir() if part.exists() else ():
            name = f"c-{p}/{file.name}"
            if file.suffix in (".log", ".index", ".timeindex", ".txnindex"):
                assert file.read_bytes() in (whole.get(name), theirs.get(file.name)), name
        ours = sorted(n for n in whole if n.startswith(f"c-{p}/") and n.endswith(".log"))
        placed = [n for n in ours if (log_dir / n).exists() and (log_dir / n).read_bytes()]
        assert placed == ours[len(ours) - len(placed) :], (placed, ours)
        if placed and f"c-{p}/{empty}.log" not in whole:
            assert not (part / f"{empty}.log").exists()


def test_a_restore_interrupted_at_any_move_is_finished_by_running_it_again(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["restore", str(archive)]
    reference = new_broker(tmp_path / "reference")
    assert main([*argv, str(reference), *RESTORE_C]) == 0
    whole = tree(reference)
    assert len([n for n in whole if n.startswith("c-0/") and n.endswith(".log")]) >= 3
    want = read_table(archive, COLUMNS, subscribe="a", includeMetadata=True)
    move = 0
    while True:
        log_dir = new_broker(tmp_path / f"broker-{move}")
        with monkeypatch.context() as patched:
            crash_at_move(patched, move)
            try:
                main([*argv, str(log_dir), *RESTORE_C])
            except Crash:
                crashed = True
            else:
                crashed = False
        if crashed:
            check_interrupted(log_dir, whole)
            assert main([*argv, str(log_dir), *RESTORE_C]) == 0
        assert tree(log_dir) == whole, move
        assert read_table(log_dir, COLUMNS, includeMetadata=True).equals(want)
        if not crashed:
            break
        move += 1
    assert move > 12  # every move of both partitions and the marker's


def test_a_restore_interrupted_while_copying_is_redone(
    archive: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = new_broker(tmp_path / "reference")
    argv = ["restore", str(archive)]
    assert main([*argv, str(reference), *RESTORE_C]) == 0
    log_dir = new_broker(tmp_path / "broker")
    before = tree(log_dir)
    real = restore.copy

    def copy_then_crash(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise Crash("crash after the copy")

    with monkeypatch.context() as patched:
        patched.setattr(restore, "copy", copy_then_crash)
        with pytest.raises(Crash):
            main([*argv, str(log_dir), *RESTORE_C])
    staged = {n: b for n, b in tree(log_dir).items() if n.startswith(".kafka-segments-restore/")}
    assert {n: b for n, b in tree(log_dir).items() if n not in staged} == before
    assert any(n.endswith(".log") for n in staged)
    assert main([*argv, str(log_dir), *RESTORE_C]) == 0
    assert tree(log_dir) == tree(reference)


def test_another_restore_is_refused_while_one_is_unfinished(
    archive: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    reference = new_broker(tmp_path / "reference")
    argv = ["restore", str(archive)]
    assert main([*argv, str(reference), *RESTORE_C]) == 0
    log_dir = new_broker(tmp_path / "broker")
    with monkeypatch.context() as patched:
        crash_at_move(patched, 5)
        with pytest.raises(Crash):
            main([*argv, str(log_dir), *RESTORE_C])
    capsys.readouterr()
    marker = (log_dir / ".kafka-segments-restore" / "RESTORE.json").read_text()
    request = json.loads(marker)["request"]
    assert (request["archive"], request["selection"], request["topic"]) == (
        str(archive),
        [["subscribe", "a"]],
        "c",
    )
    assert "segmentBytes" not in marker  # options only as a digest (values may be secrets)
    other = [*argv, str(log_dir), *RESTORE_C[:-1], "segmentBytes=400"]
    err = refused(other, capsys, log_dir)
    assert f"{log_dir / '.kafka-segments-restore'}: holds an unfinished restore of {archive}" in err
    assert main([*argv, str(log_dir), *RESTORE_C]) == 0
    assert tree(log_dir) == tree(reference)
    # finished: the same restore again is refused as any restore into partitions with records
    err = refused([*argv, str(log_dir), *RESTORE_C], capsys, log_dir)
    assert "holds" in err and "bytes of records; restore writes only into partitions" in err
