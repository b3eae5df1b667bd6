"""Decoding on read: the post-step on Arrow batches, the read's schema, Spark's types.

A task's batches come out of the reader with ``value`` / ``key`` as bytes; :class:`TaskDecoder`
replaces those columns with the decoded ones (typed by the topic's reader schema, through
:mod:`~kafka_segments_ds.schemas.column`) and, with ``includeRawValue`` / ``includeRawKey``, puts
the bytes beside them as ``rawValue`` / ``rawKey``. Bad values follow ``mode``. The options and
the registry binding are in :mod:`~kafka_segments_ds.schemas.config`.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from kafka_segments_ds.errors import InvalidOptionError, UndecodableValueError
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.schemas.column import (
    NOT_CONVERTED,
    WIRE_HEADER,
    ColumnDecoder,
    column_decoder,
    to_arrow,
)
from kafka_segments_ds.schemas.config import (
    RAW_COLUMN,
    bind_registry,
    parse_decode_options,
    registry_of,
    wants_decoding,
)

__all__ = [
    "TaskDecoder",
    "bind_registry",
    "cast_batches",
    "decoded_read_schema",
    "decoded_schema",
    "json_value",
    "raw_columns",
    "registry_of",
    "spark_read_schema",
    "wants_decoding",
]
log = logging.getLogger(__name__)


# -- the post-step on a task's batches --------------------------------------------------------


def decoded_schema(options: ReadOptions, schema: pa.Schema, topics: list[str | None]) -> pa.Schema:
    """``schema`` (of the raw columns) with the decoded columns' types: one reader schema type
    for all ``topics`` of the read, or an error saying which differ."""
    decode = parse_decode_options(options)
    registry = registry_of(options)
    fields: list[pa.Field] = []
    for field in schema:
        name = field.name
        if name not in RAW_COLUMN or decode.format_of(name) == "raw":
            fields.append(field)
            continue
        types = {t: column_decoder(registry, decode, name, t).arrow_type for t in topics}
        distinct = {str(t) for t in types.values()}
        if len(distinct) > 1:
            raise InvalidOptionError(
                f"the topics {', '.join(sorted(str(t) for t in types))} have different {name} "
                f"reader schemas: read one topic at a time or set {name}SchemaSubject"
            )
        kind = next(iter(types.values())) if types else pa.null()
        fields.append(pa.field(name, kind))
        if decode.include_raw(name):
            fields.append(pa.field(RAW_COLUMN[name], pa.binary()))
    return pa.schema(fields)


class TaskDecoder:
    """The post-step of one task: its batches' ``value`` / ``key`` decoded, bad values handled
    by ``mode`` (FAILFAST raises; DROPMALFORMED nulls them and counts them for the summary)."""

    def __init__(
        self, options: ReadOptions, topic: str | None, partition: int | None, shown: str
    ) -> None:
        self.options, self.topic, self.partition, self.shown = options, topic, partition, shown
        decode = parse_decode_options(options)
        registry = registry_of(options)
        self.decoders = {
            name: column_decoder(registry, decode, name, topic)
            for name in RAW_COLUMN
            if decode.format_of(name) != "raw"
        }
        self.include_raw = {name: decode.include_raw(name) for name in RAW_COLUMN}
        self.dropped = 0
        self.first_dropped: str | None = None

    def input_columns(self, columns: tuple[str, ...]) -> tuple[str, ...]:
        """What the task must read: ``columns`` plus ``offset`` (for error messages)."""
        return columns if "offset" in columns else (*columns, "offset")

    def apply(
        self, batches: Iterator[pa.RecordBatch], columns: tuple[str, ...]
    ) -> Iterator[pa.RecordBatch]:
        try:
            for arrow_batch in batches:
                yield self.decode_batch(arrow_batch, columns)
        finally:
            if self.dropped:
                log.warning(
                    "%s: DROPMALFORMED %d values not decoded, read as null (first: %s)",
                    self.shown,
                    self.dropped,
                    self.first_dropped,
                )

    def decode_batch(self, arrow_batch: pa.RecordBatch, columns: tuple[str, ...]) -> pa.RecordBatch:
        offsets = arrow_batch.column("offset").to_pylist()
        names: list[str] = []
        arrays: list[pa.Array] = []
        for name in columns:
            raw = arrow_batch.column(name)
            decoder = self.decoders.get(name)
            if decoder is None:
                names.append(name)
                arrays.append(raw)
                continue
            names.append(name)
            arrays.append(self._decode_column(decoder, raw, offsets))
            if self.include_raw[name]:
                names.append(RAW_COLUMN[name])
                arrays.append(raw)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _decode_column(self, decoder: ColumnDecoder, raw: pa.Array, offsets: list[int]) -> pa.Array:
        values, bad = decoder.decode_all(raw)
        try:
            column = to_arrow(values, decoder.arrow_type)
        except NOT_CONVERTED:
            # some value does not fit the reader type: find which, one by one
            for i, value in enumerate(values):
                try:
                    pa.array([value], type=decoder.arrow_type)
                except NOT_CONVERTED as err:  # noqa: PERF203  (only after a batch failed)
                    data = raw[i].as_py()
                    sid = WIRE_HEADER.unpack_from(data)[1]
                    bad.append((i, sid, f"does not fit the reader schema's type: {err}"))
                    values[i] = None
            column = pa.array(values, type=decoder.arrow_type)
        for i, sid, reason in sorted(bad, key=lambda b: b[0]):
            self._malformed(decoder, offsets[i], sid, reason)
        return column

    def _malformed(
        self, decoder: ColumnDecoder, offset: int, schema_id: int | None, reason: str
    ) -> None:
        reason = f"{decoder.column} {reason}"
        if not self.options.drop_malformed:
            raise UndecodableValueError(reason, self.topic, self.partition, offset, schema_id)
        self.dropped += 1
        if self.first_dropped is None:
            sid = "no schema id" if schema_id is None else f"schema id {schema_id}"
            self.first_dropped = f"offset {offset} ({sid}): {reason}"


def decoded_read_schema(
    path: str | os.PathLike[str] | list[str], options: ReadOptions, schema: pa.Schema
) -> pa.Schema:
    """The Arrow schema of a decoding read of ``path`` (its topics' reader schemas)."""
    from kafka_segments_ds.planning import plan_scan
    from kafka_segments_ds.reader import read_task

    if not wants_decoding(options):
        return schema
    plan = plan_scan(path, options, split=False, read_records=read_task)
    bound = bind_registry(options, path)
    raw = pa.schema([f for f in schema if f.name not in RAW_COLUMN.values()])
    return decoded_schema(bound, raw, sorted({t.topic for t in plan.tasks}, key=str))


def json_value(value: Any) -> Any:
    """A decoded value (as Arrow's ``to_pylist`` gives it) as JSON can hold it: maps (lists of
    key-value tuples) as objects, bytes as base64, times and dates in ISO 8601, decimals as
    strings (exact)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): json_value(v) for k, v in value}
        return [json_value(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)  # Decimal, and anything else with an exact text form


# -- Spark: the same read, in types Spark has ---------------------------------------------------


def spark_compatible(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` in types Spark has: unsigned ints widen (uint32 -> int64, uint64 ->
    decimal(20, 0)), times of day become their integer (ms or us since midnight), timestamps
    microseconds; structs, lists and maps recursively."""
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(spark_compatible(f.type)) for f in arrow_type])
    if pa.types.is_map(arrow_type):
        return pa.map_(
            spark_compatible(arrow_type.key_type), spark_compatible(arrow_type.item_type)
        )
    if pa.types.is_list(arrow_type):
        return pa.list_(spark_compatible(arrow_type.value_type))
    if pa.types.is_uint8(arrow_type) or pa.types.is_uint16(arrow_type):
        return pa.int32()
    if pa.types.is_uint32(arrow_type):
        return pa.int64()
    if pa.types.is_uint64(arrow_type):
        return pa.decimal128(20, 0)
    if pa.types.is_time32(arrow_type):
        return pa.int32()
    if pa.types.is_time64(arrow_type):
        return pa.int64()
    if pa.types.is_timestamp(arrow_type):
        return pa.timestamp("us", tz=arrow_type.tz)
    if pa.types.is_fixed_size_binary(arrow_type):
        return pa.binary()
    return arrow_type


def spark_read_schema(
    paths: list[str], options: ReadOptions, columns: tuple[str, ...]
) -> pa.Schema:
    """The Arrow schema of a decoding Spark read of ``columns`` (raw names), in Spark's types."""
    from kafka_segments_ds.schema import arrow_schema

    schema = decoded_read_schema(paths, options, arrow_schema(columns))
    return pa.schema([f.with_type(spark_compatible(f.type)) for f in schema])


def raw_columns(options: ReadOptions, names: list[str]) -> tuple[str, ...]:
    """The catalogue columns a decoding read with output ``names`` reads (``rawValue`` and
    ``rawKey`` come with their decoded column)."""
    from kafka_segments_ds.schema import check_columns

    decode = parse_decode_options(options)
    for column, raw in RAW_COLUMN.items():
        if raw in names and (column not in names or not decode.include_raw(column)):
            option = "includeRawValue" if column == "value" else "includeRawKey"
            raise InvalidOptionError(f"column {raw} comes with {column} and {option}=true")
    return check_columns([n for n in names if n not in RAW_COLUMN.values()])


def cast_batches(batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``batches`` cast to ``schema`` (a Spark read's decoded types)."""
    for arrow_batch in batches:
        yield arrow_batch.cast(schema)
