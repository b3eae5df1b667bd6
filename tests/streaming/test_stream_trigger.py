"""minOffsetsPerTrigger / maxTriggerDelay of a stream, on the planner and a clock the tests set.

As in Spark's Kafka source (``KafkaMicroBatchStream.delayBatch``: ``lastTriggerMillis`` starts
at 0 on the wall clock), the first trigger of a query is never delayed, whatever the clock
reads; so is the first trigger after a restart from a checkpoint (a new planner). Later
triggers wait while fewer than minOffsetsPerTrigger records are there and maxTriggerDelay has
not passed since the last trigger that was not delayed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_segments_ds.options import parse_stream_options
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.streaming import planner as stream_module
from kafka_segments_ds.streaming.planner import StreamPlanner

TS0 = 1_700_000_000_000
OPTIONS = {"startingOffsets": "earliest", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "10s"}


class Clock:
    """Seconds as ``time.monotonic`` gives them, set by the test: a machine booted ``now``
    seconds ago."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def append(log: Path, first: int, count: int) -> int:
    """``count`` records from offset ``first`` in one batch at the end of ``log``."""
    specs = [RecordSpec(value=b"v%d" % o, timestamp=TS0 + o) for o in range(first, first + count)]
    with log.open("ab") as f:
        f.write(encode_batch(specs, base_offset=first))
    return first + count


def partition(tmp_path: Path) -> tuple[Path, Path]:
    directory = tmp_path / "logs" / "t-0"
    directory.mkdir(parents=True)
    return tmp_path / "logs", directory / "00000000000000000000.log"


@pytest.mark.parametrize("uptime", [0.0, 0.25, 9.999, 3599.0, 1e9])
def test_the_first_trigger_is_due_whatever_the_clock_reads(tmp_path: Path, uptime: float) -> None:
    logs, log = partition(tmp_path)
    append(log, 0, 2)
    planner = StreamPlanner([str(logs)], *parse_stream_options(OPTIONS), clock=Clock(uptime))
    begin = planner.initial_offsets()
    assert begin == {("t", 0): 0}
    assert planner.next_offsets(begin, min_offsets=5) == {("t", 0): 2}  # 2 < 5, yet due


def test_the_default_clock_is_read_when_the_planner_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine up for half a second (time.monotonic() is 0.5): the first trigger is not held
    back for maxTriggerDelay (it was, measured from 0 s, on machines up for less than it)."""
    logs, log = partition(tmp_path)
    append(log, 0, 2)
    monkeypatch.setattr(stream_module.time, "monotonic", lambda: 0.5)
    planner = StreamPlanner([str(logs)], *parse_stream_options(OPTIONS))
    assert planner.next_offsets({("t", 0): 0}, min_offsets=5) == {("t", 0): 2}


def test_later_triggers_wait_for_min_offsets_up_to_max_trigger_delay(tmp_path: Path) -> None:
    logs, log = partition(tmp_path)
    end = append(log, 0, 2)
    clock = Clock(1.0)
    planner = StreamPlanner([str(logs)], *parse_stream_options(OPTIONS), clock=clock)
    first = planner.next_offsets(planner.initial_offsets(), min_offsets=5)
    assert first == {("t", 0): 2}
    end = append(log, end, 2)
    clock.now = 6.0
    assert planner.next_offsets(first, min_offsets=5) == first  # 2 < 5 and 5 s < 10 s
    clock.now = 10.75
    assert planner.next_offsets(first, min_offsets=5) == first  # 9.75 s < 10 s
    end = append(log, end, 3)
    assert planner.next_offsets(first, min_offsets=5) == {("t", 0): 7}  # 5 are there
    end = append(log, end, 1)
    clock.now = 20.5
    assert planner.next_offsets({("t", 0): 7}, min_offsets=5) == {("t", 0): 7}  # 9.75 s
    clock.now = 20.75
    assert planner.next_offsets({("t", 0): 7}, min_offsets=5) == {("t", 0): 8}  # 10 s passed
    # a trigger that finds nothing new once the delay passed still restarts the delay
    clock.now = 31.0
    assert planner.next_offsets({("t", 0): 8}, min_offsets=5) == {("t", 0): 8}
    append(log, end, 1)
    clock.now = 40.75
    assert planner.next_offsets({("t", 0): 8}, min_offsets=5) == {("t", 0): 8}  # 9.75 s since
    clock.now = 41.0
    assert planner.next_offsets({("t", 0): 8}, min_offsets=5) == {("t", 0): 9}


def test_a_restart_from_a_checkpoint_does_not_wait(tmp_path: Path) -> None:
    """A query restarted from its checkpoint plans with a new planner: its first trigger reads
    what is there (Spark's Kafka source starts a restarted query's delay at 0 as well)."""
    logs, log = partition(tmp_path)
    append(log, 0, 3)
    clock = Clock(100.0)
    before = StreamPlanner([str(logs)], *parse_stream_options(OPTIONS), clock=clock)
    assert before.next_offsets({("t", 0): 0}, min_offsets=5) == {("t", 0): 3}
    append(log, 3, 1)
    clock.now = 101.0
    assert before.next_offsets({("t", 0): 3}, min_offsets=5) == {("t", 0): 3}  # waits
    after = StreamPlanner([str(logs)], *parse_stream_options(OPTIONS), clock=clock)
    assert after.next_offsets({("t", 0): 3}, min_offsets=5) == {("t", 0): 4}
