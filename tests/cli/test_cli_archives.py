"""The CLI on real archives (issue 23): offset ranges clipped per partition, tiered buckets,
partition selection, empty partitions, index file modes, damaged entries counted one by one,
ABORT markers whose .txnindex is missing."""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.cli import main
from kafka_segments_ds.records.batches import scan_entries
from tests.support.upload import upload_pinterest


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    status = main([*argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def rows(lines: list[str]) -> list[tuple[str, int, int]]:
    return [(r["topic"], r["partition"], r["offset"]) for r in map(json.loads, lines)]


@pytest.fixture
def three_partitions(make_partition: Callable[..., Any], log_dir: Path) -> Path:
    """a-0: offsets 0..9, a-1: 0..29, b-0: 0..4; batches of two records, several segments."""
    for name, count in (("a-0", 10), ("a-1", 30), ("b-0", 5)):
        part = make_partition(name, segment_bytes=300, index_interval_bytes=1)
        for first in range(0, count, 2):
            part.batch([1_700_000_000_000 + first] * min(2, count - first))
        part.close()
    assert len(list((log_dir / "a-1").glob("*.log"))) == 5
    return log_dir


# -- dump: offset ranges per partition -----------------------------------------------------


def test_dump_from_offset_past_the_end_of_some_partitions(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = run(capsys, "dump", str(three_partitions), "--from-offset", "20")
    assert (status, err) == (0, "")
    assert rows(lines) == [("a", 1, o) for o in range(20, 30)]
    # past the end of every partition: nothing, not an error
    status, lines, err = run(capsys, "dump", str(three_partitions), "--from-offset", "30")
    assert (status, lines, err) == (0, [], "")


@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED"])
def test_dump_from_offset_past_a_log_ending_in_a_dropped_batch(
    three_partitions: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """b-0 (0..4) ends in a copy of its first batch, whose offsets go back: a DROPMALFORMED
    read drops it whole, so --from-offset 20 is clipped to the log end 5 by that read's own
    rules (nothing, not a refusal). A FAILFAST read from there reaches the batch and names it
    (not "past the end of the log")."""
    last = sorted((three_partitions / "b-0").glob("*.log"))[-1]
    first = sorted((three_partitions / "b-0").glob("*.log"))[0].read_bytes()
    with last.open("ab") as f:
        f.write(first[: 12 + int.from_bytes(first[8:12], "big")])
    for start in ("20", "4"):
        argv = ["dump", str(three_partitions / "b-0"), "--from-offset", start, "--mode", mode]
        status, lines, err = run(capsys, *argv)
        if mode == "FAILFAST":
            assert (status, lines) == (1, [])
            assert "offsets not increasing" in err and str(last) in err
        elif start == "20":
            assert (status, lines, err) == (0, [], "")
        else:
            assert (status, rows(lines)) == (0, [("b", 0, 4)])


def test_dump_offset_range_over_a_directory_not_named_topic_partition(
    three_partitions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory not called <topic>-<partition> cannot be named in offsets JSON: dump keeps
    its range by filtering rows, and the partitions that are named still get theirs."""
    plain = tmp_path / "plain"
    plain.mkdir()
    for segment in (three_partitions / "b-0").iterdir():
        (plain / segment.name).write_bytes(segment.read_bytes())
    argv = ["dump", str(three_partitions / "b-0"), str(plain), "--from-offset", "3"]
    status, lines, err = run(capsys, *argv)
    assert (status, err) == (0, "")
    offsets = [json.loads(line)["offset"] for line in lines]
    assert sorted(offsets) == [3, 3, 4, 4]


def test_dump_subscribe_with_an_offset_range(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = run(
        capsys,
        "dump",
        str(three_partitions),
        "--option",
        "subscribe=a",
        "--from-offset",
        "8",
        "--to-offset",
        "12",
    )
    assert (status, err) == (0, "")
    assert rows(lines) == [("a", 0, 8), ("a", 0, 9)] + [("a", 1, o) for o in range(8, 12)]
    status, lines, _ = run(
        capsys, "dump", str(three_partitions), "--option", "subscribe=b", "--from-offset", "3"
    )
    assert (status, rows(lines)) == (0, [("b", 0, 3), ("b", 0, 4)])


def test_dump_subscribe_over_several_paths(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The paths are one input: a topic of one of them is read; one of none is refused."""
    paths = [str(three_partitions / "a-0"), str(three_partitions / "b-0")]
    argv = ["dump", *paths, "--from-offset", "3", "--option"]
    status, lines, err = run(capsys, *argv, "subscribe=b")
    assert (status, rows(lines), err) == (0, [("b", 0, 3), ("b", 0, 4)], "")
    status, lines, err = run(capsys, *argv, "subscribe=c")
    assert (status, lines) == (2, [])
    assert err == (
        "kafka-segments: error: subscribe names topics that are not in the archive: c; "
        "topics there: a, b\n"
    )


def test_dump_from_offset_after_to_offset_is_a_usage_error(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = run(
        capsys, "dump", str(three_partitions), "--from-offset", "9", "--to-offset", "4"
    )
    assert (status, lines) == (2, [])
    assert err == "kafka-segments: error: --from-offset 9 is after --to-offset 4\n"


# -- verify / stats: selection, tiered buckets, empty partitions ----------------------------


def test_verify_honours_subscribe(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = run(capsys, "verify", str(three_partitions), "--option", "subscribe=b")
    assert (status, err) == (0, "")
    assert [line.split(" ")[1].rstrip(":") for line in lines[:-1]] == [
        str(three_partitions / "b-0" / f"00000000000000000000{suffix}")
        for suffix in (".log", ".index", ".timeindex")
    ]
    assert lines[-1] == (
        "verify: 3 files checked (1 .log, 2 index) in 1 partition: 3 ok, 0 notes, "
        "0 index problems, 0 damaged, 0 unreadable; exit status 0"
    )
    status, lines, err = run(capsys, "verify", str(three_partitions), "--option", "subscribe=c")
    assert (status, lines) == (2, [])
    assert err == (
        "kafka-segments: error: subscribe names topics that are not in the archive: c; "
        "topics there: a, b\n"
    )


def test_stats_honours_assign(three_partitions: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines, _ = run(
        capsys,
        "stats",
        str(three_partitions),
        "--format",
        "jsonl",
        "--option",
        'assign={"a":[1]}',
    )
    assert status == 0
    stats = [json.loads(line) for line in lines]
    assert [(s["topic"], s["partition"], s["records"], s["segments"]) for s in stats] == [
        ("a", 1, 30, 5)
    ]


def _pinterest(source: Path, bucket: Path) -> None:
    for directory in sorted(source.iterdir()):
        topic, partition = directory.name.rsplit("-", 1)
        upload_pinterest(
            directory, pafs.LocalFileSystem(), str(bucket), "c1", topic, int(partition)
        )


def test_verify_and_stats_read_a_healthy_pinterest_bucket(
    three_partitions: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = tmp_path / "bucket"
    _pinterest(three_partitions, bucket)
    status, lines, err = run(capsys, "verify", "--option", "layout=pinterest", str(bucket))
    assert (status, err) == (0, "")
    assert lines[-1] == (
        "verify: 24 files checked (8 .log, 16 index) in 3 partitions: 24 ok, 0 notes, "
        "0 index problems, 0 damaged, 0 unreadable; exit status 0"
    )
    assert (
        f"OK {bucket}/c1/a-1/00000000000000000024.log: 3 batches, 6 records, last offset 29"
        in lines
    )
    status, lines, err = run(
        capsys, "stats", "--option", "layout=pinterest", "--format", "jsonl", str(bucket)
    )
    assert (status, err) == (0, "")
    got = [json.loads(line) for line in lines]
    assert [
        tuple(s[k] for k in ("topic", "partition", "segments", "records"))
        + tuple(s[k] for k in ("first_offset", "last_offset", "damaged"))
        for s in got
    ] == [("a", 0, 2, 10, 0, 9, 0), ("a", 1, 5, 30, 0, 29, 0), ("b", 0, 1, 5, 0, 4, 0)]


def test_stats_shows_an_empty_partition_plainly(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = three_partitions / "c-0"
    empty.mkdir()
    (empty / "00000000000000000042.log").write_bytes(b"")
    status, lines, err = run(capsys, "stats", str(three_partitions), "--option", "subscribe=c")
    assert (status, err) == (0, "")
    header, row = lines[0].split(), lines[1].split()
    assert header[:6] == ["TOPIC-PARTITION", "SEGMENTS", "BATCHES", "RECORDS", "BYTES", "OFFSETS"]
    assert row[:8] == ["c-0", "1", "0", "0", "0", "none", "(empty)", "-"]
    assert "None" not in lines[1]


# -- rebuild-index: file modes, the interval ------------------------------------------------


def test_rebuild_index_keeps_the_mode_of_the_index_it_replaces(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = three_partitions / "a-1"
    index = part / "00000000000000000000.index"
    timeindex = part / "00000000000000000000.timeindex"
    index.chmod(0o640)
    timeindex.unlink()
    old = os.umask(0o027)
    try:
        status, lines, _ = run(
            capsys,
            "rebuild-index",
            str(part / "00000000000000000000.log"),
            "--index-interval-bytes",
            "100000",
        )
    finally:
        os.umask(old)
    assert status == 0
    assert lines == [
        f"wrote {index}: 2 entries -> 0 entries",
        f"wrote {timeindex}: missing -> 1 entries",
    ]
    assert stat.S_IMODE(index.stat().st_mode) == 0o640  # as before
    assert stat.S_IMODE(timeindex.stat().st_mode) == 0o640  # 0666 under the umask 027


def test_rebuild_index_new_file_is_0644_under_the_usual_umask(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = three_partitions / "b-0"
    (part / "00000000000000000000.index").unlink()
    old = os.umask(0o022)
    try:
        assert main(["rebuild-index", str(part)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((part / "00000000000000000000.index").stat().st_mode) == 0o644


def test_rebuild_index_negative_interval_is_a_usage_error(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["rebuild-index", str(three_partitions), "--index-interval-bytes", "-1"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "kafka-segments rebuild-index: error: argument --index-interval-bytes: must be >= 0, got -1"
    )


# -- stats: every damaged entry counted ------------------------------------------------------


def test_stats_counts_each_legacy_message_whose_crc_fails(
    make_partition: Callable[..., Any],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    part = make_partition("old-0")
    for i in range(90):
        part.legacy(magic=1, timestamp=1_700_000_000_000 + i)
    directory = part.close()
    (log,) = directory.glob("*.log")
    data = bytearray(log.read_bytes())
    table = scan_entries(bytes(data))
    assert len(table.positions) == 90
    for position in table.positions.tolist():
        data[position + 12] ^= 0xFF  # the stored CRC-32
    log.write_bytes(bytes(data))
    status, lines, err = run(capsys, "stats", str(directory), "--format", "jsonl")
    assert status == 1
    (got,) = [json.loads(line) for line in lines]
    assert (got["records"], got["batches"], got["damaged"]) == (0, 0, 90)
    assert err.startswith("warning: dropping malformed entry: CRC-32 mismatch")
    status, lines, _ = run(capsys, "stats", str(directory))
    assert lines[-1] == (
        "DAMAGED: 90 malformed or truncated entries skipped (see stderr); "
        "`kafka-segments verify` names each file"
    )
    # the reader's own summary counts them alike (it said 1 entry and 17,355 bytes that frame
    # no entry: finding no valid entry after the first, it passes over the other 89)
    from kafka_segments_ds import read_table

    with caplog.at_level(logging.WARNING, "kafka_segments_ds.reader.damage"):
        assert read_table(directory, mode="DROPMALFORMED").num_rows == 0
    assert caplog.records[-1].getMessage() == (
        f"{log}: DROPMALFORMED dropped 90 malformed entries (0 batches, 90 legacy messages) "
        "holding 90 records, and skipped 0 bytes that frame no entry"
    )


# -- transactions: a .txnindex missing -------------------------------------------------------


@pytest.fixture
def two_aborts(make_partition: Callable[..., Any]) -> Path:
    """Offsets 0-1 plain, 2-3 producer 1 (aborted at 4), 5 plain, 6 producer 2 (aborted at 7),
    8 plain: one entry per segment, each ABORT marker's segment with its .txnindex."""
    part = make_partition("tx-0", segment_bytes=1)
    part.batch([1000, 1000])
    part.batch([1000, 1000], producer_id=1, transactional=True)
    part.marker(1, commit=False, timestamp=1000)
    part.writer.record_abort(1, 2, 4)
    part.batch([1000])
    part.batch([1000], producer_id=2, transactional=True)
    part.marker(2, commit=False, timestamp=1000)
    part.writer.record_abort(2, 6, 7)
    part.batch([1000])
    directory = part.close()
    assert sorted(p.name for p in directory.glob("*.txnindex")) == [
        "00000000000000000004.txnindex",
        "00000000000000000007.txnindex",
    ]
    return directory


def test_verify_reports_abort_markers_without_their_txnindex(
    two_aborts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, _ = run(capsys, "verify", str(two_aborts))
    assert status == 0
    (two_aborts / "00000000000000000004.txnindex").unlink()
    status, lines, _ = run(capsys, "verify", str(two_aborts))
    assert status == 3
    assert [line for line in lines if line.startswith("INDEX")] == [
        f"INDEX {two_aborts}/00000000000000000004.txnindex: missing: the segment holds 1 ABORT "
        "marker (first at offset 4) that a broker lists in its .txnindex; read_committed reads "
        "here use the markers"
    ]
    # emptied (an interrupted copy): it lists none of the segment's markers
    (two_aborts / "00000000000000000004.txnindex").write_bytes(b"")
    status, lines, _ = run(capsys, "verify", str(two_aborts))
    assert status == 3
    assert [line for line in lines if line.startswith("INDEX")] == [
        f"INDEX {two_aborts}/00000000000000000004.txnindex: lists 0 of the segment's 1 ABORT "
        "markers (first unlisted at offset 4); read_committed reads use the markers"
    ]
    committed = read_table(two_aborts, isolationLevel="read_committed")
    assert committed.column("offset").to_pylist() == [0, 1, 5, 8]


@pytest.mark.parametrize("removed", [(), ("00000000000000000004.txnindex",), ("*",)])
def test_stats_counts_aborted_transactions_with_or_without_txnindex(
    two_aborts: Path, capsys: pytest.CaptureFixture[str], removed: tuple[str, ...]
) -> None:
    for pattern in removed:
        for path in two_aborts.glob(pattern if pattern != "*" else "*.txnindex"):
            path.unlink()
    status, lines, _ = run(capsys, "stats", str(two_aborts), "--format", "jsonl")
    assert status == 0
    (got,) = [json.loads(line) for line in lines]
    assert (got["records"], got["aborted_records"], got["aborted_transactions"]) == (7, 3, 2)
    committed = run(capsys, "dump", str(two_aborts), "--isolation", "read_committed")[1]
    assert [r[2] for r in rows(committed)] == [0, 1, 5, 8]


def test_stats_refuses_range_options(
    three_partitions: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = run(
        capsys, "stats", str(three_partitions), "--option", "startingOffsets=earliest"
    )
    assert (status, lines) == (2, [])
    assert err == (
        "kafka-segments: error: stats counts whole partitions: startingOffsets not supported "
        "here (select partitions with subscribe/assign; dump --from-offset/--to-offset reads a "
        "range)\n"
    )
