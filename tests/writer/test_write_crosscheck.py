"""The writer against independent references (no Spark).

* the columnar encoder (``encode_v2``) against the readable builder (``encode_batch``), byte for
  byte, over every codec, with the batch cuts modelled on ``encode_record`` sizes;
* every log ``write_table`` writes, for every magic x codec Kafka allows, decoded by kafka-python's
  and aiokafka's ``MemoryRecords`` (CRCs validated) and by our ``read_table``, with each segment's
  ``.index``/``.timeindex`` equal to what a broker's recovery rebuilds from the ``.log``;
* murmur2 and the default partitioner against kafka-python's.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiokafka.record.memory_records as aiokafka_records
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record import MemoryRecords as KafkaPythonRecords

from kafka_segments_ds import InvalidInputError, read_table, write_table
from kafka_segments_ds.index import rebuild_indexes
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_record
from kafka_segments_ds.records.compression import CODEC_LABELS
from kafka_segments_ds.records.encoder import BatchSettings, encode_v2
from kafka_segments_ds.writer import task as task_module
from kafka_segments_ds.writer.columns import binary_column, key_partitions, murmur2, record_columns
from tests.support.crosscheck import (
    HEADER_KEYS,
    LEGACY_CODECS,
    LZ4,
    MAX_TS,
    V2_CODECS,
    random_blob,
    random_headers,
    random_key,
    read_oracle,
    read_ours,
)

pytestmark = pytest.mark.crosscheck

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
V2_HEADER_SIZE = 61
NOW_MS = 1_700_000_000_123
TOPIC = "xw.topic-1"
PARTITIONS = 3
ORACLES: dict[str, Callable[[bytes], Any]] = {
    "kafka-python": KafkaPythonRecords,
    "aiokafka": aiokafka_records.MemoryRecords,
}
CASES = [(m, c) for m in (0, 1) for c in LEGACY_CODECS] + [(2, c) for c in V2_CODECS]
LEVELS = {1: (1, 9), 3: (1, 17), 4: (-5, 22)}  # codecs with a level: a few valid ones


def _case_id(case: tuple[int, int]) -> str:
    return f"magic{case[0]}-{CODEC_LABELS[case[1]]}"


# -- encoder vs builder ----------------------------------------------------------------------

HEADER = st.tuples(
    st.one_of(st.sampled_from(HEADER_KEYS), st.text(max_size=8)),
    st.one_of(st.none(), st.binary(max_size=24)),
)
RECORD = st.fixed_dictionaries(
    {
        "key": st.one_of(st.none(), st.binary(max_size=40)),
        "value": st.one_of(st.none(), st.just(b""), st.binary(max_size=400)),
        # small and huge values, so timestamp deltas go backwards and need long varlongs
        "timestamp": st.one_of(st.none(), st.integers(0, 10_000), st.integers(0, MAX_TS)),
        "headers": st.one_of(st.none(), st.lists(HEADER, max_size=4)),
    }
)


def _table(rows: list[dict], *, pad: int, split: int | None) -> pa.Table:
    """``rows`` as an Arrow table behind ``pad`` junk rows (sliced off, so every array has an
    offset), in two chunks when ``split`` is given, as the task writer hands them over."""
    junk = {"key": b"junk", "value": b"junk", "timestamp": 7, "headers": [("j", b"j")]}
    everything = [junk] * pad + rows
    table = pa.table(
        {
            "key": pa.array([r["key"] for r in everything], pa.binary()),
            "value": pa.array([r["value"] for r in everything], pa.binary()),
            "timestamp": pa.array([r["timestamp"] for r in everything], pa.timestamp("ms")),
            "headers": pa.array(
                [
                    None
                    if r["headers"] is None
                    else [{"key": k, "value": v} for k, v in r["headers"]]
                    for r in everything
                ],
                HEADERS_TYPE,
            ),
        }
    ).slice(pad)
    if split is None:
        return table
    split = min(split, len(rows))
    return pa.concat_tables([table.slice(0, split), table.slice(split)])


def _specs(rows: list[dict]) -> list[RecordSpec]:
    return [
        RecordSpec(
            value=r["value"],
            key=r["key"],
            timestamp=NOW_MS if r["timestamp"] is None else r["timestamp"],
            headers=tuple(r["headers"] or ()),
        )
        for r in rows
    ]


def _reference_cuts(
    specs: list[RecordSpec], batch_bytes: int, batch_records: int
) -> list[list[RecordSpec]]:
    """A producer's batching: add records while the batch stays within ``batch_bytes`` and
    ``batch_records``; a record too big for any batch gets one of its own."""
    batches: list[list[RecordSpec]] = []
    region = 0
    for spec in specs:
        if batches:
            batch = batches[-1]
            size = len(encode_record(spec, len(batch), spec.timestamp - batch[0].timestamp))
            if len(batch) < batch_records and V2_HEADER_SIZE + region + size <= batch_bytes:
                batch.append(spec)
                region += size
                continue
        batches.append([spec])
        region = len(encode_record(spec, 0, 0))
    return batches


@pytest.mark.parametrize("codec", V2_CODECS, ids=lambda c: CODEC_LABELS[c])
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(RECORD, min_size=1, max_size=30),
    batch_bytes=st.one_of(st.integers(1, 1500), st.just(16384), st.none()),
    edge=st.tuples(st.integers(1, 30), st.integers(-1, 1)),
    batch_records=st.one_of(st.integers(1, 6), st.just(2**31 - 1)),
    first_offset=st.one_of(st.just(0), st.integers(0, 2**40)),
    leader_epoch=st.sampled_from((-1, 0, 7)),
    log_append_time=st.one_of(st.none(), st.integers(0, MAX_TS)),
    level_pick=st.one_of(st.none(), st.integers(0, 1)),
    pad=st.integers(0, 3),
    split=st.one_of(st.none(), st.integers(1, 30)),
)
def test_encoder_equals_builder(
    codec: int,
    rows: list[dict],
    batch_bytes: int | None,
    batch_records: int,
    first_offset: int,
    leader_epoch: int,
    log_append_time: int | None,
    edge: tuple[int, int],
    level_pick: int | None,
    pad: int,
    split: int | None,
) -> None:
    level = None if level_pick is None or codec not in LEVELS else LEVELS[codec][level_pick]
    specs = _specs(rows)
    if batch_bytes is None:  # right at the size of the first ``count`` records, give or take 1
        count, give = edge
        region = sum(
            len(encode_record(s, i, s.timestamp - specs[0].timestamp))
            for i, s in enumerate(specs[:count])
        )
        batch_bytes = V2_HEADER_SIZE + region + give
    columns = record_columns(_table(rows, pad=pad, split=split), NOW_MS)
    settings_ = BatchSettings(
        compression=codec,
        level=level,
        batch_bytes=batch_bytes,
        batch_records=batch_records,
        log_append_time=log_append_time,
        leader_epoch=leader_epoch,
    )
    encoded = encode_v2(columns, settings_, first_offset)

    cuts = _reference_cuts(specs, batch_bytes, batch_records)
    firsts = np.cumsum([0] + [len(c) for c in cuts[:-1]])
    expected = [
        encode_batch(
            batch,
            base_offset=first_offset + int(first),
            compression=codec,
            timestamp_type=0 if log_append_time is None else 1,
            log_append_time=log_append_time,
            leader_epoch=leader_epoch,
            level=level,
        )
        for batch, first in zip(cuts, firsts, strict=True)
    ]
    sizes = [len(b) for b in expected]
    assert bytes(encoded.data) == b"".join(expected)
    assert encoded.sizes.tolist() == sizes
    assert encoded.positions.tolist() == np.cumsum([0, *sizes[:-1]]).tolist()
    assert encoded.first_rows.tolist() == firsts.tolist()
    assert encoded.last_rows.tolist() == (firsts + [len(c) - 1 for c in cuts]).tolist()
    assert encoded.max_timestamps.tolist() == [
        max(s.timestamp for s in c) if log_append_time is None else log_append_time for c in cuts
    ]


def test_encoder_empty_input() -> None:
    encoded = encode_v2(record_columns(_table([], pad=0, split=None), NOW_MS), BatchSettings())
    assert bytes(encoded.data) == b""
    assert len(encoded.sizes) == len(encoded.positions) == len(encoded.first_rows) == 0


@pytest.mark.parametrize(
    ("unit", "raw", "ms"),
    [
        ("s", [0, 3, 1_700_000_000], [0, 3000, 1_700_000_000_000]),
        ("ms", [0, 1, 1_700_000_000_123], [0, 1, 1_700_000_000_123]),
        ("us", [999, 1000, 1_700_000_000_123_999], [0, 1, 1_700_000_000_123]),
        ("ns", [999_999, 1_000_000, 1_700_000_000_123_456_789], [0, 1, 1_700_000_000_123]),
    ],
)
def test_record_columns_timestamp_units(unit: str, raw: list[int], ms: list[int]) -> None:
    table = pa.table(
        {"value": pa.array([b"v"] * (len(raw) + 1)), "timestamp": pa.array([*raw, None])}
    ).cast(pa.schema([("value", pa.binary()), ("timestamp", pa.timestamp(unit))]))
    assert record_columns(table, NOW_MS).timestamps.tolist() == [*ms, NOW_MS]


def test_record_columns_refuse_negative_timestamp_and_null_header_key() -> None:
    before_1970 = pa.table(
        {"value": [b"a", b"b"], "timestamp": pa.array([5, -1], pa.timestamp("ms"))}
    )
    with pytest.raises(InvalidInputError, match="row 1: timestamp -1 ms"):
        record_columns(before_1970, NOW_MS)
    null_key = pa.table(
        {"value": [b"a"], "headers": pa.array([[{"key": None, "value": b"x"}]], HEADERS_TYPE)}
    )
    with pytest.raises(InvalidInputError, match="header key is null"):
        record_columns(null_key, NOW_MS)


# -- murmur2 and the default partitioner -----------------------------------------------------


@settings(max_examples=60)
@given(
    keys=st.lists(st.binary(max_size=70), min_size=1, max_size=50),
    partitions=st.integers(1, 1000),
)
def test_murmur2_and_key_partitions_match_kafka_python(keys: list[bytes], partitions: int) -> None:
    column = binary_column(pa.array(keys, pa.binary()))
    hashes = np.empty(len(keys), np.int32)
    murmur2(column.offsets, column.data, hashes)
    assert (hashes.astype(np.int64) & 0xFFFFFFFF).tolist() == [kafka_murmur2(k) for k in keys]
    assert key_partitions(column, partitions, 0).tolist() == [
        (kafka_murmur2(k) & 0x7FFFFFFF) % partitions for k in keys
    ]


def test_murmur2_known_values() -> None:
    # Utils.murmur2 as Java ints, from Kafka's UtilsTest.testMurmur2
    keys = [b"21", b"foobar", b"a-little-bit-long-string", b"a-little-bit-longer-string", b"abc"]
    column = binary_column(pa.array(keys))
    hashes = np.empty(len(keys), np.int32)
    murmur2(column.offsets, column.data, hashes)
    assert hashes.tolist() == [-973932308, -790332482, -985981536, -1486304829, 479470107]


def test_null_keys_are_spread_evenly(tmp_path: Path) -> None:
    keys = [None] * 10 + [b"k%d" % i for i in range(20)] + [None] * 8
    table = pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array([b"v"] * len(keys))})
    write_table(table, tmp_path, topic=TOPIC, numPartitions=PARTITIONS)
    rows = read_table(tmp_path).to_pylist()
    null_counts = Counter(r["partition"] for r in rows if r["key"] is None)
    assert sorted(null_counts.values()) == [6, 6, 6]
    for row in rows:
        if row["key"] is not None:
            assert row["partition"] == (kafka_murmur2(row["key"]) & 0x7FFFFFFF) % PARTITIONS


# -- write_table -> kafka-python / aiokafka / read_table -------------------------------------


def _input_rows(rng: random.Random, magic: int, count: int) -> list[dict]:
    """Rows with keys (some null), explicit partitions for the null-key rows and a few keyed
    ones, timestamps in wild order (some null: the write time), headers for magic 2."""
    around = rng.randint(1_000_000_000_000, 2_000_000_000_000)
    rows = []
    for _ in range(count):
        key = random_key(rng)
        partition = None
        if key is None or rng.random() < 0.1:
            partition = rng.randrange(PARTITIONS)
        stamp_roll = rng.random()
        if stamp_roll < 0.05:
            timestamp = None
        elif stamp_roll < 0.15:
            timestamp = rng.randint(0, MAX_TS)
        else:
            timestamp = max(0, around + rng.randint(-5_000, 60_000))
        rows.append(
            {
                "key": key,
                "value": random_blob(rng),
                "partition": partition,
                "timestamp": timestamp,
                "headers": random_headers(rng) if magic == 2 else (),
            }
        )
    return rows


def _write_input(rows: list[dict], magic: int) -> pa.Table:
    columns = {
        "key": pa.array([r["key"] for r in rows], pa.binary()),
        "value": pa.array([r["value"] for r in rows], pa.binary()),
        "partition": pa.array([r["partition"] for r in rows], pa.int32()),
        "timestamp": pa.array([r["timestamp"] for r in rows], pa.timestamp("ms")),
    }
    if magic == 2:
        columns["headers"] = pa.array(
            [[{"key": k, "value": v} for k, v in r["headers"]] for r in rows], HEADERS_TYPE
        )
    return pa.table(columns)


def _expected_by_partition(rows: list[dict]) -> dict[int, list[dict]]:
    """Input rows per partition, in input order: an explicit partition, else kafka-python's
    DefaultPartitioner formula for keyed rows (null keys without one are not generated here)."""
    out: dict[int, list[dict]] = {p: [] for p in range(PARTITIONS)}
    for row in rows:
        partition = row["partition"]
        if partition is None:
            assert row["key"] is not None, "a null-key row needs an explicit partition here"
            partition = (kafka_murmur2(row["key"]) & 0x7FFFFFFF) % PARTITIONS
        out[partition].append(row)
    return out


def _oracle_records(
    rows: list[dict], magic: int, write_time: int, append_time: bool
) -> list[tuple[Any, ...]]:
    """What MemoryRecords (through ``read_oracle``) reports for ``rows`` at offsets 0, 1, ..."""
    out = []
    for offset, row in enumerate(rows):
        if magic == 0:
            stamp, kind = None, -1
        elif append_time:
            stamp, kind = write_time, 1
        else:
            stamp, kind = (write_time if row["timestamp"] is None else row["timestamp"]), 0
        out.append((offset, stamp, kind, row["key"], row["value"], list(row["headers"])))
    return out


def _segments(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def _check_segments(partition_dir: Path, interval: int) -> bytes:
    """Each segment is named for its first offset and its indexes are exactly what a broker's
    recovery rebuilds from it; returns the partition's whole log."""
    log = b""
    for segment in _segments(partition_dir):
        data = segment.read_bytes()
        base = int(segment.stem)
        if data:
            first = read_oracle(data, KafkaPythonRecords)[0].records[0][0]
            assert base == first, f"{segment.name} starts at offset {first}"
        offset_index, time_index = rebuild_indexes(data, base, interval)
        assert segment.with_suffix(".index").read_bytes() == offset_index, segment.name
        assert segment.with_suffix(".timeindex").read_bytes() == time_index, segment.name
        log += data
    return log


def _observed_write_time(root: Path, before: int, after: int) -> int | None:
    """The write time stamped for null timestamps / LogAppendTime: every such record carries
    the job's one ``now``, taken during the call. None when nothing carries it."""
    table = read_table(root, columns=["timestamp"])
    stamps = {t for t in table.column("timestamp").cast(pa.int64()).to_pylist() if t is not None}
    inside = {t // 1000 for t in stamps if before * 1000 <= t <= after * 1000}
    assert len(inside) <= 1, f"several write times {sorted(inside)}"
    return inside.pop() if inside else None


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("append_time", [False, True], ids=["CreateTime", "LogAppendTime"])
def test_written_log_decodes_with_kafka_python_and_aiokafka(
    tmp_path: Path, case: tuple[int, int], append_time: bool
) -> None:
    magic, codec = case
    if append_time and magic == 0:
        with pytest.raises(ValueError, match="magic 0 has no timestamps"):
            write_table(
                pa.table({"value": [b"v"]}),
                tmp_path,
                topic=TOPIC,
                magic=0,
                compression=CODEC_LABELS[codec],
                timestampType="LogAppendTime",
            )
        assert list(tmp_path.iterdir()) == []
        return
    rng = random.Random(magic * 10 + codec)
    rows = _input_rows(rng, magic, 300)
    interval = 700
    options: dict[str, Any] = {
        "topic": TOPIC,
        "numPartitions": PARTITIONS,
        "compression": CODEC_LABELS[codec],
        "magic": magic,
        "batchBytes": 1500,
        "segmentBytes": 6000,
        "indexIntervalBytes": interval,
    }
    if append_time:
        options["timestampType"] = "LogAppendTime"
    before = int(time.time() * 1000)
    write_table(_write_input(rows, magic), tmp_path, **options)
    after = int(time.time() * 1000)
    write_time = _observed_write_time(tmp_path, before, after)
    assert (write_time is not None) == (
        magic > 0 and (append_time or any(r["timestamp"] is None for r in rows))
    )

    expected = _expected_by_partition(rows)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{TOPIC}-{p}" for p in expected]
    rolled = indexed = 0
    for partition, want_rows in expected.items():
        partition_dir = tmp_path / f"{TOPIC}-{partition}"
        rolled += len(_segments(partition_dir)) - 1
        indexed += sum(p.stat().st_size for p in partition_dir.glob("*.index"))
        log = _check_segments(partition_dir, interval)
        want = _oracle_records(want_rows, magic, write_time or -1, append_time)
        for name, memory_records in ORACLES.items():
            if name == "aiokafka" and magic == 0 and codec == LZ4:
                continue  # aiokafka refuses LZ4 with magic 0 (KAFKA-3160); kafka-python reads it
            batches = read_oracle(log, memory_records)
            assert [r for b in batches for r in b.records] == want, name
            fields = {
                "compression_type": codec,
                "timestamp_type": None if magic == 0 else int(append_time),
            }
            for batch in batches:  # aiokafka's compiled legacy batches have neither field
                have = {f: getattr(batch.batch, f) for f in fields if hasattr(batch.batch, f)}
                assert have == ({} if name == "aiokafka" and magic < 2 else fields), name
        ours = read_ours(tmp_path, includeHeaders=True, assign=f'{{"{TOPIC}":[{partition}]}}')
        assert [
            (r["offset"], r["timestamp"], r["timestampType"], r["key"], r["value"], r["headers"])
            for r in ours
        ] == want
    assert rolled >= 3  # segmentBytes is small enough that partitions roll ...
    assert indexed > 0  # ... and indexIntervalBytes that segments get offset-index entries


def test_legacy_magic_refuses_headers(tmp_path: Path) -> None:
    table = pa.table(
        {"value": [b"v"], "headers": pa.array([[{"key": "h", "value": b"x"}]], HEADERS_TYPE)}
    )
    with pytest.raises(InvalidInputError, match="magic 1 has no record headers"):
        write_table(table, tmp_path, topic=TOPIC, magic=1)
    assert list(tmp_path.iterdir()) == []


def test_zstd_needs_magic_2(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="zstd needs magic 2"):
        write_table(pa.table({"value": [b"v"]}), tmp_path, topic=TOPIC, magic=1, compression="zstd")
    assert list(tmp_path.iterdir()) == []


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("case", [(0, 1), (1, 3), (2, 0), (2, 4)], ids=_case_id)
def test_flushing_early_gives_the_same_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: tuple[int, int]
) -> None:
    magic, codec = case
    # a task encodes a chunk's rows once they pass a size and carries the rows of the last,
    # unfilled batch over to the next flush; that must not change a byte of the result
    rows = _input_rows(random.Random(5), magic, 400)
    for row in rows:
        row["timestamp"] = row["timestamp"] or 1000  # no write-time stamps: equal runs
    table = _write_input(rows, magic)
    options = {
        "topic": TOPIC,
        "numPartitions": PARTITIONS,
        "compression": CODEC_LABELS[codec],
        "magic": magic,
        "batchBytes": 2000,
        "segmentBytes": 9000,
    }
    write_table(table, tmp_path / "once", **options)
    monkeypatch.setattr(task_module, "CHUNK_FLUSH_BYTES", 2500)
    monkeypatch.setattr(task_module, "TASK_PENDING_BYTES", 6000)
    early: list[int] = []
    flush = task_module._Chunk.flush

    def counting_flush(chunk: Any, job: Any, final: bool) -> None:
        before = chunk.written
        flush(chunk, job, final)
        if not final and chunk.written > before:
            early.append(chunk.partition)

    monkeypatch.setattr(task_module._Chunk, "flush", counting_flush)
    write_table(table.to_batches(max_chunksize=37), tmp_path / "flushed", **options)
    assert sorted(set(early)) == list(range(PARTITIONS))
    once = _tree(tmp_path / "once")
    assert len(once) >= 2 * 3 * PARTITIONS  # each partition rolls at least once
    assert _tree(tmp_path / "flushed") == once
