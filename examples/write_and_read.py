"""Write a Spark DataFrame as Kafka log segments, then read them back.

Run: ``python examples/write_and_read.py [TARGET_LOG_DIR]``. Without a target, a temporary
directory is used. Needs Java 17+ and pyspark 4.1+; starts a local[2] SparkSession (UI off).

Builds a DataFrame of 2,000 "sensor readings" (a string key, a JSON value, an event time and a
header), writes it with ``df.write.format("kafkasegments").mode("append")`` into topic
``readings`` with 3 partitions (rows are spread by Kafka's murmur2 hash of the key), lz4 batches,
and small segments so that rolls happen; then shows the files of one partition directory and reads
the topic back with ``spark.read.format("kafkasegments")``: per partition the record count and
offset range (offsets start at 0 and are contiguous), and that every input row came back.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import kafka_segments_ds as ksd

ROWS = 2000
PARTITIONS = 3


def main(argv: list[str]) -> int:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must run this interpreter
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory(prefix="kafka-written-") as tmp:
        target = argv[1] if len(argv) > 1 else tmp
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("kafka-segments-write-example")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        try:
            spark.sparkContext.setLogLevel("ERROR")
            ksd.register(spark)
            readings = spark.range(0, ROWS, 1, 4).selectExpr(
                "concat('sensor-', cast(id % 17 as string)) AS key",
                "to_json(named_struct('id', id, 'celsius', round(15 + (id % 100) / 10.0, 1)))"
                " AS value",
                "timestamp_millis(1700000000000 + id * 1000) AS timestamp",
                "array(named_struct('key', 'site', 'value', cast('lab-a' AS binary))) AS headers",
            )
            (
                readings.write.format("kafkasegments")
                .mode("append")
                .option("topic", "readings")
                .option("numPartitions", PARTITIONS)
                .option("compression", "lz4")
                .option("segmentBytes", 4096)
                .save(target)
            )
            logs = sorted(p.name for p in (Path(target) / "readings-0").glob("*.log"))
            print(f"readings-0: {len(logs)} segments, first {logs[0]}, last {logs[-1]}")

            back = spark.read.format("kafkasegments").option("includeHeaders", "true").load(target)
            stats = (
                back.groupBy("partition").agg({"offset": "max", "*": "count"}).orderBy("partition")
            )
            print("\npartition  records  offsets")
            for row in stats.collect():
                print(f"{row['partition']:>9} {row['count(1)']:>8}  0..{row['max(offset)']}")
            sent = readings.selectExpr("key", "value")
            got = back.selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
            missing = sent.exceptAll(got).count() + got.exceptAll(sent).count()
            print(f"\nrows written {ROWS}, read back {back.count()}, differing {missing}")
            first = (
                back.where("partition = 0 AND offset = 0")
                .selectExpr("CAST(value AS STRING) AS value", "headers[0].key AS h")
                .first()
            )
            print(f"readings-0@0: {first['value']} header {first['h']}")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
