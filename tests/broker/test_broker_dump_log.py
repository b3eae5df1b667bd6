"""The CLI against Kafka's own tool (kafka-dump-log, ``kafka.tools.DumpLogSegments``) on log dirs
the broker wrote: every codec over several segments, interleaved transactions with commits and
aborts, a compacted topic after the cleaner, and the internal topics (``__consumer_offsets`` after
a consumer group committed, ``__transaction_state``, ``__cluster_metadata`` and the KRaft
bootstrap snapshot). ``dump`` is compared structurally, batch for batch and record for record;
``dump --decoder`` field by field; ``verify`` with Kafka's index checks; ``rebuild-index`` byte
for byte with the broker's indexes.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kafka_segments_ds.records.checksums import crc32c

from .dump_log import (
    compare_decoded,
    compare_internal_topic,
    differences,
    dump_log,
    jsonl,
    kafka_segments,
    logs,
    split_key_payload,
)
from .kafka_broker import Broker, cleaner_checkpoint, wait_for

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_TOPIC = "dls-codecs"
TXN_TOPIC = "dls-txn"
COMPACT_TOPIC = "dls-compacted"
TOPICS = (CODEC_TOPIC, TXN_TOPIC, COMPACT_TOPIC)
GROUP = "dls-group"
V2_HEADER = 61  # bytes of a magic-2 batch before its records
CRC_START = 21  # a magic-2 batch's CRC covers its bytes from the attributes on


@pytest.fixture(scope="module")
def archive(broker_session: Broker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The topics written, a consumer group's commit, then copies of the log dir: ``live``
    (taken while the broker runs: preallocated active indexes) and ``stopped`` (after a clean
    shutdown). The broker runs again afterwards."""
    b = broker_session
    if not b.running:
        b.start()
    b.create_topic(CODEC_TOPIC, len(CODECS), internal_segment_bytes=6000)
    for partition, codec in enumerate(CODECS):
        b.produce(
            CODEC_TOPIC,
            150,
            partition=str(partition),  # a string: produce() leaves out options equal to 0
            compression=codec,
            headers=2,
            null_key_every=7,
            null_value_every=11,
            value_bytes=60,
            batch_size=1500,
            idempotent=partition % 2 == 0,
            tag=codec,
        )
    b.create_topic(TXN_TOPIC, 2, internal_segment_bytes=8000)
    b.produce(
        TXN_TOPIC,
        240,
        transactional_id="dls-txn",
        producers=2,
        txn_records=8,
        abort_every=3,
        compression="gzip",
        headers=1,
        value_bytes=30,
    )
    b.create_topic(
        COMPACT_TOPIC,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio="0.01",
        internal_segment_bytes=4096,
    )
    b.produce(COMPACT_TOPIC, 400, key_space=25, null_value_every=9, value_bytes=30, batch_size=2048)
    b.produce(COMPACT_TOPIC, 20, key_space=5, value_bytes=30, tag="r", seed=2)
    wait_for("clean dls-compacted", lambda: cleaner_checkpoint(b.log_dir, COMPACT_TOPIC) > 0)
    b.tool("consume", "--topic", CODEC_TOPIC, "--group", GROUP)
    # the controller snapshots the metadata log (metadata.log.max.snapshot.interval.ms)
    metadata = b.log_dir / "__cluster_metadata-0"
    wait_for("snapshot its metadata log", lambda: any(metadata.glob("*.checkpoint")))
    home = tmp_path_factory.mktemp("dump-log")
    live = b.snapshot(home / "live")
    b.stop()
    stopped = b.snapshot(home / "stopped")
    b.start()
    return {"live": live, "stopped": stopped}


def partition_dirs(log_dir: Path, topic: str) -> list[str]:
    return sorted(p.name for p in log_dir.glob(f"{topic}-*"))


def our_rows(log_dir: Path, dirs: list[str], *flags: str) -> dict[tuple[str, int], dict[str, Any]]:
    """``dump --include-metadata`` rows by (segment, offset)."""
    rows = jsonl(*flags, "--include-metadata", "--include-headers", *(log_dir / d for d in dirs))
    return {(r["segment"], r["offset"]): r for r in rows}


def control_marker(records: bytes) -> str:
    """COMMIT or ABORT: the type in a control batch's one record's key (FORMAT §3)."""

    def varint(at: int) -> tuple[int, int]:
        shift = value = 0
        while True:
            byte = records[at]
            value |= (byte & 0x7F) << shift
            at += 1
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1), at
            shift += 7

    _, at = varint(0)  # record length
    at += 1  # attributes
    _, at = varint(at)  # timestamp delta
    _, at = varint(at)  # offset delta
    key_length, at = varint(at)
    key = records[at : at + key_length]
    return {0: "ABORT", 1: "COMMIT"}[int.from_bytes(key[2:4], "big")]


def test_shallow_dump_equals_dump_log_batches(broker: Broker, archive: dict[str, Path]) -> None:
    """``dump --shallow`` gives the batches DumpLogSegments lists: offsets, position, producer
    id/epoch/sequence, flags, codec, leader epoch, max timestamp, size, CRC, count and last
    sequence. Size is also 61 + the records' bytes (its ``value``), and the CRC over the file
    bytes at that position and size equals Kafka's; count and last sequence follow from the deep
    rows; a control batch's marker (COMMIT/ABORT) is read from its record's key."""
    log_dir = archive["stopped"]
    dirs = [d for t in TOPICS for d in partition_dirs(log_dir, t)]
    kafka = dump_log(broker, "--deep-iteration", "--print-data-log", files=logs(log_dir, *dirs))
    shallow = our_rows(log_dir, dirs, "--shallow", "--value", "base64", "--decoder", "none")
    deep = our_rows(log_dir, dirs, "--value", "base64", "--decoder", "none")
    per_batch: dict[tuple[str, int], int] = {}
    for (segment, _), row in deep.items():
        per_batch[(segment, row["batchBaseOffset"])] = (
            per_batch.get((segment, row["batchBaseOffset"]), 0) + 1
        )
    compared = {"batches": 0, "control": 0, "codecs": set()}
    for path, batches in kafka.items():
        data = Path(path).read_bytes()
        ours_here = [r for r in shallow.values() if r["segment"] == path]
        assert len(ours_here) == len(batches), path
        for batch, row in zip(batches, sorted(ours_here, key=lambda r: r["position"]), strict=True):
            records = base64.b64decode(row["value"])
            size = V2_HEADER + len(records)
            assert (
                row["batchBaseOffset"],
                row["batchLastOffset"],
                row["offset"],
                row["position"],
                size,
                row["producerId"],
                row["producerEpoch"],
                row["baseSequence"],
                row["isTransactional"],
                row["isControl"],
                row["leaderEpoch"],
                row["magic"],
                row["compression"],
                row["timestamp"],
                ("CreateTime", "LogAppendTime")[row["timestampType"]],
                row["size"],
                row["crc"],
                row["count"],
                row["lastSequence"],
            ) == (
                batch["baseOffset"],
                batch["lastOffset"],
                batch["lastOffset"],
                batch["position"],
                batch["size"],
                batch["producerId"],
                batch["producerEpoch"],
                batch["baseSequence"],
                batch["isTransactional"],
                batch["isControl"],
                batch["partitionLeaderEpoch"],
                batch["magic"],
                batch["compresscodec"],
                batch["maxTimestamp"],
                batch["timestampType"],
                batch["size"],
                batch["crc"],
                batch["count"],
                batch["lastSequence"],
            ), (path, batch["baseOffset"])
            assert batch["isvalid"]
            assert (
                crc32c(data[row["position"] + CRC_START : row["position"] + size]) == batch["crc"]
            )
            if batch["isControl"]:
                (marker,) = batch["records"]
                assert marker["rest"].startswith(f"endTxnMarker: {control_marker(records)} ")
                compared["control"] += 1
            else:
                assert per_batch[(path, batch["baseOffset"])] == batch["count"]
                if batch["baseSequence"] >= 0:
                    last = batch["baseSequence"] + batch["lastOffset"] - batch["baseOffset"]
                    assert batch["lastSequence"] == last
            compared["batches"] += 1
            compared["codecs"].add(batch["compresscodec"])
    assert compared["batches"] > 100 and compared["control"] >= 20
    assert compared["codecs"] == set(CODECS)


def test_deep_dump_equals_dump_log_records(broker: Broker, archive: dict[str, Path]) -> None:
    """``dump`` (deep) gives the records DumpLogSegments prints with --deep-iteration
    --print-data-log: offset, timestamp and its type, key and payload (Kafka prints them as UTF-8
    text; the producer wrote ASCII), their sizes (-1 for null), sequence, header keys. Control
    records are the one difference: Kafka prints them (``endTxnMarker: ...``), ``dump`` does not
    (as the reader and Spark's Kafka source, it yields data records; ``--shallow`` shows the
    control batches, compared above)."""
    log_dir = archive["stopped"]
    dirs = [d for t in TOPICS for d in partition_dirs(log_dir, t)]
    kafka = dump_log(broker, "--deep-iteration", "--print-data-log", files=logs(log_dir, *dirs))
    deep = our_rows(log_dir, dirs, "--key", "base64", "--value", "base64", "--decoder", "none")
    seen = set()
    for path, batches in kafka.items():
        for batch in batches:
            for record in batch["records"]:
                key = (path, record["offset"])
                if batch["isControl"]:
                    assert key not in deep
                    continue
                row = deep[key]
                seen.add(key)
                k = None if row["key"] is None else base64.b64decode(row["key"])
                v = None if row["value"] is None else base64.b64decode(row["value"])
                kafka_key, kafka_value = split_key_payload(record["rest"])
                sequence = -1
                if row["baseSequence"] >= 0:
                    sequence = row["baseSequence"] + row["offset"] - row["batchBaseOffset"]
                assert (
                    row["timestamp"],
                    ("CreateTime", "LogAppendTime")[row["timestampType"]],
                    -1 if k is None else len(k),
                    -1 if v is None else len(v),
                    sequence,
                    [h["key"] for h in row["headers"] or []],
                    None if k is None else k.decode(),
                    None if v is None else v.decode(),
                ) == (
                    record["timestamp"],
                    record["timestampType"],
                    record["key_size"],
                    record["value_size"],
                    record["sequence"],
                    record["header_keys"],
                    kafka_key,
                    kafka_value,
                ), (path, record["offset"])
    assert seen == set(deep)  # nothing more in ours
    assert len(seen) > 1000


@pytest.mark.parametrize(
    ("topic", "kafka_flag", "decoder"),
    [
        ("__consumer_offsets", "--offsets-decoder", "offsets"),
        ("__transaction_state", "--transaction-log-decoder", "transaction"),
        ("__cluster_metadata", "--cluster-metadata-decoder", "metadata"),
    ],
)
def test_decoders_equal_dump_log_decoders(
    broker: Broker, archive: dict[str, Path], topic: str, kafka_flag: str, decoder: str
) -> None:
    """``dump --decoder`` against DumpLogSegments' decoder of the same internal topic: key and
    value field by field (Kafka's camelCase names for our snake_case ones), where Kafka prints
    them; our consumer group's commit and both transactional ids are among them."""
    ours = compare_internal_topic(broker, archive["stopped"], topic, kafka_flag, decoder)
    text = json.dumps([r["key"] for r in ours.values()])
    assert {"__consumer_offsets": GROUP, "__transaction_state": "dls-txn-1"}.get(topic, "") in text


def test_metadata_decoder_clear_elr(archive: dict[str, Path]) -> None:
    """Every record of the broker's own metadata log is decoded (a 4.1 broker writes
    ClearElrRecord when the internal topics are created)."""
    rows = jsonl("--decoder", "metadata", archive["stopped"] / "__cluster_metadata-0")
    assert [r["offset"] for r in rows if r["value"]["type"] == "unknown"] == []


def test_snapshot_decoder_equals_dump_log(broker: Broker, archive: dict[str, Path]) -> None:
    """KRaft snapshots (.checkpoint): the log dir's bootstrap snapshot and the snapshots the
    controller wrote of ``__cluster_metadata-0``, decoded by ``dump`` and by DumpLogSegments,
    record by record (their control records, header and footer, included on both sides)."""
    log_dir = archive["stopped"]
    snapshots = sorted((log_dir / "__cluster_metadata-0").glob("*.checkpoint"))
    assert snapshots, "the broker wrote no snapshot of its metadata log"
    files = [log_dir / "bootstrap.checkpoint", *snapshots]
    kafka = dump_log(broker, "--deep-iteration", "--cluster-metadata-decoder", files=files)
    found: list[str] = []
    compared = 0
    for path in files:
        ours = {r["offset"]: r for r in jsonl(path) if "summary" not in r}
        records = [r for b in kafka[str(path)] for r in b["records"]]
        assert sorted(ours) == [r["offset"] for r in records]
        for record in records:
            row = ours[record["offset"]]
            assert row["timestamp"] == record["timestamp"]
            rest = record["rest"]
            if rest.startswith("payload: "):
                found += compare_decoded(
                    rest, {**row, "key": None}, f"{path.name}@{record['offset']}"
                )
            else:  # a control record: SnapshotHeader {...} / SnapshotFooter {...}
                name, _, text = rest.partition(" ")
                want = json.loads(text.lstrip(": ").strip()) if text.strip() else {}
                want.pop("version", None)
                if row["value"]["type"] != name + "Record":
                    found.append(
                        f"{path.name}@{record['offset']}: {name} vs {row['value']['type']}"
                    )
                found += differences(want, row["value"]["data"], f"{path.name}@{record['offset']}")
            compared += 1
    assert found == []
    assert compared >= 5


def test_verify_accepts_the_brokers_log_dirs(broker: Broker, archive: dict[str, Path]) -> None:
    """``verify`` exits 0 on the whole log dir, live (active segments' indexes preallocated,
    which Kafka's own --index-sanity-check refuses for a time index: its last entry reads 0) and
    after a clean stop, where DumpLogSegments' --index-sanity-check passes every index too."""
    for state in ("live", "stopped"):
        done = kafka_segments("verify", archive[state], check=False)
        assert done.returncode == 0, f"{state}:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
        assert "ERROR" not in done.stdout and "INDEX" not in done.stdout
        preallocated = [line for line in done.stdout.splitlines() if "preallocated" in line]
        # live: each partition's active .index and .timeindex; a clean stop trims them
        assert len(preallocated) >= (2 * (len(CODECS) + 3) if state == "live" else 0), state
        assert state == "live" or preallocated == []
    log_dir = archive["stopped"]
    dirs = [d for t in TOPICS for d in partition_dirs(log_dir, t)]
    indexes = sorted(
        p for d in dirs for s in ("*.index", "*.timeindex") for p in (log_dir / d).glob(s)
    )
    out = broker.run_class(
        "kafka.tools.DumpLogSegments",
        "--index-sanity-check",
        "--files",
        ",".join(map(str, indexes)),
    )
    passed = [
        line for line in out.splitlines() if line.endswith(("passed sanity check.", " is empty."))
    ]
    assert len(passed) == len(indexes), out
    out = broker.run_class(
        "kafka.tools.DumpLogSegments", "--verify-index-only", "--files", ",".join(map(str, indexes))
    )
    assert "mismatch" not in out.lower(), out[-3000:]


def test_rebuild_index_reproduces_the_brokers_indexes(
    archive: dict[str, Path], tmp_path: Path
) -> None:
    """``rebuild-index`` on copies of the cleanly stopped broker's partitions writes the broker's
    ``.index`` and ``.timeindex`` byte for byte."""
    log_dir = archive["stopped"]
    names = [name for topic in TOPICS for name in partition_dirs(log_dir, topic)]
    for name in names:
        shutil.copytree(log_dir / name, tmp_path / name)
        for index in [*(tmp_path / name).glob("*.index"), *(tmp_path / name).glob("*.timeindex")]:
            index.unlink()
    kafka_segments("rebuild-index", *(tmp_path / name for name in names))
    brokers = sorted(
        p for n in names for s in ("*.index", "*.timeindex") for p in (log_dir / n).glob(s)
    )
    differ = [
        f"{p.parent.name}/{p.name}: {len(ours)} bytes, the broker's {p.stat().st_size}"
        for p in brokers
        if (ours := (tmp_path / p.parent.name / p.name).read_bytes()) != p.read_bytes()
    ]
    # several segments per partition, rolled (the broker's last time-index entry added at the
    # roll) and cleaned (the compacted topic's segments rewritten by the log cleaner)
    assert len(brokers) > 20 and any(p.stat().st_size for p in brokers)
    assert differ == []
