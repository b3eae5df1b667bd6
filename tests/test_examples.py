"""The runnable examples in examples/: each one's ``main`` on small data, checked exactly.

Examples are imported from their files (examples/ is not a package) and run in-process, except
demo.py, spark_read.py and write_and_read.py, which run as scripts in a subprocess.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.samples import write_sample_log_dir

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
RECORDS = 300
SEGMENT_BYTES = 8000
T0 = 1_700_000_000_000  # write_sample_log_dir's default start_timestamp


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small sample log dir (several segments per partition). Read-only."""
    return write_sample_log_dir(
        tmp_path_factory.mktemp("example-logs"),
        records_per_partition=RECORDS,
        segment_bytes=SEGMENT_BYTES,
    )


def _run_script(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.setdefault("KAFKA_SEGMENTS_DS_THREADS", "1")
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _micros(table: pa.Table) -> list[int | None]:
    return table["timestamp"].cast(pa.int64()).to_pylist()


# --------------------------------------------------------------------------- archive_to_parquet

_FILE_LINE = re.compile(r"^(topic=\S+/dt=\S+/part-\d+\.parquet)\s+(\d+)$")


def _printed_files(out: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in map(_FILE_LINE.match, out.splitlines()) if m}


def _check_archive(module: ModuleType, out_dir: Path, log_dir: Path, printed: str) -> None:
    expected = read_table(str(log_dir), module.COLUMNS, includeHeaders=True)
    files = _printed_files(printed)
    # the printed list is exactly the files on disk, with their row counts
    on_disk = {p.relative_to(out_dir).as_posix(): p for p in out_dir.rglob("*.parquet")}
    assert set(files) == set(on_disk)
    assert {name: pq.read_metadata(path).num_rows for name, path in on_disk.items()} == files
    assert sum(files.values()) == expected.num_rows
    assert f"{len(files)} files, {expected.num_rows} rows" in printed

    back = ds.dataset(out_dir, format="parquet", partitioning=module.PARTITIONING).to_table()
    assert sorted(back.column_names) == sorted([*module.COLUMNS, "dt"])
    order = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    back = back.sort_by(order)
    expected = expected.sort_by(order)
    for name in module.COLUMNS:
        assert back[name].to_pylist() == expected[name].to_pylist(), name
    # dt (from the directory names) is the UTC date of each record's timestamp, or unknown
    dates = [
        "unknown" if ts is None else ts.strftime("%Y-%m-%d")
        for ts in expected["timestamp"].to_pylist()
    ]
    assert back["dt"].to_pylist() == dates


def test_archive_to_parquet(logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load_example("archive_to_parquet")
    log_dir = write_sample_log_dir(
        tmp_path / "logs",
        records_per_partition=RECORDS,
        segment_bytes=SEGMENT_BYTES,
        start_timestamp=module.SAMPLE_START_TIMESTAMP,
    )
    out_dir = tmp_path / "parquet"
    assert module.main(["archive_to_parquet.py", str(out_dir), str(log_dir)]) == 0
    printed = capsys.readouterr().out
    _check_archive(module, out_dir, log_dir, printed)
    # the sample straddles midnight UTC and has magic-0 records with no timestamp
    dts = {name.split("/")[1] for name in _printed_files(printed)}
    assert dts == {"dt=2023-11-14", "dt=2023-11-15", "dt=unknown"}
    assert "topic=legacy.events/dt=unknown/part-0.parquet" in _printed_files(printed)

    # a second run replaces the partitions it writes instead of adding to them
    assert module.main(["archive_to_parquet.py", str(out_dir), str(log_dir)]) == 0
    _check_archive(module, out_dir, log_dir, capsys.readouterr().out)

    # another log dir into a fresh output: only its own topics
    other = tmp_path / "parquet-orders"
    assert module.main(["archive_to_parquet.py", str(other), str(logs / "orders-1")]) == 0
    printed = capsys.readouterr().out
    _check_archive(module, other, logs / "orders-1", printed)
    assert {name.split("/")[0] for name in _printed_files(printed)} == {"topic=orders"}


def test_archive_to_parquet_generates_a_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load_example("archive_to_parquet")
    out_dir = tmp_path / "parquet"
    assert module.main(["archive_to_parquet.py", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    # the sample is deterministic: the same one, written again, has the rows archived
    _check_archive(module, out_dir, module.write_sample(tmp_path / "again"), printed)


# --------------------------------------------------------------------------------- time_window


def _brute_force_window(
    log_dir: Path, start_ms: int, end_ms: int
) -> dict[tuple[str, int], tuple[list[int], int, int]]:
    """(topic, partition) -> (offsets in the offsets-for-times range, strict count, older)."""
    data = read_table(str(log_dir), ["topic", "partition", "offset", "timestamp"])
    shallow = read_table(str(log_dir), iteration="shallow", includeMetadata=True)
    control = shallow.filter(shallow["isControl"])  # one marker record per control batch
    # every offset with its timestamp, control records included (they count in the lookup)
    timeline: dict[tuple[str, int], list[tuple[int, int | None]]] = defaultdict(list)
    records: dict[tuple[str, int], list[tuple[int, int | None]]] = defaultdict(list)
    for table, is_data in ((data, True), (control, False)):
        rows = zip(
            table["topic"].to_pylist(),
            table["partition"].to_pylist(),
            table["offset"].to_pylist(),
            _micros(table),
            strict=True,
        )
        for topic, partition, offset, ts in rows:
            timeline[(topic, partition)].append((offset, ts))
            if is_data:
                records[(topic, partition)].append((offset, ts))
    start, end = start_ms * 1000, end_ms * 1000
    result = {}
    for key, entries in timeline.items():
        entries.sort()
        starts = [o for o, ts in entries if ts is not None and ts >= start]
        ends = [o for o, ts in entries if ts is not None and ts >= end]
        strict = sum(1 for _, ts in records[key] if ts is not None and start <= ts < end)
        if not starts:  # startingOffsetsByTimestampStrategy=latest: nothing
            result[key] = ([], strict, 0)
            continue
        first, stop = starts[0], (ends[0] if ends else float("inf"))
        in_range = [(o, ts) for o, ts in records[key] if first <= o < stop]
        older = sum(1 for _, ts in in_range if ts is None or ts < start)
        result[key] = ([o for o, _ in in_range], strict, older)
    return result


_PARTITION_LINE = re.compile(r"^(\S+)\s+(\d+)\s+(\d+|-)\s+(\d+|-)\s+(\d+)\s+(\d+)$")


def _check_window(
    printed: str, expected: dict[tuple[str, int], tuple[list[int], int, int]]
) -> None:
    rows = {
        (m[1], int(m[2])): (m[3], m[4], int(m[5]), int(m[6]))
        for m in map(_PARTITION_LINE.match, printed.splitlines())
        if m
    }
    want = {
        key: (
            str(offsets[0]) if offsets else "-",
            str(offsets[-1]) if offsets else "-",
            len(offsets),
            strict,
        )
        for key, (offsets, strict, _) in expected.items()
        if offsets or strict
    }
    assert rows == want
    window = sum(len(offsets) for offsets, _, _ in expected.values())
    strict = sum(s for _, s, _ in expected.values())
    older = sum(o for _, _, o in expected.values())
    assert f"offsets-for-times window: {window} records" in printed
    assert f"strict timestamp filter: {strict} records" in printed
    assert f"records in the offset window with a timestamp before START: {older}" in printed


@pytest.mark.parametrize(
    ("start_ms", "end_ms"),
    [
        (T0 + 2_000, T0 + 5_000),
        (T0 + 1_000, T0 + 1_500),  # shorter than the gap between two orders batches
        (T0 + 2_900, T0 + 60_000),  # after every legacy.events timestamp: nothing read
        (T0 - 60_000, T0 + 60_000),  # everything with a timestamp
    ],
)
def test_time_window(
    logs: Path, capsys: pytest.CaptureFixture[str], start_ms: int, end_ms: int
) -> None:
    module = load_example("time_window")
    assert module.main(["time_window.py", str(logs), str(start_ms), str(end_ms)]) == 0
    expected = _brute_force_window(logs, start_ms, end_ms)
    _check_window(capsys.readouterr().out, expected)
    # the example's tables themselves, record by record
    window = module.offsets_for_times_window(str(logs), start_ms, end_ms)
    got: dict[tuple[str, int], list[int]] = defaultdict(list)
    for topic, partition, offset in zip(
        window["topic"].to_pylist(),
        window["partition"].to_pylist(),
        window["offset"].to_pylist(),
        strict=True,
    ):
        got[(topic, partition)].append(offset)
    assert dict(got) == {k: offsets for k, (offsets, _, _) in expected.items() if offsets}
    strict = module.strict_window(str(logs), start_ms, end_ms)
    everything = read_table(str(logs), module.COLUMNS)
    micros = _micros(everything)
    mask = pa.array([ts is not None and start_ms * 1000 <= ts < end_ms * 1000 for ts in micros])
    assert strict.to_pylist() == everything.filter(mask).to_pylist()


def test_time_window_default_sample_shows_the_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load_example("time_window")
    assert module.main(["time_window.py"]) == 0
    expected = _brute_force_window(module.write_sample(tmp_path / "again"), *module.SAMPLE_WINDOW)
    printed = capsys.readouterr().out
    _check_window(printed, expected)
    # out-of-order timestamps: the two ways disagree on the sample
    assert sum(o for _, _, o in expected.values()) > 0
    assert sum(len(o) for o, _, _ in expected.values()) != sum(s for _, s, _ in expected.values())


def test_time_window_usage_error(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load_example("time_window")
    assert module.main(["time_window.py", str(logs), "1"]) == 2
    assert "usage" in capsys.readouterr().err


# ------------------------------------------------------------------------------- audit_shallow


def _brute_force_audit(log_dir: Path) -> dict[tuple[str, int], list[str]]:
    rows = read_table(str(log_dir), iteration="shallow", includeMetadata=True).to_pylist()
    groups: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["topic"], row["partition"])].append(row)
    expected = {}
    for (topic, partition), batches in groups.items():
        codecs = Counter(b["compression"] for b in batches)
        producers = sorted({b["producerId"] for b in batches if b["producerId"] >= 0})
        expected[(topic, partition)] = [
            topic,
            str(partition),
            str(len({b["segment"] for b in batches})),
            str(len(batches)),
            ",".join(f"{c}:{n}" for c, n in sorted(codecs.items())),
            ",".join(str(m) for m in sorted({b["magic"] for b in batches})),
            str(sum(b["batchLastOffset"] - b["batchBaseOffset"] + 1 for b in batches)),
            str(sum(len(b["value"] or b"") for b in batches)),
            ",".join(map(str, producers)) or "-",
            str(sum(1 for b in batches if b["isTransactional"] and not b["isControl"])),
            str(sum(1 for b in batches if b["isControl"])),
        ]
    return expected


def _printed_audit(printed: str) -> tuple[list[str], dict[tuple[str, int], list[str]]]:
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("topic "))
    header = lines[start].split()
    rows = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = line.split()
        rows[(cells[0], int(cells[1]))] = cells
    return header, rows


def test_audit_shallow(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load_example("audit_shallow")
    assert module.main(["audit_shallow.py", str(logs)]) == 0
    printed = capsys.readouterr().out
    header, rows = _printed_audit(printed)
    assert tuple(header) == module.HEADER
    expected = _brute_force_audit(logs)
    assert rows == expected
    batches = read_table(str(logs), iteration="shallow")
    assert f"{batches.num_rows} batches / top-level messages" in printed

    # what the sample holds: every offset is covered by one batch, 2 transactions per orders
    # partition (one aborted, one committed), each a data batch + a marker
    deep = read_table(str(logs), ["topic", "partition"])
    deep_counts = Counter(
        zip(deep["topic"].to_pylist(), deep["partition"].to_pylist(), strict=True)
    )
    for key, cells in rows.items():
        assert int(cells[6]) == RECORDS == deep_counts[key] + int(cells[10])
    for partition, codec in ((0, "lz4"), (1, "zstd")):
        row = rows[("orders", partition)]
        codecs = dict(cell.split(":") for cell in row[4].split(","))
        assert set(codecs) == {codec, "none"}  # the markers are uncompressed
        assert codecs["none"] == "2"
        assert row[8:] == ["4242", "2", "2"]
    assert rows[("legacy.events", 0)][5] == "0,1,2"
    assert rows[("metrics-v1", 0)][4:6] == [f"none:{rows[('metrics-v1', 0)][3]}", "2"]


def test_audit_shallow_generates_a_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load_example("audit_shallow")
    assert module.main(["audit_shallow.py"]) == 0
    _, rows = _printed_audit(capsys.readouterr().out)
    assert rows == _brute_force_audit(module.write_sample(tmp_path / "again"))


# ------------------------------------------------------------------------------- pandas_duckdb


def test_decode_utf8_replaces_invalid_bytes() -> None:
    module = load_example("pandas_duckdb")
    valid = pa.chunked_array([[b"caf\xc3\xa9", None], [b""]])
    assert module.decode_utf8(valid).to_pylist() == ["café", None, ""]
    invalid = pa.chunked_array([[b"ok", None], [b"\xff\xfeab"]])
    decoded = module.decode_utf8(invalid)
    assert decoded.type == pa.string()
    assert decoded.to_pylist() == ["ok", None, "\ufffd\ufffdab"]


def _committed(log_dir: Path) -> pa.Table:
    return read_table(str(log_dir), isolationLevel="read_committed")


def test_pandas_duckdb(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load_example("pandas_duckdb")
    assert module.main(["pandas_duckdb.py", str(logs)]) == 0
    printed = capsys.readouterr().out
    committed = _committed(logs)
    keys = {k for k in committed["key"].to_pylist() if k is not None}
    assert f"read {committed.num_rows} committed records ({len(keys)} distinct keys)" in printed
    assert f"first value: {committed['value'][0].as_py().decode()!r}" in printed

    table = module.read_decoded(str(logs))
    assert table.column_names == module.COLUMNS
    assert table["key"].to_pylist() == [
        None if k is None else k.decode() for k in committed["key"].to_pylist()
    ]
    assert table["value"].to_pylist() == [v.decode() for v in committed["value"].to_pylist()]

    try:
        import pandas  # noqa: F401
    except ImportError:
        assert "pandas is not installed (pip install pandas)" in printed
    else:
        assert f"pandas DataFrame: {committed.num_rows} rows x {len(module.COLUMNS)} columns" in (
            printed
        )

    try:
        import duckdb  # noqa: F401
    except ImportError:
        assert "duckdb is not installed (pip install duckdb)" in printed
    else:
        section = printed.split("per partition (DuckDB):\n")[1].split("\n\n")[0]
        got = [line.strip().split(" | ") for line in section.splitlines()[1:]]
        stats = committed.group_by(["topic", "partition"]).aggregate(
            [("offset", "count"), ("key", "count_distinct"), ("offset", "min"), ("offset", "max")]
        )
        want = sorted(
            [
                r["topic"],
                *map(str, (r["partition"], r["offset_count"], r["key_count_distinct"])),
                *map(str, (r["offset_min"], r["offset_max"])),
            ]
            for r in stats.to_pylist()
        )
        assert [row[:4] + row[5:] for row in got] == want


def test_pandas_duckdb_without_the_optional_packages(
    logs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    monkeypatch.setitem(sys.modules, "duckdb", None)
    module = load_example("pandas_duckdb")
    assert module.main(["pandas_duckdb.py", str(logs)]) == 0
    printed = capsys.readouterr().out
    assert "pandas is not installed (pip install pandas): skipping the DataFrame part" in printed
    assert "duckdb is not installed (pip install duckdb): skipping the SQL part" in printed
    assert f"read {_committed(logs).num_rows} committed records" in printed


# ------------------------------------------------------------------------- scripts (subprocess)


def test_demo_script(tmp_path: Path) -> None:
    done = _run_script(["examples/demo.py", str(tmp_path / "demo-data")], timeout=120)
    assert done.returncode == 0, done.stderr
    assert "deep read:" in done.stdout


@pytest.mark.spark
def test_spark_read_script(tmp_path: Path) -> None:
    log_dir = write_sample_log_dir(
        tmp_path, records_per_partition=RECORDS, segment_bytes=SEGMENT_BYTES
    )
    done = _run_script(["examples/spark_read.py", str(tmp_path)], timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    expected = read_table(str(log_dir), ["topic", "partition"], subscribe="orders,metrics-v1")
    counts = Counter(
        zip(expected["topic"].to_pylist(), expected["partition"].to_pylist(), strict=True)
    )
    lines = done.stdout.splitlines()
    assert len(counts) == 3
    for (topic, partition), count in counts.items():
        assert f"  {topic:<12} {partition:>3} {count:>7}" in lines
    first = read_table(str(log_dir / "orders-0"), ["key"], endingOffsets='{"orders":{"0":1}}')
    assert f"orders-0@0 key={first['key'][0].as_py().decode()} source=web" in done.stdout


@pytest.mark.spark
def test_write_and_read_script(tmp_path: Path) -> None:
    done = _run_script(["examples/write_and_read.py", str(tmp_path)], timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    written = read_table(str(tmp_path), ["partition", "offset", "key"])
    assert written.num_rows == 2000
    lines = done.stdout.splitlines()
    for partition in range(3):
        offsets = [
            o
            for p, o in zip(
                written["partition"].to_pylist(), written["offset"].to_pylist(), strict=True
            )
            if p == partition
        ]
        assert offsets == list(range(len(offsets)))
        assert f"{partition:>9} {len(offsets):>8}  0..{len(offsets) - 1}" in lines
    segments = sorted(p.name for p in (tmp_path / "readings-0").glob("*.log"))
    assert len(segments) > 1
    assert (
        f"readings-0: {len(segments)} segments, first {segments[0]}, last {segments[-1]}" in lines
    )
    assert "rows written 2000, read back 2000, differing 0" in lines
    assert 'readings-0@0: {"id":' in done.stdout and "header site" in done.stdout
