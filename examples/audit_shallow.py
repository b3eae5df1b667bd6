"""Audit compression, producers and transactions of a Kafka log dir without decompressing it.

Run: ``python examples/audit_shallow.py [LOG_DIR]``. Without LOG_DIR a small sample log dir is
generated in a temporary directory.

Shows ``iteration="shallow"`` with ``includeMetadata=True``: one row per stored batch (magic 2)
or top-level message / compressed wrapper (magic 0 and 1), read from the batch headers only, so
the scan costs about as much as reading the files. ``value`` is then the records section or
wrapper payload as stored (still compressed) and ``offset`` the batch's last offset. The table
printed has, per topic-partition: segments, batches, batches per codec (``lz4:12,none:2``),
message format versions, offsets covered, stored payload bytes, the producer ids of idempotent
or transactional producers, transactional data batches and control batches (transaction
markers).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir

COLUMNS = [
    "topic",
    "partition",
    "value",
    "magic",
    "compression",
    "batchBaseOffset",
    "batchLastOffset",
    "producerId",
    "isTransactional",
    "isControl",
    "segment",
]
HEADER = (
    "topic",
    "part",
    "segments",
    "batches",
    "codecs",
    "magic",
    "offsets",
    "stored_bytes",
    "producers",
    "txn",
    "control",
)


def write_sample(root: Path) -> Path:
    """The small sample this example reads when no log dir is given."""
    return write_sample_log_dir(root, records_per_partition=600, segment_bytes=16 * 1024)


def read_batches(log_dir: str) -> pa.Table:
    """One row per stored batch / top-level legacy message, headers only."""
    return ksd.read_table(log_dir, COLUMNS, iteration="shallow", includeMetadata=True)


def audit(batches: pa.Table) -> list[dict[str, object]]:
    """Per (topic, partition) statistics of a shallow read, in (topic, partition) order."""
    batches = (
        batches.append_column(
            "stored_bytes", pc.fill_null(pc.binary_length(batches["value"]), 0).cast(pa.int64())
        )
        .append_column(
            "offsets",
            pc.add(pc.subtract(batches["batchLastOffset"], batches["batchBaseOffset"]), 1),
        )
        .append_column(
            "txn_data", pc.and_(batches["isTransactional"], pc.invert(batches["isControl"]))
        )
    )
    keys = ["topic", "partition"]
    totals = batches.group_by(keys).aggregate(
        [
            ("segment", "count_distinct"),
            ([], "count_all"),
            ("offsets", "sum"),
            ("stored_bytes", "sum"),
            ("magic", "distinct"),
            ("txn_data", "sum"),
            ("isControl", "sum"),
        ]
    )
    codecs = batches.group_by([*keys, "compression"]).aggregate([("compression", "count")])
    producers = (
        batches.filter(pc.greater_equal(batches["producerId"], 0))
        .group_by(keys)
        .aggregate([("producerId", "distinct")])
    )
    codec_map: dict[tuple[str, int], dict[str, int]] = {}
    for row in codecs.to_pylist():
        key = (row["topic"], row["partition"])
        codec_map.setdefault(key, {})[row["compression"]] = row["compression_count"]
    producer_map = {
        (r["topic"], r["partition"]): r["producerId_distinct"] for r in producers.to_pylist()
    }

    report = []
    for row in totals.to_pylist():
        key = (row["topic"], row["partition"])
        report.append(
            {
                "topic": row["topic"],
                "partition": row["partition"],
                "segments": row["segment_count_distinct"],
                "batches": row["count_all"],
                "codecs": dict(sorted(codec_map[key].items())),
                "magic": sorted(row["magic_distinct"]),
                "offsets": row["offsets_sum"],
                "stored_bytes": row["stored_bytes_sum"],
                "producers": sorted(producer_map.get(key, [])),
                "txn": row["txn_data_sum"],
                "control": row["isControl_sum"],
            }
        )
    return sorted(report, key=lambda r: (str(r["topic"]), r["partition"]))


def format_row(row: dict[str, object]) -> tuple[str, ...]:
    codecs = row["codecs"]
    assert isinstance(codecs, dict)
    producers = row["producers"]
    magic = row["magic"]
    assert isinstance(producers, list) and isinstance(magic, list)
    return (
        str(row["topic"]),
        str(row["partition"]),
        str(row["segments"]),
        str(row["batches"]),
        ",".join(f"{codec}:{count}" for codec, count in codecs.items()),
        ",".join(str(m) for m in magic),
        str(row["offsets"]),
        str(row["stored_bytes"]),
        ",".join(str(p) for p in producers) or "-",
        str(row["txn"]),
        str(row["control"]),
    )


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="kafka-sample-") as tmp:
        log_dir = argv[1] if len(argv) > 1 else str(write_sample(Path(tmp)))
        batches = read_batches(log_dir)
    print(f"log dir {log_dir}: {batches.num_rows} batches / top-level messages\n")
    lines = [HEADER, *(format_row(row) for row in audit(batches))]
    widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
    for line in lines:
        print(
            "  ".join(
                cell.ljust(width) if i in (0, 4, 5, 8) else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
