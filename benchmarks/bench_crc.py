"""CRC-32C throughput of the compiled kernel against the crc32c package, side by side.

In cache (a buffer of ``--kib`` KiB checksummed over and over; target >= 10 GB/s) and over a
larger buffer out of cache (``--mib``). Both paths are timed alternately, best of ``--repeat``.
Also shows the portable table walk (what non-x86 CPUs run). Reports GB/s and the ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import crc32c
import numpy as np

from kafka_segments_ds.records import crc_kernels as C


def best_rate(fn: Callable[[], object], nbytes: int, loops: int, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - started) / loops)
    return nbytes / best / 1e9


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kib", type=int, default=64, help="in-cache buffer size")
    parser.add_argument("--mib", type=int, default=64, help="out-of-cache buffer size")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv[1:])
    load = os.getloadavg()
    print(f"compiled: {C.COMPILED}, SSE 4.2 path: {C.HARDWARE}; load {load[0]:.2f} {load[1]:.2f}")
    rng = np.random.default_rng(1)
    for label, size, loops in (
        (f"in cache ({args.kib} KiB)", args.kib << 10, max(1, (256 << 20) // (args.kib << 10))),
        (f"out of cache ({args.mib} MiB)", args.mib << 20, 2),
    ):
        buf = rng.integers(0, 256, size=size, dtype=np.uint8)
        view = memoryview(buf)
        assert int(C.crc32c_range(buf, 0, size)) == crc32c.crc32c(view)
        ours = best_rate(lambda: C.crc32c_range(buf, 0, size), size, loops, args.repeat)  # noqa: B023
        peer = best_rate(lambda: crc32c.crc32c(view), size, loops, args.repeat)  # noqa: B023
        tables = best_rate(
            lambda: C.crc32c_tables_range(buf, 0, size),  # noqa: B023
            size, max(1, loops // 8), args.repeat,
        )  # fmt: skip
        print(f"{label}")
        print(f"  kernel (3 streams)  {ours:7.2f} GB/s   (target >= 10 in cache)")
        print(f"  crc32c package      {peer:7.2f} GB/s")
        print(f"  table walk          {tables:7.2f} GB/s   (the portable fallback)")
        print(f"  ratio kernel/crc32c {ours / peer:7.2f} x")
    load = os.getloadavg()
    print(f"load after: {load[0]:.2f} {load[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
