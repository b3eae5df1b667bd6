"""Tests for kafka_segments_ds.fs: resolution, globbing, ranged reads, pickling. No network."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.fs import (
    expand_glob,
    file_size,
    glob_file_info,
    read_file,
    read_range,
    resolve,
)


def test_resolve_absolute(tmp_path: Path) -> None:
    filesystem, path = resolve(str(tmp_path / "logs"))
    assert isinstance(filesystem, pafs.LocalFileSystem)
    assert path == (tmp_path / "logs").as_posix()


def test_resolve_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    filesystem, path = resolve("logs/orders-0/../orders-1")
    assert isinstance(filesystem, pafs.LocalFileSystem)
    assert path == (tmp_path.resolve() / "logs" / "orders-1").as_posix()


def test_resolve_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve("~/logs")[1] == (tmp_path / "logs").as_posix()


def test_resolve_file_uri(tmp_path: Path) -> None:
    filesystem, path = resolve(f"file://{tmp_path.as_posix()}/logs")
    assert isinstance(filesystem, pafs.LocalFileSystem)
    assert path == f"{tmp_path.as_posix()}/logs"


@pytest.mark.parametrize("pattern", ["*/0*.log", "t-[0-9]/x", "t-?/x", "a/**/b"])
def test_resolve_keeps_globs(tmp_path: Path, pattern: str) -> None:
    assert resolve(f"{tmp_path}/{pattern}")[1] == f"{tmp_path.as_posix()}/{pattern}"
    filesystem, path = resolve(f"file://{tmp_path.as_posix()}/{pattern}")
    assert isinstance(filesystem, pafs.LocalFileSystem)
    assert path == f"{tmp_path.as_posix()}/{pattern}"


def test_resolve_file_uri_root_glob() -> None:
    filesystem, path = resolve("file:///*")
    assert isinstance(filesystem, pafs.LocalFileSystem)
    assert path == "/*"


S3_OPTIONS = {
    "FS.S3.Endpoint": "http://localhost:9000",
    "fs.s3.accessKey": "key",
    "fs.s3.secretKey": "secret",
    "fs.s3.region": "eu-west-1",
    "startingOffsets": "earliest",  # non-fs options are ignored
}


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_resolve_s3_with_options(scheme: str) -> None:
    filesystem, path = resolve(f"{scheme}://bucket/logs/orders-*", S3_OPTIONS)
    assert isinstance(filesystem, pafs.S3FileSystem)
    assert filesystem.region == "eu-west-1"
    assert path == "bucket/logs/orders-*"
    clone = pickle.loads(pickle.dumps(filesystem))
    assert isinstance(clone, pafs.S3FileSystem)
    assert clone.region == "eu-west-1"


def test_resolve_s3_anonymous() -> None:
    options = {
        "endpoint_override": "localhost:9000",
        "fs.s3.scheme": "HTTP",
        "fs.s3.allowAnonymous": "True",
        "fs.s3.region": "us-east-1",
    }
    filesystem, path = resolve("s3://bucket", options)
    assert isinstance(filesystem, pafs.S3FileSystem)
    assert path == "bucket"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fs.s3.endpiont": "x"}, "unknown S3 option"),
        ({"fs.s3.scheme": "ftp", "fs.s3.region": "r"}, "http or https"),
        ({"fs.s3.allowAnonymous": "yes", "fs.s3.region": "r"}, "true or false"),
    ],
)
def test_resolve_s3_bad_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        resolve("s3://bucket/key", options)


def test_resolve_rejects_glob_in_bucket() -> None:
    with pytest.raises(InvalidOptionError, match="host/bucket"):
        resolve("s3://buck*/key", S3_OPTIONS)


def test_resolved_local_filesystem_pickles(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    filesystem, path = resolve(str(tmp_path / "f"))
    clone = pickle.loads(pickle.dumps(filesystem))
    assert read_file(clone, path).to_pybytes() == b"abc"


def test_read_range(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(bytes(range(100)))
    local = pafs.LocalFileSystem()
    path = (tmp_path / "f").as_posix()
    buffer = read_range(local, path, 10, 5)
    assert isinstance(buffer, pa.Buffer)
    assert buffer.to_pybytes() == bytes(range(10, 15))
    assert read_range(local, path, 95, 20).to_pybytes() == bytes(range(95, 100))  # short read
    assert read_range(local, path, 200, 20).to_pybytes() == b""
    assert read_range(local, path, 0, 0).to_pybytes() == b""
    with pytest.raises(ValueError):
        read_range(local, path, -1, 5)
    with pytest.raises(FileNotFoundError):
        read_range(local, (tmp_path / "missing").as_posix(), 0, 5)


def test_read_file_and_file_size(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"hello")
    local = pafs.LocalFileSystem()
    assert read_file(local, (tmp_path / "f").as_posix()).to_pybytes() == b"hello"
    assert file_size(local, (tmp_path / "f").as_posix()) == 5
    with pytest.raises(FileNotFoundError, match="no such file"):
        file_size(local, (tmp_path / "missing").as_posix())
    with pytest.raises(IsADirectoryError):
        file_size(local, tmp_path.as_posix())


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for rel in (
        "logs/orders-0/00000000000000000000.log",
        "logs/orders-0/00000000000000000000.index",
        "logs/orders-0/00000000000000000500.log",
        "logs/orders-1/00000000000000000000.log",
        "logs/payments-0/00000000000000000000.log",
        "logs/meta.properties",
        "logs/orders-9",  # a file, not a directory
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    return tmp_path


def test_expand_glob(tree: Path) -> None:
    local = pafs.LocalFileSystem()
    root = tree.as_posix()
    assert expand_glob(local, f"{root}/logs/orders-*") == [
        f"{root}/logs/orders-0",
        f"{root}/logs/orders-1",
        f"{root}/logs/orders-9",
    ]
    assert expand_glob(local, f"{root}/logs/*/*.log") == [
        f"{root}/logs/orders-0/00000000000000000000.log",
        f"{root}/logs/orders-0/00000000000000000500.log",
        f"{root}/logs/orders-1/00000000000000000000.log",
        f"{root}/logs/payments-0/00000000000000000000.log",
    ]
    # A literal component after a glob one; the file 'orders-9' is not descended into.
    assert expand_glob(local, f"{root}/logs/orders-?/00000000000000000500.log") == [
        f"{root}/logs/orders-0/00000000000000000500.log"
    ]
    assert expand_glob(local, f"{root}/logs/[op]*-0/") == [
        f"{root}/logs/orders-0",
        f"{root}/logs/payments-0",
    ]
    assert expand_glob(local, f"{root}/nope/*") == []
    assert expand_glob(local, f"{root}/logs/meta.properties") == [f"{root}/logs/meta.properties"]
    assert expand_glob(local, f"{root}/logs/missing") == []


def test_glob_file_info_carries_types_and_sizes(tree: Path) -> None:
    infos = glob_file_info(pafs.LocalFileSystem(), f"{tree.as_posix()}/logs/orders-0/*")
    assert [(i.base_name, i.type, i.size) for i in infos] == [
        ("00000000000000000000.index", pafs.FileType.File, 1),
        ("00000000000000000000.log", pafs.FileType.File, 1),
        ("00000000000000000500.log", pafs.FileType.File, 1),
    ]


def test_expand_glob_in_memory_subtree(tree: Path) -> None:
    # SubTreeFileSystem paths are relative, like object-store keys: the first component may
    # not be a glob, later ones may.
    sub = pafs.SubTreeFileSystem(tree.as_posix(), pafs.LocalFileSystem())
    assert expand_glob(sub, "logs/orders-[01]") == ["logs/orders-0", "logs/orders-1"]
    with pytest.raises(InvalidOptionError):
        expand_glob(sub, "*/orders-0")


@pytest.mark.parametrize("form", ["file:{p}", "file://{p}", "file://localhost{p}", "FILE:{p}"])
def test_resolve_local_file_uri_forms(tmp_path: Path, form: str) -> None:
    """Hadoop's ``file:/p`` (what Spark prints), ``file:///p`` and ``file://localhost/p`` name
    the local path /p, percent-encoded as URIs are. ``file:/p`` used to be taken for a
    relative path, ``file://localhost/p`` raised pyarrow's ArrowInvalid."""
    where = tmp_path / "a b" / "t-0"
    filesystem, path = resolve(form.format(p=where.as_posix().replace(" ", "%20")))
    assert isinstance(filesystem, pafs.LocalFileSystem)
    assert path == where.as_posix()


def test_local_file_uris_in_a_path_list_read_each_record_once(tmp_path: Path) -> None:
    from kafka_segments_ds import read_table, write_table

    write_table(pa.table({"value": [b"a", b"b", b"c"]}), tmp_path, topic="t")
    paths = [str(tmp_path / "t-0"), f"file:{tmp_path.as_posix()}/t-0"]
    paths.append(f"file://localhost{tmp_path.as_posix()}")
    assert read_table(paths).column("offset").to_pylist() == [0, 1, 2]


@pytest.mark.parametrize("env", [None, "http://127.0.0.1:9"])
def test_a_store_that_cannot_be_opened_is_a_storage_error(
    monkeypatch: pytest.MonkeyPatch, env: str | None
) -> None:
    """An ``s3://`` path without ``fs.s3.*`` options (credentials from the environment) is
    opened by pyarrow's ``FileSystem.from_uri``, which resolves the bucket's region over the
    network: its OSError used to reach the user raw, naming neither the URI nor the
    endpoint."""
    import types

    from kafka_segments_ds import fs as kfs
    from kafka_segments_ds.errors import StorageError

    def from_uri(uri: str) -> None:
        raise OSError(f"When resolving region for bucket 'archive': AWS Error ({uri})")

    shim = types.SimpleNamespace(FileSystem=types.SimpleNamespace(from_uri=from_uri))
    monkeypatch.setattr(kfs, "pafs", shim)
    if env is None:
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", env)
    with pytest.raises(StorageError) as info:
        resolve("s3a://archive/logs")
    endpoint = env or "AWS S3 (no fs.s3.endpoint given)"
    assert str(info.value) == (
        f"cannot open the storage at endpoint {endpoint}: When resolving region for bucket "
        "'archive': AWS Error (s3://archive/logs) (file s3a://archive/logs)"
    )
