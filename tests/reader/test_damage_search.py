"""Damaged input read with DROPMALFORMED: nothing invented, nothing lost (issue 23, point 5).

Each log is a fuzz input (run seed:input number, rebuilt by tests/fuzz) or the smallest log
showing the bug; each test pins the exact offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kafka_segments_ds
from kafka_segments_ds import index as kidx
from kafka_segments_ds.records.batches import scan_entries
from tests.fuzz.corpus import v2
from tests.fuzz.judge import make_input

SEGMENT = "00000000000000000000"


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.ERROR, logger="kafka_segments_ds")
    yield


def write(tmp_path: Path, data: bytes) -> str:
    part = tmp_path / "t-0"
    part.mkdir(exist_ok=True)
    (part / f"{SEGMENT}.log").write_bytes(data)
    return str(part)


def fuzz_log(tmp_path: Path, run_seed: int, number: int) -> str:
    return write(tmp_path, make_input(run_seed, number)["mutant"].data)


def offsets(path: str, **options: Any) -> list[int]:
    table = kafka_segments_ds.read_table(path, mode="DROPMALFORMED", **options)
    return table.column("offset").to_pylist()


def test_search_stops_where_a_passed_valid_entry_ends(tmp_path: Path) -> None:
    """2307:22073 -- after the damaged gzip wrapper at byte 40 the search passes the valid
    wrapper at 326 (it may be one of the damaged wrapper's inner messages), which ends at 475,
    where a wrapper with magic byte 100 and a size field leading exactly to the intact wrapper
    at 5623 starts. That entry is skipped whole: its message stored verbatim at 5550 (offset
    2^62 + 59) was returned and the wrapper at 5623 (offsets 11, 12) dropped."""
    path = fuzz_log(tmp_path, 2307, 22073)
    assert offsets(path) == [0, 11, 12]
    assert offsets(path, verifyChecksums=False) == [0, 11, 12]


def test_search_skips_a_bad_magic_wrapper_with_a_consistent_size(tmp_path: Path) -> None:
    """777001:164 -- a batch cut to 84 bytes (its size field leads nowhere) is followed by a
    snappy magic-1 wrapper whose magic byte is 19 and whose size field leads exactly to the end
    of the file. The search from byte 1 took the message stored verbatim at 20173 (offset 1): a
    phantom row. Nothing intact is in the file."""
    path = fuzz_log(tmp_path, 777001, 164)
    assert offsets(path) == []
    assert offsets(path, iteration="shallow") == []


def test_header_fields_of_a_damaged_batch_are_no_enclosing_wrapper(tmp_path: Path) -> None:
    """424242:19849 -- after the damaged batch at 420 the search finds the intact lz4 wrapper
    at 569 (offsets 10008..10010). Bytes inside the damaged batch's header at 436 read as an
    entry whose size field leads exactly to the end of the file; only a wrapper whose key and
    value lengths also end there holds the candidate verbatim, so the wrapper is kept."""
    path = fuzz_log(tmp_path, 424242, 19849)
    assert offsets(path) == [*range(8), 10008, 10009, 10010]


def test_pruning_for_the_start_offset_does_not_trust_a_damaged_size(tmp_path: Path) -> None:
    """777001:944 -- a batch cut to 27 bytes whose size field (133) still claims 145 bytes,
    then an intact batch of offsets 0..3 at byte 27. A read from offset 3 pruned the damaged
    batch (offsets 0..2, before the start) unchecked, so its size field framed the next entry
    at 145, inside the intact batch: offset 3 was lost."""
    path = fuzz_log(tmp_path, 777001, 944)
    assert offsets(path) == [0, 1, 2, 3]
    start = '{"t":{"0":3}}'
    assert offsets(path, startingOffsets=start) == [3]
    assert offsets(path, startingOffsets='{"t":{"0":1}}') == [1, 2, 3]
    assert offsets(path, startingOffsets=start, iteration="shallow") == [3]
    assert offsets(path, startingOffsets=start, verifyChecksums=False) == [3]


@pytest.mark.parametrize("with_index", [False, True], ids=["hop", "index"])
@pytest.mark.parametrize("limit", [100, 200])
def test_every_split_drops_a_batch_going_back(tmp_path: Path, limit: int, with_index: bool) -> None:
    """A checksum-valid batch 0..2 after batches 0..11: a whole-segment read drops it (offsets
    not increasing); a byte-range split starting at it returned its rows again. So does the
    batch 5..6 after it (5 is not above 11), and a piece cut right after the batch going back
    must know that too. Cut where the entries are walked, or at .index positions."""
    entries = [v2(0, 4), v2(4, 4), v2(8, 4), v2(0, 3), v2(5, 2), v2(12, 2)]
    data = b"".join(entries)
    path = write(tmp_path, data)
    if with_index:
        table = scan_entries(data)
        ordered = [0, 1, 2, 5]  # the entries a broker indexed: offsets increase
        index, _ = kidx.build_indexes(
            table.positions[ordered],
            table.sizes[ordered],
            table.last_offsets[ordered],
            table.max_timestamps[ordered],
            0,
            32,
        )
        (Path(path) / f"{SEGMENT}.index").write_bytes(index)
    whole = list(range(14))
    assert offsets(path) == whole
    assert offsets(path, maxBytesPerPartition=limit) == whole
    assert offsets(path, maxBytesPerPartition=limit, iteration="shallow") == [3, 7, 11, 13]


def test_a_deep_read_from_an_offset_drops_an_undecodable_batch_before_it(tmp_path: Path) -> None:
    """99:774 -- the checksum-valid batch at 0 (offsets 0..2) holds records that do not decode,
    a damaged batch follows, then a batch of offsets 0..3. The whole read drops the batch at 0,
    so 0..3 follows in order. A read from offset 3 pruned the batch at 0 undecoded: its offsets
    moved the order check on and the batch 0..3 was dropped as going back (offset 3 lost)."""
    path = fuzz_log(tmp_path, 99, 774)
    assert offsets(path) == [0, 1, 2, 3]
    assert offsets(path, startingOffsets='{"t":{"0":3}}') == [3]
