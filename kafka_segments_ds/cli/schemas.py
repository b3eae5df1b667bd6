"""``kafka-segments schemas``: the Schema Registry schemas archived in a log dir's ``_schemas``."""

from __future__ import annotations

import argparse
import json
import sys

from kafka_segments_ds.cli.common import write_lines
from kafka_segments_ds.schemas import DEFAULT_SCHEMAS_TOPIC
from kafka_segments_ds.schemas.registry import SchemaVersion, load_registry

NAME = "schemas"
SUMMARY = "list the Schema Registry schemas archived in a log dir"
DESCRIPTION = (
    "Replay the schema registry's topic (_schemas) of a log dir the way Schema Registry does and "
    "print every subject version: subject, version, id, type, whether it is soft-deleted, and its "
    "references. A hard-deleted version (a tombstone) is not shown. PATH may also be the URL of "
    "a live registry (http:// or https://)."
)
_HEADER = ("SUBJECT", "VERSION", "ID", "TYPE", "DELETED", "REFERENCES")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schemas-topic",
        default=DEFAULT_SCHEMAS_TOPIC,
        metavar="TOPIC",
        help=f"the registry's topic (default {DEFAULT_SCHEMAS_TOPIC})",
    )
    parser.add_argument("--subject", metavar="SUBJECT", help="only this subject")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per version, with the schema text"
    )


def run(args: argparse.Namespace) -> int:
    for path in args.paths:
        registry = load_registry(path, args.schemas_topic, **args.option)
        versions = [
            v for v in registry.all_versions() if args.subject is None or v.subject == args.subject
        ]
        if args.json:
            write_lines([json.dumps(as_json(v)) for v in versions], sys.stdout)
        else:
            write_lines(table(versions), sys.stdout)
    return 0


def as_json(version: SchemaVersion) -> dict[str, object]:
    """One version as the JSON ``--json`` prints (the registry's own field names)."""
    return {
        "subject": version.subject,
        "version": version.version,
        "id": version.id,
        "schemaType": version.type,
        "schema": version.schema,
        "references": [
            {"name": r.name, "subject": r.subject, "version": r.version} for r in version.references
        ],
        "deleted": version.deleted,
    }


def table(versions: list[SchemaVersion]) -> list[str]:
    """Aligned rows, one per version, under a header."""
    rows = [_HEADER] + [
        (
            v.subject,
            str(v.version),
            str(v.id),
            v.type,
            "yes" if v.deleted else "no",
            ", ".join(f"{r.name}={r.subject}/{r.version}" for r in v.references) or "-",
        )
        for v in versions
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
