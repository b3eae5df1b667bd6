"""Tests for kafka_segments_ds.samples: the sample log dir looks like a broker's and its index
files follow the rules a broker's recovery would write them by."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.index import (
    parse_offset_index,
    parse_time_index,
    parse_txn_index,
)
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.records.legacy import decode_legacy_message, expand_wrapper
from kafka_segments_ds.samples import PartitionWriter, iter_partition_dirs, write_sample_log_dir

PARTITION_DIRS = ("legacy.events-0", "metrics-v1-0", "orders-0", "orders-1")
RECORDS = 800  # conftest's SAMPLE_RECORDS_PER_PARTITION
SEGMENT_BYTES = 12000  # conftest's SAMPLE_SEGMENT_BYTES
INDEX_INTERVAL_BYTES = 4096  # PartitionWriter's default, Kafka's index.interval.bytes
V2_ATTRIBUTES = struct.Struct(">h")  # at byte 21 of a magic-2 batch
UUID = "0123456789abcdef0123456789abcdef"


def logs_of(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def entries(log: Path) -> list[dict[str, int]]:
    """Header facts of each entry of a .log: position, first/last offset, max timestamp."""
    data = log.read_bytes()
    table = scan_entries(data)
    assert table.valid_bytes == len(data), f"{log} does not frame completely"
    out = []
    for p, magic, last, max_ts in zip(
        table.positions.tolist(),
        table.magics.tolist(),
        table.last_offsets.tolist(),
        table.max_timestamps.tolist(),
        strict=True,
    ):
        control = False
        if magic == 2:
            first = int.from_bytes(data[p : p + 8], "big", signed=True)
            control = bool(V2_ATTRIBUTES.unpack_from(data, p + 21)[0] & 0x20)
        else:
            message = decode_legacy_message(data, p)
            first = expand_wrapper(message)[0].offset if message.compression else message.offset
        out.append(
            {
                "position": p,
                "first": first,
                "last": last,
                "max_ts": max_ts,
                "magic": magic,
                "control": control,
            }
        )
    return out


def expected_indexes(
    batches: list[dict[str, int]], base: int, interval: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The .index/.timeindex a broker's segment recovery (2.0+/3.8+) builds, written naively:
    an offset entry (batch last offset, batch position) once more than ``interval`` bytes lie
    between the previous entry and the batch; a time entry (max timestamp so far, last offset of
    the batch that set it) alongside, if greater than the previous time entry; and the max
    timestamp entry added when the segment is rolled."""
    offset_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    max_ts, max_ts_offset = -1, base
    last_entry = 0

    def maybe_append_time() -> None:
        if max_ts > (time_entries[-1][0] if time_entries else -1):
            time_entries.append((max_ts, max_ts_offset))

    for batch in batches:
        if batch["max_ts"] > max_ts:
            max_ts, max_ts_offset = batch["max_ts"], batch["last"]
        if batch["position"] - last_entry > interval:
            offset_entries.append((batch["last"], batch["position"]))
            maybe_append_time()
            last_entry = batch["position"]
    maybe_append_time()
    return offset_entries, time_entries


# --------------------------------------------------------------------------------------------
# layout
# --------------------------------------------------------------------------------------------


def test_log_dir_looks_like_a_brokers(sample_dir: Path) -> None:
    names = {p.name for p in sample_dir.iterdir()}
    assert names == {
        "meta.properties",
        "recovery-point-offset-checkpoint",
        "replication-offset-checkpoint",
        "log-start-offset-checkpoint",
        *PARTITION_DIRS,
        f"orders-7.{UUID}-delete",
    }
    assert "version=1" in (sample_dir / "meta.properties").read_text()
    assert "cluster.id=" in (sample_dir / "meta.properties").read_text()
    assert (sample_dir / "log-start-offset-checkpoint").read_text() == "0\n0\n"
    orders0 = {p.name for p in (sample_dir / "orders-0").iterdir()}
    assert {
        "00000000000000099999.log.deleted",
        "leader-epoch-checkpoint",
        "partition.metadata",
        "00000000000000000000.snapshot",
    } <= orders0


@pytest.mark.parametrize(
    "name", ["recovery-point-offset-checkpoint", "replication-offset-checkpoint"]
)
def test_checkpoints_name_every_partition_at_its_end(
    sample_dir: Path, sample_table: pa.Table, name: str
) -> None:
    lines = (sample_dir / name).read_text().splitlines()
    assert lines[0] == "0"
    assert int(lines[1]) == len(lines) - 2 == len(PARTITION_DIRS)
    ends = {}
    for line in lines[2:]:
        topic, partition, offset = line.split(" ")
        ends[f"{topic}-{partition}"] = int(offset)
    assert ends == dict.fromkeys(PARTITION_DIRS, RECORDS)


def test_iter_partition_dirs(sample_dir: Path) -> None:
    assert [p.name for p in iter_partition_dirs(sample_dir)] == list(PARTITION_DIRS)


@pytest.mark.parametrize("name", PARTITION_DIRS)
def test_segments_are_named_and_rolled_like_a_brokers(sample_dir: Path, name: str) -> None:
    directory = sample_dir / name
    logs = logs_of(directory)
    assert len(logs) >= 4
    expected_base = 0
    for log in logs:
        assert len(log.name) == 20 + len(".log")
        base = int(log.name[:20])
        assert base == expected_base, "each segment starts where the previous one ended"
        assert log.with_suffix(".index").exists()
        assert log.with_suffix(".timeindex").exists()
        assert log.stat().st_size <= SEGMENT_BYTES
        batches = entries(log)
        assert batches[0]["first"] == base
        for a, b in itertools.pairwise(batches):
            assert b["first"] == a["last"] + 1
        expected_base = batches[-1]["last"] + 1
    assert expected_base == RECORDS


# --------------------------------------------------------------------------------------------
# content
# --------------------------------------------------------------------------------------------


def test_everything_decodes(sample_dir: Path, sample_table: pa.Table) -> None:
    # sample_table was read with FAILFAST and checksum verification on
    for name in PARTITION_DIRS:
        topic, _, partition = name.rpartition("-")
        rows = sample_table.filter(
            pc.and_(
                pc.equal(sample_table.column("topic"), topic),
                pc.equal(sample_table.column("partition"), int(partition)),
            )
        )
        markers = {
            b["last"] for log in logs_of(sample_dir / name) for b in entries(log) if b["control"]
        }
        assert rows.column("offset").to_pylist() == sorted(set(range(RECORDS)) - markers)
        assert len(markers) == (2 if topic == "orders" else 0)


def test_topics_have_the_promised_variety(sample_table: pa.Table) -> None:
    def facts(topic: str, column: str) -> set[Any]:
        rows = sample_table.filter(pc.equal(sample_table.column("topic"), topic))
        return set(rows.column(column).to_pylist())

    assert facts("orders", "compression") == {"lz4", "zstd"}
    assert facts("orders", "isTransactional") == {True, False}
    assert facts("legacy.events", "magic") == {0, 1, 2}
    assert facts("legacy.events", "compression") >= {"gzip", "snappy"}
    assert facts("metrics-v1", "compression") == {"none"}
    assert facts("metrics-v1", "key") == {None}
    metrics = sample_table.filter(pc.equal(sample_table.column("topic"), "metrics-v1"))
    assert all(h == [] for h in metrics.column("headers").to_pylist())


def test_aborted_transaction_is_in_the_txnindex(sample_dir: Path, sample_table: pa.Table) -> None:
    for partition in (0, 1):
        directory = sample_dir / f"orders-{partition}"
        txn_files = sorted(directory.glob("*.txnindex"))
        assert len(txn_files) == 1
        (aborted,) = parse_txn_index(txn_files[0].read_bytes())
        assert aborted.producer_id == 4242
        assert aborted.last_stable_offset == aborted.last_offset + 1
        # the entry lives in the segment holding the ABORT marker
        bases = [int(p.name[:20]) for p in logs_of(directory)]
        here = int(txn_files[0].name[:20])
        following = [b for b in bases if b > here]
        assert here <= aborted.last_offset < (following[0] if following else RECORDS)
        markers = {b["last"]: b for log in logs_of(directory) for b in entries(log) if b["control"]}
        assert aborted.last_offset in markers
        rows = sample_table.filter(
            pc.and_(
                pc.equal(sample_table.column("topic"), "orders"),
                pc.equal(sample_table.column("partition"), partition),
            )
        )
        in_txn = rows.filter(
            pc.and_(
                pc.greater_equal(rows.column("offset"), aborted.first_offset),
                pc.less(rows.column("offset"), aborted.last_offset),
            )
        )
        assert in_txn.num_rows == aborted.last_offset - aborted.first_offset
        assert all(in_txn.column("isTransactional").to_pylist())
        assert set(in_txn.column("producerId").to_pylist()) == {4242}


def test_same_seed_same_data(sample_dir: Path, sample_table: pa.Table, tmp_path: Path) -> None:
    again = write_sample_log_dir(
        tmp_path / "again", records_per_partition=RECORDS, segment_bytes=SEGMENT_BYTES
    )
    table = read_table(str(again), includeHeaders=True, includeMetadata=True)
    assert table.drop_columns(["segment"]).equals(sample_table.drop_columns(["segment"]))
    for name in PARTITION_DIRS:
        assert [p.name for p in logs_of(again / name)] == [
            p.name for p in logs_of(sample_dir / name)
        ]


# --------------------------------------------------------------------------------------------
# index files
# --------------------------------------------------------------------------------------------


def segments(sample_dir: Path) -> list[tuple[Path, int | None]]:
    out = []
    for name in PARTITION_DIRS:
        logs = logs_of(sample_dir / name)
        for i, log in enumerate(logs):
            out.append((log, int(logs[i + 1].name[:20]) if i + 1 < len(logs) else None))
    return out


def test_indexes_follow_the_invariants(sample_dir: Path) -> None:
    with_entries = 0
    for log, next_base in segments(sample_dir):
        base = int(log.name[:20])
        batches = entries(log)
        starts = {b["position"] for b in batches}
        raw = log.with_suffix(".index").read_bytes()
        assert len(raw) % 8 == 0
        index = parse_offset_index(raw, base, log.stat().st_size)
        assert index.ignored == 0 and index.problem is None, index.problem
        offsets, positions = index.offsets.tolist(), index.positions.tolist()
        assert all(b > a for a, b in itertools.pairwise(offsets))
        assert all(b > a for a, b in itertools.pairwise(positions))
        assert all(p in starts and p > 0 for p in positions)
        last_at = {b["position"]: b["last"] for b in batches}
        assert all(last_at[p] == o for o, p in zip(offsets, positions, strict=True))
        with_entries += bool(offsets)

        raw = log.with_suffix(".timeindex").read_bytes()
        assert len(raw) % 12 == 0
        tindex = parse_time_index(raw, base, next_base)
        assert tindex.ignored == 0 and tindex.problem is None, tindex.problem
        stamps, toffsets = tindex.timestamps.tolist(), tindex.offsets.tolist()
        assert all(b > a for a, b in itertools.pairwise(stamps))
        assert all(b >= a for a, b in itertools.pairwise(toffsets))
        segment_max = max(b["max_ts"] for b in batches)
        if segment_max < 0:
            assert raw == b"", "magic-0 data has no timestamps to index"
        else:
            assert stamps[-1] == segment_max
        for ts, offset in zip(stamps, toffsets, strict=True):
            holding = next(i for i, b in enumerate(batches) if b["last"] >= offset)
            assert batches[holding]["last"] == offset
            assert ts == max(b["max_ts"] for b in batches[: holding + 1])
            assert base <= offset and (next_base is None or offset < next_base)
    assert with_entries > len(segments(sample_dir)) // 2


def test_indexes_are_what_recovery_would_build(sample_dir: Path) -> None:
    for log, _ in segments(sample_dir):
        base = int(log.name[:20])
        offset_entries, time_entries = expected_indexes(entries(log), base, INDEX_INTERVAL_BYTES)
        index = parse_offset_index(log.with_suffix(".index").read_bytes(), base)
        tindex = parse_time_index(log.with_suffix(".timeindex").read_bytes(), base)
        assert (
            list(zip(index.offsets.tolist(), index.positions.tolist(), strict=True))
            == offset_entries
        ), log
        assert (
            list(zip(tindex.timestamps.tolist(), tindex.offsets.tolist(), strict=True))
            == time_entries
        ), log


# --------------------------------------------------------------------------------------------
# PartitionWriter
# --------------------------------------------------------------------------------------------


def batch(first: int, timestamps: list[int]) -> tuple[bytes, int]:
    specs = [RecordSpec(value=b"x" * 40, timestamp=ts) for ts in timestamps]
    return encode_batch(specs, base_offset=first), first + len(timestamps) - 1


def test_partition_writer_rolls_by_size(tmp_path: Path) -> None:
    writer = PartitionWriter(
        tmp_path / "w-0", segment_bytes=400, index_interval_bytes=100, next_offset=100
    )
    written = []
    for i in range(12):
        entry, last = batch(writer.next_offset, [1000 + i, 990 + i, 1005 + i])
        written.append(entry)
        writer.append(entry, last)
    writer.roll()
    writer.roll()  # nothing pending: no empty segment
    logs = logs_of(tmp_path / "w-0")
    assert logs[0].name == "00000000000000000100.log"
    assert len(logs) > 3
    assert all(log.stat().st_size <= 400 for log in logs)
    assert b"".join(log.read_bytes() for log in logs) == b"".join(written)
    assert not list((tmp_path / "w-0").glob("*.txnindex"))
    for log in logs:
        base = int(log.name[:20])
        offset_entries, time_entries = expected_indexes(entries(log), base, 100)
        index = parse_offset_index(log.with_suffix(".index").read_bytes(), base)
        tindex = parse_time_index(log.with_suffix(".timeindex").read_bytes(), base)
        assert (
            list(zip(index.offsets.tolist(), index.positions.tolist(), strict=True))
            == offset_entries
        )
        assert (
            list(zip(tindex.timestamps.tolist(), tindex.offsets.tolist(), strict=True))
            == time_entries
        )
    assert writer.next_offset == 136
    table = read_table(str(tmp_path / "w-0"))
    assert table.column("offset").to_pylist() == list(range(100, 136))


def test_partition_writer_txnindex(make_partition: Callable[..., Any]) -> None:
    part = make_partition("tx-0", segment_bytes=1 << 20)
    part.batch([1, 2], producer_id=9, transactional=True)
    marker = part.marker(9, commit=False)
    part.writer.record_abort(9, 0, marker)
    directory = part.close()
    (txn_file,) = directory.glob("*.txnindex")
    assert txn_file.name == "00000000000000000000.txnindex"
    raw = txn_file.read_bytes()
    assert raw == struct.pack(">hqqqq", 0, 9, 0, 2, 3)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in parse_txn_index(raw)] == [
        (9, 0, 2)
    ]
