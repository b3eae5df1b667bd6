"""Shared fixtures: hypothesis profiles, a sample log dir, a log-dir factory.

Markers (spark, crosscheck, slow) are declared in pyproject.toml.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings

from kafka_segments_ds import read_table
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_control_batch,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.compression import CompressionType
from kafka_segments_ds.samples import PartitionWriter, write_sample_log_dir
from tests.release import run_checked

# Shared CI hosts make wall-clock deadlines flaky, and the pure-Python kernel path is slow, so
# neither profile has a deadline. dev: hypothesis' defaults (random examples, its example
# database). ci, loaded when CI=true (or HYPOTHESIS_PROFILE=ci): the same examples on every run
# (derandomize, no database) and a fixed count, so a CI run is reproducible and bounded; tests
# that set max_examples themselves keep theirs.
settings.register_profile("dev", deadline=None)
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=100,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE")
    or ("ci" if os.environ.get("CI", "").lower() == "true" else "dev")
)

# Small enough that every partition of the sample spans several segments, large enough (above
# the default index.interval.bytes of 4096) that most segments get sparse index entries.
SAMPLE_RECORDS_PER_PARTITION = 800
SAMPLE_SEGMENT_BYTES = 12000
INDEX_SUFFIXES = (".index", ".timeindex")


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the repaired wheel ``scripts/build_wheel.sh`` makes, built once for the
    session (tests/test_packaging.py checks them; the bench_coldstart smoke run installs the
    wheel), or those already built into the directory ``KSD_DIST`` names."""
    if os.environ.get("KSD_DIST"):
        return Path(os.environ["KSD_DIST"]).resolve()  # the smoke runs start elsewhere
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("building the wheel needs a C compiler")
    out = tmp_path_factory.mktemp("dist")
    root = Path(__file__).resolve().parent.parent
    run_checked(["bash", root / "scripts" / "build_wheel.sh", out], cwd=root)
    return out


@pytest.fixture(scope="session")
def wheel(dist: Path) -> Path:
    """The repaired wheel of :func:`dist`."""
    wheels = list(dist.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A broker-like log dir shared by the whole session. Treat it as read-only."""
    return write_sample_log_dir(
        tmp_path_factory.mktemp("sample"),
        records_per_partition=SAMPLE_RECORDS_PER_PARTITION,
        segment_bytes=SAMPLE_SEGMENT_BYTES,
    )


@pytest.fixture(scope="session")
def sample_dir_without_indexes(sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of ``sample_dir`` with every ``.index`` and ``.timeindex`` removed."""
    copy = tmp_path_factory.mktemp("sample-noindex") / "logs"
    shutil.copytree(sample_dir, copy)
    remove_index_files(copy)
    return copy


@pytest.fixture(scope="session")
def sample_table(sample_dir: Path) -> pa.Table:
    """The whole sample dir, deep, read_uncommitted, with headers and metadata."""
    return read_table(str(sample_dir), includeHeaders=True, includeMetadata=True)


def remove_index_files(root: Path, suffixes: Sequence[str] = INDEX_SUFFIXES) -> int:
    """Delete the index files under ``root``; returns how many were deleted."""
    removed = 0
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in suffixes:
            path.unlink()
            removed += 1
    return removed


class PartitionBuilder:
    """Appends entries to a partition dir through :class:`PartitionWriter`, tracking offsets.

    ``batch``/``legacy*`` return the offsets they wrote; ``close`` rolls the last segment.
    """

    def __init__(self, directory: Path, **writer_options: Any) -> None:
        self.directory = directory
        self.writer = PartitionWriter(directory, **writer_options)

    @property
    def next_offset(self) -> int:
        return self.writer.next_offset

    def batch(
        self,
        timestamps: Sequence[int],
        *,
        compression: int = CompressionType.NONE,
        producer_id: int = -1,
        transactional: bool = False,
        key_prefix: bytes = b"k",
    ) -> list[int]:
        """One magic-2 batch with one record per timestamp; values are ``v<offset>``."""
        first = self.next_offset
        offsets = list(range(first, first + len(timestamps)))
        specs = [
            RecordSpec(key=key_prefix + b"%d" % o, value=b"v%d" % o, timestamp=ts)
            for o, ts in zip(offsets, timestamps, strict=True)
        ]
        entry = encode_batch(
            specs,
            base_offset=first,
            compression=compression,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=0 if producer_id >= 0 else -1,
            is_transactional=transactional,
        )
        self.writer.append(entry, offsets[-1])
        return offsets

    def marker(self, producer_id: int, *, commit: bool, timestamp: int = 0) -> int:
        """An end-transaction control batch; returns its offset."""
        offset = self.next_offset
        entry = encode_control_batch(
            offset=offset,
            commit=commit,
            producer_id=producer_id,
            producer_epoch=0,
            timestamp=timestamp,
        )
        self.writer.append(entry, offset)
        return offset

    def legacy(self, *, magic: int = 1, timestamp: int = -1) -> int:
        """One uncompressed magic-0/1 message; returns its offset."""
        offset = self.next_offset
        entry = encode_legacy_message(
            offset=offset,
            magic=magic,
            key=b"k%d" % offset,
            value=b"v%d" % offset,
            timestamp=timestamp,
        )
        self.writer.append(entry, offset)
        return offset

    def legacy_wrapper(
        self,
        timestamps: Sequence[int],
        *,
        magic: int = 1,
        compression: int = CompressionType.GZIP,
    ) -> list[int]:
        """A compressed magic-0/1 wrapper with one inner message per timestamp."""
        first = self.next_offset
        offsets = list(range(first, first + len(timestamps)))
        specs = [
            RecordSpec(key=b"k%d" % o, value=b"v%d" % o, timestamp=ts)
            for o, ts in zip(offsets, timestamps, strict=True)
        ]
        entry = encode_legacy_wrapper(
            specs, last_offset=offsets[-1], magic=magic, compression=compression
        )
        self.writer.append(entry, offsets[-1])
        return offsets

    def close(self) -> Path:
        self.writer.roll()
        return self.directory


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """An empty log dir for :func:`make_partition`."""
    root = tmp_path / "logs"
    root.mkdir()
    return root


@pytest.fixture
def make_partition(log_dir: Path) -> Iterator[Callable[..., PartitionBuilder]]:
    """Factory: ``make_partition("topic-0", segment_bytes=..., index_interval_bytes=...,
    next_offset=...)`` -> a :class:`PartitionBuilder` writing ``log_dir/topic-0``."""

    def make(name: str = "t-0", **writer_options: Any) -> PartitionBuilder:
        return PartitionBuilder(log_dir / name, **writer_options)

    yield make


@pytest.fixture(scope="session")
def strip_indexes() -> Callable[..., int]:
    """``strip_indexes(root, suffixes=(".index", ".timeindex"))``: delete index files under root."""
    return remove_index_files


@contextlib.contextmanager
def _moto_s3(bucket: str) -> Iterator[tuple[Any, str, int]]:
    """A moto S3 server on loopback, ``bucket`` created: (pyarrow filesystem, host, port)."""
    import pyarrow.fs as pafs

    moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        filesystem = pafs.S3FileSystem(
            access_key="testing",
            secret_key="testing",
            region="us-east-1",
            endpoint_override=f"{host}:{port}",
            scheme="http",
            allow_bucket_creation=True,
        )
        filesystem.create_dir(bucket)
        yield filesystem, host, port
    finally:
        server.stop()


@pytest.fixture(scope="session")
def moto_s3() -> Callable[[str], Any]:
    """``with moto_s3("bucket") as (filesystem, host, port):`` a loopback S3 server."""
    return _moto_s3
