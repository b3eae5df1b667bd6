"""Schema Registry's state, replayed from its ``_schemas`` topic or fetched from a live registry.

Schema Registry keeps everything in one compacted topic. Each record's key is JSON naming a
``keytype``; the value is JSON, or null (a tombstone):

* ``SCHEMA`` {subject, version}: the value {subject, version, id, schemaType?, schema,
  references?, deleted} registers that version (``deleted: true`` is a soft delete); a null value
  is a hard delete of that version.
* ``DELETE_SUBJECT`` {subject}: the value {subject, version} soft-deletes every version up to
  ``version``.
* ``CLEAR_SUBJECT`` {subject}: hard-deletes the subject's soft-deleted versions.
* ``CONFIG`` and ``MODE`` {subject?}: compatibility level and mode (kept, not needed to decode).
* ``NOOP``: the registry's own marker when it starts (no state).

The last record of a key wins, as on a compacted topic; a SCHEMA record giving an id that
another schema text holds is ignored, as the registry's store handler refuses it.
:class:`Registry` also keeps every (id -> schema) it ever saw, hard-deleted ones included: data
written with a schema that was deleted later still decodes from the archive.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka_segments_ds.errors import SchemaError, StorageError
from kafka_segments_ds.schemas import DEFAULT_SCHEMAS_TOPIC

SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
# keytypes Schema Registry writes that carry no schema (newer ones: contexts, tenants)
_STATELESS_KEYTYPES = frozenset({"NOOP", "DELETE_CONTEXT", "CONTEXT"})
HTTP_TIMEOUT_S = 30
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reference:
    """A schema's reference to another subject's version (a Protobuf import, a named type)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One registered (subject, version) with its global id."""

    subject: str
    version: int
    id: int
    type: str  # AVRO | PROTOBUF | JSON
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False


@dataclass(slots=True)
class Registry:
    """The replayed state: subject versions, every id ever seen, configs and modes."""

    versions: dict[tuple[str, int], SchemaVersion] = field(default_factory=dict)
    ids: dict[int, SchemaVersion] = field(default_factory=dict)
    configs: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    modes: dict[str | None, str] = field(default_factory=dict)
    source: str = ""
    # (source, topic, storage) it was loaded from, to load it again (schemas.config)
    source_key: tuple[str, str, tuple[tuple[str, str], ...]] | None = None

    def all_versions(self) -> list[SchemaVersion]:
        """Every live and soft-deleted (subject, version), by subject then version."""
        return [self.versions[k] for k in sorted(self.versions)]

    def by_id(self, schema_id: int) -> SchemaVersion | None:
        """The schema registered under ``schema_id`` (also when it was deleted since)."""
        return self.ids.get(schema_id)

    def version(self, subject: str, version: int | None = None) -> SchemaVersion:
        """``version`` of ``subject``, or its latest version not deleted (``None``)."""
        if version is not None:
            found = self.versions.get((subject, version))
            if found is None:
                raise SchemaError(
                    f"schema registry {self.source}: subject {subject!r} has no version {version}"
                    f"; it has {self._listed(subject)}"
                )
            return found
        live = [v for (s, _), v in self.versions.items() if s == subject and not v.deleted]
        if not live:
            raise SchemaError(
                f"schema registry {self.source}: no live version of subject {subject!r}; "
                f"subjects: {', '.join(sorted({s for s, _ in self.versions})) or 'none'}"
            )
        return max(live, key=lambda v: v.version)

    def _listed(self, subject: str) -> str:
        found = sorted(v for s, v in self.versions if s == subject)
        return "versions " + ", ".join(map(str, found)) if found else "no versions"

    def resolve_references(self, schema: SchemaVersion) -> dict[str, SchemaVersion]:
        """Reference name -> referenced version, transitively, each after the ones it
        references (an Avro named type must be parsed before the schemas using it)."""
        out: dict[str, SchemaVersion] = {}
        visiting: set[tuple[str, int]] = set()

        def visit(refs: tuple[Reference, ...]) -> None:
            for ref in refs:
                if ref.name in out:
                    continue
                target = self.version(ref.subject, ref.version)
                key = (target.subject, target.version)
                if key in visiting:
                    raise SchemaError(
                        f"schema registry {self.source}: references of {schema.subject} "
                        f"version {schema.version} form a cycle through {ref.subject}"
                    )
                visiting.add(key)
                visit(target.references)
                visiting.discard(key)
                out[ref.name] = target

        visit(schema.references)
        return out


def replay(records: Iterable[tuple[bytes | None, bytes | None, str]]) -> Registry:
    """Replay ``_schemas`` records (key, value, where: for messages) in offset order."""
    registry = Registry()
    for key_bytes, value_bytes, where in records:
        if key_bytes is None:
            raise SchemaError(f"{where}: a _schemas record without a key")
        key = _json_object(key_bytes, where, "key")
        keytype = key.get("keytype")
        value = None if value_bytes is None else _json_object(value_bytes, where, "value")
        if keytype == "SCHEMA":
            _apply_schema(registry, key, value, where)
        elif keytype == "DELETE_SUBJECT":
            if value is not None:
                subject = _str(value, "subject", where)
                upto = _int(value, "version", where)
                for (s, v), entry in list(registry.versions.items()):
                    if s == subject and v <= upto:
                        registry.versions[(s, v)] = _soft_deleted(entry)
        elif keytype == "CLEAR_SUBJECT":
            if value is not None:
                subject = _str(value, "subject", where)
                for k, entry in list(registry.versions.items()):
                    if k[0] == subject and entry.deleted:
                        del registry.versions[k]
        elif keytype == "CONFIG":
            scope: str | None = key.get("subject")
            if value is None:
                registry.configs.pop(scope, None)
            else:
                registry.configs[scope] = value
        elif keytype == "MODE":
            scope = key.get("subject")
            if value is None:
                registry.modes.pop(scope, None)
            else:
                registry.modes[scope] = str(value.get("mode"))
        elif keytype in _STATELESS_KEYTYPES:
            continue
        else:
            raise SchemaError(f"{where}: unknown _schemas key type {keytype!r}")
    return registry


def _soft_deleted(entry: SchemaVersion) -> SchemaVersion:
    return SchemaVersion(
        entry.subject, entry.version, entry.id, entry.type, entry.schema, entry.references, True
    )


def _apply_schema(
    registry: Registry, key: dict[str, Any], value: dict[str, Any] | None, where: str
) -> None:
    subject = _str(key, "subject", where)
    version = _int(key, "version", where)
    if value is None:  # tombstone: hard delete
        registry.versions.pop((subject, version), None)
        return
    entry = parse_schema_value(value, where)
    if (entry.subject, entry.version) != (subject, version):
        raise SchemaError(
            f"{where}: key names {subject} version {version} but the value "
            f"{entry.subject} version {entry.version}"
        )
    known = registry.ids.get(entry.id)
    if known is not None and known.schema != entry.schema:
        # the registry refuses a schema under an id another schema holds (validateUpdate)
        log.warning(
            "%s: %s version %d reuses schema id %d of %s version %d with another schema: "
            "ignored, as Schema Registry ignores it",
            where, subject, version, entry.id, known.subject, known.version,
        )  # fmt: skip
        return
    registry.versions[(subject, version)] = entry
    registry.ids[entry.id] = entry


def parse_schema_value(value: dict[str, Any], where: str) -> SchemaVersion:
    """A SCHEMA value (as in ``_schemas`` and in the REST API's ``/schemas``) -> a version."""
    schema_type = value.get("schemaType") or "AVRO"
    if schema_type not in SCHEMA_TYPES:
        raise SchemaError(f"{where}: unknown schemaType {schema_type!r}")
    refs = value.get("references") or []
    if not isinstance(refs, list):
        raise SchemaError(f"{where}: references must be a list")
    references = tuple(
        Reference(_str(r, "name", where), _str(r, "subject", where), _int(r, "version", where))
        for r in refs
    )
    return SchemaVersion(
        _str(value, "subject", where),
        _int(value, "version", where),
        _int(value, "id", where),
        schema_type,
        _str(value, "schema", where),
        references,
        bool(value.get("deleted", False)),
    )


def _json_object(data: bytes, where: str, what: str) -> dict[str, Any]:
    try:
        parsed = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise SchemaError(f"{where}: the {what} is not JSON: {err}") from err
    if not isinstance(parsed, dict):
        raise SchemaError(f"{where}: the {what} is not a JSON object")
    return parsed


def _str(obj: Any, name: str, where: str) -> str:
    value = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(value, str):
        raise SchemaError(f"{where}: field {name!r} missing or not a string")
    return value


def _int(obj: Any, name: str, where: str) -> int:
    value = obj.get(name) if isinstance(obj, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(f"{where}: field {name!r} missing or not an integer")
    return value


# -- sources -----------------------------------------------------------------------------------


def is_url(source: str) -> bool:
    """Whether a ``schemaRegistry`` value names a live registry rather than a path."""
    return source.startswith(("http://", "https://"))


def read_archive(
    path: str | list[str], topic: str = DEFAULT_SCHEMAS_TOPIC, **storage: str
) -> Registry:
    """Replay the ``topic`` partition(s) of the log dir at ``path``."""
    from kafka_segments_ds.options import parse_read_options
    from kafka_segments_ds.planning import plan_scan
    from kafka_segments_ds.reader import read_task, read_tasks

    opts = parse_read_options({"subscribe": topic, **storage})
    plan = plan_scan(path, opts, split=False, read_records=read_task)

    def records() -> Iterator[tuple[bytes | None, bytes | None, str]]:
        columns = ("key", "value", "partition", "offset")
        for arrow_batch in read_tasks(plan.tasks, opts, columns):
            rows = arrow_batch.to_pydict()
            for key, value, partition, offset in zip(
                rows["key"], rows["value"], rows["partition"], rows["offset"], strict=True
            ):
                yield key, value, f"{topic}-{partition} offset {offset}"

    registry = replay(records())
    registry.source = f"{topic} in {path}"
    return registry


def fetch_registry(url: str) -> Registry:
    """A live registry's state through its REST API (``GET /schemas``, deleted ones too)."""
    base = url.rstrip("/")
    every = _get_json(f"{base}/schemas?deleted=true")
    live = _get_json(f"{base}/schemas")
    if not isinstance(every, list) or not isinstance(live, list):
        raise StorageError(f"{base}/schemas did not return a JSON list")
    live_keys = {(s.get("subject"), s.get("version")) for s in live if isinstance(s, dict)}
    registry = Registry(source=base)
    for item in every:
        if not isinstance(item, dict):
            raise StorageError(f"{base}/schemas: an entry is not a JSON object")
        entry = parse_schema_value(
            {**item, "deleted": (item.get("subject"), item.get("version")) not in live_keys},
            f"{base}/schemas",
        )
        registry.versions[(entry.subject, entry.version)] = entry
        registry.ids[entry.id] = entry
    return registry


def _get_json(url: str) -> Any:
    request = urllib.request.Request(
        url, headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise StorageError(f"GET {url}: HTTP {err.code} {err.reason}") from err
    except (urllib.error.URLError, OSError) as err:
        raise StorageError(f"GET {url}: {err}") from err
    except ValueError as err:
        raise StorageError(f"GET {url}: the answer is not JSON: {err}") from err


def load_registry(
    source: str | list[str], topic: str = DEFAULT_SCHEMAS_TOPIC, **storage: str
) -> Registry:
    """A registry from a URL (live) or a log dir path (its ``topic``)."""
    if isinstance(source, str) and is_url(source):
        return fetch_registry(source)
    return read_archive(source, topic, **storage)
