"""Through Spark: impossible ranges reach the driver as errors in Spark's Kafka source words,
and overlapping paths read each segment once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kafka_segments_ds as ksd


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"startingOffsets": '{"orders":{"1":100}}', "endingOffsets": '{"orders":{"1":50}}'},
            "Beginning offset 100 is after the ending offset 50 for topic orders partition 1.",
        ),
        (
            {"startingOffsets": '{"orders":{"0":100000,"1":-2}}'},
            "Beginning offset 100000 is after the ending offset 800 for topic orders partition 0.",
        ),
        (
            {"startingTimestamp": "1700000000001", "endingTimestamp": "1700000000000"},
            "Beginning timestamp 1700000000001 is after the ending timestamp 1700000000000",
        ),
    ],
    ids=["start-after-end", "start-past-log-end", "timestamps"],
)
def test_impossible_range_fails_the_query(
    spark: Any, sample_dir: Path, options: dict[str, str], message: str
) -> None:
    reader = spark.read.format("kafkasegments").option("subscribe", "orders")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception) as info:
        reader.load(str(sample_dir)).collect()
    assert "InvalidOptionError" in str(info.value)
    assert message in str(info.value)


def test_overlapping_paths_count_each_record_once(spark: Any, sample_dir: Path) -> None:
    paths = [str(sample_dir), str(sample_dir / "orders-0"), str(sample_dir / "orders-*")]
    df = spark.read.format("kafkasegments").load(paths)
    expected = ksd.read_table(str(sample_dir), columns=["offset"]).num_rows
    assert df.count() == expected
    assert df.select("topic", "partition", "offset").distinct().count() == expected
