"""write_table in ``overwrite`` mode with no rows for an existing topic (no Spark).

An input that is empty by mistake must not erase a topic without a word: such an overwrite is
refused with OutputExistsError naming the topic and the option, and changes nothing;
``allowEmptyOverwrite=true`` empties the topic on purpose.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kafka_segments_ds import InvalidOptionError, OutputExistsError, read_table, write_table
from kafka_segments_ds.writer.options import parse_write_options

SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary())])
EMPTY_SEGMENT = {
    "00000000000000000000.log": 0,
    "00000000000000000000.index": 0,
    "00000000000000000000.timeindex": 0,
}


def records(count: int, topic: str | None = None) -> pa.Table:
    table = pa.table(
        {
            "key": pa.array([b"k%d" % i for i in range(count)], pa.binary()),
            "value": pa.array([b"v%d" % i for i in range(count)], pa.binary()),
        }
    )
    if topic is not None:
        table = table.append_column("topic", pa.array([topic] * count, pa.string()))
    return table


def listing(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir())}


EMPTY_INPUTS: dict[str, Callable[[], Any]] = {
    "table": lambda: SCHEMA.empty_table(),
    "record batch": lambda: pa.RecordBatch.from_pylist([], schema=SCHEMA),
    "reader": lambda: pa.RecordBatchReader.from_batches(SCHEMA, []),
    "no batches": lambda: [],
    "empty batches": lambda: SCHEMA.empty_table().to_batches() * 3,
}


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """``orders`` (3 partitions, 120 records) and ``other`` (1 partition, 5 records)."""
    write_table(records(120), tmp_path, topic="orders", numPartitions=3)
    write_table(records(5), tmp_path, topic="other")
    return tmp_path


@pytest.mark.parametrize("make", EMPTY_INPUTS.values(), ids=EMPTY_INPUTS.keys())
def test_an_empty_overwrite_of_a_topic_is_refused_and_changes_nothing(
    archive: Path, make: Callable[[], Any]
) -> None:
    before = listing(archive)
    with pytest.raises(OutputExistsError) as caught:
        write_table(make(), archive, topic="orders", mode="overwrite")
    assert str(caught.value) == (
        f"overwrite has no rows for topic 'orders', which exists in {archive}: it would empty "
        "the topic; nothing was changed. Set allowEmptyOverwrite=true to empty it"
    )
    assert listing(archive) == before  # no staging directory left either
    assert read_table(archive, subscribe="orders").num_rows == 120


def test_rows_for_other_topics_do_not_make_the_named_topic_an_overwrite(archive: Path) -> None:
    """Every row names a topic in its column: the topic option ``orders`` gets none."""
    before = listing(archive)
    with pytest.raises(OutputExistsError, match="no rows for topic 'orders'"):
        write_table(records(4, topic="new"), archive, topic="orders", mode="overwrite")
    assert listing(archive) == before


@pytest.mark.parametrize("value", [True, "true", "TRUE"])
def test_allow_empty_overwrite_empties_the_topic(archive: Path, value: Any) -> None:
    other = {k: v for k, v in listing(archive).items() if k.startswith("other-")}
    empty = SCHEMA.empty_table()
    write_table(empty, archive, topic="orders", mode="overwrite", allowEmptyOverwrite=value)
    # each partition of the topic is there with one empty segment, as Kafka creates a topic
    names = sorted(p.name for p in archive.iterdir())
    assert names == ["orders-0", "orders-1", "orders-2", "other-0"]
    for partition in range(3):
        assert sizes(archive / f"orders-{partition}") == EMPTY_SEGMENT
    assert {k: v for k, v in listing(archive).items() if k.startswith("other-")} == other


def test_an_empty_overwrite_of_a_new_topic_creates_it(archive: Path) -> None:
    write_table(SCHEMA.empty_table(), archive, topic="fresh", mode="overwrite", numPartitions=2)
    assert sizes(archive / "fresh-0") == EMPTY_SEGMENT
    assert sizes(archive / "fresh-1") == EMPTY_SEGMENT
    assert read_table(archive, subscribe="orders").num_rows == 120


def test_an_overwrite_with_rows_still_replaces_the_topic(archive: Path) -> None:
    write_table(records(2), archive, topic="orders", mode="overwrite", numPartitions=1)
    got = read_table(archive, subscribe="orders")
    assert got.select(["partition", "offset", "value"]).to_pylist() == [
        {"partition": 0, "offset": 0, "value": b"v0"},
        {"partition": 0, "offset": 1, "value": b"v1"},
    ]
    assert sorted(p.name for p in archive.iterdir()) == ["orders-0", "other-0"]


def test_an_empty_append_changes_nothing(archive: Path) -> None:
    before = listing(archive)
    write_table(SCHEMA.empty_table(), archive, topic="orders")
    assert listing(archive) == before


def test_allow_empty_overwrite_is_a_boolean() -> None:
    assert parse_write_options({}).allow_empty_overwrite is False
    assert parse_write_options({"ALLOWEMPTYOVERWRITE": "true"}).allow_empty_overwrite is True
    with pytest.raises(InvalidOptionError, match="allowEmptyOverwrite must be true or false"):
        parse_write_options({"allowEmptyOverwrite": "sometimes"})
