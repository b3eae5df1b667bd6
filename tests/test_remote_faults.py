"""Remote faults: an S3 server (moto, loopback) behind a proxy that damages object reads.

The proxy forwards every request to moto and, for ranged GETs of ``.log`` objects, injects one
fault a set number of times (or always): HTTP 500/503 answers, slow answers, bodies cut off
before their declared length, and "short" answers (a 206 whose Content-Range covers fewer bytes
than were asked). The outcome must be the full table (pyarrow retried, or we read again) or an
error -- never fewer rows.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import ChecksumError, InvalidOptionError, StorageError
from kafka_segments_ds.fs import resolve
from kafka_segments_ds.samples import write_sample_log_dir

BUCKET = "faulty"
CREDENTIALS = {
    "fs.s3.accessKey": "testing",
    "fs.s3.secretKey": "testing",
    "fs.s3.region": "us-east-1",
}
ERROR_BODY = b"<Error><Code>{code}</Code><Message>injected</Message></Error>"


@dataclass
class Fault:
    kind: str = "none"  # none | status | slow | cut | short
    times: int = 0  # how many matching GETs get it (-1: all)
    status: int = 503
    injected: int = 0


@dataclass(frozen=True)
class Request:
    """One request the proxy forwarded: method, object key (no query), the query, the Range."""

    method: str
    key: str
    query: str
    range: str | None


class _Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True
    upstream: tuple[str, int]
    fault: Fault
    lock: threading.Lock
    requests: list[Request]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Proxy

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _take_fault(self) -> str:
        fault = self.server.fault
        if self.command != "GET" or "Range" not in self.headers or ".log" not in self.path:
            return "none"
        with self.server.lock:
            if fault.times == 0:
                return "none"
            if fault.times > 0:
                fault.times -= 1
            fault.injected += 1
            return fault.kind

    def _forward(self) -> None:
        key, _, query = self.path.partition("?")
        with self.server.lock:
            self.server.requests.append(
                Request(self.command, key, query, self.headers.get("Range"))
            )
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        kind = self._take_fault()
        if kind == "status":
            status = self.server.fault.status
            code = "SlowDown" if status == 503 else "InternalError"
            payload = ERROR_BODY.replace(b"{code}", code.encode())
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if kind == "slow":
            time.sleep(0.3)
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        upstream.request(self.command, self.path, body=body, headers=headers)
        response = upstream.getresponse()
        data = response.read()
        upstream.close()
        out_headers = [
            (k, v)
            for k, v in response.getheaders()
            if k.lower() not in ("transfer-encoding", "connection", "content-length")
        ]
        if kind == "short" and response.status == 206 and len(data) > 1:
            keep = len(data) // 2
            first = int(response.getheader("Content-Range", "bytes 0-0/0").split()[1].split("-")[0])
            total = response.getheader("Content-Range", "/0").rsplit("/", 1)[1]
            data = data[:keep]
            out_headers = [(k, v) for k, v in out_headers if k.lower() != "content-range"]
            out_headers.append(("Content-Range", f"bytes {first}-{first + keep - 1}/{total}"))
        self.send_response(response.status)
        for key, value in out_headers:
            self.send_header(key, value)
        # a HEAD answer carries the object's length (pyarrow takes the file size from it)
        head_length = response.getheader("Content-Length", "0")
        self.send_header(
            "Content-Length", head_length if self.command == "HEAD" else str(len(data))
        )
        if kind == "cut":
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data[: len(data) // 2] if kind == "cut" else data)
        if kind == "cut":
            self.close_connection = True

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


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


def upload_sample(direct: pafs.S3FileSystem, bucket: str, tmp: Path) -> Path:
    """Write the sample log dir (several segments per partition) under ``tmp`` and copy it to
    ``bucket/logs``; returns the local copy."""
    root = write_sample_log_dir(tmp, records_per_partition=300, segment_bytes=16 * 1024)
    pafs.copy_files(
        str(root),
        f"{bucket}/logs",
        source_filesystem=pafs.LocalFileSystem(),
        destination_filesystem=direct,
    )
    return root


def start_proxy(moto_host: str, moto_port: int) -> tuple[_Proxy, dict[str, str]]:
    """A proxy in front of moto, serving on a thread (``proxy.shutdown()`` stops it), and the
    reader options pointing at it."""
    proxy = _Proxy(("127.0.0.1", 0), _Handler)
    proxy.upstream = (moto_host, moto_port)
    proxy.fault = Fault()
    proxy.lock = threading.Lock()
    proxy.requests = []
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    host, port = proxy.server_address[:2]
    return proxy, {**CREDENTIALS, "fs.s3.endpoint": f"http://{host}:{port}"}


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
