"""``kafka-segments verify`` and ``rebuild-index`` on logs built the way real ones are.

Batches come from the oracles' builders (kafka-python for magic 2, aiokafka for magic 1); the
indexes are written by the broker's append rule (FORMAT §6.2/§6.3): an entry per *append* when
more than ``index.interval.bytes`` were written since the previous one. A follower appends whole
fetched chunks (several batches per append), so a 2.0+ entry maps the append's last offset to
its first byte; brokers before 2.0 stored the append's first offset. Both are healthy (exit 0).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.default_records import DefaultRecordBatchBuilder

from kafka_segments_ds import index as kidx
from kafka_segments_ds.cli import main
from kafka_segments_ds.cli.log_scan import scan_log
from kafka_segments_ds.errors import KafkaSegmentsError, StorageError
from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.records.batches import as_array, has_valid_checksum, scan_entries
from kafka_segments_ds.records.v2 import CONTROL_ABORT
from kafka_segments_ds.transactions import control_marker
from tests.support.transactions import write_interleaved

BIG = 1 << 24
GZIP = 1
BASE = 0
INTERVAL = 150  # index.interval.bytes, small so that a short log gets several entries
T0 = 1_700_000_000_000


@dataclass
class Log:
    """A segment being written append by append, with the broker's index rule."""

    first_offset_entries: bool = False  # pre-2.0 brokers: the append's first offset
    data: bytearray = field(default_factory=bytearray)
    offset_entries: list[tuple[int, int]] = field(default_factory=list)
    time_entries: list[tuple[int, int]] = field(default_factory=list)
    since_entry: int = 0
    max_ts: int = -1
    max_ts_offset: int = -1

    def append(self, entries: list[tuple[bytes, int, int, int]]) -> None:
        """One append: ``(bytes, first offset, last offset, max timestamp)`` per entry."""
        position = len(self.data)
        first, last = entries[0][1], entries[-1][2]
        for _, _, last_offset, ts in entries:
            if ts > self.max_ts:
                self.max_ts, self.max_ts_offset = ts, last_offset
        if self.since_entry > INTERVAL:
            self.offset_entries.append((first if self.first_offset_entries else last, position))
            if not self.time_entries or self.max_ts > self.time_entries[-1][0]:
                self.time_entries.append((self.max_ts, self.max_ts_offset))
            self.since_entry = 0
        for data, *_ in entries:
            self.data += data
            self.since_entry += len(data)

    def write(self, directory: Path) -> Path:
        """The segment files, the time index closed with the segment's max timestamp."""
        directory.mkdir(parents=True, exist_ok=True)
        if not self.time_entries or self.max_ts > self.time_entries[-1][0]:
            self.time_entries.append((self.max_ts, self.max_ts_offset))
        stem = directory / f"{BASE:020d}"
        stem.with_suffix(".log").write_bytes(bytes(self.data))
        stem.with_suffix(".index").write_bytes(
            kidx.encode_offset_index(
                [kidx.OffsetPosition(o, p) for o, p in self.offset_entries], BASE
            )
        )
        stem.with_suffix(".timeindex").write_bytes(
            kidx.encode_time_index([kidx.TimestampOffset(t, o) for t, o in self.time_entries], BASE)
        )
        return directory


def v2_batch(first: int, count: int, codec: int = 0) -> tuple[bytes, int, int, int]:
    """kafka-python's builder, then the broker's offset assignment (base offset field)."""
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, BIG)
    for i in range(count):
        builder.append(i, T0 + first + i, f"k{first + i}".encode(), b"v" * 40, [])
    data = bytearray(builder.build())
    data[0:8] = struct.pack(">q", first)  # not covered by the CRC
    return bytes(data), first, first + count - 1, T0 + first + count - 1


def v1_entries(first: int, count: int, codec: int = 0) -> tuple[bytes, int, int, int]:
    """aiokafka's magic-1 builder: plain messages, or one wrapper (inner offsets relative,
    the wrapper's offset the last absolute one, as a broker stores them)."""
    builder = LegacyRecordBatchBuilder(1, codec, BIG)
    for i in range(count):
        offset = i if codec else first + i
        builder.append(offset, T0 + first + i, f"k{first + i}".encode(), b"v" * 40)
    data = bytearray(builder.build())
    if codec:
        data[0:8] = struct.pack(">q", first + count - 1)
    return bytes(data), first, first + count - 1, T0 + first + count - 1


def follower_log(tmp_path: Path) -> Path:
    """Appends of three batches each (a follower's fetched chunks), 2.0+ entries."""
    log = Log()
    offset = 0
    for chunk in range(8):
        batches = []
        for _ in range(3):
            batches.append(v2_batch(offset, 2, GZIP if chunk % 2 else 0))
            offset += 2
        log.append(batches)
    return log.write(tmp_path / "follower-0")


def pre_2_0_log(tmp_path: Path) -> Path:
    """A 0.10/1.x broker's log: magic-1 appends of several messages or a wrapper, entries
    holding each append's first offset."""
    log = Log(first_offset_entries=True)
    offset = 0
    for chunk in range(8):
        if chunk % 2:
            log.append([v1_entries(offset, 4, GZIP)])
        else:
            log.append([v1_entries(offset + i, 1) for i in range(4)])
        offset += 4
    return log.write(tmp_path / "legacy-0")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    status = main([*argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


@pytest.mark.parametrize("build", [follower_log, pre_2_0_log])
def test_healthy_logs_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], build: object
) -> None:
    part = build(tmp_path)  # type: ignore[operator]
    index = kidx.parse_offset_index((part / f"{BASE:020d}.index").read_bytes(), BASE)
    assert len(index) >= 3  # the rule under test is exercised
    status, lines, err = run(capsys, "verify", str(part))
    assert (status, err) == (0, "")
    assert all(line.startswith("OK ") for line in lines[:-1])
    assert lines[-1] == (
        "verify: 3 files checked (1 .log, 2 index) in 1 partition: 3 ok, 0 notes, "
        "0 index problems, 0 damaged, 0 unreadable; exit status 0"
    )


def test_follower_entries_are_last_offsets_of_appends(tmp_path: Path) -> None:
    part = follower_log(tmp_path)
    index = kidx.parse_offset_index((part / f"{BASE:020d}.index").read_bytes(), BASE)
    # appends hold offsets 6k..6k+5; an entry names the append's last offset, at its first byte
    assert all(o % 6 == 5 for o in index.offsets.tolist())
    log = (part / f"{BASE:020d}.log").read_bytes()
    for offset, position in zip(index.offsets.tolist(), index.positions.tolist(), strict=True):
        assert struct.unpack_from(">q", log, position)[0] == offset - 5  # first batch's base


def _damage(part: Path, suffix: str, data: bytes) -> Path:
    path = part / f"{BASE:020d}{suffix}"
    path.write_bytes(data)
    return path


def _summary(index: int, damaged: int, ok: int) -> str:
    status = 1 if damaged else 3 if index else 0
    return (
        f"verify: 3 files checked (1 .log, 2 index) in 1 partition: {ok} ok, 0 notes, "
        f"{index} index problems, {damaged} damaged, 0 unreadable; exit status {status}"
    )


REBUILD_HINT = (
    "hint: `kafka-segments rebuild-index PATH` rewrites .index/.timeindex as a broker's recovery "
    "does (a damaged or missing .txnindex is not rebuilt)"
)


def test_index_cut_mid_entry_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = follower_log(tmp_path)
    data = (part / f"{BASE:020d}.index").read_bytes()
    path = _damage(part, ".index", data[:-3])
    status, lines, _ = run(capsys, "verify", str(part))
    entries = len(data) // 8 - 1
    assert status == 3
    assert lines[1] == (
        f"INDEX {path}: {entries} entries; .index length {len(data) - 3} is not a multiple of 8: "
        "the last entry is cut after 5 bytes"
    )
    assert lines[-2:] == [_summary(1, 0, 2), REBUILD_HINT]


def test_entry_past_the_log_end_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = follower_log(tmp_path)
    size = (part / f"{BASE:020d}.log").stat().st_size
    entries = kidx.parse_offset_index((part / f"{BASE:020d}.index").read_bytes(), BASE)
    pairs = [
        kidx.OffsetPosition(int(o), int(p))
        for o, p in zip(entries.offsets, entries.positions, strict=True)
    ]
    pairs.append(kidx.OffsetPosition(100, size + 10))
    path = _damage(part, ".index", kidx.encode_offset_index(pairs, BASE))
    status, lines, _ = run(capsys, "verify", str(part))
    assert status == 3
    assert lines[1] == (
        f"INDEX {path}: {len(pairs)} entries; 1 entries point at or past the end of the .log "
        f"({size} bytes), first entry {len(pairs) - 1} (offset 100, position {size + 10})"
    )


def test_entry_that_makes_a_lookup_miss_records_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = follower_log(tmp_path)
    entries = kidx.parse_offset_index((part / f"{BASE:020d}.index").read_bytes(), BASE)
    o, p = int(entries.offsets[0]), int(entries.positions[0])
    # (offset 2, position of the append holding 6..11): a lookup of 2..5 would start past them
    bad = [kidx.OffsetPosition(o - 9, p)]
    path = _damage(part, ".index", kidx.encode_offset_index(bad, BASE))
    status, lines, _ = run(capsys, "verify", str(part))
    assert status == 3
    assert lines[1].startswith(f"INDEX {path}: 1 entries; entry 0 (offset {o - 9}, position {p}): ")
    assert lines[1].endswith(
        f"holds offsets up to {o - 6}, so a lookup of offset {o - 9} would start after it and "
        "miss them"
    )


def test_time_index_going_backwards_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = follower_log(tmp_path)
    parsed = kidx.parse_time_index((part / f"{BASE:020d}.timeindex").read_bytes(), BASE)
    rows = list(zip(parsed.timestamps.tolist(), parsed.offsets.tolist(), strict=True))
    (t1, o1), (_, o2) = rows[0], rows[1]
    raw = struct.pack(">qi", t1, o1) + struct.pack(">qi", t1 - 5, o2)
    path = _damage(part, ".timeindex", raw)
    status, lines, _ = run(capsys, "verify", str(part))
    assert status == 3
    assert lines[2] == (
        f"INDEX {path}: 1 entries; entry 1 (timestamp {t1 - 5}, offset {o2}) goes back in time "
        f"after entry 0 (timestamp {t1})"
    )


def test_truncated_log_exits_1_and_rebuild_index_truncates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = follower_log(tmp_path)
    log = part / f"{BASE:020d}.log"
    full = log.read_bytes()
    # cut the last append's last batch in the middle, as a copy of a crashed broker's log
    table_cut = len(full) - 30
    log.write_bytes(full[:table_cut])
    status, lines, err = run(capsys, "verify", str(part))
    assert err == ""
    assert status == 1
    start = int(scan_entries(full).positions[-1])  # the last batch, now cut short
    assert lines[0] == (
        f"ERROR {log}: 23 batches, 46 records, last offset 45; truncated tail of "
        f"{table_cut - start} bytes at byte position {start} (an entry cut short)"
    )
    # the closing time-index entry names offset 47, which was cut off with the tail
    assert lines[2].endswith("the .log ends before that offset")
    assert lines[-3:] == [
        _summary(1, 1, 1),
        "hint: a broker's recovery truncates a cut-off tail; `kafka-segments rebuild-index "
        "--truncate --dry-run PATH` shows what it would cut, then run it without --dry-run",
        REBUILD_HINT,
    ]

    status, lines, _ = run(capsys, "rebuild-index", str(part))
    assert (status, lines) == (
        1,
        [
            f"ERROR {log}: {table_cut - start} bytes from byte position {start} are not valid "
            f"entries (no whole entry at byte position {start}); a broker's recovery truncates "
            "the .log there: see it with --dry-run --truncate, then run with --truncate"
        ],
    )
    status, lines, _ = run(capsys, "rebuild-index", str(part), "--truncate", "--dry-run")
    assert status == 0
    assert lines[0] == (
        f"would truncate {log}: {table_cut} -> {start} bytes (no whole entry at byte position "
        f"{start})"
    )
    assert log.stat().st_size == table_cut
    status, lines, _ = run(capsys, "rebuild-index", str(part), "--truncate")
    assert status == 0 and lines[0].startswith(f"truncated {log}: {table_cut} -> {start} bytes")
    assert log.read_bytes() == full[:start]
    status, lines, _ = run(capsys, "verify", str(part))
    assert status == 0 and lines[-1] == _summary(0, 0, 3)


def test_truncate_refuses_a_segment_that_is_not_the_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = follower_log(tmp_path)
    log = part / f"{BASE:020d}.log"
    full = log.read_bytes()
    log.write_bytes(full[:-30])
    (part / f"{100:020d}.log").write_bytes(v2_batch(100, 2)[0])
    status, lines, _ = run(capsys, "rebuild-index", str(part), "--truncate")
    assert status == 1
    assert lines[0].startswith(f"ERROR {log}: ")
    assert lines[0].endswith(
        "but this is not the partition's last segment: a broker would truncate here and delete "
        "every later segment; not done"
    )
    assert log.read_bytes() == full[:-30]


def test_unreadable_file_is_reported_and_verify_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    part = follower_log(tmp_path)
    from kafka_segments_ds.cli import common

    real = common.read_file
    locked = str(part / f"{BASE:020d}.index")

    def read_file(filesystem: object, path: str) -> object:
        if path == locked:
            raise PermissionError(13, "Permission denied", path)
        return real(filesystem, path)  # type: ignore[arg-type]

    monkeypatch.setattr(common, "read_file", read_file)
    status, lines, _ = run(capsys, "verify", str(part))
    assert status == 2
    assert lines[1] == f"UNREADABLE {locked}: permission denied (file {locked})"
    assert lines[2].startswith("OK ") and lines[2].split(" ")[1].endswith(".timeindex:")
    assert lines[-1] == (
        "verify: 3 files checked (1 .log, 2 index) in 1 partition: 2 ok, 0 notes, "
        "0 index problems, 0 damaged, 1 unreadable; exit status 2"
    )


def test_storage_error_type() -> None:
    from kafka_segments_ds.cli.common import storage_error

    err = storage_error(FileNotFoundError(2, "No such file or directory"), "/x")
    assert isinstance(err, StorageError) and str(err) == "no such file or directory (file /x)"


NO_DATA = (
    "kafka-segments: error: {path}: no Kafka log segments (<20-digit offset>.log files) in it, "
    "in its <topic>-<partition> subdirectories, or matching it\n"
)


@pytest.mark.parametrize("command", ["verify", "stats", "rebuild-index", "dump"])
@pytest.mark.parametrize("kind", ["empty", "parquet", "parent of a log dir"])
def test_a_path_without_kafka_data_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, kind: str
) -> None:
    root = tmp_path / "mount"
    root.mkdir()
    if kind == "parquet":
        (root / "part-0000.parquet").write_bytes(b"PAR1")
    if kind == "parent of a log dir":
        follower_log(root / "logs")
    status, lines, err = run(capsys, command, str(root))
    assert (status, lines, err) == (2, [], NO_DATA.format(path=root))


def test_recover_missing_dir_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, lines, err = run(capsys, "recover", str(tmp_path / "nope"))
    assert (status, lines) == (2, [])
    assert err == f"kafka-segments: error: no such directory (file {tmp_path / 'nope'})\n"


@pytest.mark.parametrize("command", ["dump", "verify", "stats", "rebuild-index", "recover"])
def test_help_documents_the_exit_status(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert (
        "exit status:\n"
        "  0    ok\n"
        "  1    damaged log data (.log CRC, framing, offsets, truncated tail)\n"
        "  2    usage error, no Kafka data at PATH, or a file that cannot be read\n"
        "  3    only index files (.index/.timeindex/.txnindex) are wrong: "
        "rebuild-index fixes them\n"
        "  130  interrupted\n"
    ) in out


def _whole_file_facts(log: bytes, segment: SegmentRef) -> tuple[list[int], bool]:
    """The ABORT markers' last offsets and the zero-tail verdict, read off the whole file as
    verify did before it walked windows (the reference for ``scan_log``)."""
    table = scan_entries(log)
    aborts = []
    for position, size, last in zip(
        table.positions.tolist(), table.sizes.tolist(), table.last_offsets.tolist(), strict=True
    ):
        if log[position + 16] != 2 or not log[position + 22] & 0x20:
            continue
        try:
            marker = control_marker(log[position : position + size], segment, position)
        except KafkaSegmentsError:
            continue
        if marker is not None and marker.type == CONTROL_ABORT:
            aborts.append(last)
    return aborts, not any(log[table.valid_bytes :])


def test_windowed_log_scan_matches_a_whole_file_scan(
    tmp_path: Path, make_partition: Callable[..., Any]
) -> None:
    """verify walks a .log through one reused window; whatever the window size and whatever
    the damage (cut anywhere, bytes changed, a zero or garbage tail), it must see the entries,
    ABORT markers and tail a scan of the whole file sees."""
    part, _, aborted = write_interleaved(make_partition)
    rng = random.Random(20261126)
    logs = sorted(part.glob("*.log"))
    assert sum(1 for log in logs if scan_entries(log.read_bytes()).positions.size) > 3
    checked = bad_seen = 0
    intact_aborts: set[int] = set()
    for trial in range(240):
        data = bytearray(logs[trial % len(logs)].read_bytes())
        damage = 0 if trial < len(logs) else trial % 6  # each log once as it is, first
        if damage == 1 and data:
            del data[rng.randrange(len(data)) :]
        elif damage == 2 and data:
            for _ in range(rng.randrange(1, 4)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif damage == 3:
            data += bytes(rng.randrange(1, 300))
        elif damage == 4:
            data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))
        elif damage == 5 and len(data) >= 12:  # a size field: past the end, too small, zero
            at = rng.choice(scan_entries(bytes(data)).positions.tolist() or [0])
            size = rng.choice([0x7FFFFFF0, len(data) - at - 11, 13, 0, -1, 48])
            data[at + 8 : at + 12] = struct.pack(">i", size)
        path = tmp_path / "walk" / f"{trial:020d}.log"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        segment = SegmentRef(str(path), trial, len(data), None, None, None)
        window = rng.choice([17, 61, 200, 997, 4096, 1 << 20])
        scan = scan_log(pafs.LocalFileSystem(), segment, str(path), window)
        whole = scan_entries(bytes(data))
        for name in ("positions", "sizes", "magics", "last_offsets", "max_timestamps"):
            assert getattr(scan.table, name).tolist() == getattr(whole, name).tolist(), name
        assert (scan.table.valid_bytes, scan.table.outcome) == (whole.valid_bytes, whole.outcome)
        assert (scan.aborts, scan.zero_tail) == _whole_file_facts(bytes(data), segment)
        # rebuild-index's and stats' walk: each whole entry's CRC checked in its window
        assert scan.bad_checksums is None
        crc_scan = scan_log(pafs.LocalFileSystem(), segment, str(path), window, checksums=True)
        assert crc_scan.table.positions.tolist() == whole.positions.tolist()
        entries = zip(whole.positions.tolist(), whole.sizes.tolist(), strict=True)
        failing = [p for p, n in entries if not has_valid_checksum(as_array(data)[p : p + n])]
        assert crc_scan.bad_checksums == failing
        bad_seen += bool(failing)
        checked += 1
        if damage == 0:
            intact_aborts.update(scan.aborts)
    assert checked == 240
    assert bad_seen > 20  # damage that leaves entries framed but failing their CRC
    assert intact_aborts == {marker for _, _, marker in aborted}  # every ABORT marker, found


def test_a_log_that_shrank_since_it_was_listed_is_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = follower_log(tmp_path) / f"{BASE:020d}.log"
    data = path.read_bytes()
    segment = SegmentRef(str(path), BASE, len(data) + 100, None, None, None)
    with pytest.raises(StorageError, match="shrunk below its listed") as caught:
        scan_log(pafs.LocalFileSystem(), segment, str(path), 4096)
    assert caught.value.position == len(data)
