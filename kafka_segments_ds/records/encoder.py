"""Columnar magic-2 batch encoder: Arrow-style columns in, complete record batches out.

The writer's hot path. Records are never Python objects: key, value and header columns arrive as
(offsets, data, validity) numpy arrays and compiled kernels (1) size every record and cut batches at
``batch_bytes`` / ``batch_records`` the way a producer fills ``batch.size``, (2) write the record
regions, (3) write the 61-byte headers. Python only compresses and checksums once per batch.

The readable reference for the bytes produced is :func:`kafka_segments_ds.records.builder.
encode_batch` (one :class:`RecordSpec` at a time); tests check the two agree byte for byte.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np

from kafka_segments_ds.records._compiled import load
from kafka_segments_ds.records.compression import CompressionType, compress
from kafka_segments_ds.records.v2 import CRC_START, TIMESTAMP_TYPE_MASK

V2_HEADER_SIZE = 61
BATCH_LENGTH_BASE = V2_HEADER_SIZE - 12  # batchLength counts from partitionLeaderEpoch on
# the 61-byte batch header as the encoder writes it (FORMAT.md §4.1)
_V2_HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic (2)
    "I"  # crc (written after, over attributes..end)
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # records count
)


@dataclass(frozen=True)
class BinaryColumn:
    """A nullable binary column as numpy arrays: row i is ``data[offsets[i]:offsets[i + 1]]``."""

    offsets: np.ndarray  # int32 or int64, n + 1 (need not start at 0)
    data: np.ndarray  # uint8
    valid: np.ndarray  # uint8, n; 0 = null

    @classmethod
    def empty(cls, rows: int) -> BinaryColumn:
        """An all-null column of ``rows`` rows."""
        return cls(np.zeros(rows + 1, np.int64), np.zeros(0, np.uint8), np.zeros(rows, np.uint8))


@dataclass(frozen=True)
class RecordColumns:
    """Everything the encoder needs for ``rows`` records, in log order."""

    timestamps: np.ndarray  # int64 ms, n
    keys: BinaryColumn
    values: BinaryColumn
    header_rows: np.ndarray  # int64, n + 1: record i has headers header_rows[i]:header_rows[i+1]
    header_keys: BinaryColumn  # UTF-8 key per header (never null)
    header_values: BinaryColumn

    @property
    def rows(self) -> int:
        return len(self.timestamps)


@dataclass(frozen=True)
class BatchSettings:
    """Batch-level fields and limits, the same for every batch of one encode call."""

    compression: int = CompressionType.NONE
    level: int | None = None
    batch_bytes: int = 16384  # the producer's batch.size
    batch_records: int = 2**31 - 1
    log_append_time: int | None = None  # set: timestampType LogAppendTime with this time
    leader_epoch: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


@dataclass(frozen=True)
class EncodedBatches:
    """Encoded batches laid end to end, and per batch what the segment writer needs."""

    data: bytes | bytearray | memoryview
    positions: np.ndarray  # int64 byte position of each batch in ``data``
    sizes: np.ndarray  # int64 total size of each batch
    first_rows: np.ndarray  # int64 row of each batch's first record (= base offset - first)
    last_rows: np.ndarray  # int64 row of each batch's last record
    max_timestamps: np.ndarray  # int64


# --------------------------------------------------------------------------------------------
# Kernels: compiled (_encoder.pyx); these pure-Python versions are the fallback (see _compiled)
# --------------------------------------------------------------------------------------------


def _zigzag_size(value: int) -> int:
    """Bytes of the zigzag varint of ``value``."""
    return max(1, -(-((value << 1) ^ (value >> 63)).bit_length() // 7))


def _blob_size(offsets: list[int], valid: np.ndarray | None, i: int) -> int:
    if valid is not None and not valid[i]:
        return 1  # varint -1
    length = offsets[i + 1] - offsets[i]
    return _zigzag_size(length) + length


def _body_size(
    i: int, offset_delta: int, timestamp_delta: int, key_off: list[int], key_valid: np.ndarray,
    val_off: list[int], val_valid: np.ndarray, header_rows: list[int], hk_off: list[int],
    hv_off: list[int], hv_valid: np.ndarray,
) -> int:  # fmt: skip
    size = 1 + _zigzag_size(timestamp_delta) + _zigzag_size(offset_delta)
    size += _blob_size(key_off, key_valid, i) + _blob_size(val_off, val_valid, i)
    first, last = header_rows[i], header_rows[i + 1]
    size += _zigzag_size(last - first)
    for h in range(first, last):
        size += _blob_size(hk_off, None, h) + _blob_size(hv_off, hv_valid, h)
    return size


def plan_batches(
    timestamps: np.ndarray,
    key_off: np.ndarray,
    key_valid: np.ndarray,
    val_off: np.ndarray,
    val_valid: np.ndarray,
    header_rows: np.ndarray,
    hk_off: np.ndarray,
    hv_off: np.ndarray,
    hv_valid: np.ndarray,
    batch_bytes: int,
    batch_records: int,
    body_sizes: np.ndarray,
    batch_starts: np.ndarray,
    region_sizes: np.ndarray,
    starts: np.ndarray | None = None,
) -> int:
    """Cut rows into batches; fill each record's body size and each batch's first row.

    A batch takes records while its size stays within ``batch_bytes`` and its count within
    ``batch_records``; a record that alone exceeds ``batch_bytes`` gets a batch of its own (as a
    producer does). ``starts`` (uint8 per row, optional): rows where a batch must start.
    ``batch_starts[count]`` is set to the row count. Returns the batch count.
    """
    forced = starts.tolist() if starts is not None else None
    ts = timestamps.tolist()
    columns = [a.tolist() for a in (key_off, val_off, header_rows, hk_off, hv_off)]
    k_off, v_off, h_rows, hk, hv = columns
    rows = len(ts)
    batches = count = region = base_ts = i = 0
    while i < rows:
        if count == 0:
            base_ts = ts[i]
            batch_starts[batches] = i
        body = _body_size(
            i, count, ts[i] - base_ts, k_off, key_valid, v_off, val_valid, h_rows, hk, hv,
            hv_valid,
        )  # fmt: skip
        total = _zigzag_size(body) + body
        if count > 0 and (
            V2_HEADER_SIZE + region + total > batch_bytes
            or count >= batch_records
            or (forced is not None and forced[i])
        ):
            region_sizes[batches] = region  # close the batch; row i starts the next one
            batches += 1
            count = region = 0
            continue
        body_sizes[i] = body
        region += total
        count += 1
        i += 1
    if count > 0:
        region_sizes[batches] = region
        batches += 1
    batch_starts[batches] = rows
    return batches


def _varint_bytes(value: int) -> bytes:
    zigzagged = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while zigzagged >= 0x80:
        out.append((zigzagged & 0x7F) | 0x80)
        zigzagged >>= 7
    out.append(zigzagged)
    return bytes(out)


def _blob_bytes(offsets: list[int], data: np.ndarray, valid: np.ndarray | None, i: int) -> bytes:
    if valid is not None and not valid[i]:
        return b"\x01"  # zigzag(-1)
    start, end = offsets[i], offsets[i + 1]
    return _varint_bytes(end - start) + data[start:end].tobytes()


def _header_bytes(b: int, header: tuple) -> bytes:  # type: ignore[type-arg]
    """Batch b's 61-byte header except the CRC (zeros), from encode_v2's header tuple."""
    base_offsets, region_lengths, attributes, lods, base_ts, max_ts, counts = header[:7]
    leader_epoch, producer_id, producer_epoch, base_sequence = header[7:]
    return _V2_HEADER.pack(
        int(base_offsets[b]), BATCH_LENGTH_BASE + int(region_lengths[b]), leader_epoch, 2, 0,
        attributes, int(lods[b]), int(base_ts[b]), int(max_ts[b]), producer_id, producer_epoch,
        base_sequence, int(counts[b]),
    )  # fmt: skip


def encode_records(
    batches: int,
    batch_starts: np.ndarray,
    region_positions: np.ndarray,
    body_sizes: np.ndarray,
    timestamps: np.ndarray,
    key_off: np.ndarray,
    key_data: np.ndarray,
    key_valid: np.ndarray,
    val_off: np.ndarray,
    val_data: np.ndarray,
    val_valid: np.ndarray,
    header_rows: np.ndarray,
    hk_off: np.ndarray,
    hk_data: np.ndarray,
    hv_off: np.ndarray,
    hv_data: np.ndarray,
    hv_valid: np.ndarray,
    out: np.ndarray,
    header: tuple,  # type: ignore[type-arg]
) -> None:
    """Write batch b's records at ``region_positions[b]`` (sizes from :func:`plan_batches`).

    With a non-empty ``header[0]`` the records follow their header in place: write the header
    and the CRC too.
    """
    ts = timestamps.tolist()
    k_off, v_off, h_rows, hk, hv = (
        a.tolist() for a in (key_off, val_off, header_rows, hk_off, hv_off)
    )
    plain = len(header[0]) > 0
    for b in range(batches):
        first, stop = int(batch_starts[b]), int(batch_starts[b + 1])
        parts = []
        for i in range(first, stop):
            parts += [
                _varint_bytes(int(body_sizes[i])), b"\x00", _varint_bytes(ts[i] - ts[first]),
                _varint_bytes(i - first), _blob_bytes(k_off, key_data, key_valid, i),
                _blob_bytes(v_off, val_data, val_valid, i),
                _varint_bytes(h_rows[i + 1] - h_rows[i]),
            ]  # fmt: skip
            for h in range(h_rows[i], h_rows[i + 1]):
                parts += [_blob_bytes(hk, hk_data, None, h), _blob_bytes(hv, hv_data, hv_valid, h)]
        region = b"".join(parts)
        pos = int(region_positions[b])
        if plain:
            start = pos - V2_HEADER_SIZE
            batch = bytearray(_header_bytes(b, header) + region)
            batch[17:21] = crc32c.crc32c(batch[CRC_START:]).to_bytes(4, "big")
            out[start : start + len(batch)] = np.frombuffer(bytes(batch), np.uint8)
        else:
            out[pos : pos + len(region)] = np.frombuffer(region, np.uint8)


def write_headers(out: np.ndarray, positions: np.ndarray, sizes: np.ndarray, header: tuple) -> None:  # type: ignore[type-arg]
    """Write every batch's header at ``positions`` and its CRC-32C over the complete batch."""
    for b, (p, size) in enumerate(zip(positions.tolist(), sizes.tolist(), strict=True)):
        out[p : p + V2_HEADER_SIZE] = np.frombuffer(_header_bytes(b, header), np.uint8)
        crc = crc32c.crc32c(out[p + CRC_START : p + size].data)
        out[p + 17 : p + 21] = np.frombuffer(crc.to_bytes(4, "big"), np.uint8)


# the pure-Python kernels by name, whichever path runs (tests compare the two)
PURE_PYTHON: dict[str, Callable[..., Any]] = {
    f.__name__: f for f in (plan_batches, encode_records, write_headers)
}
_compiled = load("kafka_segments_ds.records._encoder")
COMPILED = _compiled is not None
if _compiled is not None:
    plan_batches = _compiled.plan_batches
    encode_records = _compiled.encode_records
    write_headers = _compiled.write_headers


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def _buffer(size: int, reuse: list[np.ndarray] | None) -> np.ndarray:
    """``size`` bytes from the caller's reusable buffer (grown as needed), else a new array."""
    if reuse is None:
        return np.empty(size, np.uint8)
    if not reuse or len(reuse[0]) < size:
        reuse[:] = [np.empty(max(size, 2 * len(reuse[0]) if reuse else size), np.uint8)]
    return reuse[0][:size]


def encode_v2(
    columns: RecordColumns,
    settings: BatchSettings,
    first_offset: int = 0,
    buffers: tuple[list[np.ndarray], list[np.ndarray]] | None = None,
    starts: np.ndarray | None = None,
) -> EncodedBatches:
    """Encode all rows of ``columns`` into magic-2 batches, offsets from ``first_offset``.

    ``starts`` (uint8 per row, optional): rows that must start a batch, besides the cuts
    ``batch_bytes``/``batch_records`` make (the offset-preserving writer's batch boundaries).

    Returns every batch, the last one possibly smaller than ``batch_bytes`` (the caller decides
    whether to keep it or carry its rows over to the next call). ``buffers``: two holders of
    reusable arrays (scratch, output) that spare a writer fresh memory (page faults) on every
    call; the result's ``data`` then stays valid only until the next call with them.
    """
    scratch_reuse, out_reuse = buffers if buffers is not None else (None, None)
    rows = columns.rows
    empty = np.zeros(0, np.int64)
    if rows == 0:
        return EncodedBatches(b"", empty, empty, empty, empty, empty)
    keys, values = columns.keys, columns.values
    hk, hv = columns.header_keys, columns.header_values
    body_sizes = np.empty(rows, np.int64)
    batch_starts = np.empty(rows + 1, np.int64)
    region_sizes = np.empty(rows, np.int64)
    count = plan_batches(
        columns.timestamps,
        keys.offsets,
        keys.valid,
        values.offsets,
        values.valid,
        columns.header_rows,
        hk.offsets,
        hv.offsets,
        hv.valid,
        settings.batch_bytes,
        settings.batch_records,
        body_sizes,
        batch_starts,
        region_sizes,
        starts,
    )
    batch_starts = batch_starts[: count + 1]
    region_sizes = region_sizes[:count]
    firsts = batch_starts[:-1]
    lasts = batch_starts[1:] - 1
    counts = lasts - firsts + 1
    base_ts = columns.timestamps[firsts]
    max_ts = np.maximum.reduceat(columns.timestamps, firsts)
    attributes = int(settings.compression)
    if settings.log_append_time is not None:
        attributes |= TIMESTAMP_TYPE_MASK
        max_ts = np.full(count, settings.log_append_time, np.int64)
    compressed = settings.compression != CompressionType.NONE
    base_offsets = firsts + first_offset
    header_fields = (
        attributes, counts - 1, base_ts, max_ts, counts, settings.leader_epoch,
        settings.producer_id, settings.producer_epoch, settings.base_sequence,
    )  # fmt: skip
    # Uncompressed: records go straight behind their header, which the same kernel writes and
    # checksums. Compressed: records into a scratch buffer of regions, each compressed after.
    if compressed:
        region_positions = np.concatenate(([0], np.cumsum(region_sizes)[:-1])).astype(np.int64)
        scratch = _buffer(int(region_sizes.sum()), scratch_reuse)
        header = (empty, empty, *header_fields)
    else:
        sizes = region_sizes + V2_HEADER_SIZE
        positions = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        region_positions = positions + V2_HEADER_SIZE
        scratch = _buffer(int(sizes.sum()), out_reuse)
        header = (base_offsets, region_sizes, *header_fields)
    encode_records(
        count, batch_starts, region_positions, body_sizes, columns.timestamps,
        keys.offsets, keys.data, keys.valid, values.offsets, values.data, values.valid,
        columns.header_rows, hk.offsets, hk.data, hv.offsets, hv.data, hv.valid, scratch, header,
    )  # fmt: skip
    if not compressed:
        return EncodedBatches(scratch.data, positions, sizes, firsts, lasts, max_ts)

    view = scratch.data
    payloads = [
        compress(settings.compression, view[start : start + length], level=settings.level)
        for start, length in zip(region_positions.tolist(), region_sizes.tolist(), strict=True)
    ]
    payload_sizes = np.fromiter((len(p) for p in payloads), np.int64, count)
    sizes = payload_sizes + V2_HEADER_SIZE
    positions = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    out = _buffer(int(sizes.sum()), out_reuse)
    view = out.data
    for p, payload in zip(positions.tolist(), payloads, strict=True):
        view[p + V2_HEADER_SIZE : p + V2_HEADER_SIZE + len(payload)] = payload
    write_headers(out, positions, sizes, (base_offsets, payload_sizes, *header_fields))
    return EncodedBatches(out.data, positions, sizes, firsts, lasts, max_ts)
