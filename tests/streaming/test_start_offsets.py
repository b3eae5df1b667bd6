"""A stream starts where a batch read of the same options starts: one resolution of
startingTimestamp / startingOffsetsByTimestamp (``planning.resolve_start``) serves both, with
one error for startingOffsetsByTimestampStrategy=error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kafka_segments_ds import InvalidOptionError, read_table
from kafka_segments_ds.options import parse_stream_options
from kafka_segments_ds.streaming import StreamPlanner

# t-0: offsets 0..4 at these timestamps (ms); t-1: offsets 0..1
T0 = (100, 200, 300, 300, 400)
T1 = (150, 350)


@pytest.fixture
def archive(make_partition: Callable[..., Any]) -> str:
    first = make_partition("t-0")
    first.batch(T0[:2])
    first.batch(T0[2:])
    first.close()
    second = make_partition("t-1")
    second.batch(T1)
    return str(second.close().parent)


def _stream_start(archive: str, **options: str) -> dict[tuple[str, int], int]:
    return StreamPlanner([archive], *parse_stream_options(options)).initial_offsets()


def _batch_firsts(archive: str, **options: str) -> dict[tuple[str, int], int]:
    """The first offset a batch read of ``options`` reads in each partition it reads."""
    table = read_table(archive, columns=["topic", "partition", "offset"], **options)
    firsts: dict[tuple[str, int], int] = {}
    for row in table.to_pylist():
        firsts.setdefault((row["topic"], row["partition"]), row["offset"])
    return firsts


@pytest.mark.parametrize(
    ("timestamp", "starts"),
    [
        (0, {("t", 0): 0, ("t", 1): 0}),
        (100, {("t", 0): 0, ("t", 1): 0}),
        (101, {("t", 0): 1, ("t", 1): 0}),
        (300, {("t", 0): 2, ("t", 1): 1}),
        (351, {("t", 0): 4, ("t", 1): 2}),  # t-1 has no record that new: its latest offset
        (400, {("t", 0): 4, ("t", 1): 2}),
    ],
)
def test_a_stream_starts_where_a_batch_read_starts(
    archive: str, timestamp: int, starts: dict[tuple[str, int], int]
) -> None:
    options = {"startingTimestamp": str(timestamp), "startingOffsetsByTimestampStrategy": "latest"}
    assert _stream_start(archive, **options) == starts
    latest = {("t", 0): len(T0), ("t", 1): len(T1)}
    assert _batch_firsts(archive, **options) == {
        key: start for key, start in starts.items() if start < latest[key]
    }


def test_no_record_that_new_is_one_error_for_both(archive: str) -> None:
    message = "no offset of t-0 has a timestamp >= 401 (startingOffsetsByTimestampStrategy=error)"
    options = {"startingTimestamp": "401", "startingOffsetsByTimestampStrategy": "error"}
    with pytest.raises(InvalidOptionError) as batch:
        _batch_firsts(archive, **options)
    with pytest.raises(InvalidOptionError) as stream:
        _stream_start(archive, **options)
    assert str(batch.value) == str(stream.value) == message


def test_earliest_and_latest_by_timestamp(archive: str) -> None:
    options = {"startingOffsetsByTimestamp": '{"t":{"0":-2,"1":-1}}'}
    assert _stream_start(archive, **options) == {("t", 0): 0, ("t", 1): 2}
    assert _batch_firsts(archive, **options) == {("t", 0): 0}
    per_partition = {"startingOffsetsByTimestamp": '{"t":{"0":201,"1":-2}}'}
    assert _stream_start(archive, **per_partition) == {("t", 0): 2, ("t", 1): 0}
    assert _batch_firsts(archive, **per_partition) == {("t", 0): 2, ("t", 1): 0}
