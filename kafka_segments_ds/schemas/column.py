"""One column (``value`` or ``key``) of one topic: Confluent's wire format, the writer's schema
by id, the reader schema's Arrow type, and decoded values into one Arrow array.

Wire format: byte 0 is 0x00, bytes 1 to 4 the schema id (big-endian), then the payload (for
Protobuf, the message indexes first). Each value is decoded with its writer's schema, then shaped
as the reader schema: Avro by the spec's resolution rules, Protobuf and JSON by field name.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from io import BytesIO
from typing import Any

import numpy as np
import pyarrow as pa

from kafka_segments_ds.errors import MissingCodecError, SchemaError
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
        # id -> Avro: (writer schema, reader schema or None), what the decode loop reads with;
        # Protobuf and JSON: the payload decoder
        self._writers: dict[int, tuple[Any, Any] | Callable[[bytes, int], Any]] = {}
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

    def writer(self, schema_id: int) -> tuple[Any, Any] | Callable[[bytes, int], Any]:
        """How to decode the payload of ``schema_id``: for Avro the pair (writer schema, reader
        schema or None when they are equal) to read it with, else a payload decoder (raises
        ValueError when unknown or unusable)."""
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
            found = (parsed, None if parsed == self.reader_parsed else self.reader_parsed)
        elif self.format == "protobuf":
            found = protobuf.make_decoder(parsed, f"schema id {schema_id}")
        else:
            found = jsonschema.decode
        self._writers[schema_id] = found
        return found

    def decode_all(self, raw: pa.Array) -> tuple[list[Any], list[tuple[int, int | None, str]]]:
        """A binary column of wire-format values -> (Python values, with None for nulls and the
        bad ones; the bad ones as (row, schema id or None, reason)).

        The hot loop (benchmarks/bench_schemas.py): the values are read from one stream over the
        column's data buffer (no bytes object, copy or stream per value); a value whose 5-byte
        header is the previous one's needs no check and no lookup; Avro, the common case, is read
        here, not through a call to its decoder (a Python frame per value)."""
        data, starts, ends, nulls = _column_bytes(raw)
        values: list[Any] = []
        bad: list[tuple[int, int | None, str]] = []
        append = values.append
        convert = self.convert
        size = WIRE_HEADER.size
        head = b""  # the header of the values decode/writer/resolve are for
        schema_id: int | None = None
        decode: Callable[[bytes, int], Any] | None = None
        read = avro.schemaless_reader() if self.format == "avro" else None
        group = _Streams(data, ends)
        stream, low, high = group.stream, 0, -1
        writer: Any = None
        resolve: Any = None
        for i, start in enumerate(starts):
            if nulls is not None and nulls[i]:
                append(None)
                continue
            end = ends[i]
            if data[start : start + size] != head:
                head, decode = b"", None
                if end - start < size or data[start] != MAGIC:
                    bad.append((i, None, _no_wire_format(data[start:end])))
                    append(None)
                    continue
                schema_id = WIRE_HEADER.unpack_from(data, start)[1]
                try:
                    found = self.writer(schema_id)
                except MissingCodecError:
                    raise
                except Exception as err:  # an unknown id, a schema that does not parse
                    bad.append((i, schema_id, f"does not decode: {type(err).__name__}: {err}"))
                    append(None)
                    continue
                if isinstance(found, tuple):
                    writer, resolve = found
                else:
                    decode = found
                head = data[start : start + size]
            try:
                if read is not None:
                    if not (low <= start and end <= high):
                        stream, low, high = group.at(start, end)
                    stream.seek(start - low + size)
                    value = read(stream, writer, resolve)
                    at = stream.tell() + low
                    if at != end:  # short of the value's end, or read past it
                        raise ValueError(avro.left_over(at - start - size, end - start - size))
                else:
                    assert decode is not None  # set with head
                    value = decode(data[start:end], size)
                if convert is not None:
                    value = convert(value)
            except MissingCodecError:
                raise  # not the value's fault
            except Exception as err:  # fastavro, protobuf and json raise many kinds
                bad.append((i, schema_id, f"does not decode: {type(err).__name__}: {err}"))
                append(None)
                continue
            append(value)
        return values, bad


class _Streams:
    """Streams over the values of a column, each over the rows of about ``GROUP_BYTES`` (at
    least one row) plus one guard byte: a length inside a value that reads past the value's
    end reads past it by at least one byte, even for the last value, so the end check sees it;
    and a huge or negative length copies at most one group, not the rest of the column."""

    GROUP_BYTES = 1 << 20

    def __init__(self, data: bytes, ends: list[int]) -> None:
        self.data, self.ends = data, ends
        self.stream = BytesIO(b"")

    def at(self, start: int, end: int) -> tuple[BytesIO, int, int]:
        """The stream holding the value at [start, end): the stream, and the column's bytes
        [low, high) it holds."""
        last = bisect.bisect_right(self.ends, start + self.GROUP_BYTES) - 1
        low, high = start, max(end, self.ends[last] if last >= 0 else end)
        self.stream = BytesIO(self.data[low:high] + b"\0")
        return self.stream, low, high


def _column_bytes(raw: pa.Array) -> tuple[bytes, list[int], list[int], list[bool] | None]:
    """A binary column's values as one bytes object and each value's [start, end) in it (only
    the bytes the column's rows span are copied), plus which rows are null (None: none are)."""
    if isinstance(raw, pa.ChunkedArray):
        raw = raw.combine_chunks()
    n = len(raw)
    if not (pa.types.is_binary(raw.type) or pa.types.is_large_binary(raw.type)):
        raw = raw.cast(pa.binary())
    if n == 0:
        return b"", [], [], None
    _, offsets_buffer, data_buffer = raw.buffers()[:3]
    width = np.int64 if pa.types.is_large_binary(raw.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, width, n + 1, raw.offset * np.dtype(width).itemsize)
    low, high = int(offsets[0]), int(offsets[-1])
    data = b"" if data_buffer is None else data_buffer.slice(low, high - low).to_pybytes()
    bounds = (offsets - low).tolist()
    nulls = raw.is_null().to_pylist() if raw.null_count else None
    return data, bounds[:-1], bounds[1:], nulls


def _no_wire_format(data: bytes) -> str:
    return (
        f"no Confluent wire format: {len(data)} bytes starting {data[:5].hex() or 'empty'} "
        "(expected magic byte 00 and a 4-byte schema id)"
    )


def to_arrow(values: list[Any], arrow_type: pa.DataType) -> pa.Array:
    """Decoded values -> one Arrow array of ``arrow_type`` (for a struct: missing keys are
    null, other keys ignored). ``pa.array`` over the list of dicts is the fastest way measured
    (benchmarks/bench_schemas.py): faster than building the fields' arrays one by one."""
    return pa.array(values, type=arrow_type)


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
