"""Writer benchmarks (issue 4), each side by side with its peer in the same run.

``builder``: our columnar batch builder (Arrow columns -> magic-2 batches, as the writer calls it:
4 MiB of rows at a time) against aiokafka's ``DefaultRecordBatchBuilder`` (its compiled builder,
fed Python bytes, its natural input) on the same records, 16 KiB batches, records/s. Runs
alternate; the ratio of medians is reported per codec.

``spark``: one SparkSession (local[2]); the same DataFrame of ~``--gb`` GB of records (100-byte
values, 16-byte keys) written with ``df.write.format("kafkasegments")`` (lz4) and with
``df.write.parquet`` (Spark's default snappy), alternating, and the ratio of median times.

``preserve``: an archive of ~``--gb`` GB (4 partitions, lz4) is read back with
``spark.read.format("kafkasegments")`` (``includeHeaders``, ``includeMetadata``), cached, and
those rows are written with ``preserveOffsets=true`` and with ``df.write.parquet``, alternating:
the ratio of median times (issue 21: at least 0.5x).

    .venv/bin/python benchmarks/bench_write.py builder --records 2000000 --runs 5
    .venv/bin/python benchmarks/bench_write.py spark --gb 1 --runs 3
    .venv/bin/python benchmarks/bench_write.py preserve --gb 0.05 --runs 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kafka_segments_ds.records.encoder import BatchSettings, encode_v2
from kafka_segments_ds.writer.columns import record_columns

VALUE_BYTES = 100
KEY_BYTES = 16
BATCH_BYTES = 16384
CHUNK_BYTES = 4 << 20


def make_records(count: int) -> pa.Table:
    rng = np.random.default_rng(7)
    # half random, half repeated bytes: compressible about 2x, like typical payloads
    raw = rng.integers(0, 256, size=(count, VALUE_BYTES), dtype=np.uint8)
    raw[:, VALUE_BYTES // 2 :] = 120
    values = pa.Array.from_buffers(
        pa.binary(), count,
        [None, pa.py_buffer(np.arange(0, (count + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32)),
         pa.py_buffer(raw.tobytes())],
    )  # fmt: skip
    keys = pa.array([b"key-%012d" % i for i in range(count)], pa.binary())
    stamps = pa.array(1_700_000_000_000 + np.arange(count), pa.timestamp("ms"))
    return pa.table({"key": keys, "value": values, "timestamp": stamps})


def ours(table: pa.Table, codec: int) -> int:
    """Encode the way the writer does; returns the batch count."""
    settings = BatchSettings(compression=codec, batch_bytes=BATCH_BYTES)
    rows_per_chunk = max(1, CHUNK_BYTES // (VALUE_BYTES + KEY_BYTES))
    batches = 0
    buffers: tuple[list, list] = ([], [])  # reused across calls, as the writer's tasks do
    for start in range(0, table.num_rows, rows_per_chunk):
        columns = record_columns(table.slice(start, rows_per_chunk), 0)
        batches += len(encode_v2(columns, settings, start, buffers).sizes)
    return batches


def aiokafka_builder(keys: list[bytes], values: list[bytes], stamps: list[int], codec: int) -> int:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    count = len(values)
    offset = 0
    batches = 0
    while offset < count:
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=codec, is_transactional=0, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=BATCH_BYTES,
        )  # fmt: skip
        first = offset
        while offset < count:
            if (
                builder.append(offset - first, stamps[offset], keys[offset], values[offset], [])
                is None
            ):
                break
            offset += 1
        builder.build()
        batches += 1
    return batches


def bench_builder(args: argparse.Namespace) -> None:
    table = make_records(args.records)
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    stamps = pa.compute.cast(table.column("timestamp"), pa.int64()).to_pylist()
    ours(table.slice(0, 1000), 0)  # compile the kernels outside the timing
    for codec, label in ((0, "none"), (3, "lz4")):
        times: dict[str, list[float]] = {"ours": [], "aiokafka": []}
        for _ in range(args.runs):
            start = time.perf_counter()
            ours_batches = ours(table, codec)
            times["ours"].append(time.perf_counter() - start)
            start = time.perf_counter()
            peer_batches = aiokafka_builder(keys, values, stamps, codec)
            times["aiokafka"].append(time.perf_counter() - start)
        ours_t = statistics.median(times["ours"])
        peer_t = statistics.median(times["aiokafka"])
        print(
            f"builder {label}: ours {args.records / ours_t / 1e6:.2f} M records/s "
            f"({ours_batches} batches), aiokafka {args.records / peer_t / 1e6:.2f} M records/s "
            f"({peer_batches} batches); ratio {peer_t / ours_t:.2f}x  "
            f"runs ours={[round(t, 3) for t in times['ours']]} "
            f"aiokafka={[round(t, 3) for t in times['aiokafka']]}"
        )


def _spark():  # type: ignore[no-untyped-def]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kafka_segments_ds

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kafka_segments_ds.register(spark)
    return spark


def _generated(spark, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    rows = int(args.gb * 1e9 / (VALUE_BYTES + KEY_BYTES))
    return rows, spark.range(0, rows, 1, args.partitions).selectExpr(
        "cast(lpad(cast(id as string), 16, '0') as binary) as key",
        # 64 hex chars of a hash + 36 repeated: ~2x compressible, different per row
        "cast(concat(sha2(cast(id as string), 256), repeat('x', 36)) as binary) as value",
        "timestamp_millis(1700000000000 + id) as timestamp",
    )


def _alternate(df, base: str, runs: int, ours) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """Write ``df`` with ``ours(df, target)`` and with ``df.write.parquet``, alternating."""
    times: dict[str, list[float]] = {"kafkasegments": [], "parquet": []}
    for run in range(runs):
        for name in ("kafkasegments", "parquet") if run % 2 == 0 else ("parquet", "kafkasegments"):
            target = os.path.join(base, f"{name}-{run}")
            start = time.perf_counter()
            if name == "parquet":
                df.write.parquet(target)
            else:
                ours(df, target)
            times[name].append(time.perf_counter() - start)
            size = sum(
                os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(target) for f in fs
            )
            print(f"run {run} {name}: {times[name][-1]:.2f} s, {size / 1e6:.0f} MB on disk")
            shutil.rmtree(target)
    return times


def _compare(spark, df, base: str, runs: int, ours, what: str) -> None:  # type: ignore[no-untyped-def]
    """Alternate the writes into ``base`` (removed after), report, stop Spark."""
    try:
        times = _alternate(df, base, runs, ours)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    _report(what, times)
    spark.stop()


def _report(what: str, times: dict[str, list[float]]) -> None:
    ks = statistics.median(times["kafkasegments"])
    pq = statistics.median(times["parquet"])
    print(
        f"{what}: kafkasegments {ks:.2f} s {[round(t, 2) for t in times['kafkasegments']]}, "
        f"parquet {pq:.2f} s {[round(t, 2) for t in times['parquet']]}; "
        f"speed ratio (parquet time / ours) {pq / ks:.2f}x"
    )


def bench_spark(args: argparse.Namespace) -> None:
    spark = _spark()
    rows, df = _generated(spark, args)
    base = tempfile.mkdtemp(prefix="bench-write-", dir=args.dir)

    def ours(frame, target: str) -> None:  # type: ignore[no-untyped-def]
        frame.write.format("kafkasegments").mode("append").option("topic", "bench").option(
            "compression", "lz4"
        ).save(target)

    _compare(spark, df, base, args.runs, ours, f"spark write {rows} rows (~{args.gb} GB), lz4")


def bench_preserve(args: argparse.Namespace) -> None:
    spark = _spark()
    rows, generated = _generated(spark, args)
    base = tempfile.mkdtemp(prefix="bench-preserve-", dir=args.dir)
    archive = os.path.join(base, "archive")
    generated.write.format("kafkasegments").mode("append").option("topic", "bench").option(
        "numPartitions", "4"
    ).option("compression", "lz4").save(archive)
    df = (
        spark.read.format("kafkasegments")
        .option("includeHeaders", "true")
        .option("includeMetadata", "true")
        .load(archive)
        .persist()
    )
    df.count()  # both writers take the same cached rows

    def ours(frame, target: str) -> None:  # type: ignore[no-untyped-def]
        frame.write.format("kafkasegments").mode("append").option("preserveOffsets", "true").save(
            target
        )

    what = f"preserveOffsets write of {rows} read-back rows (~{args.gb} GB, lz4 batches)"
    _compare(spark, df, base, args.runs, ours, what)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    b = sub.add_parser("builder")
    b.add_argument("--records", type=int, default=2_000_000)
    b.add_argument("--runs", type=int, default=5)
    s = sub.add_parser("spark")
    s.add_argument("--gb", type=float, default=1.0)
    s.add_argument("--runs", type=int, default=3)
    s.add_argument("--partitions", type=int, default=8)
    s.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    p = sub.add_parser("preserve")
    p.add_argument("--gb", type=float, default=1.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    args = parser.parse_args()
    {"builder": bench_builder, "spark": bench_spark, "preserve": bench_preserve}[args.what](args)


if __name__ == "__main__":
    main()
