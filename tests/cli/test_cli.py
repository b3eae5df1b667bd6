"""The ``kafka-segments`` command line, run in-process through ``main(argv)``."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_segments_ds import index as kidx
from kafka_segments_ds import read_table
from kafka_segments_ds.cli import main, write_lines
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_legacy_message
from kafka_segments_ds.samples import PartitionWriter, write_sample_log_dir

SEGMENT0 = "00000000000000000000"
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small broker-like log dir; read-only (copy it before changing anything)."""
    return write_sample_log_dir(
        tmp_path_factory.mktemp("cli"), records_per_partition=300, segment_bytes=16 * 1024
    )


@pytest.fixture
def sample_copy(sample: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "logs"
    shutil.copytree(sample, copy)
    return copy


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main([*argv])
    out, err = capsys.readouterr()
    return status, out, err


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def table_rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


# -- dump ------------------------------------------------------------------------------------


def test_dump_rows_equal_read_table(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = str(sample / "orders-0")
    status, out, _ = run(capsys, "dump", part, "--include-headers", "--key", "hex")
    assert status == 0
    rows = jsonl(out)
    expected = table_rows(read_table(part, includeHeaders=True))
    assert len(rows) == len(expected) == 298
    for row, want in zip(rows, expected, strict=True):
        assert row["offset"] == want["offset"]
        assert row["key"] == want["key"].hex()
        assert row["value"] == want["value"].decode()
        assert row["timestamp"] == int(want["timestamp"].timestamp() * 1000)
        assert row["headers"] == [
            {"key": h["key"], "value": h["value"].decode()} for h in want["headers"]
        ]
        assert (row["topic"], row["partition"]) == ("orders", 0)


def test_dump_key_value_renderings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    writer = PartitionWriter(tmp_path / "t-0")
    specs = [
        RecordSpec(key=b"\xff\x00k", value=b'{"a": [1, 2]}', timestamp=5),
        RecordSpec(key=None, value=b"not json \xff", timestamp=6),
        RecordSpec(key=b"k", value=None, timestamp=7),
    ]
    writer.append(encode_batch(specs, base_offset=0), 2)
    writer.roll()
    part = str(tmp_path / "t-0")

    _, out, _ = run(capsys, "dump", part, "--key", "base64", "--value", "json")
    rows = jsonl(out)
    assert [r["key"] for r in rows] == [base64.b64encode(b"\xff\x00k").decode(), None, "aw=="]
    assert [r["value"] for r in rows] == [{"a": [1, 2]}, "not json \ufffd", None]
    assert [r["timestamp"] for r in rows] == [5, 6, 7]

    _, out, _ = run(capsys, "dump", part, "--key", "utf8", "--value", "hex")
    rows = jsonl(out)
    assert [r["key"] for r in rows] == ["\ufffd\x00k", None, "k"]
    assert rows[0]["value"] == b'{"a": [1, 2]}'.hex()


def test_dump_shallow(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = str(sample / "orders-1")
    status, out, _ = run(capsys, "dump", part, "--shallow", "--include-metadata", "--value", "hex")
    assert status == 0
    rows = jsonl(out)
    expected = table_rows(read_table(part, iteration="shallow", includeMetadata=True))
    assert [r["offset"] for r in rows] == [w["offset"] for w in expected]
    assert [r["compression"] for r in rows] == [w["compression"] for w in expected]
    assert [r["value"] for r in rows] == [w["value"].hex() for w in expected]


def test_dump_offset_range_and_limit(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = str(sample / "metrics-v1-0")
    _, out, _ = run(capsys, "dump", part, "--from-offset", "190", "--to-offset", "210")
    assert [r["offset"] for r in jsonl(out)] == list(range(190, 210))
    _, out, _ = run(capsys, "dump", part, "--from-offset", "100", "--limit", "3")
    assert [r["offset"] for r in jsonl(out)] == [100, 101, 102]


def test_dump_from_timestamp(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = str(sample / "metrics-v1-0")
    expected = read_table(part, startingTimestamp=1_700_000_001_000).column("offset").to_pylist()
    _, out, _ = run(capsys, "dump", part, "--from-timestamp", "1700000001000")
    assert [r["offset"] for r in jsonl(out)] == expected
    assert expected[0] == 100


def test_dump_table_format(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, "dump", str(sample / "orders-0"), "--format", "table", "--limit", "2"
    )
    lines = out.splitlines()
    assert status == 0
    assert lines[0].split() == ["TOPIC-PARTITION", "OFFSET", "TIMESTAMP", "KEY", "VALUE"]
    assert len(lines) == 3
    assert lines[1].split()[:2] == ["orders-0", "0"]
    assert "2023-11-14T22:13:20.001+00:00" in lines[1]
    value = lines[1][lines[0].index("VALUE") :]
    assert len(value) <= 60


def test_dump_index_files(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = sample / "orders-0"
    log_size = (part / f"{SEGMENT0}.log").stat().st_size

    _, out, _ = run(capsys, "dump", str(part / f"{SEGMENT0}.index"))
    rows = jsonl(out)
    index = kidx.parse_offset_index((part / f"{SEGMENT0}.index").read_bytes(), 0, log_size)
    assert len(index) > 0
    assert rows[:-1] == [
        {"offset": o, "position": p}
        for o, p in zip(index.offsets.tolist(), index.positions.tolist(), strict=True)
    ]
    assert rows[-1]["summary"]["entries"] == len(index)
    assert rows[-1]["summary"]["ignored"] == 0
    assert rows[-1]["summary"]["problem"] is None

    _, out, _ = run(capsys, "dump", str(part / f"{SEGMENT0}.timeindex"))
    rows = jsonl(out)
    tindex = kidx.parse_time_index((part / f"{SEGMENT0}.timeindex").read_bytes(), 0, 204)
    assert rows[:-1] == [
        {"timestamp": t, "offset": o}
        for t, o in zip(tindex.timestamps.tolist(), tindex.offsets.tolist(), strict=True)
    ]

    _, out, _ = run(capsys, "dump", str(part / f"{SEGMENT0}.txnindex"))
    rows = jsonl(out)
    txns = kidx.parse_txn_index((part / f"{SEGMENT0}.txnindex").read_bytes())
    assert rows[:-1] == [
        {
            "producer_id": t.producer_id,
            "first_offset": t.first_offset,
            "last_offset": t.last_offset,
            "last_stable_offset": t.last_stable_offset,
        }
        for t in txns
    ]
    assert rows[:-1] == [
        {"producer_id": 4242, "first_offset": 118, "last_offset": 140, "last_stable_offset": 141}
    ]


def test_dump_index_zero_tail_summary(
    sample_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sample_copy / "orders-0" / f"{SEGMENT0}.index"
    entries = len(path.read_bytes()) // 8
    path.write_bytes(path.read_bytes() + bytes(8 * 5))
    _, out, _ = run(capsys, "dump", str(path))
    summary = jsonl(out)[-1]["summary"]
    assert summary["entries"] == entries
    assert summary["ignored"] == 5
    assert "zero-filled tail" in summary["problem"]


def write_gappy(directory: Path) -> None:
    writer = PartitionWriter(directory)
    writer.append(encode_batch([RecordSpec(value=b"a"), RecordSpec(value=b"b")], base_offset=0), 1)
    writer.append(encode_batch([RecordSpec(value=b"c")], base_offset=10), 10)
    writer.append(encode_batch([RecordSpec(value=b"d")], base_offset=11), 11)
    writer.roll()


def test_dump_gaps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_gappy(tmp_path / "gappy-3")
    _, out, _ = run(capsys, "dump", str(tmp_path / "gappy-3"), "--gaps")
    rows = jsonl(out)
    assert [r.get("offset") for r in rows] == [0, 1, None, 10, 11]
    assert rows[2] == {"gap": {"topic": "gappy", "partition": 3, "after": 1, "next": 10}}
    assert "batchBaseOffset" not in rows[0]

    _, out, _ = run(capsys, "dump", str(tmp_path / "gappy-3"), "--gaps", "--shallow")
    gaps = [r["gap"] for r in jsonl(out) if "gap" in r]
    assert gaps == [{"topic": "gappy", "partition": 3, "after": 1, "next": 10}]
    assert "batchBaseOffset" not in jsonl(out)[0]

    _, out, _ = run(
        capsys, "dump", str(tmp_path / "gappy-3"), "--gaps", "--shallow", "--include-metadata"
    )
    rows = jsonl(out)
    assert [r.get("batchBaseOffset") for r in rows] == [0, None, 10, 11]
    assert rows[1] == {"gap": {"topic": "gappy", "partition": 3, "after": 1, "next": 10}}


def test_dump_gaps_across_reads_and_partitions(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # small read chunks: the previous offset must carry over from one Arrow batch to the next
    _, out, _ = run(capsys, "dump", str(sample), "--gaps", "--option", "readChunkBytes=4096")
    rows = jsonl(out)
    expected = []
    last: dict[tuple[str, int], int] = {}
    for row in table_rows(read_table(sample)):
        tp = (row["topic"], row["partition"])
        if tp in last and row["offset"] > last[tp] + 1:
            gap = {"topic": tp[0], "partition": tp[1], "after": last[tp], "next": row["offset"]}
            expected.append(gap)
        last[tp] = row["offset"]
    assert len(expected) >= 2  # the transaction markers of orders-0 and orders-1
    assert [r["gap"] for r in rows if "gap" in r] == expected
    assert len(rows) == len(expected) + sum(1 for r in rows if "offset" in r)


def test_verify_counts_gaps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_gappy(tmp_path / "gappy-3")
    status, out, _ = run(capsys, "verify", str(tmp_path / "gappy-3"))
    assert status == 0
    assert out.splitlines()[0] == (
        f"OK {tmp_path / 'gappy-3' / SEGMENT0}.log: 3 batches, 4 records, last offset 11, "
        "1 offset gap (non-consecutive offsets, first after 1)"
    )


def test_write_lines_broken_pipe() -> None:
    class Closed:
        def write(self, text: str) -> int:
            raise BrokenPipeError

        def flush(self) -> None:
            raise BrokenPipeError

    from kafka_segments_ds.cli import PipeClosed

    with pytest.raises(PipeClosed):
        write_lines(["x"], Closed())  # type: ignore[arg-type]


def test_dump_broken_pipe_is_quiet(
    sample: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[str] = []

    class HeadOne:
        def write(self, text: str) -> int:
            if written:
                raise BrokenPipeError
            written.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stdout", HeadOne())
    assert main(["dump", str(sample)]) == 0
    assert len(written) == 1
    assert capsys.readouterr().err == ""


# -- verify ----------------------------------------------------------------------------------


def test_verify_ok(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "verify", str(sample), "--quiet")
    assert status == 0
    lines = out.splitlines()
    assert lines and all(line.startswith("OK ") for line in lines[:-1])
    # 4 partitions, 7 segments: each has .log, .index, .timeindex; two .txnindex files
    assert len(lines) == 7 * 3 + 2 + 1
    assert lines[-1] == (
        "verify: 23 files checked (7 .log, 16 index) in 4 partitions: 23 ok, 0 notes, "
        "0 index problems, 0 damaged, 0 unreadable; exit status 0"
    )


def test_verify_flipped_byte(sample_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = sample_copy / "metrics-v1-0" / f"{SEGMENT0}.log"
    data = bytearray(log.read_bytes())
    second = int.from_bytes(data[8:12], "big") + 12  # position of the second batch
    data[second + 200] ^= 0x01
    log.write_bytes(bytes(data))
    status, out, _ = run(capsys, "verify", str(sample_copy / "metrics-v1-0"))
    assert status == 1
    errors = [line for line in out.splitlines() if line.startswith("ERROR ")]
    assert len(errors) == 1
    assert str(log) in errors[0]
    assert f"byte position {second}" in errors[0]
    assert "offset 50" in errors[0]
    # the next segment is still checked
    assert any(
        line.startswith(f"OK {log.parent}/00000000000000000200.log") for line in out.splitlines()
    )


def test_verify_index_zero_tail(sample_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # preallocated slots are normal on the active (last) segment, a defect on a rolled one
    part = sample_copy / "orders-0"
    segments = sorted(part.glob("*.index"))
    assert len(segments) == 2
    for path, label, status_wanted in ((segments[1], "NOTE", 0), (segments[0], "INDEX", 3)):
        entries = len(path.read_bytes()) // 8
        path.write_bytes(path.read_bytes() + bytes(8 * 4))
        status, out, _ = run(capsys, "verify", str(part))
        assert status == status_wanted
        assert (
            f"{label} {path}: {entries} entries; zero-filled tail of 4 slots from entry "
            f"{entries} (preallocated index of an active or uncleanly stopped segment)"
        ) in out.splitlines()


def test_verify_index_pointing_inside_a_batch(
    sample_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sample_copy / "orders-0" / f"{SEGMENT0}.index"
    index = kidx.parse_offset_index(path.read_bytes(), 0)
    moved = [(int(o), int(p) + 1) for o, p in zip(index.offsets, index.positions, strict=True)]
    path.write_bytes(kidx.encode_offset_index([kidx.OffsetPosition(o, p) for o, p in moved], 0))
    status, out, _ = run(capsys, "verify", str(sample_copy / "orders-0"))
    assert status == 3
    assert (
        f"INDEX {path}: {len(moved)} entries; entry 0 (offset {moved[0][0]}, position "
        f"{moved[0][1]}): no batch of the .log starts at that position"
    ) in out.splitlines()


# -- stats -----------------------------------------------------------------------------------


def test_stats_jsonl_exact(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "stats", str(sample), "--format", "jsonl")
    assert status == 0
    stats = {(s["topic"], s["partition"]): s for s in jsonl(out)}
    assert set(stats) == {("legacy.events", 0), ("metrics-v1", 0), ("orders", 0), ("orders", 1)}
    for (topic, partition), s in stats.items():
        part = str(sample / f"{topic}-{partition}")
        deep = read_table(part)
        shallow = read_table(part, iteration="shallow", includeMetadata=True)
        committed = read_table(part, isolationLevel="read_committed")
        assert s["records"] == deep.num_rows
        assert s["batches"] == shallow.num_rows
        assert s["first_offset"] == deep.column("offset")[0].as_py()
        assert s["last_offset"] == deep.column("offset")[-1].as_py()
        codecs: dict[str, int] = {}
        for codec in shallow.column("compression").to_pylist():
            codecs[codec] = codecs.get(codec, 0) + 1
        assert s["codecs"] == codecs
        assert s["aborted_records"] == deep.num_rows - committed.num_rows
        assert s["log_bytes"] == sum(
            f.stat().st_size for f in (sample / f"{topic}-{partition}").glob("*.log")
        )
    assert stats[("orders", 0)]["aborted_records"] > 0
    assert stats[("orders", 0)]["producers"] == 1
    assert stats[("legacy.events", 0)]["magics"].keys() == {"0", "1", "2"}


def test_stats_table(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "stats", str(sample / "orders-1"))
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["TOPIC-PARTITION", "SEGMENTS", "BATCHES", "RECORDS"]
    assert lines[1].split()[0] == "orders-1"
    assert "approximate" in lines[-1]


# -- rebuild-index ---------------------------------------------------------------------------


def test_rebuild_index_restores_deleted_files(
    sample: Path, sample_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    originals = {
        p.relative_to(sample): p.read_bytes()
        for p in sample.rglob("*")
        if p.suffix in (".index", ".timeindex") and "-delete" not in str(p)
    }
    assert originals
    for rel in originals:
        (sample_copy / rel).unlink()
    status, out, _ = run(capsys, "rebuild-index", str(sample_copy), "--quiet")
    assert status == 0
    assert len(out.splitlines()) == len(originals)
    assert all(line.startswith("wrote ") and "missing ->" in line for line in out.splitlines())
    for rel, data in originals.items():
        assert (sample_copy / rel).read_bytes() == data
    assert not [p for p in sample_copy.rglob("*.tmp")]

    status, out, _ = run(capsys, "rebuild-index", str(sample_copy))
    assert all(line.startswith("unchanged ") for line in out.splitlines())


def test_rebuild_index_dry_run_changes_nothing(
    sample_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = sample_copy / "orders-0"
    (part / f"{SEGMENT0}.index").unlink()
    tindex = part / f"{SEGMENT0}.timeindex"
    tindex.write_bytes(b"")
    before = {p: p.read_bytes() for p in part.iterdir()}
    status, out, _ = run(capsys, "rebuild-index", str(part), "--dry-run")
    assert status == 0
    assert {p: p.read_bytes() for p in part.iterdir()} == before
    assert f"would write {part / SEGMENT0}.index: missing -> 3 entries" in out
    assert f"would write {tindex}: 0 entries -> 3 entries" in out


# -- errors and entry points -----------------------------------------------------------------


def test_missing_path_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("dump", "verify", "stats", "rebuild-index"):
        status, out, err = run(capsys, command, str(tmp_path / "nope"))
        assert status == 2
        assert out == ""
        assert err == (
            f"kafka-segments: error: no such file or directory: {tmp_path / 'nope'} "
            f"(file {tmp_path / 'nope'})\n"
        )


def test_corrupt_dump_exit_1(sample_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = sample_copy / "metrics-v1-0" / f"{SEGMENT0}.log"
    data = bytearray(log.read_bytes())
    data[100] ^= 0x01
    log.write_bytes(bytes(data))
    status, _, err = run(capsys, "dump", str(log))
    assert status == 1
    assert err.startswith("kafka-segments: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_keyboard_interrupt_exit_130(
    sample: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kafka_segments_ds.cli.dump as cli

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "iter_batches", interrupt)
    status, _, err = run(capsys, "dump", str(sample))
    assert status == 130
    assert err == "interrupted\n"


def test_option_passthrough(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "dump", str(sample), "--option", "subscribe=metrics-v1")
    assert status == 0
    assert {r["topic"] for r in jsonl(out)} == {"metrics-v1"}
    status, _, err = run(capsys, "dump", str(sample), "--option", "noSuchOption=1")
    assert status == 2 and err.startswith("kafka-segments: error: ")


def test_python_dash_m_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kafka_segments_ds", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    for command in ("dump", "verify", "stats", "rebuild-index"):
        assert command in result.stdout


def test_dump_limit_reads_no_more_segments_than_it_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small segments are joined into batches of batchRows rows; ``--limit 3`` must not read a
    whole joined batch (32,768 rows by default) of segments before printing three."""
    from kafka_segments_ds.reader import task as reader_task

    part = tmp_path / "tiny-0"
    part.mkdir()
    for base in range(0, 100, 2):
        specs = [RecordSpec(value=b"v%d" % (base + i)) for i in range(2)]
        (part / f"{base:020d}.log").write_bytes(encode_batch(specs, base_offset=base))
    opened: list[str] = []
    original = reader_task._open

    def counting(task, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(task.segment.path)
        return original(task, *args, **kwargs)

    monkeypatch.setattr(reader_task, "_open", counting)
    _, out, _ = run(capsys, "dump", str(part), "--limit", "3")
    assert [r["offset"] for r in jsonl(out)] == [0, 1, 2]
    # the two segments holding offsets 0..3, and at most the next one, opened ahead
    assert [Path(p).name for p in opened][:2] == [f"{0:020d}.log", f"{2:020d}.log"]
    assert len(opened) <= 3


def test_dump_shallow_batch_fields(
    make_partition: Callable[..., Any], log_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each batch's size, stored CRC, record count and last sequence, as kafka-dump-log prints
    them: a sequence wraps past 2**31 - 1 (Kafka's incrementSequence); -1 without one; a legacy
    message has no count or sequence (null)."""
    part = make_partition("s-0")
    specs = [RecordSpec(key=b"k", value=b"v%d" % i, timestamp=T0, offset_delta=i) for i in range(3)]
    first = encode_batch(specs, base_offset=0, producer_id=5, producer_epoch=0,
                         base_sequence=2**31 - 2)  # fmt: skip
    # a gap inside (offsets 3, 4 compacted away): the count is 2, the last offset 3 + 3
    gappy = [replace(specs[0], offset_delta=0), replace(specs[1], offset_delta=3)]
    second = encode_batch(gappy, base_offset=3, last_offset_delta=3)
    legacy = encode_legacy_message(offset=7, magic=1, key=b"k", value=b"legacy", timestamp=T0)
    for data, last in ((first, 2), (second, 6), (legacy, 7)):
        part.writer.append(data, last)
    part.close()
    _, out, _ = run(capsys, "dump", str(log_dir / "s-0"), "--shallow")
    fields = [{k: r[k] for k in ("offset", "size", "crc", "count", "lastSequence")}
              for r in jsonl(out)]  # fmt: skip
    crc = [int.from_bytes(b[17:21], "big") for b in (first, second)]
    assert fields == [
        {"offset": 2, "size": len(first), "crc": crc[0], "count": 3, "lastSequence": 0},
        {"offset": 6, "size": len(second), "crc": crc[1], "count": 2, "lastSequence": -1},
        {"offset": 7, "size": len(legacy), "crc": int.from_bytes(legacy[12:16], "big"),
         "count": None, "lastSequence": None},
    ]  # fmt: skip
    assert crc[0] != crc[1]
    _, out, _ = run(capsys, "dump", str(log_dir / "s-0"), "--shallow", "--format", "table")
    lines = out.splitlines()
    assert lines[0].endswith(" SIZE CRC COUNT LASTSEQUENCE")
    tails = [line.split()[-4:] for line in lines[1:]]
    assert tails == [
        [f"size={len(first)}", f"crc={crc[0]}", "count=3", "lastSequence=0"],
        [f"size={len(second)}", f"crc={crc[1]}", "count=2", "lastSequence=-1"],
        [f"size={len(legacy)}", f"crc={int.from_bytes(legacy[12:16], 'big')}", "count=<null>",
         "lastSequence=<null>"],
    ]  # fmt: skip


def test_a_run_imports_only_its_commands_module(sample: Path) -> None:
    code = (
        "import sys, io, contextlib\nfrom kafka_segments_ds.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    status = main(['verify', {str(sample)!r}, '--quiet'])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('kafka_segments_ds.cli.'))\n"
        "print(status, *loaded)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    status, *loaded = done.stdout.split()
    assert status == "0"
    assert "kafka_segments_ds.cli.verify" in loaded
    assert not {f"kafka_segments_ds.cli.{m}" for m in ("dump", "recover", "rewrite")} & set(loaded)


@pytest.mark.parametrize("argv", [["-h"], ["-h", "verify"], ["--help", "dump", "x"]])
def test_help_before_a_command_lists_every_command(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    for command in ("dump", "verify", "stats", "rebuild-index", "restore", "erase", "compact"):
        assert f"    {command}" in out
