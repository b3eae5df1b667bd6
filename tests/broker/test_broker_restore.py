"""The writer against the broker (restore): log dirs written by ``write_table`` (every codec) and
by ``df.write`` (several segments, headers, chosen timestamps) are placed into the stopped
broker's partition directories of topics created with the same partition count (the broker's
``partition.metadata`` and ``leader-epoch-checkpoint`` kept, its own empty segment removed).

The log dir root needs nothing changed: ``recovery-point-offset-checkpoint`` and
``log-start-offset-checkpoint`` name the new partitions at offset 0, which the placed logs start
at. After a clean stop (``.kafka_cleanshutdown`` present) the broker loads the placed segments as
they are; after SIGKILL (no marker) its recovery runs from the recovery point 0, so over every
placed segment: it validates each batch and rebuilds the indexes. A consumer then fetches exactly
the written records, offsets, timestamps and headers, and the indexes are still ours byte for
byte (the active segment's files only grown by the broker's preallocation, zeros).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table, write_table

from .kafka_broker import Broker, Row, table_rows

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 2
RECORDS = 300
T0 = 1_600_000_000_000  # chosen timestamps, years back: the topics keep them (retention.ms=-1)
SEGMENT_BYTES = 1024
INDEX_INTERVAL_BYTES = 256  # the writer's and the topics' (index.interval.bytes)
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def source(tag: str) -> pa.Table:
    """The records to write: null keys and values, headers (one with a null value), timestamps
    going back and forth, partitions chosen per record."""
    keys, values, headers, stamps, parts = [], [], [], [], []
    for i in range(RECORDS):
        keys.append(None if i % 7 == 3 else f"k-{tag}-{i % 50}".encode())
        values.append(None if i % 11 == 5 else f"v-{tag}-{i}-".encode() * (1 + i % 5))
        headers.append(
            [{"key": "i", "value": str(i).encode()}, {"key": "n", "value": None}][: i % 3]
        )
        stamps.append(T0 + i * 1000 - (i % 4) * 1500)
        parts.append(i % PARTITIONS if i % 10 else (i // 10) % PARTITIONS)
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(headers, HEADER_TYPE),
            "timestamp": pa.array(stamps, pa.timestamp("ms")),
            "partition": pa.array(parts, pa.int32()),
        }
    )


def expected(topic: str, table: pa.Table) -> list[Row]:
    """What a consumer must fetch: per partition, offsets 0.. in the order written."""
    rows: list[Row] = []
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    for r, ms in zip(
        table.to_pylist(), table.column("timestamp").cast(pa.int64()).to_pylist(), strict=True
    ):
        p = r["partition"]
        headers = tuple((h["key"], h["value"]) for h in r["headers"])
        rows.append((topic, p, next_offset[p], r["key"], r["value"], headers, ms, 0))
        next_offset[p] += 1
    return sorted(rows, key=lambda row: (row[1], row[2]))


def place(written: Path, log_dir: Path, topic: str) -> dict[str, bytes]:
    """Our partition dirs' segment files into the broker's (its empty segment removed, its
    partition.metadata and leader-epoch-checkpoint kept); returns our index files' bytes."""
    indexes = {}
    for p in range(PARTITIONS):
        target = log_dir / f"{topic}-{p}"
        assert (target / "partition.metadata").exists()
        for old in target.glob("0*.*"):
            old.unlink()
        for ours in sorted((written / f"{topic}-{p}").iterdir()):
            shutil.copy2(ours, target / ours.name)
            if ours.suffix in (".index", ".timeindex"):
                indexes[f"{topic}-{p}/{ours.name}"] = ours.read_bytes()
    return indexes


def index_changes(log_dir: Path, indexes: dict[str, bytes]) -> list[str]:
    """Index files the broker changed, apart from zeros appended (preallocation)."""
    changed = []
    for name, ours in indexes.items():
        now = (log_dir / name).read_bytes()
        if now[: len(ours)] != ours or now[len(ours) :].strip(b"\0"):
            changed.append(f"{name}: {len(ours)} bytes written, {len(now)} now")
    return changed


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, spark) -> dict[str, tuple[Path, list[Row]]]:  # type: ignore[no-untyped-def]
    """topic -> (the log dir our writer wrote it in, the rows a consumer must fetch)."""
    home = tmp_path_factory.mktemp("restore")
    out: dict[str, tuple[Path, list[Row]]] = {}
    for codec in CODECS:
        for kind in ("clean", "unclean"):
            topic = f"restore-{kind}-{codec}"
            table = source(topic)
            write_table(
                table,
                home / topic,
                topic=topic,
                numPartitions=PARTITIONS,
                compression=codec,
                segmentBytes=SEGMENT_BYTES,
                indexIntervalBytes=INDEX_INTERVAL_BYTES,
                batchRecords=10,
            )
            out[topic] = (home / topic, expected(topic, table))
    for kind in ("clean", "unclean"):
        topic = f"restore-{kind}-spark"
        table = source(topic)
        df = spark.createDataFrame(table.to_pandas()).repartition(3)
        (
            df.write.format("kafkasegments")
            .mode("append")
            .option("topic", topic)
            .option("numPartitions", PARTITIONS)
            .option("compression", "zstd")
            .option("segmentBytes", SEGMENT_BYTES)
            .option("indexIntervalBytes", INDEX_INTERVAL_BYTES)
            .option("batchRecords", 10)
            .save(str(home / topic))
        )
        # Spark's tasks decide the order within a partition: the reader says which it is, and
        # it must hold the source's records
        got = table_rows(read_table(home / topic, subscribe=topic, includeHeaders=True))
        assert sorted(map(repr, (r[3:] for r in got))) == sorted(
            map(repr, (r[3:] for r in expected(topic, table)))
        )
        out[topic] = (home / topic, got)
    for path, _ in out.values():
        for p in range(PARTITIONS):
            assert len(list((path / f"{path.name}-{p}").glob("*.log"))) >= 3  # several segments
    return out


def test_broker_loads_placed_logs_after_clean_and_unclean_restarts(
    broker: Broker, written: dict[str, tuple[Path, list[Row]]]
) -> None:
    for topic in written:
        broker.create_topic(
            topic,
            PARTITIONS,
            retention_ms=-1,
            retention_bytes=-1,
            index_interval_bytes=INDEX_INTERVAL_BYTES,
        )
    clean = [t for t in written if "-clean-" in t]
    unclean = [t for t in written if "-unclean-" in t]

    broker.stop()
    assert (broker.log_dir / ".kafka_cleanshutdown").exists()
    indexes = {}
    for topic in clean:
        indexes.update(place(written[topic][0], broker.log_dir, topic))
    broker.start()
    for topic in clean:
        assert broker.consume(topic) == written[topic][1], topic
    assert sum(map(len, indexes.values())) > 1000  # index entries every 256 bytes
    assert index_changes(broker.log_dir, indexes) == []

    broker.kill()
    assert not (broker.log_dir / ".kafka_cleanshutdown").exists()
    unclean_indexes = {}
    for topic in unclean:
        unclean_indexes.update(place(written[topic][0], broker.log_dir, topic))
    broker.start()
    for topic in written:
        assert broker.consume(topic) == written[topic][1], topic
    assert index_changes(broker.log_dir, {**indexes, **unclean_indexes}) == []
    # its recovery went through every placed segment: it leaves a producer-state snapshot at
    # each segment's base offset (the clean load rebuilt producer state from the last ones only)
    for topic in unclean:
        for p in range(PARTITIONS):
            bases = {s.stem for s in (written[topic][0] / f"{topic}-{p}").glob("*.log")}
            snapshots = {s.stem for s in (broker.log_dir / f"{topic}-{p}").glob("*.snapshot")}
            assert bases - {"0" * 20} <= snapshots, (topic, p)
    # the broker appends after the placed records: the next offsets follow ours
    topic = unclean[0]
    broker.produce(topic, 4, partition="1")  # a string: produce() leaves out options equal to 0
    end = max(r[2] for r in written[topic][1] if r[1] == 1) + 1
    assert [r[2] for r in broker.consume(topic) if r[1] == 1][-5:] == list(range(end - 1, end + 4))
