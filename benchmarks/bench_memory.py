"""Peak RSS of a streaming read (``iter_batches``) of one large segment.

Target (decoder issue): a 2 GB segment streams with peak RSS under 1 GB. The segment is built by
tiling a few MB of producer-like batches and patching their base offsets (the offset field is
not covered by the CRC), so it is valid, distinct data offset-wise and cheap to generate.

Usage::

    python benchmarks/bench_memory.py [--gigabytes 2] [--codec lz4|none] [--data bench-data]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.records.compression import CompressionType


def build_segment(path: Path, gigabytes: float, codec: int) -> None:
    if path.exists() and path.stat().st_size >= gigabytes * 1e9 * 0.99:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    block = bytearray()
    offset = 0
    while len(block) < 4 * 1024 * 1024:
        specs = [
            RecordSpec(
                value=rng.bytes(100),
                key=b"key-%d" % (offset + i),
                timestamp=1_700_000_000_000 + offset + i,
            )
            for i in range(100)
        ]
        block += encode_batch(specs, base_offset=offset, compression=codec)
        offset += 100
    table = scan_entries(bytes(block))
    per_block = offset
    tile = np.frombuffer(bytes(block), np.uint8).copy()
    starts = table.positions
    bases = np.array([int.from_bytes(block[p : p + 8], "big") for p in starts.tolist()], np.int64)
    target = int(gigabytes * 1e9)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        written = 0
        k = 0
        while written < target:
            shifted = (bases + k * per_block).astype(">i8").view(np.uint8).reshape(-1, 8)
            for i, p in enumerate(starts.tolist()):
                tile[p : p + 8] = shifted[i]
            out.write(tile.tobytes())
            written += tile.shape[0]
            k += 1
    os.replace(tmp, path)


def child(path: str) -> None:
    import kafka_segments_ds as ksd

    started = time.perf_counter()
    rows = 0
    value_bytes = 0
    for arrow_batch in ksd.iter_batches(path):
        rows += arrow_batch.num_rows
        value_bytes += arrow_batch.column("value").nbytes
    elapsed = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows={rows} value_bytes={value_bytes} seconds={elapsed:.2f} peak_rss_mb={peak_mb:.0f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=2.0)
    parser.add_argument("--codec", choices=("none", "lz4"), default="lz4")
    parser.add_argument("--data", default="bench-data")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    codec = CompressionType.LZ4 if args.codec == "lz4" else CompressionType.NONE
    path = (
        Path(args.data)
        / f"mem-{args.codec}-{args.gigabytes}g"
        / "big-0"
        / ("00000000000000000000.log")
    )
    build_segment(path, args.gigabytes, codec)
    print(f"segment: {path} ({path.stat().st_size / 1e9:.2f} GB, {args.codec})")
    result = subprocess.run(
        [sys.executable, __file__, "--child", str(path)], check=True, capture_output=True, text=True
    )
    print(result.stdout.strip())
    peak = float(result.stdout.split("peak_rss_mb=")[1])
    print(f"peak RSS {peak:.0f} MB (target < 1024 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
