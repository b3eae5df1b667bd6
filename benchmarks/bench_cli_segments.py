"""``kafka-segments`` dump / verify / stats on a partition of many tiny segments (issue 23).

verify and stats used to resolve (and so list the partition directory for) every segment:
quadratic in the segment count (3,000 tiny segments, 2 MB: 159 s and 285 s against 4.5 s for
dump). Target: each within 2x the time of ``dump`` on the same data.

Each command runs as its own Python process (interpreter start and imports included), the three
alternating round after round so a noisy neighbour hurts all of them alike; reported: every
round's times and ratios, then per command the median and the spread (min-max) of the rounds.

Usage::

    python benchmarks/bench_cli_segments.py [--segments 3000] [--repeat 3] [--data DIR]

The partition (``tiny-0``: one uncompressed magic-2 batch of 5 records a segment, ~700 bytes,
with its .index/.timeindex) is generated once under ``--data``.

Figures (2-core development machine shared with ~6 other jobs, load average 10-13; 3,000
segments, 2.0 MB; two runs of 3 rounds, median (min-max) of the rounds):

=======  ======================  ======================
command  run 1                   run 2
=======  ======================  ======================
dump     16.7 s (14.6-22.4)      20.3 s (19.0-20.4)
verify   6.7 s (5.5-7.0)         9.1 s (6.6-9.3)
stats    8.7 s (7.7-9.0)         10.7 s (6.9-13.4)
=======  ======================  ======================

verify / dump per round: median 0.33 (0.31-0.46) and 0.44 (0.35-0.46); stats / dump: 0.46
(0.39-0.62) and 0.53 (0.37-0.65). Before the change, on the same kind of data: 159 s and
285 s against 4.5 s for dump (issue 23).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench_cli import time_once

RECORDS_PER_SEGMENT = 5
VALUE_BYTES = 100
START_TS = 1_700_000_000_000


def build_partition(root: Path, segments: int) -> Path:
    """Write ``root/tiny-0`` with ``segments`` one-batch segments (kept between runs)."""
    from kafka_segments_ds.records.builder import RecordSpec, encode_batch
    from kafka_segments_ds.samples import PartitionWriter

    part = root / "tiny-0"
    done = part / ".complete"
    if done.exists():
        return part
    writer = PartitionWriter(part, segment_bytes=1)  # every batch rolls a new segment
    offset = 0
    for _ in range(segments):
        specs = [
            RecordSpec(
                key=b"key-%08d" % (offset + i),
                value=(b"v%08d " % (offset + i)) * (VALUE_BYTES // 10),
                timestamp=START_TS + offset + i,
            )
            for i in range(RECORDS_PER_SEGMENT)
        ]
        writer.append(encode_batch(specs, base_offset=offset), offset + RECORDS_PER_SEGMENT - 1)
        offset += RECORDS_PER_SEGMENT
    writer.roll()
    done.write_text(f"{offset}\n")
    return part


def commands(part: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "kafka_segments_ds"]
    return {
        "dump": [*cli, "dump", str(part), "--format", "jsonl", "--quiet"],
        "verify": [*cli, "verify", str(part), "--quiet"],
        "stats": [*cli, "stats", str(part), "--quiet"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--segments", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default="bench-data/cli-segments")
    args = parser.parse_args()
    part = build_partition(Path(args.data) / f"{args.segments}", args.segments)
    logs = list(part.glob("*.log"))
    size = sum(p.stat().st_size for p in logs)
    print(f"partition: {part} ({len(logs):,} segments, {size / 1e6:.1f} MB)")
    runs = commands(part)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_number in range(args.repeat):
        for name in runs:  # alternating: a noisy neighbour slows each command alike
            times[name].append(time_once(runs[name]))
        ratios = ", ".join(
            f"{n}/dump {times[n][-1] / times['dump'][-1]:.2f}" for n in ("verify", "stats")
        )
        print(
            f"round {round_number + 1}: "
            + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items())
            + f" ({ratios})"
        )
    print(f"\n{'command':<8} {'median':>8} {'min':>8} {'max':>8} {'median/dump':>12}")
    dump_median = statistics.median(times["dump"])
    for name, t in times.items():
        median = statistics.median(t)
        print(
            f"{name:<8} {median:>7.2f}s {min(t):>7.2f}s {max(t):>7.2f}s "
            f"{median / dump_median:>12.2f}"
        )
    for name in ("verify", "stats"):
        per_round = [v / d for v, d in zip(times[name], times["dump"], strict=True)]
        print(
            f"{name} / dump per round: median {statistics.median(per_round):.2f} "
            f"(range {min(per_round):.2f}-{max(per_round):.2f}; target <= 2)"
        )


if __name__ == "__main__":
    main()
