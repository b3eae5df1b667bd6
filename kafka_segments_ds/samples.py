"""Generate broker-like log directories for the demo, benchmarks and tests.

The output looks like a copy of a broker's ``log.dirs`` entry: ``meta.properties``,
checkpoint files, ``<topic>-<partition>`` directories with rolled segments, their
``.index``/``.timeindex`` (built the way a broker rebuilds them), a ``.txnindex`` for aborted
transactions, and debris a broker would leave (``.deleted`` files, a ``-delete`` directory).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kafka_segments_ds import index as kidx
from kafka_segments_ds.layout import segment_file_name
from kafka_segments_ds.producer_snapshot import encode_producer_snapshot
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_control_batch,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.compression import CompressionType

_TXN_ENTRY_VERSION = b"\x00\x00"


@dataclass
class PartitionWriter:
    """Appends encoded entries to a partition directory, rolling segments by size."""

    directory: Path
    segment_bytes: int = 1 << 30
    index_interval_bytes: int = 4096
    next_offset: int = 0
    _base: int = 0
    _chunks: list[bytes] = field(default_factory=list)
    _size: int = 0
    _aborted: list[tuple[int, int, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._base = self.next_offset

    def append(self, entry: bytes, last_offset: int) -> None:
        """Append one encoded entry whose last offset is ``last_offset``."""
        if self._size and self._size + len(entry) > self.segment_bytes:
            self.roll()
        if not self._size:
            self._base = self.next_offset
        self._chunks.append(entry)
        self._size += len(entry)
        self.next_offset = last_offset + 1

    def record_abort(self, producer_id: int, first: int, last: int) -> None:
        self._aborted.append((producer_id, first, last, last + 1))

    def roll(self) -> None:
        """Finish the current segment: write .log, .index, .timeindex (and .txnindex)."""
        if not self._size:
            return
        data = b"".join(self._chunks)
        prefix = self.directory
        (prefix / segment_file_name(self._base, ".log")).write_bytes(data)
        table = scan_entries(data)
        offset_index, time_index = kidx.build_indexes(
            table.positions,
            table.sizes,
            table.last_offsets,
            table.max_timestamps,
            self._base,
            self.index_interval_bytes,
        )
        (prefix / segment_file_name(self._base, ".index")).write_bytes(offset_index)
        (prefix / segment_file_name(self._base, ".timeindex")).write_bytes(time_index)
        if self._aborted:
            blob = b"".join(
                _TXN_ENTRY_VERSION
                + pid.to_bytes(8, "big", signed=True)
                + first.to_bytes(8, "big", signed=True)
                + last.to_bytes(8, "big", signed=True)
                + lso.to_bytes(8, "big", signed=True)
                for pid, first, last, lso in self._aborted
            )
            (prefix / segment_file_name(self._base, ".txnindex")).write_bytes(blob)
        self._chunks, self._size, self._aborted = [], 0, []
        self._base = self.next_offset


def _value(rng: random.Random, size: int) -> bytes:
    words = ("order", "user", "click", "view", "cart", "pay", "ship", "item", "sku", "eu", "us")
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words)
        out.append(word)
        length += len(word) + 1
    return " ".join(out).encode()[:size]


def write_sample_log_dir(
    root: str | os.PathLike[str],
    *,
    records_per_partition: int = 2000,
    segment_bytes: int = 64 * 1024,
    seed: int = 7,
    start_timestamp: int = 1_700_000_000_000,
) -> Path:
    """Write a small, varied, broker-like log dir and return its path.

    Topics: ``orders`` (2 partitions, lz4 + zstd, headers, an aborted and a committed
    transaction), ``legacy.events`` (an old topic upgraded through magic 0, 1 and 2, gzip and
    snappy wrappers), ``metrics-v1`` (uncompressed, keyless).
    """
    rng = random.Random(seed)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=sample\n")
    written: list[tuple[str, int, int]] = []
    for partition, codec in ((0, CompressionType.LZ4), (1, CompressionType.ZSTD)):
        writer = PartitionWriter(root / f"orders-{partition}", segment_bytes=segment_bytes)
        _orders(writer, rng, records_per_partition, codec, start_timestamp)
        written.append(("orders", partition, writer.next_offset))
    writer = PartitionWriter(root / "legacy.events-0", segment_bytes=segment_bytes)
    _legacy(writer, rng, records_per_partition, start_timestamp)
    written.append(("legacy.events", 0, writer.next_offset))
    writer = PartitionWriter(root / "metrics-v1-0", segment_bytes=segment_bytes)
    ts = start_timestamp
    for first in range(0, records_per_partition, 50):
        count = min(50, records_per_partition - first)
        specs = [RecordSpec(value=_value(rng, 60), timestamp=ts + i * 10) for i in range(count)]
        writer.append(encode_batch(specs, base_offset=first), first + count - 1)
        ts += count * 10
    writer.roll()
    written.append(("metrics-v1", 0, writer.next_offset))
    # debris a broker leaves behind, which readers must skip
    debris = root / "orders-0"
    (debris / "00000000000000099999.log.deleted").write_bytes(b"\x00" * 64)
    (debris / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
    (debris / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
    # an (empty) producer-state snapshot, as a broker writes one when it rolls a segment
    (debris / segment_file_name(0, ".snapshot")).write_bytes(encode_producer_snapshot([]))
    gone = root / "orders-7.0123456789abcdef0123456789abcdef-delete"
    gone.mkdir(exist_ok=True)
    (gone / segment_file_name(0, ".log")).write_bytes(b"\x00" * 32)
    checkpoint = f"0\n{len(written)}\n" + "".join(f"{t} {p} {end}\n" for t, p, end in written)
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
        (root / name).write_text(checkpoint)
    (root / "log-start-offset-checkpoint").write_text("0\n0\n")
    return root


def _orders(
    writer: PartitionWriter, rng: random.Random, count: int, codec: int, start_ts: int
) -> None:
    offset = 0
    ts = start_ts
    producer = 4242
    sequence = 0
    txn_done = 0
    while offset < count:
        size = min(rng.randint(5, 40), count - offset)
        specs = [
            RecordSpec(
                key=f"user-{rng.randint(1, 500)}".encode(),
                value=_value(rng, rng.randint(40, 160)),
                timestamp=ts + rng.randint(-5, 5),
                headers=(("source", b"web"), ("trace", str(offset + i).encode())),
            )
            for i in range(size)
        ]
        ts += 1000
        transactional = txn_done < 2 and offset > count // 3
        if transactional:
            batch = encode_batch(
                specs,
                base_offset=offset,
                compression=codec,
                producer_id=producer,
                producer_epoch=0,
                base_sequence=sequence,
                is_transactional=True,
            )
            writer.append(batch, offset + size - 1)
            commit = txn_done == 1
            marker_offset = offset + size
            writer.append(
                encode_control_batch(
                    offset=marker_offset,
                    commit=commit,
                    producer_id=producer,
                    producer_epoch=0,
                    timestamp=ts,
                ),
                marker_offset,
            )
            if not commit:
                writer.record_abort(producer, offset, marker_offset)
            txn_done += 1
            offset = marker_offset + 1
        else:
            batch = encode_batch(
                specs,
                base_offset=offset,
                compression=codec,
                producer_id=producer,
                producer_epoch=0,
                base_sequence=sequence,
            )
            writer.append(batch, offset + size - 1)
            offset += size
        sequence += size
    writer.roll()


def _legacy(writer: PartitionWriter, rng: random.Random, count: int, start_ts: int) -> None:
    """An old topic: magic 0 (plain + gzip wrappers), then magic 1 (snappy), then magic 2."""
    offset = 0
    ts = start_ts
    third = count // 3
    while offset < count:
        if offset < third:
            if rng.random() < 0.5:
                writer.append(
                    encode_legacy_message(offset=offset, magic=0, key=None, value=_value(rng, 80)),
                    offset,
                )
                offset += 1
                continue
            n = min(rng.randint(2, 10), count - offset)
            specs = [RecordSpec(value=_value(rng, 80)) for _ in range(n)]
            writer.append(
                encode_legacy_wrapper(
                    specs, last_offset=offset + n - 1, magic=0, compression=CompressionType.GZIP
                ),
                offset + n - 1,
            )
            offset += n
        elif offset < 2 * third:
            n = min(rng.randint(2, 10), count - offset)
            specs = [
                RecordSpec(value=_value(rng, 80), key=b"k%d" % (offset + i), timestamp=ts + i)
                for i in range(n)
            ]
            writer.append(
                encode_legacy_wrapper(
                    specs, last_offset=offset + n - 1, magic=1, compression=CompressionType.SNAPPY
                ),
                offset + n - 1,
            )
            offset += n
            ts += 100
        else:
            n = min(rng.randint(2, 30), count - offset)
            specs = [
                RecordSpec(value=_value(rng, 80), key=b"k%d" % (offset + i), timestamp=ts + i)
                for i in range(n)
            ]
            writer.append(
                encode_batch(specs, base_offset=offset, compression=CompressionType.GZIP),
                offset + n - 1,
            )
            offset += n
            ts += 100
    writer.roll()


def iter_partition_dirs(root: str | os.PathLike[str]) -> Iterable[Path]:
    """The ``<topic>-<partition>`` directories of a sample dir (for tests)."""
    return sorted(p for p in Path(root).iterdir() if p.is_dir() and not p.name.endswith("-delete"))
