"""An end offset ends a task at the first batch at or past it that the reader keeps: a batch it
drops (DROPMALFORMED: records that do not decode) never ends it, and the batches after it with
offsets below the end are returned (20260601:94). An ``endingOffsets`` read and a rate-limited
micro-batch return what a whole read returns below their end."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_segments_ds import ChecksumError, CorruptSegmentError, read_table
from kafka_segments_ds.options import parse_stream_options
from kafka_segments_ds.records.builder import encode_legacy_message
from kafka_segments_ds.streaming.planner import StreamPlanner
from tests.streaming.test_stream_reader_end import (
    TP,
    batch,
    batch_offsets,
    log_dir,
    streamed,
    undecodable,
)


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.ERROR, logger="kafka_segments_ds")
    yield


def test_ending_offsets_do_not_stop_at_a_dropped_batch(tmp_path: Path) -> None:
    """A 0..2, U 10..10 whose records do not decode, C 4..7, D 8..9: endingOffsets 10 ended the
    read at U and returned 0..2 only."""
    logs, _ = log_dir(tmp_path, batch(0, 2), undecodable(10, 10), batch(4, 7), batch(8, 9))
    rows = [0, 1, 2, *range(4, 10)]
    assert batch_offsets(logs) == rows
    assert batch_offsets(logs, endingOffsets='{"t":{"0":10}}') == rows
    assert batch_offsets(logs, endingOffsets='{"t":{"0":7}}') == [0, 1, 2, 4, 5, 6]
    assert batch_offsets(logs, endingOffsets='{"t":{"0":3}}') == [0, 1, 2]
    assert batch_offsets(logs, startingOffsets='{"t":{"0":1}}', endingOffsets='{"t":{"0":10}}') == [
        1,
        2,
        *range(4, 10),
    ]


def test_a_rate_limited_micro_batch_does_not_stop_at_a_dropped_batch(tmp_path: Path) -> None:
    """The same log with E 10..12 after it: maxOffsetsPerTrigger=10 (max_offsets) cuts the first
    micro-batch at offset 10 (below the latest offset 13, so by offset, not by the tail's
    position). It ended at U and lost 4..9; E, kept, ends it."""
    logs, _ = log_dir(
        tmp_path,
        batch(0, 2),
        undecodable(10, 10),
        batch(4, 7),
        batch(8, 9),
        batch(10, 12),
    )
    assert batch_offsets(logs) == [0, 1, 2, *range(4, 13)]
    options, limits = parse_stream_options({"mode": "DROPMALFORMED"})
    planner = StreamPlanner([str(logs)], options, limits)
    assert planner.next_offsets({TP: 0}) == {TP: 13}
    assert planner.next_offsets({TP: 0}, max_offsets=10) == {TP: 10}
    assert streamed(planner, 0, 10) == [0, 1, 2, *range(4, 10)]
    assert planner.next_offsets({TP: 10}) == {TP: 13}
    assert streamed(planner, 10, 13) == [10, 11, 12]


def test_a_kept_batch_at_the_end_stops_the_read_before_damage_after_it(tmp_path: Path) -> None:
    """The end batch, kept, ends the task: a batch after it whose records do not decode is
    not the read's concern, even in FAILFAST mode."""
    logs, _ = log_dir(tmp_path, batch(0, 2), batch(3, 5), undecodable(6, 6))
    table = read_table(str(logs), endingOffsets='{"t":{"0":3}}')
    assert table.column("offset").to_pylist() == [0, 1, 2]


def legacy(offset: int, **fields: object) -> bytes:
    return encode_legacy_message(
        offset=offset, magic=1, key=b"k", value=b"v%d" % offset, timestamp=1000 + offset, **fields
    )


def test_legacy_ending_offsets_do_not_stop_at_a_dropped_wrapper(tmp_path: Path) -> None:
    """Magic 1: messages 0..2, a checksum-valid gzip wrapper at offset 10 whose payload does
    not decompress (dropped), messages 4..9: endingOffsets 10 returns 0..2 and 4..9."""
    garbage = encode_legacy_message(
        offset=10, magic=1, key=None, value=b"not gzip", timestamp=1010, attributes=1
    )
    logs, _ = log_dir(
        tmp_path, *(legacy(o) for o in range(3)), garbage, *(legacy(o) for o in range(4, 10))
    )
    rows = [0, 1, 2, *range(4, 10)]
    assert batch_offsets(logs) == rows
    assert batch_offsets(logs, endingOffsets='{"t":{"0":10}}') == rows
    assert batch_offsets(logs, endingOffsets='{"t":{"0":5}}') == [0, 1, 2, 4]


def test_failfast_ending_offsets_do_not_judge_the_batch_at_the_end(tmp_path: Path) -> None:
    """A 0..2, U 3..5 whose records do not decode, C 6..8: endingOffsets 3 in FAILFAST mode
    decoded U (81e2fb2) and raised; U ends the task unjudged (were it dropped, FAILFAST would
    raise there: nothing after it is returned either way), as DROPMALFORMED returns 0..2."""
    logs, _ = log_dir(tmp_path, batch(0, 2), undecodable(3, 5), batch(6, 8))
    for mode in ("FAILFAST", "DROPMALFORMED"):
        table = read_table(str(logs), mode=mode, endingOffsets='{"t":{"0":3}}')
        assert table.column("offset").to_pylist() == [0, 1, 2]
    with pytest.raises(CorruptSegmentError, match=r"record length does not fit"):
        read_table(str(logs), endingOffsets='{"t":{"0":4}}')


def test_failfast_ending_offsets_do_not_judge_the_legacy_message_at_the_end(
    tmp_path: Path,
) -> None:
    """Magic 1: messages 0..2, message 3 whose CRC fails, messages 4..5: endingOffsets 3 in
    FAILFAST mode raised at message 3; it ends the task unjudged."""
    bad = bytearray(legacy(3))
    bad[-1] ^= 0x01  # the value's last byte: the CRC fails
    logs, _ = log_dir(tmp_path, *(legacy(o) for o in range(3)), bytes(bad), legacy(4), legacy(5))
    for mode in ("FAILFAST", "DROPMALFORMED"):
        table = read_table(str(logs), mode=mode, endingOffsets='{"t":{"0":3}}')
        assert table.column("offset").to_pylist() == [0, 1, 2]
    with pytest.raises(ChecksumError, match=r"CRC-32 mismatch"):
        read_table(str(logs), endingOffsets='{"t":{"0":4}}')
    assert batch_offsets(logs, endingOffsets='{"t":{"0":6}}') == [0, 1, 2, 4, 5]
