"""The command line reads each record once, whatever the path list (issue 23): every path
resolved, overlapping ones merged; no Kafka data is exit status 2."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from kafka_segments_ds.cli import main
from kafka_segments_ds.samples import write_sample_log_dir


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_log_dir(
        tmp_path_factory.mktemp("cli-paths") / "logs", records_per_partition=50, segment_bytes=4096
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main([*argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_dump_reads_overlapping_paths_once(
    logs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status, whole, _ = _run(capsys, "dump", str(logs))
    assert status == 0
    assert len(whole.splitlines()) == 199
    monkeypatch.chdir(logs.parent)
    monkeypatch.setenv("HOME", str(logs.parent))
    status, out, _ = _run(
        capsys, "dump", str(logs), "logs/orders-0", "~/logs/orders-1", f"file://{logs}"
    )
    assert status == 0
    assert out == whole
    status, out, _ = _run(capsys, "dump", "logs/orders-0", "logs/orders-0/")
    rows = [json.loads(line) for line in out.splitlines()]
    assert (status, len(rows)) == (0, 50)
    assert [r["offset"] for r in rows] == sorted({r["offset"] for r in rows})


def test_stats_and_verify_count_each_partition_once(
    logs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = _run(capsys, "stats", str(logs / "orders-0"), str(logs), "--format", "jsonl")
    stats = [json.loads(line) for line in out.splitlines()]
    assert status == 0
    assert sorted((s["topic"], s["partition"], s["records"]) for s in stats) == [
        ("legacy.events", 0, 50),
        ("metrics-v1", 0, 50),
        ("orders", 0, 50),
        ("orders", 1, 49),
    ]
    status, out, _ = _run(capsys, "verify", str(logs), str(logs / "orders-0"), str(logs))
    assert status == 0
    assert out.splitlines()[-1] == (
        "verify: 14 files checked (4 .log, 10 index) in 4 partitions: 14 ok, 0 notes, "
        "0 index problems, 0 damaged, 0 unreadable; exit status 0"
    )


def test_no_kafka_data_is_exit_status_2(
    logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = _run(capsys, "dump", str(logs.parent))
    assert status == 2
    assert err.startswith(f"kafka-segments: error: {logs.parent}: no Kafka log segments")
    status, _, err = _run(capsys, "dump", str(logs), "--option", "subscribe=nope")
    assert status == 2
    assert err == (
        "kafka-segments: error: subscribe names topics that are not in the archive: nope; "
        "topics there: legacy.events, metrics-v1, orders\n"
    )


def test_an_unreachable_store_is_exit_status_2_naming_the_endpoint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])  # nothing listens there once closed
    options = {
        "fs.s3.endpoint": f"http://127.0.0.1:{port}",
        "fs.s3.accessKey": "AKIAIOSFODNN7EXAMPLE",
        "fs.s3.secretKey": "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY",
        "fs.s3.maxAttempts": "1",
    }
    argv = ["dump", "s3://archive/logs"]
    for key, value in options.items():
        argv += ["--option", f"{key}={value}"]
    status, out, err = _run(capsys, *argv)
    assert (status, out) == (2, "")
    assert err.startswith(
        f"kafka-segments: error: cannot read the storage at endpoint http://127.0.0.1:{port}: "
    )
    assert err.endswith("(file s3://archive/logs)\n")
    assert options["fs.s3.secretKey"] not in err and options["fs.s3.accessKey"] not in err
