"""Spark reads of a segment another process is appending to: whole-batch prefixes, no error.

Uses the appender of tests/support/appender.py (batches written in four pieces, indexes
written in place, optionally into a preallocated zero-filled ``.log``) in lockstep, and reads
through ``spark.read.format("kafkasegments")`` after every piece.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import appender as concurrent

BATCHES = 3


@pytest.mark.parametrize("preallocate", [False, True], ids=["append", "preallocated"])
def test_spark_reads_of_a_live_segment_are_whole_batch_prefixes(
    spark, tmp_path: Path, preallocate: bool
) -> None:  # type: ignore[no-untyped-def]
    directory = tmp_path / "live-0"
    directory.mkdir()
    appender = concurrent.start_appender(directory, BATCHES, preallocate, lockstep=True)
    assert appender.stdin is not None and appender.stdout is not None
    seen = []
    try:
        for _ in range(BATCHES * 4):
            appender.stdin.write("\n")
            appender.stdin.flush()
            appender.stdout.readline()
            got = [
                (row["offset"], bytes(row["value"]))
                for row in spark.read.format("kafkasegments")
                .load(str(directory))
                .select("offset", "value")
                .orderBy("offset")
                .collect()
            ]
            assert got == concurrent.expected_rows(len(got))
            seen.append(len(got))
    finally:
        appender.stdin.close()
        appender.wait()
    assert appender.returncode == 0
    records = concurrent.RECORDS
    assert seen == [records * (i // 4 + (i % 4 == 3)) for i in range(BATCHES * 4)]
