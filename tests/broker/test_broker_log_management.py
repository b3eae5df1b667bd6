"""What the broker does to its logs, read exactly: a compacted topic after the log cleaner ran
(offset gaps, tombstones), segments deleted by retention (log start offset > 0), rolls by
segment.bytes and by segment.ms, and message.timestamp.type=LogAppendTime. Each is compared record
for record with what a consumer fetches, live and after a clean stop. And a segment replacement
cut short (``.swap`` files), read as the broker serves it once it restarts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.records.batches import scan_entries

from .kafka_broker import Broker, Row, cleaner_checkpoint, table_rows, wait_for


def read_rows(log_dir: Path, topic: str) -> list[Row]:
    return table_rows(read_table(log_dir, subscribe=topic, includeHeaders=True))


def base_offsets(log_dir: Path, topic: str, partition: int = 0) -> list[int]:
    return sorted(int(p.stem) for p in (log_dir / f"{topic}-{partition}").glob("*.log"))


@pytest.fixture(scope="module")
def topics(broker_session: Broker) -> dict[str, str]:
    b = broker_session
    t = {
        "compacted": "compacted",
        "retention": "retention",
        "segment_ms": "segment-ms",
        "log_append_time": "log-append-time",
    }
    b.create_topic(
        t["compacted"],
        cleanup_policy="compact",
        min_cleanable_dirty_ratio="0.01",
        internal_segment_bytes=4096,
    )
    b.create_topic(t["retention"], retention_bytes=8192, internal_segment_bytes=4096)
    b.create_topic(t["segment_ms"], segment_ms=1000)
    b.create_topic(t["log_append_time"], 2, message_timestamp_type="LogAppendTime")
    # 30 keys over 600 records, every 9th value null: the cleaner keeps the last of each key
    # (tombstones among them); batches smaller than the 4 KiB segments (the broker refuses
    # a batch larger than segment.bytes)
    b.produce(
        t["compacted"],
        600,
        key_space=30,
        null_value_every=9,
        headers=1,
        value_bytes=30,
        batch_size=2048,
    )
    # then keys 0..6 again: their earlier records go, those of keys 7..29 stay (offset gaps)
    b.produce(t["compacted"], 100, key_space=7, headers=1, value_bytes=30, batch_size=2048)
    b.produce(t["retention"], 400, value_bytes=60, compression="lz4", batch_size=2048)
    for run in range(3):  # each run more than segment.ms after the one before
        if run:
            time.sleep(1.5)
        b.produce(t["segment_ms"], 50, tag=f"run{run}", headers=2)
    b.produce(t["log_append_time"], 300, compression="gzip", headers=1, value_bytes=50)
    b.produce(t["log_append_time"], 100, tag="plain", null_key_every=3)

    log_dir = b.log_dir
    compacted = t["compacted"]
    wait_for(
        "clean the compacted topic up to its active segment",
        lambda: cleaner_checkpoint(log_dir, compacted) >= base_offsets(log_dir, compacted)[-1],
    )
    wait_for(
        "delete the retention topic's first segments",
        lambda: base_offsets(log_dir, t["retention"])[0] > 0,
    )
    return t


def test_compacted_topic_after_the_cleaner(broker: Broker, topics: dict[str, str]) -> None:
    topic = topics["compacted"]
    want = broker.consume(topic)
    offsets = [r[2] for r in want]
    # the cleaner removed records: gaps in the offsets, far fewer records than written
    assert len(want) < 200 and offsets[-1] == 699
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))
    tombstones = [r for r in want if r[4] is None]
    assert tombstones and all(r[3] is not None for r in tombstones)
    assert read_rows(broker.log_dir, topic) == want


def test_retention_deleted_the_first_segments(broker: Broker, topics: dict[str, str]) -> None:
    topic = topics["retention"]
    want = broker.consume(topic)
    first = base_offsets(broker.log_dir, topic)[0]
    assert first > 0 and want[0][2] == first and want[-1][2] == 399
    assert read_rows(broker.log_dir, topic) == want


def test_rolls_by_segment_ms_and_segment_bytes(broker: Broker, topics: dict[str, str]) -> None:
    by_time = topics["segment_ms"]
    want = broker.consume(by_time)
    assert len(want) == 150
    assert len(base_offsets(broker.log_dir, by_time)) >= 3
    assert read_rows(broker.log_dir, by_time) == want
    by_size = topics["retention"]  # 4 KiB segments
    assert len(base_offsets(broker.log_dir, by_size)) >= 2


def test_log_append_time(broker: Broker, topics: dict[str, str]) -> None:
    topic = topics["log_append_time"]
    want = broker.consume(topic)
    assert len(want) == 400 and {r[7] for r in want} == {1}
    assert read_rows(broker.log_dir, topic) == want


def test_after_a_clean_stop(broker: Broker, topics: dict[str, str]) -> None:
    want = {topic: broker.consume(topic) for topic in topics.values()}
    broker.stop()
    try:
        for topic, rows in want.items():
            assert read_rows(broker.log_dir, topic) == rows, topic
    finally:
        broker.start()


def test_an_interrupted_segment_replacement(broker: Broker, tmp_path: Path) -> None:
    """The broker's own recovery is the oracle for ``.swap`` files: a replacement (as the log
    cleaner makes) cut short before the originals were renamed (partition 0) and after
    (partition 1). Read while the broker is down, then fetched after it restarts and completes
    the replacement."""
    topic = "interrupted-swap"
    broker.create_topic(topic, 2, internal_segment_bytes=4096)
    broker.produce(topic, 600, key_space=50, value_bytes=40, batch_size=1024)
    broker.stop()
    try:
        for partition in (0, 1):
            directory = broker.log_dir / f"{topic}-{partition}"
            logs = sorted(directory.glob("*.log"), key=lambda p: int(p.stem))
            assert len(logs) >= 4, logs
            first, second = logs[0], logs[1]
            # a "cleaned" segment of the first two: every other batch kept, named after the first
            kept = []
            for log in (first, second):
                data = log.read_bytes()
                entries = scan_entries(data)
                for i, (at, size) in enumerate(zip(entries.positions, entries.sizes, strict=True)):
                    if i % 2 == 0:
                        kept.append(data[int(at) : int(at) + int(size)])
            (directory / (first.name + ".swap")).write_bytes(b"".join(kept))
            if partition == 1:  # the originals already renamed for deletion
                for log in (first, second):
                    for sibling in directory.glob(log.stem + ".*"):
                        if not sibling.name.endswith(".swap"):
                            sibling.rename(sibling.with_name(sibling.name + ".deleted"))
        ours = read_rows(broker.log_dir, topic)
    finally:
        broker.start()
    fetched = broker.consume(topic)
    assert ours == fetched
    assert 0 < len(fetched) < 1200  # records left out by the replacement are not read
