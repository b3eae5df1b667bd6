"""``spark.readStream.format("kafkasegments")``: offsets, options, growth of the archive between
and during triggers, restarts from a checkpoint, data loss, Trigger.AvailableNow.

Most tests run queries on the shared SparkSession (memory sink, processAllAvailable); the
planner (:class:`kafka_segments_ds.streaming.planner.StreamPlanner`) is also driven directly where
Spark would hide what is checked (warnings logged in Spark's Python worker, S3 requests; the
clock of maxTriggerDelay in tests/streaming/test_stream_trigger.py).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import index as kidx
from kafka_segments_ds import selection
from kafka_segments_ds.datasource import offsets_from_json, offsets_to_json
from kafka_segments_ds.errors import DataLossError, InvalidOptionError
from kafka_segments_ds.layout import segment_file_name
from kafka_segments_ds.options import parse_stream_options
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_control_batch
from kafka_segments_ds.streaming.planner import StreamPlanner, rate_limit
from tests.support import appender as concurrent

TS0 = 1_700_000_000_000
# pyspark 4.2+ passes read limits (maxOffsetsPerTrigger, minOffsetsPerTrigger) to the source
HAS_READ_LIMITS = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None
NO_READ_LIMITS = "option {} needs pyspark 4.2 or later"


class LiveLog:
    """A partition directory appended to as a broker does: batches go to the end of the active
    segment's ``.log``; ``roll`` writes its indexes and starts the next segment."""

    def __init__(self, root: Path, topic: str, partition: int, first_offset: int = 0) -> None:
        self.topic, self.partition = topic, partition
        self.directory = root / f"{topic}-{partition}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.next_offset = self.base = first_offset
        self.active.touch()

    @property
    def active(self) -> Path:
        return self.directory / segment_file_name(self.base, ".log")

    def entry(self, count: int, **kwargs: Any) -> bytes:
        first = self.next_offset
        specs = [
            RecordSpec(key=b"%s" % self.topic.encode(), value=b"v%d" % o, timestamp=TS0 + o)
            for o in range(first, first + count)
        ]
        return encode_batch(specs, base_offset=first, **kwargs)

    def append(self, count: int = 3, *, torn: int = 0, **kwargs: Any) -> bytes:
        """One batch of ``count`` records; with ``torn``, only its first ``torn`` bytes (the
        rest is returned for :meth:`finish`)."""
        data = self.entry(count, **kwargs)
        self.next_offset += count
        with self.active.open("ab") as f:
            f.write(data[:torn] if torn else data)
        return data[torn:] if torn else b""

    def finish(self, rest: bytes) -> None:
        with self.active.open("ab") as f:
            f.write(rest)

    def roll(self) -> None:
        data = self.active.read_bytes()
        table = scan_entries(data)
        offset_index, time_index = kidx.build_indexes(
            table.positions, table.sizes, table.last_offsets, table.max_timestamps, self.base, 64
        )
        self.active.with_suffix(".index").write_bytes(offset_index)
        self.active.with_suffix(".timeindex").write_bytes(time_index)
        self.base = self.next_offset
        self.active.touch()

    def rows(self, start: int = 0, stop: int | None = None) -> list[tuple[str, int, int, bytes]]:
        stop = self.next_offset if stop is None else stop
        return [(self.topic, self.partition, o, b"v%d" % o) for o in range(start, stop)]


def rows_of(spark: Any, table: str) -> list[tuple[str, int, int, bytes]]:
    return sorted(
        (r.topic, r.partition, r.offset, bytes(r.value))
        for r in spark.table(table).select("topic", "partition", "offset", "value").collect()
    )


class Query:
    """A streaming query into a memory table (or Parquet files with a checkpoint)."""

    def __init__(
        self,
        spark: Any,
        path: Path | str,
        *,
        available_now: bool = False,
        parquet: Path | None = None,
        checkpoint: Path | None = None,
        **options: Any,
    ) -> None:
        reader = spark.readStream.format("kafkasegments")
        for key, value in options.items():
            reader = reader.option(key, value)
        df = reader.load(str(path)).select("topic", "partition", "offset", "value")
        self.name = "stream_" + uuid.uuid4().hex[:8]
        writer = df.writeStream.queryName(self.name)
        if parquet is not None:
            writer = writer.format("parquet").option("path", str(parquet))
        else:
            writer = writer.format("memory")
        if checkpoint is not None:
            writer = writer.option("checkpointLocation", str(checkpoint))
        if available_now:
            writer = writer.trigger(availableNow=True)
        self.spark = spark
        self.query = writer.start()

    def drain(self) -> Query:
        self.query.processAllAvailable()
        return self

    def rows(self) -> list[tuple[str, int, int, bytes]]:
        return rows_of(self.spark, self.name)

    def batch_rows(self) -> list[int]:
        """Rows of each micro-batch that read any."""
        return [p["numInputRows"] for p in self.query.recentProgress if p["numInputRows"]]

    def stop(self) -> None:
        self.query.stop()


@pytest.fixture
def queries() -> Iterator[list[Query]]:
    started: list[Query] = []
    yield started
    for q in started:
        q.stop()


def start(spark: Any, queries: list[Query], path: Path | str, **kwargs: Any) -> Query:
    q = Query(spark, path, **kwargs)
    queries.append(q)
    return q


def parquet_rows(spark: Any, path: Path) -> list[tuple[str, int, int, bytes]]:
    return sorted(
        (r.topic, r.partition, r.offset, bytes(r.value))
        for r in spark.read.parquet(str(path)).collect()
    )


def last_checkpoint_offsets(checkpoint: Path) -> Any:
    logs = sorted(
        (p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    return json.loads(logs[-1].read_text().splitlines()[-1])


# -- offsets and options ---------------------------------------------------------------------


def test_offsets_json_is_the_kafka_source_form() -> None:
    offsets = {("b", 10): 7, ("a", 2): 5, ("b", 9): 0}
    data = offsets_to_json(offsets)
    assert json.dumps(data) == '{"a": {"2": 5}, "b": {"9": 0, "10": 7}}'
    assert offsets_from_json(data) == offsets
    for bad in ({"a": {"x": 1}}, {"a": {"0": -1}}, {"a": 3}, {"a": {"0": True}}, [1]):
        with pytest.raises(InvalidOptionError, match="offset"):
            offsets_from_json(bad)


def test_stream_options() -> None:
    read, stream = parse_stream_options(
        {
            "startingOffsets": '{"t":{"0":-2,"1":-1,"2":5}}',
            "maxOffsetsPerTrigger": "9",
            "MINOFFSETSPERTRIGGER": "3",
            "maxTriggerDelay": "2s",
            "includeHeaders": "true",
        }
    )
    assert stream.starting_offsets == (("t", 0, -2), ("t", 1, -1), ("t", 2, 5))
    assert (stream.max_offsets_per_trigger, stream.min_offsets_per_trigger) == (9, 3)
    assert stream.max_trigger_delay_ms == 2000 and read.include_headers
    assert parse_stream_options({})[1].starting_offsets is None  # latest, as Spark
    assert parse_stream_options({"startingOffsets": "earliest"})[1].starting_offsets == ()
    assert parse_stream_options({"startingOffsets": "LATEST"})[1].starting_offsets is None
    for text, ms in (("15m", 900_000), ("500", 500), ("500ms", 500), ("1h", 3_600_000)):
        assert parse_stream_options({"maxTriggerDelay": text})[1].max_trigger_delay_ms == ms
    for options, message in (
        ({"endingOffsets": "latest"}, "endingOffsets is for batch queries"),
        ({"endingTimestamp": "5"}, "endingTimestamp is for batch queries"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be >= 1"),
        ({"maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
        ({"startingOffsets": "earliest", "startingTimestamp": "5"}, "exclusive"),
        ({"startingOffsets": '{"t":{"0":-3}}'}, "-3 is not allowed"),
        ({"maxOffsetsPerTriger": "5"}, "unknown option"),
        ({"layout": "redpanda"}, "option layout must be one of auto, broker, aiven"),
    ):
        with pytest.raises(InvalidOptionError, match=message):
            parse_stream_options(options)


def test_rate_limit_shares_by_lag_as_spark() -> None:
    begin = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    latest = {("t", 0): 90, ("t", 1): 110, ("t", 2): 5}
    # 100 to read, 10 allowed: 9 and 1 (a share under one offset still moves on by one)
    assert rate_limit(begin, latest, 10) == {("t", 0): 9, ("t", 1): 101, ("t", 2): 5}
    assert rate_limit(begin, latest, 100) == latest
    assert rate_limit(begin, latest, 1000) == latest


# -- queries ---------------------------------------------------------------------------------


@pytest.mark.spark_matrix
def test_earliest_available_now_in_rate_limited_batches(spark, tmp_path: Path, queries) -> None:  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    a, b = LiveLog(logs, "a", 0), LiveLog(logs, "b", 0)
    for _ in range(4):
        a.append(3)
        b.append(2)
    a.roll()
    a.append(3)  # the active segment of a: 15 offsets in a, 8 in b
    q = start(
        spark, queries, logs, available_now=True, startingOffsets="earliest", maxOffsetsPerTrigger=9
    )
    if not HAS_READ_LIMITS:  # pyspark 4.0/4.1: a clear error; AvailableNow reads all in one batch
        with pytest.raises(Exception, match=NO_READ_LIMITS.format("maxOffsetsPerTrigger")):
            q.query.awaitTermination()
        q = start(spark, queries, logs, available_now=True, startingOffsets="earliest")
        q.query.awaitTermination()
        assert q.rows() == sorted(a.rows() + b.rows())
        assert q.batch_rows() == [23]
        return
    q.query.awaitTermination()
    assert q.rows() == sorted(a.rows() + b.rows())
    # at most 9 offsets a trigger, shared by lag and rounded down: 15/23 and 8/23 of 9 are
    # 5 + 3; then 10/15 and 5/15 of 9 are 6 + 3; then the last 4 + 2
    assert q.batch_rows() == [8, 9, 6]


@pytest.mark.spark_matrix
def test_default_starts_at_latest_and_reads_appends_and_rolls(
    spark, tmp_path: Path, queries
) -> None:  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(4)
    t.roll()
    t.append(2)
    q = start(spark, queries, logs).drain()
    assert q.rows() == []
    t.append(3)
    q.drain()
    assert q.rows() == t.rows(6)
    t.roll()
    t.append(1)
    t.roll()  # an empty active segment: its base offset is the latest
    q.drain()
    assert q.rows() == t.rows(6)
    # a new partition and a new topic start from their earliest offset (one that starts
    # after 0 is data loss: test_added_partition_that_starts_after_offset_0_is_data_loss)
    new = LiveLog(logs, "t", 1)
    new.append(2)
    other = LiveLog(logs, "u", 0)
    other.append(2)
    t.append(2)
    q.drain()
    assert q.rows() == sorted(t.rows(6) + new.rows() + other.rows())


def test_starting_offsets_json(spark, tmp_path: Path, queries) -> None:  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    parts = [LiveLog(logs, "t", p) for p in range(3)]
    for part in parts:
        part.append(5)
        part.roll()
        part.append(5)
    q = start(spark, queries, logs, startingOffsets='{"t":{"0":-2,"1":-1,"2":7}}').drain()
    assert q.rows() == sorted(parts[0].rows() + parts[2].rows(7))
    parts[1].append(1)
    q.drain()
    assert q.rows() == sorted(parts[0].rows() + parts[1].rows(10) + parts[2].rows(7))
    with pytest.raises(Exception, match=r"not in the \(selected\) archive: t-9"):
        start(spark, queries, logs, startingOffsets='{"t":{"9":0}}').drain()


def test_starting_timestamps(spark, tmp_path: Path, queries) -> None:  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    t0, t1 = LiveLog(logs, "t", 0), LiveLog(logs, "t", 1)
    for part in (t0, t1):
        part.append(4)
        part.roll()
        part.append(4)
    q = start(spark, queries, logs, startingTimestamp=str(TS0 + 5)).drain()
    assert q.rows() == sorted(t0.rows(5) + t1.rows(5))
    q = start(
        spark,
        queries,
        logs,
        startingOffsetsByTimestamp=json.dumps({"t": {"0": TS0 + 2, "1": -1}}),
    ).drain()
    assert q.rows() == t0.rows(2)
    with pytest.raises(Exception, match="no offset of t-0 has a timestamp >= "):
        start(spark, queries, logs, startingTimestamp=str(TS0 + 99)).drain()
    q = start(
        spark,
        queries,
        logs,
        startingTimestamp=str(TS0 + 99),
        startingOffsetsByTimestampStrategy="latest",
    ).drain()
    t1.append(1)
    q.drain()
    assert q.rows() == t1.rows(8)


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("subscribe", "a,c", {"a-0", "a-1", "c-0"}),
        ("subscribePattern", "[ab]", {"a-0", "a-1", "b-0"}),
        ("assign", '{"a":[1],"c":[0]}', {"a-1", "c-0"}),
    ],
)
def test_topic_selection(
    spark, tmp_path: Path, queries, option: str, value: str, expected: set[str]
) -> None:  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    parts = {f"{t}-{p}": LiveLog(logs, t, p) for t, p in (("a", 0), ("a", 1), ("b", 0), ("c", 0))}
    for part in parts.values():
        part.append(2)
    q = start(spark, queries, logs, startingOffsets="earliest", **{option: value}).drain()
    assert q.rows() == sorted(r for n in expected for r in parts[n].rows())
    # a partition that appears later is read if selected
    late = LiveLog(logs, "c", 1) if option != "subscribePattern" else LiveLog(logs, "b", 1)
    late.append(2)
    q.drain()
    selected = option != "assign"
    assert q.rows() == sorted(
        [r for n in expected for r in parts[n].rows()] + (late.rows() if selected else [])
    )


def test_appends_during_triggers_are_read_as_whole_batches(spark, tmp_path: Path, queries) -> None:  # type: ignore[no-untyped-def]
    """A batch half written when a trigger lists the archive is read, once, by a later one."""
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(2)
    q = start(spark, queries, logs, startingOffsets="earliest").drain()
    rest = t.append(3, torn=30)
    q.drain()
    assert q.rows() == t.rows(0, 2)
    t.finish(rest)
    rest = t.append(2, torn=70)
    q.drain()
    assert q.rows() == t.rows(0, 5)
    t.finish(rest)
    t.roll()
    q.drain()
    assert q.rows() == t.rows()


@pytest.mark.parametrize("preallocate", [False, True], ids=["append", "preallocated"])
def test_stream_of_a_segment_being_written_in_pieces(
    spark, tmp_path: Path, queries, preallocate: bool
) -> None:  # type: ignore[no-untyped-def]
    """The appender of tests/support/appender.py writes each batch in four pieces (into
    a zero-filled preallocated .log too), indexes in place; a trigger after every piece."""
    directory = tmp_path / "logs" / "live-0"
    directory.mkdir(parents=True)
    batches = 3
    appender = concurrent.start_appender(directory, batches, preallocate, lockstep=True)
    assert appender.stdin is not None and appender.stdout is not None
    q = None
    seen = []
    try:
        for _ in range(batches * 4):
            appender.stdin.write("\n")
            appender.stdin.flush()
            appender.stdout.readline()
            if q is None:
                q = start(spark, queries, tmp_path / "logs", startingOffsets="earliest")
            q.drain()
            got = [(o, v) for _, _, o, v in q.rows()]
            assert got == concurrent.expected_rows(len(got))  # no duplicate, no gap
            seen.append(len(got))
    finally:
        appender.stdin.close()
        appender.wait()
    records = concurrent.RECORDS
    assert seen == [records * (i // 4 + (i % 4 == 3)) for i in range(batches * 4)]


@pytest.mark.spark_matrix
def test_exactly_once_across_restarts_with_parquet(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    logs, out, checkpoint = tmp_path / "logs", tmp_path / "out", tmp_path / "checkpoint"
    t0, t1 = LiveLog(logs, "t", 0), LiveLog(logs, "t", 1)
    t0.append(5)
    t1.append(3)
    options: dict[str, Any] = {"startingOffsets": "earliest"}
    if HAS_READ_LIMITS:
        options["maxOffsetsPerTrigger"] = 4
    pending = b""
    for run in range(3):
        q = Query(spark, logs, parquet=out, checkpoint=checkpoint, **options)
        try:
            q.drain()
            # while the query runs: the batch torn at the last restart is completed, batches
            # are appended and segments rolled
            t0.finish(pending)
            t0.append(2)
            t0.roll()
            t1.append(4)
            q.drain()
        finally:
            q.stop()
        assert parquet_rows(spark, out) == sorted(t0.rows() + t1.rows())
        # between runs: a roll, an append, and a batch torn until the next run completes it
        t1.roll()
        t1.append(run + 1)
        pending = t0.append(1, torn=20 + run)
    t0.finish(pending)
    q = Query(spark, logs, available_now=True, parquet=out, checkpoint=checkpoint)
    q.query.awaitTermination()
    assert parquet_rows(spark, out) == sorted(t0.rows() + t1.rows())
    assert last_checkpoint_offsets(checkpoint) == {"t": {"0": t0.next_offset, "1": t1.next_offset}}


def test_available_now_stops_at_what_was_there_at_start(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(10)
    planner = StreamPlanner([str(logs)], *parse_stream_options({"startingOffsets": "earliest"}))
    start_at = planner.initial_offsets()
    planner.prepare_available_now()
    t.append(5)
    LiveLog(logs, "u", 0).append(1)  # a topic that appears after the start
    end = planner.next_offsets(start_at, max_offsets=4)
    assert end == {("t", 0): 4}
    end = planner.next_offsets(end, max_offsets=100)
    assert end == {("t", 0): 10}  # not 15
    assert planner.next_offsets(end, max_offsets=100) == end  # Spark stops here
    # the newest offsets, for Spark's progress reports
    assert planner.reported == {("t", 0): 15, ("u", 0): 1}


class TieredBucket:
    """A partition whose rolled segments an Aiven-style tiered storage uploads (zstd-compressed,
    encrypted chunks) into ``root/bucket/`` as they roll."""

    def __init__(self, root: Path) -> None:
        from tests.support.tiered import rsa_key_pair
        from tests.support.upload import Encryption, kafka_uuid

        self.log = LiveLog(root / "broker", "t", 0)
        self.stage = root / "rolled" / "t-0"  # the rolled segments: what tiering uploads
        self.stage.mkdir(parents=True)
        self.bucket = root / "bucket"
        public, private = rsa_key_pair(root)
        self.encryption = Encryption("key-1", public)
        self.topic_id = kafka_uuid(__import__("random").Random(7))
        self.options = {"privateKeys": json.dumps({"key-1": str(private)})}

    def roll_and_upload(self, count: int, *, finished: bool = True) -> None:
        """``count`` records in a segment that rolls and is uploaded (without its manifest
        when not ``finished``: an upload still under way)."""
        first = self.log.base
        self.log.append(count)
        self.log.roll()
        for path in self.log.directory.iterdir():
            if int(path.name.partition(".")[0]) == first:
                shutil.copy(path, self.stage / path.name)
        self.upload(unfinished=() if finished else (first,))

    def upload(self, unfinished: tuple[int, ...] = ()) -> None:
        """Every rolled segment, again (the same objects: same topic and segment ids)."""
        from tests.support.upload import upload_aiven

        upload_aiven(
            self.stage,
            pafs.LocalFileSystem(),
            f"{self.bucket}/",
            "t",
            0,
            topic_id=self.topic_id,
            compression=True,
            encryption=self.encryption,
            chunk_size=150,
            skip_manifest=unfinished,
        )


def test_a_tiered_bucket_streams_the_segments_as_their_uploads_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tiered-storage bucket (layout auto) grows by whole segments: each trigger lists it,
    and a segment counts once its manifest is written (the last object of an upload); its
    offsets come from the manifest, its rows through the chunks. A manifest is read once."""
    from kafka_segments_ds.tiered import layouts

    manifests_read: list[str] = []
    read_manifest = layouts._read_manifest

    def counting(filesystem: pafs.FileSystem, stem: str, objects: Any) -> Any:
        manifests_read.append(stem.rpartition("/")[2].partition("-")[0])
        return read_manifest(filesystem, stem, objects)

    monkeypatch.setattr(layouts, "_read_manifest", counting)
    listings: list[str] = []  # of the bucket (the broker listing of an empty root is cheap)
    discover_layout = selection.discover_layout

    def listing(path: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("tiered_only"):
            listings.append(path)
        return discover_layout(path, *args, **kwargs)

    monkeypatch.setattr(selection, "discover_layout", listing)
    tiered = TieredBucket(tmp_path)
    tiered.roll_and_upload(5)
    tiered.roll_and_upload(4)
    options = {"startingOffsets": "earliest", **tiered.options}
    planner = StreamPlanner([str(tiered.bucket)], *parse_stream_options(options))
    read: list[tuple[str, int, int, bytes]] = []

    def trigger(begin: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        end = planner.next_offsets(begin)
        for tasks in planner.plan(begin, end, 2):
            for b in read_tasks(tasks, planner.options, ("topic", "partition", "offset", "value")):
                read.extend(zip(*(b.column(i).to_pylist() for i in range(4)), strict=True))
        return end

    begin = planner.initial_offsets()
    assert begin == {("t", 0): 0}
    assert listings == [str(tiered.bucket)]  # found to be a bucket by the one listing
    end = trigger(begin)
    assert end == {("t", 0): 9} and read == tiered.log.rows(0, 9)
    assert len(listings) == 2  # then one a trigger
    assert sorted(manifests_read) == ["00000000000000000000", "00000000000000000005"]  # threads
    tiered.roll_and_upload(3, finished=False)
    assert trigger(end) == end  # no manifest yet: not there
    tiered.upload()  # the upload finishes
    end = trigger(end)
    assert end == {("t", 0): 12} and read == tiered.log.rows(0, 12)
    assert manifests_read[2:] == ["00000000000000000009"]
    empty = StreamPlanner([str(tmp_path / "empty")], *parse_stream_options({}))
    (tmp_path / "empty").mkdir()
    assert empty.initial_offsets() == {}  # an archive that is still empty streams nothing


def test_a_tiered_bucket_streamed_by_spark_across_restarts(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Trigger.AvailableNow runs over a growing encrypted bucket with a checkpoint: every
    record once in the Parquet sink."""
    tiered = TieredBucket(tmp_path)
    tiered.roll_and_upload(6)
    run = {
        "available_now": True,
        "parquet": tmp_path / "out",
        "checkpoint": tmp_path / "checkpoint",
        "startingOffsets": "earliest",
        **tiered.options,
    }
    Query(spark, tiered.bucket, **run).query.awaitTermination()
    tiered.roll_and_upload(4)
    tiered.roll_and_upload(2)
    Query(spark, tiered.bucket, **run).query.awaitTermination()
    assert parquet_rows(spark, tmp_path / "out") == tiered.log.rows(0, 12)
    assert last_checkpoint_offsets(tmp_path / "checkpoint") == {"t": {"0": 12}}


def test_a_commit_in_progress_holds_the_stream(tmp_path: Path) -> None:
    """While a kafkasegments write commits into the log dir, triggers find no new offsets."""
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(3)
    planner = StreamPlanner([str(logs)], *parse_stream_options({"startingOffsets": "earliest"}))
    begin = planner.initial_offsets()
    staging = logs / ".kafkasegments-staging-job"
    staging.mkdir()
    (staging / "_COMMIT.json").write_text("{}")
    t.append(2)
    assert planner.next_offsets(begin) == begin
    (staging / "_COMMIT.json").unlink()
    staging.rmdir()
    assert planner.next_offsets(begin) == {("t", 0): 5}


@pytest.mark.spark_matrix
def test_min_offsets_per_trigger_in_a_query(spark, tmp_path: Path, queries) -> None:  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(1)
    q = start(
        spark,
        queries,
        logs,
        startingOffsets="earliest",
        minOffsetsPerTrigger=4,
        maxTriggerDelay="1h",
    )
    if not HAS_READ_LIMITS:
        with pytest.raises(Exception, match=NO_READ_LIMITS.format("minOffsetsPerTrigger")):
            q.drain()
        return
    q.drain()
    assert q.rows() == t.rows()  # the first trigger
    t.append(2)
    q.drain()
    assert q.rows() == t.rows(0, 1)  # 2 < 4: waits
    t.append(2)
    q.drain()
    assert q.rows() == t.rows()


def test_min_offsets_per_trigger_after_a_restart(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The first trigger after a restart from a checkpoint is due, as a new query's: Spark's
    Kafka source starts maxTriggerDelay anew too."""
    if not HAS_READ_LIMITS:
        pytest.skip(NO_READ_LIMITS.format("minOffsetsPerTrigger"))
    logs, out, checkpoint = tmp_path / "logs", tmp_path / "out", tmp_path / "checkpoint"
    t = LiveLog(logs, "t", 0)
    t.append(1)
    options = {"startingOffsets": "earliest", "minOffsetsPerTrigger": 4, "maxTriggerDelay": "1h"}
    q = Query(spark, logs, parquet=out, checkpoint=checkpoint, **options)
    try:
        q.drain()
        assert parquet_rows(spark, out) == t.rows()
        t.append(2)
        q.drain()
        assert parquet_rows(spark, out) == t.rows(0, 1)  # 2 < 4: waits
    finally:
        q.stop()
    q = Query(spark, logs, parquet=out, checkpoint=checkpoint, **options)
    try:
        q.drain()
        assert parquet_rows(spark, out) == t.rows()
        assert q.batch_rows() == [2]
    finally:
        q.stop()


# -- data loss -------------------------------------------------------------------------------


def _behind(spark: Any, tmp_path: Path) -> tuple[LiveLog, Path]:
    """A checkpointed stream at offset 4 of t-0; then segments up to offset 10 are deleted."""
    logs, checkpoint = tmp_path / "logs", tmp_path / "checkpoint"
    t = LiveLog(logs, "t", 0)
    t.append(4)
    t.roll()
    q = Query(
        spark,
        logs,
        available_now=True,
        parquet=tmp_path / "out",
        checkpoint=checkpoint,
        startingOffsets="earliest",
    )
    q.query.awaitTermination()
    for _ in range(2):
        t.append(3)
        t.roll()
    t.append(3)
    for path in t.directory.iterdir():
        if int(path.name.partition(".")[0]) < 10:
            path.unlink()  # retention: segments 0 and 4 are gone, 4..9 never read
    return t, checkpoint


@pytest.mark.parametrize("fail", [True, False], ids=["fails", "skips"])
def test_data_loss_after_a_restart(spark, tmp_path: Path, fail: bool) -> None:  # type: ignore[no-untyped-def]
    """failOnDataLoss=true (the default) fails naming the partition and the offsets lost;
    false goes on from the earliest offset available."""
    t, checkpoint = _behind(spark, tmp_path)
    options = {} if fail else {"failOnDataLoss": "false"}
    q = Query(
        spark,
        tmp_path / "logs",
        available_now=True,
        parquet=tmp_path / "out",
        checkpoint=checkpoint,
        **options,
    )
    if fail:
        with pytest.raises(
            Exception,
            match=r"DataLossError.*t-0: offsets 4 to 9 are no longer in the archive, whose "
            "first segment starts at offset 10",
        ):
            q.query.awaitTermination()
        return
    q.query.awaitTermination()
    assert parquet_rows(spark, tmp_path / "out") == t.rows(0, 4) + t.rows(10)


def test_data_loss_is_logged_when_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logs = tmp_path / "logs"
    t, gone = LiveLog(logs, "t", 0), LiveLog(logs, "t", 1)
    t.append(4)
    t.roll()
    t.append(4)
    gone.append(2)
    planner = StreamPlanner([str(logs)], *parse_stream_options({"failOnDataLoss": "false"}))
    start_at = {("t", 0): 2, ("t", 1): 2}
    (t.directory / segment_file_name(0, ".log")).unlink()
    shutil.rmtree(gone.directory)
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.streaming.planner"):
        end = planner.next_offsets(start_at)
        packed = planner.plan(start_at, end, 2)
    assert end == {("t", 0): 8}
    offsets = [
        o
        for tasks in packed
        for b in read_tasks(tasks, planner.options, ("offset",))
        for o in b.column(0).to_pylist()
    ]
    assert offsets == [4, 5, 6, 7]
    assert [r.getMessage() for r in caplog.records] == [
        "t-1 is gone from the archive; some data may have been missed (failOnDataLoss=false)",
        "t-0: offsets 2 to 3 are no longer in the archive, whose first segment starts at offset "
        "4 (removed by retention or compaction); some data may have been missed "
        "(failOnDataLoss=false)",
    ]
    strict = StreamPlanner([str(logs)], *parse_stream_options({}))
    with pytest.raises(
        DataLossError, match=r"t-1 is gone from the archive; the stream was at offset 2 of t-1"
    ):
        strict.plan(start_at, strict.next_offsets(start_at), 2)


@pytest.mark.parametrize("fail", [True, False], ids=["fails", "skips"])
def test_added_partition_that_starts_after_offset_0_is_data_loss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fail: bool
) -> None:
    """As Spark's Kafka source: a partition that appears after the stream started is read from
    its first offset, and one whose first offset is not 0 lost what came before it."""
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(2)
    options = {"startingOffsets": "earliest"} | ({} if fail else {"failOnDataLoss": "false"})
    planner = StreamPlanner([str(logs)], *parse_stream_options(options))
    begin = planner.initial_offsets()
    assert begin == {("t", 0): 0}
    LiveLog(logs, "t", 1).append(3)  # from 0: nothing lost
    late = LiveLog(logs, "t", 2, first_offset=7)  # retention took 0..6 before the archive saw it
    late.append(2)
    end = planner.next_offsets(begin)
    assert end == {("t", 0): 2, ("t", 1): 3, ("t", 2): 9}
    if fail:
        with pytest.raises(
            DataLossError,
            match=r"^added partition t-2 starts from offset 7 instead of 0\. Some data may have "
            "been missed: set failOnDataLoss=false",
        ):
            planner.plan(begin, end, 2)
        return
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.streaming.planner"):
        packed = planner.plan(begin, end, 2)
    assert [r.getMessage() for r in caplog.records] == [
        "added partition t-2 starts from offset 7 instead of 0; some data may have been missed "
        "(failOnDataLoss=false)"
    ]
    read = sorted(
        (p, o)
        for tasks in packed
        for b in read_tasks(tasks, planner.options, ("partition", "offset"))
        for p, o in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)
    )
    assert read == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 7), (2, 8)]


def test_tail_of_a_segment_with_entries_larger_than_a_read_window(tmp_path: Path) -> None:
    """The latest offset comes from the tail walk; batches over its 1 MiB windows count."""
    from kafka_segments_ds.layout import discover
    from kafka_segments_ds.streaming.planner import TAIL_WINDOW_BYTES, scan_tail

    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(2)
    big = encode_batch(
        [RecordSpec(key=None, value=b"x" * (TAIL_WINDOW_BYTES + 5000), timestamp=TS0)],
        base_offset=2,
    )
    with t.active.open("ab") as f:
        f.write(big)
    t.next_offset = 3
    t.append(2)
    import pyarrow.fs as pafs

    filesystem = pafs.LocalFileSystem()
    seg = discover(str(logs), filesystem)[0].segments[-1]
    tail = scan_tail(filesystem, seg)
    assert (tail.end_position, tail.next_offset) == (seg.size, 5)
    # half of the last batch written: it does not count; walked on from there once whole
    rest = t.append(1, torn=40)
    seg = discover(str(logs), filesystem)[0].segments[-1]
    torn = scan_tail(filesystem, seg, tail)
    assert (torn.end_position, torn.next_offset) == (tail.end_position, 5)
    t.finish(rest)
    seg = discover(str(logs), filesystem)[0].segments[-1]
    assert scan_tail(filesystem, seg, torn).next_offset == 6


@pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED"])
def test_damage_in_the_active_segment(spark, tmp_path: Path, queries, mode: str) -> None:  # type: ignore[no-untyped-def]
    """A damaged batch in the middle of the segment being appended to: FAILFAST fails the
    query naming the file, position and offset; DROPMALFORMED streams every intact record,
    and what is appended after the damage at the next trigger."""
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(3)
    position = t.active.stat().st_size
    t.append(3)
    t.append(3)
    data = bytearray(t.active.read_bytes())
    data[position + 8 : position + 12] = (5).to_bytes(4, "big")  # below the minimum size
    t.active.write_bytes(bytes(data))
    q = start(spark, queries, logs, startingOffsets="earliest", mode=mode)
    if mode == "FAILFAST":
        with pytest.raises(
            Exception,
            match="CorruptSegmentError.*"
            + re.escape(
                f"entry size 5 below the minimum 14 (file {t.active}, byte position {position}, "
                "offset 3)"
            ),
        ):
            q.query.awaitTermination(120)
        return
    intact = t.rows(0, 3) + t.rows(6, 9)
    assert q.drain().rows() == intact
    t.append(2)
    assert q.drain().rows() == intact + t.rows(9, 11)


def test_truncated_log_is_data_loss(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(6)
    planner = StreamPlanner([str(logs)], *parse_stream_options({}))
    with pytest.raises(DataLossError, match="t-0: the offset went back from 9 to 6"):
        planner.plan({("t", 0): 9}, planner.next_offsets({("t", 0): 9}), 2)


# -- other options, storage ------------------------------------------------------------------


def test_schema_options_and_read_committed(spark, tmp_path: Path, queries) -> None:  # type: ignore[no-untyped-def]
    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(2)
    t.append(2, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    df = (
        spark.readStream.format("kafkasegments")
        .option("includeHeaders", "true")
        .option("includeMetadata", "true")
        .load(str(logs))
    )
    assert df.isStreaming and df.columns[-2:] == ["segment", "position"]
    assert "headers" in df.columns
    q = start(spark, queries, logs, startingOffsets="earliest", isolationLevel="read_committed")
    q.drain()
    assert q.rows() == t.rows(0, 2)  # the transaction is open: the last stable offset is 2
    with t.active.open("ab") as f:
        f.write(
            encode_control_batch(
                offset=4, commit=True, producer_id=7, producer_epoch=0, timestamp=TS0
            )
        )
    t.next_offset = 5
    q.drain()
    assert q.rows() == t.rows(0, 4)
    with pytest.raises(Exception, match="endingOffsets is for batch queries"):
        start(spark, queries, logs, endingOffsets="latest").drain()
    # a batch read ignores the stream's options, as Spark's Kafka source does
    batch = spark.read.format("kafkasegments").option("maxOffsetsPerTrigger", 5).load(str(logs))
    assert batch.count() == 4  # the control record is no row


def test_stream_from_s3(tmp_path: Path, moto_s3) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.fs as pafs

    logs = tmp_path / "logs"
    t = LiveLog(logs, "t", 0)
    t.append(3)
    t.roll()
    t.append(2)
    # a bucket of its own: moto keeps buckets from one loopback server to the next
    with moto_s3("stream-archive") as (s3, host, port):

        def upload() -> None:
            pafs.copy_files(
                str(logs),
                "stream-archive/kafka",
                source_filesystem=pafs.LocalFileSystem(),
                destination_filesystem=s3,
            )

        upload()
        options = {
            "startingOffsets": "earliest",
            "fs.s3.endpoint": f"http://{host}:{port}",
            "fs.s3.accessKey": "k",
            "fs.s3.secretKey": "s",
            "fs.s3.region": "us-east-1",
        }
        planner = StreamPlanner(["s3://stream-archive/kafka"], *parse_stream_options(options))
        begin = planner.initial_offsets()
        read: list[int] = []

        def trigger(begin: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
            end = planner.next_offsets(begin)
            for tasks in planner.plan(begin, end, 2):
                for batch in read_tasks(tasks, planner.options, ("offset", "value")):
                    read.extend(batch.column(0).to_pylist())
            return end

        end = trigger(begin)
        assert end == {("t", 0): 5} and read == [0, 1, 2, 3, 4]
        assert trigger(end) == end
        t.append(2)  # the active segment grows: uploaded again, larger
        t.roll()
        t.append(1)
        upload()
        end = trigger(end)
        assert end == {("t", 0): 8} and read == list(range(8))


def test_stream_of_a_tiered_bucket_on_s3(tmp_path: Path, moto_s3) -> None:  # type: ignore[no-untyped-def]
    """An Aiven bucket on the loopback S3 server, encrypted zstd chunks, growing by a segment."""
    from tests.support.upload import upload_aiven

    tiered = TieredBucket(tmp_path)
    tiered.roll_and_upload(4)
    with moto_s3("tiered-stream") as (s3, host, port):

        def upload() -> None:
            upload_aiven(
                tiered.stage,
                s3,
                "tiered-stream/rsm/",
                "t",
                0,
                topic_id=tiered.topic_id,
                compression=True,
                encryption=tiered.encryption,
                chunk_size=150,
            )

        upload()
        options = {
            "startingOffsets": "earliest",
            "fs.s3.endpoint": f"http://{host}:{port}",
            "fs.s3.accessKey": "k",
            "fs.s3.secretKey": "s",
            "fs.s3.region": "us-east-1",
            **tiered.options,
        }
        planner = StreamPlanner(["s3://tiered-stream/rsm/"], *parse_stream_options(options))
        read: list[tuple[str, int, int, bytes]] = []

        def trigger(begin: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
            end = planner.next_offsets(begin)
            for tasks in planner.plan(begin, end, 2):
                for b in read_tasks(
                    tasks, planner.options, ("topic", "partition", "offset", "value")
                ):
                    read.extend(zip(*(b.column(i).to_pylist() for i in range(4)), strict=True))
            return end

        end = trigger(planner.initial_offsets())
        assert end == {("t", 0): 4} and read == tiered.log.rows(0, 4)
        assert trigger(end) == end
        tiered.roll_and_upload(3)  # (to local disk; then to S3)
        upload()
        end = trigger(end)
        assert end == {("t", 0): 7} and read == tiered.log.rows(0, 7)


def test_planning_state_is_not_shipped_to_executors(tmp_path: Path) -> None:
    import pickle

    from kafka_segments_ds.datasource import KafkaSegmentsDataSource

    logs = tmp_path / "logs"
    LiveLog(logs, "t", 0).append(3)
    source = KafkaSegmentsDataSource({"path": str(logs)})
    reader = source.streamReader(pa_schema_struct())
    reader.initialOffset()
    assert reader._planner is not None
    assert pickle.loads(pickle.dumps(reader))._planner is None


def pa_schema_struct() -> Any:
    from pyspark.sql.types import StructType

    return StructType.fromDDL("topic string, partition int, offset bigint, value binary")


def test_example_stream_to_parquet(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """examples/stream_to_parquet.py: two incremental runs, the second reads only the append."""
    from kafka_segments_ds import read_table

    spec = importlib.util.spec_from_file_location(
        "example_stream_to_parquet",
        Path(__file__).resolve().parents[2] / "examples" / "stream_to_parquet.py",
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    logs, out = example.write_sample(tmp_path / "logs"), tmp_path / "out"
    before = read_table(str(logs), columns=["topic", "partition", "offset"]).num_rows
    assert example.run_once(spark, logs, out) == before
    example.grow_sample(logs)
    assert example.run_once(spark, logs, out) == example.APPENDED
    archived = spark.read.parquet(str(out)).select("topic", "partition", "offset", "dt")
    expected = read_table(str(logs), columns=["topic", "partition", "offset", "timestamp"])
    got = sorted((r.topic, r.partition, r.offset) for r in archived.collect())
    assert got == sorted(
        zip(*(expected[c].to_pylist() for c in ("topic", "partition", "offset")), strict=True)
    )
    # (pyspark 4.1 infers a date type for the partition directories' values)
    dates = {str(r.dt) for r in archived.where("topic = 'orders'").collect()}
    assert dates == {"2023-11-14", "2023-11-15"}
