"""Kafka's variable-length integers (the reference codec; kernels.py has the fast one).

Signed values are zig-zag mapped, ``(n << 1) ^ (n >> 31)`` for int32 (``>> 63`` for int64), then
written as unsigned LEB128: seven data bits per byte, least significant group first, the high bit
(0x80) set on every byte but the last. An int32 ``varint`` takes at most 5 bytes and an int64
``varlong`` at most 10; Kafka rejects longer encodings, and so do we.
"""

from __future__ import annotations

from kafka_segments_ds.errors import CorruptSegmentError

MAX_VARINT_BYTES = 5
MAX_VARLONG_BYTES = 10


def _decode_unsigned(buf: bytes | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    value = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise CorruptSegmentError("varint runs past the end of the buffer", position=pos)
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise CorruptSegmentError(f"varint longer than {max_bytes} bytes", position=pos)


def decode_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag int32 at ``pos``; return ``(value, next position)``."""
    raw, nxt = _decode_unsigned(buf, pos, MAX_VARINT_BYTES)
    # Kafka's decoder silently drops the bits of the 5th byte that do not fit 32 bits.
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), nxt


def decode_varlong(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode a zig-zag int64 at ``pos``; return ``(value, next position)``."""
    raw, nxt = _decode_unsigned(buf, pos, MAX_VARLONG_BYTES)
    raw &= 0xFFFFFFFFFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), nxt


def _encode_unsigned(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varint(value: int) -> bytes:
    """Encode an int32 as a zig-zag varint."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"{value} does not fit an int32 varint")
    return _encode_unsigned(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def encode_varlong(value: int) -> bytes:
    """Encode an int64 as a zig-zag varlong."""
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{value} does not fit an int64 varlong")
    return _encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def size_of_varint(value: int) -> int:
    """Bytes :func:`encode_varint` uses for ``value``."""
    return len(encode_varint(value))
