"""A streaming query archiving topics of a broker (Spark's Kafka source into the kafkasegments
sink), run in a process of its own by test_broker_sink.py and bench_sink.py.

Usage: python sink_query.py BOOTSTRAP TOPICS ARCHIVE CHECKPOINT JARS MODE [MAX_OFFSETS] [CONF]

MODE ``available-now`` runs Trigger.AvailableNow to the end and exits 0, printing
``done <seconds>``; ``forever`` runs a processing-time trigger (200 ms) until killed. JARS:
Spark's Kafka connector and its dependencies, comma-separated. MAX_OFFSETS: the source's
maxOffsetsPerTrigger (0: none). CONF: sink options as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_broker_spark.py"


def main() -> int:
    bootstrap, topics, archive, checkpoint, jars, mode = sys.argv[1:7]
    max_offsets = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    sink_options = json.loads(sys.argv[8]) if len(sys.argv) > 8 else {}
    spec = importlib.util.spec_from_file_location("bench_broker_spark", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    spark = bench.session([Path(j) for j in jars.split(",")])  # local[2], the connector jars
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
