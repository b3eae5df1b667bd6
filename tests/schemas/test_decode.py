"""Decoding on read: Avro, Protobuf and JSON Schema values in Confluent's wire format, with the
writer's schema resolved to the topic's reader schema, and bad values by ``mode``."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_segments_ds import iter_batches, read_table
from kafka_segments_ds.errors import InvalidOptionError, SchemaError, UndecodableValueError
from tests.schemas.registry_records import schema_record, wire, write_records

fastavro = pytest.importorskip("fastavro", reason="needs the [schemas] extra")
pytest.importorskip("grpc_tools", reason="needs the [schemas] extra")

ROOT = Path(__file__).resolve().parents[2]
CONFLUENT = ROOT.parent / "shared" / "realworld" / "confluent-7.6-flink"

AVRO_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "int"}, {"name": "name", "type": "string"}],
}
AVRO_V2 = {  # id promoted to long, score added with a default
    "type": "record",
    "name": "User",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "score", "type": "double", "default": 0.5},
    ],
}
AVRO_V3 = {  # name removed, tags and an optional nested record added
    "type": "record",
    "name": "User",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "score", "type": "double", "default": 0.5},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {
            "name": "home",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Address",
                    "fields": [{"name": "city", "type": "string"}],
                },
            ],
            "default": None,
        },
    ],
}


def _avro(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def _avro_archive(log_dir: Path) -> None:
    write_records(
        log_dir,
        "_schemas",
        [
            schema_record("users-value", 1, 11, AVRO_V1),
            schema_record("users-value", 2, 12, AVRO_V2),
            schema_record("users-value", 3, 13, AVRO_V3),
        ],
    )
    write_records(
        log_dir,
        "users",
        [
            (b"k1", wire(11, _avro(AVRO_V1, {"id": 1, "name": "ann"}))),
            (b"k2", wire(12, _avro(AVRO_V2, {"id": 2**40, "name": "bob", "score": 2.5}))),
            (
                b"k3",
                wire(
                    13,
                    _avro(
                        AVRO_V3,
                        {"id": 3, "score": 1.0, "tags": ["a", "b"], "home": {"city": "Oslo"}},
                    ),
                ),
            ),
            (b"k4", None),  # a tombstone stays null
        ],
    )


def test_avro_values_resolve_to_the_latest_version(tmp_path: Path) -> None:
    _avro_archive(tmp_path)
    table = read_table(tmp_path, subscribe="users", valueFormat="avro")
    assert table.schema.field("value").type == pa.struct(
        [
            ("id", pa.int64()),
            ("score", pa.float64()),
            ("tags", pa.list_(pa.string())),
            ("home", pa.struct([("city", pa.string())])),
        ]
    )
    assert table.column("value").to_pylist() == [
        {"id": 1, "score": 0.5, "tags": [], "home": None},
        {"id": 2**40, "score": 2.5, "tags": [], "home": None},
        {"id": 3, "score": 1.0, "tags": ["a", "b"], "home": {"city": "Oslo"}},
        None,
    ]
    assert table.column("key").to_pylist() == [b"k1", b"k2", b"k3", b"k4"]


def test_avro_reader_version_and_raw_bytes(tmp_path: Path) -> None:
    _avro_archive(tmp_path)
    table = read_table(
        tmp_path,
        ["value", "offset"],
        subscribe="users",
        valueFormat="auto",
        valueSchemaVersion="2",
        includeRawValue=True,
        mode="DROPMALFORMED",  # version 3's value has no name, which version 2 needs
    )
    assert table.column_names == ["value", "rawValue", "offset"]
    rows = table.to_pylist()
    assert rows[0] == {
        "value": {"id": 1, "name": "ann", "score": 0.5},
        "rawValue": wire(11, _avro(AVRO_V1, {"id": 1, "name": "ann"})),
        "offset": 0,
    }


def test_avro_unresolvable_value_fails_or_drops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Read as version 2, the version-3 value lacks `name` (no default): FAILFAST names
    topic, partition, offset and schema id; DROPMALFORMED nulls it and counts it."""
    _avro_archive(tmp_path)
    with pytest.raises(UndecodableValueError, match=r"users-0 offset 2 \(schema id 13\)") as info:
        read_table(tmp_path, subscribe="users", valueFormat="avro", valueSchemaVersion=2)
    assert (info.value.topic, info.value.partition, info.value.offset) == ("users", 0, 2)
    assert info.value.schema_id == 13
    with caplog.at_level(logging.WARNING):
        table = read_table(
            tmp_path,
            subscribe="users",
            valueFormat="avro",
            valueSchemaVersion=2,
            mode="DROPMALFORMED",
        )
    assert table.column("value").to_pylist() == [
        {"id": 1, "name": "ann", "score": 0.5},
        {"id": 2**40, "name": "bob", "score": 2.5},
        None,
        None,
    ]
    summary = [r.getMessage() for r in caplog.records if "DROPMALFORMED" in r.getMessage()]
    assert len(summary) == 1
    assert "DROPMALFORMED 1 values not decoded" in summary[0]
    assert "offset 2 (schema id 13)" in summary[0]


def test_bad_framing_and_unknown_ids(tmp_path: Path) -> None:
    write_records(tmp_path, "_schemas", [schema_record("t-value", 1, 1, AVRO_V1)])
    good = wire(1, _avro(AVRO_V1, {"id": 7, "name": "x"}))
    write_records(
        tmp_path,
        "t",
        [
            (None, good),
            (None, b"plain text"),  # no magic byte
            (None, wire(99, b"\x02")),  # unknown id
            (None, good[:-1]),  # cut short
            (None, good + b"\x00"),  # bytes left over
        ],
    )
    with pytest.raises(
        UndecodableValueError, match=r"t-0 offset 1 \(no schema id\): value no Confluent"
    ):
        read_table(tmp_path, subscribe="t", valueFormat="avro")
    table = read_table(tmp_path, subscribe="t", valueFormat="avro", mode="DROPMALFORMED")
    assert table.column("value").to_pylist() == [{"id": 7, "name": "x"}, None, None, None, None]
    for offset, pattern in (
        (2, r"t-0 offset 2 \(schema id 99\): value does not decode: .*schema id 99 is not in"),
        (3, r"t-0 offset 3 \(schema id 1\): value does not decode"),
        (4, r"t-0 offset 4 \(schema id 1\): value does not decode: .*1 bytes left"),
    ):
        with pytest.raises(UndecodableValueError, match=pattern):
            read_table(
                tmp_path,
                subscribe="t",
                valueFormat="avro",
                startingOffsets=json.dumps({"t": {"0": offset}}),
            )


@pytest.mark.parametrize("bad_tail", [b"", b"\x7e", b"\x09"])  # cut, length 63, length -5
def test_a_string_read_past_the_last_value_is_malformed(tmp_path: Path, bad_tail: bytes) -> None:
    """fastavro reads a string's bytes without checking how many it got: a length running past
    the end of the column's last value (or a negative one, read to the end) must not pass as a
    shorter value."""
    write_records(tmp_path, "_schemas", [schema_record("t-value", 1, 1, AVRO_V1)])
    good = wire(1, _avro(AVRO_V1, {"id": 7, "name": "xyz"}))
    cut = good[:-4] + bad_tail if bad_tail else good[:-1]
    write_records(tmp_path, "t", [(None, good), (None, cut)])
    table = read_table(tmp_path, subscribe="t", valueFormat="avro", mode="DROPMALFORMED")
    assert table.column("value").to_pylist() == [{"id": 7, "name": "xyz"}, None]
    with pytest.raises(UndecodableValueError, match=r"t-0 offset 1 \(schema id 1\)"):
        read_table(tmp_path, subscribe="t", valueFormat="avro")


def test_options_are_checked(tmp_path: Path) -> None:
    _avro_archive(tmp_path)
    with pytest.raises(InvalidOptionError, match="valueformat must be one of raw, avro"):
        read_table(tmp_path, valueFormat="thrift")
    with pytest.raises(SchemaError, match="valueFormat=protobuf but the reader schema"):
        read_table(tmp_path, subscribe="users", valueFormat="protobuf")
    with pytest.raises(SchemaError, match="no live version of subject 'nope'"):
        read_table(tmp_path, subscribe="users", valueFormat="avro", valueSchemaSubject="nope")
    # raw stays bytes and reads no registry
    assert read_table(tmp_path, subscribe="users").column("value").type == pa.binary()


PROTO_V1 = """syntax = "proto3";
package shop;
message Meta { string source = 1; }
message Order {
  int64 id = 1;
  Customer customer = 2;
  repeated Line lines = 3;
  map<string, int32> counts = 4;
  Status status = 5;
  message Customer {
    string name = 1;
    Address address = 2;
    message Address { string city = 1; }
  }
  message Line { string sku = 1; uint32 qty = 2; }
  enum Status { NEW = 0; SHIPPED = 1; }
}
"""
PROTO_V2 = PROTO_V1.replace("Status status = 5;", "Status status = 5;\n  optional string note = 6;")


def _proto_classes(text: str) -> dict[str, Any]:
    from google.protobuf import message_factory

    from kafka_segments_ds.schemas.protobuf import compile_file

    file = compile_file(text, {}, "test")
    pool = file.pool
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
        for name in ("shop.Meta", "shop.Order", "shop.Order.Customer")
    }


def test_protobuf_nested_messages_and_indexes(tmp_path: Path) -> None:
    v1, v2 = _proto_classes(PROTO_V1), _proto_classes(PROTO_V2)
    order1 = v1["shop.Order"](
        id=5,
        customer={"name": "ann", "address": {"city": "Oslo"}},
        lines=[{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}],
        counts={"x": 3},
        status=1,
    )
    order2 = v2["shop.Order"](id=6, note="gift")
    customer = v1["shop.Order.Customer"](name="bo")
    write_records(
        tmp_path,
        "_schemas",
        [
            schema_record("orders-value", 1, 21, PROTO_V1, "PROTOBUF"),
            schema_record("orders-value", 2, 22, PROTO_V2, "PROTOBUF"),
        ],
    )
    write_records(
        tmp_path,
        "orders",
        [
            (None, wire(21, order1.SerializeToString(), [1])),  # Order: indexes [1]
            (None, wire(22, order2.SerializeToString(), [1])),
            (None, wire(21, v1["shop.Meta"](source="s").SerializeToString(), [0])),  # 1 byte: [0]
            # nested: [1, 1], Order's nested types being CountsEntry (the map's entry type,
            # declared with the field before Customer), Customer, Line
            (None, wire(21, customer.SerializeToString(), [1, 1])),
        ],
    )
    table = read_table(
        tmp_path, subscribe="orders", valueFormat="protobuf", valueSchemaMessage="shop.Order"
    )
    customer_type = pa.struct(
        [("name", pa.string()), ("address", pa.struct([("city", pa.string())]))]
    )
    assert table.schema.field("value").type == pa.struct(
        [
            ("id", pa.int64()),
            ("customer", customer_type),
            ("lines", pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.uint32())]))),
            ("counts", pa.map_(pa.string(), pa.int32())),
            ("status", pa.string()),
            ("note", pa.string()),
        ]
    )
    values = table.column("value").to_pylist()
    assert values[0] == {
        "id": 5,
        "customer": {"name": "ann", "address": {"city": "Oslo"}},
        "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}],
        "counts": [("x", 3)],
        "status": "SHIPPED",
        "note": None,  # version 1 had no note
    }
    assert values[1] == {
        "id": 6,
        "customer": None,
        "lines": [],
        "counts": [],
        "status": "NEW",
        "note": "gift",
    }
    # a Meta and a Customer, shaped as the reader's Order by field name: nothing in common
    assert values[2] == {
        "id": None,
        "customer": None,
        "lines": None,
        "counts": None,
        "status": None,
        "note": None,
    }
    assert values[3] == values[2]
    # the nested message as the reader message: the [1, 1] value decodes as itself
    nested = read_table(
        tmp_path,
        subscribe="orders",
        valueFormat="auto",
        valueSchemaMessage="shop.Order.Customer",
        startingOffsets=json.dumps({"orders": {"0": 3}}),
    )
    assert nested.schema.field("value").type == customer_type
    assert nested.column("value").to_pylist() == [{"name": "bo", "address": None}]


def test_protobuf_references_and_bad_indexes(tmp_path: Path) -> None:
    common = (
        'syntax = "proto3";\npackage common;\n'
        "message Money { int64 cents = 1; string currency = 2; }\n"
    )
    main = (
        'syntax = "proto3";\npackage shop;\nimport "common/money.proto";\n'
        "message Price { common.Money amount = 1; }\n"
    )
    write_records(
        tmp_path,
        "_schemas",
        [
            schema_record("money", 1, 31, common, "PROTOBUF"),
            schema_record(
                "prices-value",
                1,
                32,
                main,
                "PROTOBUF",
                [{"name": "common/money.proto", "subject": "money", "version": 1}],
            ),
        ],
    )
    # Price{amount{cents: 250, currency: "EUR"}} encoded by hand
    money = b"\x08\xfa\x01\x12\x03EUR"
    price = b"\x0a" + bytes([len(money)]) + money
    write_records(
        tmp_path,
        "prices",
        [(None, wire(32, price, [0])), (None, wire(32, price, [5]))],
    )
    table = read_table(tmp_path, subscribe="prices", valueFormat="protobuf", mode="DROPMALFORMED")
    assert table.column("value").to_pylist() == [
        {"amount": {"cents": 250, "currency": "EUR"}},
        None,
    ]
    with pytest.raises(
        UndecodableValueError, match=r"prices-0 offset 1 \(schema id 32\).*message index \[5\]"
    ):
        read_table(tmp_path, subscribe="prices", valueFormat="protobuf")


JSON_V1 = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
}
JSON_V2 = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "address": {"$ref": "#/definitions/Address"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "extra": {},
    },
    "definitions": {
        "Address": {"type": "object", "properties": {"city": {"type": ["string", "null"]}}}
    },
}


def test_json_schema_values(tmp_path: Path) -> None:
    write_records(
        tmp_path,
        "_schemas",
        [
            schema_record("people-value", 1, 41, JSON_V1, "JSON"),
            schema_record("people-value", 2, 42, JSON_V2, "JSON"),
        ],
    )
    write_records(
        tmp_path,
        "people",
        [
            (None, wire(41, b'{"id": 1, "name": "ann"}')),
            (
                None,
                wire(42, b'{"id": 2, "address": {"city": "Rome"}, "tags": ["x"], "extra": [1]}'),
            ),
            (None, wire(42, b'{"id": "three"}')),  # not the reader's type
            (None, wire(42, b'{"id": 5, "name": 6}')),  # nor this
            (None, wire(42, b'{"id": 4,')),  # not JSON
        ],
    )
    table = read_table(tmp_path, subscribe="people", valueFormat="json", mode="DROPMALFORMED")
    assert table.schema.field("value").type == pa.struct(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("address", pa.struct([("city", pa.string())])),
            ("tags", pa.list_(pa.string())),
            ("extra", pa.string()),
        ]
    )
    assert table.column("value").to_pylist() == [
        {"id": 1, "name": "ann", "address": None, "tags": None, "extra": None},
        {"id": 2, "name": None, "address": {"city": "Rome"}, "tags": ["x"], "extra": "[1]"},
        None,
        None,
        None,
    ]
    with pytest.raises(
        UndecodableValueError, match=r"people-0 offset 2 \(schema id 42\): value does not fit"
    ):
        read_table(tmp_path, subscribe="people", valueFormat="json")


def test_keys_and_iter_batches(tmp_path: Path) -> None:
    key_schema = {"type": "record", "name": "K", "fields": [{"name": "k", "type": "string"}]}
    write_records(
        tmp_path,
        "_schemas",
        [
            schema_record("users-key", 1, 51, key_schema),
            schema_record("users-value", 1, 11, AVRO_V1),
        ],
    )
    write_records(
        tmp_path,
        "users",
        [
            (
                wire(51, _avro(key_schema, {"k": "a"})),
                wire(11, _avro(AVRO_V1, {"id": 1, "name": "n"})),
            )
        ],
    )
    (batch,) = iter_batches(
        tmp_path, ["key", "value"], subscribe="users", keyFormat="avro", includeRawKey="true"
    )
    assert batch.schema.names == ["key", "rawKey", "value"]
    assert batch.column("key").to_pylist() == [{"k": "a"}]
    assert batch.column("value").type == pa.binary()


def test_topics_with_different_reader_schemas(tmp_path: Path) -> None:
    _avro_archive(tmp_path)
    write_records(tmp_path, "_schemas", [schema_record("other-value", 1, 61, AVRO_V1)])
    write_records(tmp_path, "other", [(None, wire(61, _avro(AVRO_V1, {"id": 1, "name": "a"})))])
    with pytest.raises(InvalidOptionError, match="different value reader schemas"):
        read_table(tmp_path, subscribe="users,other", valueFormat="avro")
    table = read_table(
        tmp_path, subscribe="users,other", valueFormat="avro", valueSchemaSubject="users-value"
    )
    assert table.num_rows == 5


def test_registry_from_another_path(tmp_path: Path) -> None:
    _avro_archive(tmp_path / "archive")
    write_records(
        tmp_path / "data", "users", [(None, wire(11, _avro(AVRO_V1, {"id": 9, "name": "z"})))]
    )
    table = read_table(
        tmp_path / "data" / "users-0", valueFormat="avro", schemaRegistry=str(tmp_path / "archive")
    )
    assert table.column("value").to_pylist() == [{"id": 9, "score": 0.5, "tags": [], "home": None}]
    with pytest.raises(SchemaError, match="no _schemas topic"):
        read_table(tmp_path / "data", valueFormat="avro")


def test_the_registry_is_looked_for_in_the_log_dir_only(tmp_path: Path) -> None:
    """A partition directory or a segment finds ``_schemas`` in its log dir; a log dir is the
    only place looked in: its parent (here holding a name that is not UTF-8) is never listed."""
    _avro_archive(tmp_path / "archive")
    with open(os.path.join(os.fsencode(tmp_path), b"not-utf8-\xff"), "wb"):
        pass
    partition = tmp_path / "archive" / "users-0"
    segment = sorted(partition.glob("*.log"))[0]
    expected = read_table(tmp_path / "archive", subscribe="users", valueFormat="avro")
    for path in (partition, segment):
        assert read_table(path, valueFormat="avro").column("value") == expected.column("value")
    write_records(tmp_path / "data", "users", [(None, wire(11, b""))])
    with pytest.raises(SchemaError, match=r"no _schemas topic .* in [^ ]*/data: set"):
        read_table(tmp_path / "data", valueFormat="avro")


@pytest.mark.skipif(not CONFLUENT.is_dir(), reason="../shared/realworld is absent")
def test_the_real_confluent_promotions() -> None:
    """promotions-0 (Flink's upsert-kafka sink): 29 records; value schema id 8
    ({promotion_name: ["null","string"]}); 8 tombstones; read from the records' bytes."""
    table = read_table(
        CONFLUENT / "promotions-0", ["offset", "value"], valueFormat="avro", includeRawValue=True
    )
    assert table.schema.field("value").type == pa.struct([("promotion_name", pa.string())])
    rows = table.to_pylist()
    assert len(rows) == 29
    assert rows[0] == {
        "offset": 0,
        "value": {"promotion_name": "bundle_offer"},
        "rawValue": b"\x00\x00\x00\x00\x08\x02\x18bundle_offer",
    }
    names = [None if r["value"] is None else r["value"]["promotion_name"] for r in rows]
    assert names.count("bundle_offer") == 19
    assert names.count("next_free") == 2
    assert names.count(None) == 8
    assert all((r["value"] is None) == (r["rawValue"] is None) for r in rows)


def test_without_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without fastavro / protobuf: an error naming the [schemas] extra, not an ImportError."""
    import pickle

    from kafka_segments_ds.errors import MissingCodecError
    from kafka_segments_ds.schemas import column

    _avro_archive(tmp_path)
    monkeypatch.setattr(column, "_COLUMN_DECODERS", {})
    monkeypatch.setitem(sys.modules, "fastavro", None)
    monkeypatch.setitem(sys.modules, "fastavro.schema", None)
    with pytest.raises(MissingCodecError) as info:
        read_table(tmp_path, subscribe="users", valueFormat="avro")
    assert str(info.value) == (
        "decoding Avro values (fastavro) needs the 'kafka-segments-ds[schemas]' package: "
        "pip install kafka-segments-ds[schemas]"
    )
    assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)
    monkeypatch.setitem(sys.modules, "google.protobuf", None)
    with pytest.raises(MissingCodecError, match=r"decoding Protobuf values .*\[schemas\]"):
        from kafka_segments_ds.schemas.protobuf import compile_file

        compile_file(PROTO_V1, {}, "test")


def test_values_are_not_decoded_where_the_log_end_is_asked_of_the_reader(tmp_path: Path) -> None:
    """A checksum-valid entry whose offsets go back ends the log: the range check and a
    stream's latest offset ask the reader what it returns past it (ranges.reader_next_offset),
    offsets only. That read used to decode values too, without the topic or the bound
    registry: a read with valueFormat=avro from offset 3 failed at planning ("the records'
    topic is unknown"), where it returns offset 3."""
    from kafka_segments_ds.options import parse_stream_options
    from kafka_segments_ds.schemas.config import bind_registry
    from kafka_segments_ds.streaming.planner import StreamPlanner

    _avro_archive(tmp_path)
    log = next((tmp_path / "users-0").glob("*.log"))
    data = log.read_bytes()
    first = data[: 12 + int.from_bytes(data[8:12], "big")]
    with log.open("ab") as f:
        f.write(first)  # offsets that go back: dropped whole (DROPMALFORMED)
    got = read_table(
        tmp_path,
        subscribe="users",
        valueFormat="avro",
        mode="DROPMALFORMED",
        startingOffsets='{"users":{"0":3}}',
    )
    assert got.column("offset").to_pylist() == [3]
    assert got.column("value").to_pylist() == [None]
    options, limits = parse_stream_options(
        {"subscribe": "users", "valueFormat": "avro", "mode": "DROPMALFORMED"}
    )
    planner = StreamPlanner([str(tmp_path)], bind_registry(options, str(tmp_path)), limits)
    assert planner.next_offsets({("users", 0): 0}) == {("users", 0): 4}
