"""What a read covers (issue 23): every path of a list resolved, each record read once; offsets
JSON naming every selected partition, as Spark's Kafka source asks; no Kafka data is an error,
not 0 rows, unless allowEmpty."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from kafka_segments_ds import InvalidOptionError, iter_batches, read_table
from kafka_segments_ds.errors import NoKafkaDataError
from kafka_segments_ds.options import parse_stream_options
from kafka_segments_ds.samples import write_sample_log_dir
from kafka_segments_ds.streaming.planner import StreamPlanner

# write_sample_log_dir(records_per_partition=200): rows per partition directory
ROWS = {"legacy.events-0": 200, "metrics-v1-0": 200, "orders-0": 198, "orders-1": 198}
TOTAL = sum(ROWS.values())


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample_log_dir(
        tmp_path_factory.mktemp("inputs") / "logs", records_per_partition=200, segment_bytes=4096
    )


def _rows(path: object, **options: object) -> int:
    return read_table(path, columns=[], **options).num_rows  # type: ignore[arg-type]


def test_sample_counts(archive: Path) -> None:
    for name, rows in ROWS.items():
        assert _rows(str(archive / name)) == rows
    assert _rows(str(archive)) == TOTAL


# -- point 2: each record once, whatever the path list ---------------------------------------


def test_overlapping_paths_read_each_record_once(archive: Path) -> None:
    orders = str(archive / "orders-0")
    assert _rows([str(archive), orders]) == TOTAL
    assert _rows([orders, str(archive)]) == TOTAL
    assert _rows([str(archive), str(archive)]) == TOTAL
    assert _rows([orders, orders + "/", f"{archive}/./orders-0"]) == ROWS["orders-0"]
    first_log = sorted((archive / "orders-0").glob("*.log"))[0]
    assert _rows([str(first_log), orders]) == ROWS["orders-0"]
    assert _rows([f"{archive}/orders-*", str(archive / "orders-1")]) == 396


def test_every_path_is_resolved(archive: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(archive.parent)
    monkeypatch.setenv("HOME", str(archive.parent))
    got = read_table(["logs/metrics-v1-0", "~/logs/orders-1", f"file://{archive}/orders-0"])
    assert got.num_rows == 200 + 198 + 198
    assert sorted(
        set(zip(got["topic"].to_pylist(), got["partition"].to_pylist(), strict=True))
    ) == [
        ("metrics-v1", 0),
        ("orders", 0),
        ("orders", 1),
    ]
    # a relative path after an absolute one, and a file:// URI of a path already read
    assert _rows([str(archive / "orders-0"), "logs/orders-0"]) == 198
    assert _rows([str(archive), f"file://{archive}/orders-1"]) == TOTAL
    batches = list(iter_batches([str(archive), "logs", "~/logs/orders-0"], columns=["offset"]))
    assert sum(b.num_rows for b in batches) == TOTAL


def test_a_symbolic_link_to_a_path_read_is_read_once(archive: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    os.symlink(archive / "orders-0", link)
    assert _rows([str(archive / "orders-0"), str(link)]) == 198


def _labels(table: object) -> list[tuple[str, int]]:
    pairs = zip(table["topic"].to_pylist(), table["partition"].to_pylist(), strict=True)  # type: ignore[index]
    return sorted(set(pairs))


@pytest.mark.parametrize("name", ["t00", "other-7"])
def test_a_directory_reached_by_a_link_keeps_its_own_name(
    archive: Path, tmp_path: Path, name: str
) -> None:
    """Listed before its target, a link (named anything) does not relabel the partition: the
    rows are the directory's own topic and partition, whatever the order of the paths."""
    link = tmp_path / name
    os.symlink(archive / "orders-0", link)
    for paths in ([str(link), str(archive)], [str(archive), str(link)]):
        got = read_table(paths, columns=["topic", "partition", "offset"])
        assert got.num_rows == TOTAL
        assert _labels(got) == [
            ("legacy.events", 0),
            ("metrics-v1", 0),
            ("orders", 0),
            ("orders", 1),
        ]
        assert _rows(paths, subscribe="orders") == 396


def test_copies_of_one_partition_in_two_places_are_refused(archive: Path, tmp_path: Path) -> None:
    """Replicas of a partition from two brokers would give every record twice."""
    for broker in ("a", "b"):
        shutil.copytree(archive / "orders-0", tmp_path / broker / "orders-0")
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    with pytest.raises(InvalidOptionError) as info:
        read_table(paths)
    message = str(info.value)
    assert message.startswith(
        f"orders-0 is in two directories whose offsets overlap, {tmp_path}/a/orders-0 (segments 0, "
    )
    assert "(replicas from two brokers? one topic from two clusters?)" in message
    with pytest.raises(InvalidOptionError, match="orders-0 is in two directories"):
        list(iter_batches(paths))
    # the first segments in one place, the rest in another: one partition, in offset order
    whole = read_table(str(archive / "orders-0"), columns=["offset", "value"])
    logs = sorted((archive / "orders-0").glob("*.log"))
    assert len(logs) > 2
    for place, part in (("old", logs[:2]), ("new", logs[2:])):
        directory = tmp_path / place / "orders-0"
        directory.mkdir(parents=True)
        for log in part:
            for sibling in log.parent.glob(log.stem + ".*"):
                shutil.copy(sibling, directory / sibling.name)
    for order in (["new", "old"], ["old", "new"]):  # (each piece ends before the next)
        got = read_table([str(tmp_path / p) for p in order], columns=["offset", "value"])
        assert got.equals(whole)
    one_label = read_table([str(tmp_path / "new"), str(tmp_path / "old")])
    assert _labels(one_label) == [("orders", 0)]


def _one_partition(directory: Path, offsets: range) -> None:
    from kafka_segments_ds.records.builder import RecordSpec, encode_batch

    directory.mkdir(parents=True, exist_ok=True)
    data = b"".join(
        encode_batch([RecordSpec(b"v%d" % o, None, 1000 + o)], base_offset=o) for o in offsets
    )
    (directory / f"{offsets[0]:020d}.log").write_bytes(data)


def test_pieces_whose_offsets_overlap_are_refused(tmp_path: Path) -> None:
    """Base offsets that do not interleave are not enough: a piece's last segment may reach
    past where the next piece begins (replicas that rolled at other offsets)."""
    _one_partition(tmp_path / "a" / "t-0", range(10))
    _one_partition(tmp_path / "b" / "t-0", range(5, 12))
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    with pytest.raises(InvalidOptionError, match=r"t-0 is in two directories whose offsets"):
        read_table(paths)
    with pytest.raises(InvalidOptionError, match=r"t-0 is in two directories whose offsets"):
        _planner_of(paths).list_partitions()
    # the command line checks files, it does not key records: both are verified
    from kafka_segments_ds.cli import main as cli_main

    assert cli_main(["verify", *paths]) == 0
    _one_partition(tmp_path / "c" / "t-0", range(10, 12))  # ends where the next one begins
    assert read_table([str(tmp_path / "c"), str(tmp_path / "a")])["offset"].to_pylist() == list(
        range(12)
    )


def _planner_of(paths: list[str]) -> StreamPlanner:
    return StreamPlanner(paths, *parse_stream_options({}))


def test_a_stream_sees_new_segments_in_every_piece(tmp_path: Path) -> None:
    old, live = tmp_path / "old" / "t-0", tmp_path / "live" / "t-0"
    _one_partition(old, range(5))
    _one_partition(live, range(5, 8))
    past = 1_000_000_000  # every directory time well before the listing (no "racy" relisting)
    for directory in (old, live, old.parent, live.parent):
        os.utime(directory, (past, past))
    planner = _planner_of([str(old.parent), str(live.parent)])
    for _ in range(2):  # the second listing keeps the directory times the first one took
        [part] = planner.list_partitions().values()
        assert planner.latest_of(part) == 8
    _one_partition(live, range(8, 12))  # a roll in the live piece
    [part] = planner.list_partitions().values()
    assert [s.base_offset for s in part.segments] == [0, 5, 8]
    assert planner.latest_of(part) == 12


def test_a_stream_of_a_link_and_its_target(archive: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    os.symlink(archive / "orders-0", link)
    planner = _planner_of([str(link), str(archive)])
    parts = planner.list_partitions()
    assert sorted(parts) == [("legacy.events", 0), ("metrics-v1", 0), ("orders", 0), ("orders", 1)]


def test_paths_on_different_stores_are_refused(archive: Path) -> None:
    with pytest.raises(InvalidOptionError, match="on another storage than"):
        read_table(
            [str(archive), "s3://bucket/logs"],
            **{"fs.s3.endpoint": "http://127.0.0.1:9", "fs.s3.region": "us-east-1"},
        )


# -- point 3: offsets JSON names every selected partition ------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("startingOffsets", '{"orders":{"0":10}}'),
        ("endingOffsets", '{"orders":{"0":10}}'),
        ("startingOffsetsByTimestamp", '{"orders":{"0":1700000000000}}'),
        ("endingOffsetsByTimestamp", '{"orders":{"0":1700000000000}}'),
    ],
)
def test_offsets_json_naming_some_partitions_is_refused(
    archive: Path, option: str, value: str
) -> None:
    with pytest.raises(InvalidOptionError) as info:
        read_table(str(archive), subscribe="orders", **{option: value})
    assert str(info.value) == (
        f"If {option} contains specific offsets, you must specify all TopicPartitions. "
        "Use -1 for latest, -2 for earliest. Specified: {orders-0} "
        "Assigned: {orders-0, orders-1} (not named: orders-1)"
    )


def test_offsets_json_without_a_selection_names_every_partition(archive: Path) -> None:
    with pytest.raises(InvalidOptionError, match=r"\(not named: legacy.events-0, metrics-v1-0\)$"):
        read_table(str(archive), startingOffsets='{"orders":{"0":10,"1":-2}}')
    with pytest.raises(InvalidOptionError, match=r"\(not in the \(selected\) archive: orders-7\)"):
        read_table(
            str(archive), subscribe="orders", startingOffsets='{"orders":{"0":-2,"1":-2,"7":1}}'
        )
    got = read_table(
        str(archive),
        subscribe="orders",
        startingOffsets='{"orders":{"0":10,"1":-2}}',
        endingOffsets='{"orders":{"0":-1,"1":20}}',
        columns=["partition", "offset"],
    )
    every = read_table(str(archive), subscribe="orders", columns=["partition", "offset"])
    expected = [
        (p, o)
        for p, o in zip(every["partition"].to_pylist(), every["offset"].to_pylist(), strict=True)
        if (p == 0 and o >= 10) or (p == 1 and o < 20)
    ]
    pairs = zip(got["partition"].to_pylist(), got["offset"].to_pylist(), strict=True)
    assert list(pairs) == expected
    assert got.num_rows == len(expected) == 188 + 20


# -- point 4: no Kafka data is an error ------------------------------------------------------

NO_DATA = "no Kafka log segments (<20-digit offset>.log files) in it"


def _no_data_inputs(archive: Path, root: Path) -> dict[str, str]:
    empty = root / "empty"
    empty.mkdir()
    parquet = root / "parquet"
    parquet.mkdir()
    (parquet / "part-00000.parquet").write_bytes(b"PAR1\x00\x00PAR1")
    parent = root / "parent"
    shutil.copytree(archive, parent / "logs")
    return {"empty": str(empty), "parquet": str(parquet), "parent": str(parent)}


@pytest.mark.parametrize("case", ["empty", "parquet", "parent"])
def test_a_path_without_kafka_data_is_an_error(archive: Path, tmp_path: Path, case: str) -> None:
    path = _no_data_inputs(archive, tmp_path)[case]
    with pytest.raises(NoKafkaDataError) as info:
        read_table(path)
    assert str(info.value).startswith(f"{path}: {NO_DATA}, in its <topic>-<partition> ")
    assert "allowEmpty=true" in str(info.value)
    with pytest.raises(NoKafkaDataError):
        list(iter_batches([str(archive), path]))  # one path of a list holding nothing
    assert read_table(path, allowEmpty=True).num_rows == 0
    assert read_table(path, allowEmpty="true", columns=["offset"]).column_names == ["offset"]


def test_a_wrong_layout_is_an_error(archive: Path) -> None:
    with pytest.raises(NoKafkaDataError, match="a tiered-storage bucket of another layout than"):
        read_table(str(archive), layout="aiven")
    assert read_table(str(archive), layout="aiven", allowEmpty=True).num_rows == 0


@pytest.mark.parametrize(
    ("options", "message", "rows"),
    [
        (
            {"subscribe": "nope"},
            "subscribe names topics that are not in the archive: nope; "
            "topics there: legacy.events, metrics-v1, orders",
            0,
        ),
        (
            {"subscribe": "orders,nope"},
            "subscribe names topics that are not in the archive: nope; "
            "topics there: legacy.events, metrics-v1, orders",
            396,
        ),
        (
            {"subscribePattern": "ord.*s-x"},
            "subscribePattern 'ord.*s-x' matches no topic in the archive; "
            "topics there: legacy.events, metrics-v1, orders",
            0,
        ),
        (
            {"assign": '{"orders":[0,5],"nope":[0]}'},
            "assign names partitions that are not in the archive: nope-0, orders-5; "
            "topics there: legacy.events, metrics-v1, orders",
            198,
        ),
    ],
)
def test_a_selection_of_what_is_not_there_is_an_error(
    archive: Path, options: dict[str, str], message: str, rows: int
) -> None:
    with pytest.raises(NoKafkaDataError) as info:
        read_table(str(archive), **options)
    assert str(info.value) == message
    allowed = read_table(str(archive), allowEmpty=True, columns=[], **options).num_rows
    assert allowed == rows  # what is there of the selection


def test_a_topic_without_records_is_a_valid_empty_result(tmp_path: Path) -> None:
    empty_topic = tmp_path / "logs" / "quiet-0"
    empty_topic.mkdir(parents=True)
    (empty_topic / "00000000000000000000.log").write_bytes(b"")
    assert read_table(str(tmp_path / "logs")).num_rows == 0
    assert read_table(str(tmp_path / "logs"), subscribe="quiet").num_rows == 0


# -- streams: Spark's Kafka source's rules ---------------------------------------------------


def _planner(archive: Path, **options: str) -> StreamPlanner:
    return StreamPlanner([str(archive)], *parse_stream_options(options))


def test_a_stream_start_names_every_partition(archive: Path) -> None:
    with pytest.raises(InvalidOptionError) as info:
        _planner(
            archive, subscribe="orders", startingOffsets='{"orders":{"0":10}}'
        ).initial_offsets()
    assert str(info.value) == (
        "If startingOffsets contains specific offsets, you must specify all TopicPartitions. "
        "Use -1 for latest, -2 for earliest, if you don't care. Specified: {orders-0} "
        "Assigned: {orders-0, orders-1} (not named: orders-1)"
    )
    with pytest.raises(InvalidOptionError, match=r"^If startingOffsetsByTimestamp contains"):
        _planner(
            archive, subscribe="orders", startingOffsetsByTimestamp='{"orders":{"1":-2}}'
        ).initial_offsets()
    planner = _planner(archive, subscribe="orders", startingOffsets='{"orders":{"0":10,"1":-2}}')
    assert planner.initial_offsets() == {("orders", 0): 10, ("orders", 1): 0}


def test_a_stream_waits_for_topics_that_do_not_exist_yet(tmp_path: Path) -> None:
    empty = tmp_path / "logs"
    empty.mkdir()
    planner = StreamPlanner([str(empty)], *parse_stream_options({"subscribe": "later"}))
    assert planner.initial_offsets() == {}
    assert planner.next_offsets({}) == {}


@pytest.mark.parametrize(
    ("magics", "runs"),
    [
        ([], []),
        ([2, 2, 2], [(0, 3, True)]),
        ([1], [(0, 1, False)]),
        ([0, 1, 1, 2, 2, 0, 2], [(0, 3, False), (3, 5, True), (5, 6, False), (6, 7, True)]),
        ([2, 0], [(0, 1, True), (1, 2, False)]),
    ],
)
def test_a_windows_entries_split_into_runs_of_v2_and_legacy(magics, runs):
    from kafka_segments_ds.reader.window import _runs

    assert _runs(np.array(magics, np.int64)) == runs
