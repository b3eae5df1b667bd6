"""Kafka's message-schema encoding, as used by the records of internal topics.

Kafka describes its protocol and its internal records in JSON message schemas (``validVersions``,
``flexibleVersions``, fields with ``versions``, ``nullableVersions``, ``taggedVersions``/``tag``).
Here a schema is a :class:`Message` value, and :func:`decode_message` reads one version of it.

Wire encoding (big-endian):

* ``int8/16/32/64``, ``uint16``; ``bool`` = 1 byte (non-zero is true); ``uuid`` = 16 bytes,
  shown as Kafka prints it (URL-safe base64 without padding); ``float64`` IEEE double.
* Classic versions: ``string`` = int16 length + UTF-8 (-1 = null); ``bytes`` = int32 length
  (-1 = null); array = int32 count (-1 = null) + elements.
* Flexible versions (``flexibleVersions``): the lengths and counts above become an unsigned
  varint of ``length + 1`` (0 = null), and every struct ends with a tagged-field section: an
  unsigned varint count, then per field an unsigned varint tag, an unsigned varint size and that
  many bytes. Unknown tags are kept as raw bytes rather than rejected.

Every length and count is checked against the bytes that remain before anything is read, so a
damaged value raises :class:`~kafka_segments_ds.errors.CorruptSegmentError` (``position`` is the
byte position inside the decoded buffer) instead of allocating or looping on a garbage count.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any, Union

from kafka_segments_ds.errors import CorruptSegmentError

# Scalar types: name -> (struct, size)
_SCALARS: dict[str, struct.Struct] = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "bool": struct.Struct(">?"),
    "float64": struct.Struct(">d"),
}
_UUID_SIZE = 16
_MAX_UVARINT_BYTES = 5  # Kafka's unsigned varints are int32


@dataclass(frozen=True, slots=True)
class Struct:
    """A nested struct type (its fields follow the enclosing message's versions)."""

    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class ArrayOf:
    """An array type: ``[]int32``, ``[]string``, ``[]SomeStruct``."""

    element: FieldType


FieldType = Union[str, Struct, ArrayOf]  # noqa: UP007 - a runtime alias, not only an annotation


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a schema; ``versions``/``nullable``/``tagged`` are ``(first, last)``."""

    name: str
    type: FieldType
    versions: tuple[int, int | None] = (0, None)
    nullable: tuple[int, int | None] | None = None
    tag: int | None = None  # the tag of a tagged field (``taggedVersions`` = ``versions``)
    default: Any = None  # the value of a tagged field that is absent


@dataclass(frozen=True, slots=True)
class Message:
    """A message schema: ``validVersions`` and ``flexibleVersions`` (``None`` = never)."""

    name: str
    valid: tuple[int, int]
    flexible_from: int | None
    fields: tuple[Field, ...]

    def is_valid_version(self, version: int) -> bool:
        return self.valid[0] <= version <= self.valid[1]


def _in(version: int, span: tuple[int, int | None] | None) -> bool:
    if span is None:
        return False
    first, last = span
    return version >= first and (last is None or version <= last)


def uuid_text(raw: bytes) -> str:
    """A UUID as Kafka prints it: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


@dataclass(slots=True)
class _Cursor:
    """Read position in one buffer; raises with the message name and position on damage."""

    buf: bytes
    pos: int
    end: int
    what: str  # e.g. "OffsetCommitValue v3"

    def fail(self, reason: str, position: int | None = None) -> CorruptSegmentError:
        at = self.pos if position is None else position
        return CorruptSegmentError(
            f"{self.what}: {reason} (byte {at} of {len(self.buf)})", position=at
        )

    def take(self, size: int, field: str) -> bytes:
        if size > self.end - self.pos:
            raise self.fail(f"field {field} needs {size} bytes, {self.end - self.pos} left")
        out = self.buf[self.pos : self.pos + size]
        self.pos += size
        return out

    def scalar(self, kind: str, field: str) -> Any:
        codec = _SCALARS[kind]
        return codec.unpack(self.take(codec.size, field))[0]

    def uvarint(self, field: str) -> int:
        value = shift = 0
        start = self.pos
        for _ in range(_MAX_UVARINT_BYTES):
            if self.pos >= self.end:
                raise self.fail(f"field {field}: varint runs past the end", start)
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise self.fail(f"field {field}: varint longer than {_MAX_UVARINT_BYTES} bytes", start)

    def length(self, flexible: bool, wide: bool, field: str) -> int:
        """A string/bytes length or an array count; -1 means null. Checked against the rest."""
        start = self.pos
        if flexible:
            size = self.uvarint(field) - 1
        else:
            size = self.scalar("int32" if wide else "int16", field)
        if size < -1:
            raise self.fail(f"field {field}: negative length {size}", start)
        if size > self.end - self.pos:
            raise self.fail(
                f"field {field}: length {size} runs past the end ({self.end - self.pos} left)",
                start,
            )
        return size


def decode_message(message: Message, version: int, buf: bytes, pos: int = 0) -> dict[str, Any]:
    """Decode ``buf[pos:]`` as ``message`` at ``version``; bytes left over are reported.

    Left-over bytes are not an error (Kafka's readers ignore them too); they appear as
    ``"_trailing_bytes": n`` in the result.
    """
    if not message.is_valid_version(version):
        raise ValueError(f"{message.name} has no version {version}")
    flexible = message.flexible_from is not None and version >= message.flexible_from
    cursor = _Cursor(buf, pos, len(buf), f"{message.name} v{version}")
    out = _decode_struct(cursor, message.fields, version, flexible)
    if cursor.pos != cursor.end:
        out["_trailing_bytes"] = cursor.end - cursor.pos
    return out


def _decode_struct(
    cursor: _Cursor, fields: tuple[Field, ...], version: int, flexible: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tagged: dict[int, Field] = {}
    for field in fields:
        if not _in(version, field.versions):
            continue  # not part of this version: left out rather than shown with a default
        if field.tag is not None:
            # an absent tagged field has its default (a tuple default stands for a list)
            default = field.default
            out[field.name] = list(default) if isinstance(default, tuple) else default
            tagged[field.tag] = field
        else:
            out[field.name] = _decode_value(cursor, field, field.type, version, flexible)
    if flexible:
        unknown = _decode_tagged(cursor, tagged, version, out)
        if unknown:
            out["_unknown_tagged_fields"] = unknown
    return out


def _decode_tagged(
    cursor: _Cursor, tagged: dict[int, Field], version: int, out: dict[str, Any]
) -> list[dict[str, Any]]:
    unknown = []
    count = cursor.uvarint("tagged field count")
    if count > cursor.end - cursor.pos:
        raise cursor.fail(f"tagged field count {count} runs past the end")
    for _ in range(count):
        tag = cursor.uvarint("tag")
        size = cursor.uvarint(f"tag {tag} size")
        start = cursor.pos
        data = cursor.take(size, f"tag {tag}")
        field = tagged.get(tag)
        if field is None:
            unknown.append({"tag": tag, "data": data.hex()})
            continue
        inner = _Cursor(cursor.buf, start, start + size, cursor.what)
        out[field.name] = _decode_value(inner, field, field.type, version, True)
        if inner.pos != inner.end:
            raise inner.fail(f"tagged field {field.name} has {inner.end - inner.pos} extra bytes")
    return unknown


def _decode_value(
    cursor: _Cursor, field: Field, kind: FieldType, version: int, flexible: bool
) -> Any:
    if isinstance(kind, str):
        if kind in _SCALARS:
            return cursor.scalar(kind, field.name)
        if kind == "uuid":
            return uuid_text(cursor.take(_UUID_SIZE, field.name))
        if kind in ("string", "bytes"):
            start = cursor.pos
            size = cursor.length(flexible, kind == "bytes", field.name)
            if size < 0:
                return _null(cursor, field, version, start)
            raw = cursor.take(size, field.name)
            if kind == "bytes":
                return base64.b64encode(raw).decode("ascii")
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise cursor.fail(f"field {field.name} is not UTF-8", start) from err
        raise AssertionError(f"unknown type {kind!r} in a schema")
    if isinstance(kind, Struct):
        return _decode_struct(cursor, kind.fields, version, flexible)
    start = cursor.pos
    count = cursor.length(flexible, True, field.name)
    if count < 0:
        return _null(cursor, field, version, start)
    return [_decode_value(cursor, field, kind.element, version, flexible) for _ in range(count)]


def _null(cursor: _Cursor, field: Field, version: int, start: int) -> None:
    if not _in(version, field.nullable):
        raise cursor.fail(f"field {field.name} is null but not nullable", start)
    return None


def decode_uvarint(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    """Decode an unsigned varint (at most 5 bytes) at ``pos``; return ``(value, next pos)``."""
    cursor = _Cursor(buf, pos, len(buf), what)
    value = cursor.uvarint(what)
    return value, cursor.pos
