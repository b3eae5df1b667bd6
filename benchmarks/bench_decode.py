"""Decode throughput of read_table against its peers, measured side by side in one run.

1. Uncompressed magic-2 log of 100-byte values (16-byte keys, producer-like 16 KiB batches),
   deep iteration, default columns, checksums verified: ``read_table`` vs aiokafka's
   C-accelerated record iteration (``MemoryRecords`` -> batches -> records, touching offset,
   timestamp, key and value; CRCs validated too). Run twice, each in its own process: with
   ``KAFKA_SEGMENTS_DS_THREADS=1`` (one thread, no read-ahead helper either: target ratio >= 5)
   and with the default threads (>= 6). Each also prints the CPU seconds a read takes on each
   side (all of a process's threads: with the default threads ours reads ahead on a helper
   thread) and their ratio, the per-core figure.
2. The same, cold: each side in a fresh process (default threads), three figures from one run:
   its first read with its library loaded (target >= 5: aiokafka's decoder is loaded by its
   import, ours lazily by the first call, so ours imports its read path before the clock
   starts), the library's import plus that read, and everything from an empty interpreter.
   Ours builds ~150 MB of Arrow buffers in memory new to its process, aiokafka next to none:
   on a VM that hands freed memory back to its host, how long that takes swings tenfold from
   one run to the next (``bench_fresh_memory.py`` measures it alone). So the same rounds also
   time a third fresh process that only writes buffers of our table's sizes in pyarrow's pool:
   aiokafka's cold read over that floor is the best cold ratio any decoder returning this table
   could reach in that run.
3. lz4 and zstd logs: ``read_table`` vs merely decompressing the same batches with the same codec
   library (the floor any decoder pays); for lz4 also vs cramjam (the other binding; a
   benchmark-only peer, in the test extras). Target: ratio >= 0.5.

Runs alternate (ours, peer, ours, peer, ...) so a noisy neighbour hurts both sides alike; each
side prints its median and spread (min-max) and the ratio is of the medians. Usage::

    python benchmarks/bench_decode.py [--records 1000000] [--repeat 5] [--data bench-data]
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import lz4.frame
import numpy as np
import zstandard

import kafka_segments_ds as ksd
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.compression import CompressionType, compress

BATCH_BYTES = 16 * 1024  # the Java producer's default batch.size
VALUE_BYTES = 100  # + a 16-byte key + ~14 bytes of record framing ~= 130 bytes a record


def build_log(path: Path, records: int, codec: int) -> None:
    """Write one segment with producer-like batches (aiokafka's C builder assembles records)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    value_list = sample_values()
    ts = 1_700_000_000_000
    offset = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        while offset < records:
            builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, BATCH_BYTES)
            base = offset
            while offset < records:
                key = b"key-%012d" % offset
                meta = builder.append(
                    offset - base, ts + offset // 100, key, value_list[offset % 4096], []
                )
                if meta is None:
                    break
                offset += 1
            batch = bytearray(builder.build())
            batch[0:8] = base.to_bytes(8, "big")
            if codec != CompressionType.NONE:
                batch = bytearray(_recompress(bytes(batch), codec))
            out.write(batch)
    os.replace(tmp, path)


def sample_values() -> list[bytes]:
    """4096 JSON-like values of VALUE_BYTES, the same in every run (records cycle through them)."""
    rng = np.random.default_rng(1)
    alphabet = np.frombuffer(b'abcdefghijklmnopqrstuvwxyz0123456789 ,:{}"', np.uint8)
    return [bytes(v) for v in alphabet[rng.integers(0, alphabet.shape[0], (4096, VALUE_BYTES))]]


def _recompress(batch: bytes, codec: int) -> bytes:
    from kafka_segments_ds.records.checksums import crc32c

    body = compress(codec, batch[61:], magic=2)
    header = bytearray(batch[:61])
    header[8:12] = (49 + len(body)).to_bytes(4, "big")
    attributes = int.from_bytes(header[21:23], "big") | codec
    header[21:23] = attributes.to_bytes(2, "big")
    out = header + body
    out[17:21] = crc32c(memoryview(out)[21:]).to_bytes(4, "big")
    return bytes(out)


def ours(path: Path) -> int:
    table = ksd.read_table(str(path))
    return int(table.num_rows)


def aiokafka_iterate(path: Path) -> int:
    from aiokafka.record.memory_records import MemoryRecords

    records = MemoryRecords(path.read_bytes())
    count = 0
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        if not batch.validate_crc():
            raise RuntimeError("crc")
        for record in batch:
            record.offset, record.timestamp, record.key, record.value  # noqa: B018
            count += 1
    return count


def decompress_only(path: Path, codec: int, binding: str = "lz4") -> int:
    data = path.read_bytes()
    table = scan_entries(data)
    view = memoryview(data)
    total = 0
    if codec == CompressionType.LZ4 and binding == "cramjam":
        import cramjam

        for p, s in zip(table.positions.tolist(), table.sizes.tolist(), strict=True):
            total += len(cramjam.lz4.decompress(view[p + 61 : p + s]))
    elif codec == CompressionType.LZ4:
        for p, s in zip(table.positions.tolist(), table.sizes.tolist(), strict=True):
            total += len(lz4.frame.decompress(view[p + 61 : p + s]))
    else:
        dctx = zstandard.ZstdDecompressor()
        for p, s in zip(table.positions.tolist(), table.sizes.tolist(), strict=True):
            total += len(dctx.decompressobj().decompress(view[p + 61 : p + s]))
    return total


def warm(path: Path) -> None:
    """Pull the file into the page cache (untimed): this host reclaims cold pages eagerly."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def timed(
    repeat: int, path: Path, *fns: Callable[[], int], cpu: list[list[float]] | None = None
) -> tuple[list[list[float]], list[int]]:
    """Each function's times over ``repeat`` alternating rounds, and its last result; ``cpu``,
    if given, gets each call's CPU seconds (all the process's threads: the per-core cost)."""
    times: list[list[float]] = [[] for _ in fns]
    if cpu is not None:
        cpu[:] = [[] for _ in fns]
    results = [0] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            warm(path)
            cpu_started = time.process_time()
            started = time.perf_counter()
            results[i] = fn()
            times[i].append(time.perf_counter() - started)
            if cpu is not None:
                cpu[i].append(time.process_time() - cpu_started)
    return times, results


def show(label: str, n: int, times: list[float]) -> None:
    """One side: records/s at the median time, the median and the spread."""
    med = statistics.median(times)
    print(
        f"  {label:<18} {n / med / 1e6:8.2f} M records/s  "
        f"(median {med:.3f} s, min {min(times):.3f}, max {max(times):.3f}, {len(times)} runs)"
    )


def show_cpu(label: str, seconds: list[float]) -> None:
    """One side's CPU seconds a read: the median and the spread."""
    med = statistics.median(seconds)
    print(f"  {label:<18} CPU {med:.3f} s a read (min {min(seconds):.3f}, max {max(seconds):.3f})")


def ratio(
    label: str, ours_times: list[float], peer_times: list[float], target: float | None
) -> None:
    r = statistics.median(peer_times) / statistics.median(ours_times)
    print(f"  {label:<18} {r:8.2f} x" + ("" if target is None else f"   (target >= {target:g})"))


def side_by_side(path: Path, repeat: int) -> dict[str, list[float]]:
    """Uncompressed: read_table and aiokafka, alternating (in this process)."""
    ours(path)  # the first read imports what read_table uses: not part of the steady figure
    cpu: list[list[float]] = []
    (t_ours, t_peer), (n_ours, n_peer) = timed(
        repeat, path, lambda: ours(path), lambda: aiokafka_iterate(path), cpu=cpu
    )
    assert n_ours == n_peer, (n_ours, n_peer)
    return {"ours": t_ours, "peer": t_peer, "ours_cpu": cpu[0], "peer_cpu": cpu[1]}


def cold_code(side: str) -> tuple[str, str, str]:
    """What a fresh process runs: (what the library stands on, the library's import, the first
    read). The two sides are timed alike: a side's library is its decoder fully loaded, as
    ``from aiokafka.record.memory_records import MemoryRecords`` loads aiokafka's; ours loads
    its read path lazily on the first call, so importing the package alone would leave that in
    our first read but aiokafka's import out of its own. Both processes stand on numpy and
    pyarrow (an Arrow user has them loaded; numpy's import also starts OpenBLAS's threads, which
    spin for a while): ours needs them, aiokafka does not, so only ours counts them in the
    "from nothing" figure."""
    if side == "ours":
        return (
            "import numpy, pyarrow",
            "import kafka_segments_ds as ksd\n"
            "from kafka_segments_ds import options, planning, reader, schema",
            "n = ksd.read_table(PATH).num_rows",
        )
    return (
        "import numpy, pyarrow\nfrom pathlib import Path",
        "from aiokafka.record.memory_records import MemoryRecords\n"
        + inspect.getsource(aiokafka_iterate),
        "n = aiokafka_iterate(Path(PATH))",
    )


def table_buffer_sizes(path: Path) -> list[int]:
    """The sizes of the distinct Arrow buffers ``read_table`` returns for ``path``."""
    table = ksd.read_table(str(path))
    seen: dict[int, int] = {}
    for column in table.columns:
        for chunk in column.chunks:
            for buffer in chunk.buffers():
                if buffer is not None:
                    seen[buffer.address] = buffer.size
    return list(seen.values())


def fresh_memory_code(sizes: list[int]) -> tuple[str, str, str]:
    """The floor under our cold read: a fresh process that only allocates, from pyarrow's default
    pool, buffers of the sizes our table holds and writes each byte once. Any decoder returning
    that table pays this; aiokafka, returning Python objects made as it goes, does not."""
    return (
        "import numpy, pyarrow",
        f"SIZES = {sizes!r}",
        "buffers = [pyarrow.allocate_buffer(s) for s in SIZES]\n"
        "for b in buffers:\n    numpy.frombuffer(b, numpy.uint8).fill(1)\n"
        "n = len(buffers)",
    )


def cold(path: Path, side: str, sizes: list[int] | None = None) -> tuple[float, float, float]:
    """(seconds of what the library stands on, of the library's import, of the first read) in
    a fresh interpreter."""
    base, library, read = fresh_memory_code(sizes or []) if side == "floor" else cold_code(side)
    code = (
        f"PATH = {str(path)!r}\nimport time\nt0 = time.perf_counter()\n{base}\n"
        f"t1 = time.perf_counter()\n{library}\nt2 = time.perf_counter()\n{read}\n"
        "t3 = time.perf_counter()\nprint(t1 - t0, t2 - t1, t3 - t2, n)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    took = out.stdout.split()
    return float(took[0]), float(took[1]), float(took[2])


def uncompressed(args: argparse.Namespace, plain: Path, size_mb: float) -> None:
    """Both thread settings (each in a child process), then the cold runs."""
    print(f"uncompressed v2, {args.records:,} records, {size_mb:.0f} MB")
    for threads, target in (("1", 5.0), ("", 6.0)):
        env = dict(os.environ)
        env.pop("KAFKA_SEGMENTS_DS_THREADS", None)
        if threads:
            env["KAFKA_SEGMENTS_DS_THREADS"] = threads
        argv = [sys.executable, __file__, "--child", "--records", str(args.records)]
        argv += ["--repeat", str(args.repeat), "--data", args.data]
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        t = json.loads(out.stdout.strip().splitlines()[-1])
        print(f" KAFKA_SEGMENTS_DS_THREADS={threads or 'unset (default threads)'}")
        show("read_table", args.records, t["ours"])
        show("aiokafka (C)", args.records, t["peer"])
        ratio("ratio", t["ours"], t["peer"], target)
        # per core: the CPU seconds of all the process's threads (ours reads ahead on a thread)
        show_cpu("read_table", t["ours_cpu"])
        show_cpu("aiokafka (C)", t["peer_cpu"])
        ratio("CPU ratio", t["ours_cpu"], t["peer_cpu"], None)
    # each side's (base, library import, first read) seconds, one fresh process a round
    sizes = table_buffer_sizes(plain)
    took: dict[str, list[tuple[float, float, float]]] = {"ours": [], "peer": [], "floor": []}
    for _ in range(args.repeat):
        for side in ("ours", "peer", "floor"):
            warm(plain)
            took[side].append(cold(plain, side, sizes))
    firsts = {side: [t[2] for t in took[side]] for side in took}  # the first read
    with_import = {side: [t[1] + t[2] for t in took[side]] for side in ("ours", "peer")}
    # from an empty interpreter: aiokafka does not need numpy and pyarrow
    everything = {
        "ours": [sum(t) for t in took["ours"]],
        "peer": [t[1] + t[2] for t in took["peer"]],
    }
    rows: list[tuple[str, dict[str, list[float]], float | None]] = [
        ("library loaded, its first read", firsts, 5.0),
        ("library import + first read", with_import, None),
        (
            "from nothing: numpy, pyarrow, library, first read (peer: library, read)",
            everything,
            None,
        ),
    ]
    for label, times, goal in rows:
        print(f" cold, a fresh process each (default threads): {label}")
        show("read_table", args.records, times["ours"])
        show("aiokafka (C)", args.records, times["peer"])
        ratio("ratio", times["ours"], times["peer"], goal)
    # the floor, in the same rounds: only writing our table's buffers, fresh, in pyarrow's pool
    floor = [t[2] for t in took["floor"]]
    print(
        f" cold floor: a fresh process writing {sum(sizes) / 1e6:.0f} MB of new buffers in "
        f"pyarrow's pool ({len(sizes)} buffers, the sizes of our table's), nothing else"
    )
    show("fresh memory only", args.records, floor)
    ratio("aiokafka / floor", floor, firsts["peer"], None)
    print("   (the best cold ratio any decoder returning this table could reach this run)")
    print(" cold, each round (three fresh processes one after another): seconds, and aiokafka's")
    for i, (mine, peer, least) in enumerate(
        zip(firsts["ours"], firsts["peer"], floor, strict=True), start=1
    ):
        print(
            f"  round {i}: read_table {mine:.3f}  aiokafka {peer:.3f}  floor {least:.3f}"
            f"   aiokafka / read_table {peer / mine:5.2f}  aiokafka / floor {peer / least:5.2f}"
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", default="bench-data")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    data = Path(args.data)
    plain = data / f"plain-{args.records}-v{VALUE_BYTES}" / "bench-0" / "00000000000000000000.log"
    build_log(plain, args.records, CompressionType.NONE)
    if args.child:  # one thread setting's side-by-side run, as JSON for the parent
        print(json.dumps(side_by_side(plain, args.repeat)))
        return 0
    uncompressed(args, plain, plain.stat().st_size / 1e6)

    for codec, name in ((CompressionType.LZ4, "lz4"), (CompressionType.ZSTD, "zstd")):
        path = (
            data / f"{name}-{args.records}-v{VALUE_BYTES}" / "bench-0" / "00000000000000000000.log"
        )
        build_log(path, args.records, codec)
        floors: list[tuple[str, Callable[[], int]]] = [
            ("decompress only", functools.partial(decompress_only, path, codec))
        ]
        if codec == CompressionType.LZ4:
            floors.append(
                ("cramjam only", functools.partial(decompress_only, path, codec, "cramjam"))
            )
        ours(path)
        times, (n, *_) = timed(
            args.repeat, path, functools.partial(ours, path), *(f for _, f in floors)
        )
        assert n == args.records
        print(f"{name}: {path.stat().st_size / 1e6:.0f} MB compressed (default threads)")
        show("read_table", n, times[0])
        for (label, _), t_floor in zip(floors, times[1:], strict=True):
            show(label, n, t_floor)
            ratio(f"ratio vs {label.split()[0]}", times[0], t_floor, 0.5)
    print(f"({os.getloadavg()[0]:.2f} load average at the end)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
