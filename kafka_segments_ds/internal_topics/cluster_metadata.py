"""``__cluster_metadata``: the KRaft metadata log.

Each record has a null key and a value framed by ``AbstractApiMessageSerde``: unsigned varint
frame version (1), unsigned varint ``apiKey`` (the record type), unsigned varint version, then
the record in the flexible encoding. Every record type Kafka defines is decoded
(:mod:`.metadata_schemas`); an unknown type or version is reported with its bytes, never as an
error. ``__remote_log_metadata`` values use the same frame (:func:`decode_framed`).
"""

from __future__ import annotations

from typing import Any

from kafka_segments_ds.internal_topics.metadata_schemas import SCHEMAS
from kafka_segments_ds.internal_topics.protocol import Message, decode_message, decode_uvarint
from kafka_segments_ds.internal_topics.records import Decoded, raw_text

FRAME_VERSION = 1


def decode_cluster_metadata(key: bytes | None, value: bytes | None) -> Decoded:
    """Decode one metadata record; the key (always null in Kafka) is passed through as raw."""
    decoded_key = None if key is None else {"type": "unknown", "raw": raw_text(key)}
    if value is None:
        return decoded_key, None
    return decoded_key, decode_framed(value, SCHEMAS, "metadata record")


def decode_framed(value: bytes, schemas: dict[int, Message], what: str) -> dict[str, Any]:
    """``AbstractApiMessageSerde``'s frame: uvarint frame version (1), uvarint api key,
    uvarint version, then the message; ``{"type", "api_key", "version", "data"}``."""
    frame, pos = decode_uvarint(value, 0, f"{what} frame version")
    api_key, pos = decode_uvarint(value, pos, f"{what} type")
    version, pos = decode_uvarint(value, pos, f"{what} version")
    schema = schemas.get(api_key)
    name = schema.name if schema is not None else "unknown"
    out: dict[str, Any] = {"type": name, "api_key": api_key, "version": version, "data": None}
    if frame != FRAME_VERSION:
        reason = f"frame version {frame} (only {FRAME_VERSION} is known)"
    elif schema is None:
        reason = f"record type {api_key} is not decoded by this version of kafka-segments"
    elif not schema.is_valid_version(version):
        reason = f"{name} version {version} is not {schema.valid[0]}..{schema.valid[1]}"
    else:
        out["data"] = decode_message(schema, version, value, pos)
        return out
    out.update(undecoded=reason, raw=raw_text(value))
    return out
