"""Reading from S3: a real S3-compatible server (moto) on loopback, credentials as options."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import ChecksumError
from kafka_segments_ds.samples import write_sample_log_dir

BUCKET = "archive"
CREDENTIALS = {
    "fs.s3.accessKey": "testing",
    "fs.s3.secretKey": "testing",
    "fs.s3.region": "us-east-1",
}


@pytest.fixture(scope="module")
def s3(moto_s3) -> Iterator[tuple[pafs.S3FileSystem, dict[str, str]]]:  # type: ignore[no-untyped-def]
    with moto_s3(BUCKET) as (filesystem, host, port):
        yield filesystem, {**CREDENTIALS, "fs.s3.endpoint": f"http://{host}:{port}"}


@pytest.fixture(scope="module")
def uploaded(s3, tmp_path_factory: pytest.TempPathFactory) -> Path:  # type: ignore[no-untyped-def]
    filesystem, _ = s3
    root = write_sample_log_dir(
        tmp_path_factory.mktemp("s3-src"), records_per_partition=400, segment_bytes=32 * 1024
    )
    pafs.copy_files(
        str(root),
        f"{BUCKET}/logs",
        source_filesystem=pafs.LocalFileSystem(),
        destination_filesystem=filesystem,
    )
    return root


def _without_segment(table):  # type: ignore[no-untyped-def]
    return table.drop_columns(["segment"]) if "segment" in table.column_names else table


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"includeHeaders": True, "includeMetadata": True},
        {
            "subscribe": "orders",
            "isolationLevel": "read_committed",
            "startingOffsets": '{"orders":{"0":50,"1":120}}',
        },
        {"iteration": "shallow", "maxBytesPerPartition": 4096},
        {"startingTimestamp": 1_700_000_002_000, "subscribe": "metrics-v1"},
    ],
)
def test_s3_read_equals_local_read(s3, uploaded: Path, options: dict) -> None:  # type: ignore[no-untyped-def]
    _, storage = s3
    remote = ksd.read_table(f"s3://{BUCKET}/logs", **storage, **options)
    local = ksd.read_table(str(uploaded), **options)
    assert remote.num_rows == local.num_rows > 0
    assert _without_segment(remote).equals(_without_segment(local))
    if "segment" in remote.column_names:
        assert remote["segment"][0].as_py().startswith(f"s3://{BUCKET}/logs/")


def test_s3_glob_and_single_partition(s3, uploaded: Path) -> None:  # type: ignore[no-untyped-def]
    _, storage = s3
    got = ksd.read_table(f"s3://{BUCKET}/logs/orders-*", **storage)
    assert sorted(set(got["topic"].to_pylist())) == ["orders"]
    one = ksd.read_table(f"s3a://{BUCKET}/logs/metrics-v1-0", **storage)
    assert one["offset"].to_pylist() == list(range(400))


def test_s3_missing_path_is_a_clear_error(s3) -> None:  # type: ignore[no-untyped-def]
    _, storage = s3
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        ksd.read_table(f"s3://{BUCKET}/nothing-here", **storage)


def test_s3_corruption_names_the_s3_object(s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from kafka_segments_ds.records.builder import RecordSpec, encode_batch

    filesystem, storage = s3
    good = encode_batch([RecordSpec(b"a", b"k", 1)], base_offset=0)
    bad = bytearray(encode_batch([RecordSpec(b"b", b"k", 2)], base_offset=1))
    bad[-1] ^= 0x55
    with filesystem.open_output_stream(f"{BUCKET}/broken/t-0/00000000000000000000.log") as out:
        out.write(good + bytes(bad))
    with pytest.raises(ChecksumError) as info:
        ksd.read_table(f"s3://{BUCKET}/broken", **storage)
    assert info.value.path == f"s3://{BUCKET}/broken/t-0/00000000000000000000.log"
    assert (info.value.position, info.value.offset) == (len(good), 1)


def test_s3_write_round_trip_and_overwrite(s3, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import pyarrow as pa

    filesystem, options = s3
    target = f"s3://{BUCKET}/written"
    table = pa.table({"key": [b"a", b"b", None] * 100, "value": [b"v%d" % i for i in range(300)]})
    ksd.write_table(table, target, topic="t", numPartitions=2, compression="lz4", **options)
    got = ksd.read_table(target, **options)
    assert sorted(got.column("value").to_pylist()) == sorted(table.column("value").to_pylist())
    for partition in (0, 1):
        offsets = [
            o
            for o, p in zip(
                got.column("offset").to_pylist(), got.column("partition").to_pylist(), strict=True
            )
            if p == partition
        ]
        assert offsets == list(range(len(offsets)))
    ksd.write_table(
        table.slice(0, 5), target, mode="overwrite", topic="t", numPartitions=1, **options
    )
    names = sorted(
        i.path
        for i in filesystem.get_file_info(pafs.FileSelector(f"{BUCKET}/written", recursive=True))
    )
    assert names == [
        f"{BUCKET}/written/t-0",
        f"{BUCKET}/written/t-0/00000000000000000000.index",
        f"{BUCKET}/written/t-0/00000000000000000000.log",
        f"{BUCKET}/written/t-0/00000000000000000000.timeindex",
    ]  # the old partition 1 and every staging object are gone
    assert ksd.read_table(target, **options).column("offset").to_pylist() == [0, 1, 2, 3, 4]
