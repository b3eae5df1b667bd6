"""``kafka-segments dump --to-offset N`` through the reader's pruning vs decoding and filtering.

Contenders, alternating in one process after a warm-up (numba caches loaded, file in the page
cache), on the bench_cli log (one ~200 MB partition, ``bench-0``):

a. ``main(["dump", PATH, "--from-offset", F, "--to-offset", T])``, stdout to /dev/null: the
   range becomes ``startingOffsets``/``endingOffsets`` and only the batches holding it are read;
b. what the CLI did before issue 12: ``iter_batches(PATH)`` over the whole log, each Arrow batch
   filtered to the range (the same rows).

Usage::

    python benchmarks/bench_cli_range.py [--mb 200] [--repeat 5] [--data bench-data/cli]

Prints each contender's best and median time and the ratio of the best times, per range.

Figures (2-core machine shared with other jobs, load average 8.6 during the run; 191 MB log,
1.64 M records; 5 alternating rounds, ``--data /tmp/h12/bench``):

=====================  ==========  ===============  =====================
range                  pruned (a)  decode+filt (b)  ratio of best times
=====================  ==========  ===============  =====================
[0, 5)                 0.005 s     0.146 s          30.0x
[1000000, 1000005)     0.005 s     0.169 s          34.5x
=====================  ==========  ===============  =====================
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
from bench_cli import build_log_dir

from kafka_segments_ds import iter_batches
from kafka_segments_ds.cli import main as cli_main


def pruned(part: Path, first: int, end: int) -> int:
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        return cli_main(["dump", str(part), "--from-offset", str(first), "--to-offset", str(end)])


def filtered(part: Path, first: int, end: int) -> int:
    rows = 0
    for arrow_batch in iter_batches(str(part)):
        offsets = arrow_batch.column("offset")
        keep = pc.and_(pc.greater_equal(offsets, first), pc.less(offsets, end))
        rows += arrow_batch.filter(keep).num_rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default="bench-data/cli")
    args = parser.parse_args()
    part = build_log_dir(Path(args.data), args.mb)
    for first, end in ((0, 5), (1_000_000, 1_000_005)):
        pruned(part, first, end)  # warm-up
        filtered(part, first, end)
        times: dict[str, list[float]] = {"pruned (a)": [], "decode+filter (b)": []}
        for _ in range(args.repeat):
            for name, run in (("pruned (a)", pruned), ("decode+filter (b)", filtered)):
                start = time.perf_counter()
                run(part, first, end)
                times[name].append(time.perf_counter() - start)
        print(f"range [{first}, {end}):")
        for name, values in times.items():
            print(
                f"  {name:<18} best {min(values):.3f} s  median {statistics.median(values):.3f} s"
            )
        ratio = min(times["decode+filter (b)"]) / min(times["pruned (a)"])
        print(f"  pruned is {ratio:.1f}x faster (best times)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
