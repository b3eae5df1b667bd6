"""Remote faults: an S3 server (moto, loopback) behind a proxy that damages object reads.

The proxy forwards every request to moto and, for ranged GETs of ``.log`` objects, injects one
fault a set number of times (or always): HTTP 500/503 answers, slow answers, bodies cut off
before their declared length, and "short" answers (a 206 whose Content-Range covers fewer bytes
than were asked). The outcome must be the full table (pyarrow retried, or we read again) or an
error -- never fewer rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import ChecksumError, InvalidOptionError, StorageError
from kafka_segments_ds.fs import resolve
from tests.support.s3proxy import CREDENTIALS, Fault, start_proxy, upload_sample

BUCKET = "faulty"


@pytest.fixture(scope="module")
def servers(
    moto_s3,
    tmp_path_factory: pytest.TempPathFactory,  # type: ignore[no-untyped-def]
) -> Iterator[tuple[dict[str, str], Fault, pa.Table]]:
    """(reader options pointing at the proxy, the fault switch, the archive read locally)."""
    with moto_s3(BUCKET) as (direct, moto_host, moto_port):
        yield from _serve(direct, moto_host, moto_port, tmp_path_factory)


def _serve(
    direct: pafs.S3FileSystem,
    moto_host: str,
    moto_port: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, str], Fault, pa.Table]]:
    root = upload_sample(direct, BUCKET, tmp_path_factory.mktemp("faults"))
    proxy, options = start_proxy(moto_host, moto_port)
    try:
        yield options, proxy.fault, ksd.read_table(str(root))
    finally:
        proxy.shutdown()


def _read(options: dict[str, str], **extra: Any) -> pa.Table:
    return ksd.read_table(f"s3://{BUCKET}/logs", **options, **extra)


def _same(remote: pa.Table, local: pa.Table) -> None:
    assert remote.num_rows == local.num_rows
    assert remote.select(["topic", "partition", "offset", "key", "value"]).equals(
        local.select(["topic", "partition", "offset", "key", "value"])
    )


@pytest.fixture
def faulty(
    servers: tuple[dict[str, str], Fault, pa.Table],
) -> Iterator[tuple[dict[str, str], Fault, pa.Table]]:
    yield servers
    servers[1].kind, servers[1].times, servers[1].injected = "none", 0, 0


@pytest.mark.parametrize(
    ("kind", "status", "attempts"),
    [
        ("status", 503, None),
        ("status", 500, "4"),
        ("slow", 503, None),
        ("cut", 503, None),
        ("short", 503, None),
    ],
)
def test_transient_faults_are_retried(
    faulty: tuple[dict[str, str], Fault, pa.Table], kind: str, status: int, attempts: str | None
) -> None:
    options, fault, local = faulty
    fault.kind, fault.status, fault.times = kind, status, 2
    extra = {} if attempts is None else {"fs.s3.maxAttempts": attempts}
    _same(_read(options, **extra), local)
    assert (fault.injected, fault.times) == (2, 0)


def test_persistent_short_answers_fail_the_checksum(
    faulty: tuple[dict[str, str], Fault, pa.Table],
) -> None:
    """pyarrow pads a 206 answer shorter than its range to the length asked, so a short read
    is not visible as such: the batch checksums catch it (FAILFAST)."""
    options, fault, _ = faulty
    fault.kind, fault.times = "short", -1
    with pytest.raises(ChecksumError) as info:
        _read(options)
    assert info.value.path is not None and info.value.path.startswith(f"s3://{BUCKET}/logs/")


@pytest.mark.parametrize("kind", ["status", "cut"])
def test_persistent_faults_are_clear_errors(
    faulty: tuple[dict[str, str], Fault, pa.Table], kind: str
) -> None:
    options, fault, _ = faulty
    fault.kind, fault.status, fault.times = kind, 500, -1
    for mode in ("FAILFAST", "DROPMALFORMED"):  # no mode turns a failed read into fewer rows
        with pytest.raises(StorageError) as info:
            _read({**options, "fs.s3.maxAttempts": "2"}, mode=mode)
        err = info.value
        assert isinstance(err, OSError)
        assert err.path is not None
        assert err.path.startswith(f"s3://{BUCKET}/logs/") and err.path.endswith(".log")
        assert err.position is not None and err.position >= 0
    assert fault.injected >= 2


def test_retry_options_are_validated() -> None:
    for key, value in (
        ("fs.s3.maxAttempts", "0"),
        ("fs.s3.maxAttempts", "many"),
        ("fs.s3.requestTimeout", "-1"),
        ("fs.s3.retryStrategy", "eager"),
    ):
        with pytest.raises(InvalidOptionError, match=key.split(".")[-1]):
            resolve("s3://bucket/x", {**CREDENTIALS, key: value})
    filesystem, _ = resolve(
        "s3://bucket/x", {**CREDENTIALS, "fs.s3.maxAttempts": "7", "fs.s3.requestTimeout": "2.5"}
    )
    assert isinstance(filesystem, pafs.S3FileSystem)
