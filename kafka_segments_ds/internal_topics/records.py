"""The shape shared by every internal-topic decoder.

A decoded key or value is a JSON-ready dict ``{"type": ..., "version": ..., "data": {...}}``,
as DumpLogSegments prints them. What cannot be decoded because this package does not know it (a
newer record type or version) keeps its bytes as ``"raw"`` (base64) with ``"data": null`` and an
``"undecoded"`` reason, instead of failing the dump; damaged bytes raise
:class:`~kafka_segments_ds.errors.CorruptSegmentError`.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.internal_topics.protocol import Message, decode_message

Decoded = tuple[dict[str, Any] | None, dict[str, Any] | None]
_VERSION = struct.Struct(">h")


def raw_text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def split_version(data: bytes | None, what: str) -> tuple[int, int]:
    """The int16 version that prefixes a coordinator key or value, and the position after it."""
    if data is None:
        raise CorruptSegmentError(f"{what} is null")
    if len(data) < _VERSION.size:
        raise CorruptSegmentError(
            f"{what} is {len(data)} bytes, shorter than its 2-byte version", position=0
        )
    return _VERSION.unpack_from(data)[0], _VERSION.size


def decode_versioned(
    kind: str,
    schema: Message,
    data: bytes,
    version: int | None = None,
    *,
    read_as: int | None = None,
) -> dict[str, Any]:
    """Decode ``data`` = int16 version + ``schema`` struct into ``{"type", "version", "data"}``.

    ``read_as`` reads the bytes with another (known) version of the schema, for formats that
    are forward compatible.
    """
    if version is None:
        version, _ = split_version(data, f"{schema.name} value")
    use = version if read_as is None else read_as
    if not schema.is_valid_version(use):
        lo, hi = schema.valid
        return undecoded(kind, version, data, f"{schema.name} version {version} is not {lo}..{hi}")
    return {"type": kind, "version": version, "data": decode_message(schema, use, data, 2)}


def undecoded(kind: str, version: int, data: bytes | None, reason: str) -> dict[str, Any]:
    return {
        "type": kind,
        "version": version,
        "data": None,
        "undecoded": reason,
        "raw": raw_text(data),
    }


def unknown_type(key: bytes | None, value: bytes | None, key_version: int) -> Decoded:
    """Both halves of a record whose key version names a record type we do not know."""
    reason = f"unknown key version {key_version}"
    decoded_key = undecoded("unknown", key_version, key, reason)
    if value is None:
        return decoded_key, None
    value_version = _VERSION.unpack_from(value)[0] if len(value) >= _VERSION.size else -1
    return decoded_key, undecoded("unknown", value_version, value, reason)
