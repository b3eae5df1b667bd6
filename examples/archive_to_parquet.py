"""ETL: archive a Kafka log dir to Parquet, partitioned by topic and record date.

Run: ``python examples/archive_to_parquet.py [OUT_DIR [LOG_DIR]]`` (default OUT_DIR:
./archive-parquet). Without LOG_DIR a small sample log dir is generated in a temporary directory,
with timestamps that straddle midnight UTC so more than one date appears.

Shows streaming ETL with bounded memory: :func:`kafka_segments_ds.iter_batches` yields Arrow
record batches one read window at a time, a ``dt`` column (``YYYY-MM-DD`` of the record
timestamp, in UTC) is added to each batch, and :func:`pyarrow.dataset.write_dataset` consumes the
stream and writes a Hive-partitioned dataset (``topic=orders/dt=2023-11-14/part-0.parquet``).
Records with no timestamp (every magic-0 message, stored as -1) go to ``dt=unknown``. The
``topic`` and ``dt`` values live in the directory names, not in the files; read the dataset back
with ``pyarrow.dataset.dataset(OUT_DIR, partitioning=PARTITIONING)``.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir

# the record columns archived (headers as stored; the metadata columns are left out)
COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
UNKNOWN_DATE = "unknown"
PARTITIONING = ds.partitioning(
    pa.schema([("topic", pa.string()), ("dt", pa.string())]), flavor="hive"
)
# starts 2 s before 2023-11-15T00:00:00Z: the sample's records span both dates
SAMPLE_START_TIMESTAMP = 1_700_006_400_000 - 2_000


def write_sample(root: Path) -> Path:
    """The small sample this example reads when no log dir is given."""
    return write_sample_log_dir(
        root,
        records_per_partition=600,
        segment_bytes=16 * 1024,
        start_timestamp=SAMPLE_START_TIMESTAMP,
    )


def with_date(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` plus a ``dt`` string column: the UTC date of ``timestamp``, or ``unknown``."""
    dates = pc.strftime(batch.column("timestamp"), format="%Y-%m-%d")
    dates = pc.fill_null(dates, UNKNOWN_DATE)
    return batch.append_column("dt", dates)


def dated_batches(log_dir: str, **options: object) -> Iterator[pa.RecordBatch]:
    for batch in ksd.iter_batches(log_dir, COLUMNS, includeHeaders=True, **options):
        yield with_date(batch)


def archive(log_dir: str, out_dir: Path, **options: object) -> list[tuple[str, int]]:
    """Stream ``log_dir`` into a Parquet dataset under ``out_dir``.

    Returns (file path relative to ``out_dir``, row count) for every file written.
    """
    batches = dated_batches(log_dir, **options)
    first = next(batches, None)  # its schema is the stream's
    if first is None:
        return []
    reader = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches))
    written: list[tuple[str, int]] = []

    def visit(written_file: ds.WrittenFile) -> None:
        rows = written_file.metadata.num_rows if written_file.metadata is not None else -1
        written.append((Path(written_file.path).relative_to(out_dir).as_posix(), rows))

    ds.write_dataset(
        reader,
        out_dir,
        format="parquet",
        partitioning=PARTITIONING,
        # replace the partitions this run writes, keep any others already in out_dir
        existing_data_behavior="delete_matching",
        basename_template="part-{i}.parquet",
        # iter_batches yields small batches (one read window of one segment): buffer them into
        # row groups of a useful size; memory stays bounded by these and the open-file cap
        min_rows_per_group=32 * 1024,
        max_rows_per_group=64 * 1024,
        max_rows_per_file=1024 * 1024,
        max_open_files=64,
        file_visitor=visit,
        use_threads=False,  # keep (topic, partition, offset) order inside each file
    )
    return sorted(written)


def main(argv: list[str]) -> int:
    out_dir = Path(argv[1] if len(argv) > 1 else "archive-parquet").absolute()
    with tempfile.TemporaryDirectory(prefix="kafka-sample-") as tmp:
        log_dir = argv[2] if len(argv) > 2 else str(write_sample(Path(tmp)))
        print(f"archiving {log_dir} -> {out_dir}")
        written = archive(log_dir, out_dir)
    if not written:
        print("no records: nothing written")
        return 0
    width = max(len(name) for name, _ in written)
    print(f"\n{'file':<{width}}  {'rows':>8}")
    for name, rows in written:
        print(f"{name:<{width}}  {rows:>8}")
    total = sum(rows for _, rows in written)
    print(f"\n{len(written)} files, {total} rows")

    dataset = ds.dataset(out_dir, format="parquet", partitioning=PARTITIONING)
    counts = (
        dataset.to_table(columns=["topic", "dt", "offset"])
        .group_by(["topic", "dt"])
        .aggregate([("offset", "count")])
        .sort_by([("topic", "ascending"), ("dt", "ascending")])
    )
    print("\nread back:")
    for row in counts.to_pylist():
        print(f"  topic={row['topic']:<15} dt={row['dt']:<10} {row['offset_count']:>6} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
