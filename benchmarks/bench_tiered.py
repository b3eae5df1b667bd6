"""Reading tiered-storage buckets against reading the same segments as a plain log dir.

Builds a log dir (``kafka_segments_ds.samples``: lz4/zstd/uncompressed batches, headers, legacy
messages) and uploads it twice the way Aiven's plugin stores it, on the same local disk:
uncompressed (``.log`` objects byte-identical to the broker's) and zstd-chunked. Then, in the
same run, alternating, it times ``read_table`` of

* the plain log dir,
* the uncompressed Aiven bucket            -> ratio to the plain read (target <= 1.2),
* the zstd-chunked Aiven bucket            -> ratio to (plain read + decompressing its chunks),

and the time to just read and zstd-decompress every chunk of the chunked bucket. Medians of
``--rounds`` rounds are reported; the load (``uptime``) is printed before and after.

``--s3`` puts the log dir and both buckets on a loopback S3 server (moto, from the test extra)
instead and reads them through it: the same storage for all three again.

Usage::

    python benchmarks/bench_tiered.py [--records 120000] [--chunk-mb 4] [--rounds 5]
                                      [--data bench-data]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import zstandard

from kafka_segments_ds import read_table
from kafka_segments_ds.fs import resolve
from kafka_segments_ds.samples import write_sample_log_dir
from kafka_segments_ds.tiered.aiven import parse_manifest

# the bucket writer is a test helper (tests/support/upload.py), not part of the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.upload import upload_aiven


def build(root: Path, records: int, chunk: int) -> tuple[Path, Path, Path]:
    logs, plain, chunked = root / "logs", root / "aiven-plain", root / "aiven-zstd"
    marker = root / ".complete"
    if not marker.exists():
        write_sample_log_dir(logs, records_per_partition=records, segment_bytes=16 << 20)
        local = pafs.LocalFileSystem()
        for i, directory in enumerate(sorted(p for p in logs.iterdir() if p.is_dir())):
            topic, _, partition = directory.name.rpartition("-")
            if not partition.isdigit():
                continue
            upload_aiven(
                directory, local, f"{plain}/", topic, int(partition), chunk_size=chunk, seed=i
            )
            upload_aiven(
                directory, local, f"{chunked}/", topic, int(partition), chunk_size=chunk, seed=i,
                compression=True,
            )  # fmt: skip
        marker.write_text("ok")
    return logs, plain, chunked


def decompress_all(filesystem: pafs.FileSystem, bucket: str) -> int:
    """Read every stored chunk of every segment (one ranged read each) and zstd-decompress it;
    returns the bytes out."""
    out = 0
    decompressor = zstandard.ZstdDecompressor()
    listing = filesystem.get_file_info(pafs.FileSelector(bucket, recursive=True))
    sizes = {i.path: i.size for i in listing}
    for path in sizes:
        if not path.endswith(".rsm-manifest"):
            continue
        stem = path[: -len(".rsm-manifest")]
        with filesystem.open_input_file(path) as f:
            data = f.read()
        manifest = parse_manifest(data, sizes[stem + ".log"], sizes[stem + ".indexes"])
        starts = manifest.chunks.transformed_starts
        with filesystem.open_input_file(stem + ".log") as f:
            for i in range(manifest.chunks.count):
                stored = f.read_at(int(starts[i + 1] - starts[i]), int(starts[i]))
                out += len(decompressor.decompress(stored))
    return out


def on_s3(logs: Path, plain: Path, chunked: Path) -> tuple[object, dict[str, str], list[str]]:
    """Copy the three trees to a loopback moto S3 server: (server, options, URIs)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    filesystem = pafs.S3FileSystem(
        access_key="bench", secret_key="bench", region="us-east-1",
        endpoint_override=f"{host}:{port}", scheme="http", allow_bucket_creation=True,
    )  # fmt: skip
    filesystem.create_dir("bench")
    local = pafs.LocalFileSystem()
    for tree in (logs, plain, chunked):
        pafs.copy_files(str(tree), f"bench/{tree.name}", local, filesystem)
    options = {
        "fs.s3.endpoint": f"http://{host}:{port}",
        "fs.s3.accessKey": "bench",
        "fs.s3.secretKey": "bench",
        "fs.s3.region": "us-east-1",
    }
    return server, options, [f"s3://bench/{t.name}" for t in (logs, plain, chunked)]


def uptime() -> str:
    return os.popen("uptime").read().strip()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=120_000, help="records per partition")
    parser.add_argument("--chunk-mb", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--data", default="bench-data")
    parser.add_argument("--s3", action="store_true", help="read through a loopback S3 server")
    args = parser.parse_args(argv)
    chunk = int(args.chunk_mb * (1 << 20))
    root = Path(args.data) / f"tiered-{args.records}-{chunk}"
    logs, plain, chunked = build(root, args.records, chunk)
    size = sum(p.stat().st_size for p in logs.rglob("*.log"))
    stored = sum(p.stat().st_size for p in chunked.rglob("*.log"))
    print(
        f"{size / 2**20:.1f} MiB of segments; zstd-chunked bucket stores {stored / 2**20:.1f} MiB"
        f" in {chunk / 2**20:g} MiB chunks"
    )
    options: dict[str, Any] = {}
    uris = [str(logs), str(plain), str(chunked)]
    filesystem, chunked_path = pafs.LocalFileSystem(), str(chunked.resolve())
    server = None
    if args.s3:
        server, options, uris = on_s3(logs, plain, chunked)
        filesystem, chunked_path = resolve(uris[2], options)
        print("storage: loopback S3 (moto)")
    print("load before:", uptime())
    cases = {
        "plain log dir": lambda: read_table(uris[0], **options).num_rows,
        "aiven uncompressed": lambda: read_table(uris[1], **options).num_rows,
        "aiven zstd chunks": lambda: read_table(uris[2], **options).num_rows,
        "decompress chunks only": lambda: decompress_all(filesystem, chunked_path),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    results: dict[str, int] = {}
    for name, run in cases.items():  # warm-up (page cache, imports)
        results[name] = run()
    assert results["plain log dir"] == results["aiven uncompressed"] == results["aiven zstd chunks"]
    for _ in range(args.rounds):
        for name, run in cases.items():
            started = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - started)
    print("load after: ", uptime())
    median = {name: statistics.median(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"  {name:<24} median {median[name]:7.3f} s   runs {' '.join(f'{x:.3f}' for x in t)}")
    base = median["plain log dir"]
    ratio_plain = median["aiven uncompressed"] / base
    ratio_zstd = median["aiven zstd chunks"] / (base + median["decompress chunks only"])
    print(
        f"aiven uncompressed / plain log dir                 = {ratio_plain:.3f}  (target <= 1.2)"
    )
    print(f"aiven zstd chunks / (plain + decompressing chunks) = {ratio_zstd:.3f}  (target <= 1.0)")
    print(
        json.dumps(
            {
                "rows": results["plain log dir"],
                "ratio_uncompressed": round(ratio_plain, 3),
                "ratio_zstd": round(ratio_zstd, 3),
            }
        )
    )
    if server is not None:
        server.stop()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
