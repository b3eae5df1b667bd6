"""Byte-range splits (maxBytesPerPartition, minPartitions): same rows, cuts at entry starts."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.planning import plan_scan
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.samples import write_sample_log_dir


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = write_sample_log_dir(
        tmp_path_factory.mktemp("split-logs"), records_per_partition=1500, segment_bytes=256 * 1024
    )
    bare = tmp_path_factory.mktemp("split-bare") / "logs"
    shutil.copytree(root, bare)
    for index in list(bare.glob("*/*.index")) + list(bare.glob("*/*.timeindex")):
        index.unlink()
    return root, bare


@pytest.mark.parametrize("with_index", [True, False], ids=["index", "hop"])
@pytest.mark.parametrize(
    "options",
    [
        {"maxBytesPerPartition": 4096},
        {"maxBytesPerPartition": 50_000},
        {"minPartitions": 40},
        {
            "maxBytesPerPartition": 3000,
            "startingOffsets": '{"orders":{"0":333,"1":1200}}',
            "endingOffsets": '{"orders":{"0":1400,"1":1201}}',
            "subscribe": "orders",
        },
        {"maxBytesPerPartition": 8000, "isolationLevel": "read_committed", "includeMetadata": True},
    ],
)
def test_splits_return_exactly_the_unsplit_rows(
    logs: tuple[Path, Path], with_index: bool, options: dict
) -> None:
    root = logs[0] if with_index else logs[1]
    unsplit = {
        k: v for k, v in options.items() if k not in ("maxBytesPerPartition", "minPartitions")
    }
    expected = ksd.read_table(str(root), **unsplit)
    got = ksd.read_table(str(root), **options)
    assert got.num_rows == expected.num_rows > 0
    assert got.equals(expected)


@pytest.mark.parametrize("with_index", [True, False], ids=["index", "hop"])
@pytest.mark.parametrize("limit", [1000, 4096, 65536])
def test_split_tasks_tile_each_segment_at_entry_starts(
    logs: tuple[Path, Path], with_index: bool, limit: int
) -> None:
    root = logs[0] if with_index else logs[1]
    plan = plan_scan(str(root), parse_read_options(maxBytesPerPartition=limit))
    by_segment: dict[str, list] = {}
    for task in plan.tasks:
        by_segment.setdefault(task.segment.path, []).append(task)
    assert len(plan.tasks) > len(by_segment)
    for path, tasks in by_segment.items():
        data = Path(path).read_bytes()
        starts = set(scan_entries(data).positions.tolist())
        assert tasks[0].start_position == 0
        assert tasks[-1].end_position is None
        for before, after in itertools.pairwise(tasks):
            assert before.end_position == after.start_position
            assert after.start_position in starts
        for task in tasks:
            end = len(data) if task.end_position is None else task.end_position
            entries = sorted(p for p in starts if task.start_position <= p < end)
            # a piece is within the limit unless it holds a single larger entry
            assert end - task.start_position <= limit or len(entries) == 1


def test_min_partitions_gives_at_least_that_many_tasks(logs: tuple[Path, Path]) -> None:
    plan = plan_scan(str(logs[0]), parse_read_options(minPartitions=100))
    assert len(plan.tasks) >= 100


def test_a_stale_index_position_is_not_used_as_a_cut(tmp_path: Path) -> None:
    root = write_sample_log_dir(tmp_path / "logs", records_per_partition=800, segment_bytes=1 << 20)
    index = root / "metrics-v1-0" / "00000000000000000000.index"
    raw = bytearray(index.read_bytes())
    assert len(raw) >= 16
    # shift every indexed position by 3 bytes: they no longer point at entry starts
    for i in range(0, len(raw), 8):
        pos = int.from_bytes(raw[i + 4 : i + 8], "big") + 3
        raw[i + 4 : i + 8] = pos.to_bytes(4, "big")
    index.write_bytes(bytes(raw))
    options = {"subscribe": "metrics-v1", "maxBytesPerPartition": 4096}
    expected = ksd.read_table(str(root), subscribe="metrics-v1")
    assert ksd.read_table(str(root), **options).equals(expected)
    window = ksd.read_table(
        str(root), subscribe="metrics-v1", startingOffsets='{"metrics-v1":{"0":400}}'
    )
    assert window["offset"].to_pylist() == list(range(400, 800))
