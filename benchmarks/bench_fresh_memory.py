"""What a fresh process pays to fault in new memory on this host: the floor under any cold
first read (``bench_decode.py``'s cold figure).

A read of 1 M records builds ~150 MB of Arrow buffers. In a fresh process that memory is new
to it: pyarrow's allocator (mimalloc) takes it from an arena it marks for transparent huge pages
(``madvise`` mode here). Each child process below writes 160 MB of fresh memory, with huge
pages (what mimalloc and numpy ask for) and with 4 KiB pages, in two states of the machine:

* ``after a release``: another process has just freed 3 GB and 3 s have passed. A VM whose
  balloon driver reports free memory to the host (``page_reporting``) has handed those pages
  back by then, and a huge page must be fetched from the host again;
* ``back to back``: the children run one after another, each reusing what the last one freed.

Usage::

    python benchmarks/bench_fresh_memory.py [--repeat 5] [--mb 160] [--release-gb 3] [--wait 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TOUCH = """
import sys, time
import numpy as np
core = getattr(np, "_core", None) or np.core  # numpy 2, numpy 1
core.multiarray._set_madvise_hugepage(sys.argv[1] == "huge")
started = time.perf_counter()
np.empty(int(sys.argv[2]) << 20, np.uint8).fill(1)
print(time.perf_counter() - started)
"""


def touch(pages: str, mb: int) -> float:
    out = subprocess.run(
        [sys.executable, "-c", TOUCH, pages, str(mb)], capture_output=True, text=True, check=True
    )
    return float(out.stdout)


def release(gb: float, wait: float) -> None:
    code = f"b = bytearray({int(gb * (1 << 30))}); del b"
    subprocess.run([sys.executable, "-c", code], check=True)
    time.sleep(wait)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mb", type=int, default=160, help="fresh memory each child writes")
    parser.add_argument("--release-gb", type=float, default=3.0, help="memory freed before")
    parser.add_argument("--wait", type=float, default=3.0, help="seconds after the release")
    args = parser.parse_args()
    for state in ("after a release", "back to back"):
        times: dict[str, list[float]] = {"huge": [], "4k": []}
        for _ in range(args.repeat):
            for pages in times:
                if state == "after a release":
                    release(args.release_gb, args.wait)
                times[pages].append(touch(pages, args.mb))
        print(f"{state}: writing {args.mb} MB of fresh memory")
        for pages, took in times.items():
            label = "2 MiB huge pages" if pages == "huge" else "4 KiB pages"
            print(
                f"  {label:<17} median {statistics.median(took):.3f} s "
                f"(min {min(took):.3f}, max {max(took):.3f})"
            )
    try:
        with open("/sys/module/page_reporting/parameters/page_reporting_order") as f:
            print(f"page_reporting_order: {f.read().strip()}")
    except OSError:
        print("no free page reporting on this host")


if __name__ == "__main__":
    main()
