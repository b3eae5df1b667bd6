"""``kafka-segments dump``/``stats``: options honoured, ranges pruned, output that says what it
is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.cli import main
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.samples import PartitionWriter, write_sample_log_dir

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small broker-like log dir; read-only (copy it before changing anything)."""
    return write_sample_log_dir(
        tmp_path_factory.mktemp("dump"), records_per_partition=300, segment_bytes=16 * 1024
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main([*argv])
    out, err = capsys.readouterr()
    return status, out, err


def offsets(text: str) -> list[int]:
    return [json.loads(line)["offset"] for line in text.splitlines()]


def write_partition(directory: Path, specs_by_batch: list[list[RecordSpec]]) -> Path:
    writer = PartitionWriter(directory)
    offset = 0
    for specs in specs_by_batch:
        writer.append(encode_batch(specs, base_offset=offset), offset + len(specs) - 1)
        offset += len(specs)
    writer.roll()
    return directory


# -- --option and the flags ------------------------------------------------------------------


def test_option_isolation_level_is_honoured(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = str(sample / "orders-0")
    committed = read_table(part, isolationLevel="read_committed").column("offset").to_pylist()
    everything = read_table(part).column("offset").to_pylist()
    assert len(committed) < len(everything)
    status, out, _ = run(capsys, "dump", part, "--option", "isolationLevel=read_committed")
    assert (status, offsets(out)) == (0, committed)
    status, out, _ = run(capsys, "dump", part, "--isolation", "read_committed")
    assert (status, offsets(out)) == (0, committed)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--option", "isolationLevel=read_committed", "--isolation", "read_uncommitted"],
            "--option isolationLevel=read_committed contradicts --isolation; give one of them",
        ),
        (
            ["--option", "mode=DROPMALFORMED", "--mode", "FAILFAST"],
            "--option mode=DROPMALFORMED contradicts --mode; give one of them",
        ),
        (
            ["--option", "iteration=deep", "--shallow"],
            "--option iteration=deep contradicts --deep/--shallow; give one of them",
        ),
        (
            ["--option", "startingOffsets=earliest", "--from-offset", "3"],
            "give --from-offset or --option startingOffsets, not both",
        ),
        (
            ["--option", "iteration=sideways"],
            "option iteration must be one of deep, shallow, not 'sideways'",
        ),
    ],
)
def test_option_conflicts_are_refused(
    sample: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, out, err = run(capsys, "dump", str(sample / "orders-0"), *argv)
    assert (status, out, err) == (2, "", f"kafka-segments: error: {message}\n")


def test_option_iteration_and_include_headers(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = str(sample / "orders-1")
    _, via_option, _ = run(
        capsys, "dump", part, "--option", "iteration=shallow", "--option", "includeHeaders=true"
    )
    _, via_flags, _ = run(capsys, "dump", part, "--shallow", "--include-headers")
    assert via_option == via_flags
    first = json.loads(via_option.splitlines()[0])
    assert "headers" in first and "compression" not in first
    shallow = read_table(part, iteration="shallow").num_rows
    assert len(via_option.splitlines()) == shallow


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--limit", "-3", "argument --limit: must be >= 0, got -3"),
        ("--from-offset", "-5", "argument --from-offset: must be >= 0, got -5"),
        ("--to-offset", "-1", "argument --to-offset: must be >= 0, got -1"),
        ("--max-bytes", "0", "argument --max-bytes: must be > 0, got 0"),
    ],
)
def test_negative_numbers_are_refused(
    sample: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["dump", str(sample / "orders-0"), flag, value])
    assert info.value.code == 2
    assert capsys.readouterr().err.endswith(f"kafka-segments dump: error: {message}\n")


# -- ranges ----------------------------------------------------------------------------------


def test_offset_range_is_pruned_not_filtered(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # damage the last segment: a range that ends before it must never decode it
    part = tmp_path / "metrics-v1-0"
    shutil.copytree(sample / "metrics-v1-0", part)
    last = sorted(part.glob("*.log"))[-1]
    data = bytearray(last.read_bytes())
    data[100] ^= 0xFF
    last.write_bytes(bytes(data))
    status, out, _ = run(capsys, "dump", str(part), "--from-offset", "5", "--to-offset", "12")
    assert (status, offsets(out)) == (0, list(range(5, 12)))
    status, _, err = run(capsys, "dump", str(part))
    assert status == 1 and "CRC" in err


def test_from_offset_below_the_log_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writer = PartitionWriter(tmp_path / "t-0", next_offset=100)
    specs = [RecordSpec(key=b"k", value=b"v", timestamp=T0)] * 3
    writer.append(encode_batch(specs, base_offset=100), 102)
    writer.roll()
    status, out, err = run(capsys, "dump", str(tmp_path / "t-0"), "--from-offset", "5")
    assert (status, offsets(out), err) == (0, [100, 101, 102], "")


def test_time_range_across_an_idle_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = [[RecordSpec(key=b"k", value=b"v", timestamp=T0 + 10 * i) for i in range(5)]]
    idle = [[RecordSpec(key=b"k", value=b"v", timestamp=T0 - 1000 + i) for i in range(3)]]
    write_partition(tmp_path / "busy-0", busy)
    write_partition(tmp_path / "idle-0", idle)
    status, out, err = run(capsys, "dump", str(tmp_path), "--from-timestamp", str(T0 + 15))
    assert (status, err) == (0, "")
    assert [(r["topic"], r["offset"]) for r in map(json.loads, out.splitlines())] == [
        ("busy", 2),
        ("busy", 3),
        ("busy", 4),
    ]
    status, out, _ = run(
        capsys,
        "dump",
        str(tmp_path),
        "--from-timestamp",
        str(T0 + 10),
        "--to-timestamp",
        str(T0 + 30),
    )
    assert [(r["topic"], r["offset"]) for r in map(json.loads, out.splitlines())] == [
        ("busy", 1),
        ("busy", 2),
    ]
    # the end alone: records before the first one at or after the time, in every partition
    status, out, _ = run(capsys, "dump", str(tmp_path), "--to-timestamp", str(T0 + 10))
    assert [(r["topic"], r["offset"]) for r in map(json.loads, out.splitlines())] == [
        ("busy", 0),
        ("idle", 0),
        ("idle", 1),
        ("idle", 2),
    ]


# -- kafka-dump-log.sh spellings ------------------------------------------------------------


def test_dump_log_spellings(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = str(sample / "orders-0"), str(sample / "orders-1")
    _, plain, _ = run(capsys, "dump", a, b, "--deep")
    status, spelled, _ = run(
        capsys, "dump", "--files", f"{a},{b}", "--deep-iteration", "--print-data-log"
    )
    assert status == 0 and spelled == plain
    with pytest.raises(SystemExit) as info:
        main(["dump", a, "--deep", "--shallow"])
    assert info.value.code == 2
    assert "argument --shallow: not allowed with argument --deep/--deep-iteration" in (
        capsys.readouterr().err
    )
    status, out, err = run(capsys, "dump")
    assert (status, out) == (2, "")
    assert err == "kafka-segments: error: dump needs a PATH (or --files a,b)\n"


def test_max_bytes_reads_entries_within_the_first_bytes_of_each_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batches = [[RecordSpec(key=b"k", value=b"v" * 20, timestamp=T0 + i)] for i in range(4)]
    part = write_partition(tmp_path / "t-0", batches)
    size = len(encode_batch(batches[0], base_offset=0))
    for max_bytes, expected in ((size - 1, []), (size, [0]), (2 * size + 5, [0, 1])):
        status, out, _ = run(capsys, "dump", str(part), "--max-bytes", str(max_bytes))
        assert (status, offsets(out)) == (0, expected)


# -- output ----------------------------------------------------------------------------------


def test_tombstone_and_the_bytes_null_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [
        RecordSpec(key=b"a", value=None, timestamp=T0),
        RecordSpec(key=b"b", value=b"null", timestamp=T0),
        RecordSpec(key=b"c", value=b"[1]", timestamp=T0),
    ]
    part = write_partition(tmp_path / "t-0", [specs])
    for rendering in ("utf8", "json"):
        _, out, _ = run(capsys, "dump", str(part), "--value", rendering)
        values = [json.loads(line)["value"] for line in out.splitlines()]
        assert values == [None, "null", [1] if rendering == "json" else "[1]"]
    _, out, _ = run(capsys, "dump", str(part), "--format", "table")
    assert [line.split()[-1] for line in out.splitlines()[1:]] == ["<null>", "null", "[1]"]


def test_invalid_utf8_renderings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs = [RecordSpec(key=b"k", value=b"ok \xff\xfe", timestamp=T0)] * 2
    part = write_partition(tmp_path / "t-0", [specs])
    status, out, err = run(capsys, "dump", str(part))
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["ok \ufffd\ufffd"] * 2
    assert err == (
        "note: 2 values are not valid UTF-8: shown with U+FFFD for the bad bytes "
        "(--value escaped, hex or base64 show every byte)\n"
    )
    status, out, err = run(capsys, "dump", str(part), "--value", "escaped")
    assert (status, err) == (0, "")
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["ok \\xff\\xfe"] * 2


def test_escaped_tells_a_backslash_from_a_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the text backslash-x-f-f and the byte 0xFF must render differently, in the bulk path
    # (valid UTF-8) and the per-row one (a batch with a byte that is not UTF-8), keys included
    texts = [b"a\\xff", b"\\", b"plain"]
    for extra in (b"ok", b"\xff"):
        part = write_partition(
            tmp_path / f"t-{len(extra)}",
            [[RecordSpec(key=v, value=v, timestamp=T0) for v in [*texts, extra]]],
        )
        status, out, err = run(capsys, "dump", str(part), "--value", "escaped", "--key", "escaped")
        assert (status, err) == (0, "")
        rows = [json.loads(line) for line in out.splitlines()]
        shown = ["a\\\\xff", "\\\\", "plain", "ok" if extra == b"ok" else "\\xff"]
        assert [r["value"] for r in rows] == shown
        assert [r["key"] for r in rows] == shown
        _, out, _ = run(capsys, "dump", str(part), "--value", "escaped", "--format", "table")
        assert [line.split()[-1] for line in out.splitlines()[1:]] == shown


def test_table_escapes_c1_controls_and_line_separators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = "a\u0085b\u009b31mc\u2028d\u2029e\u007f".encode()
    specs = [RecordSpec(key=b"k", value=value, timestamp=T0, headers=[("h", "x\u2028y".encode())])]
    part = write_partition(tmp_path / "t-0", [specs])
    status, out, _ = run(capsys, "dump", str(part), "--format", "table", "--include-headers")
    assert status == 0 and len(out.splitlines()) == 2
    row = out.splitlines()[1].split()
    assert row[4:] == [
        "a\\u0085b\\u009b31mc\\u2028d\\u2029e\\u007f",
        'headers=[{"key":"h","value":"x\\u2028y"}]',
    ]


def test_table_shows_what_was_asked_for_and_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = [
        RecordSpec(
            key=b"line\nbreak", value=b"tab\there\x1b[31m", timestamp=T0, headers=[("h", b"1")]
        )
    ]
    part = write_partition(tmp_path / "t-0", [specs])
    status, out, _ = run(
        capsys, "dump", str(part), "--format", "table", "--include-headers", "--include-metadata"
    )
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2  # one header line, one row: nothing split it
    assert lines[0].split()[5:] == [
        "HEADERS",
        "MAGIC",
        "COMPRESSION",
        "BATCHBASEOFFSET",
        "BATCHLASTOFFSET",
        "PRODUCERID",
        "PRODUCEREPOCH",
        "BASESEQUENCE",
        "ISTRANSACTIONAL",
        "ISCONTROL",
        "LEADEREPOCH",
        "SEGMENT",
        "POSITION",
    ]
    assert lines[1].split() == [
        "t-0",
        "0",
        "2023-11-14T22:13:20.000+00:00",
        "line\\nbreak",
        "tab\\there\\u001b[31m",
        'headers=[{"key":"h","value":"1"}]',
        "magic=2",
        "compression=none",
        "batchBaseOffset=0",
        "batchLastOffset=0",
        "producerId=-1",
        "producerEpoch=-1",
        "baseSequence=-1",
        "isTransactional=false",
        "isControl=false",
        "leaderEpoch=-1",
        f"segment={part / '00000000000000000000.log'}",
        "position=0",
    ]


# -- stats -----------------------------------------------------------------------------------


def test_stats_after_damage_prints_its_table(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = tmp_path / "metrics-v1-0"
    shutil.copytree(sample / "metrics-v1-0", part)
    first = sorted(part.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    data[100] ^= 0xFF  # inside the first batch: a CRC error
    first.write_bytes(bytes(data))
    status, out, err = run(capsys, "stats", str(part))
    assert status == 1
    lines = out.splitlines()
    header = lines[0].split()
    row = dict(zip(header, lines[1].split(), strict=True))
    assert row["DAMAGED"] == "1"
    assert int(row["RECORDS"]) == 300 - 50  # the damaged batch of 50 records was skipped
    assert lines[-1] == (
        "DAMAGED: 1 malformed or truncated entries skipped (see stderr); "
        "`kafka-segments verify` names each file"
    )
    warnings = err.splitlines()
    assert len(warnings) == 1  # once, though stats reads the partition several times
    assert warnings[0].startswith("warning: dropping malformed entry: CRC-32C mismatch")
    assert f"(file {first}, byte position 0, offset 0)" in warnings[0]


def test_stats_counts_a_damaged_size_field_once(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = tmp_path / "metrics-v1-0"
    shutil.copytree(sample / "metrics-v1-0", part)
    first = sorted(part.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    second = 12 + int.from_bytes(data[8:12], "big")
    data[second + 8 : second + 12] = (999).to_bytes(4, "big")  # the second batch's size field
    first.write_bytes(bytes(data))
    status, out, err = run(capsys, "stats", str(part), "--format", "jsonl")
    stats = json.loads(out)
    assert (status, stats["damaged"], stats["records"]) == (1, 1, 300 - 50)
    assert len(err.splitlines()) == len(stats["warnings"]) == 2  # the drop, then the resync
    assert "resynchronised at byte" in stats["warnings"][1]


REALWORLD = Path(__file__).resolve().parents[2] / ".." / "shared" / "realworld"
OFFSETS = REALWORLD / "volodymyrzee-2.x" / "__consumer_offsets-12"


@pytest.mark.skipif(not OFFSETS.is_dir(), reason="../shared/realworld is absent")
def test_a_shallow_dump_of_an_internal_topic_shows_batches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """kafka-dump-log's decoders need deep iteration: a shallow dump decodes nothing (the
    auto decoder took a batch for a record: a null key, exit 1), and a decoder named with
    --shallow is refused."""
    status, out, _ = run(capsys, "dump", str(OFFSETS), "--shallow", "--quiet")
    rows = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and rows and all(r["key"] is None for r in rows)
    assert all("count" in r and "crc" in r for r in rows)
    status, _, err = run(capsys, "dump", str(OFFSETS), "--shallow", "--decoder", "offsets")
    assert status == 2 and "--decoder offsets decodes records" in err
    status, out, _ = run(capsys, "dump", str(OFFSETS), "--quiet", "--limit", "1")
    assert status == 0 and json.loads(out)["key"] is not None  # deep: decoded
