"""One column (``value`` or ``key``) of one topic: Confluent's wire format, the writer's schema
by id, the reader schema's Arrow type, and decoded values into one Arrow array.

Wire format: byte 0 is 0x00, bytes 1 to 4 the schema id (big-endian), then the payload (for
Protobuf, the message indexes first). Each value is decoded with its writer's schema, then shaped
as the reader schema: Avro by the spec's resolution rules, Protobuf and JSON by field name.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from kafka_segments_ds.errors import SchemaError
from kafka_segments_ds.schemas import avro, jsonschema, protobuf
from kafka_segments_ds.schemas.config import FORMAT_OF_TYPE, DecodeOptions, registry_at
from kafka_segments_ds.schemas.registry import Registry, SchemaVersion

MAGIC = 0
WIRE_HEADER = struct.Struct(">bI")  # magic byte (0), schema id (big-endian)
NOT_CONVERTED = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)


class ColumnDecoder:
    """Decodes one column (``value`` or ``key``) of one topic into its reader schema's type."""

    def __init__(self, registry: Registry, decode: DecodeOptions, column: str, topic: str | None):
        self.registry, self.column, self.topic = registry, column, topic
        self.format = decode.format_of(column)
        self.reader = registry.version(decode.subject_of(column, topic), decode.version_of(column))
        if self.format == "auto":
            self.format = FORMAT_OF_TYPE[self.reader.type]
        elif FORMAT_OF_TYPE[self.reader.type] != self.format:
            raise SchemaError(
                f"{self.column}Format={self.format} but the reader schema {self.reader.subject} "
                f"version {self.reader.version} is {self.reader.type}"
            )
        self.reader_parsed = self._parsed(self.reader)
        self.message = decode.message_of(column)
        self.arrow_type = self._arrow_type()
        self.convert = self._converter()
        self._writers: dict[int, Callable[[bytes], Any]] = {}
        self._reloaded = False

    def _parsed(self, schema: SchemaVersion) -> Any:
        what = f"schema id {schema.id} ({schema.subject} version {schema.version})"
        refs = self.registry.resolve_references(schema)
        try:
            if schema.type == "AVRO":
                named: dict[str, Any] = {}
                for ref in refs.values():
                    avro.parse(ref.schema, named)
                return avro.parse(schema.schema, named)
            if schema.type == "PROTOBUF":
                imports = {name: ref.schema for name, ref in refs.items()}
                return protobuf.compile_file(schema.schema, imports, what)
            return jsonschema.parse(schema.schema)
        except SchemaError as err:
            raise SchemaError(f"{what}: {err}") from err

    def _arrow_type(self) -> pa.DataType:
        if self.format == "avro":
            return avro.arrow_type(self.reader_parsed)
        if self.format == "protobuf":
            return protobuf.arrow_type(
                protobuf.reader_message(self.reader_parsed, self.message, self.reader.subject)
            )
        return jsonschema.arrow_type(self.reader_parsed)

    def _converter(self) -> Callable[[Any], Any] | None:
        if self.format == "avro":
            return avro.converter(self.reader_parsed)
        if self.format == "json":
            return jsonschema.converter(self.reader_parsed)
        return None

    def writer(self, schema_id: int) -> Callable[[bytes], Any]:
        """The payload decoder of ``schema_id`` (raises ValueError when unknown or unusable)."""
        found = self._writers.get(schema_id)
        if found is not None:
            return found
        schema = self.registry.by_id(schema_id)
        if schema is None and not self._reloaded:
            # registered after this process loaded the registry (a long-lived executor)?
            self._reloaded = True
            src = self.registry
            if src.source_key is not None:
                self.registry = registry_at(*src.source_key, fresh=True)
                schema = self.registry.by_id(schema_id)
        if schema is None:
            raise ValueError(
                f"schema id {schema_id} is not in the registry ({self.registry.source})"
            )
        if FORMAT_OF_TYPE[schema.type] != self.format:
            raise ValueError(
                f"schema id {schema_id} is {schema.type}, the reader schema "
                f"{self.reader.subject} version {self.reader.version} {self.reader.type}"
            )
        try:
            parsed = self._parsed(schema)
        except SchemaError as err:
            raise ValueError(str(err)) from err
        if self.format == "avro":
            found = avro.make_decoder(parsed, self.reader_parsed)
        elif self.format == "protobuf":
            found = protobuf.make_decoder(parsed, f"schema id {schema_id}")
        else:
            found = jsonschema.decode
        self._writers[schema_id] = found
        return found

    def decode_one(self, data: bytes) -> tuple[Any, int | None]:
        """One wire-format value -> (Python value, schema id); raises ValueError, naming the id
        (if any) via the second element of the error's args."""
        if len(data) < WIRE_HEADER.size or data[0] != MAGIC:
            raise Bad(
                f"no Confluent wire format: {len(data)} bytes starting {data[:5].hex() or 'empty'} "
                "(expected magic byte 00 and a 4-byte schema id)",
                None,
            )
        _, schema_id = WIRE_HEADER.unpack_from(data)
        try:
            value = self.writer(schema_id)(data[WIRE_HEADER.size :])
            if self.convert is not None:
                value = self.convert(value)
        except Bad:
            raise
        except Exception as err:
            raise Bad(f"does not decode: {type(err).__name__}: {err}", schema_id) from err
        return value, schema_id


def to_arrow(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """Decoded values -> one Arrow array. A struct is built a field at a time (a list per
    field, then ``StructArray.from_arrays``): several times faster than ``pa.array`` over a list
    of dicts, with the same result (missing keys are null, other keys ignored)."""
    if not pa.types.is_struct(arrow_type):
        return pa.array(values, type=arrow_type)
    present = [v for v in values if v is not None]
    if not all(type(v) is dict for v in present):
        return pa.array(values, type=arrow_type)
    fields = list(arrow_type)
    try:  # the usual case: every record has every field (Avro always does)
        children = [
            pa.array(list(map(operator.itemgetter(f.name), present)), type=f.type) for f in fields
        ]
    except KeyError:
        children = [pa.array([v.get(f.name) for v in present], type=f.type) for f in fields]
    struct_array = pa.StructArray.from_arrays(children, fields=fields)
    if len(present) == len(values):
        return struct_array
    # put the nulls back: row i takes present row rank[i], or null
    rank: list[int | None] = []
    n = 0
    for v in values:
        if v is None:
            rank.append(None)
        else:
            rank.append(n)
            n += 1
    return struct_array.take(pa.array(rank, pa.int64()))


_MAX_CACHED_DECODERS = 256
_COLUMN_DECODERS: dict[tuple[int, DecodeOptions, str, str | None], ColumnDecoder] = {}


def column_decoder(
    registry: Registry, decode: DecodeOptions, column: str, topic: str | None
) -> ColumnDecoder:
    """The decoder of ``column`` of ``topic``, made once per process (parsing and compiling
    schemas costs far more than a segment's task)."""
    key = (id(registry), decode, column, topic)
    found = _COLUMN_DECODERS.get(key)
    if found is None:
        if len(_COLUMN_DECODERS) >= _MAX_CACHED_DECODERS:  # registries of earlier reads
            _COLUMN_DECODERS.clear()
        found = ColumnDecoder(registry, decode, column, topic)
        _COLUMN_DECODERS[key] = found
    return found


class Bad(ValueError):
    def __init__(self, reason: str, schema_id: int | None) -> None:
        super().__init__(reason)
        self.reason, self.schema_id = reason, schema_id
