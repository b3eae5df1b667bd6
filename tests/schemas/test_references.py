"""Avro schemas referencing other subjects' named types, and a registry that grows while a
process reads (the driver binds a fresh one per read; an executor reloads on an unknown id)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.errors import SchemaError
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.schemas.decode import TaskDecoder, bind_registry, registry_of
from tests.schemas.registry_records import schema_record, wire, write_records

fastavro = pytest.importorskip("fastavro", reason="needs the [schemas] extra")

CITY = {
    "type": "record",
    "name": "City",
    "namespace": "geo",
    "fields": [{"name": "n", "type": "string"}],
}
ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "geo",
    "fields": [{"name": "city", "type": "geo.City"}],
}
PERSON = {
    "type": "record",
    "name": "Person",
    "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "geo.Address"}],
}
SIMPLE = {"type": "record", "name": "S", "fields": [{"name": "a", "type": "int"}]}


def _avro(schema: Any, value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def test_avro_references_are_parsed_dependencies_first(tmp_path: Path) -> None:
    """Person -> Address -> City: the registry lists only Person's direct reference."""
    write_records(
        tmp_path,
        "_schemas",
        [
            schema_record("city", 1, 1, CITY),
            schema_record(
                "address",
                1,
                2,
                ADDRESS,
                references=[{"name": "geo.City", "subject": "city", "version": 1}],
            ),
            schema_record(
                "people-value",
                1,
                3,
                PERSON,
                references=[{"name": "geo.Address", "subject": "address", "version": 1}],
            ),
        ],
    )
    whole = {
        **PERSON,
        "fields": [
            PERSON["fields"][0],
            {"name": "home", "type": {**ADDRESS, "fields": [{"name": "city", "type": CITY}]}},
        ],
    }
    value = {"name": "ann", "home": {"city": {"n": "Oslo"}}}
    write_records(tmp_path, "people", [(None, wire(3, _avro(whole, value)))])
    table = read_table(tmp_path, subscribe="people", valueFormat="avro")
    assert table.column("value").to_pylist() == [value]


def test_reference_cycles_are_refused(tmp_path: Path) -> None:
    write_records(
        tmp_path,
        "_schemas",
        [
            schema_record(
                "a", 1, 1, SIMPLE, references=[{"name": "x", "subject": "b", "version": 1}]
            ),
            schema_record(
                "b", 1, 2, SIMPLE, references=[{"name": "y", "subject": "a", "version": 1}]
            ),
            schema_record(
                "t-value", 1, 3, SIMPLE, references=[{"name": "z", "subject": "a", "version": 1}]
            ),
        ],
    )
    write_records(tmp_path, "t", [(None, wire(3, _avro(SIMPLE, {"a": 1})))])
    with pytest.raises(SchemaError, match="form a cycle"):
        read_table(tmp_path, subscribe="t", valueFormat="avro")


def test_a_registry_that_grows(tmp_path: Path) -> None:
    write_records(tmp_path, "_schemas", [schema_record("t-value", 1, 1, SIMPLE)])
    write_records(tmp_path, "t", [(None, wire(1, _avro(SIMPLE, {"a": 1})))])
    assert read_table(tmp_path, subscribe="t", valueFormat="avro").num_rows == 1
    opts = bind_registry(parse_read_options({"valueFormat": "avro"}), str(tmp_path))
    stale = registry_of(opts)  # what a long-lived executor holds
    v2 = {**SIMPLE, "fields": [*SIMPLE["fields"], {"name": "b", "type": "int", "default": 0}]}
    write_records(tmp_path, "_schemas", [schema_record("t-value", 2, 2, v2)])
    write_records(tmp_path, "t", [(None, wire(2, _avro(v2, {"a": 2, "b": 3})))])
    # the executor: id 2 is unknown to its registry, which it loads again
    assert stale.by_id(2) is None
    post = TaskDecoder(opts, "t", 0, "t-0")
    batches = read_table(tmp_path, ["value", "offset"], subscribe="t").to_batches()
    decoded = [post.decode_batch(b, ("value",)) for b in batches]
    assert [r["value"] for b in decoded for r in b.to_pylist()] == [{"a": 1}, {"a": 2}]
    # the driver binds a fresh registry per read: version 2 is the reader schema now
    table = read_table(tmp_path, subscribe="t", valueFormat="avro")
    assert table.column("value").to_pylist() == [{"a": 1, "b": 0}, {"a": 2, "b": 3}]
    assert json.loads(registry_of(opts).version("t-value").schema)["fields"][1]["name"] == "b"
