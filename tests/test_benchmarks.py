"""Every script in benchmarks/ runs end to end on tiny data, so none rots unnoticed.

These are smoke runs, not measurements: each script is started as a user starts it (its own
process, its command line) with sizes that take seconds, and must exit 0 having printed the
figure lines it exists for. No timing is asserted. Marked ``bench`` (and ``spark`` where the
script starts a SparkSession); scripts/test.sh runs them once, on the compiled kernels.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

pytestmark = [pytest.mark.bench, pytest.mark.slow]

# script, arguments (``{data}`` is a fresh directory), lines the output must contain
CASES: dict[str, tuple[str, list[str], list[str]]] = {
    "crc": (
        "bench_crc.py",
        ["--kib", "16", "--mib", "1", "--repeat", "1"],
        ["ratio kernel/crc32c"],
    ),
    "decode": (
        "bench_decode.py",
        ["--records", "2000", "--repeat", "1", "--data", "{data}"],
        ["aiokafka (C)", "CPU ratio", "cramjam only", "zstd:"],
    ),
    "legacy": (
        "bench_legacy.py",
        ["--records", "2000", "--repeat", "1", "--data", "{data}"],
        ["magic 1, uncompressed: 2,000 records", "magic 1, gzip:", "ratio vs gzip"],
    ),
    "cli": (
        "bench_cli.py",
        ["--mb", "1", "--repeat", "1", "--data", "{data}"],
        ["dump throughput vs kafka-python dumper", "stats time / read_table time"],
    ),
    "cli_segments": (
        "bench_cli_segments.py",
        ["--segments", "30", "--repeat", "1", "--data", "{data}"],
        ["verify / dump per round", "stats / dump per round"],
    ),
    "cli_range": (
        "bench_cli_range.py",
        ["--mb", "1", "--repeat", "1", "--data", "{data}"],
        ["range [0, 5):", "pruned (a)", "decode+filter (b)"],
    ),
    "memory": (
        "bench_memory.py",
        ["--gigabytes", "0.005", "--data", "{data}"],
        ["peak RSS"],
    ),
    "tiered": (
        "bench_tiered.py",
        ["--records", "1000", "--chunk-mb", "1", "--rounds", "1", "--data", "{data}"],
        ["aiven uncompressed / plain log dir", '"rows": 3996'],
    ),
    "preserve": (
        "bench_preserve.py",
        ["--mb", "1", "--runs", "1", "--dir", "{data}"],
        ["preserveOffsets write_table: median", "speed ratio preserveOffsets / parquet"],
    ),
    "write_builder": (
        "bench_write.py",
        ["builder", "--records", "2000", "--runs", "1"],
        ["builder none: ours", "builder lz4: ours"],
    ),
    "planning": (
        "bench_planning.py",
        ["--partitions", "2", "--segments", "5", "--data", "{data}"],
        ["10 segments in 2 partitions", "startingTimestamp"],
    ),
    "schemas": (
        "bench_schemas.py",
        ["--records", "2000", "--repeat", "1", "--data", "{data}"],
        ["fastavro loop", "ratio decode step / fastavro loop"],
    ),
    "fresh_memory": (
        "bench_fresh_memory.py",
        ["--repeat", "1", "--mb", "8", "--release-gb", "0.05", "--wait", "0"],
        ["after a release: writing 8 MB", "4 KiB pages       median"],
    ),
    # installs the session's wheel (the ``wheel`` fixture, built once for test_packaging.py too)
    # into a fresh venv
    "coldstart": (
        "bench_coldstart.py",
        ["--no-spark", "--repeat", "1", "--source", "{wheel}"],
        ["dump --limit 3   first"],
    ),
}

SPARK_CASES: dict[str, tuple[str, list[str], list[str]]] = {
    "spark": (
        "bench_spark.py",
        [
            "--case",
            "small",
            "lz4",
            "--segments",
            "4",
            "--gigabytes",
            "0.002",
            "--repeat",
            "1",
            "--data",
            "{data}",
        ],
        ["full scan: kafkasegments", "native parquet"],
    ),
    "streaming": (
        "bench_streaming.py",
        [
            "--case",
            "planning",
            "lz4",
            "--partitions",
            "2",
            "--segments",
            "3",
            "--gigabytes",
            "0.002",
            "--batches",
            "2",
            "--repeat",
            "1",
            "--data",
            "{data}",
        ],
        ["trigger with no new data", "stream, 2 micro-batches"],
    ),
    "write_spark": (
        "bench_write.py",
        ["spark", "--gb", "0.002", "--runs", "1", "--partitions", "2", "--dir", "{data}"],
        ["spark write", "speed ratio"],
    ),
    "write_preserve": (
        "bench_write.py",
        ["preserve", "--gb", "0.002", "--runs", "1", "--partitions", "2", "--dir", "{data}"],
        ["preserveOffsets"],
    ),
}


def run_benchmark(case: tuple[str, list[str], list[str]], tmp_path: Path) -> None:
    script, arguments, expected = case
    data = tmp_path / "data"
    data.mkdir()
    command = [sys.executable, str(BENCHMARKS / script)]
    command += [a.replace("{data}", str(data)) for a in arguments]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{script} exited {result.returncode}:\n{output[-4000:]}"
    missing = [line for line in expected if line not in result.stdout]
    assert not missing, f"{script} did not print {missing}:\n{result.stdout[-4000:]}"


def test_every_benchmark_has_a_smoke_run() -> None:
    scripts = {case[0] for case in (*CASES.values(), *SPARK_CASES.values())}
    # smoke runs that need a fixture of their own folder (a running broker)
    elsewhere = {
        "bench_broker_spark.py": ROOT / "tests/broker/test_bench_broker_spark.py",
        "bench_sink.py": ROOT / "tests/broker/test_broker_sink.py",
    }
    for script, test in elsewhere.items():
        assert script in test.read_text()
    assert {p.name for p in BENCHMARKS.glob("bench_*.py")} == scripts | set(elsewhere)


@pytest.mark.parametrize("name", sorted(CASES))
def test_benchmark_runs(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    script, arguments, expected = CASES[name]
    if "{wheel}" in arguments:
        built = str(request.getfixturevalue("wheel"))
        arguments = [a.replace("{wheel}", built) for a in arguments]
    run_benchmark((script, arguments, expected), tmp_path)


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(SPARK_CASES))
def test_spark_benchmark_runs(name: str, tmp_path: Path) -> None:
    run_benchmark(SPARK_CASES[name], tmp_path)
