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
    return _type(doc, doc, 0)


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


def _type(node: Any, root: dict[str, Any], depth: int) -> pa.DataType:
    node = _resolve(node, root, depth)
    if not isinstance(node, dict):
        return pa.string()
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "array" and isinstance(node.get("items"), dict):
        return pa.list_(_type(node["items"], root, depth + 1))
    if kind == "object" and isinstance(node.get("properties"), dict) and node["properties"]:
        if depth > _MAX_REF_DEPTH:
            raise SchemaError("JSON Schema is recursive: no Arrow type holds it")
        return pa.struct(
            [
                pa.field(name, _type(sub, root, depth + 1))
                for name, sub in node["properties"].items()
            ]
        )
    return pa.string()


def converter(arrow: pa.DataType) -> Callable[[Any], Any]:
    """What turns a parsed JSON value into one ``pa.array`` takes for ``arrow``: the parts
    typed as JSON text are dumped back to text, the rest kept."""
    if pa.types.is_struct(arrow):
        parts = [
            (arrow.field(i).name, converter(arrow.field(i).type)) for i in range(arrow.num_fields)
        ]

        def record(value: Any) -> Any:
            if not isinstance(value, dict):
                return value  # not an object: pa.array refuses it (a malformed record)
            return {name: conv(value.get(name)) for name, conv in parts}

        return record
    if pa.types.is_list(arrow):
        item = converter(arrow.value_type)
        return lambda v: [item(x) for x in v] if isinstance(v, list) else v
    if pa.types.is_string(arrow):
        return lambda v: v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True)
    return _same


def _same(value: Any) -> Any:
    return value


def decode(payload: bytes) -> Any:
    """One JSON payload -> its value."""
    return json.loads(payload)
