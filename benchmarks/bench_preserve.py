"""``preserveOffsets=true`` on the Arrow path (issue 21): ``write_table`` against pyarrow's Parquet
writer on the same rows.

An archive of ~``--mb`` MB of records (4 partitions, 100-byte values half compressible, 16-byte
keys, one header, lz4 batches of 16 KiB) is written, then read back with ``read_table``
(``includeHeaders``, ``includeMetadata``): the reader's rows, as a restore or a rewrite writes
them. Those rows are then written, alternating, ``--runs`` times each, with
``write_table(..., preserveOffsets="true")`` into a fresh log dir (each batch rebuilt with its
base and last offset, its codec: lz4) and with ``pyarrow.parquet.write_table`` into a fresh file
(its default: snappy). Prints each side's median time and spread (max - min) and the speed
ratio, Parquet's median time over ours (issue 21's goal: at least 0.5). Figures are indicative
on a shared machine.

    .venv/bin/python benchmarks/bench_preserve.py --mb 200 --runs 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from kafka_segments_ds import read_table, write_table

VALUE_BYTES = 100
PARTITIONS = 4
RECORD_BYTES = VALUE_BYTES + 16 + 20  # value, key, header


def make_rows(count: int) -> pa.Table:
    rng = np.random.default_rng(21)
    raw = rng.integers(0, 256, size=(count, VALUE_BYTES), dtype=np.uint8)
    raw[:, VALUE_BYTES // 2 :] = 120  # compressible about 2x, like typical payloads
    ends = np.arange(0, (count + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32)
    values = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(ends), pa.py_buffer(raw.tobytes())]
    )
    header = [{"key": "trace", "value": b"0123456789abcdef"}]
    return pa.table(
        {
            "key": pa.array([b"key-%012d" % i for i in range(count)], pa.binary()),
            "value": values,
            "timestamp": pa.array(1_700_000_000_000 + np.arange(count), pa.timestamp("ms")),
            "partition": pa.array(np.arange(count) % PARTITIONS, pa.int32()),
            "headers": pa.array(
                [header] * count,
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )


def timed(action: Callable[[], None]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200, help="archive size in MB of records")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(dir=args.dir)
    try:
        count = max(PARTITIONS, int(args.mb * 1e6 / RECORD_BYTES))
        archive = os.path.join(scratch, "archive")
        write_table(make_rows(count), archive, topic="t", numPartitions=PARTITIONS,
                    compression="lz4")  # fmt: skip
        rows = read_table(archive, includeHeaders=True, includeMetadata=True)
        print(f"rows: {rows.num_rows}, {rows.nbytes / 1e6:.1f} MB in Arrow")

        def ours() -> None:
            target = os.path.join(scratch, "ours")
            write_table(rows, target, topic="t", numPartitions=PARTITIONS,
                        preserveOffsets="true")  # fmt: skip
            shutil.rmtree(target)

        def parquet() -> None:
            target = os.path.join(scratch, "rows.parquet")
            pq.write_table(rows, target)
            os.remove(target)

        times: dict[str, list[float]] = {"preserveOffsets write_table": [], "pyarrow parquet": []}
        for _ in range(args.runs):
            times["preserveOffsets write_table"].append(timed(ours))
            times["pyarrow parquet"].append(timed(parquet))
        for name, values in times.items():
            print(
                f"{name}: median {statistics.median(values):.3f} s, spread "
                f"{max(values) - min(values):.3f} s, "
                f"{rows.num_rows / statistics.median(values) / 1e6:.2f} M rows/s "
                f"(runs: {', '.join(f'{v:.3f}' for v in values)})"
            )
        ratio = statistics.median(times["pyarrow parquet"]) / statistics.median(
            times["preserveOffsets write_table"]
        )
        print(f"speed ratio preserveOffsets / parquet: {ratio:.2f}x (goal >= 0.5x)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
