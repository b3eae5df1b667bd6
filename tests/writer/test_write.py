"""write_table: layout, segment rolls, indexes, modes, atomic commit, input errors (no Spark)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import (
    CommitInProgressError,
    CorruptSegmentError,
    InvalidInputError,
    InvalidOptionError,
    NoKafkaDataError,
    OutputExistsError,
    read_table,
    recover,
    write_table,
)
from kafka_segments_ds import writer as writer_module
from kafka_segments_ds.index import parse_offset_index, parse_time_index, rebuild_indexes
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.writer import commit as commit_module
from kafka_segments_ds.writer.options import parse_write_options

T0 = 1_700_000_000_000
HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def records(count: int, *, start: int = 0, step_ms: int = 1000) -> pa.Table:
    ids = range(start, start + count)
    return pa.table(
        {
            "key": pa.array([None if i % 5 == 0 else b"k%d" % (i % 7) for i in ids], pa.binary()),
            "value": pa.array([b"value-%06d-" % i + b"x" * (i % 50) for i in ids], pa.binary()),
            "timestamp": pa.array([T0 + i * step_ms for i in ids], pa.timestamp("ms", tz="UTC")),
        }
    )


def listing(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a hash of its bytes."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def segment_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.log"))


def rows(table: pa.Table, *names: str) -> list[tuple]:
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))


# --------------------------------------------------------------------------------------------
# Layout, offsets, rolls, indexes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_round_trip_every_magic_and_codec(tmp_path: Path, magic: int, codec: str) -> None:
    table = records(700)
    write_table(table, tmp_path, topic="orders", compression=codec, magic=magic, batchBytes=2000)
    got = read_table(tmp_path)
    assert got.column("offset").to_pylist() == list(range(700))
    assert got.column("partition").to_pylist() == [0] * 700
    assert got.column("topic").to_pylist() == ["orders"] * 700
    assert rows(got, "key", "value") == rows(table, "key", "value")
    expected_ts = [T0 + i * 1000 for i in range(700)] if magic else [None] * 700
    got_ts = [
        None if t is None else int(t.timestamp() * 1000)
        for t in got.column("timestamp").to_pylist()
    ]
    assert got_ts == expected_ts
    assert got.column("timestampType").to_pylist() == ([0] * 700 if magic else [-1] * 700)
    metadata = read_table(tmp_path, iteration="shallow", includeMetadata=True)
    assert set(metadata.column("magic").to_pylist()) == {magic}


def test_zstd_round_trip_with_headers(tmp_path: Path) -> None:
    table = records(300).append_column(
        "headers",
        pa.array(
            [
                [{"key": "h", "value": b"%d" % i}, {"key": "ключ", "value": None}] if i % 2 else []
                for i in range(300)
            ],
            HEADER_TYPE,
        ),
    )
    write_table(table, tmp_path, topic="z", compression="zstd", compressionLevel=5)
    got = read_table(tmp_path, includeHeaders=True)
    expected = [[("h", b"%d" % i), ("ключ", None)] if i % 2 else [] for i in range(300)]
    assert [
        [(h["key"], h["value"]) for h in hs] for hs in got.column("headers").to_pylist()
    ] == expected


def test_zstd_and_headers_refused_for_legacy_magic(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="zstd needs magic 2"):
        write_table(records(3), tmp_path, topic="t", compression="zstd", magic=1)
    headers = pa.array([[{"key": "a", "value": b"1"}], [], []], HEADER_TYPE)
    with pytest.raises(InvalidInputError, match="magic 1 has no record headers"):
        write_table(records(3).append_column("headers", headers), tmp_path, topic="t", magic=1)
    assert listing(tmp_path) == {}


def test_segments_roll_at_segment_bytes_and_indexes_match_broker_recovery(tmp_path: Path) -> None:
    write_table(
        records(5000),
        tmp_path,
        topic="t",
        segmentBytes=40_000,
        indexIntervalBytes=3000,
        batchBytes=1500,
    )
    segments = segment_files(tmp_path / "t-0")
    assert len(segments) > 5
    next_base = None
    for path in segments:
        data = path.read_bytes()
        base = int(path.name[:20])
        table = scan_entries(data)
        assert table.valid_bytes == len(data)
        assert len(data) <= 40_000
        # the first batch starts at the base offset, and each segment continues the previous
        assert int(table.last_offsets[0]) >= base
        if next_base is not None:
            assert base == next_base
        next_base = int(table.last_offsets[-1]) + 1
        # Index files equal what a 2.0+ broker's recovery rebuilds, trimmed (no zero tail).
        offset_index, time_index = rebuild_indexes(data, base, 3000)
        assert path.with_suffix(".index").read_bytes() == offset_index
        assert path.with_suffix(".timeindex").read_bytes() == time_index
        parsed = parse_offset_index(path.with_suffix(".index").read_bytes(), base, len(data))
        assert parsed.ignored == 0 and len(parsed) > 0 and int(parsed.positions[0]) > 0
        times = parse_time_index(path.with_suffix(".timeindex").read_bytes(), base)
        # the roll/close entry carries the segment's max timestamp
        assert int(times.timestamps[-1]) == int(table.max_timestamps.max())
    assert next_base == 5000


def test_segment_ms_rolls_by_record_time(tmp_path: Path) -> None:
    # one record per minute, segments of at most 10 minutes after their first batch
    write_table(
        records(100, step_ms=60_000), tmp_path, topic="t", segmentMs=600_000, batchRecords=1
    )
    bases = [int(p.name[:20]) for p in segment_files(tmp_path / "t-0")]
    assert bases == list(range(0, 100, 11))


def test_segment_index_bytes_rolls_when_the_index_is_full(tmp_path: Path) -> None:
    # 24 bytes: three offset entries, one time entry plus the reserved roll slot
    write_table(
        records(200),
        tmp_path,
        topic="t",
        segmentIndexBytes=24,
        indexIntervalBytes=0,
        batchRecords=10,
    )
    for path in segment_files(tmp_path / "t-0"):
        assert len(path.with_suffix(".index").read_bytes()) <= 24
        assert len(path.with_suffix(".timeindex").read_bytes()) <= 24
    assert len(read_table(tmp_path)) == 200


def test_keyed_rows_hash_and_null_keys_spread(tmp_path: Path) -> None:
    table = records(1000)
    write_table(table, tmp_path, topic="t", numPartitions=4)
    got = read_table(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["t-0", "t-1", "t-2", "t-3"]
    by_key: dict[bytes, set[int]] = {}
    for key, partition in rows(got, "key", "partition"):
        if key is not None:
            by_key.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in by_key.values())
    null_parts = [p for k, p in rows(got, "key", "partition") if k is None]
    assert sorted(set(null_parts)) == [0, 1, 2, 3]
    for partition in range(4):
        part = got.filter(pa.compute.equal(got.column("partition"), partition))
        assert part.column("offset").to_pylist() == list(range(part.num_rows))
        # input order is kept inside each partition
        ids = [int(v[6:12]) for v in part.column("value").to_pylist()]
        assert ids == sorted(ids)


def test_topic_and_partition_columns(tmp_path: Path) -> None:
    table = pa.table(
        {
            "topic": ["a", "b", None, "a"],
            "partition": pa.array([2, None, 0, 2], pa.int32()),
            "value": ["1", "2", "3", "4"],
        }
    )
    write_table(table, tmp_path, topic="c")
    got = read_table(tmp_path)
    assert rows(got, "topic", "partition", "offset", "value") == [
        ("a", 2, 0, b"1"),
        ("a", 2, 1, b"4"),
        ("b", 0, 0, b"2"),
        ("c", 0, 0, b"3"),
    ]
    # every partition of a written topic exists, empty ones as one empty segment
    assert sorted(os.listdir(tmp_path)) == ["a-0", "a-1", "a-2", "b-0", "c-0"]
    assert [p.name for p in (tmp_path / "a-0").iterdir()] != []
    assert (tmp_path / "a-0" / "00000000000000000000.log").stat().st_size == 0


def test_log_append_time_and_null_timestamps(tmp_path: Path) -> None:
    table = pa.table({"value": ["a", "b"], "timestamp": pa.array([T0, None], pa.timestamp("ms"))})
    write_table(table, tmp_path / "create", topic="t")
    got = read_table(tmp_path / "create")
    stamps = [int(t.timestamp() * 1000) for t in got.column("timestamp").to_pylist()]
    assert stamps[0] == T0 and stamps[1] > T0  # null: the write time
    write_table(table, tmp_path / "append", topic="t", timestampType="LogAppendTime")
    got = read_table(tmp_path / "append")
    assert got.column("timestampType").to_pylist() == [1, 1]
    stamps = [int(t.timestamp() * 1000) for t in got.column("timestamp").to_pylist()]
    assert stamps[0] == stamps[1] > T0


# --------------------------------------------------------------------------------------------
# Modes
# --------------------------------------------------------------------------------------------


def test_append_continues_offsets_and_segments(tmp_path: Path) -> None:
    write_table(records(100), tmp_path, topic="t", compression="lz4")
    write_table(records(50, start=100), tmp_path, topic="t", magic=1)
    got = read_table(tmp_path)
    assert got.column("offset").to_pylist() == list(range(150))
    assert rows(got, "value") == rows(records(150), "value")
    assert [p.name for p in segment_files(tmp_path / "t-0")] == [
        "00000000000000000000.log",
        "00000000000000000100.log",
    ]


def test_append_replaces_an_empty_last_segment(tmp_path: Path) -> None:
    write_table(records(0), tmp_path, topic="t")  # the topic exists, with one empty segment
    assert listing(tmp_path).keys() == {
        "t-0/00000000000000000000.log",
        "t-0/00000000000000000000.index",
        "t-0/00000000000000000000.timeindex",
    }
    write_table(records(10), tmp_path, topic="t")
    assert read_table(tmp_path).column("offset").to_pylist() == list(range(10))
    assert len(segment_files(tmp_path / "t-0")) == 1


def test_append_refuses_a_damaged_tail_and_changes_nothing(tmp_path: Path) -> None:
    write_table(records(100), tmp_path, topic="t")
    log = tmp_path / "t-0" / "00000000000000000000.log"
    with log.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x64\x00\x00\x01\x00")  # a torn entry header
    before = listing(tmp_path)
    with pytest.raises(CorruptSegmentError, match="cannot append after a damaged"):
        write_table(records(10), tmp_path, topic="t")
    assert listing(tmp_path) == before


def test_overwrite_replaces_only_the_topics_written(tmp_path: Path) -> None:
    write_table(records(100), tmp_path, topic="keep", numPartitions=2)
    write_table(records(100), tmp_path, topic="gone", numPartitions=3)
    kept = {k: v for k, v in listing(tmp_path).items() if k.startswith("keep-")}
    write_table(records(7), tmp_path, mode="overwrite", topic="gone", numPartitions=1)
    assert sorted(os.listdir(tmp_path)) == ["gone-0", "keep-0", "keep-1"]
    assert {k: v for k, v in listing(tmp_path).items() if k.startswith("keep-")} == kept
    got = read_table(tmp_path, subscribe="gone")
    assert got.column("offset").to_pylist() == list(range(7))


def test_error_if_topic_exists(tmp_path: Path) -> None:
    write_table(records(5), tmp_path, topic="t")
    before = listing(tmp_path)
    with pytest.raises(OutputExistsError, match="topic 't' already exists"):
        write_table(records(5), tmp_path, topic="t", errorIfTopicExists=True)
    with pytest.raises(OutputExistsError):  # found at commit when the topic is a column
        write_table(
            records(5).append_column("topic", pa.array(["t"] * 5)),
            tmp_path,
            errorIfTopicExists=True,
        )
    assert listing(tmp_path) == before
    write_table(records(5), tmp_path, topic="u", errorIfTopicExists=True)
    assert sorted(os.listdir(tmp_path)) == ["t-0", "u-0"]


# --------------------------------------------------------------------------------------------
# Atomicity
# --------------------------------------------------------------------------------------------


def _failing_batches(table: pa.Table, fail_after: int):  # type: ignore[no-untyped-def]
    for i, batch in enumerate(table.to_batches(max_chunksize=100)):
        if i == fail_after:
            raise RuntimeError("task failed mid-write")
        yield batch


def test_failure_mid_write_leaves_the_target_unchanged(tmp_path: Path) -> None:
    write_table(records(100), tmp_path, topic="t")
    before = listing(tmp_path)
    with pytest.raises(RuntimeError, match="task failed mid-write"):
        write_table(_failing_batches(records(1000), 5), tmp_path, topic="t")
    assert listing(tmp_path) == before
    assert sorted(os.listdir(tmp_path)) == ["t-0"]  # no staging left behind


def test_interrupted_commit_blocks_readers_and_recover_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_table(records(100), tmp_path, topic="old")
    write_table(records(100), tmp_path, topic="t", numPartitions=2)
    real_apply = commit_module.apply_journal

    class CrashingFs:
        """The real filesystem, except that the fourth file move fails (the driver dies)."""

        def __init__(self, inner: pafs.FileSystem) -> None:
            self.inner = inner
            self.moves = 0

        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(self.inner, name)

        def move(self, source: str, target: str) -> None:
            if not source.endswith(".tmp"):
                self.moves += 1
                if self.moves == 4:
                    raise OSError("driver lost")
            self.inner.move(source, target)

    monkeypatch.setattr(
        commit_module, "apply_journal", lambda fs, *a: real_apply(CrashingFs(fs), *a)
    )
    monkeypatch.setattr(writer_module, "abort_job", lambda *a: None)  # the driver is gone
    with pytest.raises(OSError, match="driver lost"):
        write_table(records(300), tmp_path, topic="t", mode="overwrite", numPartitions=3)
    monkeypatch.undo()
    with pytest.raises(CommitInProgressError, match=r"kafka_segments_ds\.recover"):
        read_table(tmp_path)
    with pytest.raises(CommitInProgressError):
        read_table(tmp_path / "t-0")
    with pytest.raises(CommitInProgressError):
        write_table(records(1), tmp_path, topic="x")
    done = recover(tmp_path)
    assert len(done) == 1 and done[0].startswith("finished commit")
    got = read_table(tmp_path, subscribe="t")
    assert got.num_rows == 300
    assert sorted(os.listdir(tmp_path)) == ["old-0", "t-0", "t-1", "t-2"]
    assert recover(tmp_path) == []


def test_abort_after_the_journal_rolls_forward(tmp_path: Path) -> None:
    job, fs = commit_module.prepare_job(str(tmp_path), commit_module.WriteOptions(topic="t"), False)
    from kafka_segments_ds.writer.task import TaskWriter

    writer = TaskWriter(job, 0, fs)
    writer.write(records(10))
    result = writer.finish()
    real_apply = commit_module.apply_journal
    commit_module.apply_journal = lambda *a: (_ for _ in ()).throw(OSError("boom"))  # type: ignore[assignment]
    try:
        with pytest.raises(OSError, match="boom"):
            commit_module.commit_job(job, [result], fs)
    finally:
        commit_module.apply_journal = real_apply  # type: ignore[assignment]
    commit_module.abort_job(job, fs)
    assert read_table(tmp_path).column("offset").to_pylist() == list(range(10))
    assert sorted(os.listdir(tmp_path)) == ["t-0"]


def test_abort_retries_while_a_cancelled_task_still_writes(tmp_path: Path) -> None:
    """Spark aborts while cancelled tasks may still be creating files in staging: the first
    removals fail ("directory not empty"); abort keeps trying and leaves the target as before."""
    job, fs = commit_module.prepare_job(str(tmp_path), commit_module.WriteOptions(topic="t"), False)
    from kafka_segments_ds.writer.task import TaskWriter

    late = TaskWriter(job, 1, fs)
    calls: list[int] = []
    real_delete = fs.delete_dir

    def delete_dir(path: str) -> None:
        calls.append(1)
        if len(calls) < 3:  # the late task adds a chunk file just as the removal runs
            with open(os.path.join(late.directory, f"chunk-{len(calls)}"), "wb") as out:
                out.write(b"x")
            raise OSError(39, "Directory not empty", path)
        real_delete(path)

    class Proxy:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return delete_dir if name == "delete_dir" else getattr(fs, name)

    commit_module.abort_job(job, Proxy())  # type: ignore[arg-type]
    assert len(calls) == 3
    assert os.listdir(tmp_path) == []


def test_recover_removes_abandoned_staging(tmp_path: Path) -> None:
    job, fs = commit_module.prepare_job(str(tmp_path), commit_module.WriteOptions(topic="t"), False)
    from kafka_segments_ds.writer.task import TaskWriter

    TaskWriter(job, 3, fs).write(records(10))
    assert len(os.listdir(tmp_path)) == 1
    with pytest.raises(NoKafkaDataError):  # staging alone is invisible to readers
        read_table(tmp_path)
    assert read_table(tmp_path, allowEmpty=True).num_rows == 0
    done = recover(tmp_path)
    assert len(done) == 1 and done[0].startswith("removed abandoned staging")
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------------------------
# Input errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"key": [b"k"]}), "a 'value' column"),
        (
            pa.table({"value": [b"v"], "offset": [1]}),
            "unknown column 'offset' .the writer assigns it",
        ),
        (pa.table({"value": [b"v"], "colour": [1]}), "unknown column 'colour'"),
        (pa.table({"value": [1]}), "column 'value' must be binary or string, not int64"),
        (pa.table({"value": [b"v"], "partition": ["0"]}), "column 'partition' must be int"),
        (pa.table({"value": [b"v"], "partition": [-3]}), "partition -3 is not in"),
        (pa.table({"value": [b"v"], "topic": ["../etc"]}), "'../etc' is not a valid Kafka topic"),
        (pa.table({"value": [b"v"], "topic": ["a" * 250]}), "Kafka allows 249"),
        (
            pa.table({"value": [b"v"], "timestamp": pa.array([-5], pa.timestamp("ms"))}),
            "timestamp -5 ms is before 1970",
        ),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    tmp_path: Path, table: pa.Table, message: str
) -> None:
    with pytest.raises((InvalidInputError, InvalidOptionError), match=message):
        write_table(table, tmp_path, topic="t")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": ".."}, "not a valid Kafka topic"),
        ({"topic": "t", "compression": "brotli"}, "compression must be one of"),
        ({"topic": "t", "compression": "snappy", "compressionLevel": 3}, "applies to gzip, lz4"),
        ({"topic": "t", "compression": "gzip", "compressionLevel": 10}, "must be <= 9"),
        ({"topic": "t", "magic": 3}, "magic must be one of"),
        ({"topic": "t", "segmentBytes": 10}, "segmentBytes must be >= 14"),
        ({"topic": "t", "numPartitions": 0}, "numPartitions must be >= 1"),
        ({"topic": "t", "timestampType": "LogAppendTime", "magic": 0}, "magic 0 has no timestamps"),
        ({"topic": "t", "startingOffsets": "earliest"}, "unknown write option 'startingOffsets'"),
    ],
)
def test_bad_options(tmp_path: Path, options: dict, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        write_table(records(1), tmp_path, **options)


def test_a_job_written_for_the_kafka_sink_keeps_its_producer_settings(tmp_path: Path) -> None:
    """kafka.compression.type / kafka.compression.<codec>.level / kafka.batch.size decide the log
    as a producer's would; settings that need a broker are ignored."""
    write_table(
        records(300),
        tmp_path,
        **{
            "topic": "t",
            "kafka.bootstrap.servers": "broker:9092",
            "kafka.acks": "all",
            "kafka.compression.type": "zstd",
            "kafka.compression.zstd.level": "7",
            "kafka.batch.size": "4096",
        },
    )
    log = tmp_path / "t-0" / "00000000000000000000.log"
    data = log.read_bytes()
    positions = scan_entries(data).positions
    assert {data[p + 22] & 0x07 for p in positions} == {4}  # v2 attributes: zstd
    assert len(positions) > 1  # batches cut at the producer's batch.size
    assert read_table(tmp_path).column("offset").to_pylist() == list(range(300))
    with pytest.raises(InvalidOptionError, match="compression must be one of"):
        write_table(records(1), tmp_path, **{"topic": "t", "kafka.compression.type": "brotli"})
    # a level applies to its own codec only: shared producer configs set several
    shared = {"kafka.compression.gzip.level": "12", "kafka.compression.lz4.level": "3"}
    options = parse_write_options({"kafka.compression.type": "zstd", **shared})
    assert (options.compression, options.compression_level) == (4, None)
    options = parse_write_options({"compression": "lz4", **shared})
    assert (options.compression, options.compression_level) == (3, 3)
    with pytest.raises(InvalidOptionError, match="compressionLevel given twice"):
        write_table(
            records(1),
            tmp_path,
            **{
                "topic": "t",
                "compression": "zstd",
                "compressionLevel": 3,
                "kafka.compression.zstd.level": 3,
            },
        )


def test_no_topic_and_a_partition_directory_as_target(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="no topic"):
        write_table(records(1), tmp_path)
    write_table(records(1), tmp_path, topic="t")
    with pytest.raises(InvalidOptionError, match="is a partition directory"):
        write_table(records(1), tmp_path / "t-0", topic="t")
    with pytest.raises(InvalidOptionError, match="mode must be append or overwrite"):
        write_table(records(1), tmp_path, topic="t", mode="errorifexists")


def test_large_input_spans_several_encode_rounds(tmp_path: Path) -> None:
    # > CHUNK_FLUSH_BYTES of rows in one partition: batches cut across encode rounds stay full
    count = 60_000
    values = np.arange(count)
    table = pa.table({"value": pa.array([b"%08d" % v + b"y" * 92 for v in values.tolist()])})
    write_table(table, tmp_path, topic="big", compression="lz4")
    got = read_table(tmp_path, iteration="shallow", includeMetadata=True)
    counts = (
        np.asarray(got.column("batchLastOffset")) - np.asarray(got.column("batchBaseOffset")) + 1
    )
    assert int(counts.sum()) == count
    assert (counts[:-1] == counts[0]).all()  # every batch but the last is equally full
    deep = read_table(tmp_path)
    assert deep.column("value").to_pylist() == table.column("value").to_pylist()


def test_retried_and_speculative_attempts_are_never_duplicated(tmp_path: Path) -> None:
    """Two attempts of task 0 and one of task 1 stage chunks; only the committed ones count."""
    from kafka_segments_ds.writer.task import TaskWriter

    job, fs = commit_module.prepare_job(str(tmp_path), commit_module.WriteOptions(topic="t"), False)
    attempts = []
    for task_id, table in ((0, records(30)), (0, records(30)), (1, records(20, start=30))):
        writer = TaskWriter(job, task_id, fs)
        writer.write(table)
        attempts.append(writer.finish())
    assert len(os.listdir(job.staging)) == 3
    # Spark hands the commit one message per task: here the second attempt of task 0 won.
    commit_module.commit_job(job, [attempts[2], attempts[1]], fs)
    got = read_table(tmp_path)
    assert got.column("offset").to_pylist() == list(range(50))
    assert rows(got, "value") == rows(records(50), "value")
    assert sorted(os.listdir(tmp_path)) == ["t-0"]  # the losing attempt's files went with staging


def test_cli_recover_dry_run_then_recover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka_segments_ds.cli import main
    from kafka_segments_ds.writer.task import TaskWriter

    job, fs = commit_module.prepare_job(str(tmp_path), commit_module.WriteOptions(topic="t"), False)
    TaskWriter(job, 0, fs).write(records(3))
    name = Path(job.staging).name
    assert main(["recover", "--dry-run", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: would remove abandoned staging {name}\n"
    assert os.listdir(tmp_path) == [name]
    assert main(["recover", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: removed abandoned staging {name}\n"
    assert main(["recover", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: nothing to do\n"
    assert os.listdir(tmp_path) == []


def test_unsigned_partition_column_with_nulls(tmp_path: Path) -> None:
    table = pa.table({"value": ["a", "b", "c"], "partition": pa.array([1, None, 0], pa.uint32())})
    write_table(table, tmp_path, topic="t", numPartitions=2)
    got = read_table(tmp_path)
    # the null partition is spread (round-robin from task 0): partition 0
    assert sorted(rows(got, "partition", "offset", "value")) == [
        (0, 0, b"b"),
        (0, 1, b"c"),
        (1, 0, b"a"),
    ]
    huge = pa.table({"value": ["a"], "partition": pa.array([2**64 - 1], pa.uint64())})
    with pytest.raises(InvalidInputError, match="partition values out of range"):
        write_table(huge, tmp_path / "x", topic="t")


def test_magic0_wrappers_keep_the_compression_level_through_the_commit(tmp_path: Path) -> None:
    table = pa.table({"value": [b"abcdefgh" * 40 + b"%d" % i for i in range(200)]})
    sizes = {}
    for level in (1, 9):
        target = tmp_path / f"level-{level}"
        write_table(
            table,
            target,
            topic="t",
            magic=0,
            compression="gzip",
            compressionLevel=level,
            batchBytes=1 << 20,
        )
        sizes[level] = (target / "t-0" / "00000000000000000000.log").stat().st_size
        assert read_table(target).column("value").to_pylist() == table.column("value").to_pylist()
    assert sizes[9] < sizes[1]


# --------------------------------------------------------------------------------------------
# Partition counts stay fixed; failed jobs leave no directory; accepted inputs
# --------------------------------------------------------------------------------------------


def _key_partitions(table: pa.Table) -> dict[bytes, set[int]]:
    by_key: dict[bytes, set[int]] = {}
    for key, partition in rows(table, "key", "partition"):
        if key is not None:
            by_key.setdefault(key, set()).add(partition)
    return by_key


def test_num_partitions_other_than_the_topics_count_is_refused(tmp_path: Path) -> None:
    write_table(records(60), tmp_path, topic="t", numPartitions=3)
    before = listing(tmp_path)
    with pytest.raises(
        InvalidOptionError,
        match=r"topic 't' has 3 partitions, numPartitions is 2: Kafka never shrinks a topic",
    ):
        write_table(records(60, start=60), tmp_path, topic="t", numPartitions=2)
    with pytest.raises(
        InvalidOptionError,
        match=r"topic 't' has 3 partitions, numPartitions is 5: .*set growPartitions=true",
    ):
        write_table(records(60, start=60), tmp_path, topic="t", numPartitions=5)
    with pytest.raises(InvalidOptionError, match="has 3 partitions, numPartitions is 2"):
        write_table(  # the same when the topic comes from a column (found by the task)
            records(5).append_column("topic", pa.array(["t", "u", "t", "u", "u"])),
            tmp_path,
            numPartitions=2,
        )
    with pytest.raises(InvalidOptionError, match="growPartitions=true needs numPartitions"):
        write_table(records(5), tmp_path, topic="t", growPartitions=True)
    assert listing(tmp_path) == before
    # without numPartitions (or with the same count) a key stays in its partition
    write_table(records(60, start=60), tmp_path, topic="t")
    write_table(records(60, start=120), tmp_path, topic="t", numPartitions=3)
    got = read_table(tmp_path)
    assert got.num_rows == 180
    assert sorted(os.listdir(tmp_path)) == ["t-0", "t-1", "t-2"]
    assert all(len(parts) == 1 for parts in _key_partitions(got).values())


def test_growing_a_topic_is_an_explicit_choice(tmp_path: Path) -> None:
    write_table(records(30), tmp_path, topic="t", numPartitions=2)
    with pytest.raises(InvalidOptionError, match="has 2 partitions, numPartitions is 1"):
        write_table(records(3), tmp_path, topic="t", numPartitions=1, growPartitions=True)
    write_table(records(30, start=30), tmp_path, topic="t", numPartitions=4, growPartitions="true")
    assert sorted(os.listdir(tmp_path)) == ["t-0", "t-1", "t-2", "t-3"]
    assert read_table(tmp_path).num_rows == 60
    # overwrite replaces the topic: any count goes
    write_table(records(4), tmp_path, mode="overwrite", topic="t", numPartitions=1)
    assert sorted(os.listdir(tmp_path)) == ["t-0"]
    assert read_table(tmp_path).column("offset").to_pylist() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("existing", "options", "partition", "message"),
    [
        (None, {"numPartitions": 2}, 5, r"row 1: partition 5 is outside topic 't''s 2 partitions"),
        (None, {"numPartitions": 2}, 2, r"partition 2 is outside .* \(0\.\.1, numPartitions\)"),
        (3, {}, 3, r"partition 3 is outside topic 't''s 3 partitions \(0\.\.2, the topic's"),
        (3, {"numPartitions": 3}, 7, r"partition 7 is outside topic 't''s 3 partitions"),
    ],
)
def test_partition_value_outside_the_topics_count_is_refused(
    tmp_path: Path, existing: int | None, options: dict, partition: int, message: str
) -> None:
    if existing is not None:
        write_table(records(10), tmp_path, topic="t", numPartitions=existing)
    before = listing(tmp_path)
    table = pa.table({"value": [b"a", b"b"], "partition": pa.array([0, partition], pa.int32())})
    with pytest.raises(InvalidInputError, match=message):
        write_table(table, tmp_path, topic="t", **options)
    assert listing(tmp_path) == before
    assert sorted(os.listdir(tmp_path)) == sorted({p.split("/")[0] for p in before})


def test_failed_jobs_leave_no_new_directory(tmp_path: Path) -> None:
    target = tmp_path / "new" / "kafka-logs"
    with pytest.raises(RuntimeError, match="task failed mid-write"):
        write_table(_failing_batches(records(1000), 3), target, topic="t")
    with pytest.raises(InvalidInputError, match="column 'value' must be binary or string"):
        write_table(pa.table({"value": [1, 2]}), target, topic="t")
    with pytest.raises(InvalidInputError, match=r"partition 9 is outside"):
        write_table(
            pa.table({"value": [b"v"], "partition": [9]}), target, topic="t", numPartitions=2
        )
    assert os.listdir(tmp_path) == []
    # an existing, empty target stays (only what the job created goes)
    target.mkdir(parents=True)
    with pytest.raises(RuntimeError):
        write_table(_failing_batches(records(1000), 3), target, topic="t")
    assert os.listdir(target) == []


def test_failed_commit_before_the_journal_leaves_no_new_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full while writing the journal")

    monkeypatch.setattr(commit_module, "_write_journal", broken)
    with pytest.raises(OSError, match="disk full"):
        write_table(records(10), tmp_path / "logs", topic="t")
    assert os.listdir(tmp_path) == []


def test_spark_abort_removes_the_directory_the_job_created(tmp_path: Path) -> None:
    # the driver side of df.write: writer() prepares the job, Spark calls abort() on failure
    from pyspark.sql.types import BinaryType, StructField, StructType

    from kafka_segments_ds.datasource import KafkaSegmentsDataSource

    target = tmp_path / "spark" / "logs"
    source = KafkaSegmentsDataSource({"path": str(target), "topic": "t"})
    writer = source.writer(StructType([StructField("value", BinaryType())]), False)
    assert target.is_dir()  # the staging directory lives inside the target
    writer.abort([])
    assert os.listdir(tmp_path) == []


class _StreamOnly:
    """An object that only speaks the Arrow PyCapsule stream protocol."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self._table.__arrow_c_stream__(requested_schema)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda t: t, id="table"),
        pytest.param(lambda t: t.to_batches(max_chunksize=3)[0], id="record-batch"),
        pytest.param(
            lambda t: pa.RecordBatchReader.from_batches(t.schema, t.to_batches(4)), id="reader"
        ),
        pytest.param(lambda t: iter(t.to_batches(max_chunksize=4)), id="iterator"),
        pytest.param(_StreamOnly, id="arrow-c-stream"),
    ],
)
def test_accepted_inputs(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    table = records(10)
    data = make(table)
    write_table(data, tmp_path, topic="t")
    expected = 3 if isinstance(data, pa.RecordBatch) else 10
    got = read_table(tmp_path)
    assert rows(got, "key", "value") == rows(table.slice(0, expected), "key", "value")


def test_pandas_dataframe_is_written_without_its_index(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"key": [b"a", None, b"c"], "value": ["x", "y", "z"]}, index=[7, 8, 9])
    write_table(frame, tmp_path, topic="t")
    got = read_table(tmp_path)
    assert rows(got, "offset", "key", "value") == [
        (0, b"a", b"x"),
        (1, None, b"y"),
        (2, b"c", b"z"),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("value", r"write_table cannot write a str; give it a pyarrow.Table"),
        (b"value", r"cannot write a bytes"),
        ({"value": [b"a"]}, r"cannot write a dict; .*__arrow_c_stream__"),
        (42, r"cannot write a int"),
        (["value"], r"item 0 of the iterable is a str, not a pyarrow.RecordBatch"),
    ],
)
def test_other_inputs_are_refused_clearly(tmp_path: Path, data: object, message: str) -> None:
    target = tmp_path / "logs"
    with pytest.raises(InvalidInputError, match=message):
        write_table(data, target, topic="t")
    assert not target.exists()


def test_append_after_a_damaged_index_takes_the_next_offset_from_the_log(tmp_path: Path) -> None:
    """An ``.index`` whose last position points inside a batch, at bytes that frame one "entry"
    reaching the end of the file, must not give the appended records their offsets: the
    position is used only where a checksum-valid entry starts."""
    marker = b"\x7f" * 8

    def first_write(fake: bytes) -> bytes:
        values = [b"value-%d" % i for i in range(5)] + [fake]
        write_table(pa.table({"value": pa.array(values, pa.binary())}), tmp_path, topic="t")
        return (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()

    data = first_write(marker + b"\x00" * 24)
    position = data.index(marker)
    for child in (tmp_path / "t-0").iterdir():
        child.unlink()
    (tmp_path / "t-0").rmdir()
    fake = marker + (len(data) - position - 12).to_bytes(4, "big") + b"\x00" * 20
    assert len(first_write(fake)) == len(data)
    index = tmp_path / "t-0" / "00000000000000000000.index"
    index.write_bytes((5).to_bytes(4, "big") + position.to_bytes(4, "big"))
    write_table(records(3), tmp_path, topic="t", mode="append")
    assert read_table(tmp_path).column("offset").to_pylist() == list(range(9))


def test_the_mode_is_taken_in_any_case(tmp_path: Path) -> None:
    """``mode="Overwrite"`` as Spark's DataFrameWriter.mode takes it (it was refused)."""
    write_table(records(3), tmp_path, topic="t")
    write_table(records(2), tmp_path, topic="t", mode="Overwrite")
    assert read_table(str(tmp_path)).num_rows == 2
    write_table(records(1), tmp_path, topic="t", mode="APPEND")
    assert read_table(str(tmp_path)).num_rows == 3


def test_a_commit_landing_while_a_read_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that commits while a read lists the log dir: the read lists again (it never
    returns part of a commit), and refuses while the commit is still being applied."""
    from kafka_segments_ds import selection

    write_table(records(40), tmp_path, topic="t", numPartitions=4)
    listed = selection.discover_layout
    calls = []

    def racing(root: str, *args: object, **kwargs: object) -> object:
        found = listed(root, *args, **kwargs)
        calls.append(root)
        if len(calls) == 1:  # an append commits while this listing runs
            write_table(records(8), tmp_path, topic="t", numPartitions=4)
        return found

    monkeypatch.setattr(selection, "discover_layout", racing)
    assert read_table(tmp_path, subscribe="t").num_rows == 48
    assert len(calls) == 2  # the first listing (taken before the commit) was not used
    calls.clear()  # a partition directory read: the commits into its log dir count
    monkeypatch.undo()
    before = read_table(tmp_path / "t-0").num_rows
    monkeypatch.setattr(selection, "discover_layout", racing)
    got = read_table(tmp_path / "t-0").num_rows
    monkeypatch.undo()
    assert len(calls) == 2 and got == read_table(tmp_path / "t-0").num_rows > before

    def applying(root: str, *args: object, **kwargs: object) -> object:
        staging = tmp_path / ".kafkasegments-staging-0123"
        staging.mkdir(exist_ok=True)
        (staging / "_COMMIT.json").write_text("{}")  # a commit decided, being applied
        return listed(root, *args, **kwargs)

    monkeypatch.setattr(selection, "discover_layout", applying)
    with pytest.raises(CommitInProgressError, match="is committing into"):
        read_table(tmp_path)


def test_records_a_read_could_not_take_back_are_refused(tmp_path: Path) -> None:
    """A compressed record over the readers' default decompressed bound (256 MiB), and any
    record reaching 2 GiB (32-bit length fields), are refused before anything is written."""
    from kafka_segments_ds.records.encoder import BinaryColumn, RecordColumns
    from kafka_segments_ds.writer.columns import check_record_sizes

    big = pa.table({"value": pa.array([b"x", b"y" * (256 * 1024 * 1024 + 1)], pa.binary())})
    with pytest.raises(
        InvalidInputError,
        match=r"row 1: a record of 268435550 bytes \(key, value, headers and framing\), .* 256 MiB",
    ):
        write_table(big, tmp_path / "gz", topic="t", compression="gzip")
    assert not (tmp_path / "gz" / "t-0").exists()
    write_table(big, tmp_path / "plain", topic="t")  # uncompressed: read back whole
    got = read_table(tmp_path / "plain", columns=["value"])["value"]
    assert [len(v.as_py()) for v in got] == [1, 256 * 1024 * 1024 + 1]
    del got, big
    with pytest.raises(InvalidOptionError, match="batchBytes"):
        write_table(records(1), tmp_path / "o", topic="t", compression="lz4", batchBytes=2**29)

    def columns(value_bytes: int, header_bytes: int = 0) -> RecordColumns:
        none = BinaryColumn.empty(1)
        values = BinaryColumn(
            np.array([0, value_bytes], np.int64), np.zeros(0, np.uint8), none.valid
        )
        headers = BinaryColumn(
            np.array([0, header_bytes], np.int64), np.zeros(0, np.uint8), none.valid
        )
        return RecordColumns(
            np.zeros(1, np.int64), none, values, np.array([0, 1]), headers, BinaryColumn.empty(1)
        )

    # framing included: the record's and the batch header's 93 bytes, 10 for its one header
    check_record_sizes(columns(2**31 - 1 - 103), compressed=False)
    with pytest.raises(InvalidInputError, match="length fields are 32-bit"):
        check_record_sizes(columns(2**31 - 103), compressed=False)
    check_record_sizes(columns(2**31 - 2048), compressed=False)
    with pytest.raises(InvalidInputError, match="length fields are 32-bit"):
        check_record_sizes(columns(2**31 - 2048, header_bytes=2048 - 93 - 10), compressed=False)
    check_record_sizes(columns(2**31 - 2048, header_bytes=2048 - 93 - 11), compressed=False)
    with pytest.raises(InvalidInputError, match="length fields are 32-bit"):
        check_record_sizes(columns(2**31 + 10), compressed=True)


def test_a_directory_gone_while_a_read_lists_is_listed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recursive listing meets a directory that goes meanwhile (a staging directory removed
    at the end of a commit): the read lists again; a root that is gone stays an error."""
    from kafka_segments_ds import selection

    write_table(records(10), tmp_path, topic="t")
    listed = selection.discover_layout
    calls = []

    def vanishing(root: str, *args: object, **kwargs: object) -> object:
        calls.append(root)
        if len(calls) == 1:
            raise FileNotFoundError(f"Cannot list directory '{root}/.kafkasegments-staging-x/out'")
        return listed(root, *args, **kwargs)

    monkeypatch.setattr(selection, "discover_layout", vanishing)
    assert read_table(tmp_path).num_rows == 10 and len(calls) == 2
    with pytest.raises(FileNotFoundError):
        read_table(tmp_path / "nope")


def test_writes_to_other_topics_while_a_read_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits into partitions the read does not select leave it alone, however many; commits
    into one it reads, one after another during every listing, end in CommitInProgressError
    rather than a listing that holds part of one."""
    from kafka_segments_ds import selection

    write_table(records(20), tmp_path, topic="t", numPartitions=2)
    listed = selection.discover_layout

    def busy(topic: str) -> object:
        def listing(root: str, *args: object, **kwargs: object) -> object:
            found = listed(root, *args, **kwargs)
            write_table(records(3), tmp_path, topic=topic, numPartitions=2)
            return found

        return listing

    one = read_table(tmp_path / "t-1").num_rows
    monkeypatch.setattr(selection, "discover_layout", busy("w"))
    assert read_table(tmp_path, subscribe="t").num_rows == 20
    assert read_table(tmp_path / "t-1").num_rows == one
    monkeypatch.setattr(selection, "discover_layout", busy("t"))
    with pytest.raises(CommitInProgressError, match=r"kept committing into .*/t-[01] while"):
        read_table(tmp_path, subscribe="t")


def test_a_brokers_file_churn_while_a_read_lists_is_no_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition directory that changes during every listing with no kafkasegments write
    under way (a broker's cleaner renaming files, segments rolling) is read as listed, not
    refused as a commit."""
    from kafka_segments_ds import selection

    write_table(records(20), tmp_path, topic="t", numPartitions=2)
    listed = selection.discover_layout
    calls = []

    def churning(root: str, *args: object, **kwargs: object) -> object:
        found = listed(root, *args, **kwargs)
        calls.append(root)
        deleted = tmp_path / "t-0" / f"{len(calls):020d}.log.deleted"
        deleted.write_bytes(b"")  # the cleaner's rename, then the file deleted
        deleted.unlink()
        return found

    monkeypatch.setattr(selection, "discover_layout", churning)
    assert read_table(tmp_path, subscribe="t").num_rows == 20
    assert read_table(tmp_path / "t-0").num_rows == read_table(tmp_path / "t-0").num_rows > 0
    # the same churn while a write's staging directory is there: not known to be the broker's
    (tmp_path / ".kafkasegments-staging-job").mkdir()
    with pytest.raises(CommitInProgressError, match=r"kept committing into .*/t-0 while"):
        read_table(tmp_path, subscribe="t")


@pytest.mark.parametrize(
    ("unit", "value", "message"),
    [
        ("s", 10**17, r"row 0: timestamp 100000000000000000 s is out of range"),
        ("s", 9_300_000_000_000_000, r"row 0: timestamp 9300000000000000 s is out of range"),
        ("ms", 9_300_000_000_000_000, r"row 0: timestamp 9300000000000000 ms is out of range"),
    ],
)
def test_timestamps_beyond_what_readers_hold_are_refused(
    tmp_path: Path, unit: str, value: int, message: str
) -> None:
    """A timestamp whose milliseconds overflow int64, or that no timestamp[us] holds (readers
    would give null, the 'no timestamp' value), is refused, not wrapped."""
    table = pa.table({"value": [b"a"], "timestamp": pa.array([value], pa.timestamp(unit))})
    with pytest.raises(InvalidInputError, match=message):
        write_table(table, tmp_path / "out", topic="t")
    assert not (tmp_path / "out").exists()
    latest = (2**63 - 1) // 1000
    table = pa.table({"value": [b"a"], "timestamp": pa.array([latest], pa.timestamp("ms"))})
    write_table(table, tmp_path / "ok", topic="t")
    back = read_table(tmp_path / "ok").column("timestamp").cast(pa.int64()).to_pylist()
    assert back == [latest * 1000]
