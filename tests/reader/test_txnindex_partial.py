"""read_committed when only some segments kept their ``.txnindex``: each segment's aborted
transactions come from its ``.txnindex`` where present, from its ABORT markers where not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import read_table, transactions
from kafka_segments_ds.layout import discover
from kafka_segments_ds.options import parse_read_options, parse_stream_options
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.streaming.planner import StreamPlanner
from kafka_segments_ds.transactions import OPEN_TRANSACTION_END, collect_aborted
from tests.support.transactions import write_interleaved


@pytest.fixture
def interleaved(make_partition: Callable[..., Any]) -> tuple[Path, list[int], set[tuple]]:
    directory, visible, aborted = write_interleaved(make_partition)
    txn_files = sorted(directory.glob("*.txnindex"))
    # the scenario is only a test if transactions cross segments and several hold markers
    assert len(txn_files) == 21
    assert len(list(directory.glob("*.log"))) == 29
    assert len(visible) == 208
    assert len(aborted) == 26
    return directory, visible, aborted


def _committed(directory: Path, **options: Any) -> list[int]:
    table = read_table(str(directory), isolationLevel="read_committed", **options)
    return table.column("offset").to_pylist()


def test_every_txnindex_present(interleaved: tuple[Path, list[int], set[tuple]]) -> None:
    directory, visible, _ = interleaved
    assert _committed(directory) == visible


@pytest.mark.parametrize("which", [0, 1, 7, 20])
def test_one_txnindex_missing(interleaved: tuple[Path, list[int], set[tuple]], which: int) -> None:
    directory, visible, aborted = interleaved
    sorted(directory.glob("*.txnindex"))[which].unlink()
    (part,) = discover(str(directory), pafs.LocalFileSystem())
    spans = collect_aborted(pafs.LocalFileSystem(), part, parse_read_options({}))
    assert set(spans) == aborted
    assert not any(last == OPEN_TRANSACTION_END for _, _, last in spans)
    assert _committed(directory) == visible


def test_every_other_txnindex_missing(interleaved: tuple[Path, list[int], set[tuple]]) -> None:
    directory, visible, _ = interleaved
    for path in sorted(directory.glob("*.txnindex"))[::2]:
        path.unlink()
    assert _committed(directory) == visible
    # a range starting inside transactions whose markers lie in segments without a .txnindex
    assert _committed(directory, startingOffsets='{"tx":{"0":150}}') == [
        o for o in visible if o >= 150
    ]
    assert _committed(directory, endingOffsets='{"tx":{"0":300}}') == [
        o for o in visible if o < 300
    ]


def test_stream_reads_committed_records_only(
    interleaved: tuple[Path, list[int], set[tuple]],
) -> None:
    """A stream over the same partition (micro-batches of 100 offsets), one .txnindex gone."""
    directory, visible, _ = interleaved
    sorted(directory.glob("*.txnindex"))[3].unlink()
    options = {"startingOffsets": "earliest", "isolationLevel": "read_committed"}
    planner = StreamPlanner([str(directory.parent)], *parse_stream_options(options))
    start = planner.initial_offsets()
    end = planner.next_offsets(start)
    seen: list[int] = []
    for cut in range(100, end[("tx", 0)] + 100, 100):
        stop = {("tx", 0): min(cut, end[("tx", 0)])}
        for tasks in planner.plan(start, stop, 2):
            for b in read_tasks(tasks, planner.options, ("offset",)):
                seen += b.column(0).to_pylist()
        start = stop
    assert sorted(seen) == visible


@pytest.mark.parametrize("removed", ["none", "every-other", "all"])
def test_ranges_cutting_through_transactions(
    interleaved: tuple[Path, list[int], set[tuple]], removed: str
) -> None:
    """The aborted spans of a range come from the segments from the one holding its start,
    and a walk that stops past its end once no transaction with data in it is open."""
    directory, visible, _ = interleaved
    txn_files = sorted(directory.glob("*.txnindex"))
    for path in {"none": [], "every-other": txn_files[1::2], "all": txn_files}[removed]:
        path.unlink()
    end_of_log = max(visible) + 1
    for start, end in [(0, 20), (37, 90), (90, 91), (150, 300), (211, 420), (300, end_of_log)]:
        got = _committed(
            directory,
            startingOffsets=json.dumps({"tx": {"0": start}}),
            endingOffsets=json.dumps({"tx": {"0": end}}),
        )
        assert got == [o for o in visible if start <= o < end], (start, end)


def test_a_range_walks_only_the_segments_that_can_abort_it(
    interleaved: tuple[Path, list[int], set[tuple]], monkeypatch: pytest.MonkeyPatch
) -> None:
    directory, _, aborted = interleaved
    for path in sorted(directory.glob("*.txnindex"))[::2]:
        path.unlink()
    (part,) = discover(str(directory), pafs.LocalFileSystem())
    walked: list[int] = []
    original = transactions._iter_v2_headers

    def counting(filesystem: Any, segment: Any, *args: Any) -> Any:
        walked.append(segment.base_offset)
        return original(filesystem, segment, *args)

    monkeypatch.setattr(transactions, "_iter_v2_headers", counting)
    options = parse_read_options({})
    whole = collect_aborted(pafs.LocalFileSystem(), part, options)
    assert set(whole) == aborted
    assert len(walked) == len(part.segments) == 29
    walked.clear()
    ranged = collect_aborted(pafs.LocalFileSystem(), part, options, 150, 200)
    bases = [s.base_offset for s in part.segments]
    # from the segment holding offset 150 (base 140) to the one where every transaction with
    # data below 200 has its marker (base 217), not the 29 segments of the log
    assert walked == bases[11:18] == [140, 153, 166, 178, 193, 206, 217]
    # the transactions reaching into the range are the whole log's
    assert sorted((p, last) for p, first, last in ranged if last >= 150 and first < 200) == [
        (2, 181),
        (3, 172),
        (4, 199),
        (5, 163),
    ]
    assert sorted((p, last) for p, first, last in whole if last >= 150 and first < 200) == [
        (2, 181),
        (3, 172),
        (4, 199),
        (5, 163),
    ]


@pytest.mark.parametrize("kept", [0, 1], ids=["emptied", "first-entry-only"])
def test_a_txnindex_that_lost_entries(
    interleaved: tuple[Path, list[int], set[tuple]], kept: int
) -> None:
    """Every .txnindex emptied, or cut to its first entry (an interrupted copy), beside
    segments holding ABORT markers: the markers are decoded in every segment, so the aborted
    records stay hidden (an empty file used to be trusted: read_committed returned them)."""
    directory, visible, aborted = interleaved
    for path in sorted(directory.glob("*.txnindex")):
        path.write_bytes(path.read_bytes()[: 34 * kept])  # entries of 34 bytes
    (part,) = discover(str(directory), pafs.LocalFileSystem())
    spans = collect_aborted(pafs.LocalFileSystem(), part, parse_read_options({}))
    assert set(spans) == aborted
    assert _committed(directory) == visible
