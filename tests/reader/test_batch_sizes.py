"""Batches of useful size: read_table and iter_batches join the small batches of small segments,
in order, into batches of ``batchRows`` rows (the Spark reader too); big batches pass as they
are, and iter_batches holds at most one batch's worth of small ones (no Spark needed)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.options import DEFAULT_BATCH_ROWS, parse_read_options
from kafka_segments_ds.reader import coalesce, join_small_batches

# rows of each segment of t-0, then of t-1: one append (one new segment) each
T0_SEGMENTS = [(i * 7) % 15 + 1 for i in range(40)]  # 1 to 15 rows
T1_SEGMENTS = [3, 120, 5, 9, 60, 2]  # two of them with batchRows (50) rows or more


def batch(first: int, count: int, width: int = 1) -> pa.RecordBatch:
    """``count`` rows: offsets from ``first``, values of ``width`` bytes."""
    return pa.record_batch(
        [
            pa.array(range(first, first + count), pa.int64()),
            pa.array([b"x" * width] * count, pa.binary()),
        ],
        names=["offset", "value"],
    )


def batches(sizes: list[int], width: int = 1) -> list[pa.RecordBatch]:
    starts = itertools.accumulate([0, *sizes])
    return [batch(first, n, width) for first, n in zip(starts, sizes, strict=False)]


def offsets(out: list[pa.RecordBatch]) -> list[int]:
    return [o for b in out for o in b.column("offset").to_pylist()]


@pytest.fixture(scope="module")
def small_segments(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("small-segments")
    for topic, sizes in (("t", T0_SEGMENTS), ("u", T1_SEGMENTS)):
        first = 0
        for n in sizes:
            values = pa.array([b"%s%d" % (topic.encode(), o) for o in range(first, first + n)])
            ksd.write_table(pa.table({"value": values}), root, topic=topic)
            first += n
    assert len(list((root / "t-0").glob("*.log"))) == 40
    return root


# -- coalesce ----------------------------------------------------------------------------------


def test_runs_of_small_batches_become_batches_of_exactly_rows() -> None:
    out = list(coalesce(iter(batches([10, 30, 25, 5, 40, 1])), 50))
    assert [b.num_rows for b in out] == [50, 50, 11]
    assert offsets(out) == list(range(111))


def test_a_big_batch_passes_as_it_is_and_cuts_the_run_before_it() -> None:
    given = batches([10, 20, 50, 70, 5, 45, 3])
    out = list(coalesce(iter(given), 50))
    assert [b.num_rows for b in out] == [30, 50, 70, 50, 3]
    assert out[1] is given[2] and out[2] is given[3]  # not copied
    assert offsets(out) == list(range(203))


def test_a_batch_of_big_bytes_passes_as_it_is() -> None:
    given = batches([4, 3, 2, 6], width=100)  # 4 rows of 100-byte values: about 450 bytes
    out = list(coalesce(iter(given), 1000, big_bytes=given[0].nbytes))
    assert [b.num_rows for b in out] == [4, 5, 6]
    assert out[0] is given[0] and out[2] is given[3]
    assert offsets(out) == list(range(15))


def test_a_run_is_joined_once_it_holds_max_bytes() -> None:
    given = batches([2] * 10, width=1000)
    per_batch = given[0].nbytes
    out = list(coalesce(iter(given), 1000, max_bytes=3 * per_batch))
    assert [b.num_rows for b in out] == [6, 6, 6, 2]
    assert offsets(out) == list(range(20))


def test_batches_without_rows_are_left_out() -> None:
    given = batches([0, 3, 0, 0, 4, 0])
    out = list(coalesce(iter(given), 50))
    assert [b.num_rows for b in out] == [7]
    only_empty = batches([0, 0])
    assert list(coalesce(iter(only_empty), 50)) == [only_empty[0]]  # the schema stays
    assert list(coalesce(iter([]), 50)) == []


def test_small_batches_are_held_no_longer_than_one_batch_needs() -> None:
    """Each output batch is yielded as soon as the input that fills it is read."""
    pulled: list[int] = []

    def source() -> Iterator[pa.RecordBatch]:
        for i, b in enumerate(batches([10] * 12)):
            pulled.append(i)
            yield b

    joined = coalesce(source(), 25)
    assert next(joined).num_rows == 25
    assert pulled == [0, 1, 2]  # 10 + 10 + 5 of the third; its other 5 start the next
    assert next(joined).num_rows == 25
    assert pulled == [0, 1, 2, 3, 4]
    assert [b.num_rows for b in joined] == [25, 25, 20]


# -- read_table, iter_batches ------------------------------------------------------------------


def test_read_table_joins_small_segments_into_one_batch_by_default(small_segments: Path) -> None:
    table = ksd.read_table(small_segments, subscribe="t")
    assert sum(T0_SEGMENTS) < DEFAULT_BATCH_ROWS
    assert [b.num_rows for b in table.to_batches()] == [sum(T0_SEGMENTS)]  # was one per segment
    assert table.column("offset").to_pylist() == list(range(sum(T0_SEGMENTS)))
    assert table.column("value").to_pylist() == [b"t%d" % o for o in range(sum(T0_SEGMENTS))]


def test_iter_batches_gives_batches_of_batch_rows_in_order(small_segments: Path) -> None:
    got = list(ksd.iter_batches(small_segments, batchRows=50))
    # t-0: 40 small segments, 325 rows joined in 50s; u-0: 3 | 120 | 5 + 9 | 60 | 2
    assert sum(T0_SEGMENTS) == 325
    assert [b.num_rows for b in got] == [50] * 6 + [25 + 3, 120, 14, 60, 2]
    keys = [
        (topic, offset)
        for b in got
        for topic, offset in zip(
            b.column("topic").to_pylist(), b.column("offset").to_pylist(), strict=True
        )
    ]
    assert keys == [("t", o) for o in range(325)] + [("u", o) for o in range(199)]
    values = [v for b in got for v in b.column("value").to_pylist()]
    assert values == [b"t%d" % o for o in range(325)] + [b"u%d" % o for o in range(199)]


def test_iter_batches_with_no_columns_counts_in_joined_batches(small_segments: Path) -> None:
    got = list(ksd.iter_batches(small_segments, columns=[], batchRows=100))
    assert [b.num_columns for b in got] == [0] * 6
    assert [b.num_rows for b in got] == [100, 100, 100, 25 + 3, 120, 76]
    assert ksd.read_table(small_segments, columns=[]).num_rows == 325 + 199


def test_batch_rows_is_validated() -> None:
    assert parse_read_options().batch_rows == 32_768
    assert parse_read_options(BATCHROWS="7").batch_rows == 7
    with pytest.raises(InvalidOptionError, match="batchRows"):
        parse_read_options(batchRows=0)


def test_the_spark_reader_joins_with_batch_rows(small_segments: Path) -> None:
    pytest.importorskip("pyspark")
    from kafka_segments_ds.datasource import KafkaSegmentsReader

    options = parse_read_options(batchRows=64, subscribe="t", minPartitions=1, openCostInBytes=0)
    reader = KafkaSegmentsReader([str(small_segments)], options, ("offset",))
    (partition,) = reader.partitions()
    got = list(reader.read(partition))
    assert [b.num_rows for b in got] == [64] * 5 + [5]
    assert offsets(got) == list(range(325))


def test_join_small_batches_passes_a_half_window_batch(small_segments: Path) -> None:
    options = parse_read_options(readChunkBytes=8192, batchRows=1000)
    given = batches([3, 40, 2], width=100)  # the 40-row batch is over 4096 bytes
    assert given[0].nbytes < 4096 <= given[1].nbytes
    out = list(join_small_batches(iter(given), options))
    assert [b.num_rows for b in out] == [3, 40, 2]
    assert out[1] is given[1]
