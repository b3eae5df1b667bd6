"""Extract a time window [START, END) from a Kafka log dir, two ways, and compare the counts.

Run: ``python examples/time_window.py [LOG_DIR [START_MS END_MS]]``. Without LOG_DIR a small
sample log dir is generated in a temporary directory and the window is 2 s to 5 s after its
first timestamp. START_MS and END_MS are epoch milliseconds.

1. ``startingTimestamp=START, endingTimestamp=END``: Kafka's offsets-for-times semantics, as a
   consumer's ``offsetsForTimes`` and Spark's Kafka source apply them. Per partition the read
   starts at the *first offset whose timestamp is >= START* and stops before the first offset
   whose timestamp is >= END; it is an offset range, not a timestamp filter. Timestamps are set
   by producers and need not grow with offsets, so the range can hold records older than START
   (written after the first record >= START) and miss records older than END written after the
   end offset. Control records (transaction markers) count in the lookup, as on a broker.
   Records with no timestamp (magic 0) never match. A partition with no timestamp >= START is
   an error unless ``startingOffsetsByTimestampStrategy=latest``, which reads nothing from it
   (used here); with no timestamp >= END a partition is read to its end.
2. A strict filter ``START <= timestamp < END``. Reading from ``startingTimestamp=START`` and
   filtering is exact, since no record before the start offset has a timestamp >= START; the
   end has to be found by reading on to the end of every partition.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir

SAMPLE_START_TIMESTAMP = 1_700_000_000_000
SAMPLE_WINDOW = (SAMPLE_START_TIMESTAMP + 2_000, SAMPLE_START_TIMESTAMP + 5_000)
COLUMNS = ["topic", "partition", "offset", "timestamp"]


def write_sample(root: Path) -> Path:
    """The small sample this example reads when no log dir is given."""
    return write_sample_log_dir(
        root,
        records_per_partition=600,
        segment_bytes=16 * 1024,
        start_timestamp=SAMPLE_START_TIMESTAMP,
    )


def offsets_for_times_window(log_dir: str, start_ms: int, end_ms: int) -> pa.Table:
    """The records in the offset range Kafka's offsets-for-times gives for [start, end)."""
    return ksd.read_table(
        log_dir,
        COLUMNS,
        startingTimestamp=start_ms,
        endingTimestamp=end_ms,
        startingOffsetsByTimestampStrategy="latest",
    )


def strict_window(log_dir: str, start_ms: int, end_ms: int) -> pa.Table:
    """The records whose timestamp is in [start, end), whatever their offset."""
    table = ksd.read_table(
        log_dir,
        COLUMNS,
        startingTimestamp=start_ms,
        startingOffsetsByTimestampStrategy="latest",
    )
    ts_type = table.schema.field("timestamp").type
    start = pa.scalar(start_ms * 1000, ts_type)
    end = pa.scalar(end_ms * 1000, ts_type)
    ts = table["timestamp"]
    # null timestamps compare as null, and filter() drops them
    return table.filter(pc.and_(pc.greater_equal(ts, start), pc.less(ts, end)))


def per_partition(table: pa.Table) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (first offset, last offset, rows)."""
    stats = table.group_by(["topic", "partition"]).aggregate(
        [("offset", "min"), ("offset", "max"), ("offset", "count")]
    )
    return {
        (r["topic"], r["partition"]): (r["offset_min"], r["offset_max"], r["offset_count"])
        for r in stats.to_pylist()
    }


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="kafka-sample-") as tmp:
        if len(argv) > 1:
            log_dir = argv[1]
            if len(argv) != 4:
                print("usage: time_window.py [LOG_DIR [START_MS END_MS]]", file=sys.stderr)
                return 2
            start_ms, end_ms = int(argv[2]), int(argv[3])
        else:
            log_dir = str(write_sample(Path(tmp)))
            start_ms, end_ms = SAMPLE_WINDOW
        by_offsets = offsets_for_times_window(log_dir, start_ms, end_ms)
        strict = strict_window(log_dir, start_ms, end_ms)

    print(f"log dir {log_dir}, window [{start_ms}, {end_ms}) ms")
    window_stats, strict_stats = per_partition(by_offsets), per_partition(strict)
    print(f"\n{'topic':<15}{'part':>5}{'first':>8}{'last':>8}{'window':>8}{'strict':>8}")
    for key in sorted(window_stats.keys() | strict_stats.keys()):
        first, last, rows = window_stats.get(key, (None, None, 0))
        strict_rows = strict_stats.get(key, (None, None, 0))[2]
        print(
            f"{key[0]:<15}{key[1]:>5}{first if first is not None else '-':>8}"
            f"{last if last is not None else '-':>8}{rows:>8}{strict_rows:>8}"
        )

    start_scalar = pa.scalar(start_ms * 1000, by_offsets.schema.field("timestamp").type)
    older = pc.sum(pc.less(by_offsets["timestamp"], start_scalar)).as_py() or 0
    print(f"\noffsets-for-times window: {by_offsets.num_rows} records")
    print(f"strict timestamp filter: {strict.num_rows} records")
    print(f"records in the offset window with a timestamp before START: {older}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
