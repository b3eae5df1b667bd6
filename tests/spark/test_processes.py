"""Spark as a user runs it, in a fresh process started from a directory outside the checkout:

- auto-registration: a script that never calls ``register`` finds ``kafkasegments`` (Spark's
  lookup lists the top-level ``pyspark_*`` modules of the worker Python);
- ``local-cluster[2,1,1024]``: two executor JVMs with their own Python workers, so the data
  source, its partitions and commit messages are pickled between processes and the commit
  protocol runs with tasks in other processes;
- both read the same topic as a stream too (Trigger.AvailableNow into Parquet);
- ``register`` on a classic session that already has the source is a silent no-op.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

import kafka_segments_ds as ksd

SESSION = """
import json, os, sys
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master(sys.argv[1]).config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
"""

# Reads a log dir and writes one, never calling kafka_segments_ds.register.
READ_AND_WRITE = (
    SESSION
    + """
source, target = sys.argv[2], sys.argv[3]
df = (spark.read.format("kafkasegments").option("subscribe", "orders")
      .option("includeHeaders", "true").load(source))
summary = df.selectExpr("count(*)", "sum(offset)", "sum(length(value))",
                        "count(distinct partition)")
(df.select("key", "value", "timestamp", "headers").repartition(3)
   .write.format("kafkasegments").mode("append").option("topic", "copy")
   .option("numPartitions", "2").save(target))
# the same topic as a stream (Trigger.AvailableNow into Parquet, with a checkpoint)
(spark.readStream.format("kafkasegments").option("subscribe", "orders")
   .option("startingOffsets", "earliest").load(source).select("partition", "offset")
   .writeStream.format("parquet").option("path", target + "-stream")
   .option("checkpointLocation", target + "-checkpoint").trigger(availableNow=True)
   .start().awaitTermination())
streamed = spark.read.parquet(target + "-stream").selectExpr("count(*)", "sum(offset)",
                                                            "count(distinct partition, offset)")
executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
print(json.dumps({"summary": list(summary.first()), "executors": executors,
                  "tasks": df.rdd.getNumPartitions(), "streamed": list(streamed.first())}))
"""
)


def _check_copy(result: dict[str, Any], source: Path, target: Path) -> None:
    orders = ksd.read_table(str(source), subscribe="orders")
    value_bytes = sum(len(v) for v in orders["value"].to_pylist() if v is not None)
    assert result["summary"] == [
        orders.num_rows,
        pc.sum(orders["offset"]).as_py(),
        value_bytes,
        len(set(orders["partition"].to_pylist())),
    ]
    assert result["tasks"] > 2  # several input partitions, spread over the workers
    # the stream: every record once
    assert result["streamed"] == [
        orders.num_rows,
        pc.sum(orders["offset"]).as_py(),
        orders.num_rows,
    ]
    copy = ksd.read_table(str(target))
    assert copy.num_rows == orders.num_rows
    assert set(copy["topic"].to_pylist()) == {"copy"}
    assert sorted(copy["value"].to_pylist(), key=lambda v: (v is None, v)) == sorted(
        orders["value"].to_pylist(), key=lambda v: (v is None, v)
    )
    for partition in (0, 1):
        offsets = copy.filter(pc.equal(copy["partition"], partition))["offset"].to_pylist()
        assert offsets == list(range(len(offsets)))


def test_installed_package_is_visible_to_sparks_lookup(
    tmp_path: Path, script_env: dict[str, str]
) -> None:
    """What Spark's lookup does (pkgutil.iter_modules in the worker Python), from elsewhere."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, pkgutil; "
            "print(json.dumps(sorted(m.name for m in pkgutil.iter_modules() "
            "if m.name.startswith('pyspark_kafka'))))",
        ],
        cwd=tmp_path,
        env=script_env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == ["pyspark_kafkasegments"]
    assert "pyspark_kafkasegments" in {m.name for m in pkgutil.iter_modules()}


def test_lookup_module_is_lazy(tmp_path: Path, script_env: dict[str, str]) -> None:
    """Spark imports pyspark_kafkasegments at every lookup: it must not pull in the package
    (planning, decoders; numpy is pyspark 4.1's own import, so it is not checked)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, pyspark_kafkasegments as m; "
            "print(json.dumps([m.DefaultSource.name(), sorted(k for k in sys.modules "
            "if k.startswith('kafka_segments_ds'))]))",
        ],
        cwd=tmp_path,
        env=script_env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == ["kafkasegments", []]


@pytest.mark.spark_matrix
def test_auto_registration_from_another_directory(
    spark_script: Callable[..., Any], sample_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "copy"
    result = spark_script(READ_AND_WRITE, "local[2]", str(sample_dir), str(target), cwd=tmp_path)
    assert result["executors"] == 0  # local mode: the driver runs the tasks
    _check_copy(result, sample_dir, target)


@pytest.mark.slow
def test_local_cluster_reads_and_writes(
    spark_script: Callable[..., Any], sample_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "copy"
    result = spark_script(
        READ_AND_WRITE, "local-cluster[2,1,1024]", str(sample_dir), str(target), cwd=tmp_path
    )
    assert result["executors"] == 2
    _check_copy(result, sample_dir, target)


def test_register_is_idempotent_on_a_classic_session(spark, sample_dir: Path) -> None:  # type: ignore[no-untyped-def]
    ksd.register(spark)
    ksd.register(spark)
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    assert manager.dataSourceExists("kafkasegments")
    df = spark.read.format("kafkasegments").option("subscribe", "metrics-v1").load(str(sample_dir))
    assert df.count() == ksd.read_table(str(sample_dir), subscribe="metrics-v1").num_rows
