"""spark.read.format("kafkasegments") on a real broker's log dir equals, record for record, what a
consumer fetches: zstd and gzip batches with headers and null keys and values, then interleaved
transactions (some aborted), read_uncommitted and read_committed."""

from __future__ import annotations

import pytest

from .kafka_broker import Broker, table_rows

TOPIC = "spark-read"

pytestmark = pytest.mark.spark


def test_spark_reads_what_the_consumer_fetches(spark, broker: Broker) -> None:  # type: ignore[no-untyped-def]
    broker.create_topic(TOPIC, 3, internal_segment_bytes=16 * 1024)
    common = dict(headers=2, null_key_every=4, null_value_every=6, value_bytes=80)
    broker.produce(TOPIC, 400, compression="zstd", tag="z", **common)
    broker.produce(TOPIC, 300, compression="gzip", tag="g", batch_size=2048, **common)
    broker.produce(
        TOPIC,
        300,
        transactional_id="spark-txn",
        producers=2,
        txn_records=10,
        abort_every=4,
        tag="t",
        compression="lz4",
        **common,
    )
    for level in ("read_uncommitted", "read_committed"):
        want = broker.consume(TOPIC, level)
        df = (
            spark.read.format("kafkasegments")
            .option("subscribe", TOPIC)
            .option("includeHeaders", "true")
            .option("isolationLevel", level)
            .option("maxBytesPerPartition", 48 * 1024)  # several input partitions
            .load(str(broker.log_dir))
        )
        assert table_rows(df.toArrow()) == want, level
    assert len(broker.consume(TOPIC, "read_committed")) < 1000
