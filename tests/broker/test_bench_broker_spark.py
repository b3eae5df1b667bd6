"""Smoke run of benchmarks/bench_broker_spark.py (Spark's Kafka source from a broker against
kafkasegments on its log dir) on tiny data: it exits 0 having printed both sides' times, the
ratios and the row-for-row verdict. No timing is asserted. The script starts a broker of its own
(not the session's), so this test needs only Java and Maven."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_broker_spark.py"

pytestmark = [pytest.mark.spark, pytest.mark.bench, pytest.mark.slow]


def test_bench_broker_spark_runs(broker_tools: None, tmp_path: Path) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    command = [sys.executable, str(SCRIPT), "--records", "3001", "--partitions", "3"]
    command += ["--repeat", "1", "--data", str(tmp_path / "data")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"exited {done.returncode}:\n{output[-4000:]}"
    lines = done.stdout.splitlines()
    assert any(line.startswith("3001 records (100-byte values, half lz4") for line in lines)
    assert sum(line.startswith("  ratio kafka/kafkasegments ") for line in lines) == 2
    assert sum(line.startswith("  (a) Spark Kafka source  median ") for line in lines) == 2
    assert sum(line.startswith("  (b) kafkasegments       median ") for line in lines) == 2
    # 3001 records over 3 partitions: 1001 + 1000 + 1000, offsets 0..1000; values >= 100 bytes
    (answers,) = re.findall(r"^answers \((\d+), (\d+), (\d+)\); ", done.stdout, re.M)
    assert (int(answers[0]), int(answers[2])) == (3001, 1000)
    assert int(answers[1]) >= 3001 * 100
    assert "row for row: 3001 rows (a), 3001 rows (b); 0 only in (a), 0 only in (b)" in lines
    assert lines[-1] == "equal: the two DataFrames hold the same rows"
