"""kafka_segments_ds.rewrite: erase and compact into a new log dir, every kept record at its
offset with its timestamp, headers, producer fields and batch offsets; aborted records and
transaction markers left out, committed transactional records written non-transactional."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kafka_segments_ds import read_table, rewrite, write_table
from kafka_segments_ds.errors import InvalidInputError, InvalidOptionError, OutputExistsError
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_control_batch
from kafka_segments_ds.records.compression import CompressionType

T0 = 1_700_000_000_000
# partition t-0: (offset, key, value) per batch; the batch fields after
BATCHES = (
    # idempotent producer 7, one batch: offsets 0-4
    ([(0, b"a", b"a0"), (1, b"b", b"b1"), (2, b"a", b"a2"), (3, b"c", b"c3"), (4, None, b"n4")],
     {"producer_id": 7, "producer_epoch": 1, "base_sequence": 10}),
    # producer 9's transaction, committed by the marker at 7
    ([(5, b"b", b"b5"), (6, b"d", b"d6")],
     {"producer_id": 9, "producer_epoch": 0, "base_sequence": 0, "is_transactional": True}),
    # producer 9's next transaction, aborted by the marker at 10
    ([(8, b"a", b"a8"), (9, b"e", b"e9")],
     {"producer_id": 9, "producer_epoch": 0, "base_sequence": 2, "is_transactional": True}),
    # plain gzip batch: a tombstone of c, then a and f
    ([(11, b"c", None), (12, b"a", b"a12"), (13, b"f", b"f13")],
     {"compression": CompressionType.GZIP, "leader_epoch": 3}),
)  # fmt: skip
MARKERS = ((7, True), (10, False))
COMMITTED = [0, 1, 2, 3, 4, 5, 6, 11, 12, 13]
COMPARED = [
    "partition", "offset", "key", "value", "timestamp", "timestampType", "headers",
    "compression", "batchBaseOffset", "batchLastOffset", "producerId", "producerEpoch",
    "baseSequence", "leaderEpoch",
]  # fmt: skip


@pytest.fixture
def source(make_partition: Callable[..., Any], log_dir: Path) -> Path:
    t0 = make_partition("t-0")
    entries = [(b[0][0][0], b) for b in BATCHES] + [(o, m) for o, m in MARKERS]
    for offset, entry in sorted(entries, key=lambda e: e[0]):
        if isinstance(entry, bool):
            data = encode_control_batch(
                offset=offset, commit=entry, producer_id=9, producer_epoch=0, timestamp=T0
            )
            t0.writer.append(data, offset)
            continue
        records, fields = entry
        specs = [
            RecordSpec(
                key=key,
                value=value,
                timestamp=T0 + o * 10,
                headers=(("h", b"%d" % o),) if o % 2 else (),
                offset_delta=o - records[0][0],
            )
            for o, key, value in records
        ]
        t0.writer.append(encode_batch(specs, base_offset=records[0][0], **fields), records[-1][0])
    t0.close()
    t1 = make_partition("t-1")
    t1.batch([T0, T0 + 1, T0 + 2], key_prefix=b"a")  # keys a0 a1 a2, none of them "a"
    t1.close()
    return log_dir


def committed(path: Path) -> pa.Table:
    return read_table(
        path, includeMetadata=True, includeHeaders=True, isolationLevel="read_committed"
    )


def kept_rows(path: Path, offsets: dict[int, list[int]]) -> list[dict[str, Any]]:
    """The source's committed rows at ``offsets`` (partition -> offsets), as compared."""
    rows = committed(path).select(COMPARED).to_pylist()
    return [r for r in rows if r["offset"] in offsets[r["partition"]]]


def test_committed_source(source: Path) -> None:
    table = committed(source)
    assert table.filter(pc.equal(table["partition"], 0))["offset"].to_pylist() == COMMITTED
    assert table["isTransactional"].to_pylist() == [False] * 5 + [True] * 2 + [False] * 6


def test_erase_by_key_keeps_every_other_record_as_it_was(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "erased"
    summaries = rewrite.erase(source, out, keys=["a"])
    got = committed(out)
    assert got.select(COMPARED).to_pylist() == kept_rows(
        source, {0: [1, 3, 4, 5, 6, 11, 13], 1: [0, 1, 2]}
    )
    assert not any(got["isTransactional"].to_pylist())
    # the same through read_uncommitted: nothing left open, no aborted record back
    assert read_table(out, ["offset"], subscribe="t")["offset"].to_pylist() == [
        1, 3, 4, 5, 6, 11, 13, 0, 1, 2,
    ]  # fmt: skip
    assert summaries == [
        rewrite.PartitionSummary("t", 0, 10, 3, 0, 1, 13, 14, False),
        rewrite.PartitionSummary("t", 1, 3, 0, 0, 0, 2, 3, False),
    ]


def test_erase_by_predicate_and_key(source: Path, tmp_path: Path) -> None:
    def stamps_after(table: pa.Table) -> pa.ChunkedArray:
        return pc.greater(pc.cast(table["timestamp"], pa.int64()), (T0 + 100) * 1000)

    rewrite.erase(source, tmp_path / "out", keys=[b"b"], predicate=stamps_after)
    assert kept_rows(tmp_path / "out", {0: COMMITTED, 1: [0, 1, 2]}) == kept_rows(
        source, {0: [0, 2, 3, 4, 6], 1: [0, 1, 2]}
    )


def test_erase_of_selected_partitions(source: Path, tmp_path: Path) -> None:
    summaries = rewrite.erase(
        source, tmp_path / "out", keys=["a1"], options={"assign": '{"t":[1]}'}
    )
    assert summaries == [rewrite.PartitionSummary("t", 1, 3, 1, 0, 0, 2, 3, False)]
    got = read_table(tmp_path / "out", ["partition", "offset"])
    assert got.to_pylist() == [{"partition": 1, "offset": 0}, {"partition": 1, "offset": 2}]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["t-0", "t-1"]


def test_compact_keeps_the_last_record_of_each_key(source: Path, tmp_path: Path) -> None:
    summaries = rewrite.compact(source, tmp_path / "out", options={"subscribe": "t"})
    got = committed(tmp_path / "out")
    # a: 12 (8 aborted), b: 5, c: the tombstone at 11, d: 6, f: 13; e only aborted; no key: gone
    assert got.select(COMPARED).to_pylist() == kept_rows(
        source, {0: [5, 6, 11, 12, 13], 1: [0, 1, 2]}
    )
    assert got["value"].to_pylist()[2] is None
    assert summaries[0] == rewrite.PartitionSummary("t", 0, 10, 5, 1, 5, 13, 14, False)


def test_a_partition_keeps_its_end_offset(source: Path, tmp_path: Path) -> None:
    """Erasing the whole last batch (offsets 11-13) leaves an empty batch spanning 7-13 (the
    commit marker at 7, the aborted 8-9, its marker at 10, the erased 11-13): the next offset
    is still 14, for the broker and for an append."""
    out = tmp_path / "out"
    summaries = rewrite.erase(source, out, keys=["a", "c", "f"])
    assert summaries[0] == rewrite.PartitionSummary("t", 0, 10, 6, 0, 1, 6, 14, True)
    batches = read_table(out, ["batchBaseOffset", "batchLastOffset"], iteration="shallow",
                         assign='{"t":[0]}')  # fmt: skip
    assert batches.to_pylist()[-2:] == [
        {"batchBaseOffset": 5, "batchLastOffset": 6},
        {"batchBaseOffset": 7, "batchLastOffset": 13},
    ]
    assert read_table(out, ["offset"], assign='{"t":[0]}')["offset"].to_pylist() == [1, 4, 5, 6]
    write_table(pa.table({"value": [b"x"], "partition": pa.array([0], pa.int32())}), out, topic="t")
    assert read_table(out, ["offset"], assign='{"t":[0]}')["offset"].to_pylist()[-1] == 14


def test_compacting_a_compacted_log_changes_nothing(source: Path, tmp_path: Path) -> None:
    rewrite.compact(source, tmp_path / "once")
    rewrite.compact(tmp_path / "once", tmp_path / "twice")
    once = committed(tmp_path / "once").select(COMPARED)
    assert once.num_rows == 8
    assert committed(tmp_path / "twice").select(COMPARED).equals(once)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (lambda t: np.zeros(t.num_rows + 1, bool), "one boolean per row"),
        (lambda t: np.zeros(t.num_rows, np.int64), "one boolean per row"),
        (lambda t: pa.nulls(t.num_rows, pa.bool_()), "returned null"),
    ],
)
def test_bad_predicate_is_refused_and_nothing_is_written(
    source: Path, tmp_path: Path, answer: Callable[[pa.Table], Any], message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        rewrite.erase(source, tmp_path / "out", predicate=answer)
    assert not (tmp_path / "out").exists()


def test_refusals(source: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="keys or a predicate"):
        rewrite.erase(source, tmp_path / "out")
    with pytest.raises(InvalidOptionError, match="not into its source"):
        rewrite.compact(source, source)
    with pytest.raises(InvalidOptionError, match="isolationLevel"):
        rewrite.compact(source, tmp_path / "out", options={"isolationLevel": "read_uncommitted"})
    with pytest.raises(InvalidOptionError, match="preserveOffsets"):
        rewrite.compact(source, tmp_path / "out", write_options={"preserveOffsets": "false"})
    rewrite.compact(source, tmp_path / "out")
    before = sorted(p.name for p in (tmp_path / "out").rglob("*"))
    with pytest.raises(OutputExistsError):
        rewrite.compact(source, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").rglob("*")) == before


def test_copy_under_a_new_topic_name(source: Path, tmp_path: Path) -> None:
    rewrite.copy(source, tmp_path / "out", topic="u")
    got = committed(tmp_path / "out")
    assert set(got["topic"].to_pylist()) == {"u"}
    assert got.select(COMPARED).equals(committed(source).select(COMPARED))


def test_compact_many_keys_by_their_digests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 000 records of 3 000 keys (the empty key and null keys among them) in two partitions:
    the digest map, merged every 1 000 records, keeps exactly each key's last record, as the
    exact mode (the keys grouped themselves) does."""
    monkeypatch.setattr(rewrite._KeyMap, "MERGE_EVERY", 1000)
    rng = np.random.default_rng(21)
    count = 20_000
    picks = rng.integers(0, 3000, count)
    keys = [None if p % 97 == 5 else b"k" * int(p % 3) + b"%d" % p for p in picks]
    keys[7] = b""
    parts = (picks % 2).astype(np.int32)
    source = tmp_path / "src"
    write_table(
        pa.table(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array([b"v%d" % i for i in range(count)], pa.binary()),
                "partition": pa.array(parts),
            }
        ),
        source,
        topic="m",
        numPartitions=2,
        batchRecords=100,
    )
    last: dict[tuple[int, bytes], int] = {}
    seen = dict.fromkeys(range(2), 0)
    for key, part in zip(keys, parts.tolist(), strict=True):
        if key is not None:
            last[part, key] = seen[part]
        seen[part] += 1
    want = sorted((p, o) for (p, _), o in last.items())
    columns = ["partition", "offset", "key", "value"]
    summaries = rewrite.compact(source, tmp_path / "digests")
    got = read_table(tmp_path / "digests", columns)
    pairs = zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True)
    assert list(pairs) == want
    assert len(want) > 2900 and b"" in got["key"].to_pylist()
    every = read_table(source, columns)
    assert got.equals(every.filter(pc.is_in(every["value"], got["value"])))
    nulls = sum(k is None for k in keys)
    assert sum(s.removed for s in summaries) == count - len(want)
    assert sum(s.null_keys for s in summaries) == nulls
    rewrite.compact(source, tmp_path / "exact", exact=True)
    assert read_table(tmp_path / "exact", columns).equals(got)


def test_key_map_keeps_each_digest_s_highest_offset() -> None:
    """Digests given directly: two digests sharing their first half (interleaved), offsets out
    of order, and a second merge into the map: each digest keeps its highest offset."""
    key_map = rewrite._KeyMap()
    digests = np.array([[5, 1], [5, 2], [5, 1], [7, 9], [5, 2], [7, 9]], np.uint64)
    key_map.pending = [(digests, np.array([10, 11, 12, 15, 14, 13], np.int64))]
    key_map._merge()
    assert (key_map.high.tolist(), key_map.low.tolist(), key_map.last.tolist()) == (
        [5, 5, 7],
        [1, 2, 9],
        [12, 14, 15],
    )
    more = np.array([[5, 2], [8, 0], [7, 9]], np.uint64)
    key_map.pending = [(more, np.array([20, 21, 3], np.int64))]
    assert key_map.offsets().tolist() == [12, 15, 20, 21]
