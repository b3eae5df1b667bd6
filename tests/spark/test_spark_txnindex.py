"""Spark batch reads with read_committed when one segment lost its ``.txnindex``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.transactions import write_interleaved


def test_read_committed_with_a_txnindex_missing(spark, make_partition: Callable[..., Any]) -> None:  # type: ignore[no-untyped-def]
    directory, visible, _ = write_interleaved(make_partition)
    for path in sorted(directory.glob("*.txnindex"))[1::3]:
        path.unlink()
    df = (
        spark.read.format("kafkasegments")
        .option("isolationLevel", "read_committed")
        .option("minPartitions", "4")
        .load(str(directory))
    )
    assert sorted(r.offset for r in df.select("offset").collect()) == visible
