"""The streaming sink's throughput (issue 21: at least 50 MB/s of lz4 batches on the 2-core
machine): Spark's Kafka source reads a topic of lz4 batches from a real broker (the broker tests'
harness) and ``writeStream.format("kafkasegments")`` archives it, offsets kept, lz4 again.

A broker takes ``--records`` records (``--value-bytes`` each) from its Java producer, lz4,
spread over ``--partitions`` partitions. Then, in one SparkSession with Spark's Kafka connector
(fetched by Maven as benchmarks/bench_broker_spark.py does), alternating ``--repeat`` times after
one untimed run of each: Trigger.AvailableNow queries from the earliest offsets, in micro-batches
of ``--max-offsets`` offsets, into (a) the ``noop`` sink (what reading the topic costs), (b) a
Python data source sink that only counts the Arrow batches Spark hands it (what Spark's Python
streaming sink API costs on top: rows to Arrow in the JVM, Arrow to a Python worker, a Python
process per commit), and (c) the kafkasegments sink (a fresh log dir and checkpoint each time;
the archive's record count is checked). Then (d): the sink's own work without Spark, in this
process: the topic's rows (read from the broker's log dir beforehand, in Arrow batches of 10,000
rows as Spark hands them) through the sink's tasks (one per partition, one after the other) and
its commit. Printed: each side's median and spread, and the MB/s of the topic's ``.log`` bytes
(its lz4 batches) over the times of (b), (c) and (d), median and spread.

Usage::

    python benchmarks/bench_sink.py [--records 1000000] [--partitions 2] [--value-bytes 200]
        [--repeat 3] [--max-offsets 250000] [--data DIR] [--connector-version V]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_broker_spark import (
    Broker,
    connector_jars,
    connector_version,
    load,
    session,
    spread,
)

TOPIC = "sink-bench"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--data", type=Path, help="work dir (default: a temporary one, removed)")
    parser.add_argument("--connector-version", help="default: the installed pyspark's version")
    args = parser.parse_args()
    if args.records < 1 or args.partitions < 1 or args.repeat < 1 or args.max_offsets < 1:
        parser.error("--records, --partitions, --repeat and --max-offsets must be >= 1")

    import pyspark

    version = args.connector_version or connector_version(pyspark.__version__)
    jars = connector_jars(version)
    work = args.data or Path(tempfile.mkdtemp(prefix="bench-sink-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = Broker(work / "broker")
    try:
        broker.start()
        broker.create_topic(TOPIC, args.partitions)
        broker.produce(
            TOPIC,
            args.records,
            compression="lz4",
            value_bytes=args.value_bytes,
            batch_size=64 * 1024,
            linger_ms=20,
        )
        log_bytes = sum(p.stat().st_size for p in broker.log_dir.glob(f"{TOPIC}-*/*.log"))
        print(
            f"{args.records} records ({args.value_bytes}-byte values, lz4) in {args.partitions} "
            f"partitions, {log_bytes / 1e6:.1f} MB of .log; micro-batches of "
            f"{args.max_offsets} offsets; pyspark {pyspark.__version__}, connector {version}; "
            f"{load()}"
        )
        spark = session(jars)
        try:
            return run(spark, broker, work, args, log_bytes)
        finally:
            spark.stop()
    finally:
        broker.close()
        if args.data is None:
            shutil.rmtree(work, ignore_errors=True)


def counting_sink() -> type:
    """A Python data source whose streaming sink only counts the Arrow batches' rows."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

    class Counted(WriterCommitMessage):
        def __init__(self, rows: int) -> None:
            self.rows = rows

    class CountingWriter(DataSourceStreamArrowWriter):
        def write(self, iterator: Any) -> Counted:
            return Counted(sum(batch.num_rows for batch in iterator))

        def commit(self, messages: list[Any], batchId: int) -> None:
            pass

    class CountingSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_counting_sink"

        def streamWriter(self, schema: Any, overwrite: bool) -> CountingWriter:
            return CountingWriter()

    return CountingSink


def run(spark: Any, broker: Broker, work: Path, args: argparse.Namespace, log_bytes: int) -> int:
    from kafka_segments_ds import read_table

    spark.dataSource.register(counting_sink())

    runs = iter(range(1_000_000))

    def query(sink: str) -> float:
        number = next(runs)
        out, checkpoint = work / f"archive-{number}", work / f"checkpoint-{number}"
        writer = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(args.max_offsets))
            .load()
            .writeStream.format(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
        )
        if sink == "kafkasegments":
            writer = writer.option("compression", "lz4")
        started = time.perf_counter()
        running = writer.start(str(out)) if sink != "noop" else writer.start()
        running.awaitTermination()
        seconds = time.perf_counter() - started
        if running.exception() is not None:
            raise SystemExit(f"bench_sink: the {sink} query failed: {running.exception()}")
        if sink == "kafkasegments":
            table = read_table(out, columns=["partition", "offset"])
            if table.num_rows != args.records:
                raise SystemExit(
                    f"bench_sink: the archive holds {table.num_rows} records, not {args.records}"
                )
            shutil.rmtree(out)
        shutil.rmtree(checkpoint, ignore_errors=True)
        return seconds

    times: dict[str, list[float]] = {"noop": [], "bench_counting_sink": [], "kafkasegments": []}
    for sink in times:
        query(sink)  # untimed: class loading, Python workers
    for _ in range(args.repeat):
        for sink in times:
            times[sink].append(query(sink))
    print("Trigger.AvailableNow from the earliest offsets, Spark's Kafka source into:")
    print(f"  (a) noop sink                 {spread(times['noop'])}")
    print(f"  (b) counting Python sink      {spread(times['bench_counting_sink'])}")
    print(f"  (c) kafkasegments sink        {spread(times['kafkasegments'])}")
    times["alone"] = sink_alone(broker, work, args.repeat)
    print(f"  (d) the sink's tasks and commit alone, one core: {spread(times['alone'])}")
    for label, sink in (
        ("counting Python sink", "bench_counting_sink"),
        ("sink", "kafkasegments"),
        ("sink alone", "alone"),
    ):
        rates = [log_bytes / 1e6 / t for t in times[sink]]
        print(
            f"{label} MB/s of lz4 batches: median {statistics.median(rates):.1f} "
            f"(min {min(rates):.1f}, max {max(rates):.1f})"
        )
    print(f"goal: sink >= 50 MB/s; {load()}")
    return 0


def sink_alone(broker: Broker, work: Path, repeat: int) -> list[float]:
    """Times of the sink's tasks and commit on the topic's rows, without Spark."""
    import pyarrow.compute as pc

    from kafka_segments_ds import read_table
    from kafka_segments_ds.writer.sink import commit_batch, prepare_sink, write_task

    table = read_table(broker.log_dir, subscribe=TOPIC)
    table = table.combine_chunks()
    partitions = sorted(set(table.column("partition").to_pylist()))
    inputs = [
        table.filter(pc.equal(table.column("partition"), p)).to_batches(10_000) for p in partitions
    ]
    times = []
    for number in range(repeat):
        out = work / f"alone-{number}"
        spec = prepare_sink([str(out)], {"compression": "lz4"}, False, table.schema)
        started = time.perf_counter()
        results = [write_task(spec, task, batches) for task, batches in enumerate(inputs)]
        commit_batch(spec, results, 0)
        times.append(time.perf_counter() - started)
        shutil.rmtree(out)
    return times


if __name__ == "__main__":
    raise SystemExit(main())
