"""A tiny encoder of Kafka's message-schema types (the internal topics' keys and values), for
the decoder tests."""

from __future__ import annotations

import base64
import struct

UUID_A = bytes(range(16))
UUID_A_TEXT = "AAECAwQFBgcICQoLDA0ODw"  # Kafka prints UUIDs as URL-safe base64, no padding
UUID_B = bytes([0xFB] * 16)
UUID_B_TEXT = "-_v7-_v7-_v7-_v7-_v7-w"


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uv(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def s(text: str | None) -> bytes:  # classic (nullable) string
    if text is None:
        return i16(-1)
    return i16(len(text.encode())) + text.encode()


def cs(text: str | None) -> bytes:  # compact (nullable) string
    if text is None:
        return uv(0)
    return uv(len(text.encode()) + 1) + text.encode()


def b(data: bytes | None) -> bytes:  # classic bytes
    return i32(-1) if data is None else i32(len(data)) + data


def cb(data: bytes) -> bytes:  # compact bytes
    return uv(len(data) + 1) + data


def arr(items: list[bytes] | None) -> bytes:  # classic array of encoded elements
    return i32(-1) if items is None else i32(len(items)) + b"".join(items)


def carr(items: list[bytes] | None) -> bytes:  # compact array
    return uv(0) if items is None else uv(len(items) + 1) + b"".join(items)


def tags(*fields: tuple[int, bytes]) -> bytes:
    return uv(len(fields)) + b"".join(uv(t) + uv(len(d)) + d for t, d in fields)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
