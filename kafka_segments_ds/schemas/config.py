"""Decoding options (``ReadOptions.decode`` validated) and the registry a read decodes with.

``schemaRegistry=archive`` is bound, on the driver, to the log dir read; each process loads a
registry once (a read on the driver loads it afresh; see :func:`registry_of`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from kafka_segments_ds.errors import InvalidOptionError, NoKafkaDataError, SchemaError
from kafka_segments_ds.layout import parse_partition_dir_name, parse_segment_file_name
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.schemas import DEFAULT_SCHEMAS_TOPIC
from kafka_segments_ds.schemas.registry import Registry, load_registry

FORMATS = ("raw", "avro", "protobuf", "json", "auto")
FORMAT_OF_TYPE = {"AVRO": "avro", "PROTOBUF": "protobuf", "JSON": "json"}
ARCHIVE = "archive"
RAW_COLUMN = {"value": "rawValue", "key": "rawKey"}


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
        registry_at(decode.schema_registry, decode.schemas_topic, options.storage, fresh=True)
        return options
    paths = [os.fspath(p) for p in path] if isinstance(path, list) else [os.fspath(path)]
    source = _find_log_dir(paths[0], decode.schemas_topic, options)
    entries = dict(options.decode)
    entries["schemaregistry"] = source
    return replace(options, decode=tuple(sorted(entries.items())))


def _find_log_dir(path: str, topic: str, options: ReadOptions) -> str:
    """The log dir holding ``topic``: ``path`` itself, or the log dir above it when ``path`` is
    a partition directory (one level up) or a segment file (two). Nothing above a log dir is
    listed: its parent may be a whole disk or bucket."""
    candidates = [path.rstrip("/")]
    name = candidates[0].rsplit("/", 1)[-1]
    above = 2 if parse_segment_file_name(name) else 1 if parse_partition_dir_name(name) else 0
    for _ in range(above):
        parent = candidates[-1].rsplit("/", 1)[0]
        if parent and parent != candidates[-1]:
            candidates.append(parent)
    for candidate in candidates:
        try:
            registry_at(candidate, topic, options.storage, fresh=True)
        except NoKafkaDataError:  # no such topic here: try the directory above
            continue
        return candidate
    raise SchemaError(
        f"no {topic} topic (the schema registry's) in {' or '.join(candidates)}: "
        "set schemaRegistry to a log dir holding it or to a registry's URL"
    )


_REGISTRIES: dict[tuple[str, str, tuple[tuple[str, str], ...]], Registry] = {}


def registry_at(
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
    return registry_at(decode.schema_registry, decode.schemas_topic, options.storage)


def wants_decoding(options: ReadOptions) -> bool:
    return bool(options.decode) and any(
        k in ("valueformat", "keyformat") and str(v).strip().lower() != "raw"
        for k, v in options.decode
    )
