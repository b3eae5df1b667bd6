"""``kafka-segments restore``: an archive's partitions into a stopped broker's empty partition
directories, offsets kept, with leader-epoch-checkpoint and partition.metadata; refusals leave
the log dir as it was."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table, write_table
from kafka_segments_ds.cli import main

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
