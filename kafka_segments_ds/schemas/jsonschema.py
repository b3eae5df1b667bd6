"""JSON Schema: the Arrow type of a reader schema, and payloads parsed as JSON.

Arrow types: ``object`` with ``properties`` -> struct (in the properties' order), ``array``
with ``items`` -> list, ``string`` -> string, ``integer`` -> int64, ``number`` -> float64,
``boolean`` -> bool, ``["T", "null"]`` -> T (nullable); a local ``$ref`` (``#/definitions/X``,
``#/$defs/X``) is followed. What has no single type (no ``type``, ``oneOf``/``anyOf``, several
non-null types, an object without properties) -> string holding the value as JSON. Values are
parsed, not validated against the writer's schema: a producer validated them already, and a
value of another type than the reader's fails to convert (a malformed record).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from kafka_segments_ds.errors import SchemaError

_SCALARS = {
    "string": pa.string(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "boolean": pa.bool_(),
    "null": pa.null(),
}
_MAX_REF_DEPTH = 32


def parse(schema_text: str) -> dict[str, Any]:
    """The registry's schema text -> the schema document."""
    try:
        doc = json.loads(schema_text)
    except ValueError as err:
        raise SchemaError(f"not a valid JSON Schema: {err}") from err
    if isinstance(doc, bool):
        return {}
    if not isinstance(doc, dict):
        raise SchemaError("not a valid JSON Schema: the document is not an object")
    return doc


def arrow_type(doc: dict[str, Any]) -> pa.DataType:
    """The Arrow type of values read with the reader schema ``doc``."""
    return _shape(doc, doc, 0)[0]


def converter(doc: dict[str, Any]) -> Callable[[Any], Any]:
    """What turns a parsed JSON value into one ``pa.array`` takes for :func:`arrow_type`: the
    parts without a single type are dumped back to JSON text, the rest kept as they are (a
    value of another type than the schema's then fails to convert: a malformed record)."""
    return _shape(doc, doc, 0)[1]


def _resolve(node: Any, root: dict[str, Any], depth: int) -> Any:
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        if depth > _MAX_REF_DEPTH or not ref.startswith("#/"):
            return {}  # remote or too deep a reference: no single type, JSON text
        target: Any = root
        for part in ref[2:].split("/"):
            if not isinstance(target, dict) or part not in target:
                raise SchemaError(f"JSON Schema $ref {ref} points nowhere")
            target = target[part]
        node, depth = target, depth + 1
    return node


def _shape(node: Any, root: dict[str, Any], depth: int) -> tuple[pa.DataType, Callable[[Any], Any]]:
    """(Arrow type, converter) of a schema node."""
    node = _resolve(node, root, depth)
    kind = node.get("type") if isinstance(node, dict) else None
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if isinstance(kind, str) and kind in _SCALARS:
        return _SCALARS[kind], _same
    if kind == "array" and isinstance(node.get("items"), dict):
        item_type, item = _shape(node["items"], root, depth + 1)
        if item is _same:
            return pa.list_(item_type), _same
        return pa.list_(item_type), lambda v: [item(x) for x in v] if isinstance(v, list) else v
    properties = node.get("properties") if kind == "object" else None
    if isinstance(properties, dict) and properties:
        if depth > _MAX_REF_DEPTH:
            raise SchemaError("JSON Schema is recursive: no Arrow type holds it")
        shapes = [(name, *_shape(sub, root, depth + 1)) for name, sub in properties.items()]
        struct_type = pa.struct([pa.field(name, t) for name, t, _ in shapes])
        parts = [(name, conv) for name, _, conv in shapes]

        def record(value: Any) -> Any:
            if not isinstance(value, dict):
                return value  # not an object: pa.array refuses it (a malformed record)
            return {name: conv(value.get(name)) for name, conv in parts}

        return struct_type, record
    return pa.string(), _as_json


def _as_json(value: Any) -> Any:
    return None if value is None else json.dumps(value, sort_keys=True)


def _same(value: Any) -> Any:
    return value


def decode(data: bytes, start: int) -> Any:
    """The JSON payload at ``start`` of a value -> its value."""
    return json.loads(data[start:])
