"""Quick-start demo: generate a broker-like log dir, decode it with read_table, print a summary.

Run: ``python examples/demo.py [DIR]`` (default: ./demo-data). Shows deep and shallow iteration,
read_committed filtering of an aborted transaction, an offset range and a timestamp start.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow.compute as pc

import kafka_segments_ds as ksd
from kafka_segments_ds.samples import write_sample_log_dir


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "demo-data")
    write_sample_log_dir(root, records_per_partition=5000)
    segments = sorted(root.glob("*-*/*.log"))
    print(
        f"sample log dir: {root} ({len(segments)} segments, "
        f"{sum(p.stat().st_size for p in segments):,} bytes of .log)"
    )

    started = time.perf_counter()
    table = ksd.read_table(str(root), includeHeaders=True, includeMetadata=True)
    elapsed = time.perf_counter() - started
    print(f"\ndeep read: {table.num_rows:,} records in {elapsed:.2f}s")
    summary = (
        table.group_by(["topic", "partition", "magic", "compression"])
        .aggregate([("offset", "min"), ("offset", "max"), ("offset", "count")])
        .sort_by(
            [
                ("topic", "ascending"),
                ("partition", "ascending"),
                ("magic", "ascending"),
                ("compression", "ascending"),
            ]
        )
    )
    print(f"{'topic':<15}{'part':>5}{'magic':>6}  {'codec':<7}{'first':>7}{'last':>7}{'rows':>7}")
    for row in summary.to_pylist():
        print(
            f"{row['topic']:<15}{row['partition']:>5}{row['magic']:>6}  {row['compression']:<7}"
            f"{row['offset_min']:>7}{row['offset_max']:>7}{row['offset_count']:>7}"
        )

    committed = ksd.read_table(str(root), subscribe="orders", isolationLevel="read_committed")
    uncommitted = ksd.read_table(str(root), subscribe="orders")
    print(
        f"\norders: {uncommitted.num_rows} records read_uncommitted, "
        f"{committed.num_rows} read_committed (aborted transaction dropped)"
    )

    shallow = ksd.read_table(str(root), iteration="shallow", includeMetadata=True)
    print(
        f"shallow: {shallow.num_rows} batches / wrapper messages, "
        f"{pc.sum(pc.binary_length(shallow['value'])).as_py():,} stored value bytes"
    )

    window = ksd.read_table(
        str(root),
        startingOffsets='{"orders":{"0":100}}',
        endingOffsets='{"orders":{"0":110}}',
        assign='{"orders":[0]}',
    )
    print(f"orders-0 offsets [100, 110): {window['offset'].to_pylist()}")

    first = table.filter(pc.equal(table["topic"], "metrics-v1"))["timestamp"][1000].as_py()
    ts_ms = int(first.timestamp() * 1000)
    by_time = ksd.read_table(str(root), subscribe="metrics-v1", startingTimestamp=ts_ms)
    print(
        f"metrics-v1 from timestamp {ts_ms}: starts at offset {by_time['offset'][0].as_py()}, "
        f"{by_time.num_rows} records"
    )
    print(
        "\nfirst record:",
        {
            k: v
            for k, v in table.slice(0, 1).to_pylist()[0].items()
            if k in ("topic", "partition", "offset", "key", "value", "headers")
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
