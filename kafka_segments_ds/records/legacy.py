"""Magic 0 and magic 1 message sets (Kafka 0.8 - 0.10): the reference decoder.

A legacy entry (entry offsets, big-endian)::

     0  int64  offset      absolute; for a compressed wrapper, the offset of its LAST inner message
     8  int32  size        bytes that follow (message length)
    12  uint32 crc         CRC-32 of bytes [16, 12 + size)
    16  int8   magic       0 or 1
    17  int8   attributes  bits 0-2 codec (zstd is illegal here), bit 3 LogAppendTime (magic 1)
    18  int64  timestamp   magic 1 only
        int32  keyLength   -1 = null, then the key
        int32  valueLength -1 = null, then the value

A wrapper (codec != none) holds, as its value, a compressed concatenation of inner entries in the
same framing. Inner offsets are absolute under a magic-0 wrapper and relative (0, 1, 2 ...) under
a magic-1 wrapper, where ``absolute(i) = W - R_last + R_i`` with W the wrapper offset. Inner
magic-1 messages take the wrapper's timestamp when the wrapper says LogAppendTime.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from kafka_segments_ds.errors import ChecksumError, CorruptSegmentError
from kafka_segments_ds.records.checksums import crc32
from kafka_segments_ds.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    codec_from_attributes,
    decompress,
)

LOG_ENTRY = struct.Struct(">qi")  # offset, size
LEGACY_HEAD_V0 = struct.Struct(">Ibb")  # crc, magic, attributes
LEGACY_HEAD_V1 = struct.Struct(">Ibbq")  # crc, magic, attributes, timestamp
LOG_OVERHEAD = 12
MIN_MESSAGE_SIZE = {0: 14, 1: 22}  # crc + magic + attributes [+ timestamp] + two lengths
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class LegacyMessage:
    """One magic-0/1 message as stored (for a wrapper: value is the compressed payload)."""

    offset: int
    magic: int
    crc: int
    attributes: int
    timestamp: int  # -1 for magic 0
    key: bytes | None
    value: bytes | None
    size: int  # the size field; the entry spans 12 + size bytes

    @property
    def compression(self) -> CompressionType:
        return codec_from_attributes(self.attributes, self.magic)

    @property
    def timestamp_type(self) -> int:
        if self.magic == 0:
            return -1
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0


def decode_legacy_message(
    buf: bytes | memoryview, pos: int, *, verify_checksum: bool = True
) -> LegacyMessage:
    """Decode the legacy entry at ``pos``; raise :class:`CorruptSegmentError` when malformed."""
    if len(buf) - pos < LOG_OVERHEAD + 5:
        raise CorruptSegmentError("legacy message header runs past the end", position=pos)
    offset, size = LOG_ENTRY.unpack_from(buf, pos)
    magic = buf[pos + 16]
    if magic not in (0, 1):
        raise CorruptSegmentError(
            f"expected magic 0 or 1, found {magic}", position=pos, offset=offset
        )
    if size < MIN_MESSAGE_SIZE[magic]:
        raise CorruptSegmentError(
            f"magic {magic} message size {size} below the minimum {MIN_MESSAGE_SIZE[magic]}",
            position=pos,
            offset=offset,
        )
    end = pos + LOG_OVERHEAD + size
    if end > len(buf):
        raise CorruptSegmentError(
            f"message of {size} bytes runs past the end", position=pos, offset=offset
        )
    if magic == 0:
        crc, _, attributes = LEGACY_HEAD_V0.unpack_from(buf, pos + 12)
        timestamp = NO_TIMESTAMP
        cursor = pos + 18
    else:
        crc, _, attributes, timestamp = LEGACY_HEAD_V1.unpack_from(buf, pos + 12)
        cursor = pos + 26
    if verify_checksum:
        actual = crc32(buf[pos + 16 : end])
        if actual != crc:
            raise ChecksumError(
                f"CRC-32 mismatch: stored {crc:#010x}, computed {actual:#010x}",
                position=pos,
                offset=offset,
            )
    key, cursor = _read_bytes(buf, cursor, end, pos, offset)
    value, cursor = _read_bytes(buf, cursor, end, pos, offset)
    if cursor != end:
        raise CorruptSegmentError(
            f"{end - cursor} bytes left over after the value", position=pos, offset=offset
        )
    return LegacyMessage(offset, magic, crc, attributes, timestamp, key, value, size)


def _read_bytes(
    buf: bytes | memoryview, cursor: int, end: int, pos: int, offset: int
) -> tuple[bytes | None, int]:
    if cursor + 4 > end:
        raise CorruptSegmentError("length field runs past the message", position=pos, offset=offset)
    (length,) = struct.unpack_from(">i", buf, cursor)
    cursor += 4
    if length < 0:
        if length != -1:
            raise CorruptSegmentError(f"invalid length {length}", position=pos, offset=offset)
        return None, cursor
    if cursor + length > end:
        raise CorruptSegmentError(
            f"field of {length} bytes runs past the message", position=pos, offset=offset
        )
    return bytes(buf[cursor : cursor + length]), cursor + length


def iter_inner_messages(
    wrapper: LegacyMessage,
    *,
    verify_checksum: bool = True,
    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> Iterator[LegacyMessage]:
    """Expand a compressed wrapper: inner messages with ABSOLUTE offsets and effective timestamps.

    Positions in raised errors are relative to the decompressed payload.
    """
    yield from expand_wrapper(wrapper, verify_checksum=verify_checksum, max_bytes=max_bytes)


def expand_wrapper(
    wrapper: LegacyMessage,
    *,
    verify_checksum: bool = True,
    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[LegacyMessage]:
    """Like :func:`iter_inner_messages`, as a list (the whole payload is decoded anyway)."""
    codec = wrapper.compression
    if wrapper.value is None:
        raise CorruptSegmentError(
            "compressed wrapper message has a null value", offset=wrapper.offset
        )
    payload = decompress(codec, wrapper.value, magic=wrapper.magic, max_bytes=max_bytes)
    inner: list[LegacyMessage] = []
    pos = 0
    while len(payload) - pos >= LOG_OVERHEAD:
        _, size = LOG_ENTRY.unpack_from(payload, pos)
        if size < MIN_MESSAGE_SIZE[0]:
            raise CorruptSegmentError(f"inner message size {size} below 14", position=pos)
        if pos + LOG_OVERHEAD + size > len(payload):
            break  # Kafka ends iteration at a short read
        message = decode_legacy_message(payload, pos, verify_checksum=verify_checksum)
        if message.attributes & CODEC_MASK:
            raise CorruptSegmentError("inner messages must not be compressed", position=pos)
        inner.append(message)
        pos += LOG_OVERHEAD + size
    if not inner:
        raise CorruptSegmentError("compressed wrapper holds no messages", offset=wrapper.offset)
    check_inner_offsets(wrapper, [m.offset for m in inner])
    return [_absolute(wrapper, m, inner[-1].offset) for m in inner]


def check_inner_offsets(wrapper: LegacyMessage, offsets: list[int]) -> None:
    """Raise unless a wrapper's inner offset fields agree with each other and with the
    wrapper's own offset: an entry that contradicts itself is malformed as a whole.

    Inner offsets strictly increase and are not negative. Magic 0 stores absolute offsets and
    brokers always rebuilt such sets, so the last one is the wrapper's offset. Magic 1 stores
    relative offsets that end at the wrapper's offset (``W - R_last + R_i``), except for a
    wrapper offset of 0 as a producer writes it (kafka-python, old librdkafka), which only the
    producer's own numbering 0, 1, ..., n-1 fits. The wrapper's CRC does not cover its own
    offset field, and damage with a recomputed CRC can leave the fields disagreeing: nothing
    tells which one is right, so the whole entry is malformed.
    """
    where = wrapper.offset
    for earlier, later in itertools.pairwise(offsets):
        if later <= earlier:
            raise CorruptSegmentError(
                f"inner message offsets are not increasing: {later} after {earlier}", offset=where
            )
    if offsets[0] < 0:
        raise CorruptSegmentError(f"negative inner message offset {offsets[0]}", offset=where)
    if wrapper.magic == 0 and offsets[-1] != wrapper.offset:
        raise CorruptSegmentError(
            f"last inner offset {offsets[-1]} differs from the wrapper offset {wrapper.offset}",
            offset=where,
        )
    if wrapper.magic == 1 and wrapper.offset == 0 and offsets[-1] != len(offsets) - 1:
        shown = ", ".join(map(str, offsets[:4])) + (", ..." if len(offsets) > 4 else "")
        raise CorruptSegmentError(
            f"inner relative offsets {shown} do not end at the wrapper offset 0 (a producer "
            f"numbers them 0..{len(offsets) - 1})",
            offset=where,
        )


def _absolute(wrapper: LegacyMessage, message: LegacyMessage, last_relative: int) -> LegacyMessage:
    offset = message.offset
    if wrapper.magic == 1:
        # Relative inner offsets; a wrapper offset of 0 (old librdkafka) means base 0.
        if wrapper.offset != 0 and wrapper.offset < last_relative:
            raise CorruptSegmentError(
                f"wrapper offset {wrapper.offset} below its last relative offset {last_relative}",
                offset=wrapper.offset,
            )
        base = 0 if wrapper.offset == 0 else wrapper.offset - last_relative
        offset = base + message.offset
    timestamp = message.timestamp
    if message.magic == 1 and wrapper.timestamp_type == 1:
        timestamp = wrapper.timestamp
    elif message.magic == 0:
        timestamp = NO_TIMESTAMP
    attributes = (message.attributes & ~TIMESTAMP_TYPE_MASK) | (
        wrapper.attributes & TIMESTAMP_TYPE_MASK
    )
    return LegacyMessage(
        offset,
        message.magic,
        message.crc,
        attributes,
        timestamp,
        message.key,
        message.value,
        message.size,
    )
