"""The streaming sink's tasks and commits without Spark (kafka_segments_ds.writer.sink): the rows
of Spark's Kafka source become an archive with their offsets; a micro-batch committed again (the
same batch id, tasks run again) changes nothing, also after a commit killed past its journal;
gaps, new partitions, and what is refused."""

from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.errors import CommitInProgressError, InvalidInputError, InvalidOptionError
from kafka_segments_ds.writer import commit as commit_module
from kafka_segments_ds.writer import sink as sink_module
from kafka_segments_ds.writer.sink import (
    SINK_DIR,
    SINK_STAGING,
    abort_batch,
    commit_batch,
    prepare_sink,
    write_task,
)

UTC = datetime.UTC
TS0 = 1_700_000_000_000
HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
# the columns of spark.readStream.format("kafka") with includeHeaders=true, as Spark hands them
KAFKA_SOURCE = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(HEADER)),
    ]
)
OPTIONS = {"checkpointLocation": "/tmp/some-checkpoint", "compression": "lz4"}


def source_rows(topic: str, partition: int, offsets: list[int]) -> pa.Table:
    """Rows as Spark's Kafka source gives them: every third key null, headers on odd offsets,
    LogAppendTime on offsets divisible by 5."""
    return pa.table(
        {
            "key": [None if o % 3 == 0 else b"k%d" % o for o in offsets],
            "value": [b"v%d-%s" % (o, topic.encode()) * 3 for o in offsets],
            "topic": [topic] * len(offsets),
            "partition": [partition] * len(offsets),
            "offset": offsets,
            "timestamp": [datetime.datetime.fromtimestamp((TS0 + o) / 1000, UTC) for o in offsets],
            "timestampType": [1 if o % 5 == 0 else 0 for o in offsets],
            "headers": [[{"key": "h", "value": b"%d" % o}] if o % 2 else [] for o in offsets],
        },
        schema=KAFKA_SOURCE,
    )


def archive(path: Path) -> list[dict[str, Any]]:
    table = read_table(path, includeHeaders=True)
    rows = table.select(KAFKA_SOURCE.names).to_pylist()
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def expected(*tables: pa.Table) -> list[dict[str, Any]]:
    rows = [row for table in tables for row in table.to_pylist()]
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def files(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def run_batch(spec: Any, batch_id: int, *tasks: pa.Table) -> bool:
    results = [
        write_task(spec, i, table.to_batches(max_chunksize=7)) for i, table in enumerate(tasks)
    ]
    return commit_batch(spec, results, batch_id)


class Killed(BaseException):
    """The process dies: no handler runs."""


def killed_at(monkeypatch: pytest.MonkeyPatch, step: str, action: Callable[[], Any]) -> None:
    """Run ``action`` with the commit's ``step`` killing the process (nothing after it runs:
    no abort, no cleanup)."""

    def kill(*args: Any) -> None:
        raise Killed

    monkeypatch.setattr(commit_module, step, kill)
    monkeypatch.setattr(sink_module, "abort_job", lambda *args: None)
    monkeypatch.setattr(sink_module, "remove_task_staging", lambda *args: None)
    with pytest.raises(Killed):
        action()
    monkeypatch.undo()


def test_batches_append_and_a_replayed_batch_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "archive"
    spec = prepare_sink([str(out)], OPTIONS, overwrite=False, schema=KAFKA_SOURCE)
    # gaps, as transaction markers and compaction leave them
    first = [source_rows("orders", 0, [0, 1, 2, 5, 6]), source_rows("orders", 1, [10, 11, 13])]
    assert run_batch(spec, 0, *first)
    second = [source_rows("orders", 0, [7, 9, 40]), source_rows("orders", 2, [3, 4])]
    assert run_batch(spec, 1, *second)
    assert archive(out) == expected(*first, *second)
    before = files(out)
    # Spark runs batch 1 again (killed before its commit log): new tasks, the same rows
    assert not run_batch(spec, 1, *second)
    assert files(out) == before
    record = json.loads((out / SINK_DIR / f"{spec.sink_id}.json").read_text())
    assert (record["batchId"], record["ranges"]) == (
        1,
        {"orders": {"0": [7, 40], "2": [3, 4]}},
    )
    assert sorted(os.listdir(out)) == [SINK_DIR, "orders-0", "orders-1", "orders-2"]
    # the next batch goes on
    third = [source_rows("orders", 1, [14])]
    assert run_batch(spec, 2, *third)
    assert archive(out) == expected(*first, *second, *third)


def test_one_partition_split_over_tasks(tmp_path: Path) -> None:
    """Spark's Kafka source splits a partition's range over tasks (minPartitions): in order."""
    out = tmp_path / "archive"
    spec = prepare_sink([str(out)], {"sinkId": "q1"}, overwrite=False, schema=KAFKA_SOURCE)
    parts = [source_rows("t", 0, list(range(a, a + 50))) for a in (100, 150, 200)]
    assert run_batch(spec, 0, *parts)
    assert archive(out) == expected(*parts)
    assert (out / SINK_DIR / "q1.json").exists()


def test_commit_killed_after_its_journal_is_finished_by_the_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "archive"
    spec = prepare_sink([str(out)], OPTIONS, overwrite=False, schema=KAFKA_SOURCE)
    rows = source_rows("t", 0, [0, 1, 2])
    assert run_batch(spec, 0, rows)
    more = source_rows("t", 0, [3, 4, 8])

    # the process dies once the journal is written: nothing after it runs
    killed_at(monkeypatch, "apply_journal", lambda: run_batch(spec, 1, more))
    with pytest.raises(CommitInProgressError):
        read_table(out)
    # the restarted query runs batch 1 again: the journal is finished, the batch not rewritten
    assert not run_batch(spec, 1, more)
    assert archive(out) == expected(rows, more)
    assert not [n for n in os.listdir(out) if n.startswith(".kafkasegments-staging-")]


def test_commit_killed_before_its_journal_leaves_staging_the_next_commit_removes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "archive"
    spec = prepare_sink([str(out)], OPTIONS, overwrite=False, schema=KAFKA_SOURCE)
    rows = source_rows("t", 0, [0, 1, 2])
    assert run_batch(spec, 0, rows)
    before = files(out)
    killed_at(
        monkeypatch, "_write_journal", lambda: run_batch(spec, 1, source_rows("t", 0, [3, 4]))
    )
    staged = sorted(n for n in os.listdir(out) if n.startswith(SINK_STAGING))
    assert len(staged) == 2  # the task's and the commit's, no journal: not decided
    assert {k: v for k, v in files(out).items() if not k.startswith(SINK_STAGING)} == before
    assert archive(out) == expected(rows)
    # the restarted query runs batch 1 again: written once, the leftovers removed
    more = source_rows("t", 0, [3, 4])
    assert run_batch(spec, 1, more)
    assert archive(out) == expected(rows, more)
    assert not [n for n in os.listdir(out) if n.startswith(".kafkasegments-staging-")]


def test_a_new_checkpoint_into_the_same_sink_id_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "archive"
    spec = prepare_sink([str(out)], OPTIONS, overwrite=False, schema=KAFKA_SOURCE)
    rows = source_rows("t", 0, [0, 1, 2])
    assert run_batch(spec, 0, rows)
    assert run_batch(spec, 1, source_rows("t", 0, [3]))
    before = files(out)
    with pytest.raises(InvalidInputError, match="micro-batch 0 cannot follow batch 1"):
        run_batch(spec, 0, source_rows("t", 0, [4, 5]))
    with pytest.raises(InvalidInputError, match="with other offsets"):
        run_batch(spec, 1, source_rows("t", 0, [4, 5]))
    # another sink id: its batch 0 repeating offsets already archived cannot be written twice
    other = prepare_sink([str(out)], {"sinkId": "other"}, overwrite=False, schema=KAFKA_SOURCE)
    with pytest.raises(InvalidInputError, match="below the partition's end, offset 4"):
        run_batch(other, 0, source_rows("t", 0, [3, 4]))
    assert files(out) == before


def test_abort_leaves_the_archive_and_no_staging(tmp_path: Path) -> None:
    out = tmp_path / "archive"
    spec = prepare_sink([str(out)], OPTIONS, overwrite=False, schema=KAFKA_SOURCE)
    assert run_batch(spec, 0, source_rows("t", 0, [0, 1]))
    before = files(out)
    results = [write_task(spec, 0, [source_rows("t", 0, [2, 3])])]
    write_task(spec, 1, [source_rows("t", 1, [0])])  # a failed attempt's leftovers
    assert len([n for n in os.listdir(out) if n.startswith(SINK_STAGING)]) == 2
    abort_batch(spec, results, 1)
    assert files(out) == before
    assert archive(out) == expected(source_rows("t", 0, [0, 1]))


def test_offsets_going_back_within_a_batch_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "archive"
    spec = prepare_sink([str(out)], OPTIONS, overwrite=False, schema=KAFKA_SOURCE)
    with pytest.raises(InvalidInputError, match="offset 1 follows offset 2"):
        write_task(spec, 0, [source_rows("t", 0, [0, 2, 1])])
    assert not out.exists() or not [n for n in os.listdir(out) if not n.startswith(".")]


def test_another_writers_commit_in_progress_is_not_touched(tmp_path: Path) -> None:
    out = tmp_path / "archive"
    spec = prepare_sink([str(out)], OPTIONS, overwrite=False, schema=KAFKA_SOURCE)
    assert run_batch(spec, 0, source_rows("t", 0, [0]))
    pending = out / ".kafkasegments-staging-abc"
    pending.mkdir()
    (pending / "_COMMIT.json").write_text(
        json.dumps(
            {
                "version": 1,
                "note": {},
                "delete_dirs": [],
                "delete_files": [],
                "create_dirs": [],
                "moves": [],
                "deleted": False,
            }
        )
    )
    with pytest.raises(CommitInProgressError):
        run_batch(spec, 1, source_rows("t", 0, [1]))
    assert (pending / "_COMMIT.json").exists()


@pytest.mark.parametrize(
    ("options", "overwrite", "message"),
    [
        ({}, True, "the kafkasegments sink appends"),
        ({"preserveOffsets": "false"}, False, "always keeps the rows' offsets"),
        ({"errorIfTopicExists": "true"}, False, "not an option of the sink"),
        ({"sinkId": "a/b"}, False, "option sinkId 'a/b' must be"),
        ({"sinkId": ".."}, False, "option sinkId '..' must be"),
        ({"bogus": "1"}, False, "unknown write option 'bogus'"),
        ({"magic": "1"}, False, "preserveOffsets=true writes magic 2 batches"),
    ],
)
def test_refused_options(
    tmp_path: Path, options: dict[str, str], overwrite: bool, message: str
) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        prepare_sink([str(tmp_path)], options, overwrite)


def test_schema_without_offset_or_topic_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="needs an 'offset' column"):
        prepare_sink([str(tmp_path)], {}, False, pa.schema([("value", pa.binary())]))
    schema = pa.schema([("value", pa.binary()), ("offset", pa.int64())])
    with pytest.raises(InvalidInputError, match="no topic"):
        prepare_sink([str(tmp_path)], {}, False, schema)
    spec = prepare_sink([str(tmp_path)], {"topic": "t", "sinkId": "q"}, False, schema)
    assert spec.options.topic == "t"


def test_one_target(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="give one target log dir"):
        prepare_sink([], {}, False)
    with pytest.raises(InvalidOptionError, match="give one target log dir"):
        prepare_sink([str(tmp_path / "a"), str(tmp_path / "b")], {}, False)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(InvalidOptionError, match="is a file; give a directory"):
        prepare_sink([str(tmp_path / "file")], {}, False)


def test_sinks_with_ids_sharing_a_prefix_keep_their_staging(tmp_path: Path) -> None:
    out = tmp_path / "archive"
    specs = {
        name: prepare_sink([str(out)], {"sinkId": name}, False, KAFKA_SOURCE)
        for name in ("a", "b-a", "a-commit", "commit-a")
    }
    for name, spec in specs.items():
        write_task(spec, 0, [source_rows(f"t{len(name)}", 0, [0])])
    assert run_batch(specs["a"], 0, source_rows("t", 0, [0]))
    staged = sorted(n for n in os.listdir(out) if n.startswith(SINK_STAGING))
    # sink a removed its own task staging only; each left is claimed by its own sink alone
    assert sorted(n.split("-", 5)[-1] for n in staged) == ["a-commit", "b-a", "commit-a"]
    for name in staged:
        owners = [sink for sink, spec in specs.items() if spec.is_own_staging(name)]
        assert owners == [name.split("-", 5)[-1]]


def test_sink_id_from_the_checkpoint(tmp_path: Path) -> None:
    one = prepare_sink([str(tmp_path)], {"checkpointLocation": "/a"}, False)
    again = prepare_sink([str(tmp_path)], {"CHECKPOINTLOCATION": "/a"}, False)
    other = prepare_sink([str(tmp_path)], {"checkpointLocation": "/b"}, False)
    assert one.sink_id == again.sink_id != other.sink_id
    assert one.sink_id.startswith("checkpoint-")
    assert prepare_sink([str(tmp_path)], {"sinkId": "q1"}, False).sink_id == "q1"


def test_a_query_with_neither_sink_id_nor_checkpoint_is_refused(tmp_path: Path) -> None:
    # two such queries would share one id, and each would remove the other's task staging
    for options in ({}, {"compression": "lz4", "queryName": "q"}, {"checkpointLocation": ""}):
        with pytest.raises(InvalidOptionError, match="needs the query's option checkpointLocation"):
            prepare_sink([str(tmp_path)], options, False, KAFKA_SOURCE)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("segment_bytes", [None, "3000"])
def test_a_partitions_only_chunk_is_moved_not_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, segment_bytes: str | None
) -> None:
    # the commit moves a partition's only staged chunk into place as its segment when no entry
    # would roll it: the same files as copying the chunk's entries; with small segments, copied
    options = dict(OPTIONS, segmentBytes=segment_bytes, indexIntervalBytes="500")
    options = {k: v for k, v in options.items() if v is not None}
    rows = pa.concat_tables(
        [source_rows("t", 0, list(range(5, 400, 2))), source_rows("t", 1, list(range(3, 300)))]
    )
    archives = {}
    for moved in (True, False):
        out = tmp_path / f"archive-{moved}"
        spec = prepare_sink([str(out)], options, overwrite=False, schema=KAFKA_SOURCE)
        if not moved:
            monkeypatch.setattr(commit_module._SegmentLog, "adopt", lambda self, chunk: False)
        result = write_task(spec, 0, rows.to_batches(max_chunksize=50))
        inodes = {c.partition: os.stat(c.path).st_ino for c in result.chunks}
        assert commit_batch(spec, [result], 0)
        monkeypatch.undo()
        logs = {p: sorted((out / f"t-{p}").glob("*.log")) for p in (0, 1)}
        if moved and segment_bytes is None:
            assert {p: [os.stat(f).st_ino for f in logs[p]] for p in (0, 1)} == {
                p: [inodes[p]] for p in (0, 1)
            }
        else:
            assert all(os.stat(f).st_ino not in inodes.values() for p in (0, 1) for f in logs[p])
            assert len(logs[0]) > 1 if segment_bytes else True
        archives[moved] = {k: v for k, v in files(out).items() if not k.startswith(SINK_DIR)}
        assert archive(out) == expected(rows)
        assert not [n for n in os.listdir(out) if n.startswith(".kafkasegments-staging")]
    assert archives[True] == archives[False]
    assert any(k.endswith(".index") and v for k, v in archives[True].items())
