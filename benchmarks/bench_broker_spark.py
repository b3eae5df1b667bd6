"""The anchor users would pick instead: Spark's own Kafka source reading from a broker, against
kafkasegments reading that broker's log dir, in one SparkSession (issue 20, point 5).

A real Apache Kafka broker (the broker tests' harness, tests/broker/kafka_broker.py and
scripts/kafka.sh) takes ``--records`` records from its Java producer, half lz4 and half
uncompressed, spread over ``--partitions`` partitions of one topic. After a clean stop (logs
flushed) the topic's partition dirs are copied, and the broker starts again. Then, alternating,
``--repeat`` times each:

* (a) ``spark.read.format("kafka")`` from the broker (startingOffsets earliest, endingOffsets
  latest), with Spark's Kafka connector that Maven fetches into ~/.cache/kafka-segments-ds;
* (b) ``spark.read.format("kafkasegments")`` on the copy of the log dir;

after one untimed query of each (class loading, Python workers), each with
``count(*), sum(length(value)), max(offset)`` and with a full materialisation of the
seven columns to the ``noop`` sink. It prints each side's median and spread and the ratio
(goal: kafkasegments at least 3x faster), then checks that the two DataFrames are equal row for
row (topic, partition, offset, key, value, timestamp, timestampType; exceptAll both ways) and
exits 1 if not.

The connector is the release of the installed pyspark's version, or, where Maven Central has
none, the newest release of the same major version below it (printed).

Usage::

    python benchmarks/bench_broker_spark.py [--records 2000000] [--partitions 4]
        [--value-bytes 100] [--repeat 3] [--data DIR] [--connector-version V]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the broker tests' harness
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "broker"))

from kafka_broker import Broker

TOPIC = "bench"
COLUMNS = ("topic", "partition", "offset", "key", "value", "timestamp", "timestampType")
AGGREGATE = ("count(*)", "sum(length(value))", "max(offset)")
CACHE = Path(os.environ.get("KSD_KAFKA_CACHE", Path.home() / ".cache" / "kafka-segments-ds"))
CENTRAL = "https://repo.maven.apache.org/maven2"
CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13"
POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafka-segments-ds</groupId>
  <artifactId>spark-kafka-connector</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


# -- Spark's Kafka connector, fetched with Maven ----------------------------------------------


def _release(version: str) -> tuple[int, ...] | None:
    return (
        tuple(int(p) for p in version.split("."))
        if re.fullmatch(r"\d+\.\d+\.\d+", version)
        else None
    )


def connector_version(pyspark_version: str) -> str:
    """The installed pyspark's version where Maven Central has the connector; else the newest
    release of the same major version below it. Asked of Maven Central once, then kept in the
    cache."""
    chosen = CACHE / f"spark-kafka-for-pyspark-{pyspark_version}"
    if chosen.exists():
        return chosen.read_text().strip()
    group, artifact = CONNECTOR.split(":")
    url = f"{CENTRAL}/{group.replace('.', '/')}/{artifact}/maven-metadata.xml"
    with urllib.request.urlopen(url, timeout=60) as reply:
        listed = re.findall(r"<version>([^<]+)</version>", reply.read().decode())
    want = _release(pyspark_version)
    version = pyspark_version
    if want is not None and pyspark_version not in listed:
        older = [v for v in listed if (r := _release(v)) and r[0] == want[0] and r < want]
        if not older:
            sys.exit(
                f"Maven Central has no {CONNECTOR} for Spark {want[0]}.x up to {pyspark_version}"
            )
        version = max(older, key=lambda v: _release(v) or ())
    CACHE.mkdir(parents=True, exist_ok=True)
    chosen.write_text(version + "\n")
    return version


def connector_jars(version: str) -> list[Path]:
    """The connector and the dependencies pyspark does not ship (kafka-clients, commons-pool2,
    spark-token-provider-kafka), copied by Maven into the cache once."""
    import pyspark

    target = CACHE / f"spark-kafka-{version}"
    stamp = target / ".complete"
    if not stamp.exists():
        if shutil.which("mvn") is None:
            sys.exit("bench_broker_spark: Maven is missing (apt-get install maven)")
        work = Path(tempfile.mkdtemp(prefix="spark-kafka-", dir=CACHE))
        try:
            (work / "pom.xml").write_text(POM.format(version=version))
            subprocess.run(
                [
                    "mvn",
                    "-q",
                    "-B",
                    "-f",
                    str(work / "pom.xml"),
                    "dependency:copy-dependencies",
                    "-DincludeScope=runtime",
                    f"-DoutputDirectory={work / 'jars'}",
                ],
                check=True,
                stdout=sys.stderr,
            )
            shutil.rmtree(target, ignore_errors=True)
            (work / "jars").rename(target)
            stamp.touch()
        finally:
            shutil.rmtree(work, ignore_errors=True)
    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(p for p in target.glob("*.jar") if _artifact(p.name) not in shipped)


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[\w.-]*\.jar$", "", jar)


def session(jars: list[Path]):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench_broker_spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.jars", ",".join(str(j) for j in jars))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# -- the broker and its records -------------------------------------------------------------


def produce(broker: Broker, records: int, partitions: int, value_bytes: int) -> None:
    """Half the records lz4, half uncompressed, record i into partition i mod partitions."""
    broker.create_topic(TOPIC, partitions)
    half = records // 2
    common: dict[str, Any] = dict(value_bytes=value_bytes, batch_size=64 * 1024, linger_ms=20)
    broker.produce(TOPIC, half, compression="lz4", tag="lz4", **common)
    broker.produce(TOPIC, records - half, compression="none", tag="none", **common)


# -- timing ---------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def spread(times: list[float]) -> str:
    return f"median {statistics.median(times):7.2f} s (min {min(times):.2f}, max {max(times):.2f})"


def compare(name: str, repeat: int, kafka: Callable[[], Any], ours: Callable[[], Any]) -> bool:
    """Alternating runs; prints both sides and the ratio. True when both sides answered the
    same every time."""
    times: dict[str, list[float]] = {"kafka": [], "ours": []}
    answers: set[Any] = set()
    for _ in range(repeat):
        for side, fn in (("kafka", kafka), ("ours", ours)):
            seconds, answer = timed(fn)
            times[side].append(seconds)
            answers.add(answer)
    print(f"{name}:")
    print(f"  (a) Spark Kafka source  {spread(times['kafka'])}")
    print(f"  (b) kafkasegments       {spread(times['ours'])}")
    ratio = statistics.median(times["kafka"]) / statistics.median(times["ours"])
    print(f"  ratio kafka/kafkasegments {ratio:.2f}x (goal >= 3x)")
    if len(answers) != 1:
        print(f"  ANSWERS DIFFER: {sorted(map(str, answers))}")
    return len(answers) == 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", type=Path, help="work dir (default: a temporary one, removed)")
    parser.add_argument("--connector-version", help="default: the installed pyspark's version")
    args = parser.parse_args()
    if args.records < 2 or args.partitions < 1 or args.repeat < 1:
        parser.error("--records >= 2, --partitions >= 1, --repeat >= 1")

    import pyspark

    version = args.connector_version or connector_version(pyspark.__version__)
    if version != pyspark.__version__:
        print(f"pyspark {pyspark.__version__}; Spark's Kafka connector {version}")
    jars = connector_jars(version)

    work = args.data or Path(tempfile.mkdtemp(prefix="bench-broker-spark-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = Broker(work / "broker")
    try:
        broker.start()
        started = time.perf_counter()
        produce(broker, args.records, args.partitions, args.value_bytes)
        produced = time.perf_counter() - started
        broker.stop()  # a clean shutdown: every segment flushed
        copy = work / "log-dir"
        shutil.rmtree(copy, ignore_errors=True)
        broker.snapshot(copy, TOPIC)
        broker.start()
        size = sum(p.stat().st_size for p in copy.rglob("*.log"))
        print(
            f"{args.records} records ({args.value_bytes}-byte values, half lz4, half none) in "
            f"{args.partitions} partitions, {size / 1e6:.1f} MB of .log; produced in "
            f"{produced:.1f} s; {load()}"
        )
        spark = session(jars)
        try:
            return run(spark, broker, copy, args.repeat)
        finally:
            spark.stop()
    finally:
        broker.close()
        if args.data is None:
            shutil.rmtree(work, ignore_errors=True)


def run(spark: Any, broker: Broker, copy: Path, repeat: int) -> int:
    def kafka() -> Any:
        return (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
            .select(*COLUMNS)
        )

    def ours() -> Any:
        return spark.read.format("kafkasegments").option("subscribe", TOPIC).load(str(copy))

    def aggregate(df: Callable[[], Any]) -> Callable[[], tuple[int, ...]]:
        return lambda: tuple(df().selectExpr(*AGGREGATE).collect()[0])

    def noop(df: Callable[[], Any]) -> Callable[[], None]:
        return lambda: df().select(*COLUMNS).write.format("noop").mode("overwrite").save()

    # untimed: the first query of each source loads its classes and starts the Python workers
    warm = (aggregate(kafka)(), aggregate(ours)())
    same = warm[0] == warm[1]
    same &= compare(
        "count(*), sum(length(value)), max(offset)", repeat, aggregate(kafka), aggregate(ours)
    )
    same &= compare("all seven columns to the noop sink", repeat, noop(kafka), noop(ours))
    print(f"answers {aggregate(ours)()}; {load()}")

    a, b = kafka().select(*COLUMNS), ours().select(*COLUMNS)
    rows_a, rows_b = a.count(), b.count()
    only_a, only_b = a.exceptAll(b).count(), b.exceptAll(a).count()
    print(
        f"row for row: {rows_a} rows (a), {rows_b} rows (b); {only_a} only in (a), "
        f"{only_b} only in (b)"
    )
    if not same or rows_a != rows_b or only_a or only_b:
        print("FAIL: the two DataFrames differ")
        return 1
    print("equal: the two DataFrames hold the same rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
