"""Avro (fastavro): the Arrow type of a reader schema, and payloads decoded with the writer's
schema resolved to the reader's (the Avro spec's rules: added fields take their defaults,
removed fields are skipped, int -> long -> float -> double and string <-> bytes promote).

Arrow types: record -> struct, enum -> string, array -> list, map -> map<string, _>, fixed ->
fixed_size_binary, ``["null", T]`` -> T (nullable); a union of several non-null branches ->
string holding the value as JSON (Arrow's union types have no Spark equivalent). Logical types:
date -> date32, time-millis -> time32[ms], time-micros -> time64[us], timestamp-millis/micros ->
timestamp[ms/us, UTC], local-timestamp-* -> timestamp without zone, decimal -> decimal128,
uuid -> string. A recursive record has no Arrow type and is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from kafka_segments_ds.errors import MissingCodecError, SchemaError

Converter = Callable[[Any], Any]

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_LOGICAL: dict[str, pa.DataType] = {
    "date": pa.date32(),
    "time-millis": pa.time32("ms"),
    "time-micros": pa.time64("us"),
    "timestamp-millis": pa.timestamp("ms", tz="UTC"),
    "timestamp-micros": pa.timestamp("us", tz="UTC"),
    "local-timestamp-millis": pa.timestamp("ms"),
    "local-timestamp-micros": pa.timestamp("us"),
    "uuid": pa.string(),
}


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError as err:
        raise MissingCodecError(
            "Avro", "kafka-segments-ds[schemas]", "decoding Avro values (fastavro)"
        ) from err
    return fastavro


def parse(schema_text: str, named: dict[str, Any] | None = None) -> Any:
    """The registry's schema text -> fastavro's parsed schema (``named``: referenced types,
    to which the types this schema defines are added)."""
    _fastavro()
    from fastavro.schema import SchemaParseException, UnknownType, parse_schema

    try:
        loaded = json.loads(schema_text)
        return parse_schema(loaded, named_schemas=named if named is not None else {})
    except (ValueError, TypeError, KeyError, SchemaParseException, UnknownType) as err:
        raise SchemaError(f"not a valid Avro schema: {type(err).__name__}: {err}") from err


def _named(parsed: Any) -> dict[str, Any]:
    """The named types ``parsed`` can use: its own and those of the schemas it references
    (fastavro keeps them under ``__named_schemas``)."""
    return dict(parsed.get("__named_schemas", {})) if isinstance(parsed, dict) else {}


def arrow_type(parsed: Any) -> pa.DataType:
    """The Arrow type of values read with the reader schema ``parsed``."""
    return _type(parsed, _named(parsed), ())


def _type(schema: Any, names: dict[str, Any], stack: tuple[str, ...]) -> pa.DataType:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in stack:
            raise SchemaError(f"Avro record {schema} is recursive: no Arrow type holds it")
        if schema not in names:
            raise SchemaError(f"Avro schema names an unknown type {schema}")
        return _type(names[schema], names, stack)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _type(branches[0], names, stack)
        return pa.string() if branches else pa.null()
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if kind == "record" or kind == "error":
        name = schema["name"]
        names[name] = schema
        inner = (*stack, name)
        return pa.struct(
            [pa.field(f["name"], _type(f["type"], names, inner)) for f in schema["fields"]]
        )
    if kind == "enum":
        names[schema["name"]] = schema
        return pa.string()
    if kind == "fixed":
        names[schema["name"]] = schema
        return pa.binary(int(schema["size"]))
    if kind == "array":
        return pa.list_(_type(schema["items"], names, stack))
    if kind == "map":
        return pa.map_(pa.string(), _type(schema["values"], names, stack))
    return _type(kind, names, stack)


def converter(parsed: Any) -> Converter | None:
    """What turns fastavro's Python value into one ``pa.array`` takes for :func:`arrow_type`, or
    ``None`` when nothing needs it (the usual case: no multi-branch union, no uuid)."""
    return _conv(parsed, _named(parsed), ())


def _conv(schema: Any, names: dict[str, Any], stack: tuple[str, ...]) -> Converter | None:
    if isinstance(schema, str):
        if schema in _PRIMITIVES or schema in stack or schema not in names:
            return None
        return _conv(names[schema], names, stack)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _conv(branches[0], names, stack)
        return _as_json
    kind = schema["type"]
    if schema.get("logicalType") == "uuid":
        return _as_str
    if kind in ("record", "error"):
        names[schema["name"]] = schema
        inner = (*stack, schema["name"])
        parts = [(f["name"], _conv(f["type"], names, inner)) for f in schema["fields"]]
        changed = [(n, c) for n, c in parts if c is not None]
        if not changed:
            return None

        def record(value: Any) -> Any:
            if value is None:
                return None
            out = dict(value)
            for name, conv in changed:
                out[name] = conv(out.get(name))
            return out

        return record
    if kind in ("enum", "fixed"):
        names[schema["name"]] = schema
        return None
    if kind == "array":
        item = _conv(schema["items"], names, stack)
        return None if item is None else (lambda v: None if v is None else [item(x) for x in v])
    if kind == "map":
        val = _conv(schema["values"], names, stack)
        if val is None:
            return None
        return lambda v: None if v is None else {k: val(x) for k, x in v.items()}
    return None


def _as_str(value: Any) -> Any:
    return None if value is None else str(value)


def _as_json(value: Any) -> Any:
    if value is None:
        return None
    return json.dumps(value, default=_json_default, sort_keys=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return str(value)


def schemaless_reader() -> Any:
    """fastavro's reader of one value without a container (raises MissingCodecError)."""
    return _fastavro().schemaless_reader


def left_over(read: int, size: int) -> str:
    """The message for a value that its schema reads without reaching the end."""
    return f"{size - read} bytes left after the Avro value (read {read} of {size})"
