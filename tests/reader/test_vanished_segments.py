"""A segment removed between planning and reading (retention, compaction, truncation).

As Spark's Kafka source: with ``failOnDataLoss=true`` (the default) a read fails with a
:class:`DataLossError` naming the topic-partition, the file and the offsets it held; with
``false`` it logs a warning and reads on without them. A stream's driver that finds a segment
gone while it plans a micro-batch lists the archive again and plans from what is there.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from kafka_segments_ds.errors import DataLossError
from kafka_segments_ds.layout import segment_file_name
from kafka_segments_ds.options import parse_read_options, parse_stream_options
from kafka_segments_ds.planning import plan_scan
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.streaming.planner import StreamPlanner

TS0 = 1_700_000_000_000


def write_partition(root: Path, topic: str, partition: int, bases: list[int], per: int) -> Path:
    """Segments of ``per`` records (two batches) starting at each of ``bases``."""
    directory = root / f"{topic}-{partition}"
    directory.mkdir(parents=True)
    for base in bases:
        data = b""
        for first in (base, base + per // 2):
            count = per // 2
            data += encode_batch(
                [
                    RecordSpec(key=None, value=b"v%d" % o, timestamp=TS0 + o)
                    for o in range(first, first + count)
                ],
                base_offset=first,
            )
        (directory / segment_file_name(base, ".log")).write_bytes(data)
    return directory


def remove_segment(directory: Path, base: int) -> Path:
    log = directory / segment_file_name(base, ".log")
    for f in directory.glob(segment_file_name(base, ".*")):
        f.unlink()
    return log


def offsets(packed: list, options) -> list[int]:  # type: ignore[no-untyped-def, type-arg]
    return [
        o
        for tasks in packed
        for b in read_tasks(tasks, options, ("offset",))
        for o in b.column(0).to_pylist()
    ]


@pytest.mark.parametrize("fail", [True, False], ids=["fails", "skips"])
def test_batch_read_of_a_segment_removed_after_planning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fail: bool
) -> None:
    directory = write_partition(tmp_path / "logs", "t", 0, [0, 4, 8], 4)
    options = parse_read_options({} if fail else {"failOnDataLoss": "false"})
    plan = plan_scan(str(tmp_path / "logs"), options)
    gone = remove_segment(directory, 4)
    if fail:
        with pytest.raises(DataLossError) as caught:
            offsets([tuple(plan.tasks)], options)
        assert str(caught.value) == (
            f"t-0: segment {gone} (offsets 4 to 7) was removed after the read was planned "
            "(retention, compaction or truncation, or a kafkasegments write replacing the log "
            "dir's data). Some data may have been missed: set "
            "failOnDataLoss=false to skip what is gone"
        )
        return
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.reader.task"):
        assert offsets([tuple(plan.tasks)], options) == [0, 1, 2, 3, 8, 9, 10, 11]
    assert [r.getMessage() for r in caplog.records] == [
        f"t-0: segment {gone} (offsets 4 to 7) was removed after the read was planned "
        "(retention, compaction or truncation, or a kafkasegments write replacing the log dir's "
        "data); skipped, some data may have been missed "
        "(failOnDataLoss=false)"
    ]


@pytest.mark.parametrize("fail", [True, False], ids=["fails", "skips"])
def test_a_segment_removed_by_a_commit_under_way(tmp_path: Path, fail: bool) -> None:
    """Gone while a kafkasegments write's journal is in the log dir: the read would hold part
    of the commit, so CommitInProgressError whatever failOnDataLoss says."""
    from kafka_segments_ds.errors import CommitInProgressError

    directory = write_partition(tmp_path / "logs", "t", 0, [0, 4, 8], 4)
    options = parse_read_options({} if fail else {"failOnDataLoss": "false"})
    plan = plan_scan(str(tmp_path / "logs"), options)
    gone = remove_segment(directory, 4)
    staging = tmp_path / "logs" / ".kafkasegments-staging-0123"
    staging.mkdir()
    (staging / "_COMMIT.json").write_text("{}")
    with pytest.raises(CommitInProgressError) as caught:
        offsets([tuple(plan.tasks)], options)
    assert str(caught.value) == (
        f"segment {gone} was removed by a kafkasegments write committing into "
        f"{tmp_path / 'logs'} while it was read; read again when the commit is done"
    )


@pytest.mark.parametrize("fail", [True, False], ids=["fails", "skips"])
def test_micro_batch_of_a_segment_removed_after_planning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fail: bool
) -> None:
    """Retention removes the oldest segment while the executors are about to read it."""
    directory = write_partition(tmp_path / "logs", "t", 0, [0, 4, 8], 4)
    options = {"startingOffsets": "earliest"} | ({} if fail else {"failOnDataLoss": "false"})
    planner = StreamPlanner([str(tmp_path / "logs")], *parse_stream_options(options))
    start = {("t", 0): 2}
    end = planner.next_offsets(start)
    assert end == {("t", 0): 12}
    packed = planner.plan(start, end, 1)
    gone = remove_segment(directory, 0)
    if fail:
        with pytest.raises(
            DataLossError,
            match=re.escape(f"t-0: segment {gone} (offsets 2 to 3) was removed after the read"),
        ):
            offsets(packed, planner.options)
        return
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.reader.task"):
        assert offsets(packed, planner.options) == list(range(4, 12))
    assert len(caplog.records) == 1 and "(offsets 2 to 3)" in caplog.records[0].getMessage()


@pytest.mark.parametrize("fail", [True, False], ids=["fails", "skips"])
def test_stream_plans_again_when_a_segment_goes_between_listing_and_planning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fail: bool
) -> None:
    """The trigger listed three segments; retention removes the first before the micro-batch
    is planned (its index is read there): the archive is listed again, and the offsets that
    went with it are data loss."""
    directory = write_partition(tmp_path / "logs", "t", 0, [0, 4, 8], 4)
    # an index on the first segment, so that planning a start inside it reads the index
    (directory / segment_file_name(0, ".index")).write_bytes(
        (2).to_bytes(4, "big") + (0).to_bytes(4, "big")
    )
    options = {"startingOffsets": "earliest"} | ({} if fail else {"failOnDataLoss": "false"})
    planner = StreamPlanner([str(tmp_path / "logs")], *parse_stream_options(options))
    start = {("t", 0): 2}
    end = planner.next_offsets(start)
    remove_segment(directory, 0)
    if fail:
        with pytest.raises(
            DataLossError,
            match=r"^t-0: offsets 2 to 3 are no longer in the archive, whose first segment "
            r"starts at offset 4 \(removed by retention or compaction\); the stream was at "
            r"offset 2 of t-0\.",
        ):
            planner.plan(start, end, 1)
        return
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.streaming.planner"):
        packed = planner.plan(start, end, 1)
    assert offsets(packed, planner.options) == list(range(4, 12))
    assert [r.getMessage() for r in caplog.records] == [
        "t-0: offsets 2 to 3 are no longer in the archive, whose first segment starts at "
        "offset 4 (removed by retention or compaction); some data may have been missed "
        "(failOnDataLoss=false)"
    ]


def test_a_segment_removed_from_s3_after_planning(tmp_path: Path, moto_s3) -> None:  # type: ignore[no-untyped-def]
    import pyarrow.fs as pafs

    write_partition(tmp_path / "logs", "t", 0, [0, 4], 4)
    with moto_s3("vanishing") as (s3, host, port):
        pafs.copy_files(
            str(tmp_path / "logs"),
            "vanishing/kafka",
            source_filesystem=pafs.LocalFileSystem(),
            destination_filesystem=s3,
        )
        storage = {
            "fs.s3.endpoint": f"http://{host}:{port}",
            "fs.s3.accessKey": "k",
            "fs.s3.secretKey": "s",
            "fs.s3.region": "us-east-1",
        }
        options = parse_read_options(storage)
        plan = plan_scan("s3://vanishing/kafka", options)
        s3.delete_file("vanishing/kafka/t-0/" + segment_file_name(0, ".log"))
        with pytest.raises(
            DataLossError,
            match=re.escape(
                "t-0: segment s3://vanishing/kafka/t-0/00000000000000000000.log (offsets 0 to 3) "
                "was removed after the read was planned"
            ),
        ):
            offsets([tuple(plan.tasks)], options)
        lenient = parse_read_options(storage | {"failOnDataLoss": "false"})
        assert offsets([tuple(plan.tasks)], lenient) == [4, 5, 6, 7]
