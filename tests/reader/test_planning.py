"""Tests for kafka_segments_ds.planning: segment pruning, index-derived byte ranges, and that
planning with or without index files reads the same rows."""

from __future__ import annotations

import functools
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_segments_ds import InvalidOptionError, NoKafkaDataError, read_table
from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.planning import Plan, plan_scan
from kafka_segments_ds.reader import read_task
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.compression import CompressionType
from kafka_segments_ds.records.legacy import decode_legacy_message, expand_wrapper
from kafka_segments_ds.scan_task import ScanTask

SAMPLE_PARTITIONS = (("legacy.events", 0), ("metrics-v1", 0), ("orders", 0), ("orders", 1))
# last offset of each sample partition: conftest writes 800 records per partition (test_samples
# checks the count through the checkpoints)
SAMPLE_LAST = 799


def plan(path: str | Path | list[str], **options: Any) -> Plan:
    target = [str(p) for p in path] if isinstance(path, list) else str(path)
    return plan_scan(target, parse_read_options(options), read_records=read_task)


def spec(topic: str, partition: int, number: int) -> str:
    return f'{{"{topic}":{{"{partition}":{number}}}}}'


def range_options(topic: str, partition: int, start: int | None, end: int | None) -> dict[str, str]:
    options = {}
    if start is not None:
        options["startingOffsets"] = spec(topic, partition, start)
    if end is not None:
        options["endingOffsets"] = spec(topic, partition, end)
    return options


def entries_of(segment: SegmentRef) -> list[tuple[int, int, int]]:
    """(position, first offset, last offset) of every entry of a segment, by a header walk."""
    return _entries(segment.path, segment.size)


@functools.lru_cache(maxsize=256)
def _entries(path: str, size: int) -> list[tuple[int, int, int]]:
    data = Path(path).read_bytes()
    assert len(data) == size
    table = scan_entries(data)
    assert table.valid_bytes == len(data)
    out = []
    for p, magic, last in zip(
        table.positions.tolist(), table.magics.tolist(), table.last_offsets.tolist(), strict=True
    ):
        if magic == 2:
            first = int.from_bytes(data[p : p + 8], "big", signed=True)
        else:
            message = decode_legacy_message(data, p)
            first = expand_wrapper(message)[0].offset if message.compression else message.offset
        out.append((p, first, last))
    return out


def check_task_bounds(task: ScanTask) -> None:
    """The byte range of a task holds every entry with an offset in [start, end)."""
    entries = entries_of(task.segment)
    positions = {p for p, _, _ in entries}
    start, end = task.start_offset, task.end_offset
    assert task.start_position == 0 or task.start_position in positions
    assert task.end_position is None or task.end_position in positions
    if task.end_position is not None:
        assert task.end_position > task.start_position
    for p, first, last in entries:
        wanted = (start is None or last >= start) and (end is None or first < end)
        if wanted:
            assert task.start_position <= p, (task, p)
            assert task.end_position is None or p < task.end_position, (task, p)


def bases(directory: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in directory.glob("*.log"))


# --------------------------------------------------------------------------------------------
# whole-partition plans
# --------------------------------------------------------------------------------------------


def test_full_plan_has_one_task_per_segment(sample_dir: Path) -> None:
    result = plan(sample_dir)
    assert [(p.topic, p.partition) for p in result.partitions] == list(SAMPLE_PARTITIONS)
    expected = [
        (topic, partition, base)
        for topic, partition in SAMPLE_PARTITIONS
        for base in bases(sample_dir / f"{topic}-{partition}")
    ]
    assert [(t.topic, t.partition, t.segment.base_offset) for t in result.tasks] == expected
    for task in result.tasks:
        assert task.start_position == 0
        assert task.end_position is None
        assert task.start_offset is None
        assert task.end_offset is None
        assert task.aborted == ()
        assert Path(task.segment.path).parent.name == f"{task.topic}-{task.partition}"
    last_flags = [t.next_base_offset is None for t in result.tasks]
    assert sum(last_flags) == len(SAMPLE_PARTITIONS)
    for i, task in enumerate(result.tasks):
        following = result.tasks[i + 1] if i + 1 < len(result.tasks) else None
        if following is None or (following.topic, following.partition) != (
            task.topic,
            task.partition,
        ):
            assert task.next_base_offset is None
        else:
            assert task.next_base_offset == following.segment.base_offset


def test_plan_and_tasks_pickle(sample_dir: Path) -> None:
    result = plan(
        sample_dir,
        assign='{"orders":[0]}',
        startingOffsets=spec("orders", 0, 300),
        isolationLevel="read_committed",
    )
    again = pickle.loads(pickle.dumps(result))
    assert again.tasks == result.tasks
    assert again.partitions == result.partitions


def test_selection_prunes_partitions(sample_dir: Path) -> None:
    result = plan(sample_dir, subscribePattern="orders")
    assert {(t.topic, t.partition) for t in result.tasks} == {("orders", 0), ("orders", 1)}
    assert [(p.topic, p.partition) for p in result.partitions] == [("orders", 0), ("orders", 1)]
    result = plan(sample_dir, assign='{"metrics-v1":[0]}')
    assert {(t.topic, t.partition) for t in result.tasks} == {("metrics-v1", 0)}


def test_empty_dir_plans_nothing_with_allow_empty(tmp_path: Path) -> None:
    with pytest.raises(NoKafkaDataError, match=f"^{tmp_path}: no Kafka log segments"):
        plan(tmp_path)
    result = plan(tmp_path, allowEmpty="true")
    assert result.tasks == ()
    assert result.partitions == ()


# --------------------------------------------------------------------------------------------
# offset ranges
# --------------------------------------------------------------------------------------------


def overlapping(directory: Path, start: int | None, end: int | None) -> list[int]:
    """Bases of the segments that can hold an offset in [start, end)."""
    segs = bases(directory)
    out = []
    for i, base in enumerate(segs):
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        if start is not None and nxt is not None and nxt <= start:
            continue
        if end is not None and base >= end:
            continue
        out.append(base)
    return out


@pytest.mark.parametrize(("topic", "partition"), SAMPLE_PARTITIONS)
def test_tasks_only_for_overlapping_segments(sample_dir: Path, topic: str, partition: int) -> None:
    directory = sample_dir / f"{topic}-{partition}"
    segs = bases(directory)
    ranges = [
        (segs[1], segs[2]),
        (segs[1] - 1, segs[2]),
        (segs[1], segs[2] + 1),
        (segs[1] + 1, segs[2] - 1),
        (segs[2], None),
        (None, segs[1]),
        (None, segs[1] + 1),
        (0, 1),
        (SAMPLE_LAST, None),
        (SAMPLE_LAST + 1, None),
    ]
    # a start past the log end offset is an error (tests/reader/test_ranges.py), not an empty plan
    with pytest.raises(InvalidOptionError, match="is after the ending offset"):
        plan(directory, **range_options(topic, partition, SAMPLE_LAST + 50, SAMPLE_LAST + 60))
    for start, end in ranges:
        result = plan(directory, **range_options(topic, partition, start, end))
        assert [t.segment.base_offset for t in result.tasks] == overlapping(
            directory, start, end
        ), (start, end)
        for task in result.tasks:
            assert task.start_offset == start
            assert task.end_offset == end
            check_task_bounds(task)


def test_empty_ranges_plan_no_task(sample_dir: Path) -> None:
    directory = sample_dir / "orders-0"
    assert plan(directory, **range_options("orders", 0, 10, 10)).tasks == ()
    with pytest.raises(
        InvalidOptionError, match="Beginning offset 20 is after the ending offset 10"
    ):
        plan(directory, **range_options("orders", 0, 20, 10))


def test_the_index_narrows_byte_ranges(sample_dir: Path) -> None:
    """The sample's indexes have entries, so some ranges start or end inside a segment."""
    narrowed_start = narrowed_end = 0
    for topic, partition in SAMPLE_PARTITIONS:
        directory = sample_dir / f"{topic}-{partition}"
        segs = bases(directory)
        for i in range(len(segs) - 1):
            start = (segs[i] + segs[i + 1]) // 2 + 5
            result = plan(directory, **range_options(topic, partition, start, start + 3))
            for task in result.tasks:
                check_task_bounds(task)
                narrowed_start += task.start_position > 0
                narrowed_end += task.end_position is not None
    assert narrowed_start > 0
    assert narrowed_end > 0


@pytest.mark.parametrize("interval", [1, 150])
def test_dense_and_sparse_indexes(make_partition: Callable[..., Any], interval: int) -> None:
    part = make_partition("dense-0", segment_bytes=1500, index_interval_bytes=interval)
    for i in range(40):
        part.batch(
            [i] * (1 + i % 4), compression=CompressionType.LZ4 if i % 3 else CompressionType.NONE
        )
    directory = part.close()
    full = read_table(str(directory), columns=["offset", "value"])
    last = full.column("offset")[-1].as_py()
    for start in range(0, last + 2, 9):
        for end in (start + 1, None) if start % 2 else (start + 11,):
            result = plan(directory, **range_options("dense", 0, start, end))
            for task in result.tasks:
                check_task_bounds(task)
            got = read_table(
                str(directory), columns=["offset", "value"], **range_options("dense", 0, start, end)
            )
            expected = full.filter(
                pc.and_(
                    pc.greater_equal(full.column("offset"), start),
                    pc.less(full.column("offset"), end if end is not None else last + 1),
                )
            )
            assert got.equals(expected), (start, end)


def test_damaged_indexes_are_ignored_safely(sample_dir: Path, tmp_path: Path) -> None:
    """Zero-filled (preallocated) and out-of-range index entries must not lose rows."""
    copy = tmp_path / "orders-1"
    shutil.copytree(sample_dir / "orders-1", copy)
    logs = sorted(copy.glob("*.log"))
    # a preallocated, never-written index
    logs[1].with_suffix(".index").write_bytes(b"\x00" * 800)
    # entries pointing past the end of the .log
    size = logs[2].stat().st_size
    logs[2].with_suffix(".index").write_bytes(
        (5).to_bytes(4, "big")
        + (size + 10).to_bytes(4, "big")
        + (9).to_bytes(4, "big")
        + (size + 900).to_bytes(4, "big")
    )
    reference = read_table(str(sample_dir / "orders-1"), columns=["offset", "value"])
    segs = bases(copy)
    for start, end in ((segs[1] + 3, segs[2] + 3), (segs[2] + 1, segs[2] + 4), (None, segs[3])):
        for task in plan(copy, **range_options("orders", 1, start, end)).tasks:
            check_task_bounds(task)
        got = read_table(
            str(copy), columns=["offset", "value"], **range_options("orders", 1, start, end)
        )
        expected = reference.filter(
            pc.and_(
                pc.greater_equal(reference.column("offset"), start or 0),
                pc.less(reference.column("offset"), end),
            )
        )
        assert got.equals(expected), (start, end)


# --------------------------------------------------------------------------------------------
# the same rows with and without index files
# --------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    which=st.sampled_from(SAMPLE_PARTITIONS),
    start=st.one_of(st.none(), st.integers(0, SAMPLE_LAST + 1)),  # up to the log end offset
    length=st.one_of(st.none(), st.integers(0, 300)),
)
def test_plans_with_and_without_indexes_read_the_same_rows(
    sample_dir: Path,
    sample_dir_without_indexes: Path,
    sample_table: pa.Table,
    which: tuple[str, int],
    start: int | None,
    length: int | None,
) -> None:
    topic, partition = which
    end = None if length is None else (start or 0) + length
    options = range_options(topic, partition, start, end)
    name = f"{topic}-{partition}"
    indexed = plan(sample_dir / name, **options)
    bare = plan(sample_dir_without_indexes / name, **options)
    assert [t.segment.base_offset for t in indexed.tasks] == [
        t.segment.base_offset for t in bare.tasks
    ]
    for task in bare.tasks:
        assert task.segment.index_path is None
        assert task.segment.timeindex_path is None
        assert task.start_position == 0
        assert task.end_position is None
    for task in indexed.tasks:
        check_task_bounds(task)
    columns = [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    got = read_table(str(sample_dir / name), columns=columns, **options)
    got_bare = read_table(str(sample_dir_without_indexes / name), columns=columns, **options)
    assert got.equals(got_bare)
    mask = pc.and_(
        pc.equal(sample_table.column("topic"), topic),
        pc.equal(sample_table.column("partition"), partition),
    )
    off = sample_table.column("offset")
    if start is not None:
        mask = pc.and_(mask, pc.greater_equal(off, start))
    if end is not None:
        mask = pc.and_(mask, pc.less(off, end))
    assert got.equals(sample_table.filter(mask).select(columns))


# --------------------------------------------------------------------------------------------
# timestamps and transactions at plan level
# --------------------------------------------------------------------------------------------


def test_starting_timestamp_becomes_a_starting_offset(
    sample_dir: Path, sample_dir_without_indexes: Path
) -> None:
    table = read_table(str(sample_dir / "metrics-v1-0"), columns=["offset", "timestamp"])
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    for i in (0, 137, 420, 799):
        target = micros[i] // 1000
        for root in (sample_dir, sample_dir_without_indexes):
            result = plan(root / "metrics-v1-0", startingTimestamp=target)
            # metrics-v1 timestamps increase by 10 ms per record
            assert {t.start_offset for t in result.tasks} == {i}
            assert result.tasks[0].segment.base_offset <= i
            for task in result.tasks:
                if root == sample_dir:
                    check_task_bounds(task)


def test_read_committed_attaches_aborted_spans(sample_dir: Path) -> None:
    result = plan(sample_dir / "orders-1", isolationLevel="read_committed")
    spans = {span for task in result.tasks for span in task.aborted}
    assert len(spans) == 1
    ((producer, first, last),) = spans
    assert producer == 4242
    assert first < last
    for task in result.tasks:
        nxt = [
            t.segment.base_offset
            for t in result.tasks
            if t.segment.base_offset > task.segment.base_offset
        ]
        holds = last >= task.segment.base_offset and (not nxt or first < min(nxt))
        assert (task.aborted != ()) == holds
    assert all(t.aborted == () for t in plan(sample_dir / "orders-1").tasks)


def test_aborted_spans_from_markers_equal_the_txnindex(sample_dir: Path, tmp_path: Path) -> None:
    for partition in (0, 1):
        copy = tmp_path / f"orders-{partition}"
        shutil.copytree(sample_dir / f"orders-{partition}", copy)
        for path in copy.glob("*.txnindex"):
            path.unlink()
        indexed = plan(sample_dir / f"orders-{partition}", isolationLevel="read_committed")
        from_markers = plan(copy, isolationLevel="read_committed")
        assert [t.segment.base_offset for t in indexed.tasks] == [
            t.segment.base_offset for t in from_markers.tasks
        ]
        assert [t.aborted for t in indexed.tasks] == [t.aborted for t in from_markers.tasks]
        assert any(t.aborted for t in indexed.tasks)


def test_pruning_hints_skip_only_what_cannot_match(sample_dir: Path) -> None:
    """planning.Pruning (the hook for engine filters): bounds narrow tasks, never rows."""
    from kafka_segments_ds.planning import Pruning

    options = parse_read_options()
    full = read_table(str(sample_dir))
    hints = Pruning(
        topics=frozenset({"orders"}), partitions=frozenset({1}), offset_low=100, offset_high=180
    )
    got = plan_scan(str(sample_dir), options, pruning=hints)
    assert {(t.topic, t.partition) for t in got.tasks} == {("orders", 1)}
    rows = [b for t in got.tasks for b in read_task(t, options, ("offset",))]
    offsets = sorted(o for b in rows for o in b.column(0).to_pylist())
    expected = full.filter(
        pc.and_(pc.equal(full["topic"], "orders"), pc.equal(full["partition"], 1))
    )["offset"].to_pylist()
    assert offsets == [o for o in sorted(expected) if 100 <= o < 180]

    metrics = full.filter(pc.equal(full["topic"], "metrics-v1"))
    stamps = [t.timestamp() * 1000 for t in metrics["timestamp"].to_pylist()]
    cutoff = int(sorted(stamps)[len(stamps) * 3 // 4])
    timed = plan_scan(
        str(sample_dir),
        options,
        pruning=Pruning(topics=frozenset({"metrics-v1"}), min_timestamp=cutoff),
    )
    seen = {
        o
        for t in timed.tasks
        for b in read_task(t, options, ("offset",))
        for o in b.column(0).to_pylist()
    }
    wanted = {
        o for o, ts in zip(metrics["offset"].to_pylist(), stamps, strict=True) if ts >= cutoff
    }
    assert wanted <= seen
    assert len(seen) < metrics.num_rows  # the time index let it skip the early batches
