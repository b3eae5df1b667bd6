"""Decode throughput on legacy (magic 1) logs: read_table against aiokafka, side by side.

Logs of Kafka 0.10 (message format v1): 100-byte values with 16-byte keys, written with
aiokafka's C builder (``LegacyRecordBatchBuilder``) as a broker stores them (absolute offsets):

* uncompressed: one message an entry, as a 0.10 broker stores an uncompressed produce;
* gzip: producer-like wrappers of up to 16 KiB of messages (relative inner offsets), with the
  floor any decoder pays: decompressing the same wrappers with zlib and doing nothing else.

Each round reads the file with ``read_table`` (default columns, checksums verified) and iterates
it with aiokafka's C-accelerated ``MemoryRecords`` (CRCs validated, touching offset, timestamp,
key and value), alternating; each side prints its median and spread (min-max), the ratio is of
the medians. Usage::

    python benchmarks/bench_legacy.py [--records 500000] [--repeat 5] [--data bench-data]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

from bench_decode import aiokafka_iterate, sample_values, show, timed

import kafka_segments_ds as ksd

BATCH_BYTES = 16 * 1024
GZIP = 1


def build_log(path: Path, records: int, codec: int) -> None:
    """One segment of magic-1 messages (uncompressed) or wrappers (``codec``), absolute offsets."""
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    values = sample_values()  # bench_decode's: 100 bytes each
    ts = 1_700_000_000_000
    tmp = path.with_suffix(".tmp")
    offset = 0
    with open(tmp, "wb") as out:
        while offset < records:
            builder = LegacyRecordBatchBuilder(1, codec, BATCH_BYTES)
            base = offset
            while offset < records:
                key = b"key-%012d" % offset
                if (
                    builder.append(offset - base, ts + offset // 100, key, values[offset % 4096])
                    is None
                ):
                    break
                offset += 1
            entries = bytearray(builder.build())
            if codec:  # one wrapper: its offset field is its last inner message's
                entries[0:8] = (offset - 1).to_bytes(8, "big")
            else:  # messages numbered from 0 in the builder: the broker's offsets
                pos, n = 0, base
                while pos < len(entries):
                    entries[pos : pos + 8] = n.to_bytes(8, "big")
                    pos += 12 + int.from_bytes(entries[pos + 8 : pos + 12], "big")
                    n += 1
            out.write(entries)
    os.replace(tmp, path)


def ours(path: Path) -> int:
    return int(ksd.read_table(str(path)).num_rows)


def gzip_only(path: Path) -> int:
    """Decompress every wrapper's value (magic 1: 26 bytes of header, then key and value)."""
    data = path.read_bytes()
    view = memoryview(data)
    total = pos = 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big")
        key_length = int.from_bytes(data[pos + 26 : pos + 30], "big", signed=True)
        value_at = pos + 30 + max(key_length, 0)
        length = int.from_bytes(data[value_at : value_at + 4], "big")
        total += len(zlib.decompress(view[value_at + 4 : value_at + 4 + length], 47))
        pos += 12 + size
    return total


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default="bench-data")
    args = parser.parse_args(argv)
    for codec, name in ((0, "uncompressed"), (GZIP, "gzip")):
        path = (
            Path(args.data) / f"legacy-{name}-{args.records}" / "old-0" / "00000000000000000000.log"
        )
        build_log(path, args.records, codec)
        ours(path)  # imports what read_table uses: not part of the steady figure
        fns: list[Callable[[], int]] = [lambda p=path: ours(p), lambda p=path: aiokafka_iterate(p)]
        if codec:
            fns.append(lambda p=path: gzip_only(p))
        times, counts = timed(args.repeat, path, *fns)
        assert counts[0] == counts[1] == args.records, counts
        print(f"magic 1, {name}: {args.records:,} records, {path.stat().st_size / 1e6:.0f} MB")
        show("read_table", args.records, times[0])
        show("aiokafka (C)", args.records, times[1])
        ratio = statistics.median(times[1]) / statistics.median(times[0])
        print(f"  {'ratio':<16} {ratio:8.2f} x (aiokafka's time / ours)")
        if codec:
            show("gzip only", args.records, times[2])
            floor = statistics.median(times[2]) / statistics.median(times[0])
            print(f"  {'ratio vs gzip':<16} {floor:8.2f} (decompressing alone / ours)")
    print(f"({os.getloadavg()[0]:.2f} load average at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
