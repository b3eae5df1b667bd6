"""Races with a broker writing the log dir a stream reads: an index trimmed while read (a roll
trims the preallocated ``.index``), a segment gone while a micro-batch's tasks are cut or its
latest offset is found (retention, the cleaner replacing segments)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import StorageError
from kafka_segments_ds.layout import segment_file_name
from kafka_segments_ds.options import parse_stream_options
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.streaming import planner as planner_module
from kafka_segments_ds.streaming.planner import StreamPlanner

TP = ("t", 0)


class _Trimmed:
    """An input file whose size at opening is more than it holds by the time it is read."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self._size = data, size

    def size(self) -> int:
        return self._size

    def read_buffer(self, n: int) -> pa.Buffer:
        return pa.py_buffer(self.data[:n])

    def __enter__(self) -> _Trimmed:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_an_index_trimmed_while_read_is_read_as_far_as_it_goes() -> None:
    entries = np.array([[0, 0], [5, 100]], ">i4").tobytes()

    class Store:
        def open_input_file(self, path: str) -> _Trimmed:
            return _Trimmed(entries, 10 << 20)

    got = kfs.read_index_file(Store(), "t-0/00000000000000000000.index")  # type: ignore[arg-type]
    assert got.to_pybytes() == entries
    with pytest.raises(StorageError, match="short read"):
        kfs.read_file(Store(), "t-0/00000000000000000000.index")  # type: ignore[arg-type]


def _log_dir(tmp_path: Path) -> Path:
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    for first in (0, 10, 20):
        specs = [RecordSpec(key=b"k", value=b"v%d" % o, timestamp=1000 + o) for o in range(10)]
        (part / segment_file_name(first, ".log")).write_bytes(
            encode_batch(specs, base_offset=first)
        )
    return tmp_path / "logs"


def _offsets(planner: StreamPlanner, tasks: list[tuple[object, ...]]) -> list[int]:
    return [
        o
        for packed in tasks
        for b in read_tasks(packed, planner.options, ("offset",))  # type: ignore[arg-type]
        for o in b.column(0).to_pylist()
    ]


def test_a_segment_gone_while_a_micro_batch_is_cut_is_planned_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = _log_dir(tmp_path)
    options, limits = parse_stream_options({"failOnDataLoss": "false"})
    planner = StreamPlanner([str(logs)], options, limits)
    assert planner.next_offsets({TP: 0}) == {TP: 30}
    cut = planner_module.plan_partitions
    calls = []

    def removing(tasks: list[object], *args: object) -> object:
        calls.append(len(tasks))
        if len(calls) == 1:  # retention deletes the first segment while the tasks are cut
            (logs / "t-0" / segment_file_name(0, ".log")).unlink()
            raise FileNotFoundError("Failed to open local file")
        return cut(tasks, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_module, "plan_partitions", removing)
    assert _offsets(planner, planner.plan({TP: 0}, {TP: 30}, 1)) == list(range(10, 30))
    assert len(calls) == 2


def test_a_segment_gone_while_the_latest_offset_is_found_lists_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = _log_dir(tmp_path)
    options, limits = parse_stream_options({})
    planner = StreamPlanner([str(logs)], options, limits)
    assert planner.next_offsets({TP: 0}) == {TP: 30}
    (logs / "t-0" / segment_file_name(30, ".log")).write_bytes(
        encode_batch([RecordSpec(key=b"k", value=b"x", timestamp=1)], base_offset=30)
    )
    scan = planner_module.scan_tail
    calls = []

    def vanishing(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise FileNotFoundError("Failed to open local file")  # rolled and removed meanwhile
        return scan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_module, "scan_tail", vanishing)
    assert planner.next_offsets({TP: 0}) == {TP: 31}
    assert len(calls) == 2


def _records(offsets: list[int]) -> bytes:
    """One batch per record (the cleaner keeps batches whole; here each holds one)."""
    return b"".join(
        encode_batch(
            [RecordSpec(key=b"k%d" % o, value=b"v%d" % o, timestamp=1000 + o)], base_offset=o
        )
        for o in offsets
    )


def _name(base: int, width: int) -> str:
    return f"{base:0{width}d}.log"


@pytest.mark.parametrize("width", [20, 1], ids=["kafka-names", "short-names"])
@pytest.mark.parametrize("kept", ["evens", "first-segment-only"])
@pytest.mark.parametrize("pieces", [1, 4])
def test_segments_the_cleaner_replaced_after_planning_are_read_where_they_are(
    tmp_path: Path, pieces: int, kept: str, width: int
) -> None:
    """The log cleaner replaced segment 0 with a cleaned copy holding segments 0 and 10 merged
    (keys of odd offsets compacted away), and removed segment 10, between planning and
    reading: the planned tasks read the offsets where they are now, each once, rather than
    taking the new file for damage and the removed one for data loss. Segments named with
    fewer digits than Kafka's 20, which listings take, too (their merge was data loss)."""
    from kafka_segments_ds import planning
    from kafka_segments_ds.options import parse_read_options

    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    for first in (0, 10, 20):
        (part / _name(first, width)).write_bytes(_records(list(range(first, first + 10))))
    options = parse_read_options(
        {"maxBytesPerPartition": str(400), "minPartitions": str(pieces)} if pieces > 1 else {}
    )
    plan = planning.plan_scan(str(tmp_path / "logs"), options)
    assert len(plan.tasks) >= (3 if pieces == 1 else 6)
    cleaned = part / (_name(0, width) + ".cleaned")
    # the cleaner kept the evens of both segments, or (later records took every key of
    # segment 10) nothing of segment 10: a gap, as a consumer sees it, not data loss
    survivors = list(range(0, 20, 2)) if kept == "evens" else list(range(0, 10, 2))
    cleaned.write_bytes(_records(survivors))
    os.replace(cleaned, part / _name(0, width))  # (via .swap in Kafka)
    (part / _name(10, width)).unlink()
    got = [o for b in read_tasks(plan.tasks, options, ("offset",)) for o in b.column(0).to_pylist()]
    assert got == [*survivors, *range(20, 30)]


def test_a_file_gone_while_a_replaced_segment_is_rehomed_is_data_loss_not_a_bare_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The segment the offsets moved to loses its index file (the cleaner's next round)
    while the task looks for them there, and again on the second look: DataLossError naming
    the partition and offsets (a bare FileNotFoundError escaped, naming neither)."""
    from kafka_segments_ds import planning
    from kafka_segments_ds.errors import DataLossError
    from kafka_segments_ds.options import parse_read_options

    part = _four_segments(tmp_path)
    options = parse_read_options({})
    plan = planning.plan_scan(str(tmp_path / "logs"), options)
    cleaned = part / "cleaned"
    cleaned.write_bytes(_records(list(range(0, 20, 2))))
    os.replace(cleaned, part / segment_file_name(0, ".log"))
    (part / segment_file_name(10, ".log")).unlink()
    (part / segment_file_name(0, ".index")).write_bytes(bytes(8))

    def vanished(filesystem: object, path: str) -> bytes:
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(kfs, "read_index_file", vanished)
    with pytest.raises(
        DataLossError, match=r"t-0: segment .*00000000000000000000\.log \(offsets 0 to 9\)"
    ):
        list(read_tasks(plan.tasks, options, ("offset",)))


def test_a_partition_overwritten_after_planning_is_an_error_not_a_mix(tmp_path: Path) -> None:
    """An overwrite (a kafkasegments write replacing the partition directories) landing between
    planning and reading: the planned tasks would read the new files at the old positions."""
    from kafka_segments_ds import planning, write_table
    from kafka_segments_ds.errors import DataLossError
    from kafka_segments_ds.options import parse_read_options

    rows = pa.table({"value": [b"old-%d" % i for i in range(50)]})
    write_table(rows, tmp_path / "logs", topic="t")
    options = parse_read_options({})
    plan = planning.plan_scan(str(tmp_path / "logs"), options)
    new = pa.table({"value": [b"new-%d" % i for i in range(80)]})
    write_table(new, tmp_path / "logs", topic="t", mode="overwrite")
    with pytest.raises(DataLossError, match=r"t-0: the partition directory .*/t-0 was replaced"):
        list(read_tasks(plan.tasks, options, ("value",)))


def _four_segments(tmp_path: Path) -> Path:
    part = tmp_path / "logs" / "t-0"
    part.mkdir(parents=True)
    for first in (0, 10, 20, 30):
        (part / segment_file_name(first, ".log")).write_bytes(
            _records(list(range(first, first + 10)))
        )
    return part


def test_a_truncation_after_planning_is_data_loss_not_a_merge(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A leader change truncated the log at offset 20 (the segments from 20 on removed): the
    planned tasks of both removed segments report the loss, though the one before the last
    went too (which a merge by the log cleaner would also show): no segment after them is
    left, as one always is after a merge (the active segment is never cleaned)."""
    from kafka_segments_ds import planning
    from kafka_segments_ds.options import parse_read_options

    part = _four_segments(tmp_path)
    options = parse_read_options({"failOnDataLoss": "false"})
    plan = planning.plan_scan(str(tmp_path / "logs"), options)
    for first in (20, 30):
        (part / segment_file_name(first, ".log")).unlink()
    with caplog.at_level("WARNING", "kafka_segments_ds.reader.task"):
        got = [
            o for b in read_tasks(plan.tasks, options, ("offset",)) for o in b.column(0).to_pylist()
        ]
    assert got == list(range(20))
    lost = [
        r.getMessage() for r in caplog.records if "was removed after the read" in r.getMessage()
    ]
    assert [m.split(" (offsets")[0].rsplit("/", 1)[1] for m in lost] == [
        segment_file_name(20, ".log"),
        segment_file_name(30, ".log"),
    ]


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "byte-range-pieces"])
def test_a_segment_truncated_in_place_after_planning_is_data_loss_not_a_hang(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, pieces: bool
) -> None:
    """A leader change truncated the log at offset 23 in place (the file keeps its inode,
    the segment after it removed): the read asked for the bytes the listing promised again
    and again, for ever. Now the rows before the cut, then DataLossError naming the file,
    its sizes, the offset and byte position (a warning with failOnDataLoss=false)."""
    from kafka_segments_ds import planning
    from kafka_segments_ds.errors import DataLossError
    from kafka_segments_ds.options import parse_read_options

    part = _four_segments(tmp_path)
    split = {"maxBytesPerPartition": "200"} if pieces else {}
    plan = planning.plan_scan(str(tmp_path / "logs"), parse_read_options(split))
    segment = part / segment_file_name(20, ".log")
    planned = segment.stat().st_size
    cut = len(_records([20, 21, 22]))
    os.truncate(segment, cut)
    (part / segment_file_name(30, ".log")).unlink()
    got: list[int] = []
    with pytest.raises(DataLossError) as err:
        for b in read_tasks(plan.tasks, parse_read_options(split), ("offset",)):
            got += b.column(0).to_pylist()
    assert got == list(range(23))
    assert str(err.value).startswith(
        f"t-0: segment {segment} holds {cut} bytes now, {planned} when the read was planned: "
        f"it was truncated since (a leader change truncating the log); offsets from 23, at "
        f"byte position {cut} on, are gone"
    )
    lenient = parse_read_options({**split, "failOnDataLoss": "false"})
    with caplog.at_level("WARNING", "kafka_segments_ds.reader.task"):
        got = [
            o for b in read_tasks(plan.tasks, lenient, ("offset",)) for o in b.column(0).to_pylist()
        ]
    assert got == list(range(23))
    assert any("offsets from 23, at byte position" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("pieces", [False, True], ids=["whole", "byte-range-pieces"])
def test_the_last_segment_trimmed_after_planning_is_read_to_its_end(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, pieces: bool
) -> None:
    """A preallocated active segment (zeros after its entries) that the broker trims when it
    rolls it or shuts down, after planning: its entries are all there, no data is lost (a
    cut of the log's last segment after whole entries is the end of its data)."""
    from kafka_segments_ds import planning
    from kafka_segments_ds.options import parse_read_options

    part = _four_segments(tmp_path)
    last = part / segment_file_name(30, ".log")
    entries = last.stat().st_size
    with last.open("ab") as f:
        f.write(bytes(64 << 10))
    options = parse_read_options({"maxBytesPerPartition": "300"} if pieces else {})
    plan = planning.plan_scan(str(tmp_path / "logs"), options)
    os.truncate(last, entries)
    with caplog.at_level("INFO", "kafka_segments_ds.reader.task"):
        got = [
            o for b in read_tasks(plan.tasks, options, ("offset",)) for o in b.column(0).to_pylist()
        ]
    assert got == list(range(40))
    assert any(f"ends at byte {entries} now" in r.getMessage() for r in caplog.records)


def test_a_segment_replaced_by_a_pending_commit_is_refused(tmp_path: Path) -> None:
    """A kafkasegments commit under way (its journal there) replaced a planned segment: the
    read would hold part of the commit."""
    from kafka_segments_ds import planning
    from kafka_segments_ds.errors import CommitInProgressError
    from kafka_segments_ds.options import parse_read_options

    part = _four_segments(tmp_path)
    options = parse_read_options({})
    plan = planning.plan_scan(str(tmp_path / "logs"), options)
    staging = tmp_path / "logs" / ".kafkasegments-staging-job"
    staging.mkdir()
    (staging / "_COMMIT.json").write_text("{}")
    replacement = part / "new.log"
    replacement.write_bytes(_records(list(range(0, 12))))
    os.replace(replacement, part / segment_file_name(0, ".log"))
    with pytest.raises(CommitInProgressError, match="was replaced by a kafkasegments write"):
        list(read_tasks(plan.tasks, options, ("offset",)))
