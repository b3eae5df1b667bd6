"""Magic 2 record batches (Kafka 0.11+): the readable reference decoder.

Batch header, 61 bytes, big-endian (entry offsets)::

     0  int64  baseOffset             offset of the first record (kept through compaction)
     8  int32  batchLength            bytes after this field (total size - 12), >= 49
    12  int32  partitionLeaderEpoch   -1 = unknown; not covered by the CRC
    16  int8   magic                  2
    17  uint32 crc                    CRC-32C of bytes [21, end)
    21  int16  attributes             bits 0-2 codec, 3 LogAppendTime, 4 transactional,
                                      5 control, 6 delete horizon (only the low byte is used)
    23  int32  lastOffsetDelta        lastOffset = baseOffset + lastOffsetDelta
    27  int64  baseTimestamp          first record's time (or the delete horizon)
    35  int64  maxTimestamp           max record time, or the append time (LogAppendTime)
    43  int64  producerId             -1 = none
    51  int16  producerEpoch
    53  int32  baseSequence
    57  int32  recordCount
    61  ...    records, one compressed stream when the codec is not none

Each record: varint length, int8 attributes, varlong timestampDelta, varint offsetDelta,
varint keyLength (-1 = null), key, varint valueLength (-1 = null), value, varint headerCount,
then per header: varint keyLength (>= 0), UTF-8 key, varint valueLength (-1 = null), value.

The hot path lives in :mod:`kafka_segments_ds.records.kernels`; this module is the readable
reference it is tested against, and what the CLI and tests use for single batches.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records.compression import CompressionType, codec_from_attributes
from kafka_segments_ds.records.varint import decode_varint, decode_varlong

V2_HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc (CRC-32C)
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
RECORD_BATCH_OVERHEAD = V2_HEADER.size  # 61
CRC_START = 21  # the CRC covers [attributes, end of batch)
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - 12  # 49
MIN_RECORD_BYTES = 7  # length byte + six one-byte fields

TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1

CONTROL_KEY = struct.Struct(">hh")  # version, type
END_TXN_MARKER = struct.Struct(">hi")  # version, coordinatorEpoch
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_TYPE_NAMES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of a magic-2 batch."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + 12

    @property
    def compression(self) -> CompressionType:
        return codec_from_attributes(self.attributes, 2)

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)


@dataclass(frozen=True, slots=True)
class Record:
    """One decoded record (reference decoder, CLI, tests; not the hot path)."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """The key (and, for ABORT/COMMIT, the value) of a control record."""

    version: int
    type: int
    coordinator_epoch: int | None

    @property
    def type_name(self) -> str:
        return CONTROL_TYPE_NAMES.get(self.type, "UNKNOWN")

    @classmethod
    def parse(cls, key: bytes | None, value: bytes | None) -> ControlMarker:
        if key is None or len(key) < CONTROL_KEY.size:
            raise CorruptSegmentError("control record key shorter than 4 bytes")
        version, ctype = CONTROL_KEY.unpack_from(key)
        if version < 0:
            raise CorruptSegmentError(f"control record key has negative version {version}")
        epoch = None
        if ctype in (CONTROL_ABORT, CONTROL_COMMIT):
            if value is None or len(value) < END_TXN_MARKER.size:
                raise CorruptSegmentError("transaction marker value shorter than 6 bytes")
            mversion, epoch = END_TXN_MARKER.unpack_from(value)
            if mversion < 0:
                raise CorruptSegmentError(f"transaction marker has negative version {mversion}")
        return cls(version, ctype, epoch)


def decode_batch_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header of the batch starting at ``pos`` (structure only, no CRC check)."""
    if len(buf) - pos < RECORD_BATCH_OVERHEAD:
        raise CorruptSegmentError("record batch shorter than its 61-byte header", position=pos)
    header = BatchHeader(*V2_HEADER.unpack_from(buf, pos))
    if header.magic != 2:
        raise CorruptSegmentError(f"expected magic 2, found {header.magic}", position=pos)
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptSegmentError(
            f"batch length {header.batch_length} below the minimum {MIN_BATCH_LENGTH}",
            position=pos,
            offset=header.base_offset,
        )
    if header.record_count < 0:
        raise CorruptSegmentError(
            f"negative record count {header.record_count}", position=pos, offset=header.base_offset
        )
    if header.last_offset_delta < 0:
        raise CorruptSegmentError(
            f"negative lastOffsetDelta {header.last_offset_delta}",
            position=pos,
            offset=header.base_offset,
        )
    return header


def _read_bytes(buf: bytes | memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    length, pos = decode_varint(buf, pos)
    if length < 0:
        if length != -1:
            raise CorruptSegmentError(f"invalid length {length}", position=pos)
        return None, pos
    if pos + length > end:
        raise CorruptSegmentError("field runs past the end of its record", position=pos)
    return bytes(buf[pos : pos + length]), pos + length


def iter_records(header: BatchHeader, records: bytes | memoryview) -> Iterator[Record]:
    """Decode the (already decompressed) records section of a batch.

    Raises :class:`CorruptSegmentError` with ``position`` relative to ``records``.
    """
    if header.record_count > len(records) // MIN_RECORD_BYTES:
        raise CorruptSegmentError(
            f"record count {header.record_count} cannot fit in {len(records)} bytes", position=0
        )
    pos = 0
    previous_delta = -1
    log_append = header.timestamp_type == LOG_APPEND_TIME
    for _ in range(header.record_count):
        start = pos
        length, pos = decode_varint(records, pos)
        end = pos + length
        if length < MIN_RECORD_BYTES - 1 or end > len(records):
            raise CorruptSegmentError(f"record length {length} does not fit", position=start)
        pos += 1  # attributes, unused
        ts_delta, pos = decode_varlong(records, pos)
        offset_delta, pos = decode_varint(records, pos)
        if offset_delta <= previous_delta or offset_delta > header.last_offset_delta:
            raise CorruptSegmentError(
                f"record offset delta {offset_delta} out of order "
                f"(previous {previous_delta}, lastOffsetDelta {header.last_offset_delta})",
                position=start,
            )
        previous_delta = offset_delta
        key, pos = _read_bytes(records, pos, end)
        value, pos = _read_bytes(records, pos, end)
        count, pos = decode_varint(records, pos)
        if count < 0 or count > (end - pos) // 2:
            raise CorruptSegmentError(f"invalid header count {count}", position=start)
        headers = []
        for _ in range(count):
            hkey, pos = _read_bytes(records, pos, end)
            if hkey is None:
                raise CorruptSegmentError("null header key", position=start)
            hvalue, pos = _read_bytes(records, pos, end)
            headers.append((hkey.decode("utf-8", errors="replace"), hvalue))
        if pos != end:
            raise CorruptSegmentError(
                f"record declares {length} bytes but its fields use {pos - (end - length)}",
                position=start,
            )
        timestamp = header.max_timestamp if log_append else header.base_timestamp + ts_delta
        yield Record(
            header.base_offset + offset_delta,
            timestamp,
            header.timestamp_type,
            key,
            value,
            tuple(headers),
        )
    if pos != len(records):
        raise CorruptSegmentError(
            f"{len(records) - pos} bytes left after {header.record_count} records", position=pos
        )
