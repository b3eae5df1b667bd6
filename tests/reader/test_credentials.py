"""Credentials are never shown (issue 23): reprs of parsed options, messages and logs redact
every secret-bearing option, as Spark's spark.redaction.regex does; a store that cannot be
reached is a StorageError naming the URI and the endpoint, without credentials."""

from __future__ import annotations

import logging
import pickle
import socket
from pathlib import Path

import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import NoKafkaDataError, StorageError
from kafka_segments_ds.fs import REDACTED, is_secret_option, redact, scrub
from kafka_segments_ds.options import parse_read_options, parse_stream_options
from kafka_segments_ds.writer.options import parse_write_options

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
ACCESS = "AKIAIOSFODNN7EXAMPLE"
TOKEN = "FQoGZXIvYXdzEXAMPLETOKEN"
STORAGE = {
    "fs.s3.accessKey": ACCESS,
    "fs.s3.secretKey": SECRET,
    "fs.s3.sessionToken": TOKEN,
    "fs.s3.region": "eu-west-1",
}


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("fs.s3.secretKey", True),
        ("fs.s3.accessKey", True),
        ("fs.s3.sessionToken", True),
        ("fs.azure.account.key", True),
        ("fs.azure.sas.token", True),
        ("fs.azure.sas", True),
        ("fs.gcs.credentials", True),
        ("fs.hdfs.password", True),
        ("fs.s3.endpoint", False),
        ("fs.s3.region", False),
        ("privateKeys", False),
        ("fs.s3.maxAttempts", False),
        ("fs.s3.scheme", False),
        ("fs.s3.classes", False),  # 'sas' only as a whole word
    ],
)
def test_secret_option_names(key: str, secret: bool) -> None:
    assert is_secret_option(key) is secret


def test_read_options_repr_redacts_credentials() -> None:
    options = parse_read_options(
        {**STORAGE, "fs.s3.endpoint": "http://127.0.0.1:9000", "subscribe": "orders"}
    )
    shown = repr(options)
    for value in (SECRET, ACCESS, TOKEN):
        assert value not in shown
    assert (
        "storage=(('fs.s3.accesskey', '*********(redacted)'), ('fs.s3.endpoint', "
        "'http://127.0.0.1:9000'), ('fs.s3.region', 'eu-west-1'), ('fs.s3.secretkey', "
        "'*********(redacted)'), ('fs.s3.sessiontoken', '*********(redacted)'))"
    ) in shown
    assert shown.startswith("ReadOptions(iteration='deep', subscribe=('orders',), ")
    assert options.storage_options()["fs.s3.secretkey"] == SECRET  # the value itself is kept
    assert pickle.loads(pickle.dumps(options)) == options
    stream_options, _ = parse_stream_options(STORAGE)
    assert SECRET not in repr(stream_options) and SECRET not in str(stream_options)


def test_write_options_repr_redacts_credentials() -> None:
    options = parse_write_options({**STORAGE, "topic": "t"})
    shown = repr(options)
    assert SECRET not in shown and ACCESS not in shown and TOKEN not in shown
    assert "('fs.s3.secretkey', '*********(redacted)')" in shown
    assert shown.startswith("WriteOptions(topic='t', ")


def test_redact_and_scrub() -> None:
    pairs = (("fs.s3.secretKey", "x" * 8), ("fs.s3.region", "r"))
    assert redact(pairs) == (("fs.s3.secretKey", REDACTED), ("fs.s3.region", "r"))
    assert scrub(f"bad key {SECRET} at r", STORAGE) == f"bad key {REDACTED} at r"


def _closed_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_store_is_a_storage_error(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    endpoint = f"http://127.0.0.1:{port}"
    options = {**STORAGE, "fs.s3.endpoint": endpoint, "fs.s3.maxAttempts": "1"}
    with caplog.at_level(logging.DEBUG), pytest.raises(StorageError) as info:
        ksd.read_table("s3://archive/logs", **options)
    message = str(info.value)
    assert message.startswith(f"cannot read the storage at endpoint {endpoint}: ")
    assert message.endswith("(file s3://archive/logs)")
    assert info.value.path == "s3://archive/logs"
    for value in (SECRET, ACCESS, TOKEN):
        assert value not in message
        assert value not in caplog.text
    clone = pickle.loads(pickle.dumps(info.value))
    assert (type(clone), str(clone)) == (StorageError, message)


def test_an_unreachable_store_in_a_path_list(tmp_path: Path) -> None:
    port = _closed_port()
    options = {**STORAGE, "fs.s3.endpoint": f"127.0.0.1:{port}", "fs.s3.scheme": "http"}
    options["fs.s3.maxAttempts"] = "1"
    with pytest.raises(
        StorageError, match=rf"^cannot read the storage at endpoint 127.0.0.1:{port}"
    ):
        ksd.read_table(["s3://archive/a", "s3://archive/b"], **options)


def test_a_reachable_store_reads(moto_s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.fs as pafs

    from kafka_segments_ds.samples import write_sample_log_dir

    root = write_sample_log_dir(tmp_path / "src", records_per_partition=20, segment_bytes=4096)
    with moto_s3("archive") as (filesystem, host, port):
        pafs.copy_files(
            str(root),
            "archive/logs",
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=filesystem,
        )
        storage = {
            "fs.s3.accessKey": "testing",
            "fs.s3.secretKey": "testing",
            "fs.s3.region": "us-east-1",
            "fs.s3.endpoint": f"http://{host}:{port}",
        }
        got = ksd.read_table(
            ["s3://archive/logs", "s3://archive/logs/orders-0"], columns=[], **storage
        )
        assert got.num_rows == ksd.read_table(str(root), columns=[]).num_rows == 80
        with pytest.raises(NoKafkaDataError) as info:
            ksd.read_table("s3://archive/logs", subscribe="nope", **storage)
        assert str(info.value) == (
            "subscribe names topics that are not in the archive: nope; "
            "topics there: legacy.events, metrics-v1, orders"
        )
