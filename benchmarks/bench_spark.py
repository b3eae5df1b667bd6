"""Spark: kafkasegments vs spark.read.parquet (and Python-source peers), one SparkSession.

Cases (``--case``, several allowed; runs alternate ours / peer and each side's best is kept):

``small``   ~1,000 segments of <= 32 KiB (100 B values, uncompressed) in 50 partitions, and the
            same records in as many Parquet files; query ``count(*), sum(length(value)),
            max(offset)``. Target: kafkasegments >= 0.8x the speed of Parquet.
``many``    10,000 such segments: planning time (``partitions()`` in this process) and the scan
            time per row against the ``small`` case's (target: within 2x).
``lz4``     a ~1 GB lz4 log of 100-byte values (tiled producer-like batches with distinct offsets
            and timestamps), the same records in Parquet, then:

            * the full scan ``sum(length(value)), max(offset)`` through kafkasegments, through a
              Python data source in which pyarrow decodes the same records from the Parquet file
              (target: kafkasegments >= 1.0x), and through native ``spark.read.parquet``;
            * a replay floor: a trivial Python source replaying our Arrow batches from memory
              (same rows, columns, batch sizes, no decoding), and Spark's cost per batch;
            * a ~1 % offset range (startingOffsets/endingOffsets) and a ~1 % timestamp ``where``,
              against the full scan beyond the fixed cost of a one-row query (target <= 0.1).

Usage::

    python benchmarks/bench_spark.py [--case small many lz4] [--gigabytes 1] [--repeat 3]
        [--data bench-data]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

from bench_memory import build_segment

import kafka_segments_ds as ksd
from kafka_segments_ds.index import rebuild_indexes
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.records.compression import CompressionType

SMALL_SEGMENT_BYTES = 32 * 1024
RECORDS_PER_BATCH = 20
VALUE_BYTES = 100
SMALL_QUERY = ("count(*)", "sum(length(value))", "max(offset)")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def run(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def alternate(repeat: int, *fns: Callable[[], Any]) -> list[float]:
    """Best time of each, runs alternating."""
    return [t.wall for t in alternate_cpu(repeat, *fns)]


@dataclass(frozen=True)
class Timing:
    """Best wall time of a query and its least CPU seconds: the JVM's and the Python
    processes' (workers, planners); CPU None where /proc is not there to read."""

    wall: float
    jvm: float | None
    python: float | None
    walls: tuple[float, ...] = ()  # every run's wall time, in round order

    @property
    def cpu(self) -> float | None:
        return None if self.jvm is None or self.python is None else self.jvm + self.python

    def shown(self) -> str:
        if self.jvm is None or self.python is None:
            return f"{self.wall:6.2f} s"
        return f"{self.wall:6.2f} s  (CPU: JVM {self.jvm:5.2f} s, Python {self.python:5.2f} s)"


def alternate_cpu(repeat: int, *fns: Callable[[], Any]) -> list[Timing]:
    """Best wall time and least CPU of each, runs alternating. CPU time is what a loaded,
    shared machine disturbs least: on an idle one the wall times' ratios come near it."""
    best = [Timing(float("inf"), None, None)] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            before = spark_cpu()
            wall = run(fn)
            after = spark_cpu()
            jvm = python = None
            if before is not None and after is not None:
                jvm, python = after[0] - before[0], after[1] - before[1]
            old = best[i]
            best[i] = Timing(
                min(old.wall, wall),
                jvm if old.jvm is None or jvm is None else min(old.jvm, jvm),
                python if old.python is None or python is None else min(old.python, python),
                (*old.walls, wall),
            )
    return best


def spark_cpu() -> tuple[float, float] | None:
    """CPU seconds the processes under this one have used so far, from /proc (Linux):
    ``(JVM, Python)``. The JVM's own time is the JVM's; the rest is Python's: the daemon and
    its workers, and the planner workers the JVM started and reaped (its children's time).
    None without /proc."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    children: dict[int, list[tuple[int, bool, int, int]]] = {}  # pid, java, own, reaped
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        own, reaped = int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])
        children.setdefault(int(fields[1]), []).append((int(name), comm == "java", own, reaped))
    jvm = python = 0
    todo = [os.getpid()]
    while todo:
        for pid, is_java, own, reaped in children.get(todo.pop(), []):
            if is_java:
                jvm += own
                python += reaped
            else:
                python += own + reaped
            todo.append(pid)
    return jvm / tick, python / tick


# -- data ----------------------------------------------------------------------------------


def build_small_segments(root: Path, segments: int, partitions: int = 50) -> int:
    """``segments`` segments of <= 32 KiB (batches of 20 records of 100-byte values) spread
    over ``partitions`` partitions of topic ``small``, with indexes; the same records in one
    Parquet file per segment under ``root/parquet``. Returns the record count."""
    logs, parquet = root / "logs", root / "parquet"
    done = root / "DONE"
    if done.exists():
        return int(done.read_text())
    logs.mkdir(parents=True, exist_ok=True)
    parquet.mkdir(parents=True, exist_ok=True)
    value = bytes(range(VALUE_BYTES))
    total = 0
    per_partition = -(-segments // partitions)
    made = 0
    for partition in range(partitions):
        directory = logs / f"small-{partition}"
        directory.mkdir(exist_ok=True)
        offset = 0
        for _ in range(per_partition):
            if made == segments:
                break
            base = offset
            log = bytearray()
            while True:
                batch = encode_batch(
                    [
                        RecordSpec(value=value, timestamp=1_700_000_000_000 + offset + i)
                        for i in range(RECORDS_PER_BATCH)
                    ],
                    base_offset=offset,
                )
                if len(log) + len(batch) > SMALL_SEGMENT_BYTES:
                    break
                log += batch
                offset += RECORDS_PER_BATCH
            name = f"{base:020d}"
            (directory / f"{name}.log").write_bytes(log)
            offset_index, time_index = rebuild_indexes(bytes(log), base)
            (directory / f"{name}.index").write_bytes(offset_index)
            (directory / f"{name}.timeindex").write_bytes(time_index)
            table = ksd.read_table(str(directory / f"{name}.log"))
            pq.write_table(table, parquet / f"small-{partition}-{name}.parquet")
            total += table.num_rows
            made += 1
    done.write_text(str(total))
    return total


# -- Spark ---------------------------------------------------------------------------------


def session():  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    for source in peer_sources():
        spark.dataSource.register(source)
    return spark


def peer_sources() -> list[type]:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from kafka_segments_ds.schema import default_columns, spark_ddl

    class OneRow(DataSource):
        @classmethod
        def name(cls) -> str:
            return "onerow"

        def schema(self) -> str:
            return "x int"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return OneRowReader()

    class OneRowReader(DataSourceReader):
        def read(self, partition):  # type: ignore[no-untyped-def]
            yield (1,)

    class Replay(DataSource):
        """``rows`` rows of the Arrow IPC file ``path``, replayed over ``parts`` partitions."""

        @classmethod
        def name(cls) -> str:
            return "replay"

        def schema(self) -> str:
            return spark_ddl(default_columns(False, False))

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return ReplayReader(self.options)

    class ReplayReader(DataSourceReader):
        def __init__(self, options):  # type: ignore[no-untyped-def]
            self.path, self.rows = options["path"], int(options["rows"])
            self.parts = int(options["parts"])

        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(i) for i in range(self.parts)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            batches = pa.ipc.open_file(pa.memory_map(self.path)).read_all().to_batches()
            left = self.rows // self.parts
            while left > 0:
                for batch in batches:
                    if left <= 0:
                        break
                    batch = batch.slice(0, left)
                    left -= batch.num_rows
                    yield batch

    class ArrowParquet(DataSource):
        """The Parquet file ``path`` decoded by pyarrow, its row groups over ``parts``
        partitions: a Python data source doing the least decoding work there is."""

        @classmethod
        def name(cls) -> str:
            return "arrowparquet"

        def schema(self) -> str:
            return spark_ddl(default_columns(False, False))

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return ArrowParquetReader(self.options, [f.name for f in schema.fields])

    class ArrowParquetReader(DataSourceReader):
        def __init__(self, options, columns):  # type: ignore[no-untyped-def]
            self.path, self.parts, self.columns = options["path"], int(options["parts"]), columns

        def partitions(self):  # type: ignore[no-untyped-def]
            groups = pq.ParquetFile(self.path).metadata.num_row_groups
            step = -(-groups // self.parts)
            return [InputPartition((i, min(i + step, groups))) for i in range(0, groups, step)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            first, stop = partition.value
            yield from pq.ParquetFile(self.path).iter_batches(
                row_groups=range(first, stop), columns=self.columns, batch_size=1 << 20
            )

    return [OneRow, Replay, ArrowParquet]


def small_case(spark, data: Path, segments: int, repeat: int) -> float:  # type: ignore[no-untyped-def]
    """Returns kafkasegments' seconds per million rows."""
    from kafka_segments_ds.datasource import KafkaSegmentsReader
    from kafka_segments_ds.options import parse_read_options

    root = data / f"spark-small-{segments}"
    rows = build_small_segments(root, segments)
    logs = root / "logs"
    started = time.perf_counter()
    packed = KafkaSegmentsReader([str(logs)], parse_read_options(), ("offset",)).partitions()
    planning = time.perf_counter() - started
    k = spark.read.format("kafkasegments").load(str(logs))
    p = spark.read.parquet(str(root / "parquet"))
    check = [k.selectExpr(*SMALL_QUERY).collect(), p.selectExpr(*SMALL_QUERY).collect()]
    assert check[0] == check[1], check
    t_ours, t_parquet = alternate(
        repeat,
        lambda: k.selectExpr(*SMALL_QUERY).collect(),
        lambda: p.selectExpr(*SMALL_QUERY).collect(),
    )
    print(
        f"{segments:,} segments <= 32 KiB, {rows:,} records of {VALUE_BYTES} B, uncompressed "
        f"({load()})"
    )
    print(
        f"  planning (partitions(), in process) {planning:6.2f} s -> {len(packed)} input partitions"
    )
    print(
        f"  {', '.join(SMALL_QUERY)}: kafkasegments {t_ours:6.2f} s   parquet ({segments} files) "
        f"{t_parquet:6.2f} s   speed ratio {t_parquet / t_ours:5.2f}  (target >= 0.8)"
    )
    return t_ours / rows * 1e6


def lz4_case(spark, data: Path, gigabytes: float, repeat: int) -> None:  # type: ignore[no-untyped-def]
    root = data / f"spark-lz4-{gigabytes}g"
    log = root / "logs" / "big-0" / "00000000000000000000.log"
    build_segment(log, gigabytes, CompressionType.LZ4)
    if not log.with_suffix(".index").exists():  # a broker's segment has its indexes
        offset_index, time_index = rebuild_indexes(log.read_bytes(), 0)
        log.with_suffix(".timeindex").write_bytes(time_index)
        log.with_suffix(".index").write_bytes(offset_index)
    parquet = root / "parquet"
    if not parquet.exists():
        parquet.mkdir(parents=True)
        writer = None
        for arrow_batch in ksd.iter_batches(str(log.parent)):
            if writer is None:
                writer = pq.ParquetWriter(parquet / "part-0.parquet", arrow_batch.schema)
            writer.write_batch(arrow_batch)
        assert writer is not None
        writer.close()
    replay = root / "replay.arrow"
    batch_rows: list[int] = []
    for arrow_batch in ksd.iter_batches(str(log.parent)):
        batch_rows.append(arrow_batch.num_rows)
        if len(batch_rows) == 50:
            break
    if not replay.exists():
        sample = []
        for arrow_batch in ksd.iter_batches(str(log.parent)):
            sample.append(arrow_batch)
            if sum(b.num_rows for b in sample) >= 200_000:
                break
        with pa.ipc.new_file(str(replay), sample[0].schema) as out:
            for arrow_batch in sample:
                out.write_batch(arrow_batch)

    first = ksd.read_table(str(log.parent), columns=["offset", "timestamp"])
    n = first.num_rows
    low, high = n // 2, n // 2 + n // 100
    ts = sorted(first["timestamp"].to_pylist())
    t_low, t_high = ts[n // 2], ts[n // 2 + n // 100]
    del first

    import pyspark

    from kafka_segments_ds.datasource import KafkaSegmentsReader
    from kafka_segments_ds.options import parse_read_options

    parts = len(
        KafkaSegmentsReader([str(root / "logs")], parse_read_options(), ("offset",)).partitions()
    )
    rows_per_batch = sum(batch_rows) // len(batch_rows)
    batches = -(-n // rows_per_batch)
    k = spark.read.format("kafkasegments").load(str(root / "logs"))
    p = spark.read.parquet(str(parquet))
    a = (
        spark.read.format("arrowparquet")
        .option("parts", parts)
        .load(str(parquet / "part-0.parquet"))
    )
    offsets = f'{{"big":{{"0":{low}}}}}', f'{{"big":{{"0":{high}}}}}'
    # DataFrames are made outside the timings (making one asks a Python worker for the schema)
    floor = spark.read.format("replay").option("rows", n).option("parts", parts).load(str(replay))
    k_range = (
        spark.read.format("kafkasegments")
        .option("startingOffsets", offsets[0])
        .option("endingOffsets", offsets[1])
        .load(str(root / "logs"))
    )
    full = ("sum(length(value))", "max(offset)")
    print(
        f"{n:,} records, {log.stat().st_size / 1e9:.2f} GB lz4 log, parquet "
        f"{sum(f.stat().st_size for f in parquet.iterdir()) / 1e9:.2f} GB; {parts} input "
        f"partitions, ~{rows_per_batch:,} rows per Arrow batch; pyspark {pyspark.__version__} "
        f"({load()})"
    )
    (fixed,) = alternate(repeat, lambda: spark.read.format("onerow").load().collect())
    ours, arrow, native, replayed = alternate_cpu(
        repeat,
        lambda: k.selectExpr(*full).collect(),
        lambda: a.selectExpr(*full).collect(),
        lambda: p.selectExpr(*full).collect(),
        lambda: floor.selectExpr(*full).collect(),
    )
    t_k, t_floor = ours.wall, replayed.wall
    print(f"  fixed cost (one-row source)   {fixed:6.2f} s")
    print(f"  full scan: kafkasegments      {ours.shown()}")
    for name, peer, target in (
        ("pyarrow-from-parquet Python source", arrow, "  (target >= 1.0)"),
        ("native parquet    ", native, "  (moonshot >= 0.6)"),
        ("replay floor      ", replayed, ""),
    ):
        print(f"             {name} {peer.shown()}")
        print(f"               speed ratio {peer.wall / t_k:5.2f}{cpu_ratio(peer, ours)}{target}")
        print(f"               {round_ratios(peer, ours)}")
    print(
        f"  Spark spends {(t_floor - fixed) / batches * 1e3:.2f} ms per batch of "
        f"{rows_per_batch:,} rows in the replay"
    )
    t_range, t_where = alternate(
        repeat,
        lambda: k_range.selectExpr("sum(length(value))").collect(),
        lambda: (
            k.where(k.timestamp.between(t_low, t_high)).selectExpr("sum(length(value))").collect()
        ),
    )
    for name, t in (("1% offset range", t_range), ("1% timestamp where", t_where)):
        print(
            f"  {name:<20} {t:6.2f} s  (t - fixed) / (full - fixed) = "
            f"{(t - fixed) / max(t_k - fixed, 1e-9):.3f}  (target <= 0.1)"
        )


def round_ratios(peer: Timing, ours: Timing) -> str:
    """The speed ratio of each round (the peer's time over ours, run one after the other):
    median and spread."""
    ratios = sorted(p / max(o, 1e-9) for p, o in zip(peer.walls, ours.walls, strict=True))
    return (
        f"per round: median {statistics.median(ratios):.2f} (min {ratios[0]:.2f}, max "
        f"{ratios[-1]:.2f}, {len(ratios)} rounds)"
    )


def cpu_ratio(peer: Timing, ours: Timing) -> str:
    """The peer's CPU seconds over ours, where both are known."""
    if peer.cpu is None or ours.cpu is None:
        return ""
    return f"   CPU ratio {peer.cpu / max(ours.cpu, 1e-9):5.2f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="+", default=["small", "many", "lz4"])
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument("--many", type=int, default=10_000)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default="bench-data")
    args = parser.parse_args(argv)
    data = Path(args.data)
    spark = session()
    per_row = {}
    if "small" in args.case:
        per_row["small"] = small_case(spark, data, args.segments, args.repeat)
    if "many" in args.case:
        per_row["many"] = small_case(spark, data, args.many, args.repeat)
        if "small" in per_row:
            print(
                f"  scan time per row, {args.many:,} vs {args.segments:,} segments: "
                f"{per_row['many'] / per_row['small']:.2f}x  (target <= 2)"
            )
    if "lz4" in args.case:
        lz4_case(spark, data, args.gigabytes, args.repeat)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
