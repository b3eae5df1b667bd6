"""Every Avro type and logical type -> its Arrow type, values as fastavro reads them."""

from __future__ import annotations

import datetime
import decimal
import io
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.errors import SchemaError
from tests.schemas.registry_records import schema_record, wire, write_records

fastavro = pytest.importorskip("fastavro", reason="needs the [schemas] extra")

SCHEMA = {
    "type": "record",
    "name": "All",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "f", "type": "float"},
        {"name": "raw", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {
            "name": "dec",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "either", "type": ["null", "int", "string"]},
        {"name": "colors", "type": {"type": "array", "items": "Color"}},
    ],
}
UID = uuid.UUID("12345678-1234-5678-1234-567812345678")
VALUE: dict[str, Any] = {
    "b": True,
    "f": 1.5,
    "raw": b"\x00\x01",
    "e": "GREEN",
    "fx": b"abcd",
    "d": datetime.date(2024, 2, 29),
    "tm": datetime.time(1, 2, 3, 4000),
    "tu": datetime.time(1, 2, 3, 5),
    "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc),
    "lts": datetime.datetime(2024, 1, 2, 3, 4, 5, 7000),
    "dec": decimal.Decimal("1234567.89"),
    "id": str(UID),
    "either": "text",
    "colors": ["RED", "GREEN"],
}


def _write(log_dir: Path, schema: dict[str, Any], values: list[dict[str, Any]]) -> None:
    parsed = fastavro.parse_schema(schema)
    data = []
    for value in values:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, value)
        data.append((None, wire(1, out.getvalue())))
    write_records(log_dir, "_schemas", [schema_record("t-value", 1, 1, schema)])
    write_records(log_dir, "t", data)


def test_every_type(tmp_path: Path) -> None:
    _write(tmp_path, SCHEMA, [VALUE, {**VALUE, "either": 5}, {**VALUE, "either": None}])
    table = read_table(tmp_path, subscribe="t", valueFormat="avro")
    assert table.schema.field("value").type == pa.struct(
        [
            ("b", pa.bool_()),
            ("f", pa.float32()),
            ("raw", pa.binary()),
            ("e", pa.string()),
            ("fx", pa.binary(4)),
            ("d", pa.date32()),
            ("tm", pa.time32("ms")),
            ("tu", pa.time64("us")),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("lts", pa.timestamp("ms")),
            ("dec", pa.decimal128(9, 2)),
            ("id", pa.string()),
            ("either", pa.string()),  # several non-null branches: the value as JSON
            ("colors", pa.list_(pa.string())),
        ]
    )
    rows = table.column("value").to_pylist()
    assert rows[0] == {**VALUE, "either": '"text"'}
    assert [r["either"] for r in rows] == ['"text"', "5", None]


def test_a_recursive_record_is_refused(tmp_path: Path) -> None:
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"], "default": None}],
    }
    _write(tmp_path, node, [{"next": None}])
    with pytest.raises(SchemaError, match="Avro record Node is recursive"):
        read_table(tmp_path, subscribe="t", valueFormat="avro")
