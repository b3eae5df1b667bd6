"""Races with a broker writing the log dir a stream reads: an index trimmed while read (a roll
trims the preallocated ``.index``), a segment gone while a micro-batch's tasks are cut or its
latest offset is found (retention, the cleaner replacing segments)."""

from __future__ import annotations

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
