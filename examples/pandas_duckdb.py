"""Kafka records into pandas and DuckDB: read_table, decode keys and values, query.

Run: ``python examples/pandas_duckdb.py [LOG_DIR]``. Without LOG_DIR a small sample log dir is
generated in a temporary directory. Reads every topic with ``isolationLevel=read_committed``
(records of aborted transactions dropped).

Kafka keys and values are bytes. They are decoded as UTF-8 in Arrow (``cast`` to string,
falling back to decoding with U+FFFD replacement characters for records that are not valid
UTF-8), so pandas and DuckDB both get text columns. The Arrow table then becomes a pandas
DataFrame with ``Table.to_pandas()`` and, if the ``duckdb`` package is importable, DuckDB runs
SQL over the same Arrow table without copying it. Neither pandas nor duckdb is a dependency of
kafka-segments-ds: each part is skipped with a message when its package is missing
(``pip install pandas duckdb``).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp"]
SQL = """
SELECT topic, "partition", count(*) AS records, count(DISTINCT key) AS keys,
       round(avg(length(value)), 1) AS avg_value_chars,
       min("offset") AS first_offset, max("offset") AS last_offset
FROM records
GROUP BY topic, "partition"
ORDER BY topic, "partition"
"""
TOP_KEYS_SQL = """
SELECT key, count(*) AS records
FROM records
WHERE key IS NOT NULL
GROUP BY key
ORDER BY records DESC, key
LIMIT 5
"""


def write_sample(root: Path) -> Path:
    """The small sample this example reads when no log dir is given."""
    return write_sample_log_dir(root, records_per_partition=600, segment_bytes=16 * 1024)


def decode_utf8(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A binary column as strings; invalid UTF-8 is decoded with replacement characters."""
    try:
        return pc.cast(column, pa.string())
    except pa.ArrowInvalid:
        return pa.chunked_array(
            [
                pa.array(
                    [
                        None if b is None else b.decode("utf-8", "replace")
                        for b in chunk.to_pylist()
                    ],
                    pa.string(),
                )
                for chunk in column.chunks
            ],
            pa.string(),
        )


def read_decoded(log_dir: str) -> pa.Table:
    """The committed records under ``log_dir``, key and value as strings."""
    table = ksd.read_table(log_dir, COLUMNS, isolationLevel="read_committed")
    for name in ("key", "value"):
        table = table.set_column(table.schema.get_field_index(name), name, decode_utf8(table[name]))
    return table


def pandas_part(table: pa.Table) -> None:
    try:
        import pandas as pd
    except ImportError:
        print("pandas is not installed (pip install pandas): skipping the DataFrame part")
        return
    df = table.to_pandas()
    print(f"pandas DataFrame: {df.shape[0]} rows x {df.shape[1]} columns")
    with pd.option_context("display.width", 120, "display.max_colwidth", 40):
        print(df.head(5).to_string(index=False))
        per_partition = (
            df.assign(value_chars=df["value"].str.len())
            .groupby(["topic", "partition"])
            .agg(records=("offset", "size"), keys=("key", "nunique"), chars=("value_chars", "sum"))
        )
        print("\nper partition (pandas):")
        print(per_partition.to_string())


def duckdb_part(table: pa.Table) -> None:
    try:
        import duckdb
    except ImportError:
        print("duckdb is not installed (pip install duckdb): skipping the SQL part")
        return
    with duckdb.connect() as con:
        con.register("records", table)  # a view over the Arrow table, no copy
        for title, sql in (("per partition (DuckDB)", SQL), ("top keys (DuckDB)", TOP_KEYS_SQL)):
            cursor = con.execute(sql)
            names = [d[0] for d in cursor.description]
            print(f"\n{title}:")
            print("  " + " | ".join(names))
            for row in cursor.fetchall():
                print("  " + " | ".join(str(v) for v in row))


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="kafka-sample-") as tmp:
        log_dir = argv[1] if len(argv) > 1 else str(write_sample(Path(tmp)))
        table = read_decoded(log_dir)
    keys = pc.count_distinct(table["key"]).as_py()
    print(f"read {table.num_rows} committed records ({keys} distinct keys) from {log_dir}")
    print(f"first value: {table['value'][0].as_py() if table.num_rows else None!r}\n")
    pandas_part(table)
    duckdb_part(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
