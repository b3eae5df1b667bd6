"""The registry replayed from ``_schemas`` (written as Schema Registry writes it), fetched from a
live registry's REST API, and read from the real Confluent Platform 7.6 log dir."""

from __future__ import annotations

import importlib
import io
import json
import threading
from collections.abc import Iterator
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

import kafka_segments_ds
from kafka_segments_ds.cli import main
from kafka_segments_ds.errors import SchemaError, StorageError
from kafka_segments_ds.schemas.registry import Reference, SchemaVersion, read_archive, replay
from tests.schemas.registry_records import (
    clear_subject,
    config,
    delete_subject,
    noop,
    schema_record,
    tombstone,
    wire,
    write_records,
)

ROOT = Path(__file__).resolve().parents[2]
CONFLUENT = ROOT.parent / "shared" / "realworld" / "confluent-7.6-flink"
AVRO_V1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
PROTO = 'syntax = "proto3";\nmessage M { int32 a = 1; }\n'


def _history() -> list[tuple[bytes, bytes | None]]:
    return [
        noop(),
        config(None, "BACKWARD"),
        schema_record("a-value", 1, 1, AVRO_V1),
        schema_record("a-value", 2, 2, AVRO_V1 | {"name": "R2"}),
        schema_record("p-value", 1, 3, PROTO, "PROTOBUF"),
        schema_record(
            "q-value",
            1,
            4,
            'syntax = "proto3";\nimport "m.proto";\nmessage Q { M m = 1; }\n',
            "PROTOBUF",
            [{"name": "m.proto", "subject": "p-value", "version": 1}],
        ),
        schema_record("j-value", 1, 5, {"type": "object"}, "JSON"),
        schema_record("j-value", 2, 6, {"type": "object", "title": "x"}, "JSON"),
        # soft delete of j-value version 1 (the registry rewrites the record with deleted=true)
        schema_record("j-value", 1, 5, {"type": "object"}, "JSON", deleted=True),
        # a subject deleted (soft, all versions up to 2), then cleared (hard)
        schema_record("gone-value", 1, 7, AVRO_V1),
        schema_record("gone-value", 2, 8, AVRO_V1 | {"name": "G"}),
        delete_subject("gone-value", 2),
        clear_subject("gone-value"),
        # a version hard-deleted by its tombstone
        schema_record("t-value", 1, 9, AVRO_V1),
        tombstone("t-value", 1),
        # a subject soft-deleted as a whole and left so
        schema_record("soft-value", 1, 10, AVRO_V1),
        delete_subject("soft-value", 1),
        noop(),
    ]


def _expected() -> list[tuple[str, int, int, str, bool]]:
    return [
        ("a-value", 1, 1, "AVRO", False),
        ("a-value", 2, 2, "AVRO", False),
        ("j-value", 1, 5, "JSON", True),
        ("j-value", 2, 6, "JSON", False),
        ("p-value", 1, 3, "PROTOBUF", False),
        ("q-value", 1, 4, "PROTOBUF", False),
        ("soft-value", 1, 10, "AVRO", True),
    ]


def _summary(versions: list[SchemaVersion]) -> list[tuple[str, int, int, str, bool]]:
    return [(v.subject, v.version, v.id, v.type, v.deleted) for v in versions]


def test_replay_follows_schema_registry() -> None:
    records = [(k, v, f"offset {i}") for i, (k, v) in enumerate(_history())]
    registry = replay(records)
    assert _summary(registry.all_versions()) == _expected()
    q = registry.version("q-value")
    assert q.references == (Reference("m.proto", "p-value", 1),)
    assert registry.resolve_references(q) == {"m.proto": registry.version("p-value", 1)}
    assert registry.version("a-value").version == 2  # latest
    assert registry.version("j-value").version == 2  # the latest not deleted
    assert registry.configs == {None: {"compatibilityLevel": "BACKWARD"}}
    # hard-deleted ids still decode the data written with them
    assert registry.by_id(9) is not None and registry.by_id(9).subject == "t-value"
    assert registry.by_id(8) is not None and registry.by_id(99) is None
    with pytest.raises(SchemaError, match="no live version of subject 'soft-value'"):
        registry.version("soft-value")
    with pytest.raises(SchemaError, match="has no version 3; it has versions 1, 2"):
        registry.version("a-value", 3)


def test_a_reused_id_with_another_schema_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    records = [
        schema_record("a-value", 1, 1, AVRO_V1),
        schema_record("b-value", 1, 1, AVRO_V1 | {"name": "Other"}),  # id 1 again: refused
        schema_record("c-value", 1, 1, AVRO_V1),  # the same schema under its id: kept
    ]
    registry = replay([(k, v, f"offset {i}") for i, (k, v) in enumerate(records)])
    assert _summary(registry.all_versions()) == [
        ("a-value", 1, 1, "AVRO", False),
        ("c-value", 1, 1, "AVRO", False),
    ]
    assert "offset 1: b-value version 1 reuses schema id 1 of a-value version 1" in caplog.text


def test_bad_records_name_the_offset() -> None:
    with pytest.raises(SchemaError, match=r"offset 3: the key is not JSON"):
        replay([(b"{nope", b"{}", "offset 3")])
    with pytest.raises(SchemaError, match="offset 4: unknown _schemas key type 'WHAT'"):
        replay([(b'{"keytype":"WHAT"}', None, "offset 4")])
    key, value = schema_record("x", 1, 1, AVRO_V1)
    with pytest.raises(
        SchemaError, match="offset 5: key names x version 2 but the value x version 1"
    ):
        replay([(key.replace(b'"version":1', b'"version":2'), value, "offset 5")])
    with pytest.raises(SchemaError, match="offset 6: field 'id' missing"):
        replay([(key, value.replace(b'"id":1,', b""), "offset 6")])


def test_schemas_reads_the_archive(tmp_path: Path) -> None:
    write_records(tmp_path, "_schemas", _history())
    write_records(tmp_path, "other", [(b"k", b"v")])
    # the public function, before and after the package kafka_segments_ds.schemas is imported
    assert _summary(kafka_segments_ds.schemas(tmp_path)) == _expected()
    importlib.import_module("kafka_segments_ds.schemas.decode")
    assert _summary(kafka_segments_ds.schemas(str(tmp_path))) == _expected()
    write_records(tmp_path, "_registry", _history()[:3])
    got = kafka_segments_ds.schemas(tmp_path, schemasTopic="_registry")
    assert _summary(got) == [("a-value", 1, 1, "AVRO", False)]
    assert json.loads(got[0].schema) == AVRO_V1


def test_cli_schemas(tmp_path: Path) -> None:
    write_records(tmp_path, "_schemas", _history())
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["schemas", str(tmp_path), "--quiet"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["SUBJECT", "VERSION", "ID", "TYPE", "DELETED", "REFERENCES"]
    assert [line.split()[:5] for line in lines[1:]] == [
        [s, str(v), str(i), t, "yes" if d else "no"] for s, v, i, t, d in _expected()
    ]
    assert lines[6].split()[5] == "m.proto=p-value/1"
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["schemas", str(tmp_path), "--json", "--subject", "q-value"]) == 0
    (only,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert only == {
        "subject": "q-value",
        "version": 1,
        "id": 4,
        "schemaType": "PROTOBUF",
        "schema": 'syntax = "proto3";\nimport "m.proto";\nmessage Q { M m = 1; }\n',
        "references": [{"name": "m.proto", "subject": "p-value", "version": 1}],
        "deleted": False,
    }


def test_cli_schemas_without_registry_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_records(tmp_path, "other", [(b"k", b"v")])
    assert main(["schemas", str(tmp_path)]) == 2
    assert "_schemas" in capsys.readouterr().err


class _Registry(BaseHTTPRequestHandler):
    """Schema Registry's GET /schemas (live versions) and /schemas?deleted=true (all)."""

    def do_GET(self) -> None:
        live = [
            {"subject": "a-value", "version": 1, "id": 1, "schema": json.dumps(AVRO_V1)},
            {
                "subject": "p-value",
                "version": 1,
                "id": 3,
                "schemaType": "PROTOBUF",
                "schema": PROTO,
            },
        ]
        deleted = [{"subject": "a-value", "version": 2, "id": 2, "schema": json.dumps(AVRO_V1)}]
        if self.path == "/schemas":
            body = live
        elif self.path == "/schemas?deleted=true":
            body = live + deleted
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def registry_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_live_registry(registry_url: str) -> None:
    got = kafka_segments_ds.schemas(registry_url)
    assert _summary(got) == [
        ("a-value", 1, 1, "AVRO", False),
        ("a-value", 2, 2, "AVRO", True),
        ("p-value", 1, 3, "PROTOBUF", False),
    ]
    with pytest.raises(StorageError, match="HTTP 404"):
        kafka_segments_ds.schemas(registry_url + "/nowhere")


@pytest.mark.skipif(not CONFLUENT.is_dir(), reason="../shared/realworld is absent")
def test_the_real_confluent_registry() -> None:
    """Confluent Platform 7.6's _schemas: 2 NOOP records, then 8 subjects (Avro, version 1,
    ids 1 to 8 in registration order), as read from the records with `strings`."""
    got = kafka_segments_ds.schemas(CONFLUENT)
    assert _summary(got) == [
        ("customers-value", 1, 1, "AVRO", False),
        ("customers_keyed-value", 1, 4, "AVRO", False),
        ("loyalty_levels-value", 1, 7, "AVRO", False),
        ("order_customer_product-value", 1, 6, "AVRO", False),
        ("orders-value", 1, 2, "AVRO", False),
        ("products-value", 1, 3, "AVRO", False),
        ("products_keyed-value", 1, 5, "AVRO", False),
        ("promotions-value", 1, 8, "AVRO", False),
    ]
    registry = read_archive(str(CONFLUENT))
    promotions = json.loads(registry.version("promotions-value").schema)
    assert promotions["fields"] == [
        {"name": "promotion_name", "type": ["null", "string"], "default": None}
    ]
    assert all(v.references == () for v in got)


def test_decoding_with_a_live_registry(registry_url: str, tmp_path: Path) -> None:
    """schemaRegistry=<URL>: the schemas come from the registry's REST API, not the archive."""
    fastavro = pytest.importorskip("fastavro", reason="needs the [schemas] extra")
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_V1), {"a": 42})
    write_records(tmp_path, "a", [(None, wire(1, out.getvalue()))])
    table = kafka_segments_ds.read_table(
        tmp_path, subscribe="a", valueFormat="auto", schemaRegistry=registry_url
    )
    assert table.column("value").to_pylist() == [{"a": 42}]
    with pytest.raises(StorageError, match="HTTP 404"):
        kafka_segments_ds.read_table(
            tmp_path, subscribe="a", valueFormat="auto", schemaRegistry=registry_url + "/x"
        )
