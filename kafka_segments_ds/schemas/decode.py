"""Decoding on read: the options, Confluent's wire format, and the post-step on Arrow batches.

A task's batches come out of the reader with ``value`` / ``key`` as bytes; :class:`TaskDecoder`
replaces those columns with the decoded ones (typed by the topic's reader schema) and, with
``includeRawValue`` / ``includeRawKey``, puts the bytes beside them as ``rawValue`` / ``rawKey``.
Wire format: byte 0 is 0x00, bytes 1 to 4 the schema id (big-endian), then the payload (for
Protobuf, the message indexes first). Each value is decoded with its writer's schema (by id),
then shaped as the reader schema: Avro by the spec's resolution rules, Protobuf and JSON by field
name (fields the reader does not have are dropped; those the writer did not have are null).
"""

from __future__ import annotations

import base64
import datetime
import logging
import operator
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from kafka_segments_ds.errors import (
    InvalidOptionError,
    NoKafkaDataError,
    SchemaError,
    UndecodableValueError,
)
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.schemas import DEFAULT_SCHEMAS_TOPIC, avro, jsonschema, protobuf
from kafka_segments_ds.schemas.registry import Registry, SchemaVersion, load_registry

FORMATS = ("raw", "avro", "protobuf", "json", "auto")
FORMAT_OF_TYPE = {"AVRO": "avro", "PROTOBUF": "protobuf", "JSON": "json"}
ARCHIVE = "archive"
MAGIC = 0
_WIRE_HEADER = struct.Struct(">bI")  # magic byte (0), schema id (big-endian)
_NOT_CONVERTED = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError)
RAW_COLUMN = {"value": "rawValue", "key": "rawKey"}
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DecodeOptions:
    """The decoding options of a read (``ReadOptions.decode`` validated)."""

    value_format: str = "raw"
    key_format: str = "raw"
    schema_registry: str = ARCHIVE  # archive | a log dir path | an http(s) URL
    schemas_topic: str = DEFAULT_SCHEMAS_TOPIC
    value_subject: str | None = None
    value_version: int | None = None
    key_subject: str | None = None
    key_version: int | None = None
    value_message: str | None = None  # Protobuf: the reader message's full name
    key_message: str | None = None
    include_raw_value: bool = False
    include_raw_key: bool = False

    def format_of(self, column: str) -> str:
        return self.value_format if column == "value" else self.key_format

    def subject_of(self, column: str, topic: str | None) -> str:
        chosen = self.value_subject if column == "value" else self.key_subject
        if chosen is not None:
            return chosen
        if topic is None:
            raise InvalidOptionError(
                f"the records' topic is unknown (a bare .log file): set "
                f"{'valueSchemaSubject' if column == 'value' else 'keySchemaSubject'}"
            )
        return f"{topic}-{column}"  # TopicNameStrategy

    def version_of(self, column: str) -> int | None:
        return self.value_version if column == "value" else self.key_version

    def message_of(self, column: str) -> str | None:
        return self.value_message if column == "value" else self.key_message

    def include_raw(self, column: str) -> bool:
        return self.include_raw_value if column == "value" else self.include_raw_key


def parse_decode_options(options: ReadOptions) -> DecodeOptions:
    """Validate ``options.decode`` (lower-cased option name -> value)."""
    raw = dict(options.decode)
    fields: dict[str, Any] = {}
    for key, attr in (("valueformat", "value_format"), ("keyformat", "key_format")):
        if key in raw:
            value = str(raw[key]).strip().lower()
            if value not in FORMATS:
                raise InvalidOptionError(
                    f"option {key} must be one of {', '.join(FORMATS)}, not {raw[key]!r}"
                )
            fields[attr] = value
    for key, attr in (
        ("schemaregistry", "schema_registry"),
        ("schemastopic", "schemas_topic"),
        ("valueschemasubject", "value_subject"),
        ("keyschemasubject", "key_subject"),
        ("valueschemamessage", "value_message"),
        ("keyschemamessage", "key_message"),
    ):
        if key in raw:
            text = str(raw[key]).strip()
            if not text:
                raise InvalidOptionError(f"option {key} is empty")
            fields[attr] = text
    for key, attr in (("valueschemaversion", "value_version"), ("keyschemaversion", "key_version")):
        if key in raw and str(raw[key]).strip().lower() != "latest":
            try:
                fields[attr] = int(str(raw[key]).strip())
            except ValueError as err:
                raise InvalidOptionError(
                    f"option {key} must be a version number or latest, not {raw[key]!r}"
                ) from err
    for key, attr in (
        ("includerawvalue", "include_raw_value"),
        ("includerawkey", "include_raw_key"),
    ):
        if key in raw:
            text = str(raw[key]).strip().lower()
            if text not in ("true", "false"):
                raise InvalidOptionError(f"option {key} must be true or false, not {raw[key]!r}")
            fields[attr] = text == "true"
    return DecodeOptions(**fields)


def bind_registry(options: ReadOptions, path: str | os.PathLike[str] | list[str]) -> ReadOptions:
    """``options`` with ``schemaRegistry=archive`` replaced by the log dir read (``path``, or
    the log dir above a partition directory or segment it names), so executors find it."""
    decode = parse_decode_options(options)
    if decode.value_format == "raw" and decode.key_format == "raw":
        return options
    if decode.schema_registry != ARCHIVE:
        _registry(decode.schema_registry, decode.schemas_topic, options.storage, fresh=True)
        return options
    paths = [os.fspath(p) for p in path] if isinstance(path, list) else [os.fspath(path)]
    source = _find_log_dir(paths[0], decode.schemas_topic, options)
    entries = dict(options.decode)
    entries["schemaregistry"] = source
    return replace(options, decode=tuple(sorted(entries.items())))


def _find_log_dir(path: str, topic: str, options: ReadOptions) -> str:
    candidates = [path.rstrip("/")]
    for _ in range(2):
        parent = candidates[-1].rsplit("/", 1)[0]
        if parent and parent != candidates[-1]:
            candidates.append(parent)
    for candidate in candidates:
        try:
            _registry(candidate, topic, options.storage, fresh=True)
        except NoKafkaDataError:  # no such topic here: try the directory above
            continue
        return candidate
    raise SchemaError(
        f"no {topic} topic (the schema registry's) in {' or '.join(candidates)}: "
        "set schemaRegistry to a log dir holding it or to a registry's URL"
    )


_REGISTRIES: dict[tuple[str, str, tuple[tuple[str, str], ...]], Registry] = {}


def _registry(
    source: str, topic: str, storage: tuple[tuple[str, str], ...], fresh: bool = False
) -> Registry:
    """The registry at ``source``, loaded once per process; ``fresh``: loaded again (each read
    binds a fresh one on the driver; an executor reloads when it meets an unknown id)."""
    key = (source, topic, storage)
    found = None if fresh else _REGISTRIES.get(key)
    if found is None:
        found = load_registry(source, topic, **dict(storage))
        found.source_key = key
        _REGISTRIES[key] = found
    return found


def registry_of(options: ReadOptions) -> Registry:
    """The registry a (bound) read decodes with."""
    decode = parse_decode_options(options)
    if decode.schema_registry == ARCHIVE:
        raise SchemaError("schemaRegistry=archive was not bound to the read's path")
    return _registry(decode.schema_registry, decode.schemas_topic, options.storage)


# -- one column of one topic ------------------------------------------------------------------


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
            return jsonschema.converter(self.arrow_type)
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
                self.registry = _registry(*src.source_key, fresh=True)
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
        if len(data) < _WIRE_HEADER.size or data[0] != MAGIC:
            raise _Bad(
                f"no Confluent wire format: {len(data)} bytes starting {data[:5].hex() or 'empty'} "
                "(expected magic byte 00 and a 4-byte schema id)",
                None,
            )
        _, schema_id = _WIRE_HEADER.unpack_from(data)
        try:
            value = self.writer(schema_id)(data[_WIRE_HEADER.size :])
            if self.convert is not None:
                value = self.convert(value)
        except _Bad:
            raise
        except Exception as err:
            raise _Bad(f"does not decode: {type(err).__name__}: {err}", schema_id) from err
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


class _Bad(ValueError):
    def __init__(self, reason: str, schema_id: int | None) -> None:
        super().__init__(reason)
        self.reason, self.schema_id = reason, schema_id


# -- the post-step on a task's batches --------------------------------------------------------


def wants_decoding(options: ReadOptions) -> bool:
    return bool(options.decode) and any(
        k in ("valueformat", "keyformat") and str(v).strip().lower() != "raw"
        for k, v in options.decode
    )


def decoded_columns(options: ReadOptions, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The column names a decoding read returns for ``columns`` (``rawValue`` / ``rawKey``
    after the decoded column when asked)."""
    decode = parse_decode_options(options)
    out: list[str] = []
    for name in columns:
        out.append(name)
        if name in RAW_COLUMN and decode.format_of(name) != "raw" and decode.include_raw(name):
            out.append(RAW_COLUMN[name])
    return tuple(out)


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
        values: list[Any] = []
        bad: list[tuple[int, int | None, str]] = []  # (row, schema id, reason)
        append = values.append
        for i, data in enumerate(raw.to_pylist()):
            if data is None:
                append(None)
                continue
            try:
                append(decoder.decode_one(data)[0])
            except _Bad as err:
                bad.append((i, err.schema_id, err.reason))
                append(None)
        try:
            column = to_arrow(values, decoder.arrow_type)
        except _NOT_CONVERTED:
            # some value does not fit the reader type: find which, one by one
            for i, value in enumerate(values):
                try:
                    pa.array([value], type=decoder.arrow_type)
                except _NOT_CONVERTED as err:  # noqa: PERF203  (only after a batch failed)
                    data = raw[i].as_py()
                    sid = _WIRE_HEADER.unpack_from(data)[1]
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
