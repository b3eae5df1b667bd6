"""Legacy message formats as a broker writes them: a Kafka 3.9 broker in ZooKeeper mode with
inter.broker.protocol.version and log.message.format.version 0.10.2 converts what today's producer
sends (magic 2 batches) to magic 1 messages, compressed ones as wrappers whose inner offsets it
assigns itself, and to magic 0 for a topic with message.format.version=0.8.2. read_table equals a
consumer record for record (magic 0 has no timestamp: -1 both sides)."""

from __future__ import annotations

import pytest

from kafka_segments_ds import read_table

from .kafka_broker import Broker, table_rows

# topic -> (its configs, the codecs produced into it in turn, the magic the broker writes)
TOPICS = {
    "magic1": ({}, ("gzip", "none", "snappy", "lz4"), 1),
    "magic1-log-append-time": (
        {"message_timestamp_type": "LogAppendTime"},
        ("gzip", "none"),
        1,
    ),
    "magic0": ({"message_format_version": "0.8.2"}, ("snappy", "none", "gzip", "lz4"), 0),
}


@pytest.fixture(scope="module")
def legacy_topics(legacy_broker: Broker) -> Broker:
    for topic, (configs, codecs, _) in TOPICS.items():
        legacy_broker.create_topic(topic, 2, segment_bytes=16 * 1024, **configs)
        for codec in codecs:
            # no headers: magic 0 and 1 cannot hold them
            legacy_broker.produce(
                topic,
                150,
                compression=codec,
                tag=codec,
                batch_size=2048,
                null_key_every=4,
                null_value_every=5,
                value_bytes=50,
            )
    return legacy_broker


@pytest.mark.parametrize("topic", list(TOPICS))
def test_legacy_formats_as_the_broker_wrote_them(legacy_topics: Broker, topic: str) -> None:
    broker = legacy_topics
    want = broker.consume(topic)
    assert len(want) == 150 * len(TOPICS[topic][1])
    table = read_table(broker.log_dir, subscribe=topic, includeHeaders=True)
    assert table_rows(table) == want
    meta = read_table(broker.log_dir, subscribe=topic, columns=["magic", "compression"])
    assert set(meta.column("magic").to_pylist()) == {TOPICS[topic][2]}
    assert set(meta.column("compression").to_pylist()) == set(TOPICS[topic][1])
