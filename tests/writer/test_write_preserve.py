"""write_table(..., preserveOffsets=True): offsets and batch fields kept, round trips, errors."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from kafka_segments_ds import InvalidInputError, InvalidOptionError, read_table, write_table
from kafka_segments_ds.layout import parse_partition_dir_name
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.samples import PartitionWriter

T0 = 1_700_000_000_000
REALWORLD = Path(__file__).resolve().parents[2] / ".." / "shared" / "realworld"
# columns that say where a record sits in the files, not what it is
PLACEMENT = ("segment", "position")
ORDER = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]


def full_read(path: Path, **options: object) -> pa.Table:
    table = read_table(str(path), includeHeaders=True, includeMetadata=True, **options)
    return table.sort_by(ORDER)


def listing(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def assert_same_rows(source: pa.Table, copy: pa.Table, skip: tuple[str, ...] = ()) -> None:
    assert copy.num_rows == source.num_rows
    for name in source.column_names:
        if name in PLACEMENT or name in skip:
            continue
        assert copy.column(name).to_pylist() == source.column(name).to_pylist(), name


def rows(**columns: list) -> pa.Table:  # type: ignore[type-arg]
    count = len(columns["offset"])
    columns.setdefault("value", [b"v%d" % i for i in range(count)])
    columns.setdefault("timestamp", [T0 + i for i in range(count)])
    types = {
        "value": pa.binary(),
        "offset": pa.int64(),
        "timestamp": pa.timestamp("ms", tz="UTC"),
        "partition": pa.int32(),
        "timestampType": pa.int32(),
        "producerId": pa.int64(),
        "producerEpoch": pa.int16(),
        "baseSequence": pa.int32(),
        "batchBaseOffset": pa.int64(),
        "batchLastOffset": pa.int64(),
        "isTransactional": pa.bool_(),
        "isControl": pa.bool_(),
    }
    return pa.table({k: pa.array(v, types.get(k)) for k, v in columns.items()})


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------


def test_sample_dir_round_trips(sample_dir: Path, tmp_path: Path) -> None:
    source = full_read(sample_dir)
    write_table(source, tmp_path / "copy", preserveOffsets=True)
    copy = full_read(tmp_path / "copy")
    v2 = [m == 2 for m in source.column("magic").to_pylist()]
    assert_same_rows(source.filter(pa.array(v2)), copy.filter(pa.array(v2)))
    # legacy (magic 0/1) rows come back as magic 2, everything else kept; magic 0 had no time
    legacy_source = source.filter(pa.array([not x for x in v2]))
    legacy_copy = copy.filter(pa.array([not x for x in v2]))
    assert legacy_source.num_rows > 0
    assert_same_rows(legacy_source, legacy_copy, skip=("magic", "timestampType"))
    assert set(legacy_copy.column("magic").to_pylist()) == {2}
    # the transactional orders keep their gaps (markers) and transactional flags
    orders = source.filter(pa.compute.equal(source.column("topic"), "orders"))
    assert any(orders.column("isTransactional").to_pylist())


def test_round_trip_is_stable_batch_for_batch(sample_dir: Path, tmp_path: Path) -> None:
    """A copy of a copy is byte for byte the copy: batches are rebuilt from their rows alone."""
    write_table(full_read(sample_dir), tmp_path / "one", preserveOffsets=True)
    write_table(full_read(tmp_path / "one"), tmp_path / "two", preserveOffsets=True)
    assert listing(tmp_path / "one") == listing(tmp_path / "two")
    shallow_one = read_table(str(tmp_path / "one"), iteration="shallow", includeMetadata=True)
    shallow_src = read_table(str(sample_dir), iteration="shallow", includeMetadata=True)
    v2 = pa.compute.equal(shallow_src.column("magic"), 2)
    src_batches = shallow_src.filter(
        pa.compute.and_(v2, pa.compute.invert(shallow_src.column("isControl")))
    )
    keys = ["topic", "partition", "batchBaseOffset", "batchLastOffset", "producerId",
            "baseSequence", "isTransactional", "compression"]  # fmt: skip
    src_rows = sorted(zip(*(src_batches.column(k).to_pylist() for k in keys), strict=True))
    one_rows = set(zip(*(shallow_one.column(k).to_pylist() for k in keys), strict=True))
    assert set(src_rows) <= one_rows


def _log_dirs() -> list[str]:
    """Every directory under ../shared/realworld that holds partition directories."""
    if not REALWORLD.is_dir():
        return []
    found = {
        path.parent.parent.relative_to(REALWORLD).as_posix()
        for path in REALWORLD.rglob("*.log")
        if parse_partition_dir_name(path.parent.name) is not None
    }
    return sorted(found)


REALWORLD_DIRS = _log_dirs()


@pytest.mark.skipif(not REALWORLD_DIRS, reason="../shared/realworld is absent")
@pytest.mark.parametrize("name", REALWORLD_DIRS)
def test_realworld_round_trip(name: str, tmp_path: Path) -> None:
    source = full_read(REALWORLD / name)
    if source.num_rows == 0:
        pytest.skip(f"{name} holds no records (emptied by retention)")
    write_table(source, tmp_path / "copy", preserveOffsets=True)
    copy = full_read(tmp_path / "copy")
    v2 = pa.compute.equal(source.column("magic"), 2)
    assert_same_rows(source.filter(v2), copy.filter(v2))
    legacy = pa.compute.invert(v2)
    assert_same_rows(source.filter(legacy), copy.filter(legacy), skip=("magic", "timestampType"))
    # uncompressed CreateTime batches come back byte for byte (all their fields are in the rows)
    original, rebuilt = batch_bytes(REALWORLD / name), batch_bytes(tmp_path / "copy")
    plain = {k: raw for k, (raw, codec, kind) in original.items() if codec == "none" and kind == 0}
    assert {k: rebuilt[k][0] for k in plain} == plain


def batch_bytes(root: Path) -> dict[tuple, tuple]:  # type: ignore[type-arg]
    """(topic, partition, base offset) -> (bytes, codec, timestampType) of each v2 data batch."""
    table = read_table(str(root), iteration="shallow", includeMetadata=True)
    out = {}
    for row in table.to_pylist():
        if row["magic"] != 2 or row["isControl"]:
            continue
        with open(row["segment"], "rb") as log:
            log.seek(row["position"])
            head = log.read(12)
            raw = head + log.read(int.from_bytes(head[8:], "big"))
        key = (row["topic"], row["partition"], row["batchBaseOffset"])
        out[key] = (raw, row["compression"], row["timestampType"])
    return out


# --------------------------------------------------------------------------------------------
# Batches from rows
# --------------------------------------------------------------------------------------------


def shallow(path: Path) -> list[tuple]:  # type: ignore[type-arg]
    table = read_table(str(path), iteration="shallow", includeMetadata=True)
    names = ["batchBaseOffset", "batchLastOffset", "producerId", "baseSequence", "timestampType"]
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))


def test_gaps_without_batch_columns_start_batches(tmp_path: Path) -> None:
    write_table(rows(offset=[5, 6, 9, 20]), tmp_path, topic="t", preserveOffsets=True)
    assert shallow(tmp_path) == [(5, 6, -1, -1, 0), (9, 9, -1, -1, 0), (20, 20, -1, -1, 0)]
    assert full_read(tmp_path).column("offset").to_pylist() == [5, 6, 9, 20]
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == ["00000000000000000005.log"]


def test_batch_columns_keep_gaps_inside_a_batch(tmp_path: Path) -> None:
    """As the log cleaner leaves them: deltas from the original base, last offset kept."""
    table = rows(
        offset=[4, 6, 7, 12],
        batchBaseOffset=[3, 3, 3, 12],
        batchLastOffset=[8, 8, 8, 13],
        producerId=[9, 9, 9, 9],
        producerEpoch=[1, 1, 1, 1],
        baseSequence=[100, 100, 100, 106],
    )
    write_table(table, tmp_path, topic="t", preserveOffsets=True)
    assert shallow(tmp_path) == [(3, 8, 9, 100, 0), (12, 13, 9, 106, 0)]
    back = full_read(tmp_path)
    assert back.column("offset").to_pylist() == [4, 6, 7, 12]
    assert back.column("batchBaseOffset").to_pylist() == [3, 3, 3, 12]
    assert back.column("value").to_pylist() == [b"v0", b"v1", b"v2", b"v3"]
    # the bytes are what the reference builder makes of the original batch minus records 3, 5, 8
    specs = [
        RecordSpec(value=b"v%d" % i, timestamp=T0 + i, offset_delta=o - 3)
        for i, o in enumerate([4, 6, 7])
    ]
    expected = encode_batch(
        specs, base_offset=3, producer_id=9, producer_epoch=1, base_sequence=100,
        last_offset_delta=5, leader_epoch=0,
    )  # fmt: skip
    log = (tmp_path / "t-0" / "00000000000000000003.log").read_bytes()
    assert log[: len(expected)] == expected


def test_idempotent_runs_split_at_sequence_changes(tmp_path: Path) -> None:
    table = rows(
        offset=[0, 1, 2, 3, 4],
        producerId=[7, 7, 7, 7, 8],
        producerEpoch=[0, 0, 0, 0, 0],
        baseSequence=[0, 0, 2, 2, 0],
    )
    write_table(table, tmp_path, topic="t", preserveOffsets=True, batchRecords=1)
    assert shallow(tmp_path) == [(0, 1, 7, 0, 0), (2, 3, 7, 2, 0), (4, 4, 8, 0, 0)]


def test_non_idempotent_runs_follow_batch_limits(tmp_path: Path) -> None:
    write_table(rows(offset=[10, 11, 12, 13, 14]), tmp_path, topic="t", preserveOffsets=True,
                batchRecords=2)  # fmt: skip
    assert [b[:2] for b in shallow(tmp_path)] == [(10, 11), (12, 13), (14, 14)]


def test_log_append_time_and_transactional_kept(tmp_path: Path) -> None:
    table = rows(
        offset=[0, 1, 2, 3],
        timestamp=[T0, T0, T0 + 5, T0 + 9],
        timestampType=[1, 1, 1, 0],
        producerId=[3, 3, 3, 3],
        producerEpoch=[2, 2, 2, 2],
        baseSequence=[0, 0, 0, 0],
        isTransactional=[True, True, True, True],
    )
    write_table(table, tmp_path, topic="t", preserveOffsets=True)
    back = full_read(tmp_path)
    assert back.column("timestampType").to_pylist() == [1, 1, 1, 0]
    stamps = [int(t.timestamp() * 1000) for t in back.column("timestamp").to_pylist()]
    assert stamps == [T0, T0, T0 + 5, T0 + 9]
    assert back.column("isTransactional").to_pylist() == [True] * 4
    # one append time per batch: the third row starts a batch
    assert [b[:2] for b in shallow(tmp_path)] == [(0, 1), (2, 2), (3, 3)]


def test_append_continues_after_the_end_with_a_gap(tmp_path: Path) -> None:
    write_table(rows(offset=[0, 1, 2]), tmp_path, topic="t", preserveOffsets=True)
    write_table(rows(offset=[10, 11]), tmp_path, topic="t", preserveOffsets=True)
    assert full_read(tmp_path).column("offset").to_pylist() == [0, 1, 2, 10, 11]
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names == ["00000000000000000000.log", "00000000000000000010.log"]


def test_null_timestamp_stays_none(tmp_path: Path) -> None:
    write_table(rows(offset=[0, 1], timestamp=[None, T0]), tmp_path, topic="t",
                preserveOffsets=True)  # fmt: skip
    stamps = full_read(tmp_path).column("timestamp").to_pylist()
    assert stamps[0] is None and int(stamps[1].timestamp() * 1000) == T0


# --------------------------------------------------------------------------------------------
# Refusals: before anything is written, target unchanged
# --------------------------------------------------------------------------------------------


@pytest.fixture
def existing(tmp_path: Path) -> Path:
    """Topic t with partitions 0 (offsets 0..4) and 1 (empty)."""
    root = tmp_path / "logs"
    write_table(rows(offset=[0, 1, 2, 3, 4], partition=[0] * 5), root, topic="t",
                numPartitions=2, preserveOffsets=True)  # fmt: skip
    return root


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (rows(offset=[5, 7, 6], partition=[0] * 3), "offset 6 follows offset 7"),
        (rows(offset=[5, 5], partition=[0] * 2), "offset 5 follows offset 5"),
        (rows(offset=[5, None], partition=[0] * 2), "row 1 has a null offset"),
        (rows(offset=[5], partition=[2]), "partition 2 is outside topic 't'"),
        (
            rows(offset=[3, 9], partition=[0] * 2),
            r"offset 3 \(the base offset of their first batch\), below the partition's end",
        ),
        (rows(offset=[5, 6], partition=[0, 0], isControl=[False, True]), "control record"),
        (
            rows(offset=[5, 6], partition=[0, 0], batchBaseOffset=[5, 5], batchLastOffset=[5, 6]),
            "overlaps the batch before it",
        ),
        (rows(offset=[5], partition=[0], batchBaseOffset=[6], batchLastOffset=[7]),
         "outside its batch"),
    ],
)  # fmt: skip
def test_bad_rows_change_nothing(existing: Path, table: pa.Table, message: str) -> None:
    before = listing(existing)
    with pytest.raises(InvalidInputError, match=message):
        write_table(table, existing, topic="t", preserveOffsets=True)
    assert listing(existing) == before


def test_offset_column_required(existing: Path) -> None:
    before = listing(existing)
    with pytest.raises(InvalidInputError, match="preserveOffsets=true needs an 'offset' column"):
        write_table(pa.table({"value": [b"x"]}), existing, topic="t", preserveOffsets=True)
    with pytest.raises(InvalidInputError, match="set preserveOffsets=true"):
        write_table(rows(offset=[9]), existing, topic="t")
    assert listing(existing) == before


def test_preserve_offsets_needs_magic_2(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="magic 2"):
        write_table(rows(offset=[0]), tmp_path, topic="t", preserveOffsets=True, magic=1)


def test_order_across_input_batches_is_checked(tmp_path: Path) -> None:
    first = rows(offset=[0, 1]).to_batches()[0]
    second = rows(offset=[1, 2]).to_batches()[0]
    with pytest.raises(InvalidInputError, match="offset 1 follows offset 1"):
        write_table(iter([first, second]), tmp_path / "x", topic="t", preserveOffsets=True)
    assert not (tmp_path / "x").exists()


def test_broker_written_batch_is_reproduced(tmp_path: Path) -> None:
    """A batch as a producer sends it (compressed, headers) comes back byte for byte."""
    source = tmp_path / "src"
    writer = PartitionWriter(source / "t-0", next_offset=40)
    specs = [
        RecordSpec(key=b"k", value=b"v%d" % i, timestamp=T0 + i, headers=(("h", b"x"),))
        for i in range(3)
    ]
    batch = encode_batch(specs, base_offset=40, compression=3, producer_id=5, producer_epoch=0,
                         base_sequence=12, leader_epoch=4)  # fmt: skip
    writer.append(batch, 42)
    writer.roll()
    write_table(full_read(source), tmp_path / "copy", preserveOffsets=True)
    copy = (tmp_path / "copy" / "t-0" / "00000000000000000040.log").read_bytes()
    assert copy == batch


def test_read_committed_archive_recipe(sample_dir: Path, tmp_path: Path) -> None:
    """The README's recipe: read_committed rows, isTransactional dropped, offsets kept."""
    committed = full_read(sample_dir, isolationLevel="read_committed")
    everything = full_read(sample_dir)
    assert committed.num_rows < everything.num_rows  # the sample holds an aborted transaction
    write_table(committed.drop_columns(["isTransactional"]), tmp_path, preserveOffsets=True)
    copy = full_read(tmp_path, isolationLevel="read_committed")
    names = ["topic", "partition", "offset", "key", "value", "timestamp", "headers"]
    assert copy.select(names).to_pylist() == committed.select(names).to_pylist()


@pytest.mark.parametrize("codec", [0, 3])
def test_encoder_starts_force_batch_boundaries_in_both_kernels(codec: int) -> None:
    """encode_v2(starts=...): a batch starts at every flagged row, besides the size cuts; the
    compiled kernel and its pure-Python twin agree byte for byte."""
    from kafka_segments_ds.records import encoder as E
    from kafka_segments_ds.writer.columns import record_columns

    table = pa.table({"value": [b"x" * (i % 7 * 20) for i in range(40)]})
    columns = record_columns(table, T0)
    starts = np.zeros(40, np.uint8)
    starts[[0, 3, 4, 17, 39]] = 1
    settings = E.BatchSettings(compression=codec, batch_bytes=400)
    compiled = E.encode_v2(columns, settings, 10, starts=starts)
    saved = {name: getattr(E, name) for name in E.PURE_PYTHON}
    try:
        for name, function in E.PURE_PYTHON.items():
            setattr(E, name, function)
        pure = E.encode_v2(columns, settings, 10, starts=starts)
    finally:
        for name, function in saved.items():
            setattr(E, name, function)
    assert bytes(compiled.data) == bytes(pure.data)
    assert compiled.first_rows.tolist() == pure.first_rows.tolist()
    # the same as encoding each forced segment on its own, with its size cuts
    expected = []
    for first, stop in [(0, 3), (3, 4), (4, 17), (17, 39), (39, 40)]:
        part = record_columns(table.slice(first, stop - first), T0)
        expected += (E.encode_v2(part, settings, 10 + first).first_rows + first).tolist()
    assert compiled.first_rows.tolist() == expected
    assert len(expected) > 5  # size cuts too


def test_a_batch_split_over_input_batches_stays_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also when the task's pending-bytes limit flushes between the halves of a batch."""
    from kafka_segments_ds.writer import task

    monkeypatch.setattr(task, "TASK_PENDING_BYTES", 1)
    table = rows(
        offset=list(range(10)),
        batchBaseOffset=[0] * 6 + [6] * 4,
        batchLastOffset=[5] * 6 + [9] * 4,
        producerId=[4] * 10,
        producerEpoch=[0] * 10,
        baseSequence=[0] * 6 + [6] * 4,
    )
    write_table(iter(table.to_batches(max_chunksize=3)), tmp_path, topic="t",
                preserveOffsets=True)  # fmt: skip
    assert shallow(tmp_path) == [(0, 5, 4, 0, 0), (6, 9, 4, 6, 0)]
