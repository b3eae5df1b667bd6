"""Protobuf: descriptors compiled from the registry's ``.proto`` text, payloads decoded with them.

The ``.proto`` text (and the texts of the subjects it references, under their reference names)
is compiled by protoc, the one bundled in grpcio-tools, into a FileDescriptorSet that protobuf's
runtime loads into its own pool. protoc is Google's own compiler, so every construct of the
language (imports, nested and map types, options, well-known types) means what it does for the
producer. Confluent's framing puts the message indexes before the payload: a zigzag varint
count, then that many zigzag varint indexes into the file's messages and their nested ones (a
single 0 byte means ``[0]``, the first message).

Arrow types: message -> struct, repeated -> list, map -> map, enum -> string (its value name),
int32/sint32/sfixed32 -> int32, uint32/fixed32 -> uint32, the 64-bit ones likewise, float ->
float32, double -> float64, bytes -> binary. A field with presence (a message field, an
``optional`` or oneof member, proto2) is null when unset; a proto3 scalar reads its default. A
recursive message has no Arrow type and is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from kafka_segments_ds.errors import MissingCodecError, SchemaError

MAIN_FILE = "registry_schema.proto"
PROTOC_TIMEOUT_S = 120
_MAX_INDEXES = 64  # nesting deeper than any message a producer sends


def _modules() -> tuple[Any, Any, Any]:
    try:
        import grpc_tools  # noqa: F401  (protoc)
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as err:
        raise MissingCodecError(
            "Protobuf",
            "kafka-segments-ds[schemas]",
            "decoding Protobuf values (protobuf, grpcio-tools)",
        ) from err
    return descriptor_pb2, descriptor_pool, message_factory


def compile_file(text: str, imports: dict[str, str], what: str) -> Any:
    """Compile ``text`` (with ``imports``: file name -> text) -> its FileDescriptor."""
    descriptor_pb2, descriptor_pool, _ = _modules()
    import grpc_tools

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    with tempfile.TemporaryDirectory(prefix="kafka-segments-proto-") as tmp:
        for name, body in {**imports, MAIN_FILE: text}.items():
            target = os.path.normpath(os.path.join(tmp, name))
            if not target.startswith(tmp + os.sep):
                raise SchemaError(f"{what}: reference name {name!r} leaves the import root")
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as f:
                f.write(body)
        out = os.path.join(tmp, "set.pb")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"-I{tmp}",
                f"-I{include}",
                "--include_imports",
                f"--descriptor_set_out={out}",
                MAIN_FILE,
            ],
            capture_output=True,
            text=True,
            timeout=PROTOC_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().replace(tmp + os.sep, "")
            raise SchemaError(f"{what}: protoc cannot compile the schema: {detail}")
        with open(out, "rb") as f:
            files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for proto in files.file:  # dependencies come first
        pool.Add(proto)
    return pool.FindFileByName(MAIN_FILE)


def message_at(file: Any, indexes: tuple[int, ...], what: str) -> Any:
    """The message descriptor at ``indexes`` (Confluent's message indexes) in ``file``."""
    types = _top_level_messages(file)
    message = None
    for index in indexes:
        if not 0 <= index < len(types):
            raise ValueError(f"message index {list(indexes)} not in {what}")
        message = types[index]
        types = list(message.nested_types)
    if message is None:
        raise ValueError(f"{what} has no message")
    return message


def _top_level_messages(file: Any) -> list[Any]:
    """The file's messages in declaration order (the order message indexes count in), from its
    FileDescriptorProto: a by-name map need not keep it."""
    descriptor_pb2, _, _ = _modules()
    proto = descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb)
    prefix = f"{proto.package}." if proto.package else ""
    return [file.pool.FindMessageTypeByName(prefix + m.name) for m in proto.message_type]


def reader_message(file: Any, name: str | None, subject: str) -> Any:
    """The reader message: the one named ``name`` (full name) in ``file``, else its first."""
    if name is None:
        return message_at(file, (0,), f"the reader schema of {subject}")
    try:
        return file.pool.FindMessageTypeByName(name)
    except KeyError as err:
        raise SchemaError(f"the reader schema of {subject} has no message {name}") from err


def read_indexes(payload: bytes | memoryview, pos: int) -> tuple[tuple[int, ...], int]:
    """Confluent's message indexes at ``pos`` -> (indexes, position after them)."""
    count, pos = _zigzag(payload, pos)
    if count == 0:
        return (0,), pos
    if not 0 < count <= _MAX_INDEXES:
        raise ValueError(f"message index count {count} is not in 1..{_MAX_INDEXES}")
    out = []
    for _ in range(count):
        index, pos = _zigzag(payload, pos)
        out.append(index)
    return tuple(out), pos


def _zigzag(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("the message indexes run past the value's end")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("a message index varint is longer than 10 bytes")


_SCALARS = {
    1: pa.float64(),  # TYPE_DOUBLE
    2: pa.float32(),  # TYPE_FLOAT
    3: pa.int64(),  # TYPE_INT64
    4: pa.uint64(),  # TYPE_UINT64
    5: pa.int32(),  # TYPE_INT32
    6: pa.uint64(),  # TYPE_FIXED64
    7: pa.uint32(),  # TYPE_FIXED32
    8: pa.bool_(),  # TYPE_BOOL
    9: pa.string(),  # TYPE_STRING
    12: pa.binary(),  # TYPE_BYTES
    13: pa.uint32(),  # TYPE_UINT32
    14: pa.string(),  # TYPE_ENUM (value name)
    15: pa.int32(),  # TYPE_SFIXED32
    16: pa.int64(),  # TYPE_SFIXED64
    17: pa.int32(),  # TYPE_SINT32
    18: pa.int64(),  # TYPE_SINT64
}
_MESSAGE, _GROUP = 11, 10
_REPEATED = 3


def arrow_type(message: Any) -> pa.DataType:
    """The Arrow struct type of ``message`` (a Descriptor)."""
    return _struct(message, ())


def _struct(message: Any, stack: tuple[str, ...]) -> pa.DataType:
    if message.full_name in stack:
        raise SchemaError(
            f"Protobuf message {message.full_name} is recursive: no Arrow type holds it"
        )
    inner = (*stack, message.full_name)
    return pa.struct([pa.field(f.name, _field_type(f, inner)) for f in message.fields])


def _repeated(field: Any) -> bool:
    is_repeated = getattr(field, "is_repeated", None)  # protobuf 6+; `label` is gone in 7
    return bool(is_repeated) if is_repeated is not None else field.label == _REPEATED


def _is_map(field: Any) -> bool:
    return bool(
        field.type == _MESSAGE and _repeated(field) and field.message_type.GetOptions().map_entry
    )


def _field_type(field: Any, stack: tuple[str, ...]) -> pa.DataType:
    if _is_map(field):
        entry = field.message_type
        key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
        return pa.map_(_single_type(key, stack), _single_type(value, stack))
    single = _single_type(field, stack)
    return pa.list_(single) if _repeated(field) else single


def _single_type(field: Any, stack: tuple[str, ...]) -> pa.DataType:
    if field.type in (_MESSAGE, _GROUP):
        return _struct(field.message_type, stack)
    return _SCALARS[field.type]


def to_python(message: Any) -> dict[str, Any]:
    """A decoded message -> the nested dicts/lists ``pa.array`` takes for :func:`arrow_type`."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        name = field.name
        if _is_map(field):
            value_field = field.message_type.fields_by_name["value"]
            out[name] = [(k, _single(value_field, v)) for k, v in getattr(message, name).items()]
        elif _repeated(field):
            out[name] = [_single(field, v) for v in getattr(message, name)]
        elif field.has_presence and not message.HasField(name):
            out[name] = None
        else:
            out[name] = _single(field, getattr(message, name))
    return out


def _single(field: Any, value: Any) -> Any:
    if field.type in (_MESSAGE, _GROUP):
        return to_python(value)
    if field.type == 14:
        named = field.enum_type.values_by_number.get(value)
        return named.name if named is not None else str(value)
    return value


def make_decoder(file: Any, what: str) -> Callable[[bytes, int], Any]:
    """A function decoding the Confluent Protobuf payload at ``start`` (indexes + message) of a
    value with ``file``."""
    _, _, message_factory = _modules()
    classes: dict[tuple[int, ...], Any] = {}

    def decode(payload: bytes, start: int) -> Any:
        indexes, pos = read_indexes(payload, start)
        cls = classes.get(indexes)
        if cls is None:
            cls = message_factory.GetMessageClass(message_at(file, indexes, what))
            classes[indexes] = cls
        return to_python(cls.FromString(payload[pos:]))

    return decode
