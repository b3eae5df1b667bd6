"""Column catalogue: names, Arrow types and Spark DDL, in Spark's Kafka source order."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from kafka_segments_ds.errors import InvalidOptionError

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    arrow_type: pa.DataType
    spark_ddl: str
    group: str  # "default" | "headers" | "metadata"


COLUMNS: tuple[Column, ...] = (
    Column("key", pa.binary(), "binary", "default"),
    Column("value", pa.binary(), "binary", "default"),
    Column("topic", pa.string(), "string", "default"),
    Column("partition", pa.int32(), "int", "default"),
    Column("offset", pa.int64(), "bigint", "default"),
    Column("timestamp", TIMESTAMP_TYPE, "timestamp", "default"),
    Column("timestampType", pa.int32(), "int", "default"),
    Column("headers", HEADER_TYPE, "array<struct<key:string,value:binary>>", "headers"),
    Column("magic", pa.int8(), "tinyint", "metadata"),
    Column("compression", pa.string(), "string", "metadata"),
    Column("batchBaseOffset", pa.int64(), "bigint", "metadata"),
    Column("batchLastOffset", pa.int64(), "bigint", "metadata"),
    Column("producerId", pa.int64(), "bigint", "metadata"),
    Column("producerEpoch", pa.int16(), "smallint", "metadata"),
    Column("baseSequence", pa.int32(), "int", "metadata"),
    Column("isTransactional", pa.bool_(), "boolean", "metadata"),
    Column("isControl", pa.bool_(), "boolean", "metadata"),
    Column("leaderEpoch", pa.int32(), "int", "metadata"),
    Column("segment", pa.string(), "string", "metadata"),
    Column("position", pa.int64(), "bigint", "metadata"),
)
BY_NAME = {c.name: c for c in COLUMNS}


def default_columns(include_headers: bool, include_metadata: bool) -> tuple[str, ...]:
    """The column names a read returns for these options, in order."""
    groups = {"default"}
    if include_headers:
        groups.add("headers")
    if include_metadata:
        groups.add("metadata")
    return tuple(c.name for c in COLUMNS if c.group in groups)


def arrow_schema(columns: tuple[str, ...]) -> pa.Schema:
    """Arrow schema of ``columns`` (names must be known).

    Every field is nullable, as in Spark's Kafka source schema (Spark checks the batches a
    Python data source yields against it, nullability included).
    """
    return pa.schema([pa.field(n, BY_NAME[n].arrow_type) for n in columns])


def spark_ddl(columns: tuple[str, ...]) -> str:
    """Spark DDL string of ``columns``, e.g. ``key binary, value binary, ...``."""
    return ", ".join(f"`{n}` {BY_NAME[n].spark_ddl}" for n in columns)


def check_columns(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Validate a user projection against the catalogue (exact, case-sensitive names)."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise InvalidOptionError(
            f"unknown column(s) {unknown}; known columns: {', '.join(BY_NAME)}"
        )
    return tuple(names)
