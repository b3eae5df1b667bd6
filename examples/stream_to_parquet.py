"""Incremental ETL: a growing Kafka log archive to Parquet partitioned by topic and date, with
``spark.readStream.format("kafkasegments")``, a checkpoint and ``Trigger.AvailableNow``.

Run: ``python examples/stream_to_parquet.py [OUT_DIR [LOG_DIR]]`` (default OUT_DIR:
./stream-parquet). Each run reads what the archive gained since the last run (the checkpoint,
``OUT_DIR/_checkpoint``, holds the offsets read, as Spark's Kafka source writes them), writes it
to ``OUT_DIR/topic=<topic>/dt=<YYYY-MM-DD>/`` and stops; schedule it (cron, Airflow) or drop
``availableNow`` for a query that runs on. Spark's file sink and the checkpoint together make
every record land exactly once, also when a run fails halfway and is started again.

Without LOG_DIR a small sample log dir is generated in a temporary directory, read, then
grown with :func:`kafka_segments_ds.write_table` (``mode="append"``: new segments after the
existing ones) and read again: the second run reads only the new records. Needs Java 17+ and
pyspark 4.1+ (``maxOffsetsPerTrigger``, which splits a run into bounded micro-batches, needs
pyspark 4.2+ and is left out here).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir

# starts 2 s before 2023-11-15T00:00:00Z: the sample's records span two dates
SAMPLE_START_TIMESTAMP = 1_700_006_400_000 - 2_000
APPENDED = 250  # records the sample gains between the two runs


def write_sample(root: Path) -> Path:
    return write_sample_log_dir(
        root,
        records_per_partition=300,
        segment_bytes=16 * 1024,
        start_timestamp=SAMPLE_START_TIMESTAMP,
    )


def grow_sample(log_dir: Path) -> None:
    """Append records to topic ``orders``, as an archiver copying new segments would."""
    table = pa.table(
        {
            "value": [b"appended-%d" % i for i in range(APPENDED)],
            "partition": pa.array([i % 2 for i in range(APPENDED)], pa.int32()),
            "timestamp": pa.array(
                [SAMPLE_START_TIMESTAMP + 86_400_000 + i for i in range(APPENDED)],
                pa.timestamp("ms", tz="UTC"),
            ),
        }
    )
    ksd.write_table(table, log_dir, mode="append", topic="orders")


def run_once(spark: Any, log_dir: Path, out_dir: Path) -> int:
    """One incremental run; returns the records it wrote."""
    from pyspark.sql import functions as F

    stream = (
        spark.readStream.format("kafkasegments")
        .option(
            "startingOffsets", "earliest"
        )  # the first run; later runs go on from the checkpoint
        .load(str(log_dir))
        .withColumn("dt", F.date_format(F.col("timestamp"), "yyyy-MM-dd"))
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out_dir))
        .option("checkpointLocation", str(out_dir / "_checkpoint"))
        .partitionBy("topic", "dt")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def main(argv: list[str]) -> int:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers run this interpreter
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    out_dir = Path(argv[0] if argv else "stream-parquet").resolve()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafka-segments-stream-to-parquet")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        if len(argv) > 1:
            written = run_once(spark, Path(argv[1]).resolve(), out_dir)
            print(f"run: {written} new records")
        else:
            with tempfile.TemporaryDirectory(prefix="kafka-sample-") as tmp:
                log_dir = write_sample(Path(tmp) / "logs")
                first = run_once(spark, log_dir, out_dir)
                print(f"run 1: {first} new records")
                grow_sample(log_dir)
                second = run_once(spark, log_dir, out_dir)
                print(f"run 2 (after appending {APPENDED}): {second} new records")
                archived = spark.read.parquet(str(out_dir)).count()
                total = ksd.read_table(str(log_dir), columns=["offset"]).num_rows
                print(f"archived {archived} records; the log dir holds {total}")
        dates = (
            spark.read.parquet(str(out_dir)).groupBy("topic", "dt").count().orderBy("topic", "dt")
        )
        for row in dates.collect():
            print(f"  topic={row.topic} dt={row.dt}: {row['count']}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
