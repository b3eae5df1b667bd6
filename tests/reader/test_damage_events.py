"""The damage policy reports structured events (issue 24, point 3), and the resynchronisation
forensics run on a read callable alone."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import kafka_segments_ds
from kafka_segments_ds.reader.damage import (
    SUMMARY,
    DamageCounts,
    DamageEvent,
    DamageKind,
    collect_damage,
)
from kafka_segments_ds.records.resync import Held, Resync
from tests.fuzz.corpus import v2
from tests.fuzz.judge import make_input

SEGMENT = "00000000000000000000"


def damaged(entry: bytes, at: int = -3) -> bytes:
    out = bytearray(entry)
    out[at] ^= 0x5A
    return bytes(out)


def write(tmp_path: Path, data: bytes) -> Path:
    part = tmp_path / "t-0"
    part.mkdir(exist_ok=True)
    path = part / f"{SEGMENT}.log"
    path.write_bytes(data)
    return path


def test_events_name_each_drop_and_the_truncated_tail(tmp_path: Path) -> None:
    first, second, third = damaged(v2(0, 2)), v2(2, 3), v2(5, 1)
    garbage = b"\x07" * 30  # frames no entry: skipped up to the next valid batch
    fourth = v2(6, 2)
    data = first + second + garbage + third + fourth[:40]  # the last batch cut short
    path = write(tmp_path, data)
    with collect_damage() as events:
        table = kafka_segments_ds.read_table(str(path.parent), mode="DROPMALFORMED")
    assert table.column("offset").to_pylist() == [2, 3, 4, 5]
    at_garbage = len(first) + len(second)
    assert events == [
        DamageEvent(DamageKind.BATCH, str(path), 0, 2, 0),
        DamageEvent(DamageKind.UNFRAMED, str(path), at_garbage, 0, 30),
        DamageEvent(DamageKind.TRUNCATED, str(path), at_garbage + 30 + len(third)),
    ]
    assert DamageCounts.of(events) == DamageCounts(
        entries=1, batches=1, messages=0, records=2, uncounted=0, skipped_bytes=30
    )


def test_no_events_outside_a_collection_and_none_for_a_clean_log(tmp_path: Path) -> None:
    path = write(tmp_path, v2(0, 2) + v2(2, 1))
    with collect_damage() as events:
        assert kafka_segments_ds.read_table(str(path.parent)).num_rows == 3
    assert events == []


def test_summary_line_is_counted_from_the_events(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path, damaged(v2(0, 2)) + v2(2, 3) + damaged(v2(5, 4)) + v2(9, 1))
    with caplog.at_level(logging.WARNING, "kafka_segments_ds"):
        kafka_segments_ds.read_table(str(path.parent), mode="DROPMALFORMED")
    summaries = [r for r in caplog.records if getattr(r, SUMMARY, False)]
    assert [r.getMessage() for r in summaries] == [
        f"{path}: DROPMALFORMED dropped 2 malformed entries (2 batches, 0 legacy messages) "
        "holding 6 records, and skipped 0 bytes that frame no entry"
    ]


def in_memory_resync(data: bytes, last_offset: int = -1, asked: list[int] | None = None) -> Resync:
    """Forensics on ``data``; ``asked`` collects the lengths its reads ask for."""
    array = np.frombuffer(data, np.uint8)

    def read(position: int, length: int) -> np.ndarray:
        if asked is not None:
            asked.append(length)
        return array[position : position + length]

    return Resync(
        read,
        path="in memory",
        file_end=len(data),
        range_end=len(data),
        last_offset=lambda: last_offset,
        next_base_offset=None,
        read_chunk_bytes=4096,
        max_batch_bytes=1 << 20,
        max_decompressed_bytes=1 << 20,
    )


def test_resync_runs_on_a_read_callable() -> None:
    first, second = damaged(v2(0, 2)), v2(2, 3)
    # a consistent size field: the damaged batch is skipped whole
    assert in_memory_resync(first + second).resume_after(0) == len(first)
    # bytes after it that frame no entry: the search goes on to the next valid batch
    forensics = in_memory_resync(first + b"\x07" * 20 + second)
    assert forensics.resume_after(0) == len(first) + 20
    assert forensics.held(0) == Held(2, len(first), 2)
    # a batch whose offsets do not follow the last good one is no place to resume
    assert in_memory_resync(first + b"\x07" * 20 + second, last_offset=4).resume_after(0) is None


def test_resync_finds_no_entry_inside_a_bad_magic_wrapper_reaching_the_end() -> None:
    """777001:164 on bytes alone: the search after the cut batch at 0 meets the wrapper with
    magic byte 19 at 84 whose size field leads to the end of the file; the message stored
    verbatim at 20173 is no place to resume."""
    data = make_input(777001, 164)["mutant"].data
    assert in_memory_resync(data).resume_after(0) is None
