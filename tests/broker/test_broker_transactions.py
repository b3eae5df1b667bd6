"""Transactions as a real broker wrote them: two transactional producers whose transactions are
open at the same time over 3 partitions, every third transaction aborted. ``isolationLevel``
read_committed equals a read_committed consumer with the broker's ``.txnindex`` files, without
any of them, and without one of them; read_uncommitted equals a read_uncommitted consumer."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafka_segments_ds import read_table

from .kafka_broker import Broker, Row, table_rows

TOPIC = "txn-interleaved"
PARTITIONS = 3
RECORDS = 900


def read_rows(log_dir: Path, isolation: str) -> list[Row]:
    table = read_table(log_dir, subscribe=TOPIC, includeHeaders=True, isolationLevel=isolation)
    return table_rows(table)


@pytest.fixture(scope="module")
def txn_topic(broker_session: Broker) -> dict[str, list[Row]]:
    """The topic written, and what each kind of consumer fetches from it."""
    broker_session.create_topic(TOPIC, PARTITIONS, internal_segment_bytes=12 * 1024)
    summary = broker_session.produce(
        TOPIC,
        RECORDS,
        transactional_id="txn-test",
        producers=2,
        txn_records=12,
        abort_every=3,
        compression="snappy",
        headers=1,
        null_value_every=11,
        value_bytes=40,
    )
    assert summary["sent"] == RECORDS and summary["aborted"] > 5
    return {
        level: broker_session.consume(TOPIC, level)
        for level in ("read_committed", "read_uncommitted")
    }


def txnindexes(log_dir: Path) -> list[Path]:
    return sorted(log_dir.glob(f"{TOPIC}-*/*.txnindex"))


def test_read_uncommitted_keeps_aborted_records(
    broker: Broker, txn_topic: dict[str, list[Row]]
) -> None:
    want = txn_topic["read_uncommitted"]
    assert len(want) == RECORDS
    assert read_rows(broker.log_dir, "read_uncommitted") == want


def test_read_committed_with_the_brokers_txnindex(
    broker: Broker, txn_topic: dict[str, list[Row]]
) -> None:
    want = txn_topic["read_committed"]
    # aborted transactions dropped (every third of them), in every partition
    assert 0 < len(want) < RECORDS
    assert {r[1] for r in want} == set(range(PARTITIONS))
    # the broker indexed its aborted transactions, over several segments
    assert len(txnindexes(broker.log_dir)) >= 2
    assert read_rows(broker.log_dir, "read_committed") == want


def test_read_committed_without_txnindex(
    broker: Broker, txn_topic: dict[str, list[Row]], tmp_path: Path
) -> None:
    """No .txnindex at all: the reader finds the aborted transactions from the control markers."""
    copy = broker.snapshot(tmp_path / "copy", TOPIC)
    removed = txnindexes(copy)
    assert removed
    for path in removed:
        path.unlink()
    assert read_rows(copy, "read_committed") == txn_topic["read_committed"]


def test_read_committed_without_one_txnindex(
    broker: Broker, txn_topic: dict[str, list[Row]], tmp_path: Path
) -> None:
    copy = broker.snapshot(tmp_path / "copy", TOPIC)
    indexes = txnindexes(copy)
    # a partition with at least two: remove its first, keep the others
    by_partition: dict[str, list[Path]] = {}
    for path in indexes:
        by_partition.setdefault(path.parent.name, []).append(path)
    several = [paths for paths in by_partition.values() if len(paths) >= 2]
    assert several, f"no partition with two .txnindex files: {indexes}"
    several[0][0].unlink()
    assert read_rows(copy, "read_committed") == txn_topic["read_committed"]


def test_transactional_metadata(broker: Broker, txn_topic: dict[str, list[Row]]) -> None:
    """What the metadata columns say of the broker's batches: two producers, every data batch
    transactional, control batches present (commit and abort markers) but no row of them in a
    deep read."""
    meta = read_table(
        broker.log_dir,
        subscribe=TOPIC,
        columns=["offset", "producerId", "isTransactional", "isControl"],
    )
    assert len({p for p in meta.column("producerId").to_pylist()}) == 2
    assert all(meta.column("isTransactional").to_pylist())
    assert not any(meta.column("isControl").to_pylist())
    shallow = read_table(
        broker.log_dir, subscribe=TOPIC, iteration="shallow", columns=["isControl"]
    )
    assert any(shallow.column("isControl").to_pylist())


def test_read_committed_past_a_damaged_batch_without_txnindex(
    broker: Broker, txn_topic: dict[str, list[Row]], tmp_path: Path
) -> None:
    """A data batch's size field damaged in the middle of a segment, no .txnindex: with
    DROPMALFORMED the reader drops that batch and reads on, and the walk for the transaction
    markers goes on there too, so the markers after the damage still decide their
    transactions (it stopped at the damage: aborted records returned, committed ones lost)."""
    from kafka_segments_ds.records.batches import scan_entries

    copy = broker.snapshot(tmp_path / "copy", TOPIC)
    for path in txnindexes(copy):
        path.unlink()
    # in each partition, the first segment holding a marker after a data batch: damage the
    # data batch before that marker
    dropped: set[tuple[int, int]] = set()
    for partition in range(PARTITIONS):
        for log in sorted((copy / f"{TOPIC}-{partition}").glob("*.log")):
            data = bytearray(log.read_bytes())
            entries = scan_entries(bytes(data))
            control = [bool(data[p + 22] & 0x20) for p in entries.positions]
            picks = [i for i in range(1, len(control)) if control[i] and not control[i - 1]]
            if not picks or picks[0] + 1 >= len(control):
                continue
            position = int(entries.positions[picks[0] - 1])
            first = int.from_bytes(data[position : position + 8], "big")
            count = int.from_bytes(data[position + 57 : position + 61], "big")
            dropped.update((partition, o) for o in range(first, first + count))
            data[position + 8 : position + 12] = (0x7FFF0000).to_bytes(4, "big")
            log.write_bytes(bytes(data))
            break
    assert {p for p, _ in dropped} == set(range(PARTITIONS))
    table = read_table(
        copy,
        subscribe=TOPIC,
        includeHeaders=True,
        isolationLevel="read_committed",
        mode="DROPMALFORMED",
    )
    want = [r for r in txn_topic["read_committed"] if (r[1], r[2]) not in dropped]
    assert table_rows(table) == want
