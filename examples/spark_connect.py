"""Read and write Kafka log segments through Spark Connect.

Run: ``python examples/spark_connect.py [sc://HOST:PORT [LOG_DIR]]``. Without a URL it starts
Spark's own local Connect server in this process (``remote("local[2]")``, on its default port
15002); without LOG_DIR it generates a small sample log dir in a temporary directory. Needs
Java 17+ and the Connect client (``pip install "pyspark[connect]"``, in the test extra).

What the Connect *server* needs: kafka-segments-ds installed in the Python its workers run
(``spark.pyspark.python`` / ``PYSPARK_PYTHON`` of the server, else ``python3`` on its PATH).
Then ``spark.read.format("kafkasegments")`` works with no setup, as here: the server finds the
source itself (Spark lists the ``pyspark_*`` modules of that Python once, when the server first
resolves a Python data source). ``kafka_segments_ds.register(spark)`` from the client registers
it by hand, for a server whose package was installed after that lookup; it is safe to call
again. Paths are paths on the server's machines.

Prints the record count per topic and partition, writes the ``orders`` topic to a new log dir
as topic ``orders-copy`` and prints the count read back.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else "local[2]"
    if not url.startswith("sc://"):
        # the local server's Python workers run this interpreter (the one with the package)
        os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory(prefix="kafka-connect-") as tmp:
        log_dir = argv[2] if len(argv) > 2 else str(write_sample_log_dir(Path(tmp) / "logs"))
        target = str(Path(tmp) / "copy")
        spark = SparkSession.builder.remote(url).getOrCreate()
        try:
            df = spark.read.format("kafkasegments").load(log_dir)
            counts = df.groupBy("topic", "partition").count().orderBy("topic", "partition")
            for row in counts.collect():
                print(f"{row['topic']}-{row['partition']}: {row['count']} records")
            orders = df.where("topic = 'orders'").select("key", "value", "timestamp")
            (
                orders.write.format("kafkasegments")
                .mode("append")
                .option("topic", "orders-copy")
                .option("numPartitions", "2")
                .save(target)
            )
            ksd.register(spark)  # by hand: not needed here, and harmless
            back = spark.read.format("kafkasegments").load(target)
            partitions = back.select("partition").distinct().count()
            print(f"orders-copy: {back.count()} records in {partitions} partitions")
        finally:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
