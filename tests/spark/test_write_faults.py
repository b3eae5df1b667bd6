"""Writer faults in Spark: a Python worker killed mid-task, the driver dying before or during
the commit. The target is unchanged or complete, never partial; re-running gives exactly the
expected logs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kafka_segments_ds import CommitInProgressError, read_table, recover

ROWS = 3000


def listing(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def expected_values(start: int, count: int) -> list[bytes]:
    return [b"row-%06d" % i for i in range(start, start + count)]


def check_complete(root: Path, topic: str, count: int) -> None:
    got = read_table(root, subscribe=topic)
    assert got.column("offset").to_pylist() == list(range(count))
    assert got.column("value").to_pylist() == expected_values(0, count)


def _frame(spark, start: int, count: int):  # type: ignore[no-untyped-def]
    return spark.range(start, start + count, 1, 3).selectExpr(
        "cast(format_string('row-%06d', id) as binary) as value"
    )


def test_worker_killed_mid_task_leaves_target_unchanged_and_rerun_completes(
    spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.functions import udf

    _frame(spark, 0, 100).write.format("kafkasegments").mode("append").option(
        "topic", "other"
    ).save(str(tmp_path))
    before = listing(tmp_path)

    @udf("binary")
    def killing(value: bytes) -> bytes:
        if value == b"row-002500":  # in the last Spark partition, after others wrote
            os.kill(os.getpid(), 9)
        return value

    doomed = _frame(spark, 0, ROWS).select(killing("value").alias("value"))
    with pytest.raises(Exception):  # noqa: B017 - Spark wraps the worker crash in its own errors
        doomed.write.format("kafkasegments").mode("append").option("topic", "t").save(str(tmp_path))
    assert listing(tmp_path) == before
    assert sorted(os.listdir(tmp_path)) == ["other-0"]  # no staging left
    _frame(spark, 0, ROWS).write.format("kafkasegments").mode("append").option("topic", "t").save(
        str(tmp_path)
    )
    check_complete(tmp_path, "t", ROWS)
    assert {k: v for k, v in listing(tmp_path).items() if k.startswith("other-")} == before


# Spark runs a Python data source's commit in a Python worker it starts, not in the driver's
# Python process, so the fault goes in through sitecustomize (every interpreter of the job runs
# it). The "driver dies" by killing the driver's process group (driver and JVM) from there.
SITECUSTOMIZE = textwrap.dedent(
    """
    import os, signal
    WHERE = os.environ.get("KSD_TEST_FAULT")
    if WHERE:
        from kafka_segments_ds.writer import commit

        def vanish(*args):
            # the driver's process group holds the driver and its JVM; then this worker
            os.killpg(os.getpgid(int(os.environ["KSD_DRIVER_PID"])), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)

        class DyingFs:
            # the real filesystem until half of the commit's file moves are done
            def __init__(self, inner, moves):
                self.inner, self.left = inner, moves // 2

            def __getattr__(self, name):
                return getattr(self.inner, name)

            def move(self, source, target):
                if not source.endswith(".tmp"):
                    if self.left == 0:
                        vanish()
                    self.left -= 1
                self.inner.move(source, target)

        real_apply = commit.apply_journal
        if WHERE == "before-journal":
            commit._write_journal = vanish
        else:
            commit.apply_journal = lambda fs, staging, journal: real_apply(
                DyingFs(fs, len(journal["moves"])), staging, journal
            )
    """
)

DRIVER = textwrap.dedent(
    """
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["KSD_DRIVER_PID"] = str(os.getpid())  # inherited by the JVM and its workers
    from pyspark.sql import SparkSession
    import kafka_segments_ds

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    kafka_segments_ds.register(spark)
    df = spark.range(0, ROWS, 1, 3).selectExpr(
        "cast(format_string('row-%06d', id) as binary) as value")
    df.write.format("kafkasegments").mode("overwrite").option("topic", "t") \\
        .option("numPartitions", 1).option("segmentBytes", 8192).save(sys.argv[1])
    """
).replace("ROWS", str(ROWS))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["before-journal", "mid-publish"])
def test_driver_dies_during_commit(spark, tmp_path: Path, where: str) -> None:  # type: ignore[no-untyped-def]
    _frame(spark, 0, 500).write.format("kafkasegments").mode("append").option("topic", "t").option(
        "segmentBytes", 8192
    ).save(str(tmp_path))
    before = listing(tmp_path)
    hooks = tmp_path.parent / f"hooks-{where}"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    script = hooks / "driver.py"
    script.write_text(DRIVER)
    path = os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": path,
             "KSD_TEST_FAULT": where},
        start_new_session=True,  # its own process group, killed as a whole
    )  # fmt: skip
    assert done.returncode == -9, done.stderr[-3000:]
    if where == "before-journal":
        # nothing decided: the old log is intact and readable; staging is invisible
        assert {k: v for k, v in listing(tmp_path).items() if k.startswith("t-")} == before
        check_complete(tmp_path, "t", 500)
        assert recover(tmp_path)[0].startswith("removed abandoned staging")
        assert listing(tmp_path) == before
    else:
        # decided but half published: readers refuse until recover finishes the commit
        with pytest.raises(CommitInProgressError):
            read_table(tmp_path)
        assert recover(tmp_path)[0].startswith("finished commit")
        check_complete(tmp_path, "t", ROWS)
    assert sorted(os.listdir(tmp_path)) == ["t-0"]
    # re-running the job gives exactly the expected logs
    _frame(spark, 0, ROWS).write.format("kafkasegments").mode("overwrite").option(
        "topic", "t"
    ).option("numPartitions", 1).option("segmentBytes", 8192).save(str(tmp_path))
    check_complete(tmp_path, "t", ROWS)
