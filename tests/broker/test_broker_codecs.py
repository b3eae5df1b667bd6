"""Segments a real broker wrote, read with read_table, equal record for record to what a consumer
fetches from that broker: every codec, small and large batches, headers, null keys and values,
idempotent producers; the live log dir (preallocated indexes), a copy of it, and after a clean
stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_segments_ds import read_table

from .kafka_broker import Broker, Row, table_rows

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
RECORDS = 600


def read_rows(log_dir: Path, topic: str, **options: object) -> list[Row]:
    return table_rows(read_table(log_dir, subscribe=topic, includeHeaders=True, **options))


@pytest.fixture(scope="module")
def codec_topics(broker_session: Broker) -> dict[str, str]:
    """Per codec one topic of 3 partitions, written twice: small batches (linger 0, 1 KiB batch
    size: a few records each, many batches) then large ones (16 KiB, linger 50 ms: up to 70
    records each), with 3 headers (one of null value), every 7th key and every 5th value null.
    Small segments (internal.segment.bytes), so each partition rolls."""
    topics = {}
    for codec in CODECS:
        topic = f"codec-{codec}"
        broker_session.create_topic(topic, 3, internal_segment_bytes=20 * 1024)
        common = dict(compression=codec, headers=3, null_key_every=7, null_value_every=5)
        broker_session.produce(
            topic, RECORDS, batch_size=1024, linger_ms=0, value_bytes=60, tag="s", **common
        )
        broker_session.produce(
            topic, RECORDS, batch_size=16384, linger_ms=50, value_bytes=200, tag="l", **common
        )
        topics[codec] = topic
    return topics


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_live(broker: Broker, codec_topics: dict[str, str], codec: str) -> None:
    """The running broker's own log dir (its active segments' indexes preallocated)."""
    topic = codec_topics[codec]
    # the active segments' indexes are preallocated (10 MiB sparse) while the broker runs
    sizes = [p.stat().st_size for p in broker.log_dir.glob(f"{topic}-*/*.index")]
    assert max(sizes) == 10 * 1024 * 1024
    want = broker.consume(topic)
    assert len(want) == 2 * RECORDS
    # the data has what the test claims: null keys, null values, a null-valued header
    assert sum(r[3] is None for r in want) > 0 and sum(r[4] is None for r in want) > 0
    assert all(len(r[5]) == 3 and r[5][1][1] is None for r in want)
    assert read_rows(broker.log_dir, topic) == want
    meta = read_table(
        broker.log_dir, subscribe=topic, includeMetadata=True, columns=["compression", "segment"]
    )
    assert set(meta.column("compression").to_pylist()) == {codec}
    # several segments per partition: the broker rolled them
    assert len(set(meta.column("segment").to_pylist())) > 3


def test_codecs_from_a_copy_and_after_a_clean_stop(
    broker: Broker, codec_topics: dict[str, str], tmp_path: Path
) -> None:
    """A copy taken while the broker runs, and the log dir after a clean shutdown (indexes
    trimmed to size), read the same records as the consumer fetched."""
    want = {topic: broker.consume(topic) for topic in codec_topics.values()}
    copy = broker.snapshot(tmp_path / "copy", *codec_topics.values())
    broker.stop()
    try:
        for topic, rows in want.items():
            assert read_rows(copy, topic) == rows, topic
            assert read_rows(broker.log_dir, topic) == rows, topic
    finally:
        broker.start()
    for topic, rows in want.items():  # the broker serves them still
        assert broker.consume(topic) == rows, topic


def test_idempotent_producer(broker: Broker) -> None:
    """An idempotent producer's batches (producer id, epoch, sequences) over 2 partitions."""
    topic = "idempotent"
    broker.create_topic(topic, 2)
    broker.produce(topic, 500, idempotent=True, compression="lz4", headers=1, value_bytes=40)
    want = broker.consume(topic)
    assert len(want) == 500
    assert read_rows(broker.log_dir, topic) == want
    meta = read_table(broker.log_dir, subscribe=topic, columns=["producerId", "isTransactional"])
    assert min(meta.column("producerId").to_pylist()) >= 0
    assert not any(meta.column("isTransactional").to_pylist())


def test_codecs_after_sigkill(broker: Broker, codec_topics: dict[str, str]) -> None:
    """SIGKILL leaves the active segments' indexes preallocated and no clean-shutdown marker:
    the log dir reads the same records; the broker's recovery on restart keeps them all."""
    want = {topic: broker.consume(topic) for topic in codec_topics.values()}
    broker.kill()
    try:
        assert not (broker.log_dir / ".kafka_cleanshutdown").exists()
        for topic, rows in want.items():
            assert read_rows(broker.log_dir, topic) == rows, topic
    finally:
        broker.start()
    for topic, rows in want.items():
        assert broker.consume(topic) == rows, topic
        assert read_rows(broker.log_dir, topic) == rows, topic
