"""Packing scan tasks into input partitions (maxBytesPerPartition, openCostInBytes,
minPartitions): exact contents, offset order, and the reader streaming a partition's tasks."""

from __future__ import annotations

import itertools
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.planning import pack_tasks, plan_partitions, plan_scan
from kafka_segments_ds.reader import coalesce, read_task, read_tasks
from kafka_segments_ds.samples import write_sample_log_dir

KIB = 1024
MIB = 1024 * 1024


def contents(groups: list[range]) -> list[list[int]]:
    return [list(g) for g in groups]


@pytest.mark.parametrize(
    ("sizes", "max_bytes", "open_cost", "min_partitions", "expected"),
    [
        # no open cost: fill up to max_bytes, in order
        ([10, 10, 10, 10], 25, 0, 1, [[0, 1], [2, 3]]),
        ([10, 10, 10, 10], 20, 0, 1, [[0, 1], [2, 3]]),
        ([10, 10, 10, 10], 19, 0, 1, [[0], [1], [2], [3]]),
        # a task larger than the target makes a partition of its own
        ([5, 100, 5, 5], 20, 0, 1, [[0], [1], [2, 3]]),
        # the open cost weighs each task when balancing over minPartitions
        ([1, 1, 1, 1, 1, 1], 1000, 4, 3, [[0, 1], [2, 3], [4, 5]]),
        ([1, 1, 1, 1, 100], 1000, 0, 2, [[0, 1, 2, 3], [4]]),
        ([1, 1, 1, 1, 100], 1000, 50, 2, [[0, 1, 2], [3], [4]]),
        # ... but does not count towards maxBytesPerPartition, which bounds the bytes read
        ([1, 1, 1, 1, 1, 1], 3, 1000, 1, [[0, 1, 2], [3, 4, 5]]),
        # minPartitions lowers the target to total weight // minPartitions
        ([10, 10, 10, 10], 1000, 0, 2, [[0, 1], [2, 3]]),
        ([10, 10, 10, 10], 1000, 0, 4, [[0], [1], [2], [3]]),
        ([10, 10, 10, 10], 1000, 0, 3, [[0], [1], [2], [3]]),
        ([10, 10, 10, 10, 10, 10], 1000, 0, 3, [[0, 1], [2, 3], [4, 5]]),
        # more partitions asked than tasks: one task each
        ([10, 10], 1000, 0, 8, [[0], [1]]),
        # 1,000 segments of 32 KiB, the defaults, 2 cores: one partition per core
        ([32 * KIB] * 1000, 128 * MIB, 4 * MIB, 2, [list(range(500)), list(range(500, 1000))]),
        # 10,000: at most 128 MiB (4,096 segments) read per partition, so 3 partitions, made
        # 4 (a multiple of the parallelism) of 2,500
        (
            [32 * KIB] * 10_000,
            128 * MIB,
            4 * MIB,
            2,
            [list(range(i, i + 2500)) for i in range(0, 10_000, 2500)],
        ),
        ([], 128 * MIB, 4 * MIB, 2, []),
    ],
)
def test_pack_tasks_exact_contents(
    sizes: list[int],
    max_bytes: int,
    open_cost: int,
    min_partitions: int,
    expected: list[list[int]],
) -> None:
    assert contents(pack_tasks(sizes, max_bytes, open_cost, min_partitions)) == expected


@pytest.mark.parametrize("min_partitions", [1, 2, 3, 5, 8, 13, 50])
@pytest.mark.parametrize("open_cost", [0, 7, 4 * MIB])
def test_pack_tasks_meets_min_partitions_and_keeps_order(
    min_partitions: int, open_cost: int
) -> None:
    sizes = [(i * 7919) % 1000 + 1 for i in range(40)]
    groups = pack_tasks(sizes, 128 * MIB, open_cost, min_partitions)
    # every task exactly once, in order
    assert [i for g in groups for i in g] == list(range(40))
    assert len(groups) >= min(min_partitions, len(sizes))
    target = sum(s + open_cost for s in sizes) // min_partitions
    for g in groups:
        assert len(g) == 1 or sum(sizes[i] + open_cost for i in g) <= target
    capped = pack_tasks(sizes, 2000, open_cost, min_partitions)
    assert [i for g in capped for i in g] == list(range(40))
    assert all(len(g) == 1 or sum(sizes[i] for i in g) <= 2000 for g in capped)
    # partitions come in multiples of the parallelism when maxBytesPerPartition sets the count
    needed = -(-sum(sizes) // 2000)
    if needed > min_partitions and min_partitions < len(sizes):
        assert len(capped) >= -(-needed // min_partitions) * min_partitions


def test_pack_tasks_halves_heavy_partitions_to_reach_min_partitions() -> None:
    # the big task alone takes the target, so the small ones would share one partition
    assert contents(pack_tasks([1000, 1, 1, 1, 1], 10_000, 0, 3)) == [[0], [1, 2], [3, 4]]
    assert contents(pack_tasks([1000, 1, 1, 1, 1], 10_000, 0, 5)) == [[0], [1], [2], [3], [4]]
    assert contents(pack_tasks([1, 1, 1, 1, 1000], 10_000, 0, 2)) == [[0, 1, 2, 3], [4]]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_log_dir(
        tmp_path_factory.mktemp("packing"), records_per_partition=1200, segment_bytes=16 * KIB
    )


def test_plan_partitions_packs_small_segments_in_offset_order(log_dir: Path) -> None:
    options = parse_read_options(maxBytesPerPartition=64 * KIB, openCostInBytes=4 * KIB)
    plan = plan_scan(str(log_dir), options, split=False, read_records=read_task)
    packed = plan_partitions(plan.tasks, options, min_partitions=2)
    flat = [t for group in packed for t in group]
    # nothing split (segments are below the limit): the plan's tasks, in the plan's order
    assert flat == list(plan.tasks)
    assert 2 <= len(packed) < len(plan.tasks)
    for group in packed:
        read = sum(t.segment.size for t in group)
        assert len(group) == 1 or read <= 64 * KIB
        for before, after in itertools.pairwise(group):
            if (before.topic, before.partition) == (after.topic, after.partition):
                assert before.segment.base_offset < after.segment.base_offset


def test_plan_partitions_splits_for_min_partitions(log_dir: Path) -> None:
    options = parse_read_options(openCostInBytes=0)
    plan = plan_scan(str(log_dir / "orders-0"), options, split=False, read_records=read_task)
    packed = plan_partitions(plan.tasks, options, min_partitions=len(plan.tasks) * 3)
    assert len(packed) >= len(plan.tasks) * 3
    pieces = [t for group in packed for t in group]
    # the pieces tile each segment in order
    for seg_tasks in itertools.groupby(pieces, key=lambda t: t.segment.path):
        ranges = [(t.start_position, t.end_position) for t in seg_tasks[1]]
        assert ranges[0][0] == 0 and ranges[-1][1] is None
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))


@pytest.mark.parametrize("options", [{}, {"includeMetadata": True}, {"iteration": "shallow"}])
def test_read_tasks_equals_reading_each_task(log_dir: Path, options: dict) -> None:
    opts = parse_read_options(options)
    columns = ("offset", "key", "value", "partition", "topic", "segment")
    plan = plan_scan(str(log_dir), opts, split=False, read_records=read_task)
    one_by_one = [b for t in plan.tasks for b in read_task(t, opts, columns)]
    streamed = list(read_tasks(plan.tasks, opts, columns))
    assert pa.Table.from_batches(streamed).equals(pa.Table.from_batches(one_by_one))


def test_read_tasks_closes_what_it_opened_when_abandoned(log_dir: Path) -> None:
    opts = parse_read_options()
    plan = plan_scan(str(log_dir), opts, split=False, read_records=read_task)
    stream = read_tasks(plan.tasks, opts, ("offset",))
    next(stream)
    stream.close()  # the next task's source, opened ahead, is closed too (no leak, no error)


def test_read_table_row_order_does_not_depend_on_packing_options(log_dir: Path) -> None:
    plain = ksd.read_table(str(log_dir))
    assert ksd.read_table(str(log_dir), openCostInBytes=0, minPartitions=7).equals(plain)


def test_open_cost_option_is_validated() -> None:
    assert parse_read_options(openCostInBytes="0").open_cost_bytes == 0
    assert parse_read_options().open_cost_bytes == 4 * MIB
    with pytest.raises(InvalidOptionError, match="openCostInBytes"):
        parse_read_options(openCostInBytes=-1)


def test_input_partition_pickles_small(log_dir: Path) -> None:
    pytest.importorskip("pyspark")
    from kafka_segments_ds.datasource import KafkaSegmentsReader, SegmentScanPartition

    reader = KafkaSegmentsReader([str(log_dir)], parse_read_options(minPartitions=2), ("offset",))
    partitions = reader.partitions()
    assert isinstance(partitions, list)
    assert all(isinstance(p, SegmentScanPartition) for p in partitions)
    tasks = sum(len(p.tasks) for p in partitions)
    assert len(partitions) >= 2
    size = sum(len(pickle.dumps(p)) for p in partitions)
    # a task is its segment's paths and a few numbers; the filesystem is pickled once
    assert size / tasks < 800
    back = pickle.loads(pickle.dumps(partitions[0]))
    assert back.tasks == partitions[0].tasks
    rows = [b for p in partitions for b in reader.read(p)]
    assert sum(b.num_rows for b in rows) == ksd.read_table(str(log_dir)).num_rows


def test_coalesce_joins_runs_of_small_batches() -> None:
    def batch(first: int, n: int) -> pa.RecordBatch:
        return pa.record_batch([pa.array(range(first, first + n), pa.int64())], names=["offset"])

    sizes = [100, 100, 5000, 100, 60, 60, 100, 10]
    batches, first = [], 0
    for n in sizes:
        batches.append(batch(first, n))
        first += n
    out = list(coalesce(iter(batches), 250))
    assert [b.num_rows for b in out] == [200, 5000, 250, 80]  # joined ones have 250 rows at most
    assert pa.Table.from_batches(out).column("offset").to_pylist() == list(range(first))
    assert list(coalesce(iter([]), 250)) == []
