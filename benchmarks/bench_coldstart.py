"""Cold start: the first command after a fresh, non-editable install vs the same command again.

For each build (a source tree or a built wheel: this checkout by default, and optionally a
baseline measured in the same run, e.g. a checkout from before the kernels were compiled ahead of
time, when they were JIT-compiled on first use):

1. a new venv in a temp dir, ``pip install <source>`` (non-editable: a built wheel, as a user
   gets it; the pip cache makes this fast);
2. ``kafka-segments dump <one small segment> --limit 3``: the very first run, then ``--repeat``
   more (warm: the median); ratio first / warm (target <= 1.5);
3. unless ``--no-spark``: in a second fresh venv (nothing warmed by step 2), a process that
   starts a local[2] SparkSession and times its first query over the demo log dir
   (``kafka_segments_ds.samples``, as examples/demo.py writes it), then the same in a second
   process (warm); ratio first / warm (target <= 1.5).

The sample data is written by the interpreter running this script, so the fresh venv has run
nothing before its first command. Run:
``python benchmarks/bench_coldstart.py [--source DIR|WHEEL] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SPARK_QUERY = r"""
import json, os, sys, time
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.pyspark.python", sys.executable)
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
started = time.perf_counter()
rows = (
    spark.read.format("kafkasegments").load(sys.argv[1])
    .groupBy("topic", "partition").count().collect()
)
first = time.perf_counter() - started
started = time.perf_counter()
spark.read.format("kafkasegments").load(sys.argv[1]).groupBy("topic", "partition").count().collect()
again = time.perf_counter() - started
spark.stop()
print(json.dumps({"first": first, "again": again, "rows": sum(r["count"] for r in rows)}))
"""


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")
    return elapsed, done.stdout


def fresh_venv(source: Path, where: Path) -> tuple[Path, float]:
    """A new venv at ``where`` with ``source`` installed non-editable; (bin dir, install s)."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    pip = [str(where / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    elapsed, _ = run([*pip, "install", str(source)])
    return where / "bin", elapsed


def sample_data(root: Path) -> Path:
    """The demo log dir (5000 records per partition); returns one small segment of it."""
    from kafka_segments_ds.samples import write_sample_log_dir

    write_sample_log_dir(root, records_per_partition=5000)
    # the smallest segment that holds a few batches (some segments are empty or one marker)
    logs = [p for p in root.glob("*-*/*.log") if p.stat().st_size >= 16384]
    return min(logs, key=lambda p: p.stat().st_size)


def measure(label: str, source: Path, data: Path, segment: Path, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="ksds-cold-") as tmp:
        bin_dir, install_s = fresh_venv(source, Path(tmp) / "venv")
        env = dict(os.environ, HOME=tmp)  # no per-user caches from earlier runs
        dump = [str(bin_dir / "kafka-segments"), "dump", str(segment), "--limit", "3"]
        first, _ = run(dump, env)
        warm = statistics.median(run(dump, env)[0] for _ in range(args.repeat))
        print(f"{label}: {source}  (install {install_s:.1f} s)")
        print(
            f"  dump --limit 3   first {first:7.2f} s   warm {warm:6.2f} s   "
            f"ratio {first / warm:6.2f} x  (target <= 1.5)"
        )
        if args.no_spark:
            return
    # Spark in a venv of its own: the dump above must not have warmed anything for it
    with tempfile.TemporaryDirectory(prefix="ksds-cold-") as tmp:
        bin_dir, install_s = fresh_venv(source, Path(tmp) / "venv")
        env = dict(os.environ, HOME=tmp)
        script = Path(tmp) / "spark_query.py"
        script.write_text(SPARK_QUERY)
        python = str(bin_dir / "python")
        cold_wall, out = run([python, str(script), str(data)], env)
        cold = json.loads(out.strip().splitlines()[-1])
        warm_wall, out = run([python, str(script), str(data)], env)
        warm_q = json.loads(out.strip().splitlines()[-1])
        print(
            f"  spark 1st query  fresh {cold['first']:7.2f} s   warm {warm_q['first']:6.2f} s   "
            f"ratio {cold['first'] / warm_q['first']:6.2f} x  (target <= 1.5; "
            f"{cold['rows']:,} rows; process {cold_wall:.1f} s vs {warm_wall:.1f} s; "
            f"same query again in-session {cold['again']:.2f} s; second venv, install "
            f"{install_s:.1f} s)"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--source",
        default=str(ROOT),
        help="tree (default: this one) or built wheel to install",
    )
    parser.add_argument(
        "--baseline",
        help="a second tree measured the same way, e.g. a checkout "
        "of the last JIT-era commit (git archive <rev> | tar -x -C DIR)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="warm runs (median)")
    parser.add_argument("--no-spark", action="store_true")
    args = parser.parse_args(argv[1:])
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    with tempfile.TemporaryDirectory(prefix="ksds-cold-data-") as tmp:
        data = Path(tmp) / "demo"
        segment = sample_data(data)
        print(f"segment: {segment.name} of {segment.parent.name}, {segment.stat().st_size:,} bytes")
        measure("this build", Path(args.source).resolve(), data, segment, args)
        if args.baseline:
            measure("baseline", Path(args.baseline).resolve(), data, segment, args)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
