"""Which pyspark the data source takes: 4.0 and later, with no upper bound (a release newer
than the newest tested logs one line when the source is first used); older ones, or none, are
refused with what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kafka_segments_ds.datasource import NEWEST_TESTED_SPARK, check_spark_version

pytestmark = pytest.mark.spark_matrix  # all of it, on every pyspark of the matrix

INSTALL = "pip install 'kafka-segments-ds[spark]' (or use the pyspark 4.0+ your platform provides)"


@pytest.mark.parametrize("version", ["4.0.0", "4.0.5", "4.1.4", "4.2.1", "4.3.0", "4.3.2.dev0"])
def test_tested_releases_run_silently(version: str) -> None:
    assert NEWEST_TESTED_SPARK == (4, 3)
    assert check_spark_version(version) is None


@pytest.mark.parametrize("version", ["4.4.0", "4.4.0rc1", "5.0.0.dev1"])
def test_newer_releases_run_with_one_line(version: str) -> None:
    assert check_spark_version(version) == (
        f"pyspark {version} is newer than the newest release kafka-segments-ds was tested with "
        "(4.3); report any problem"
    )


@pytest.mark.parametrize("version", ["3.5.6", "3.4.0", "2.4.8"])
def test_older_releases_are_refused(version: str) -> None:
    with pytest.raises(ImportError) as caught:
        check_spark_version(version)
    assert str(caught.value) == (
        "the kafkasegments Spark data source needs pyspark 4.0 or later (Python data sources); "
        f"this is pyspark {version}: {INSTALL}"
    )


FIRST_USE = """
import pyspark
pyspark.__version__ = "4.4.1"
import kafka_segments_ds.datasource
from pyspark_kafkasegments import DefaultSource
DefaultSource({"path": "/nowhere"})._source()
import kafka_segments_ds.datasource
"""


def test_a_newer_pyspark_logs_one_line_at_first_use() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FIRST_USE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "pyspark 4.4.1 is newer than the newest release kafka-segments-ds was tested with (4.3); "
        "report any problem"
    ]


NO_PYSPARK = """
import sys
sys.modules["pyspark"] = None  # as if not installed
import kafka_segments_ds as ksd
for use in (lambda: ksd.register(None), lambda: __import__("pyspark_kafkasegments")):
    try:
        use()
    except ModuleNotFoundError as err:
        print(err.name, err, sep=": ")
"""


def test_without_pyspark_the_entry_points_say_what_to_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", NO_PYSPARK], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "pyspark: the kafkasegments Spark data source needs pyspark 4.0 or later, which is not "
        f"installed: {INSTALL}",
        "pyspark: the kafkasegments Spark data source needs pyspark 4.0 or later: "
        "pip install 'kafka-segments-ds[spark]' (or use the pyspark 4.0+ your platform provides)",
    ]
