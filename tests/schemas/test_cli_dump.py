"""``kafka-segments dump --value avro|protobuf|json|auto``: decoded values as JSON."""

from __future__ import annotations

import base64
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from kafka_segments_ds.cli import main
from tests.schemas.registry_records import schema_record, wire, write_records

fastavro = pytest.importorskip("fastavro", reason="needs the [schemas] extra")

ROOT = Path(__file__).resolve().parents[2]
CONFLUENT = ROOT.parent / "shared" / "realworld" / "confluent-7.6-flink"
SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "blob", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "attrs", "type": {"type": "map", "values": "int"}},
    ],
}


def _dump(*argv: str) -> tuple[int, list[dict[str, object]]]:
    out = io.StringIO()
    with redirect_stdout(out):
        status = main(["dump", *argv, "--quiet"])
    return status, [json.loads(line) for line in out.getvalue().splitlines()]


def _archive(log_dir: Path) -> None:
    value = {"id": 7, "blob": b"\x00\xff", "at": 1700000000123, "attrs": {"a": 1}}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), value)
    write_records(log_dir, "_schemas", [schema_record("events-value", 1, 3, SCHEMA)])
    write_records(
        log_dir,
        "events",
        [(b"k", wire(3, out.getvalue())), (b"t", None), (b"x", b"not framed")],
    )


def test_dump_decodes_avro(tmp_path: Path) -> None:
    _archive(tmp_path)
    for rendering in ("avro", "auto"):
        status, rows = _dump(str(tmp_path / "events-0"), "--value", rendering, "--to-offset", "2")
        assert status == 0
        assert [(r["key"], r["value"], r["offset"]) for r in rows] == [
            (
                "k",
                {
                    "id": 7,
                    "blob": base64.b64encode(b"\x00\xff").decode(),
                    "at": "2023-11-14T22:13:20.123000+00:00",
                    "attrs": {"a": 1},
                },
                0,
            ),
            ("t", None, 1),
        ]


def test_dump_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _archive(tmp_path)
    assert main(["dump", str(tmp_path / "events-0"), "--value", "avro"]) == 2
    assert "events-0 offset 2 (no schema id): value no Confluent wire format" in (
        capsys.readouterr().err
    )
    status, rows = _dump(str(tmp_path / "events-0"), "--value", "avro", "--mode", "DROPMALFORMED")
    assert status == 0
    assert [r["value"] is None for r in rows] == [False, True, True]
    # the whole log dir: _schemas itself has no reader schema (subject _schemas-value)
    assert main(["dump", str(tmp_path), "--value", "avro"]) == 2
    assert "no live version of subject '_schemas-value'" in capsys.readouterr().err


def test_dump_json_schema_values(tmp_path: Path) -> None:
    """--value json shows the JSON after the wire-format header without a registry; auto
    decodes with the registry's JSON Schema."""
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    write_records(tmp_path, "_schemas", [schema_record("j-value", 1, 9, schema, "JSON")])
    write_records(tmp_path, "j", [(None, wire(9, b'{"n": 5, "more": true}'))])
    status, rows = _dump(str(tmp_path / "j-0"), "--value", "json")
    assert (status, rows[0]["value"]) == (0, {"n": 5, "more": True})
    status, rows = _dump(str(tmp_path / "j-0"), "--value", "auto")
    assert (status, rows[0]["value"]) == (0, {"n": 5})


@pytest.mark.skipif(not CONFLUENT.is_dir(), reason="../shared/realworld is absent")
def test_dump_the_real_promotions() -> None:
    status, rows = _dump(str(CONFLUENT / "promotions-0"), "--value", "auto", "--limit", "3")
    assert status == 0
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (0, "tbalderston7m@webs.com", {"promotion_name": "bundle_offer"}),
        (1, "tbalderston7m@webs.com", None),
        (2, "tbalderston7m@webs.com", {"promotion_name": "bundle_offer"}),
    ]
