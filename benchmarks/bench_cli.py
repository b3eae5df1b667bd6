"""``kafka-segments`` CLI speed on a ~200 MB log, against a kafka-python dumper and read_table.

Contenders, each run as its own Python process (so each pays the same interpreter start and
imports), alternating round after round so a noisy neighbour hurts all of them alike:

a. ``kafka-segments dump --format jsonl PATH`` with stdout to /dev/null;
b. a straightforward kafka-python dumper: ``MemoryRecords`` over each ``.log``, CRC checked per
   batch, one ``json.dumps`` line per record with the same fields and the same rendering;
c. ``kafka-segments verify PATH`` and ``kafka-segments stats PATH``; also
   ``kafka-segments rebuild-index PATH --dry-run`` (no target: each of these walks the log in
   windows of one reused buffer, so its peak RSS stays far below the log's size);
d. a plain decode: ``read_table(PATH)`` (default columns, checksums verified).

Targets (issue 5): dump >= 5x the kafka-python dumper's throughput; verify and stats each within
2x the time of read_table. Reported: each contender's best and median wall time, MB/s, peak
RSS, and the ratios of the best times.

Usage::

    python benchmarks/bench_cli.py [--mb 200] [--repeat 3] [--data bench-data/cli]

The log (uncompressed magic-2 batches of 16 KiB, ~120-byte records with a 16-byte key, one
partition ``bench-0``, 1 GiB segments so one segment, its .index/.timeindex built as a broker
does) is generated once with aiokafka's C batch builder and kept under ``--data``.

Figures (2-core development machine, quiet; 200 MB log, 1.72 M records; 3 alternating rounds,
two runs of the script, best time of each contender, and its peak RSS):

===========================  ===============  ========  ======================================
contender                    best (run 1, 2)  peak RSS  ratio of the best times (run 1, 2)
===========================  ===============  ========  ======================================
dump --format jsonl (a)      1.22 s, 1.23 s   140 MiB   11.2x, 9.8x the kafka-python dumper
kafka-python dumper (b)      13.7 s, 12.0 s   224 MiB
verify (c)                   0.48 s, 0.47 s   100 MiB   0.39, 0.40 of read_table
stats (c)                    0.56 s, 0.54 s   111 MiB   0.45, 0.46 of read_table
rebuild-index --dry-run (c)  0.43 s, 0.41 s    86 MiB   0.35, 0.35 of read_table
read_table (d)               1.25 s, 1.17 s   345 MiB
===========================  ===============  ========  ======================================

Every time includes the interpreter start and imports (~0.4 s); each command imports only its
own module. read_table's figure swings most: in a fresh process it writes ~250 MB of new memory
(see ``bench_fresh_memory.py``). ``verify`` walks each log in 4 MiB windows of one reused buffer
(framing, batch headers, ABORT markers), then decodes it (CRCs, offsets). ``stats`` reads the
log twice (shallow, then deep with only the columns it needs) and skips its read_committed pass
when the partition has no transactional batches, hence below one plain decode here.
``rebuild-index`` walks the log in the same windows, checking each entry's CRC as it goes (it
read the whole file before: 0.59-1.36 s and 464 MiB peak RSS here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BATCH_BYTES = 16 * 1024  # the Java producer's default batch.size
KEY_BYTES = 16
VALUE_BYTES = 90  # + key + ~14 bytes of record framing ~= 120 bytes a record
RECORD_BYTES_ESTIMATE = 116
TOPIC, PARTITION = "bench", 0
START_TS = 1_700_000_000_000


def build_log_dir(root: Path, megabytes: int) -> Path:
    """Write ``root/bench-0`` with ~``megabytes`` MB of records (kept between runs)."""
    import numpy as np
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from kafka_segments_ds.samples import PartitionWriter

    part = root / f"{TOPIC}-{PARTITION}"
    done = part / ".complete"
    if done.exists():
        return part
    records = megabytes * 1_000_000 // RECORD_BYTES_ESTIMATE
    rng = np.random.default_rng(1)
    alphabet = np.frombuffer(b'abcdefghijklmnopqrstuvwxyz0123456789 ,:{}"', np.uint8)
    values = [bytes(v) for v in alphabet[rng.integers(0, alphabet.shape[0], (4096, VALUE_BYTES))]]
    writer = PartitionWriter(part)
    offset = 0
    while offset < records:
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, BATCH_BYTES)
        base = offset
        while offset < records:
            key = b"key-%012d" % offset
            ts = START_TS + offset // 100
            if builder.append(offset - base, ts, key, values[offset % 4096], []) is None:
                break
            offset += 1
        batch = bytearray(builder.build())
        batch[0:8] = base.to_bytes(8, "big")  # aiokafka builds at offset 0; set the real base
        writer.append(bytes(batch), offset - 1)
    writer.roll()
    done.write_text(f"{records}\n")
    return part


# -- the peer: a straightforward kafka-python dumper -------------------------------------------


def peer_dump(part: Path) -> None:
    """Print every record under ``part`` as the CLI's JSON lines, with kafka-python's readers."""
    from kafka.errors import CorruptRecordError
    from kafka.record import MemoryRecords

    topic, _, number = part.name.rpartition("-")
    partition = int(number)
    out = sys.stdout
    for log in sorted(part.glob("*.log")):
        records = MemoryRecords(log.read_bytes())
        while (batch := records.next_batch()) is not None:
            if not batch.validate_crc():
                raise CorruptRecordError(f"CRC mismatch in {log}")
            for record in batch:
                key, value = record.key, record.value
                row = {
                    "key": None if key is None else key.decode("utf-8", "replace"),
                    "value": None if value is None else value.decode("utf-8", "replace"),
                    "topic": topic,
                    "partition": partition,
                    "offset": record.offset,
                    "timestamp": record.timestamp,
                    "timestampType": record.timestamp_type,
                }
                out.write(json.dumps(row, ensure_ascii=False) + "\n")


def plain_read_table(part: Path) -> None:
    import kafka_segments_ds as ksd

    table = ksd.read_table(str(part))
    print(table.num_rows, file=sys.stderr)


# -- timing ------------------------------------------------------------------------------------


def contenders(part: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "kafka_segments_ds"]
    me = [sys.executable, os.path.abspath(__file__)]
    return {
        "dump (ours)": [*cli, "dump", str(part), "--format", "jsonl", "--quiet"],
        "dump (kafka-python)": [*me, "--peer-dump", str(part)],
        "verify": [*cli, "verify", str(part), "--quiet"],
        "stats": [*cli, "stats", str(part), "--quiet"],
        "rebuild-index": [*cli, "rebuild-index", str(part), "--dry-run", "--quiet"],
        "read_table": [*me, "--read-table", str(part)],
    }


def time_once(command: list[str]) -> float:
    """Wall seconds of one run of ``command``."""
    return run_once(command)[0]


def run_once(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one run of ``command``."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    took = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, command)
    return took, usage.ru_maxrss / 1024  # KiB on Linux: MiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the log to generate")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data", default="bench-data/cli")
    parser.add_argument("--peer-dump", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--read-table", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer_dump:
        peer_dump(Path(args.peer_dump))
        return
    if args.read_table:
        plain_read_table(Path(args.read_table))
        return

    part = build_log_dir(Path(args.data) / f"{args.mb}mb", args.mb)
    size = sum(p.stat().st_size for p in part.glob("*.log"))
    records = int((part / ".complete").read_text())
    print(f"log: {part} ({size / 1e6:.0f} MB, {records:,} records)")
    runs = contenders(part)
    times: dict[str, list[float]] = {name: [] for name in runs}
    peak: dict[str, float] = dict.fromkeys(runs, 0.0)
    for round_number in range(args.repeat):
        for name, command in runs.items():
            took, rss = run_once(command)
            times[name].append(took)
            peak[name] = max(peak[name], rss)
        print(
            f"round {round_number + 1}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items())
        )
    best = {name: min(t) for name, t in times.items()}
    print(f"\n{'contender':<22} {'best':>8} {'median':>8} {'MB/s':>8} {'peak RSS':>9}")
    for name, t in times.items():
        rate = size / 1e6 / best[name]
        print(
            f"{name:<22} {best[name]:>7.2f}s {statistics.median(t):>7.2f}s {rate:>8.1f} "
            f"{peak[name]:>5.0f} MiB"
        )
    dump_ratio = best["dump (kafka-python)"] / best["dump (ours)"]
    print(f"\ndump throughput vs kafka-python dumper: {dump_ratio:.1f}x (target >= 5)")
    for name in ("verify", "stats", "rebuild-index"):
        ratio = best[name] / best["read_table"]
        target = " (target <= 2)" if name != "rebuild-index" else ""
        print(f"{name} time / read_table time: {ratio:.2f}{target}")


if __name__ == "__main__":
    main()
