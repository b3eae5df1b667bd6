"""Shared machinery for the cross-checks against kafka-python and aiokafka.

A test draws a random *plan* (a list of :class:`Entry`: one top-level ``.log`` entry each, i.e. a
magic-2 batch, an uncompressed legacy message or a compressed legacy wrapper), turns it into bytes
with one of the builders (kafka-python's, aiokafka's or ours), and then checks three readers
against what the plan says every record is:

* the oracle's reader (kafka-python's or aiokafka's ``MemoryRecords``, CRCs validated): every
  record field and every batch-level field it exposes;
* our ``read_table`` deep (one row per record, every column) and shallow (one row per batch /
  top-level legacy message, every column).

So "ours == oracle" holds field by field through the plan. Whatever a plan cannot know before
building (the time a builder picks for a ``None`` timestamp, the codec a builder falls back to
when compressing does not pay) is filled in by the builder adapter right after building.
"""

from __future__ import annotations

import itertools
import random
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa

from kafka_segments_ds import read_table
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_control_batch,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.compression import CompressionType

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_LABELS = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
LEGACY_CODECS = (NONE, GZIP, SNAPPY, LZ4)
V2_CODECS = (NONE, GZIP, SNAPPY, LZ4, ZSTD)
SEEDS = (11, 2024, 90210)

TIMESTAMP_TYPE_BIT = 0x08
V2_HEADER_SIZE = 61
TOPIC = "xcheck.topic-a"  # a '-' and a '.' in the topic name, as Kafka allows
PARTITION = 7
MAX_TS = 4_102_444_800_000  # 2100-01-01, keeps microseconds well inside int64
HEADER_KEYS = ("trace-id", "", "ключ", "键", "emoji-🙂", "k")
BIG = 1 << 24  # builder batch_size: never full


@dataclass
class Rec:
    """One record as it goes in. ``timestamp`` None = let the builder pick (wall clock)."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None = -1
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def ms(self) -> int:
        """The timestamp once the builder has resolved it."""
        assert self.timestamp is not None, "timestamp not resolved yet"
        return self.timestamp


@dataclass
class Entry:
    """One top-level .log entry and everything a reader should report about it."""

    magic: int
    codec: int  # requested; replaced by the codec actually stored after building
    records: list[Rec]
    base_offset: int  # v2: header base offset; legacy: first (inner) offset
    last_offset_delta: int = 0  # v2 only
    timestamp_type: int = 0
    log_append_time: int | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False
    is_control: bool = False
    commit: bool = False  # control entries only
    leader_epoch: int = -1
    wrapper_timestamp: int = -1  # legacy wrappers, magic 1: the wrapper's own timestamp field
    # filled in when building / writing
    data: bytes = b""
    segment: str = ""
    position: int = -1

    @property
    def is_wrapper(self) -> bool:
        return self.magic < 2 and self.codec != NONE

    @property
    def last_offset(self) -> int:
        if self.magic == 2:
            return self.base_offset + self.last_offset_delta
        return self.records[-1].offset

    @property
    def append_time(self) -> int:
        assert self.log_append_time is not None
        return self.log_append_time

    def max_timestamp(self) -> int:
        """maxTimestamp a v2 header carries."""
        if self.timestamp_type == 1 and self.log_append_time is not None:
            return self.log_append_time
        return max((r.ms for r in self.records), default=-1)


# -- random plans ----------------------------------------------------------------------------


def random_bytes(rng: random.Random, n: int) -> bytes:
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n else b""


def random_blob(rng: random.Random, *, big: bool = False) -> bytes | None:
    roll = 0.5 if big else rng.random()
    if roll < 0.1:
        return None
    if roll < 0.2:
        return b""
    if roll < 0.5:
        return random_bytes(rng, rng.randint(1, 40))
    if roll < 0.8:
        # compressible: a few words repeated, up to a few KB
        words = [random_bytes(rng, rng.randint(1, 6)) for _ in range(rng.randint(1, 5))]
        n = rng.randint(50, 4000) if big else rng.randint(1, 600)
        out = b"".join(rng.choice(words) for _ in range(n // 3 + 1))
        return out[:n] if len(out) > n else out
    if roll < 0.9:
        return "ünïcødé text, ".encode() * rng.randint(1, 30)
    return random_bytes(rng, rng.randint(500, 3000))


def random_key(rng: random.Random) -> bytes | None:
    roll = rng.random()
    if roll < 0.25:
        return None
    if roll < 0.35:
        return b""
    if roll < 0.7:
        return f"user-{rng.randint(0, 50)}".encode()
    return random_bytes(rng, rng.randint(1, 24))


def random_headers(rng: random.Random) -> tuple[tuple[str, bytes | None], ...]:
    n = rng.choice((0, 0, 1, 2, 3, 5))
    out = []
    for _ in range(n):
        key = rng.choice(HEADER_KEYS)  # few keys, so repeats are common
        roll = rng.random()
        value: bytes | None = random_bytes(rng, rng.randint(1, 30))
        if roll < 0.35:
            value = None if roll < 0.25 else b""
        out.append((key, value))
    return tuple(out)


def random_timestamp(rng: random.Random, *, allow_none: bool, around: int) -> int | None:
    roll = rng.random()
    if roll < 0.1:
        return -1
    if roll < 0.15:
        return 0
    if allow_none and roll < 0.25:
        return None
    # mostly near ``around`` (deltas of both signs), sometimes anywhere
    if roll < 0.9:
        return max(0, around + rng.randint(-5_000, 60_000))
    return rng.randint(0, MAX_TS)


def random_entries(
    rng: random.Random,
    magic: int,
    codec: int,
    *,
    first_offset: int,
    count: int,
    builder_timestamps: bool,
    inner_gaps: bool,
    allow_empty: bool = False,
    producer_state: bool = True,
) -> list[Entry]:
    """``count`` entries of one magic and codec with increasing offsets.

    ``builder_timestamps``: some timestamps are None (the builder picks them);
    ``inner_gaps``: offsets inside a batch / wrapper may have holes (compacted data);
    ``allow_empty``: a v2 batch may hold no records (what compaction leaves).
    """
    entries: list[Entry] = []
    offset = first_offset
    around = rng.randint(1_000_000_000_000, 2_000_000_000_000)
    for index in range(count):
        offset += rng.choice((0, 0, 0, 1, 3, 1000))  # gaps between entries
        # an uncompressed legacy message is an entry by itself
        n = 1 if magic < 2 and codec == NONE else rng.choice((1, 2, 3, 5, 8, 13))
        records = []
        for i in range(n):
            if i and inner_gaps and rng.random() < 0.2:
                offset += rng.randint(1, 4)
            ts = (
                -1
                if magic == 0
                else random_timestamp(rng, allow_none=builder_timestamps, around=around)
            )
            # the first entry always carries something worth compressing
            value = random_blob(rng, big=index == 0 and i == 0)
            headers = random_headers(rng) if magic == 2 else ()
            records.append(Rec(offset, random_key(rng), value, ts, headers))
            offset += 1
        entry = Entry(magic, codec, records, base_offset=records[0].offset)
        if magic == 2:
            entry.last_offset_delta = records[-1].offset - entry.base_offset
            entry.leader_epoch = rng.choice((-1, 0, 5, 2**31 - 1))
            if producer_state:
                kind = rng.choice(("none", "idempotent", "transactional"))
                if kind != "none":
                    entry.producer_id = rng.choice((0, 1, 4242, 2**63 - 1))
                    entry.producer_epoch = rng.choice((0, 1, 32767))
                    entry.base_sequence = rng.choice((0, 17, 2**31 - 1))
                    entry.is_transactional = kind == "transactional"
            if allow_empty and codec == NONE and rng.random() < 0.1:
                # what compaction leaves behind to keep producer state: header only
                entry.records = []
                entry.last_offset_delta = n - 1
        if magic >= 1 and rng.random() < 0.25:
            entry.timestamp_type = 1
            entry.log_append_time = max(0, around + rng.randint(0, 100_000))
        entries.append(entry)
    return entries


def mixed_magic_entries(
    rng: random.Random,
    codecs: dict[int, Sequence[int]],
    *,
    builder_timestamps: bool,
    inner_gaps: bool,
    allow_empty: bool = False,
) -> list[Entry]:
    """Magic 0 entries, then magic 1, then magic 2 (as a topic upgraded in place), random codecs."""
    entries: list[Entry] = []
    offset = rng.randint(0, 10_000)
    for magic in (0, 1, 2):
        for _ in range(rng.randint(1, 3)):
            more = random_entries(
                rng,
                magic,
                rng.choice(codecs[magic]),
                first_offset=offset,
                count=rng.randint(1, 3),
                builder_timestamps=builder_timestamps,
                inner_gaps=inner_gaps,
                allow_empty=allow_empty,
            )
            entries += more
            offset = more[-1].last_offset + 1
    return entries


# -- byte patches (only fields outside the CRC, or with the CRC recomputed) -------------------


def patch_offset(data: bytes | bytearray, offset: int) -> bytearray:
    """Set the 8-byte offset field of an entry (v2 base offset / legacy offset), outside the CRC."""
    out = bytearray(data)
    struct.pack_into(">q", out, 0, offset)
    return out


def patch_leader_epoch(data: bytes | bytearray, epoch: int) -> bytearray:
    out = bytearray(data)
    struct.pack_into(">i", out, 12, epoch)
    return out


def stamp_v2_log_append_time(data: bytes | bytearray, append_time: int) -> bytearray:
    """What a broker with LogAppendTime does to a batch: set bit 3, maxTimestamp, new CRC-32C."""
    out = bytearray(data)
    out[22] |= TIMESTAMP_TYPE_BIT
    struct.pack_into(">q", out, 35, append_time)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return out


def stamp_legacy_log_append_time(data: bytes | bytearray, append_time: int) -> bytearray:
    """Same for a magic-1 message: attribute bit 3, its timestamp, new CRC-32."""
    out = bytearray(data)
    assert out[16] == 1
    out[17] |= TIMESTAMP_TYPE_BIT
    struct.pack_into(">q", out, 18, append_time)
    struct.pack_into(">I", out, 12, zlib.crc32(bytes(out[16:])))
    return out


def finish_legacy_entry(entry: Entry, data: bytes | bytearray) -> None:
    """Store what an oracle's legacy builder produced as the broker would have stored it.

    kafka-python and aiokafka write wrapper offset 0 and wrapper timestamp 0; the broker sets
    the wrapper offset to the last inner offset (the timestamp stays as the producer wrote it)
    and, for LogAppendTime topics, stamps the append time.
    """
    if entry.codec != NONE:
        data = patch_offset(data, entry.last_offset)
        entry.wrapper_timestamp = 0
        if entry.timestamp_type == 1:
            data = stamp_legacy_log_append_time(data, entry.append_time)
            entry.wrapper_timestamp = entry.append_time
    elif entry.timestamp_type == 1:
        data = stamp_legacy_log_append_time(data, entry.records[0].ms)
    entry.data = bytes(data)


def stored_v2_codec(data: bytes | bytearray, requested: int) -> int:
    """The codec a third-party builder actually stored (they fall back to none when it
    does not shrink the records)."""
    stored = data[22] & 0x07
    assert stored in (requested, NONE), (stored, requested)
    return stored


def legacy_value_as_stored(data: bytes, magic: int) -> bytes | None:
    """The value field of a top-level legacy message (a wrapper's compressed payload)."""
    pos = 18 if magic == 0 else 26
    (key_len,) = struct.unpack_from(">i", data, pos)
    pos += 4 + max(key_len, 0)
    (value_len,) = struct.unpack_from(">i", data, pos)
    pos += 4
    return None if value_len < 0 else data[pos : pos + value_len]


# -- our builder -----------------------------------------------------------------------------


def build_ours(entry: Entry) -> None:
    """Encode ``entry`` with kafka_segments_ds.records.builder (timestamps must be ints)."""
    if entry.magic == 2:
        if entry.is_control:
            entry.data = encode_control_batch(
                offset=entry.base_offset,
                commit=entry.commit,
                producer_id=entry.producer_id,
                producer_epoch=entry.producer_epoch,
                timestamp=entry.records[0].ms,
                leader_epoch=entry.leader_epoch,
            )
            return
        specs = [
            RecordSpec(
                value=r.value,
                key=r.key,
                timestamp=r.ms,
                headers=r.headers,
                offset_delta=r.offset - entry.base_offset,
            )
            for r in entry.records
        ]
        entry.data = encode_batch(
            specs,
            base_offset=entry.base_offset,
            compression=CompressionType(entry.codec),
            timestamp_type=entry.timestamp_type,
            log_append_time=entry.log_append_time,
            producer_id=entry.producer_id,
            producer_epoch=entry.producer_epoch,
            base_sequence=entry.base_sequence,
            is_transactional=entry.is_transactional,
            leader_epoch=entry.leader_epoch,
            last_offset_delta=entry.last_offset_delta,
        )
        return
    if entry.codec == NONE:
        (rec,) = entry.records
        entry.data = encode_legacy_message(
            offset=rec.offset,
            magic=entry.magic,
            key=rec.key,
            value=rec.value,
            timestamp=rec.ms,
            attributes=TIMESTAMP_TYPE_BIT if entry.timestamp_type == 1 else 0,
        )
        return
    offsets = [r.offset for r in entry.records]
    assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), "ours: no inner gaps"
    entry.data = encode_legacy_wrapper(
        [RecordSpec(value=r.value, key=r.key, timestamp=r.ms) for r in entry.records],
        last_offset=entry.last_offset,
        magic=entry.magic,
        compression=CompressionType(entry.codec),
        timestamp_type=entry.timestamp_type,
        log_append_time=entry.log_append_time,
    )
    if entry.magic == 1:
        if entry.timestamp_type == 1:
            entry.wrapper_timestamp = entry.append_time
        else:
            entry.wrapper_timestamp = max(r.ms for r in entry.records)


# -- writing segments --------------------------------------------------------------------------


def write_log(tmp_path: Path, entries: list[Entry], segments: int = 1) -> Path:
    """Write built entries into ``<topic>-<partition>`` with up to ``segments`` .log files.

    Each segment is named by the first offset it holds; sets ``segment`` and ``position``.
    """
    directory = tmp_path / f"{TOPIC}-{PARTITION}"
    directory.mkdir()
    cuts = sorted(set(random.Random(len(entries)).sample(range(1, len(entries)), segments - 1)))
    bounds = [0, *cuts, len(entries)]
    for start, stop in itertools.pairwise(bounds):
        chunk = entries[start:stop]
        first = chunk[0].base_offset
        path = directory / f"{first:020d}.log"
        position = 0
        with path.open("wb") as out:
            for entry in chunk:
                assert entry.data, "build the entry first"
                entry.segment = str(path)
                entry.position = position
                out.write(entry.data)
                position += len(entry.data)
    return directory


# -- what every reader should report ---------------------------------------------------------


def _ts(value: int | None) -> int | None:
    return None if value is None or value == -1 else value


def record_timestamp(entry: Entry, rec: Rec) -> int | None:
    if entry.magic == 0:
        return None
    if entry.timestamp_type == 1 and (entry.magic == 2 or entry.is_wrapper):
        return _ts(entry.log_append_time if entry.magic == 2 else entry.wrapper_timestamp)
    return _ts(rec.timestamp)


def timestamp_type(entry: Entry) -> int:
    return -1 if entry.magic == 0 else entry.timestamp_type


def _metadata(entry: Entry) -> dict[str, Any]:
    legacy = entry.magic < 2
    return {
        "topic": TOPIC,
        "partition": PARTITION,
        "magic": entry.magic,
        "compression": CODEC_LABELS[entry.codec],
        "batchBaseOffset": entry.base_offset,
        "batchLastOffset": entry.last_offset,
        "producerId": -1 if legacy else entry.producer_id,
        "producerEpoch": -1 if legacy else entry.producer_epoch,
        "baseSequence": -1 if legacy else entry.base_sequence,
        "isTransactional": entry.is_transactional,
        "isControl": entry.is_control,
        "leaderEpoch": -1 if legacy else entry.leader_epoch,
        "segment": entry.segment,
        "position": entry.position,
    }


def aborted_entries(entries: Sequence[Entry]) -> set[int]:
    """Indexes of transactional data entries whose transaction ended in an ABORT marker."""
    pending: dict[int, list[int]] = {}
    aborted: set[int] = set()
    for i, entry in enumerate(entries):
        if not entry.is_transactional:
            continue
        if entry.is_control:
            batch = pending.pop(entry.producer_id, [])
            if not entry.commit:
                aborted.update(batch)
        else:
            pending.setdefault(entry.producer_id, []).append(i)
    assert not pending, "plans close every transaction"
    return aborted


def expected_deep(entries: Sequence[Entry], *, read_committed: bool = False) -> list[dict]:
    dropped = aborted_entries(entries) if read_committed else set()
    rows: list[dict] = []
    for i, entry in enumerate(entries):
        if entry.is_control or i in dropped:
            continue
        meta = _metadata(entry)
        rows.extend(
            {
                "key": rec.key,
                "value": rec.value,
                "offset": rec.offset,
                "timestamp": record_timestamp(entry, rec),
                "timestampType": timestamp_type(entry),
                "headers": list(rec.headers),
                **meta,
            }
            for rec in entry.records
        )
    return rows


def expected_shallow(entries: Sequence[Entry]) -> list[dict]:
    rows = []
    for entry in entries:
        meta = _metadata(entry)
        if entry.magic == 2:
            row = {
                "key": None,
                "value": entry.data[V2_HEADER_SIZE:],
                "offset": entry.last_offset,
                "timestamp": _ts(entry.max_timestamp()),
                "timestampType": entry.timestamp_type,
            }
        elif entry.is_wrapper:
            row = {
                "key": None,
                "value": legacy_value_as_stored(entry.data, entry.magic),
                "offset": entry.last_offset,
                "timestamp": None if entry.magic == 0 else _ts(entry.wrapper_timestamp),
                "timestampType": timestamp_type(entry),
            }
        else:
            (rec,) = entry.records
            row = {
                "key": rec.key,
                "value": rec.value,
                "offset": rec.offset,
                "timestamp": record_timestamp(entry, rec),
                "timestampType": timestamp_type(entry),
            }
        rows.append({**row, **meta})
    return rows


# -- our reader ------------------------------------------------------------------------------


def read_ours(path: Path, **options: Any) -> list[dict]:
    """``read_table`` with every column, timestamps as epoch ms (None = NULL), headers as tuples."""
    table = read_table(str(path), includeMetadata=True, **options)
    micros = table.column("timestamp").cast(pa.int64()).to_pylist()
    rows = table.drop_columns(["timestamp"]).to_pylist()
    for row, us in zip(rows, micros, strict=True):
        assert us is None or us % 1000 == 0, f"timestamp {us} us is not whole milliseconds"
        row["timestamp"] = None if us is None else us // 1000
        if "headers" in row and row["headers"] is not None:
            row["headers"] = [(h["key"], h["value"]) for h in row["headers"]]
    return rows


def assert_rows_equal(actual: list[dict], expected: list[dict]) -> None:
    """Row count, then every row field by field, naming the first differing row and fields."""
    assert len(actual) == len(expected), (
        f"{len(actual)} rows, expected {len(expected)}; offsets "
        f"{[r['offset'] for r in actual][:40]} vs {[r['offset'] for r in expected][:40]}"
    )
    for i, (got, want) in enumerate(zip(actual, expected, strict=True)):
        assert set(got) == set(want), f"row {i}: columns {sorted(got)} vs {sorted(want)}"
        diff = {k: (_short(got[k]), _short(want[k])) for k in want if got[k] != want[k]}
        assert not diff, f"row {i} (offset {want['offset']}): (ours, expected) {diff}"


def _short(value: Any) -> Any:
    if isinstance(value, bytes) and len(value) > 64:
        return value[:32] + b"..." + f"({len(value)} bytes)".encode()
    return value


def check_ours(directory: Path, entries: list[Entry], **options: Any) -> None:
    """Deep and shallow read_table output equals the plan, every row and column."""
    deep = read_ours(directory, includeHeaders=True, **options)
    assert_rows_equal(deep, expected_deep(entries))
    shallow = read_ours(directory, iteration="shallow", **options)
    want = expected_shallow(entries)
    assert_rows_equal(shallow, want)
    # and the deep rows of each batch are exactly that batch's records
    per_batch: dict[tuple[str, int], int] = {}
    for row in deep:
        key = (row["segment"], row["position"])
        per_batch[key] = per_batch.get(key, 0) + 1
    for entry in entries:
        assert per_batch.get((entry.segment, entry.position), 0) == len(entry.records)


# -- the oracles' readers --------------------------------------------------------------------


@dataclass
class OracleBatch:
    """What an oracle's reader says about one top-level entry."""

    batch: Any
    records: list[tuple[int, int | None, int, bytes | None, bytes | None, list]] = field(
        default_factory=list
    )


def read_oracle(buf: bytes, memory_records: Callable[[bytes], Any]) -> list[OracleBatch]:
    """Walk ``buf`` with an oracle's MemoryRecords, validating every CRC it can."""
    records = memory_records(bytes(buf))
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), "oracle: batch CRC mismatch"
        rows = []
        for rec in batch:
            check = getattr(rec, "validate_crc", None)
            if check is not None:
                assert check(), f"oracle: record CRC mismatch at offset {rec.offset}"
            ts_type = rec.timestamp_type
            rows.append(
                (
                    rec.offset,
                    _ts(rec.timestamp),
                    -1 if ts_type is None else ts_type,
                    rec.key,
                    rec.value,
                    [tuple(h) for h in rec.headers],
                )
            )
        out.append(OracleBatch(batch, rows))
    return out


def check_oracle(
    buf: bytes,
    entries: Sequence[Entry],
    memory_records: Callable,
    *,
    entry_by_entry: bool = False,
    no_timestamp_has_no_type: bool = False,
) -> None:
    """The oracle decodes ``buf`` to exactly the plan: every record, every batch field it has.

    Two switches for known aiokafka quirks: ``entry_by_entry`` feeds the oracle one entry at a
    time (its compiled MemoryRecords keeps the first entry's magic for the rest of the buffer);
    ``no_timestamp_has_no_type``: it reports timestamp type None for a magic-1 message whose
    timestamp is -1 (Kafka keeps the type from the attributes).
    """
    if entry_by_entry:
        assert buf == concat(entries)
        got = [b for e in entries for b in read_oracle(e.data, memory_records)]
    else:
        got = read_oracle(buf, memory_records)
    assert len(got) == len(entries), f"oracle sees {len(got)} entries, plan has {len(entries)}"
    for i, (seen, entry) in enumerate(zip(got, entries, strict=True)):
        want = [
            (
                r.offset,
                record_timestamp(entry, r),
                timestamp_type(entry),
                r.key,
                r.value,
                list(r.headers),
            )
            for r in entry.records
        ]
        if no_timestamp_has_no_type and entry.magic == 1:
            want = [(*w[:2], -1 if w[1] is None else w[2], *w[3:]) for w in want]
        assert seen.records == want, f"entry {i}: oracle records differ from the plan"
        batch = seen.batch
        fields: dict[str, object]
        if entry.magic == 2:
            fields = {
                "base_offset": entry.base_offset,
                "last_offset_delta": entry.last_offset_delta,
                "max_timestamp": entry.max_timestamp(),
                "timestamp_type": entry.timestamp_type,
                "compression_type": entry.codec,
                "producer_id": entry.producer_id,
                "producer_epoch": entry.producer_epoch,
                "base_sequence": entry.base_sequence,
                "is_transactional": entry.is_transactional,
                "is_control_batch": entry.is_control,
                "next_offset": entry.last_offset + 1,
                "leader_epoch": entry.leader_epoch,  # kafka-python only
                "records_count": len(entry.records),  # kafka-python only
            }
        else:
            fields = {
                "base_offset": entry.last_offset,  # kafka-python: the wrapper's offset field
                "next_offset": entry.last_offset + 1,
                "magic": entry.magic,
                "compression_type": entry.codec,
                "timestamp_type": None if entry.magic == 0 else entry.timestamp_type,
                "is_transactional": False,
                "is_control_batch": False,
            }
        # aiokafka's compiled batches expose fewer properties than kafka-python's
        have = {name: getattr(batch, name) for name in fields if hasattr(batch, name)}
        assert have == {name: fields[name] for name in have}, f"entry {i}: batch fields differ"
        assert "base_offset" in have or "next_offset" in have


def concat(entries: Sequence[Entry]) -> bytes:
    return b"".join(e.data for e in entries)


def assert_codec_kept(entries: Sequence[Entry], requested: int) -> None:
    """At least one entry really is stored with the codec under test."""
    assert any(e.codec == requested for e in entries), f"no entry stored as {requested}"


# -- transactions ----------------------------------------------------------------------------

CONTROL_KEY = struct.Struct(">hh")  # version, type (0 ABORT, 1 COMMIT)
END_TXN_MARKER = struct.Struct(">hi")  # version, coordinator epoch


def control_entry(
    offset: int,
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    timestamp: int,
    leader_epoch: int,
) -> Entry:
    """A COMMIT/ABORT marker batch as the broker writes it (built later with build_ours)."""
    marker = Rec(
        offset,
        key=CONTROL_KEY.pack(0, 1 if commit else 0),
        value=END_TXN_MARKER.pack(0, 0),
        timestamp=timestamp,
    )
    return Entry(
        2,
        NONE,
        [marker],
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        commit=commit,
        leader_epoch=leader_epoch,
    )


def transactional_plan(rng: random.Random, *, builder_timestamps: bool) -> list[Entry]:
    """Interleaved transactions of three producers (committed and aborted), plain and
    idempotent batches in between, and every transaction closed by a marker."""
    producers = {rng.randint(1, 2**40): rng.randint(0, 300) for _ in range(3)}
    idempotent_pid = max(producers) + 1
    sequences = dict.fromkeys([*producers, idempotent_pid], 0)
    open_txn: dict[int, bool] = dict.fromkeys(producers, False)
    entries: list[Entry] = []
    offset = rng.randint(0, 100_000)
    leader_epoch = rng.randint(0, 9)

    def data(pid: int, epoch: int, transactional: bool) -> None:
        nonlocal offset
        (entry,) = random_entries(
            rng,
            2,
            rng.choice(V2_CODECS),
            first_offset=offset,
            count=1,
            builder_timestamps=builder_timestamps,
            inner_gaps=False,
            producer_state=False,
        )
        entry.leader_epoch = leader_epoch
        if pid != -1:
            entry.producer_id, entry.producer_epoch = pid, epoch
            entry.base_sequence = sequences[pid]
            sequences[pid] += len(entry.records)
            entry.is_transactional = transactional
        entries.append(entry)
        offset = entry.last_offset + 1

    def marker(pid: int, commit: bool) -> None:
        nonlocal offset
        ts = rng.randint(1_000_000_000_000, 2_000_000_000_000)
        entries.append(
            control_entry(
                offset, pid, producers[pid], commit=commit, timestamp=ts, leader_epoch=leader_epoch
            )
        )
        offset += 1
        open_txn[pid] = False

    for _ in range(rng.randint(10, 18)):
        roll = rng.random()
        if roll < 0.15:
            data(-1, -1, False)
        elif roll < 0.25:
            data(idempotent_pid, 0, False)
        else:
            pid = rng.choice(list(producers))
            if open_txn[pid] and rng.random() < 0.4:
                marker(pid, commit=rng.random() < 0.5)
            elif not open_txn[pid] and rng.random() < 0.08:
                marker(pid, commit=False)  # an abort with no data: changes nothing
            else:
                data(pid, producers[pid], True)
                open_txn[pid] = True
    for pid in producers:
        if open_txn[pid]:
            marker(pid, commit=rng.random() < 0.5)
    return entries


def interesting_transactional_plan(rng: random.Random, *, builder_timestamps: bool) -> list[Entry]:
    """A transactional plan with at least one aborted and one committed transaction."""
    while True:
        entries = transactional_plan(rng, builder_timestamps=builder_timestamps)
        aborted = aborted_entries(entries)
        committed = [
            i
            for i, e in enumerate(entries)
            if e.is_transactional and not e.is_control and i not in aborted
        ]
        if aborted and committed:
            return entries
