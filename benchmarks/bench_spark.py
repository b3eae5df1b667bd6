"""Spark: kafkasegments vs spark.read.parquet over the same records, one SparkSession.

Builds a ~1 GB lz4 log of 100-byte values (tiled producer-like batches with distinct offsets
and timestamps), writes the same records to Parquet, then alternates:

* the full scan ``selectExpr("sum(length(value))", "max(offset)")`` on both;
* a ~1 % offset range of the partition (options startingOffsets/endingOffsets);
* a ~1 % timestamp window as a ``where`` filter.

Spark's fixed cost for a Python data source query is measured with a one-row query through a
trivial source and reported, so the ratios can be read with and without it. The full scan is
also run over a trivial source that replays the same Arrow batches from memory (same rows,
columns and batch sizes, no decoding): the floor Spark's Python data source path itself costs.

Usage::

    python benchmarks/bench_spark.py [--gigabytes 1] [--repeat 3] [--data bench-data]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

from bench_memory import build_segment

import kafka_segments_ds as ksd
from kafka_segments_ds.index import rebuild_indexes
from kafka_segments_ds.records.compression import CompressionType


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default="bench-data")
    args = parser.parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    root = Path(args.data) / f"spark-lz4-{args.gigabytes}g"
    log = root / "logs" / "big-0" / "00000000000000000000.log"
    build_segment(log, args.gigabytes, CompressionType.LZ4)
    if not log.with_suffix(".index").exists():  # a broker's segment has its indexes
        offset_index, time_index = rebuild_indexes(log.read_bytes(), 0)
        log.with_suffix(".timeindex").write_bytes(time_index)
        log.with_suffix(".index").write_bytes(offset_index)
    parquet = root / "parquet"
    if not parquet.exists():
        parquet.mkdir(parents=True)
        writer = None
        for i, arrow_batch in enumerate(ksd.iter_batches(str(log.parent))):
            if writer is None:
                writer = pq.ParquetWriter(parquet / "part-0.parquet", arrow_batch.schema)
            writer.write_batch(arrow_batch)
            del i
        assert writer is not None
        writer.close()

    from pyspark.sql import SparkSession
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
            import pyarrow as pa

            batches = pa.ipc.open_file(pa.memory_map(self.path)).read_all().to_batches()
            left = self.rows // self.parts
            while left > 0:
                for batch in batches:
                    if left <= 0:
                        break
                    batch = batch.slice(0, left)
                    left -= batch.num_rows
                    yield batch

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(OneRow)
    spark.dataSource.register(Replay)
    replay = root / "replay.arrow"
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

    def run(fn):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    k = spark.read.format("kafkasegments").load(str(root / "logs"))
    p = spark.read.parquet(str(parquet))
    offsets = f'{{"big":{{"0":{low}}}}}', f'{{"big":{{"0":{high}}}}}'
    # DataFrames are made outside the timings (making one asks a Python worker for the schema)
    floor = spark.read.format("replay").option("rows", n).option("parts", 2).load(str(replay))
    k_range = (spark.read.format("kafkasegments").option("startingOffsets", offsets[0])
               .option("endingOffsets", offsets[1]).load(str(root / "logs")))
    queries = {
        "fixed cost (one-row source)": (
            lambda: spark.read.format("onerow").load().collect(), None),
        "full scan": (
            lambda: k.selectExpr("sum(length(value))", "max(offset)").collect(),
            lambda: p.selectExpr("sum(length(value))", "max(offset)").collect()),
        "full scan, replay floor": (
            lambda: floor.selectExpr("sum(length(value))", "max(offset)").collect(),
            lambda: p.selectExpr("sum(length(value))", "max(offset)").collect()),
        "1% offset range": (
            lambda: k_range.selectExpr("sum(length(value))").collect(),
            lambda: p.where(f"offset >= {low} and offset < {high}")
            .selectExpr("sum(length(value))").collect()),
        "1% timestamp where": (
            lambda: k.where(k.timestamp.between(t_low, t_high))
            .selectExpr("sum(length(value))").collect(),
            lambda: p.where(p.timestamp.between(t_low, t_high))
            .selectExpr("sum(length(value))").collect()),
    }
    print(f"{n:,} records, {log.stat().st_size / 1e9:.2f} GB lz4 log, parquet "
          f"{sum(f.stat().st_size for f in parquet.iterdir()) / 1e9:.2f} GB")
    results = {}
    for name, (ours, theirs) in queries.items():
        best_ours = best_theirs = float("inf")
        for _ in range(args.repeat):
            best_ours = min(best_ours, run(ours))
            if theirs is not None:
                best_theirs = min(best_theirs, run(theirs))
        results[name] = (best_ours, best_theirs)
        if theirs is None:
            print(f"  {name:<28} {best_ours:7.2f} s")
        else:
            print(f"  {name:<28} kafkasegments {best_ours:7.2f} s   parquet {best_theirs:7.2f} s"
                  f"   speed ratio {best_theirs / best_ours:5.2f}")
    fixed = results["fixed cost (one-row source)"][0]
    full = results["full scan"][0]
    for name in ("1% offset range", "1% timestamp where"):
        part = results[name][0]
        print(f"  {name}: (t - fixed) / (full - fixed) = "
              f"{(part - fixed) / max(full - fixed, 1e-9):.3f}  (target <= 0.1)")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
