"""spark.read with valueFormat: the Spark schema comes from the reader schema when the query is
planned, and the rows are those of read_table."""

from __future__ import annotations

import datetime
import io
from pathlib import Path

import pytest

from tests.schemas.registry_records import schema_record, wire, write_records

fastavro = pytest.importorskip("fastavro", reason="needs the [schemas] extra")
pytest.importorskip("grpc_tools", reason="needs the [schemas] extra")

AVRO = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "map", "values": "int"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
PROTO = 'syntax = "proto3";\nmessage Count { uint32 n = 1; uint64 big = 2; }\n'


def _avro(value: dict[str, object]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO), value)
    return out.getvalue()


def test_spark_reads_decoded_values(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_records(
        tmp_path,
        "_schemas",
        [
            schema_record("events-value", 1, 1, AVRO),
            schema_record("counts-value", 1, 2, PROTO, "PROTOBUF"),
        ],
    )
    write_records(
        tmp_path,
        "events",
        [
            (b"a", wire(1, _avro({"id": 1, "at": 1700000000123, "tags": {"x": 2}, "note": "n"}))),
            (b"b", None),
            (b"c", b"junk"),
        ],
    )
    # Count{n: 7, big: 2**64 - 1}: field 1 varint 7, field 2 varint of ten bytes
    big = b"\xff" * 9 + b"\x01"
    write_records(tmp_path, "counts", [(None, wire(2, b"\x08\x07\x10" + big, [0]))])
    df = (
        spark.read.format("kafkasegments")
        .option("valueFormat", "avro")
        .option("subscribe", "events")
        .option("includeRawValue", "true")
        .option("mode", "DROPMALFORMED")
        .load(str(tmp_path))
    )
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,at:timestamp,tags:map<string,int>,note:string>"
    )
    assert df.schema["rawValue"].dataType.simpleString() == "binary"
    rows = sorted(df.select("offset", "value", "rawValue").collect(), key=lambda r: r.offset)
    first = rows[0].value.asDict()
    assert first["id"] == 1 and first["tags"] == {"x": 2} and first["note"] == "n"
    assert first["at"].astimezone(datetime.timezone.utc) == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.timezone.utc
    )
    assert [r.value is None for r in rows] == [False, True, True]
    assert rows[2].rawValue == b"junk"
    counts = (
        spark.read.format("kafkasegments")
        .option("valueFormat", "auto")
        .option("subscribe", "counts")
        .load(str(tmp_path))
    )
    # Spark has no unsigned types: uint32 -> bigint, uint64 -> decimal(20,0)
    assert counts.schema["value"].dataType.simpleString() == "struct<n:bigint,big:decimal(20,0)>"
    (row,) = counts.select("value").collect()
    assert (row.value.n, int(row.value.big)) == (7, 2**64 - 1)
