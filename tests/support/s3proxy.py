"""A proxy in front of an S3 server (moto, loopback) that records every request and injects one
kind of fault into ranged GETs of ``.log`` objects: HTTP 500/503 answers, slow answers, bodies
cut off before their declared length, and "short" answers (a 206 whose Content-Range covers
fewer bytes than were asked)."""

from __future__ import annotations

import http.client
import http.server
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from kafka_segments_ds.samples import write_sample_log_dir

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


class Proxy(http.server.ThreadingHTTPServer):
    daemon_threads = True
    upstream: tuple[str, int]
    fault: Fault
    lock: threading.Lock
    requests: list[Request]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Proxy

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


def start_proxy(moto_host: str, moto_port: int) -> tuple[Proxy, dict[str, str]]:
    """A proxy in front of moto, serving on a thread (``proxy.shutdown()`` stops it), and the
    reader options pointing at it."""
    proxy = Proxy(("127.0.0.1", 0), _Handler)
    proxy.upstream = (moto_host, moto_port)
    proxy.fault = Fault()
    proxy.lock = threading.Lock()
    proxy.requests = []
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    host, port = proxy.server_address[:2]
    return proxy, {**CREDENTIALS, "fs.s3.endpoint": f"http://{host}:{port}"}
