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

``kafka-segments restore`` (issue 21) does the placing: from a copy of a topic's partition
directories and from the broker's LocalTieredStorage bucket, into a new topic on the stopped
broker, a consumer group whose committed offsets were decoded from ``__consumer_offsets`` then
resumes at exactly the records after them. ``kafka-segments erase`` and ``compact`` write a
topic's copy without some records, and the broker, recovering it after SIGKILL, serves the
same offsets minus the removed ones.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table, write_table
from kafka_segments_ds.cli import main
from kafka_segments_ds.errors import CorruptSegmentError, NoKafkaDataError
from kafka_segments_ds.internal_topics.consumer_offsets import decode_consumer_offsets

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


UPLOAD_WAIT_S = 120


def committed_offsets(broker: Broker, copy: Path, group: str, topic: str) -> dict[int, int]:
    """``group``'s committed offsets of ``topic``, decoded from a copy of the broker's
    ``__consumer_offsets`` by our reader (a group's commits sit in one partition, in order)."""
    broker.snapshot(copy, "__consumer_offsets")
    out: dict[int, int] = {}
    for row in read_table(copy, ["key", "value"]).to_pylist():
        key, value = decode_consumer_offsets(row["key"], row["value"])
        data = key.get("data") or {}
        if key.get("type") != "offset_commit" or (data["group"], data["topic"]) != (group, topic):
            continue
        if value is None:
            out.pop(data["partition"], None)
        else:
            out[data["partition"]] = value["data"]["offset"]
    return out


def create_target(broker: Broker, topic: str) -> None:
    """Create the topic restored into, and wait for the broker to create its partition
    directories (it does so after the controller answers)."""
    broker.create_topic(topic, PARTITIONS)
    deadline = time.monotonic() + UPLOAD_WAIT_S
    while not all(
        (broker.log_dir / f"{topic}-{p}" / "partition.metadata").exists() for p in range(PARTITIONS)
    ):
        assert time.monotonic() < deadline, f"the broker did not create {topic}'s directories"
        time.sleep(0.1)


def restore(archive: Path, broker: Broker, *args: str) -> None:
    assert main(["restore", str(archive), str(broker.log_dir), *args]) == 0


def renamed(rows: list[Row], topic: str) -> list[Row]:
    return [(topic, *r[1:]) for r in rows]


def test_consumer_group_resumes_on_a_restored_topic(broker: Broker, tmp_path: Path) -> None:
    src, dst = "restore-group-src", "restore-group-dst"
    broker.create_topic(src, PARTITIONS, internal_segment_bytes=4096)
    # idempotent lz4 batches with headers, then transactions (every third aborted)
    broker.produce(src, 100, idempotent=True, compression="lz4", headers=2, tag="plain")
    broker.produce(
        src, 200, transactional_id="restore-tx", producers=2, txn_records=10, abort_every=3
    )
    before = broker.consume(src, "read_committed", group="restore-g")  # commits its positions
    broker.produce(src, 150, compression="zstd", tag="after", null_key_every=7)
    # the log ends with an aborted transaction and its markers; a group commits at the end
    broker.produce(
        src, 40, transactional_id="restore-tx2", producers=2, txn_records=10, abort_every=2
    )
    want = broker.consume(src, "read_committed", group="restore-end")
    assert len(before) == 100 + 140  # 20 transactions of 10, 6 of them aborted
    assert len(want) == len(before) + 150 + 20
    offsets = committed_offsets(broker, tmp_path / "offsets", "restore-g", src)
    at_end = committed_offsets(broker, tmp_path / "offsets-end", "restore-end", src)
    assert sorted(offsets) == sorted(at_end) == list(range(PARTITIONS))
    for p in range(PARTITIONS):  # a marker (or more) after the last record
        assert at_end[p] > max(r[2] for r in want if r[1] == p) + 1
    archive = broker.snapshot(tmp_path / "archive", src)

    create_target(broker, dst)
    broker.stop()
    restore(archive, broker, "--option", f"subscribe={src}", "--topic", dst)
    for p in range(PARTITIONS):
        # the topic's one leader epoch (0) from the first record on; the target's topic id
        checkpoint = (broker.log_dir / f"{dst}-{p}" / "leader-epoch-checkpoint").read_text()
        assert checkpoint == "0\n1\n0 0\n"
        assert (
            (broker.log_dir / f"{dst}-{p}" / "partition.metadata")
            .read_text()
            .startswith("version: 0\ntopic_id: ")
        )
    broker.start()
    broker.commit("restore-g2", dst, offsets)
    resumed = broker.consume(dst, "read_committed", group="restore-g2", from_committed=True)
    assert resumed == renamed([r for r in want if r[2] >= offsets[r[1]]], dst)
    assert len(resumed) == 150 + 20  # exactly the records produced after the commit
    # the whole topic: the same offsets, no aborted record, no transaction left open
    assert broker.consume(dst, "read_committed") == renamed(want, dst)
    assert broker.consume(dst) == renamed(want, dst)
    # the end offsets kept (an empty batch spans the last markers): a group committed at the
    # end is in range and gets exactly what is produced next, at the offsets that follow
    broker.commit("restore-end2", dst, at_end)
    broker.produce(dst, 4, tag="new")
    fresh = broker.consume(dst, group="restore-end2", from_committed=True)
    assert [(r[1], r[2]) for r in fresh] == [
        (p, at_end[p] + i) for p in range(PARTITIONS) for i in range(2)
    ]


def bucket_ends(bucket: Path, topic: str) -> dict[int, int]:
    """The next offset after each partition's last record in the bucket ({} while an upload is
    still being written and does not read yet)."""
    try:
        rows = read_table(bucket, ["partition", "offset"], subscribe=topic).to_pylist()
    except (CorruptSegmentError, NoKafkaDataError, OSError):  # a segment half uploaded
        return {}
    ends: dict[int, int] = {}
    for r in rows:
        ends[r["partition"]] = max(ends.get(r["partition"], 0), r["offset"] + 1)
    return ends


def test_consumer_group_resumes_on_a_topic_restored_from_its_tiered_bucket(
    broker: Broker, tmp_path: Path
) -> None:
    src, dst = "restore-tiered-src", "restore-tiered-dst"
    broker.create_topic(
        src,
        PARTITIONS,
        remote_storage_enable="true",
        local_retention_ms=500,
        internal_segment_bytes=8192,
    )
    broker.produce(src, 300, compression="zstd", headers=2, value_bytes=60, batch_size=1024)
    broker.consume(src, group="restore-tg")
    broker.produce(src, 300, tag="after", null_key_every=5, null_value_every=7, batch_size=1024)
    offsets = committed_offsets(broker, tmp_path / "offsets", "restore-tg", src)
    deadline = time.monotonic() + UPLOAD_WAIT_S
    # every rolled segment uploaded and deleted here (only the active one is local), and the
    # bucket reaching past the committed offsets: uploads lag the rolls, so wait for both
    while True:
        local = [len(list((broker.log_dir / f"{src}-{p}").glob("*.log"))) for p in offsets]
        ends = bucket_ends(broker.tiered_dir, src) if all(n == 1 for n in local) else {}
        if all(0 < offsets[p] < ends.get(p, 0) for p in range(PARTITIONS)):
            break
        assert time.monotonic() < deadline, ("the broker did not upload past the group", ends)
        time.sleep(0.5)
    want = broker.consume(src)

    create_target(broker, dst)
    broker.stop()
    # the cluster gone, only the bucket left: restore from it
    restore(broker.tiered_dir, broker, "--option", f"subscribe={src}", "--topic", dst)
    broker.start()
    broker.commit("restore-tg2", dst, offsets)
    resumed = broker.consume(dst, group="restore-tg2", from_committed=True)
    assert resumed == renamed([r for r in want if offsets[r[1]] <= r[2] < ends[r[1]]], dst)
    assert broker.consume(dst) == renamed([r for r in want if r[2] < ends[r[1]]], dst)


def spark_erase(spark, archive: Path, target: Path, topic: str, gone: set[bytes]) -> None:  # type: ignore[no-untyped-def]
    """docs/recipes.md's Spark erasure: read with the metadata columns and read_committed,
    filter, write with preserveOffsets into a new directory."""
    from pyspark.sql import functions as F

    rows = (
        spark.read.format("kafkasegments")
        .option("includeHeaders", "true")
        .option("includeMetadata", "true")
        .option("isolationLevel", "read_committed")
        .load(str(archive))
    )
    kept = rows.where(~F.col("key").isin(*gone) | F.col("key").isNull()).drop(
        "isTransactional", "isControl", "magic", "segment", "position", "topic"
    )
    (
        kept.write.format("kafkasegments")
        .mode("append")
        .option("topic", topic)
        .option("numPartitions", PARTITIONS)
        .option("preserveOffsets", "true")
        .option("errorIfTopicExists", "true")
        .save(str(target))
    )


def test_erased_and_compacted_copies_load_with_their_offsets(
    broker: Broker,
    tmp_path: Path,
    spark,  # type: ignore[no-untyped-def]
) -> None:
    src = "rewrite-src"
    broker.create_topic(src, PARTITIONS, internal_segment_bytes=4096)
    broker.produce(
        src, 300, key_space=20, null_key_every=9, headers=1, compression="lz4", idempotent=True
    )
    broker.produce(src, 100, key_space=20, tag="r", batch_size=512)  # the same keys again
    want = broker.consume(src)
    archive = broker.snapshot(tmp_path / "archive", src)
    erased, compacted = ("rewrite-erased", "rewrite-compacted")
    gone = {b"key-r-3", b"key-r-11"}
    keys = [arg for k in sorted(gone) for arg in ("--key", k.decode())]
    assert main(["erase", str(archive), str(tmp_path / erased), *keys]) == 0
    assert main(["compact", str(archive), str(tmp_path / compacted)]) == 0
    # the Spark recipe writes the same log as the command
    spark_erase(spark, archive, tmp_path / "spark", src, gone)
    where = ["segment", "position", "topic"]
    assert (
        read_table(tmp_path / "spark", includeMetadata=True, includeHeaders=True)
        .drop_columns(where)
        .equals(
            read_table(tmp_path / erased, includeMetadata=True, includeHeaders=True).drop_columns(
                where
            )
        )
    )
    last: dict[tuple[int, bytes], Row] = {}
    for r in want:
        if r[3] is not None:
            last[r[1], r[3]] = r
    for topic in (erased, compacted):
        create_target(broker, topic)
    broker.kill()  # the next start recovers every restored segment: validates each batch
    for topic in (erased, compacted):
        restore(tmp_path / topic, broker, "--topic", topic)
    broker.start()
    assert broker.consume(erased) == renamed([r for r in want if r[3] not in gone], erased)
    kept = sorted(last.values(), key=lambda r: (r[1], r[2]))
    assert broker.consume(compacted) == renamed(kept, compacted)
    assert len(kept) == 20  # keys key-r-0..19, each in one partition


class Crash(BaseException):
    """The restore's process dying (not an Exception: no handler runs)."""


def test_an_unfinished_restore_is_not_served_and_a_re_run_finishes_it(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore that dies between its renames leaves its staging directory in the log dir:
    Kafka refuses to start on a directory not named for a partition, so the half-restored
    partitions are never served; running the same restore again finishes it, and the broker
    then serves every record at its offset."""
    src, dst = "restore-crash-src", "restore-crash-dst"
    broker.create_topic(src, PARTITIONS)
    broker.produce(src, 300, compression="lz4", headers=1)
    want = broker.consume(src)
    archive = broker.snapshot(tmp_path / "archive", src)
    create_target(broker, dst)
    broker.stop()
    args = ("--option", f"subscribe={src}", "--topic", dst, "--write-option", "segmentBytes=2048")
    real, moves = os.replace, [0]

    def replace(source: object, target: object) -> None:
        if moves[0] == 8:  # the marker twice, then partition 0's files, .log files last
            raise Crash(f"{source} -> {target}")
        moves[0] += 1
        real(source, target)  # type: ignore[arg-type]

    with monkeypatch.context() as patched:
        patched.setattr(os, "replace", replace)
        with pytest.raises(Crash):
            restore(archive, broker, *args)
    assert (broker.log_dir / ".kafka-segments-restore" / "RESTORE.json").exists()
    placed = [p for p in (broker.log_dir / f"{dst}-0").glob("*") if p.suffix == ".index"]
    assert placed  # some of partition 0's files are in place
    with pytest.raises(RuntimeError, match="did not start"):
        broker.start()
    log = (broker.home / "broker.log").read_text(errors="replace")
    assert "'.kafka-segments-restore' is not in the form of topic-partition" in log
    restore(archive, broker, *args)
    assert not (broker.log_dir / ".kafka-segments-restore").exists()
    broker.start()
    assert broker.consume(dst) == renamed(want, dst)
