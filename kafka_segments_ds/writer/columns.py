"""Input rows for the writer: schema check, Arrow columns -> encoder columns, partitioning."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_segments_ds.errors import InvalidInputError
from kafka_segments_ds.records._compiled import load
from kafka_segments_ds.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from kafka_segments_ds.records.encoder import BinaryColumn, RecordColumns

_UNITS_PER_MS = {"s": 0, "ms": 1, "us": 1000, "ns": 1_000_000}  # 0: seconds (multiply)
_ASSIGNED = {"offset", "timestampType"}  # reader columns the writer assigns itself


def _is_binary_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _headers_ok(t: pa.DataType) -> bool:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    item = t.value_type
    if not pa.types.is_struct(item) or item.num_fields != 2:
        return False
    names = {item.field(i).name: item.field(i).type for i in range(2)}
    return (
        set(names) == {"key", "value"}
        and _is_string(names["key"])
        and _is_binary_like(names["value"])
    )


_TYPE_RULES = {
    "key": (_is_binary_like, "binary or string"),
    "value": (_is_binary_like, "binary or string"),
    "topic": (_is_string, "string"),
    "partition": (pa.types.is_integer, "int"),
    "timestamp": (pa.types.is_timestamp, "timestamp"),
    "headers": (_headers_ok, "array<struct<key: string, value: binary>>"),
}


# preserveOffsets=true: the reader's metadata columns too (writer/preserve.py uses them)
_PRESERVE_RULES = {
    "offset": (pa.types.is_integer, "bigint"),
    "timestampType": (pa.types.is_integer, "int"),
    "producerId": (pa.types.is_integer, "bigint"),
    "producerEpoch": (pa.types.is_integer, "smallint"),
    "baseSequence": (pa.types.is_integer, "int"),
    "leaderEpoch": (pa.types.is_integer, "int"),
    "batchBaseOffset": (pa.types.is_integer, "bigint"),
    "batchLastOffset": (pa.types.is_integer, "bigint"),
    "isTransactional": (pa.types.is_boolean, "boolean"),
    "isControl": (pa.types.is_boolean, "boolean"),
    "compression": (_is_string, "string"),
    "magic": (pa.types.is_integer, "tinyint"),  # ignored: the writer writes magic 2
    "segment": (_is_string, "string"),  # ignored: the commit lays out segments
    "position": (pa.types.is_integer, "bigint"),  # ignored
}


def check_write_schema(schema: pa.Schema, preserve_offsets: bool = False) -> None:
    """Raise :class:`InvalidInputError` unless ``schema`` is something the writer can take."""
    names = schema.names
    if len(set(names)) != len(names):
        raise InvalidInputError(f"duplicate column names in {names}")
    rules = {**_TYPE_RULES, **_PRESERVE_RULES} if preserve_offsets else _TYPE_RULES
    for field in schema:
        if field.name not in rules:
            if field.name in _ASSIGNED:
                hint = " (the writer assigns it; drop the column, or set preserveOffsets=true)"
            else:
                hint = ""
            raise InvalidInputError(
                f"unknown column {field.name!r}{hint}; the writer takes "
                f"{', '.join(rules)} (value required)"
            )
        accepts, label = rules[field.name]
        if not accepts(field.type):
            raise InvalidInputError(f"column {field.name!r} must be {label}, not {field.type}")
    if "value" not in names:
        raise InvalidInputError("a 'value' column (binary or string) is required")
    if preserve_offsets and "offset" not in names:
        raise InvalidInputError(
            "preserveOffsets=true needs an 'offset' column (bigint): each row's offset is "
            "written as it is"
        )


def binary_column(array: pa.Array | pa.ChunkedArray) -> BinaryColumn:
    """A binary/string Arrow array as (offsets, data, validity) numpy arrays, without copying
    offsets or data (for non-chunked input); offsets are int32 or int64 as Arrow holds them."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    large = pa.types.is_large_binary(array.type) or pa.types.is_large_string(array.type)
    width = 8 if large else 4  # the kernels take int32 and int64 offsets as they come
    rows = len(array)
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(
        offsets_buf, np.int64 if large else np.int32, rows + 1, array.offset * width
    )
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False).view(np.uint8)
    else:
        valid = np.ones(rows, np.uint8)
    return BinaryColumn(offsets, data, valid)


MAX_TIMESTAMP_MS = (2**63 - 1) // 1000  # the latest a timestamp[us] holds


def record_columns(table: pa.Table, now_ms: int) -> RecordColumns:
    """Encoder columns for every row of ``table`` (rows of one partition, in order).

    Null timestamps become ``now_ms`` (a producer stamps the send time); negative ones are
    refused as a producer refuses them.
    """
    rows = table.num_rows
    names = table.column_names
    values = binary_column(table.column("value"))
    keys = binary_column(table.column("key")) if "key" in names else BinaryColumn.empty(rows)
    if "timestamp" in names:
        column = table.column("timestamp")
        per_ms = _UNITS_PER_MS[column.type.unit]
        # Nulls filled before numpy: with them, to_numpy gives float64 (256 ns steps today).
        raw = pc.fill_null(pc.cast(column, pa.int64()), 0).to_numpy(zero_copy_only=False)
        limit = MAX_TIMESTAMP_MS // 1000
        outside = (raw > limit) | (raw < -limit) if per_ms == 0 and rows else None
        if outside is not None and outside.any():
            row = int(np.argmax(outside))
            raise InvalidInputError(
                f"row {row}: timestamp {int(raw[row])} s is out of range: Kafka's timestamps "
                f"are milliseconds up to {MAX_TIMESTAMP_MS} (as microseconds in int64)"
            )
        timestamps = raw * 1000 if per_ms == 0 else np.floor_divide(raw, per_ms)
        if column.null_count:
            valid = pc.is_valid(column).to_numpy(zero_copy_only=False)
            timestamps = np.where(valid, timestamps, now_ms)
        timestamps = timestamps.astype(np.int64, copy=False)
        if rows and timestamps.max() > MAX_TIMESTAMP_MS:
            row = int(np.argmax(timestamps > MAX_TIMESTAMP_MS))
            raise InvalidInputError(
                f"row {row}: timestamp {int(timestamps[row])} ms is out of range: readers of "
                f"Kafka's timestamps (Spark's, this package's) hold them as microseconds in "
                f"int64, up to {MAX_TIMESTAMP_MS} ms"
            )
        if rows and timestamps.min() < 0:
            row = int(np.argmax(timestamps < 0))
            raise InvalidInputError(
                f"row {row}: timestamp {int(timestamps[row])} ms is before 1970; Kafka needs "
                "timestamps >= 0 (or null for the write time)"
            )
    else:
        timestamps = np.full(rows, now_ms, np.int64)
    header_rows = np.zeros(rows + 1, np.int64)
    header_keys = header_values = BinaryColumn.empty(0)
    if "headers" in names:
        headers = table.column("headers")
        counts = pc.fill_null(pc.list_value_length(headers), 0).to_numpy()
        np.cumsum(counts, out=header_rows[1:])
        flat = pc.list_flatten(headers)
        if isinstance(flat, pa.ChunkedArray):
            flat = flat.combine_chunks() if flat.num_chunks != 1 else flat.chunk(0)
        if len(flat):
            if flat.null_count:
                raise InvalidInputError("headers hold a null entry; use {key, value: null}")
            hk, hv = pc.struct_field(flat, "key"), pc.struct_field(flat, "value")
            if hk.null_count:
                raise InvalidInputError("a header key is null; Kafka header keys are strings")
            header_keys, header_values = binary_column(hk), binary_column(hv)
    return RecordColumns(timestamps, keys, values, header_rows, header_keys, header_values)


# a record's and a batch's length fields are signed 32-bit: a record this large cannot be framed
MAX_RECORD_BYTES = 2**31 - 1
RECORD_FRAMING = 61 + 32  # a v2 batch header, and at most a record's varints and attributes
HEADER_FRAMING = 10  # at most a header's two varint lengths


def check_record_sizes(columns: RecordColumns, compressed: bool) -> None:
    """Refuse (InvalidInputError) a record a read could not take back: one whose key, value and
    headers reach 2 GiB (Kafka's length fields are 32-bit), or, compressed, exceed the readers'
    default bound on decompressed bytes (``maxDecompressedBytes``, 256 MiB; a broker's own
    ``max.message.bytes`` defaults to 1 MiB)."""
    if not columns.rows:
        return
    sizes = np.diff(columns.values.offsets).astype(np.int64)
    sizes += np.diff(columns.keys.offsets)
    header_bytes = np.diff(columns.header_keys.offsets).astype(np.int64)
    header_bytes += np.diff(columns.header_values.offsets)
    header_bytes += HEADER_FRAMING  # each header's varint lengths
    if header_bytes.shape[0]:
        per_record = np.concatenate([[0], np.cumsum(header_bytes)])
        sizes += per_record[columns.header_rows[1:]] - per_record[columns.header_rows[:-1]]
    sizes += RECORD_FRAMING  # the record's own varints, and the batch header
    limit = DEFAULT_MAX_DECOMPRESSED_BYTES if compressed else MAX_RECORD_BYTES
    if int(sizes.max()) <= limit:
        return
    row = int(np.argmax(sizes > limit))
    why = (
        "beyond the 256 MiB a read decompresses by default (option maxDecompressedBytes); "
        "write it uncompressed or in smaller records"
        if compressed and sizes[row] <= MAX_RECORD_BYTES
        else "Kafka's record and batch length fields are 32-bit"
    )
    raise InvalidInputError(
        f"row {row}: a record of {int(sizes[row])} bytes (key, value, headers and framing), {why}"
    )


# --------------------------------------------------------------------------------------------
# Partitioning
# --------------------------------------------------------------------------------------------


def murmur2(offsets: np.ndarray, data: np.ndarray, out: np.ndarray) -> None:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c) of each key, as a signed int32.

    Compiled in ``records/_encoder.pyx``; this pure-Python version is the fallback."""
    m = 0x5BD1E995
    bounds = offsets.tolist()
    for i in range(out.shape[0]):
        key = data[bounds[i] : bounds[i + 1]].tobytes()
        length = len(key)
        h = 0x9747B28C ^ length
        full = length & ~3
        for j in range(0, full, 4):
            k = int.from_bytes(key[j : j + 4], "little") * m & 0xFFFFFFFF
            k ^= k >> 24
            h = (h * m & 0xFFFFFFFF) ^ (k * m & 0xFFFFFFFF)
        rest = length & 3
        if rest == 3:
            h ^= key[full + 2] << 16
        if rest >= 2:
            h ^= key[full + 1] << 8
        if rest >= 1:
            h = (h ^ key[full]) * m & 0xFFFFFFFF
        h ^= h >> 13
        h = h * m & 0xFFFFFFFF
        h ^= h >> 15
        out[i] = h - (1 << 32) if h >= 1 << 31 else h


# the pure-Python kernel by name, whichever path runs (tests compare the two)
PURE_PYTHON: dict[str, Callable[..., Any]] = {"murmur2": murmur2}
_compiled = load("kafka_segments_ds.records._encoder")
if _compiled is not None:
    murmur2 = _compiled.murmur2


def key_partitions(keys: BinaryColumn, num_partitions: int, spread_start: int) -> np.ndarray:
    """Kafka's default partitioner: ``toPositive(murmur2(key)) % n`` for keyed rows; null keys
    are spread round-robin from ``spread_start``."""
    rows = len(keys.valid)
    hashes = np.empty(rows, np.int32)
    murmur2(keys.offsets, keys.data, hashes)
    out = (hashes.astype(np.int64) & 0x7FFFFFFF) % num_partitions
    nulls = np.flatnonzero(keys.valid == 0)
    out[nulls] = (spread_start + np.arange(len(nulls))) % num_partitions
    return out
