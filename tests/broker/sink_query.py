"""A streaming query archiving topics of a broker (Spark's Kafka source into the kafkasegments
sink), run in a process of its own by test_broker_sink.py and bench_sink.py.

Usage: python sink_query.py BOOTSTRAP TOPICS ARCHIVE CHECKPOINT JARS MODE [MAX_OFFSETS] [CONF]

MODE ``available-now`` runs Trigger.AvailableNow to the end and exits 0, printing
``done <seconds>``; ``forever`` runs a processing-time trigger (200 ms) until killed. JARS:
Spark's Kafka connector and its dependencies, comma-separated. MAX_OFFSETS: the source's
maxOffsetsPerTrigger (0: none). CONF: sink options as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> int:
    bootstrap, topics, archive, checkpoint, jars, mode = sys.argv[1:7]
    max_offsets = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    sink_options = json.loads(sys.argv[8]) if len(sys.argv) > 8 else {}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafkasegments-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.jars", jars)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topics)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
    )
    if max_offsets:
        source = source.option("maxOffsetsPerTrigger", str(max_offsets))
    writer = (
        source.load()
        .writeStream.format("kafkasegments")
        .option("checkpointLocation", checkpoint)
        .options(**sink_options)
    )
    started = time.perf_counter()
    if mode == "available-now":
        query = writer.trigger(availableNow=True).start(archive)
        query.awaitTermination()
        print(f"done {time.perf_counter() - started:.3f}", flush=True)
        spark.stop()
        return 0
    query = writer.trigger(processingTime="200 milliseconds").start(archive)
    print("started", flush=True)
    query.awaitTermination()
    return 1


if __name__ == "__main__":
    sys.exit(main())
