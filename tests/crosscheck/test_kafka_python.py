"""Cross-check against kafka-python, both ways, over magic x codec x producer state.

* kafka-python's builders (MemoryRecordsBuilder, DefaultRecordBatchBuilder,
  LegacyRecordBatchBuilder) -> .log -> our read_table, deep and shallow, every column;
* our builder -> .log -> kafka-python's MemoryRecords (CRCs validated) and our read_table;
* transactional batches from kafka-python + our COMMIT/ABORT markers -> read_uncommitted and
  read_committed.

kafka-python builds what a *producer* sends; a broker then assigns offsets and leader epochs
(fields outside the CRC, patched here) and, with LogAppendTime, stamps the timestamp type and
time (inside the CRC, so the CRC is recomputed). See tests/support/crosscheck.py for the
plan/expectation model.
"""

from __future__ import annotations

import random
from pathlib import Path

import kafka.codec
import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecordsBuilder

from tests.support.crosscheck import (
    BIG,
    LEGACY_CODECS,
    LZ4,
    MAX_TS,
    NONE,
    PARTITION,
    SEEDS,
    TOPIC,
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
    legacy_value_as_stored,
    mixed_magic_entries,
    patch_leader_epoch,
    patch_offset,
    random_blob,
    random_entries,
    random_key,
    read_oracle,
    read_ours,
    stamp_v2_log_append_time,
    stored_v2_codec,
    write_log,
)

pytestmark = pytest.mark.crosscheck

CASES = [(m, c) for m in (0, 1) for c in LEGACY_CODECS] + [(2, c) for c in V2_CODECS]
NO_XXHASH = kafka.codec.xxhash is None
XXHASH_REASON = (
    "kafka-python needs the xxhash package (not installed) to write/read magic-0 LZ4 "
    "(the KAFKA-3160 header checksum)"
)


def _skip_unsupported(magic: int, codec: int) -> None:
    if magic == 0 and codec == LZ4 and NO_XXHASH:
        pytest.skip(XXHASH_REASON)


def _case_id(case: tuple[int, int]) -> str:
    return f"magic{case[0]}-{('none', 'gzip', 'snappy', 'lz4', 'zstd')[case[1]]}"


def build_kafka_python(entry: Entry, rng: random.Random) -> None:
    """Encode ``entry`` with kafka-python's builders (either API, chosen at random), then do
    what the broker does: assign offsets / leader epoch, stamp LogAppendTime."""
    if entry.is_control:
        build_ours(entry)  # only brokers write markers; kafka-python has no builder for them
        return
    use_memory_builder = rng.random() < 0.5
    if entry.magic == 2:
        base = entry.base_offset
        if use_memory_builder:
            if rng.random() < 0.5:
                builder = MemoryRecordsBuilder(
                    2,
                    entry.codec,
                    BIG,
                    offset=0,
                    transactional=entry.is_transactional,
                    producer_id=entry.producer_id,
                    producer_epoch=entry.producer_epoch,
                    base_sequence=entry.base_sequence,
                )
            else:
                builder = MemoryRecordsBuilder(2, entry.codec, BIG, offset=0)
                builder.set_producer_state(
                    entry.producer_id,
                    entry.producer_epoch,
                    entry.base_sequence,
                    entry.is_transactional,
                )
            for rec in entry.records:
                builder.skip(rec.offset - base - builder.next_offset())
                meta = builder.append(rec.timestamp, rec.key, rec.value, list(rec.headers))
                assert meta.offset == rec.offset - base
                rec.timestamp = meta.timestamp
            builder.close()
            data = builder.buffer()
        else:
            raw = DefaultRecordBatchBuilder(
                2,
                entry.codec,
                entry.is_transactional,
                entry.producer_id,
                entry.producer_epoch,
                entry.base_sequence,
                BIG,
            )
            for rec in entry.records:
                meta = raw.append(
                    rec.offset - base, rec.timestamp, rec.key, rec.value, list(rec.headers)
                )
                rec.timestamp = meta.timestamp
            data = raw.build()
        data = patch_leader_epoch(patch_offset(data, base), entry.leader_epoch)
        entry.codec = stored_v2_codec(data, entry.codec)
        if entry.timestamp_type == 1:
            data = stamp_v2_log_append_time(data, entry.append_time)
        entry.data = bytes(data)
        return

    # legacy: offsets inside a magic-1 wrapper are relative, everything else absolute
    relative = entry.magic == 1 and entry.codec != NONE
    first = 0 if relative else entry.records[0].offset
    shift = entry.records[0].offset - first
    if use_memory_builder:
        builder = MemoryRecordsBuilder(entry.magic, entry.codec, BIG, offset=first)
        for rec in entry.records:
            builder.skip(rec.offset - shift - builder.next_offset())
            meta = builder.append(rec.timestamp, rec.key, rec.value)
            rec.timestamp = meta.timestamp
        builder.close()
        data = bytearray(builder.buffer())
    else:
        raw = LegacyRecordBatchBuilder(entry.magic, entry.codec, BIG)
        for rec in entry.records:
            meta = raw.append(rec.offset - shift, rec.timestamp, rec.key, rec.value)
            rec.timestamp = meta.timestamp
        data = raw.build()
    finish_legacy_entry(entry, data)


# -- kafka-python -> ours --------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_kafka_python_builder_to_our_reader(
    tmp_path: Path, case: tuple[int, int], seed: int
) -> None:
    magic, codec = case
    _skip_unsupported(magic, codec)
    rng = random.Random(f"kp->ours {magic} {codec} {seed}")
    entries = random_entries(
        rng,
        magic,
        codec,
        first_offset=rng.choice((0, 1, 12345, 2**40)),
        count=rng.randint(3, 8),
        builder_timestamps=True,
        inner_gaps=True,
    )
    for entry in entries:
        build_kafka_python(entry, rng)
    assert_codec_kept(entries, codec)
    directory = write_log(tmp_path, entries, segments=rng.randint(1, 3))

    check_oracle(concat(entries), entries, MemoryRecords)
    check_ours(directory, entries)


@pytest.mark.parametrize("seed", SEEDS)
def test_kafka_python_mixed_magic_segment_to_our_reader(tmp_path: Path, seed: int) -> None:
    rng = random.Random(f"kp->ours mixed {seed}")
    legacy = [c for c in LEGACY_CODECS if not (c == LZ4 and NO_XXHASH)]
    entries = mixed_magic_entries(
        rng,
        {0: legacy, 1: LEGACY_CODECS, 2: V2_CODECS},
        builder_timestamps=True,
        inner_gaps=True,
    )
    for entry in entries:
        build_kafka_python(entry, rng)
    assert [e.magic for e in entries] == sorted(e.magic for e in entries)
    directory = write_log(tmp_path, entries)

    check_oracle(concat(entries), entries, MemoryRecords)
    check_ours(directory, entries)
    # windows smaller than most entries, so entries straddle window boundaries
    check_ours(directory, entries, readChunkBytes=4096)


# -- ours -> kafka-python --------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_our_builder_to_kafka_python_reader(
    tmp_path: Path, case: tuple[int, int], seed: int
) -> None:
    magic, codec = case
    _skip_unsupported(magic, codec)
    rng = random.Random(f"ours->kp {magic} {codec} {seed}")
    entries = random_entries(
        rng,
        magic,
        codec,
        first_offset=rng.choice((0, 7, 2**33)),
        count=rng.randint(3, 8),
        builder_timestamps=False,
        inner_gaps=magic == 2,
        allow_empty=True,
    )
    for entry in entries:
        build_ours(entry)
    directory = write_log(tmp_path, entries, segments=rng.randint(1, 2))

    check_oracle(concat(entries), entries, MemoryRecords)
    check_ours(directory, entries)


@pytest.mark.parametrize("seed", SEEDS)
def test_our_mixed_magic_segment_to_kafka_python_reader(tmp_path: Path, seed: int) -> None:
    rng = random.Random(f"ours->kp mixed {seed}")
    legacy = [c for c in LEGACY_CODECS if not (c == LZ4 and NO_XXHASH)]
    entries = mixed_magic_entries(
        rng,
        {0: legacy, 1: LEGACY_CODECS, 2: V2_CODECS},
        builder_timestamps=False,
        inner_gaps=False,
        allow_empty=True,
    )
    for entry in entries:
        build_ours(entry)
    directory = write_log(tmp_path, entries)

    check_oracle(concat(entries), entries, MemoryRecords)
    check_ours(directory, entries)
    # windows smaller than most entries, so entries straddle window boundaries
    check_ours(directory, entries, readChunkBytes=4096)


# -- transactions: kafka-python data + our markers -------------------------------------------


@pytest.mark.parametrize("segments", [1, 2])
@pytest.mark.parametrize("seed", SEEDS)
def test_kafka_python_transactions_with_markers(tmp_path: Path, seed: int, segments: int) -> None:
    rng = random.Random(f"kp txn {seed}")
    entries = interesting_transactional_plan(rng, builder_timestamps=True)
    for entry in entries:
        build_kafka_python(entry, rng)
    directory = write_log(tmp_path, entries, segments=segments)
    assert not list(directory.glob("*.txnindex"))

    check_oracle(concat(entries), entries, MemoryRecords)
    uncommitted = expected_deep(entries)
    assert_rows_equal(read_ours(directory, includeHeaders=True), uncommitted)
    assert_rows_equal(
        read_ours(directory, includeHeaders=True, isolationLevel="read_uncommitted"), uncommitted
    )
    # shallow: one row per batch, the markers included (isControl true)
    assert_rows_equal(read_ours(directory, iteration="shallow"), expected_shallow(entries))
    committed = expected_deep(entries, read_committed=True)
    assert len(committed) < len(uncommitted)
    assert_rows_equal(
        read_ours(directory, includeHeaders=True, isolationLevel="read_committed"), committed
    )


@pytest.mark.parametrize("codec", [c for c in LEGACY_CODECS if c != NONE])
def test_kafka_python_producer_wrapper_with_offset_zero(tmp_path: Path, codec: int) -> None:
    """A magic-1 wrapper exactly as kafka-python's producer writes it (offset field 0, relative
    inner offsets 0..n-1, wrapper timestamp 0): Kafka takes base 0 when the wrapper offset is 0
    (some librdkafka versions stored such wrappers), and so do kafka-python and we."""
    rng = random.Random(f"kp wrapper at 0 {codec}")
    builder = LegacyRecordBatchBuilder(1, codec, BIG)
    for i in range(rng.randint(2, 9)):
        builder.append(i, rng.randint(0, MAX_TS), random_key(rng), random_blob(rng))
    data = bytes(builder.build())
    directory = tmp_path / f"{TOPIC}-{PARTITION}"
    directory.mkdir()
    (directory / f"{0:020d}.log").write_bytes(data)

    (seen,) = read_oracle(data, MemoryRecords)
    assert [r[0] for r in seen.records] == list(range(len(seen.records)))
    rows = read_ours(directory)
    assert [
        (r["offset"], r["timestamp"], r["timestampType"], r["key"], r["value"]) for r in rows
    ] == [r[:5] for r in seen.records]
    # the batch's last offset is the wrapper's offset field, as Kafka's lastOffset() says
    assert {(r["batchBaseOffset"], r["batchLastOffset"], r["position"]) for r in rows} == {
        (0, 0, 0)
    }
    (shallow,) = read_ours(directory, iteration="shallow")
    assert (shallow["offset"], shallow["timestamp"], shallow["key"]) == (0, 0, None)
    assert shallow["value"] == legacy_value_as_stored(data, 1)
