"""KRaft ``.checkpoint`` snapshot files of ``__cluster_metadata`` and its control records.

A snapshot ``<20-digit end offset>-<10-digit epoch>.checkpoint`` is a sequence of magic-2 record
batches, as in a ``.log``: a control batch holding one ``SNAPSHOT_HEADER`` record, optionally
control records for the KRaft version and voters, batches of metadata records (null keys,
framed values, see :mod:`.cluster_metadata`), and a control batch holding ``SNAPSHOT_FOOTER``.

A control record's key is int16 version (0) + int16 type (``ControlRecordType``); its value is
the message of :mod:`.control_schemas`, whose first field is its own int16 version. Pure
functions over bytes: every batch is checked (framing, CRC-32C) before it is decoded.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from typing import Any

from kafka_segments_ds.errors import ChecksumError, CorruptSegmentError
from kafka_segments_ds.internal_topics.cluster_metadata import decode_cluster_metadata
from kafka_segments_ds.internal_topics.control_schemas import CONTROL_SCHEMAS
from kafka_segments_ds.internal_topics.protocol import decode_message
from kafka_segments_ds.internal_topics.records import raw_text
from kafka_segments_ds.records.batches import as_array, has_valid_checksum, scan_entries
from kafka_segments_ds.records.compression import decompress
from kafka_segments_ds.records.v2 import (
    CONTROL_KEY,
    CONTROL_TYPE_NAMES,
    RECORD_BATCH_OVERHEAD,
    decode_batch_header,
    iter_records,
)

SUFFIX = ".checkpoint"
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_VERSION = struct.Struct(">h")


def parse_checkpoint_name(name: str) -> tuple[int, int] | None:
    """``(end offset, epoch)`` from a snapshot file name, or None."""
    match = _NAME.match(name)
    return (int(match[1]), int(match[2])) if match else None


def decode_control_record(key: bytes | None, value: bytes | None) -> tuple[Any, Any]:
    """A KRaft control record as ``({"type", "control_type", "version"}, decoded value)``."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptSegmentError("control record key shorter than 4 bytes")
    key_version, control_type = CONTROL_KEY.unpack_from(key)
    name = CONTROL_TYPE_NAMES.get(control_type, "UNKNOWN")
    decoded_key = {"type": name, "control_type": control_type, "version": key_version}
    schema = CONTROL_SCHEMAS.get(control_type)
    if value is None or schema is None:
        return decoded_key, None if value is None else {"type": name, "raw": raw_text(value)}
    if len(value) < _VERSION.size:
        raise CorruptSegmentError(f"{schema.name} value is {len(value)} bytes, no version")
    version = _VERSION.unpack_from(value)[0]
    out: dict[str, Any] = {"type": schema.name, "version": version, "data": None}
    if not schema.is_valid_version(version):
        lo, hi = schema.valid
        out["undecoded"] = f"{schema.name} version {version} is not {lo}..{hi}"
        out["raw"] = raw_text(value)
    else:
        out["data"] = decode_message(schema, version, value, 0)
    return decoded_key, out


def iter_checkpoint(data: bytes) -> Iterator[dict[str, Any]]:
    """One JSON-ready row per record of a snapshot, then ``{"summary": ...}``.

    Raises :class:`CorruptSegmentError` (position = byte position in the file) on a batch that
    cannot be framed or fails its CRC; the summary says whether the header and footer are where
    Kafka puts them (first and last record).
    """
    table = scan_entries(data)
    if table.valid_bytes != len(data):
        raise CorruptSegmentError(
            f"cannot frame a batch here ({len(data) - table.valid_bytes} bytes left)",
            position=table.valid_bytes,
        )
    buf = as_array(data)
    kinds: list[int | None] = []  # control type per record, None for a metadata record
    batches = 0
    for pos, size, magic in zip(
        table.positions.tolist(), table.sizes.tolist(), table.magics.tolist(), strict=True
    ):
        if magic != 2:
            raise CorruptSegmentError(f"snapshot batch has magic {magic}, expected 2", position=pos)
        entry = data[pos : pos + size]
        if not has_valid_checksum(buf[pos : pos + size]):
            raise ChecksumError("snapshot batch fails its CRC-32C", position=pos)
        header = decode_batch_header(entry)
        batches += 1
        region = entry[RECORD_BATCH_OVERHEAD:]
        if header.compression:
            region = decompress(header.compression, region, magic=2)
        try:
            records = list(iter_records(header, region))
        except CorruptSegmentError as err:
            raise err.located(position_shift=pos) from err
        for record in records:
            row: dict[str, Any] = {"offset": record.offset, "timestamp": record.timestamp}
            try:
                if header.is_control:
                    row["key"], row["value"] = decode_control_record(record.key, record.value)
                    kinds.append(row["key"]["control_type"])
                else:
                    row["key"], row["value"] = decode_cluster_metadata(record.key, record.value)
                    kinds.append(None)
            except CorruptSegmentError as err:
                raise CorruptSegmentError(
                    f"record at offset {record.offset}: {err.reason}", position=pos
                ) from err
            yield row
    problems = []
    if not kinds or kinds[0] != SNAPSHOT_HEADER:
        problems.append("the first record is not a SNAPSHOT_HEADER")
    if not kinds or kinds[-1] != SNAPSHOT_FOOTER:
        problems.append("the last record is not a SNAPSHOT_FOOTER (an unfinished snapshot)")
    yield {
        "summary": {
            "batches": batches,
            "records": len(kinds),
            "metadata_records": sum(k is None for k in kinds),
            "problem": "; ".join(problems) or None,
        }
    }
