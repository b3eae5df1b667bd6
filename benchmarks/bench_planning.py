"""Driver-side planning time for a log dir of many segments (target: 10,000 in under 5 s).

Builds ``--partitions`` x ``--segments`` tiny segments (one batch each, with .index and
.timeindex files like a broker's), then times ``plan_scan`` with default options, with an
offset range (which reads .index files of the boundary segments) and with a timestamp start.

Usage::

    python benchmarks/bench_planning.py [--partitions 100] [--segments 100] [--data bench-data]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kafka_segments_ds.layout import segment_file_name
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.planning import plan_scan
from kafka_segments_ds.reader import read_task
from kafka_segments_ds.records.builder import RecordSpec, encode_batch


def build(root: Path, partitions: int, segments: int) -> None:
    marker = root / ".complete"
    if marker.exists():
        return
    for p in range(partitions):
        directory = root / f"events-{p}"
        directory.mkdir(parents=True, exist_ok=True)
        for s in range(segments):
            base = s * 10
            batch = encode_batch(
                [
                    RecordSpec(value=b"v" * 50, timestamp=1_700_000_000_000 + base + i)
                    for i in range(10)
                ],
                base_offset=base,
            )
            (directory / segment_file_name(base, ".log")).write_bytes(batch)
            (directory / segment_file_name(base, ".index")).write_bytes(b"")
            (directory / segment_file_name(base, ".timeindex")).write_bytes(
                (1_700_000_000_000 + base + 9).to_bytes(8, "big") + (9).to_bytes(4, "big")
            )
    marker.write_text("ok")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--data", default="bench-data")
    args = parser.parse_args(argv)
    root = Path(args.data) / f"planning-{args.partitions}x{args.segments}"
    build(root, args.partitions, args.segments)
    count = args.partitions * args.segments
    middle = args.segments * 10 // 2
    cases = {
        "default options": {},
        "offset range": {
            # every partition named, as Spark's Kafka source requires
            "startingOffsets": json.dumps(
                {"events": {str(p): middle for p in range(args.partitions)}}
            ),
        },
        "startingTimestamp": {"startingTimestamp": 1_700_000_000_000 + middle},
    }
    print(f"{count:,} segments in {args.partitions} partitions")
    for name, options in cases.items():
        started = time.perf_counter()
        plan = plan_scan(str(root), parse_read_options(options), read_records=read_task)
        elapsed = time.perf_counter() - started
        print(f"  {name:<20} {elapsed:6.2f} s  ({len(plan.tasks):,} tasks)  (target < 5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
