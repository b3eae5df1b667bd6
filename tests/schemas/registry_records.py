"""``_schemas`` records as Schema Registry writes them (key and value JSON, compact separators),
and Confluent wire-format values, for the tests of kafka_segments_ds.schemas."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa

from kafka_segments_ds import write_table

Record = tuple[bytes, bytes | None]


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def schema_record(
    subject: str,
    version: int,
    schema_id: int,
    schema: str | dict[str, Any],
    schema_type: str | None = None,
    references: list[dict[str, Any]] | None = None,
    deleted: bool = False,
) -> Record:
    """A SCHEMA record: the registry leaves out schemaType for Avro and references when none."""
    key = _dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})
    value: dict[str, Any] = {"subject": subject, "version": version, "id": schema_id}
    if schema_type is not None:
        value["schemaType"] = schema_type
    value["schema"] = schema if isinstance(schema, str) else json.dumps(schema)
    if references:
        value["references"] = references
    value["deleted"] = deleted
    return key, _dumps(value)


def tombstone(subject: str, version: int) -> Record:
    key = _dumps({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})
    return key, None


def noop() -> Record:
    return _dumps({"keytype": "NOOP", "magic": 0}), None


def config(subject: str | None, level: str) -> Record:
    key: dict[str, Any] = {"keytype": "CONFIG", "magic": 0}
    if subject is not None:
        key = {"keytype": "CONFIG", "subject": subject, "magic": 0}
    return _dumps(key), _dumps({"compatibilityLevel": level})


def delete_subject(subject: str, version: int) -> Record:
    key = _dumps({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0})
    return key, _dumps({"subject": subject, "version": version})


def clear_subject(subject: str) -> Record:
    key = _dumps({"keytype": "CLEAR_SUBJECT", "subject": subject, "magic": 0})
    return key, _dumps({"subject": subject})


def write_records(
    log_dir: Path, topic: str, records: list[tuple[bytes | None, bytes | None]]
) -> None:
    """Append ``records`` (key, value) to partition 0 of ``topic`` under ``log_dir``."""
    write_table(
        pa.table(
            {
                "key": pa.array([k for k, _ in records], pa.binary()),
                "value": pa.array([v for _, v in records], pa.binary()),
            }
        ),
        log_dir,
        topic=topic,
    )


def wire(schema_id: int, payload: bytes, indexes: list[int] | None = None) -> bytes:
    """Confluent's framing: 0x00, the id big-endian, (Protobuf: message indexes), payload."""
    head = struct.pack(">bI", 0, schema_id)
    if indexes is None:
        return head + payload
    if indexes == [0]:
        return head + b"\x00" + payload
    return head + b"".join(_zigzag(n) for n in [len(indexes), *indexes]) + payload


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
