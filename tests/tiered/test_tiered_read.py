"""Reading tiered-storage buckets on local disk, row for row against a plain read of the log
dir they were made from (batches built by kafka-python and aiokafka), for every layout and
Aiven transform; incomplete and overlapping segments; errors naming the segment; the CLI."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.cli import main
from kafka_segments_ds.errors import (
    ChecksumError,
    InvalidOptionError,
    MissingCodecError,
    StorageError,
)
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.planning import plan_partitions, plan_scan
from kafka_segments_ds.reader import read_task
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.samples import write_sample_log_dir
from kafka_segments_ds.tiered import discover_layout, storage
from kafka_segments_ds.tiered.aiven import ManifestError
from tests.support.tiered import partitions_of, rsa_key_pair, write_oracle_log_dir
from tests.support.upload import (
    Encryption,
    upload_aiven,
    upload_linkedin_azure,
    upload_local_tiered,
    upload_pinterest,
)

LOCAL = pafs.LocalFileSystem()
OPTIONS: list[dict[str, Any]] = [
    {},
    {"includeHeaders": True},
    {"iteration": "shallow"},
    {"startingOffsets": '{"events":{"0":100,"1":333}}', "subscribe": "events"},
    {"endingOffsets": '{"events":{"0":250,"1":-1}}', "subscribe": "events"},
    {"startingTimestamp": 1_700_000_002_000},
    {"maxBytesPerPartition": 3000, "minPartitions": 4},
]
AIVEN_VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "zstd": {"compression": True, "chunk_size": 1000},
    "encrypted": {"encrypt": True, "chunk_size": 1500},
    "zstd+encrypted": {"compression": True, "encrypt": True, "chunk_size": 700},
    "legacy+encrypted": {"legacy": True, "encrypt": True, "chunk_size": 900},
    "legacy": {"legacy": True, "chunk_size": 5000},
}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_oracle_log_dir(tmp_path_factory.mktemp("tiered-src"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Path]:
    return rsa_key_pair(tmp_path_factory.mktemp("keys"))


def upload(
    source: Path, root: Path, keys: tuple[bytes, Path], *, encrypt: bool = False, **kw: Any
) -> dict[str, str]:
    """Upload every partition the Aiven way under ``root/tiered/``; returns reader options."""
    if encrypt:
        kw["encryption"] = Encryption("key-1", keys[0])
    for i, (directory, topic, partition) in enumerate(partitions_of(source)):
        upload_aiven(directory, LOCAL, f"{root}/tiered/", topic, partition, seed=i, **kw)
    return {"privateKeys": json.dumps({"key-1": str(keys[1])})}


def plain(table: pa.Table) -> list[dict[str, Any]]:
    if "segment" in table.column_names:
        table = table.drop_columns(["segment"])
    return table.to_pylist()


def same_rows(bucket: str, source: Path, **options: Any) -> int:
    expected = ksd.read_table(
        str(source), **{k: v for k, v in options.items() if k != "privateKeys" and k != "layout"}
    )
    got = ksd.read_table(bucket, **options)
    assert plain(got) == plain(expected)
    return got.num_rows


@pytest.fixture(scope="module")
def aiven_buckets(
    source: Path, keys: tuple[bytes, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Path, dict[str, str]]]:
    out = {}
    for name, variant in AIVEN_VARIANTS.items():
        root = tmp_path_factory.mktemp(name.replace("+", "-"))
        out[name] = (root, upload(source, root, keys, **variant))
    return out


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "all")
@pytest.mark.parametrize("variant", list(AIVEN_VARIANTS))
def test_aiven_bucket_reads_like_the_log_dir(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]],
    source: Path,
    variant: str,
    options: dict[str, Any],
) -> None:
    root, bucket_options = aiven_buckets[variant]
    rows = same_rows(str(root), source, **options, **bucket_options)
    assert rows > 0


def test_source_spans_several_segments_codecs_and_builders(source: Path) -> None:
    table = ksd.read_table(str(source), includeMetadata=True, iteration="shallow")
    assert table.num_rows == 60 + 60 + 25
    assert set(table.column("compression").to_pylist()) == {"none", "gzip", "lz4", "zstd", "snappy"}
    assert len({p.name for p in (source / "events-0").glob("*.log")}) >= 5


def test_the_bucket_is_what_each_transform_stores(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]], source: Path
) -> None:
    # plain: the .log objects are the broker's files byte for byte; otherwise they are not
    for variant, (root, _) in aiven_buckets.items():
        originals = {p.name[:20]: p.read_bytes() for p in (source / "events-0").glob("*.log")}
        events0 = {p.name[:20]: p.read_bytes() for p in (root / "tiered").glob("events-*/0/*.log")}
        assert events0.keys() == originals.keys()
        same = [events0[k] == originals[k] for k in originals]
        assert all(same) if variant in ("plain", "legacy") else not any(same), variant
        assert bool(list((root / "tiered").rglob("*.indexes"))) == ("legacy" not in variant)


def test_aiven_segments_are_split_at_chunk_boundaries(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]], source: Path
) -> None:
    root, options = aiven_buckets["zstd"]
    opts = parse_read_options({**options, "maxBytesPerPartition": 2500})
    plan = plan_scan(str(root), opts, split=False, read_records=read_task)
    assert {t.segment.chunk_size for t in plan.tasks} == {1000}
    pieces = [t for group in plan_partitions(plan.tasks, opts, 2) for t in group]
    cut = [t for t in pieces if t.start_position > 0]
    assert cut
    for task in cut:
        # pieces of whole chunks (2500 rounds up to 3 x 1000): each cut is the first entry
        # at or after a chunk boundary
        original = (
            source / f"{task.topic}-{task.partition}" / f"{task.segment.base_offset:020d}.log"
        )
        starts = scan_entries(original.read_bytes()).positions.tolist()
        boundary = task.start_position // 1000 * 1000
        assert boundary > 0 and task.start_position == min(s for s in starts if s >= boundary)
    offsets = [
        o for t in pieces for b in read_task(t, opts, ("offset",)) for o in b.column(0).to_pylist()
    ]
    assert offsets == [r["offset"] for r in plain(ksd.read_table(str(source)))]


def test_incomplete_segments_are_not_read(
    source: Path, keys: tuple[bytes, Path], tmp_path: Path
) -> None:
    directory = source / "events-0"
    bases = sorted(int(p.stem) for p in directory.glob("*.log"))
    upload_aiven(directory, LOCAL, f"{tmp_path}/", "events", 0, skip_manifest=(bases[2],))
    got = ksd.read_table(str(tmp_path))
    expected = ksd.read_table(str(directory))
    kept = [r for r in plain(expected) if not bases[2] <= r["offset"] < bases[3]]
    assert plain(got) == kept
    assert len(plain(got)) < expected.num_rows


def _two_copies(directory: Path, tmp_path: Path, writer: Any) -> Path:
    """The partition uploaded twice with different segment boundaries (a copy after a leader
    change rolled its segments elsewhere): every offset of one copy is in the other too."""
    from tests.support.tiered import write_oracle_partition

    other = write_oracle_partition(tmp_path / "other" / "events-0", segment_bytes=8500)
    assert sorted(p.name for p in other.glob("*.log")) != sorted(
        p.name for p in directory.glob("*.log")
    )
    writer(directory, 1)
    writer(other, 2)
    return other


def test_overlapping_aiven_segments_give_each_offset_once(source: Path, tmp_path: Path) -> None:
    directory = source / "events-0"
    topic_id = "AAAAAAAAAAAAAAAAAAAAAA"
    _two_copies(
        directory,
        tmp_path,
        lambda d, seed: upload_aiven(
            d, LOCAL, f"{tmp_path}/bucket/", "events", 0, topic_id=topic_id, seed=seed
        ),
    )
    logs = list((tmp_path / "bucket").rglob("*.log"))
    assert len(logs) == len(list(directory.glob("*.log"))) + len(
        list((tmp_path / "other" / "events-0").glob("*.log"))
    )
    expected = plain(ksd.read_table(str(directory)))
    assert plain(ksd.read_table(f"{tmp_path}/bucket")) == expected
    start = {"startingOffsets": '{"events":{"0":333}}'}
    assert plain(ksd.read_table(f"{tmp_path}/bucket", **start)) == [
        r for r in expected if r["offset"] >= 333
    ]


def test_overlapping_raw_segments_give_each_offset_once(source: Path, tmp_path: Path) -> None:
    directory = source / "events-0"
    _two_copies(
        directory,
        tmp_path,
        lambda d, seed: upload_local_tiered(
            d, LOCAL, f"{tmp_path}/ts{seed}", "events", 0, seed=seed
        ),
    )
    # both copies in one partition directory
    target = tmp_path / "merged" / "kafka-tiered-storage" / "events-0-AAAAAAAAAAAAAAAAAAAAAA"
    target.mkdir(parents=True)
    for copy in (tmp_path / "ts1", tmp_path / "ts2"):
        for f in copy.rglob("*-*.*"):
            shutil.copy(f, target / f.name)
    assert plain(ksd.read_table(str(tmp_path / "merged"))) == plain(ksd.read_table(str(directory)))


def test_local_tiered_storage(source: Path, tmp_path: Path) -> None:
    for directory, topic, partition in partitions_of(source):
        upload_local_tiered(directory, LOCAL, str(tmp_path), topic, partition)
    for options in OPTIONS:
        same_rows(str(tmp_path), source, **options)
    same_rows(str(tmp_path / "kafka-tiered-storage"), source, layout="local-tiered")


def test_pinterest_layout_with_hash_bits(source: Path, tmp_path: Path) -> None:
    for i, (directory, topic, partition) in enumerate(partitions_of(source)):
        upload_pinterest(
            directory,
            LOCAL,
            f"{tmp_path}/base",
            "c1",
            topic,
            partition,
            hash_bits=f"{i % 2}{i // 2}",
        )
    for options in OPTIONS:
        same_rows(f"{tmp_path}/base", source, layout="pinterest", **options)
    # not guessed: without layout, the parent of broker-style partition directories holds no
    # Kafka data, an error that points at the layout option
    with pytest.raises(ksd.NoKafkaDataError, match="set the option layout"):
        ksd.read_table(f"{tmp_path}/base")
    assert ksd.read_table(f"{tmp_path}/base", allowEmpty=True).num_rows == 0


def test_linkedin_azure_layout(source: Path, tmp_path: Path) -> None:
    ids = {}
    for i, (directory, topic, partition) in enumerate(partitions_of(source)):
        ids[topic] = ids.get(topic) or uuid.UUID(int=i + 1)
        upload_linkedin_azure(
            directory, LOCAL, str(tmp_path), ids[topic], partition, container_prefix="kafka"
        )
    got = ksd.read_table(str(tmp_path), layout="linkedin-azure")
    names = {str(v): k for k, v in ids.items()}
    renamed = [{**r, "topic": names[r["topic"]]} for r in plain(got)]
    expected = plain(ksd.read_table(str(source)))
    assert sorted(renamed, key=lambda r: (r["topic"], r["partition"], r["offset"])) == sorted(
        expected, key=lambda r: (r["topic"], r["partition"], r["offset"])
    )


def test_several_layouts_in_one_path_ask_for_the_layout_option(
    source: Path, tmp_path: Path
) -> None:
    upload_local_tiered(source / "events-0", LOCAL, str(tmp_path), "events", 0)
    upload_aiven(source / "events-1", LOCAL, f"{tmp_path}/aiven/", "events", 1)
    with pytest.raises(InvalidOptionError, match=r"several layouts \(aiven, local-tiered\)"):
        ksd.read_table(str(tmp_path))
    only = ksd.read_table(str(tmp_path), layout="aiven")
    assert plain(only) == plain(ksd.read_table(str(source / "events-1")))


# -- errors ----------------------------------------------------------------------------------


def test_missing_key_names_the_segment_and_the_key_pair(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]],
) -> None:
    root, _ = aiven_buckets["zstd+encrypted"]
    with pytest.raises(
        InvalidOptionError,
        match=r"tiered/clicks\.v2-[A-Za-z0-9_-]{22}/3/00000000000000000000-[A-Za-z0-9_-]{22}\.log"
        r" is encrypted with key pair 'key-1', but no private key was given",
    ):
        ksd.read_table(str(root))


def test_wrong_key_is_refused(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]], tmp_path: Path
) -> None:
    root, _ = aiven_buckets["encrypted"]
    _, other = rsa_key_pair(tmp_path, "other")
    storage._KEYS.clear()
    with pytest.raises(InvalidOptionError, match="does not unwrap the segment's data key"):
        ksd.read_table(str(root), privateKeys=json.dumps({"key-1": str(other)}))
    with pytest.raises(InvalidOptionError, match="cannot read the PEM file"):
        ksd.read_table(str(root), privateKeys=json.dumps({"key-1": str(tmp_path / "nope.pem")}))


def test_missing_cryptography_names_the_extra(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, options = aiven_buckets["encrypted"]
    storage._KEYS.clear()
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(MissingCodecError, match=r"pip install 'kafka-segments-ds\[tiered\]'"):
        ksd.read_table(str(root), **options)


def _copy_bucket(root: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bucket"
    shutil.copytree(root, copy)
    return copy


def _biggest_log(root: Path) -> Path:
    return max(root.rglob("*.log"), key=lambda p: p.stat().st_size)


def test_truncated_log_object_contradicts_the_manifest(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]], tmp_path: Path
) -> None:
    root, options = aiven_buckets["zstd"]
    copy = _copy_bucket(root, tmp_path)
    log = _biggest_log(copy)
    log.write_bytes(log.read_bytes()[:-10])
    manifest = log.with_suffix(".rsm-manifest")
    with pytest.raises(
        ManifestError,
        match=rf"{manifest.name}: chunk index says the \.log object holds \d+ bytes, "
        r"the object has \d+",
    ):
        ksd.read_table(str(copy), **options)


@pytest.mark.parametrize(
    ("variant", "message"),
    [("zstd", "does not decompress"), ("encrypted", "fails AES-GCM authentication")],
)
def test_damaged_chunk_names_the_segment_and_position(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]],
    tmp_path: Path,
    variant: str,
    message: str,
) -> None:
    root, options = aiven_buckets[variant]
    copy = _copy_bucket(root, tmp_path)
    log = _biggest_log(copy)
    data = bytearray(log.read_bytes())
    data[1:4] = bytes(b ^ 0xFF for b in data[1:4])  # chunk 0: zstd magic / GCM IV
    log.write_bytes(bytes(data))
    storage._CACHE.clear()
    with pytest.raises(
        StorageError,
        match=rf"chunk 0 \(original bytes 0\.\.\d+\) {message}.*file {log}, byte position 0",
    ):
        ksd.read_table(str(copy), **options)


def test_damage_inside_a_zstd_chunk_is_caught_by_the_batch_crc(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]], tmp_path: Path
) -> None:
    # Aiven writes zstd frames without a content checksum: a damaged literal decodes to other
    # bytes of the right length, which the record batch's CRC-32C then refuses
    root, options = aiven_buckets["zstd"]
    copy = _copy_bucket(root, tmp_path)
    log = _biggest_log(copy)
    data = bytearray(log.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 3] = bytes(
        b ^ 0xFF for b in data[len(data) // 2 : len(data) // 2 + 3]
    )
    log.write_bytes(bytes(data))
    storage._CACHE.clear()
    with pytest.raises((ChecksumError, StorageError), match=rf"file {log}, byte position \d+"):
        ksd.read_table(str(copy), **options)


def test_manifest_of_another_partition_is_refused(source: Path, tmp_path: Path) -> None:
    upload_aiven(source / "events-0", LOCAL, f"{tmp_path}/", "events", 0)
    partition_dir = next(tmp_path.glob("events-*/0"))
    partition_dir.rename(partition_dir.with_name("5"))
    with pytest.raises(ManifestError, match="the manifest is for partition 0, the key says 5"):
        ksd.read_table(str(tmp_path))


# -- CLI -------------------------------------------------------------------------------------


def test_cli_on_a_bucket(
    aiven_buckets: dict[str, tuple[Path, dict[str, str]]],
    source: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root, options = aiven_buckets["zstd+encrypted"]
    option = ["--option", f"privateKeys={options['privateKeys']}"]
    assert main(["verify", str(root), *option]) == 0
    out = capsys.readouterr().out
    logs = len(list(source.rglob("*.log")))
    assert f"({logs} .log," in out and "0 damaged, 0 unreadable; exit status 0" in out
    assert main(["stats", str(root), "--format", "jsonl", *option]) == 0
    got = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["stats", str(source), "--format", "jsonl"]) == 0
    expected = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert got == expected
    assert main(["dump", str(root), "--from-offset", "100", "--limit", "3", *option]) == 0
    dumped = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main(["dump", str(source), "--from-offset", "100", "--limit", "3"]) == 0
    assert dumped == [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(dumped) == 3
    # shallow: each batch's size, CRC, count and last sequence read from the decrypted and
    # decompressed chunks, as from the broker's files
    shallow = ["dump", "--shallow", "--value", "hex"]
    assert main([*shallow, str(root), *option]) == 0
    batches = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main([*shallow, str(source)]) == 0
    assert batches == [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(batches) > 10 and all(b["count"] > 0 and b["size"] > 61 for b in batches)
    # without the key every .log is unreadable, named with its key pair
    assert main(["verify", str(root)]) == 2
    out = capsys.readouterr().out
    assert out.count("UNREADABLE") == logs
    assert "is encrypted with key pair 'key-1', but no private key was given" in out


def test_key_prefix_without_a_slash_is_not_part_of_the_topic(source: Path, tmp_path: Path) -> None:
    # rsm.config.key.prefix is glued on as is: "archive-events-<id>/0/...": the manifest's topic
    upload_aiven(source / "events-1", LOCAL, f"{tmp_path}/archive-", "events", 1)
    assert next(tmp_path.iterdir()).name.startswith("archive-events-")
    got = ksd.read_table(str(tmp_path), includeMetadata=True)
    assert set(got.column("topic").to_pylist()) == {"events"}
    assert plain(got.select(["offset", "value"])) == plain(
        ksd.read_table(str(source / "events-1"), columns=["offset", "value"])
    )
    with pytest.raises(ksd.NoKafkaDataError, match="bucket of another layout than broker"):
        ksd.read_table(str(tmp_path), layout="broker")
    assert ksd.read_table(str(tmp_path), layout="broker", allowEmpty=True).num_rows == 0


@pytest.mark.parametrize(
    "variant",
    [{"compression": True, "encrypt": True, "chunk_size": 800}, {"legacy": True, "encrypt": True}],
    ids=["zstd+encrypted", "legacy+encrypted"],
)
def test_transactions_and_legacy_messages_through_a_bucket(
    keys: tuple[bytes, Path], tmp_path: Path, variant: dict[str, Any]
) -> None:
    # the sample log dir: aborted transactions with .txnindex files (the .indexes transaction
    # slot, or a legacy .txnindex object), magic 0/1 messages and gzip/snappy wrappers
    source = write_sample_log_dir(tmp_path / "src", records_per_partition=600, segment_bytes=9000)
    assert list(source.rglob("*.txnindex"))
    options = upload(source, tmp_path / "bucket", keys, **variant)
    for extra in ({"isolationLevel": "read_committed"}, {"iteration": "shallow"}, {}):
        rows = same_rows(str(tmp_path / "bucket"), source, **extra, **options)
        assert rows > 0
    committed = ksd.read_table(str(tmp_path / "bucket"), isolationLevel="read_committed", **options)
    assert committed.num_rows < ksd.read_table(str(source)).num_rows


def test_chunked_reads_in_any_order_return_the_original_bytes(source: Path, tmp_path: Path) -> None:
    """Reads jump back and forth (resynchronisation, entry probes): a read spanning a kept
    chunk and fetched ones never evicts a chunk it uses (it raised a bare KeyError)."""
    directory, topic, partition = partitions_of(source)[0]
    upload_aiven(
        directory, LOCAL, f"{tmp_path}/tiered/", topic, partition, chunk_size=10, compression=True
    )
    view, parts = discover_layout(str(tmp_path / "tiered"), LOCAL, "aiven")
    seg = parts[0].segments[0]
    original = (Path(directory) / f"{seg.base_offset:020d}.log").read_bytes()
    assert seg.chunk_size == 10 and len(original) > 100
    with view.open_input_file(seg.path) as f:
        for start, length in [(30, 10), (90, 10), (35, 10), (0, 100), (95, 3), (25, 70)]:
            assert f.read_at(length, start) == original[start : start + length]


def test_segment_deleted_between_listing_and_manifest_read_is_skipped(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention deletes segments while a bucket is listed: a manifest gone by the time it is
    read leaves that segment out, as one never listed; the read does not fail."""
    from kafka_segments_ds.tiered import layouts

    directory = source / "events-0"
    bases = sorted(int(p.stem) for p in directory.glob("*.log"))
    upload_aiven(directory, LOCAL, f"{tmp_path}/", "events", 0)
    (doomed,) = tmp_path.rglob(f"{bases[1]:020d}-*.rsm-manifest")
    real = layouts.kfs.read_file

    def read_file(filesystem: pafs.FileSystem, path: str) -> pa.Buffer:
        if path == str(doomed):
            for stale in tmp_path.rglob(f"{bases[1]:020d}-*"):
                stale.unlink()
        return real(filesystem, path)

    monkeypatch.setattr(layouts.kfs, "read_file", read_file)
    got = ksd.read_table(str(tmp_path))
    expected = [
        r for r in plain(ksd.read_table(str(directory))) if not bases[1] <= r["offset"] < bases[2]
    ]
    assert plain(got) == expected


def _local_copy(directory: Path, target: Path, keep: slice) -> Path:
    """``directory``'s segments ``keep`` (by base offset order, all their files) in ``target``,
    as a log dir holds them after retention or before an upload."""
    target.mkdir(parents=True)
    bases = sorted(p.stem for p in directory.glob("*.log"))[keep]
    for f in directory.iterdir():
        if f.name.partition(".")[0] in bases:
            shutil.copy(f, target / f.name)
    return target


@pytest.mark.parametrize(
    "keep",
    [slice(None), slice(3, None), slice(2, 5), slice(None, 4)],
    ids=["all-kept-locally", "older-ones-only-in-the-bucket", "bucket-newer", "bucket-only-tail"],
)
def test_a_bucket_and_its_log_dir_read_as_one(source: Path, tmp_path: Path, keep: slice) -> None:
    """A tiered topic read whole: its bucket and its log dir, each offset once, from the log
    dir where it holds it (a broker keeps what it uploaded until local retention)."""
    directory = source / "events-0"
    assert len(list(directory.glob("*.log"))) >= 6
    upload_local_tiered(directory, LOCAL, str(tmp_path / "bucket"), "events", 0)
    _local_copy(directory, tmp_path / "logs" / "events-0", keep)
    expected = plain(ksd.read_table(str(directory)))
    inputs = [str(tmp_path / "bucket"), str(tmp_path / "logs")]
    assert plain(ksd.read_table(inputs)) == expected
    assert plain(ksd.read_table(inputs[::-1])) == expected
    for start, end in ((0, 1000), (101, 333), (250, 251)):
        bounds = {
            "startingOffsets": f'{{"events":{{"0":{start}}}}}',
            "endingOffsets": f'{{"events":{{"0":{end}}}}}',
        }
        want = [r for r in expected if start <= r["offset"] < end]
        assert plain(ksd.read_table(inputs, **bounds)) == want


def test_a_bucket_and_a_log_dir_of_other_topic_ids_are_refused(
    source: Path, tmp_path: Path
) -> None:
    directory = source / "events-0"
    upload_local_tiered(directory, LOCAL, str(tmp_path / "bucket"), "events", 0)
    (bucket_dir,) = (tmp_path / "bucket" / "kafka-tiered-storage").iterdir()
    topic_id = bucket_dir.name.rsplit("-", 1)[1]
    local = _local_copy(directory, tmp_path / "logs" / "events-0", slice(2, None))
    inputs = [str(tmp_path / "bucket"), str(tmp_path / "logs")]
    (local / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
    assert plain(ksd.read_table(inputs)) == plain(ksd.read_table(str(directory)))
    (local / "partition.metadata").write_text("version: 0\ntopic_id: BBBBBBBBBBBBBBBBBBBBBB\n")
    with pytest.raises(InvalidOptionError, match=f"events-0: the tiered segments in .*{topic_id}"):
        ksd.read_table(inputs)


def test_a_bucket_segment_without_its_log_is_reported(
    source: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = source / "events-0"
    stems = upload_local_tiered(directory, LOCAL, str(tmp_path), "events", 0)
    Path(stems[2] + ".log").unlink()
    with caplog.at_level("WARNING", "kafka_segments_ds.tiered.layouts"):
        ksd.read_table(str(tmp_path))
    (message,) = [r.getMessage() for r in caplog.records if "no .log" in r.getMessage()]
    assert f"1 segments have index files but no .log ({Path(stems[2]).name})" in message


def test_a_stream_over_a_bucket_and_its_log_dir_reads_both(source: Path, tmp_path: Path) -> None:
    """A stream given the bucket and the log dir: the log dir's records too (it listed the
    bucket alone), each offset once."""
    directory = source / "events-0"
    uploaded = _local_copy(directory, tmp_path / "uploaded" / "events-0", slice(None, 4))
    upload_local_tiered(uploaded, LOCAL, str(tmp_path / "bucket"), "events", 0)
    _local_copy(directory, tmp_path / "logs" / "events-0", slice(3, None))
    end, got = _one_micro_batch([str(tmp_path / "bucket"), str(tmp_path / "logs")])
    want = ksd.read_table(str(directory), columns=["offset"]).column(0).to_pylist()
    assert got == want and end == {("events", 0): want[-1] + 1}


def _one_micro_batch(inputs: list[str]) -> tuple[dict[Any, int], list[int]]:
    """A stream from the earliest offsets: its first micro-batch's end and offsets read."""
    from kafka_segments_ds.options import parse_stream_options
    from kafka_segments_ds.reader import read_tasks
    from kafka_segments_ds.streaming.planner import StreamPlanner

    options, limits = parse_stream_options({"startingOffsets": "earliest"})
    planner = StreamPlanner(inputs, options, limits)
    start = planner.initial_offsets()
    end = planner.next_offsets(start)
    got = [
        o
        for tasks in planner.plan(start, end, 1)
        for b in read_tasks(tasks, planner.options, ("offset",))
        for o in b.column(0).to_pylist()
    ]
    return end, got


def test_a_bucket_segment_around_the_whole_log_dir_is_read_on_both_sides(
    source: Path, tmp_path: Path
) -> None:
    """One bucket segment (another leader's segmentation) from below the log dir's first
    offset to past its end: read below the log dir and after it, the log dir between."""
    directory = source / "events-0"
    logs = sorted(directory.glob("*.log"))
    bucket = tmp_path / "bucket" / "kafka-tiered-storage" / "events-0-AAAAAAAAAAAAAAAAAAAAAA"
    bucket.mkdir(parents=True)
    whole = b"".join(p.read_bytes() for p in logs)
    (bucket / "00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log").write_bytes(whole)
    _local_copy(directory, tmp_path / "logs" / "events-0", slice(2, 4))
    expected = plain(ksd.read_table(str(directory)))
    got = ksd.read_table([str(tmp_path / "bucket"), str(tmp_path / "logs")], includeMetadata=True)
    assert plain(got.drop_columns([c for c in got.column_names if c not in expected[0]])) == (
        expected
    )
    local_first = int(logs[2].stem)
    local_end = int(logs[4].stem)
    from_local = [
        r["offset"] for r in got.to_pylist() if r["segment"].startswith(str(tmp_path / "logs"))
    ]
    assert from_local and min(from_local) >= local_first and max(from_local) < local_end


def test_a_stream_reads_a_bucket_segment_across_the_log_dirs_start_once(
    source: Path, tmp_path: Path
) -> None:
    """A micro-batch up to the latest offset over a bucket segment that runs past the log
    dir's first offset (another leader's segmentation): the bucket's part ends where the log
    dir begins (the cut to the batch's end lifted it: the log dir's first records twice)."""
    directory = source / "events-0"
    logs = sorted(directory.glob("*.log"))
    bucket = tmp_path / "bucket" / "kafka-tiered-storage" / "events-0-AAAAAAAAAAAAAAAAAAAAAA"
    bucket.mkdir(parents=True)
    whole = b"".join(p.read_bytes() for p in logs[:4])
    (bucket / "00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log").write_bytes(whole)
    _local_copy(directory, tmp_path / "logs" / "events-0", slice(2, None))
    want = ksd.read_table(str(directory), columns=["offset"]).column(0).to_pylist()
    end, got = _one_micro_batch([str(tmp_path / "bucket"), str(tmp_path / "logs")])
    assert end == {("events", 0): want[-1] + 1}
    assert got == want
