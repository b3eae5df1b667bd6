"""Encoders for every entry kind: magic-2 batches and magic-0/1 messages and wrappers.

The writer, the demo data generator and the tests build logs with these. They produce exactly
what a Kafka producer and broker store (see records/v2.py and records/legacy.py for layouts).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from kafka_segments_ds.records.checksums import crc32, crc32c
from kafka_segments_ds.records.compression import CompressionType, compress
from kafka_segments_ds.records.v2 import (
    CONTROL_KEY,
    CONTROL_MASK,
    CRC_START,
    END_TXN_MARKER,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    V2_HEADER,
)
from kafka_segments_ds.records.varint import encode_varint, encode_varlong

_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RecordSpec:
    """What goes into one record when building."""

    value: bytes | None
    key: bytes | None = None
    timestamp: int = -1
    headers: tuple[tuple[str, bytes | None], ...] = field(default_factory=tuple)
    offset_delta: int | None = None  # None = position in the batch (gaps only for tests)


def encode_record(spec: RecordSpec, offset_delta: int, timestamp_delta: int) -> bytes:
    """One magic-2 record, with its length prefix."""
    parts = [b"\x00", encode_varlong(timestamp_delta), encode_varint(offset_delta)]
    for blob in (spec.key, spec.value):
        if blob is None:
            parts.append(encode_varint(-1))
        else:
            parts.append(encode_varint(len(blob)))
            parts.append(blob)
    parts.append(encode_varint(len(spec.headers)))
    for hkey, hvalue in spec.headers:
        raw = hkey.encode("utf-8")
        parts.append(encode_varint(len(raw)))
        parts.append(raw)
        if hvalue is None:
            parts.append(encode_varint(-1))
        else:
            parts.append(encode_varint(len(hvalue)))
            parts.append(hvalue)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def encode_batch(
    records: Sequence[RecordSpec],
    *,
    base_offset: int,
    compression: int = CompressionType.NONE,
    timestamp_type: int = 0,
    log_append_time: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    leader_epoch: int = -1,
    last_offset_delta: int | None = None,
    level: int | None = None,
) -> bytes:
    """A complete magic-2 batch (header + records, CRC computed)."""
    deltas = [
        i if spec.offset_delta is None else spec.offset_delta for i, spec in enumerate(records)
    ]
    if records:
        base_ts = records[0].timestamp
        max_ts = max(spec.timestamp for spec in records)
    else:
        base_ts = max_ts = -1
    if timestamp_type == 1:
        max_ts = log_append_time if log_append_time is not None else max_ts
    body = b"".join(
        encode_record(spec, delta, spec.timestamp - base_ts)
        for spec, delta in zip(records, deltas, strict=True)
    )
    if compression != CompressionType.NONE:
        body = compress(compression, body, magic=2, level=level)
    attributes = int(compression)
    if timestamp_type == 1:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    lod = last_offset_delta if last_offset_delta is not None else (deltas[-1] if deltas else 0)
    header = bytearray(
        V2_HEADER.pack(
            base_offset,
            V2_HEADER.size - 12 + len(body),
            leader_epoch,
            2,
            0,
            attributes,
            lod,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    batch = header + body
    struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[CRC_START:]))
    return bytes(batch)


def encode_control_batch(
    *,
    offset: int,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    timestamp: int,
    coordinator_epoch: int = 0,
    leader_epoch: int = -1,
) -> bytes:
    """An end-transaction marker batch, as the broker writes it."""
    key = CONTROL_KEY.pack(0, 1 if commit else 0)
    value = END_TXN_MARKER.pack(0, coordinator_epoch)
    return encode_batch(
        [RecordSpec(value=value, key=key, timestamp=timestamp)],
        base_offset=offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        leader_epoch=leader_epoch,
    )


def encode_legacy_message(
    *,
    offset: int,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    timestamp: int = -1,
    attributes: int = 0,
) -> bytes:
    """One magic-0/1 log entry (offset, size, crc, message)."""
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    body = bytearray()
    body += bytes([magic, attributes & 0xFF])
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for blob in (key, value):
        if blob is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(blob)) + blob
    message = struct.pack(">I", crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def encode_legacy_wrapper(
    messages: Sequence[RecordSpec],
    *,
    last_offset: int,
    magic: int,
    compression: int,
    timestamp_type: int = 0,
    log_append_time: int | None = None,
    level: int | None = None,
) -> bytes:
    """A compressed wrapper holding ``messages`` whose last inner offset is ``last_offset``.

    Inner offsets are absolute for magic 0 and relative (0, 1, ...) for magic 1, as Kafka writes.
    """
    if compression == CompressionType.NONE:
        raise ValueError("a wrapper needs a compression codec")
    first = last_offset - len(messages) + 1
    inner = bytearray()
    ts_attr = TIMESTAMP_TYPE_MASK if (magic == 1 and timestamp_type == 1) else 0
    for i, spec in enumerate(messages):
        inner_offset = first + i if magic == 0 else i
        ts = spec.timestamp
        if ts_attr and log_append_time is not None:
            ts = log_append_time
        inner += encode_legacy_message(
            offset=inner_offset, magic=magic, key=spec.key, value=spec.value, timestamp=ts
        )
    payload = compress(compression, bytes(inner), magic=magic, level=level)
    if ts_attr and log_append_time is not None:
        wrapper_ts = log_append_time
    else:
        wrapper_ts = max((m.timestamp for m in messages), default=-1)
    return encode_legacy_message(
        offset=last_offset,
        magic=magic,
        key=None,
        value=payload,
        timestamp=wrapper_ts,
        attributes=int(compression) | ts_attr,
    )
