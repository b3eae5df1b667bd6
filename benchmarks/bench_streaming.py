"""Streaming reads (``spark.readStream.format("kafkasegments")``): planning per trigger, and
Trigger.AvailableNow against a batch read of the same data.

Cases (``--case``, several allowed):

``planning``  ``--partitions`` x ``--segments`` tiny segments (bench_planning's log dir, 10,000
              by default). Times the driver side of a stream in this process: the first
              trigger (``initialOffset`` + ``latestOffset``: listing, symbolic link checks,
              tails of the last segments), then triggers with no new data (target < 1 s), next
              to ``plan_scan`` of the same log dir (a batch read's planning); the same through
              a glob and for the segments uploaded as an Aiven tiered-storage bucket (both
              listed whole every trigger, as on an object store).
``lz4``       the ~1 GB lz4 log of bench_spark.py (one segment, 100-byte values). Alternating
              runs of the same projection (``value``, ``offset``) into Spark's ``noop`` sink:
              a batch read, and Trigger.AvailableNow streams in each of ``--batches``
              micro-batches (more than one: rate-limited by maxOffsetsPerTrigger), with a fresh
              checkpoint each run. Target: the stream >= 0.8x the speed of the batch read.
              Also prints the stream's processing throughput as Spark reports it
              (``processedRowsPerSecond``: rows over the micro-batches' trigger time, which
              leaves out the query's start) against the batch read. Times both on a
              10-record log (what a query costs at least: for a stream, Spark's source and
              planner workers, offset and commit logs) and gives the ratio beyond those fixed
              costs; and Spark's floor for any Python streaming source: the same AvailableNow
              query over a trivial source yielding those 10 rows from memory (its driver-side
              runner is a fresh Python process that imports pyspark from Spark's
              ``pyspark.zip``, where nothing is byte-compiled).

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

import pyarrow.fs as pafs

sys.path.insert(0, str(Path(__file__).parent))
# tests.support.upload (the bucket writer is a test helper, not part of the package)
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from bench_memory import build_segment
from bench_planning import build as build_tiny_segments
from bench_spark import session

import kafka_segments_ds as ksd
from kafka_segments_ds.index import rebuild_indexes
from kafka_segments_ds.options import parse_read_options, parse_stream_options
from kafka_segments_ds.planning import plan_scan
from kafka_segments_ds.reader import read_task
from kafka_segments_ds.records.compression import CompressionType
from kafka_segments_ds.streaming.planner import StreamPlanner


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def planning_case(data: Path, partitions: int, segments: int, repeat: int) -> None:
    root = data / f"planning-{partitions}x{segments}"
    build_tiny_segments(root, partitions, segments)
    count = partitions * segments
    print(f"planning: {count} segments in {partitions} partitions ({load()})")
    options = parse_stream_options({"startingOffsets": "earliest"})
    bucket = build_tiered_bucket(root, data / f"planning-{partitions}x{segments}-aiven")
    # a glob lists every trigger, as on an object store (no directory mtimes to compare); so
    # does a tiered bucket (here Aiven's layout on local disk, manifests parsed once)
    paths = {
        "local dir": str(root),
        "glob (listed every trigger)": f"{root}/events-*",
        "Aiven bucket (listed every trigger)": str(bucket),
    }
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


def build_tiered_bucket(root: Path, bucket: Path) -> Path:
    """The partitions of ``root`` uploaded as Aiven's tiered storage plugin writes them
    (``.log``, ``.indexes``, ``.rsm-manifest`` per segment) into a directory."""
    from tests.support.upload import upload_aiven

    marker = bucket / ".complete"
    if marker.exists():
        return bucket
    shutil.rmtree(bucket, ignore_errors=True)
    bucket.mkdir(parents=True)
    filesystem = pafs.LocalFileSystem()
    for directory in sorted(root.glob("events-*")):
        partition = int(directory.name.rpartition("-")[2])
        upload_aiven(directory, filesystem, f"{bucket}/", "events", partition, seed=partition)
    marker.write_text("ok")
    return bucket


def trivial_stream_source() -> type:
    """A Python streaming source with no work of its own: option ``microBatches`` (default 1)
    micro-batches of 10 rows built in memory (where pyspark has read limits; 4.1 reads all in
    one). What it costs is what Spark charges any Python streaming source."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    try:
        from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

        mixins: tuple[type, ...] = (SupportsTriggerAvailableNow,)
    except ImportError:  # pyspark 4.1
        mixins = ()

    class TrivialReader(DataSourceStreamReader, *mixins):  # type: ignore[misc]
        def __init__(self, micro_batches: int) -> None:
            self.total = 10 * micro_batches

        def initialOffset(self) -> dict:  # type: ignore[type-arg]
            return {"offset": 0}

        def latestOffset(self, start=None, limit=None) -> dict:  # type: ignore[no-untyped-def,type-arg]
            if start is None:  # pyspark 4.1
                return {"offset": self.total}
            return {"offset": min(start["offset"] + 10, self.total)}

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:  # type: ignore[type-arg]
            if start["offset"] >= end["offset"]:
                return []
            return [InputPartition((start["offset"], end["offset"]))]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            first, stop = partition.value
            return ((b"x" * 100, offset) for offset in range(first, stop))

    class TrivialStream(DataSource):
        @classmethod
        def name(cls) -> str:
            return "trivialstream"

        def schema(self) -> str:
            return "value binary, offset bigint"

        def streamReader(self, schema):  # type: ignore[no-untyped-def]
            return TrivialReader(int(self.options.get("microBatches", "1")))

    return TrivialStream


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
    # seconds the micro-batches that read rows took (Spark's triggerExecution), per run
    processing: dict[str, list[float]] = {}

    def batch_read() -> None:
        batch_df.write.format("noop").mode("overwrite").save()

    spark.dataSource.register(trivial_stream_source())

    def stream_read(name: str, count: int, source: Path | None = logs) -> None:
        reader = spark.readStream.format("kafkasegments").option("startingOffsets", "earliest")
        if count > 1:  # one micro-batch needs no limit
            reader = reader.option("maxOffsetsPerTrigger", -(-rows // count))
        if source is None:
            reader = spark.readStream.format("trivialstream").option("microBatches", count)
        checkpoint = scratch / "checkpoint"
        shutil.rmtree(checkpoint, ignore_errors=True)
        query = (
            (reader.load() if source is None else reader.load(str(source)))
            .select(*columns)
            .writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        reading = [p for p in query.recentProgress if p["numInputRows"]]
        progress[name] = [p["numInputRows"] for p in reading]
        processing.setdefault(name, []).append(
            sum(p["durationMs"]["triggerExecution"] for p in reading) / 1000
        )

    tiny = scratch / "tiny"
    build_tiny_segments(tiny, 1, 1)  # one 10-record segment: what a query costs at least
    tiny_df = spark.read.format("kafkasegments").load(str(tiny)).select(*columns)

    def tiny_batch_read() -> None:
        tiny_df.write.format("noop").mode("overwrite").save()

    runs = {"batch": batch_read}
    asked: dict[str, int] = {}  # micro-batches asked of each stream run
    for count in batches:
        name = f"stream, {count} micro-batch{'es' if count > 1 else ''}"
        runs[name] = lambda name=name, count=count: stream_read(name, count)
        asked[name] = count
    runs["fixed cost: batch"] = tiny_batch_read
    runs["fixed cost: stream"] = lambda: stream_read("fixed cost: stream", 1, tiny)
    for count in batches:  # Spark's floor: a trivial source in as many micro-batches
        name = f"fixed cost: trivial stream, {count}"
        runs[name] = lambda name=name, count=count: stream_read(name, count, None)
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
    floors = {count: min(times[f"fixed cost: trivial stream, {count}"]) for count in batches}
    print(
        f"  fixed cost (a 10-record log): batch read {fixed_batch:.2f} s, AvailableNow stream "
        f"{fixed_stream:.2f} s; Spark's floor for any Python streaming source (a trivial one, "
        "10 rows a micro-batch from memory): "
        + ", ".join(f"{floors[c]:.2f} s in {c} micro-batch(es)" for c in batches)
    )
    for name, counts in progress.items():
        if name.startswith("fixed"):
            continue
        assert sum(counts) == rows, (name, sum(counts), rows)
        best = min(times[name])
        beyond = (batch - fixed_batch) / (best - fixed_stream)
        busy = min(processing[name])
        count = asked[name]
        # the best a stream could do: the batch read's work at its speed, plus Spark's floor
        ceiling = batch / (batch - fixed_batch + floors[count])
        print(
            f"  {name} {counts}: best {best:.2f} s = {size / 1e6 / best:.0f} MB/s; "
            f"speed / batch read {batch / best:.2f}x "
            f"(target >= 0.8x: {'met' if batch / best >= 0.8 else 'NOT met'}); "
            f"beyond each one's fixed cost {beyond:.2f}x"
        )
        print(
            f"    the best any Python streaming source could reach here in {count} "
            f"micro-batch(es) (the batch read's work plus Spark's floor): {ceiling:.2f}x; "
            f"this stream reaches {batch / best / ceiling:.2f} of it"
        )
        # Spark's own throughput of a stream (processedRowsPerSecond): rows over the time its
        # micro-batches took, from the trigger's start (latestOffset) to its commit; the
        # query's start (the source's Python runner) is not in it
        print(
            f"    processing throughput (Spark's processedRowsPerSecond over the micro-batches, "
            f"best {busy:.2f} s) / batch read: {batch / busy:.2f}x"
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
