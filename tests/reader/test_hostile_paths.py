"""Hostile paths and names in an archive: refused with UnsafePathError, or skipped as not Kafka.

Decisions (docs/RELIABILITY.md): a segment or index file that resolves through a symbolic link
outside the input is refused; so is a non-UTF-8 name and a ``.log`` whose 20-digit name
overflows int64. Directory names that try path traversal or break Kafka's naming rules
(``..-0``, over-long topics, partitions past 2^31 - 1) are not partition directories: skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pafs
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import UnsafePathError
from kafka_segments_ds.layout import discover
from kafka_segments_ds.records.builder import RecordSpec, encode_batch

SEGMENT = "00000000000000000000.log"


def batch(base: int, value: bytes) -> bytes:
    return encode_batch([RecordSpec(value=value, timestamp=1)], base_offset=base)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    root = tmp_path / "logs"
    (root / "t-0").mkdir(parents=True)
    (root / "t-0" / SEGMENT).write_bytes(batch(0, b"inside"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "00000000000000000005.log").write_bytes(batch(5, b"secret"))
    (outside / "00000000000000000005.index").write_bytes(b"")
    return root


def values(path: Path | str) -> list[bytes]:
    return ksd.read_table(str(path))["value"].to_pylist()


@pytest.mark.parametrize("link", ["segment", "index", "partition-dir", "log-dir-glob"])
def test_symlink_out_of_the_input_is_refused(logs: Path, link: str) -> None:
    outside = logs.parent / "outside"
    if link == "segment":
        os.symlink(outside / "00000000000000000005.log", logs / "t-0" / "00000000000000000005.log")
        target = logs
    elif link == "index":
        os.symlink(
            outside / "00000000000000000005.index", logs / "t-0" / "00000000000000000000.index"
        )
        target = logs / "t-0"
    elif link == "partition-dir":
        os.symlink(outside, logs / "u-0")
        target = logs
    else:
        os.symlink(outside, logs / "u-0")
        target = logs / "*-0"
    with pytest.raises(UnsafePathError, match="outside the input") as info:
        values(target)
    assert str(logs.parent / "outside") in str(info.value)


def test_symlink_inside_the_input_is_read(logs: Path) -> None:
    (logs / "store").mkdir()
    (logs / "store" / "00000000000000000007.log").write_bytes(batch(7, b"linked"))
    os.symlink(
        logs / "store" / "00000000000000000007.log", logs / "t-0" / "00000000000000000007.log"
    )
    assert values(logs) == [b"inside", b"linked"]
    with pytest.raises(UnsafePathError):  # the input is now t-0, and store/ is outside it
        values(logs / "t-0")


def test_input_reached_through_a_symlink_is_read(logs: Path, tmp_path: Path) -> None:
    os.symlink(logs, tmp_path / "alias")
    assert values(tmp_path / "alias") == [b"inside"]


def test_non_utf8_name_is_refused(logs: Path) -> None:
    os.makedirs(os.fsencode(logs) + b"/\xff\xfe-0")
    with pytest.raises(UnsafePathError, match="not valid UTF-8"):
        discover(str(logs), pafs.LocalFileSystem())
    with pytest.raises(UnsafePathError, match="not valid UTF-8"):
        values(logs)  # through read_table (planning checks for a commit in progress first)


def test_offset_overflowing_name_is_refused(logs: Path) -> None:
    (logs / "t-0" / "99999999999999999999.log").write_bytes(batch(0, b"x"))
    with pytest.raises(UnsafePathError, match="exceeds 2\\^63 - 1"):
        values(logs)


@pytest.mark.parametrize(
    "name", ["..-0", ".-0", "a" * 250 + "-0", "t-2147483648", "t-0x1", "t-" + "9" * 25]
)
def test_names_outside_kafka_rules_are_not_partitions(logs: Path, name: str) -> None:
    (logs / name).mkdir()
    (logs / name / SEGMENT).write_bytes(batch(0, b"odd"))
    table = ksd.read_table(str(logs))
    assert table["value"].to_pylist() == [b"inside"]
    assert table["topic"].to_pylist() == ["t"]


def test_stream_refuses_a_symlink_out_of_the_input_added_later(logs: Path) -> None:
    """A stream checks each file once, when a trigger first lists it: a segment linked out of
    the input after the stream started is refused at the trigger that finds it."""
    from kafka_segments_ds.options import parse_stream_options
    from kafka_segments_ds.streaming.planner import StreamPlanner

    planner = StreamPlanner([str(logs)], *parse_stream_options({"startingOffsets": "earliest"}))
    start = planner.initial_offsets()
    assert planner.next_offsets(start) == {("t", 0): 1}
    outside = logs.parent / "outside"
    os.symlink(outside / "00000000000000000005.log", logs / "t-0" / "00000000000000000005.log")
    with pytest.raises(UnsafePathError, match="outside the input") as info:
        planner.next_offsets(start)
    assert str(outside / "00000000000000000005.log") in str(info.value)


def test_stream_of_a_local_tiered_bucket_refuses_a_symlink_added_later(tmp_path: Path) -> None:
    """The same for a tiered-storage bucket on local disk (Aiven's layout), listed whole at
    every trigger."""
    from kafka_segments_ds.options import parse_stream_options
    from kafka_segments_ds.streaming.planner import StreamPlanner
    from tests.support.upload import upload_aiven

    source = tmp_path / "source" / "t-0"
    source.mkdir(parents=True)
    (source / SEGMENT).write_bytes(batch(0, b"inside"))
    (source / "00000000000000000005.log").write_bytes(batch(5, b"secret"))
    bucket = tmp_path / "bucket"
    stems = upload_aiven(source, pafs.LocalFileSystem(), f"{bucket}/", "t", 0)
    secret = Path(stems[1] + ".log")
    outside = tmp_path / "outside.log"
    secret.rename(outside)
    hidden = [Path(stems[1] + suffix) for suffix in (".indexes", ".rsm-manifest")]
    for path in hidden:
        path.rename(tmp_path / path.name)
    planner = StreamPlanner([str(bucket)], *parse_stream_options({"startingOffsets": "earliest"}))
    start = planner.initial_offsets()
    # the manifest's end offset: the last before the next segment's base (as Kafka's)
    assert planner.next_offsets(start) == {("t", 0): 5}
    for path in hidden:
        (tmp_path / path.name).rename(path)
    os.symlink(outside, secret)  # the second segment's .log, linked out of the bucket
    with pytest.raises(UnsafePathError, match="outside the input"):
        planner.next_offsets(start)


def test_a_segment_linked_to_nothing_is_an_error_not_a_gap(logs: Path) -> None:
    """pyarrow's listing leaves a dangling symbolic link out: a segment on a volume that is
    not mounted would be a silent hole in the offsets."""
    part = logs / "t-0"
    (part / "00000000000000000001.log").write_bytes(batch(1, b"later"))
    segment = part / "00000000000000000001.log"
    data = segment.read_bytes()
    segment.unlink()
    segment.symlink_to("/nonexistent-volume/" + segment.name)
    message = f"{segment} is a symbolic link to /nonexistent-volume/{segment.name}, which does not"
    with pytest.raises(FileNotFoundError, match=message):
        ksd.read_table(str(logs))
    with pytest.raises(FileNotFoundError, match=message):
        ksd.read_table(str(part))
    from kafka_segments_ds.cli import main as cli_main

    assert cli_main(["verify", str(logs)]) == 2
    # a dangling link of an optional index is no gap: the segment is read without it
    segment.unlink()
    segment.write_bytes(data)
    (part / (segment.stem + ".index")).symlink_to("/nonexistent-volume/x.index")
    assert values(logs) == [b"inside", b"later"]


def test_a_partition_directory_linked_to_nothing_is_an_error(logs: Path) -> None:
    """A log dir whose partition directory is a link to an unmounted volume: the partition's
    records would be missing without a word."""
    (logs / "t-1").symlink_to("/nonexistent-volume/t-1")
    message = f"{logs / 't-1'} is a symbolic link to /nonexistent-volume/t-1, which does not"
    with pytest.raises(FileNotFoundError, match=message):
        ksd.read_table(str(logs))
    with pytest.raises(FileNotFoundError, match=message):
        ksd.read_table(str(logs), subscribe="t")
    with pytest.raises(FileNotFoundError, match=message):
        ksd.read_table(str(logs), assign='{"t":[1]}')
    from kafka_segments_ds.cli import main as cli_main

    assert cli_main(["verify", str(logs)]) == 2
    # named by a path of their own, the other partitions are read
    assert values(logs / "t-0") == [b"inside"]
    # a read that selects other partitions does not miss it (every read of the log dir was
    # refused)
    assert ksd.read_table(str(logs), assign='{"t":[0]}').column("value").to_pylist() == [b"inside"]
    # a link to nothing under a name that is no partition's is not data
    (logs / "t-1").unlink()
    (logs / "backup").symlink_to("/nonexistent-volume/backup")
    assert values(logs) == [b"inside"]
    (logs / "u-0").symlink_to("/nonexistent-volume/u-0")
    assert ksd.read_table(str(logs), subscribe="t").column("value").to_pylist() == [b"inside"]
    assert ksd.read_table(str(logs), subscribePattern="t.*").num_rows == 1
    with pytest.raises(FileNotFoundError, match=f"{logs / 'u-0'} is a symbolic link"):
        ksd.read_table(str(logs), subscribePattern="[tu]")
