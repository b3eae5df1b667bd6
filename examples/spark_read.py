"""Read Kafka log segments with Spark: ``spark.read.format("kafkasegments")``.

Run: ``python examples/spark_read.py [LOG_DIR]``. Without LOG_DIR a small sample log dir is
generated in a temporary directory. Needs Java 17+ and pyspark 4.1+ (a dependency of
kafka-segments-ds); starts a local[2] SparkSession with the UI off, which takes a few tens of
seconds.

The installed package registers the ``kafkasegments`` source with Spark (the top-level module
``pyspark_kafkasegments``); ``kafka_segments_ds.register(spark)`` does the same by hand and is
harmless when it is already registered. The DataFrame has the columns and rows of
``read_table`` with the same options: here ``subscribe`` (topics ``orders`` and
``metrics-v1``) and ``includeHeaders``. Shows a groupBy count per topic and partition and a
sample of decoded values (``CAST(value AS STRING)``) with their first header.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir

TOPICS = "orders,metrics-v1"


def write_sample(root: Path) -> Path:
    """The small sample this example reads when no log dir is given."""
    return write_sample_log_dir(root, records_per_partition=600, segment_bytes=16 * 1024)


def main(argv: list[str]) -> int:
    # Spark's Python workers must run this interpreter (the one with kafka_segments_ds)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory(prefix="kafka-sample-") as tmp:
        log_dir = argv[1] if len(argv) > 1 else str(write_sample(Path(tmp)))
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("kafka-segments-example")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        try:
            spark.sparkContext.setLogLevel("ERROR")
            ksd.register(spark)
            df = (
                spark.read.format("kafkasegments")
                .option("subscribe", TOPICS)
                .option("includeHeaders", "true")
                .load(log_dir)
            )
            print(f"schema: {df.schema.simpleString()}")
            counts = df.groupBy("topic", "partition").count().orderBy("topic", "partition")
            print("\nrecords per topic-partition:")
            for row in counts.collect():
                print(f"  {row['topic']:<12} {row['partition']:>3} {row['count']:>7}")
            sample = (
                df.where("topic = 'orders'")
                .orderBy("partition", "offset")
                .selectExpr(
                    "partition",
                    "offset",
                    "CAST(key AS STRING) AS key",
                    "CAST(value AS STRING) AS value",
                    "headers[0].key AS header",
                    "CAST(headers[0].value AS STRING) AS header_value",
                )
                .limit(3)
            )
            print("\ndecoded sample:")
            for row in sample.collect():
                print(
                    f"  orders-{row['partition']}@{row['offset']} key={row['key']} "
                    f"{row['header']}={row['header_value']} value={row['value'][:40]!r}"
                )
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
