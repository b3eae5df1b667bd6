"""Cross-check against aiokafka (its compiled record classes), both ways.

* aiokafka's DefaultRecordBatchBuilder / LegacyRecordBatchBuilder -> .log -> our read_table,
  deep and shallow, every column;
* our builder -> .log -> aiokafka's MemoryRecords (CRCs validated) and our read_table;
* transactional batches from aiokafka + our COMMIT/ABORT markers -> read_uncommitted and
  read_committed.

Like kafka-python, aiokafka builds what a producer sends; offsets and leader epochs (outside the
CRC) are patched in as a broker would assign them, LogAppendTime is stamped with a new CRC.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from tests.support.crosscheck import (
    BIG,
    LEGACY_CODECS,
    LZ4,
    NONE,
    SEEDS,
    V2_CODECS,
    Entry,
    assert_codec_kept,
    assert_rows_equal,
    build_ours,
    check_oracle,
    check_ours,
    concat,
    expected_deep,
    expected_shallow,
    finish_legacy_entry,
    interesting_transactional_plan,
    mixed_magic_entries,
    patch_leader_epoch,
    patch_offset,
    random_entries,
    read_ours,
    stamp_v2_log_append_time,
    stored_v2_codec,
    write_log,
)

pytestmark = pytest.mark.crosscheck

CASES = [(m, c) for m in (0, 1) for c in LEGACY_CODECS] + [(2, c) for c in V2_CODECS]
NO_MAGIC0_LZ4 = (
    "aiokafka refuses LZ4 with magic 0 in both its builder and its reader "
    "('LZ4 is not supported for broker version 0.8/0.9', KAFKA-3160)"
)
LEGACY_WITHOUT_MAGIC0_LZ4 = [c for c in LEGACY_CODECS if c != LZ4]


def _case_id(case: tuple[int, int]) -> str:
    return f"magic{case[0]}-{('none', 'gzip', 'snappy', 'lz4', 'zstd')[case[1]]}"


def _skip_unsupported(magic: int, codec: int) -> None:
    if magic == 0 and codec == LZ4:
        pytest.skip(NO_MAGIC0_LZ4)


def test_compiled_record_classes_are_the_oracle() -> None:
    # the cross-check is meant to run against aiokafka's C extension, not its Python fallback
    assert "_crecords" in MemoryRecords.__module__
    assert "_crecords" in DefaultRecordBatchBuilder.__module__
    assert "_crecords" in LegacyRecordBatchBuilder.__module__


def check_aiokafka(entries: list[Entry]) -> None:
    check_oracle(
        concat(entries),
        entries,
        MemoryRecords,
        entry_by_entry=len({e.magic for e in entries}) > 1,
        no_timestamp_has_no_type=True,
    )


def build_aiokafka(entry: Entry, rng: random.Random) -> None:
    """Encode ``entry`` with aiokafka's builders, then assign offsets / leader epoch and stamp
    LogAppendTime as the broker would."""
    if entry.is_control:
        build_ours(entry)  # markers are written by brokers only
        return
    if entry.magic == 2:
        base = entry.base_offset
        if entry.records and entry.records[0].timestamp == -1:
            # aiokafka's builder takes a first timestamp of -1 for "unset" and writes the next
            # record's time as the batch's base timestamp, silently giving record 0 that time
            entry.records[0].timestamp = None
        if rng.random() < 0.5:
            builder = DefaultRecordBatchBuilder(
                2,
                entry.codec,
                int(entry.is_transactional),
                entry.producer_id,
                entry.producer_epoch,
                entry.base_sequence,
                BIG,
            )
        else:
            builder = DefaultRecordBatchBuilder(
                2, entry.codec, int(entry.is_transactional), -1, -1, -1, BIG
            )
            builder.set_producer_state(entry.producer_id, entry.producer_epoch, entry.base_sequence)
        for rec in entry.records:
            meta = builder.append(
                rec.offset - base, rec.timestamp, rec.key, rec.value, list(rec.headers)
            )
            assert meta is not None
            rec.timestamp = meta.timestamp
        data = patch_leader_epoch(patch_offset(builder.build(), base), entry.leader_epoch)
        entry.codec = stored_v2_codec(data, entry.codec)
        if entry.timestamp_type == 1:
            data = stamp_v2_log_append_time(data, entry.append_time)
        entry.data = bytes(data)
        return

    relative = entry.magic == 1 and entry.codec != NONE
    shift = entry.records[0].offset if relative else 0
    legacy = LegacyRecordBatchBuilder(entry.magic, entry.codec, BIG)
    for rec in entry.records:
        meta = legacy.append(rec.offset - shift, rec.timestamp, rec.key, rec.value)
        assert meta is not None
        rec.timestamp = meta.timestamp
    finish_legacy_entry(entry, legacy.build())


# -- aiokafka -> ours ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_aiokafka_builder_to_our_reader(tmp_path: Path, case: tuple[int, int], seed: int) -> None:
    magic, codec = case
    _skip_unsupported(magic, codec)
    rng = random.Random(f"aio->ours {magic} {codec} {seed}")
    entries = random_entries(
        rng,
        magic,
        codec,
        first_offset=rng.choice((0, 3, 99_999, 2**45)),
        count=rng.randint(3, 8),
        builder_timestamps=True,
        inner_gaps=True,
    )
    for entry in entries:
        build_aiokafka(entry, rng)
    assert_codec_kept(entries, codec)
    directory = write_log(tmp_path, entries, segments=rng.randint(1, 3))

    check_aiokafka(entries)
    check_ours(directory, entries)


@pytest.mark.parametrize("seed", SEEDS)
def test_aiokafka_mixed_magic_segment_to_our_reader(tmp_path: Path, seed: int) -> None:
    rng = random.Random(f"aio->ours mixed {seed}")
    entries = mixed_magic_entries(
        rng,
        {0: LEGACY_WITHOUT_MAGIC0_LZ4, 1: LEGACY_CODECS, 2: V2_CODECS},
        builder_timestamps=True,
        inner_gaps=True,
    )
    for entry in entries:
        build_aiokafka(entry, rng)
    directory = write_log(tmp_path, entries)

    check_aiokafka(entries)
    check_ours(directory, entries)
    # windows smaller than most entries, so entries straddle window boundaries
    check_ours(directory, entries, readChunkBytes=4096)


# -- ours -> aiokafka ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_our_builder_to_aiokafka_reader(tmp_path: Path, case: tuple[int, int], seed: int) -> None:
    magic, codec = case
    _skip_unsupported(magic, codec)
    rng = random.Random(f"ours->aio {magic} {codec} {seed}")
    entries = random_entries(
        rng,
        magic,
        codec,
        first_offset=rng.choice((0, 1, 2**31, 2**50)),
        count=rng.randint(3, 8),
        builder_timestamps=False,
        inner_gaps=magic == 2,
        allow_empty=True,
    )
    for entry in entries:
        build_ours(entry)
    directory = write_log(tmp_path, entries, segments=rng.randint(1, 2))

    check_aiokafka(entries)
    check_ours(directory, entries)


@pytest.mark.parametrize("seed", SEEDS)
def test_our_mixed_magic_segment_to_aiokafka_reader(tmp_path: Path, seed: int) -> None:
    rng = random.Random(f"ours->aio mixed {seed}")
    entries = mixed_magic_entries(
        rng,
        {0: LEGACY_WITHOUT_MAGIC0_LZ4, 1: LEGACY_CODECS, 2: V2_CODECS},
        builder_timestamps=False,
        inner_gaps=False,
        allow_empty=True,
    )
    for entry in entries:
        build_ours(entry)
    directory = write_log(tmp_path, entries)

    check_aiokafka(entries)
    check_ours(directory, entries)
    # windows smaller than most entries, so entries straddle window boundaries
    check_ours(directory, entries, readChunkBytes=4096)


# -- transactions: aiokafka data + our markers -----------------------------------------------


@pytest.mark.parametrize("segments", [1, 3])
@pytest.mark.parametrize("seed", SEEDS)
def test_aiokafka_transactions_with_markers(tmp_path: Path, seed: int, segments: int) -> None:
    rng = random.Random(f"aio txn {seed}")
    entries = interesting_transactional_plan(rng, builder_timestamps=True)
    for entry in entries:
        build_aiokafka(entry, rng)
    directory = write_log(tmp_path, entries, segments=segments)
    assert not list(directory.glob("*.txnindex"))

    check_aiokafka(entries)
    uncommitted = expected_deep(entries)
    assert_rows_equal(read_ours(directory, includeHeaders=True), uncommitted)
    assert_rows_equal(
        read_ours(directory, includeHeaders=True, isolationLevel="READ_UNCOMMITTED"), uncommitted
    )
    # shallow: one row per batch, the markers included (isControl true)
    assert_rows_equal(read_ours(directory, iteration="shallow"), expected_shallow(entries))
    committed = expected_deep(entries, read_committed=True)
    assert len(committed) < len(uncommitted)
    assert_rows_equal(
        read_ours(directory, includeHeaders=True, isolationLevel="read_committed"), committed
    )
    # option names are case-insensitive
    assert_rows_equal(
        read_ours(directory, includeheaders=True, ISOLATIONLEVEL="read_committed"), committed
    )
