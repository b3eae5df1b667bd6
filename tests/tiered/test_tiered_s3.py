"""Tiered-storage buckets on a real S3-compatible server (moto on loopback): rows equal to the
log dir they were made from, and the requests a read makes per object, counted at the proxy of
test_remote_faults (never timed): pruning by names and manifests opens no ``.log`` it does not
read, an uncompressed Aiven ``.log`` is read like a broker segment, a chunked one only from the
chunk a read starts in."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds import index as kidx
from kafka_segments_ds.fs import read_file, resolve
from kafka_segments_ds.tiered.aiven import parse_manifest
from tests.support.s3proxy import Proxy, Request, start_proxy
from tests.support.tiered import partitions_of, rsa_key_pair, write_oracle_log_dir
from tests.support.upload import (
    Encryption,
    upload_aiven,
    upload_linkedin_azure,
    upload_local_tiered,
    upload_pinterest,
)

BUCKET = "tiered"
AZURE_TOPIC_IDS = {"events": uuid.UUID(int=1), "clicks.v2": uuid.UUID(int=2)}


@pytest.fixture(scope="module")
def bucket(
    moto_s3: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[dict[str, str], Proxy, Path, dict[str, str]]]:
    """(options via the counting proxy, the proxy, the source log dir, private-key option)."""
    source = write_oracle_log_dir(tmp_path_factory.mktemp("s3-tiered-src"))
    public, private = rsa_key_pair(tmp_path_factory.mktemp("s3-keys"))
    with moto_s3(BUCKET) as (direct, moto_host, moto_port):
        for i, (directory, topic, partition) in enumerate(partitions_of(source)):
            upload_aiven(directory, direct, f"{BUCKET}/plain/", topic, partition, seed=i)
            upload_aiven(
                directory, direct, f"{BUCKET}/chunked/", topic, partition, seed=i,
                compression=True, chunk_size=1000, encryption=Encryption("kp", public),
            )  # fmt: skip
            upload_local_tiered(directory, direct, f"{BUCKET}/lts", topic, partition, seed=i)
            upload_pinterest(
                directory, direct, f"{BUCKET}/pin", "c1", topic, partition, hash_bits=f"{i % 2}"
            )
            upload_linkedin_azure(
                directory, direct, f"{BUCKET}/azure", AZURE_TOPIC_IDS[topic], partition, seed=i
            )
        proxy, options = start_proxy(moto_host, moto_port)
        try:
            yield options, proxy, source, {"privateKeys": json.dumps({"kp": str(private)})}
        finally:
            proxy.shutdown()


def _rows(table: Any) -> list[dict[str, Any]]:
    if "segment" in table.column_names:
        table = table.drop_columns(["segment"])
    return table.to_pylist()


def _read(bucket: Any, prefix: str, **extra: Any) -> tuple[list[dict[str, Any]], list[Request]]:
    options, proxy, _, keys = bucket
    proxy.requests.clear()
    table = ksd.read_table(f"s3://{BUCKET}/{prefix}", **options, **keys, **extra)
    return _rows(table), list(proxy.requests)


def _by_object(requests: list[Request], suffix: str) -> dict[str, list[tuple[str, str | None]]]:
    """Requests per Aiven object, named ``<topic>-<partition>/<base offset 20 digits>``."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for r in requests:
        if r.key.endswith(suffix):
            topic_dir, partition, name = r.key.rsplit("/", 3)[1:]
            key = f"{topic_dir[:-23]}-{partition}/{name[:20]}"
            out.setdefault(key, []).append((r.method, r.range))
    return out


def _base(key: str) -> int:
    return int(key.rsplit("/", 1)[1])


@pytest.mark.parametrize("prefix", ["plain", "chunked", "lts"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"iteration": "shallow", "includeMetadata": True},
        {"startingOffsets": '{"events":{"0":100,"1":333}}', "subscribe": "events"},
        {"startingTimestamp": 1_700_000_003_000},
    ],
    ids=["all", "shallow", "startingOffsets", "startingTimestamp"],
)
def test_s3_bucket_reads_like_the_log_dir(
    bucket: Any, prefix: str, options: dict[str, Any]
) -> None:
    rows, _ = _read(bucket, prefix, **options)
    expected = _rows(ksd.read_table(str(bucket[2]), **options))
    assert rows == expected and rows


@pytest.mark.parametrize(
    "options",
    [{}, {"startingOffsets": '{"events":{"0":100,"1":333}}', "subscribe": "events"}],
    ids=["all", "startingOffsets"],
)
def test_s3_raw_uploader_layouts_read_like_the_log_dir(
    bucket: Any, options: dict[str, Any]
) -> None:
    """pinterest (hash bits, cluster) and linkedin's Azure naming (container per topic id:
    the ``topic`` column holds the id) on S3."""
    expected = _rows(ksd.read_table(str(bucket[2]), **options))
    rows, _ = _read(bucket, "pin", layout="pinterest", **options)
    assert rows == expected and rows
    names = {str(v): k for k, v in AZURE_TOPIC_IDS.items()}
    by_id = {"subscribe": str(AZURE_TOPIC_IDS["events"])} if "subscribe" in options else {}
    if "startingOffsets" in options:
        by_id["startingOffsets"] = options["startingOffsets"].replace(
            "events", str(AZURE_TOPIC_IDS["events"])
        )
    rows, _ = _read(bucket, "azure", layout="linkedin-azure", **by_id)
    renamed = [{**r, "topic": names[r["topic"]]} for r in rows]
    key = lambda r: (r["topic"], r["partition"], r["offset"])  # noqa: E731
    assert sorted(renamed, key=key) == sorted(expected, key=key)


def test_uncompressed_aiven_logs_are_read_like_broker_segments(bucket: Any) -> None:
    _, requests = _read(bucket, "plain")
    logs = _by_object(requests, ".log")
    sizes = {f"{p.parent.name}/{p.stem}": p.stat().st_size for p in bucket[2].rglob("*.log")}
    assert logs.keys() == sizes.keys()
    for name, calls in logs.items():
        size = sizes[name]
        assert calls == [("HEAD", None), ("GET", f"bytes=0-{size - 1}")], name
    assert not _by_object(requests, ".indexes")  # a full read needs no index
    manifests = _by_object(requests, ".rsm-manifest")
    assert len(manifests) == len(logs) and all(len(c) == 2 for c in manifests.values())


def test_starting_offsets_open_no_log_before_the_start(bucket: Any) -> None:
    start = 333
    _, requests = _read(
        bucket,
        "plain",
        startingOffsets=json.dumps({"events": {"0": start}}),
        assign='{"events":[0]}',
    )
    bases = sorted(int(p.stem) for p in (bucket[2] / "events-0").glob("*.log"))
    first = max(b for b in bases if b <= start)
    opened = sorted(_base(name) for name in _by_object(requests, ".log"))
    assert opened == [b for b in bases if b >= first]
    assert len(opened) < len(bases)


def test_starting_timestamp_skips_segments_by_manifest_max_timestamp(bucket: Any) -> None:
    target = 1_700_000_004_000
    _, requests = _read(bucket, "plain", startingTimestamp=target, assign='{"events":[0]}')
    directory = bucket[2] / "events-0"
    bases = sorted(int(p.stem) for p in directory.glob("*.log"))
    max_ts = {
        b: int(
            kidx.parse_time_index(
                (directory / f"{b:020d}.timeindex").read_bytes(), b
            ).timestamps.max()
        )
        if (directory / f"{b:020d}.timeindex").stat().st_size
        else None
        for b in bases
    }
    opened = sorted(_base(name) for name in _by_object(requests, ".log"))
    assert opened and opened[0] > bases[0]
    # every segment before the first one reaching the target was skipped unopened
    first = min(_base(name) for name in _by_object(requests, ".log"))
    assert all(b >= first for b in opened)
    assert all(
        ts is None or ts < target for b, ts in max_ts.items() if b < first and ts is not None
    )


def test_chunked_read_starts_at_the_chunk_holding_the_start(bucket: Any) -> None:
    # a start inside a segment whose .index points past its first chunks: no byte of the
    # chunks before is fetched
    directory = bucket[2] / "events-0"
    for path in sorted(directory.glob("*.index")):
        index = kidx.parse_offset_index(path.read_bytes(), int(path.stem))
        if index.positions.shape[0] and int(index.positions[-1]) >= 2000:
            base, offset = int(path.stem), int(index.offsets[-1])
            position = int(index.positions[-1])
            break
    else:
        pytest.fail("no segment with an index entry past byte 2000")
    rows, requests = _read(
        bucket,
        "chunked",
        startingOffsets=json.dumps({"events": {"0": offset}}),
        assign='{"events":[0]}',
    )
    assert rows[0]["offset"] == offset
    calls = _by_object(requests, ".log")[f"events-0/{base:020d}"]
    ranges = [int(r.split("=")[1].split("-")[0]) for m, r in calls if m == "GET" and r]
    # the stored chunks come from the manifest: the first byte fetched starts the chunk that
    # holds the index position (chunk size 1000), nothing before it
    manifest_key = next(
        r.key for r in requests if r.key.endswith(".rsm-manifest") and f"/0/{base:020d}-" in r.key
    )
    filesystem, path = resolve(f"s3:/{manifest_key}", bucket[0])
    manifest = parse_manifest(read_file(filesystem, path).to_pybytes(), None, 1 << 40)
    chunk = position // 1000
    assert chunk >= 2
    assert min(ranges) == int(manifest.chunks.transformed_starts[chunk])
