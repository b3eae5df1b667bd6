"""Tiered storage as a real broker does it: a topic with remote.storage.enable uploads its rolled
segments through Kafka's LocalTieredStorage (kafka-storage test jar) and deletes them locally
(local.retention.ms). The bucket it wrote reads exactly the records a consumer fetches below the
local log start offset (the broker serves those from the bucket), the local log dir the rest."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kafka_segments_ds import read_table

from .dump_log import compare_internal_topic, remote_metadata_differences, split_key_payload
from .kafka_broker import Broker, Row, table_rows

TOPIC = "tiered"
PARTITIONS = 2
RECORDS = 800
WAIT_S = 120


def local_segments(log_dir: Path, partition: int) -> list[int]:
    return sorted(int(p.stem) for p in (log_dir / f"{TOPIC}-{partition}").glob("*.log"))


def remote_differences(rest: str, row: dict[str, Any] | None, where: str) -> list[str]:
    """DumpLogSegments' remote log metadata record (Java's toString) against our row."""
    _, payload = split_key_payload(rest)
    if row is None or payload is None:
        return [f"{where}: Kafka {payload!r}, ours {row!r}"]
    return remote_metadata_differences(payload, row["value"], where)


def test_local_tiered_storage_bucket(broker: Broker, tmp_path: Path) -> None:
    broker.create_topic(
        TOPIC,
        PARTITIONS,
        remote_storage_enable="true",
        local_retention_ms=500,
        internal_segment_bytes=8 * 1024,
    )
    broker.produce(TOPIC, RECORDS, compression="zstd", headers=2, value_bytes=60, batch_size=4096)
    broker.produce(TOPIC, 200, tag="plain", null_key_every=5, null_value_every=7)
    deadline = time.monotonic() + WAIT_S
    # every rolled segment uploaded and deleted here: only the active one is local, and no
    # upload is under way while the bucket is read
    while not all(len(local_segments(broker.log_dir, p)) == 1 for p in range(PARTITIONS)):
        assert time.monotonic() < deadline, "the broker did not move segments to remote storage"
        time.sleep(0.2)

    want = broker.consume(TOPIC)
    assert len(want) == RECORDS + 200
    bucket = table_rows(read_table(broker.tiered_dir, subscribe=TOPIC, includeHeaders=True))
    local = table_rows(read_table(broker.log_dir, subscribe=TOPIC, includeHeaders=True))
    for partition in range(PARTITIONS):
        fetched = [r for r in want if r[1] == partition]
        remote: list[Row] = [r for r in bucket if r[1] == partition]
        here = [r for r in local if r[1] == partition]
        start = local_segments(broker.log_dir, partition)[0]
        # the bucket holds every record below the local log start
        assert start > 0 and remote and remote[-1][2] == start - 1
        assert remote == [r for r in fetched if r[2] < start]
        assert here == [r for r in fetched if r[2] >= start]

    # the metadata of those uploads: dump --decoder remote against DumpLogSegments'
    # --remote-log-metadata-decoder, record by record (a copy: the broker keeps appending)
    copy = broker.snapshot(tmp_path / "rlmm", "__remote_log_metadata")
    ours = compare_internal_topic(
        broker,
        copy,
        "__remote_log_metadata",
        "--remote-log-metadata-decoder",
        "remote",
        compare=remote_differences,
    )
    compared = [row["value"]["data"] for row in ours.values()]
    # every rolled segment of the topic was uploaded: its start metadata is among them
    starts = {
        (d["remote_log_segment_id"]["topic_id_partition"]["partition"], d["start_offset"])
        for d in compared
        if "start_offset" in d and d["remote_log_segment_id"]["topic_id_partition"]["name"] == TOPIC
    }
    for partition in range(PARTITIONS):
        assert (partition, 0) in starts


def test_a_tiered_topic_read_whole_from_its_bucket_and_log_dir(
    broker: Broker, tmp_path: Path
) -> None:
    """The bucket and the log dir read as one input give what a consumer fetches, at both
    isolation levels: with every upload still kept locally (local.retention.ms at its default),
    and after local retention deleted the older segments (transactions straddle the two)."""
    topic = "tieredWhole"
    broker.create_topic(topic, 2, remote_storage_enable="true", internal_segment_bytes=6 * 1024)
    summary = broker.produce(
        topic,
        600,
        transactional_id="tiered-whole",
        producers=2,
        txn_records=9,
        abort_every=3,
        compression="lz4",
        value_bytes=50,
    )
    assert summary["aborted"] > 3

    def uploaded(partition: int) -> int:
        return sum(
            1 for d in broker.tiered_dir.glob(f"{topic}-{partition}-*") for _ in d.glob("*.log")
        )

    deadline = time.monotonic() + WAIT_S
    # every rolled segment uploaded (the active one stays local only)
    while not all(
        uploaded(p) == len(list((broker.log_dir / f"{topic}-{p}").glob("*.log"))) - 1
        for p in range(2)
    ):
        assert time.monotonic() < deadline, "the broker did not upload the rolled segments"
        time.sleep(0.2)
    assert all(uploaded(p) >= 3 for p in range(2))
    bucket = broker.tiered_dir
    logs = broker.snapshot(tmp_path / "logs", topic)
    levels = ("read_committed", "read_uncommitted")
    want = {level: broker.consume(topic, level) for level in levels}
    for level in levels:
        got = table_rows(
            read_table([bucket, logs], subscribe=topic, isolationLevel=level, includeHeaders=True)
        )
        assert got == want[level], level
    # local retention: the older segments only in the bucket now
    for partition in range(2):
        part = logs / f"{topic}-{partition}"
        bases = sorted(p.name.partition(".")[0] for p in part.glob("*.log"))
        for f in list(part.iterdir()):
            if f.name.partition(".")[0] in bases[:2]:
                f.unlink()
    for level in levels:
        got = table_rows(
            read_table([bucket, logs], subscribe=topic, isolationLevel=level, includeHeaders=True)
        )
        assert got == want[level], level
