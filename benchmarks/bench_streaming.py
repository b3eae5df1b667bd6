"""Streaming reads (``spark.readStream.format("kafkasegments")``): planning per trigger, and
Trigger.AvailableNow against a batch read of the same data.

Cases (``--case``, several allowed):

``planning``  ``--partitions`` x ``--segments`` tiny segments (bench_planning's log dir, 10,000
              by default). Times the driver side of a stream in this process: the first
              trigger (``initialOffset`` + ``latestOffset``: listing, symbolic link checks,
              tails of the last segments), then triggers with no new data (target < 1 s), next
              to ``plan_scan`` of the same log dir (a batch read's planning).
``lz4``       the ~1 GB lz4 log of bench_spark.py (one segment, 100-byte values). Alternating
              runs of the same projection (``value``, ``offset``) into Spark's ``noop`` sink:
              a batch read, and Trigger.AvailableNow streams in each of ``--batches``
              micro-batches (more than one: rate-limited by maxOffsetsPerTrigger), with a fresh
              checkpoint each run. Target: the stream >= 0.8x the speed of the batch read.
              Also times both on a 10-record log (what a query costs at least: for a stream,
              Spark's source and planner workers, offset and commit logs) and gives the
              ratio beyond those fixed costs.

Usage::

    python benchmarks/bench_streaming.py [--case planning lz4] [--gigabytes 1] [--batches 1 4]
        [--repeat 3] [--data bench-data]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_memory import build_segment
from bench_planning import build as build_tiny_segments
from bench_spark import session

import kafka_segments_ds as ksd
from kafka_segments_ds.index import rebuild_indexes
from kafka_segments_ds.options import parse_read_options, parse_stream_options
from kafka_segments_ds.planning import plan_scan
from kafka_segments_ds.reader import read_task
from kafka_segments_ds.reader.stream import StreamPlanner
from kafka_segments_ds.records.compression import CompressionType


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def planning_case(data: Path, partitions: int, segments: int, repeat: int) -> None:
    root = data / f"planning-{partitions}x{segments}"
    build_tiny_segments(root, partitions, segments)
    count = partitions * segments
    print(f"planning: {count} segments in {partitions} partitions ({load()})")
    options = parse_stream_options({"startingOffsets": "earliest"})
    # a glob lists every trigger, as on an object store (no directory mtimes to compare)
    paths = {"local dir": str(root), "glob (listed every trigger)": f"{root}/events-*"}
    firsts: dict[str, list[float]] = {name: [] for name in paths}
    idles: dict[str, list[float]] = {name: [] for name in paths}
    batches = []
    for _ in range(repeat):
        for name, path in paths.items():
            started = time.perf_counter()
            planner = StreamPlanner([path], *options)
            start = planner.initial_offsets()
            end = planner.next_offsets(start)
            firsts[name].append(time.perf_counter() - started)
            for _ in range(5):
                started = time.perf_counter()
                again = planner.next_offsets(end)
                idles[name].append(time.perf_counter() - started)
                assert again == end, "no new data: the same offsets"
        started = time.perf_counter()
        plan_scan(str(root), parse_read_options(), split=False, read_records=read_task)
        batches.append(time.perf_counter() - started)
    batch = min(batches)
    print(f"  batch read planning (plan_scan) of the dir: best {batch:.3f} s")
    for name in paths:
        idle = statistics.median(idles[name])
        print(
            f"  {name}: first trigger (initialOffset + latestOffset) best {min(firsts[name]):.3f} s"
        )
        worst = max(idles[name])
        print(
            f"  {name}: trigger with no new data median {idle:.4f} s, worst {worst:.4f} s "
            f"(target < 1 s: {'met' if worst < 1 else 'NOT met'}); / batch planning = "
            f"{idle / batch:.3f}x"
        )


def lz4_log(data: Path, gigabytes: float) -> Path:
    """bench_spark.py's lz4 case: one ~``gigabytes`` GB segment of big-0, with indexes."""
    root = data / f"spark-lz4-{gigabytes}g"
    log = root / "logs" / "big-0" / "00000000000000000000.log"
    build_segment(log, gigabytes, CompressionType.LZ4)
    if not log.with_suffix(".index").exists():
        offset_index, time_index = rebuild_indexes(log.read_bytes(), 0)
        log.with_suffix(".timeindex").write_bytes(time_index)
        log.with_suffix(".index").write_bytes(offset_index)
    return root / "logs"


def lz4_case(data: Path, gigabytes: float, batches: list[int], repeat: int) -> None:
    logs = lz4_log(data, gigabytes)
    rows = ksd.read_table(str(logs), columns=["offset"]).num_rows
    size = sum(p.stat().st_size for p in logs.rglob("*.log"))
    spark = session()
    columns = ("value", "offset")
    batch_df = spark.read.format("kafkasegments").load(str(logs)).select(*columns)
    scratch = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    progress: dict[str, list[int]] = {}

    def batch_read() -> None:
        batch_df.write.format("noop").mode("overwrite").save()

    def stream_read(name: str, count: int, source: Path = logs) -> None:
        reader = spark.readStream.format("kafkasegments").option("startingOffsets", "earliest")
        if count > 1:  # one micro-batch needs no limit
            reader = reader.option("maxOffsetsPerTrigger", -(-rows // count))
        checkpoint = scratch / "checkpoint"
        shutil.rmtree(checkpoint, ignore_errors=True)
        query = (
            reader.load(str(source))
            .select(*columns)
            .writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress[name] = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    tiny = scratch / "tiny"
    build_tiny_segments(tiny, 1, 1)  # one 10-record segment: what a query costs at least
    tiny_df = spark.read.format("kafkasegments").load(str(tiny)).select(*columns)

    def tiny_batch_read() -> None:
        tiny_df.write.format("noop").mode("overwrite").save()

    runs = {"batch": batch_read}
    for count in batches:
        name = f"stream, {count} micro-batch{'es' if count > 1 else ''}"
        runs[name] = lambda name=name, count=count: stream_read(name, count)
    runs["fixed cost: batch"] = tiny_batch_read
    runs["fixed cost: stream"] = lambda: stream_read("fixed cost: stream", 1, tiny)
    print(f"lz4: {size / 1e9:.2f} GB, {rows} records, 1 segment ({load()})")
    times: dict[str, list[float]] = {name: [] for name in runs}
    try:
        for _ in range(repeat):  # alternating
            for name, fn in runs.items():
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
                print(f"  {name}: {times[name][-1]:.2f} s ({load()})")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    batch = min(times["batch"])
    print(f"  batch read: best {batch:.2f} s = {size / 1e6 / batch:.0f} MB/s")
    fixed_batch, fixed_stream = min(times["fixed cost: batch"]), min(times["fixed cost: stream"])
    print(
        f"  fixed cost (a 10-record log): batch read {fixed_batch:.2f} s, AvailableNow stream "
        f"{fixed_stream:.2f} s"
    )
    for name, counts in progress.items():
        if name.startswith("fixed"):
            continue
        assert sum(counts) == rows, (name, sum(counts), rows)
        best = min(times[name])
        beyond = (batch - fixed_batch) / (best - fixed_stream)
        print(
            f"  {name} {counts}: best {best:.2f} s = {size / 1e6 / best:.0f} MB/s; "
            f"speed / batch read {batch / best:.2f}x "
            f"(target >= 0.8x: {'met' if batch / best >= 0.8 else 'NOT met'}); "
            f"beyond each one's fixed cost {beyond:.2f}x"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="+", default=["planning", "lz4"])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default="bench-data")
    args = parser.parse_args(argv)
    data = Path(args.data)
    if "planning" in args.case:
        planning_case(data, args.partitions, args.segments, args.repeat)
    if "lz4" in args.case:
        lz4_case(data, args.gigabytes, args.batches, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
