"""The decode loop reads a binary column's values from one bytes object: each row's bounds and
nulls must be those of the column, sliced or not, binary or large_binary."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kafka_segments_ds.schemas.column import _column_bytes

VALUES = [b"\x00\x00\x00\x00\x01ab", None, b"", b"xyz", None, b"\x00\x00\x00\x00\x02c"]


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
@pytest.mark.parametrize(("begin", "count"), [(0, 6), (1, 4), (2, 3), (5, 1), (3, 0)])
def test_rows_are_the_columns(kind: pa.DataType, begin: int, count: int) -> None:
    column = pa.array(VALUES, kind).slice(begin, count)
    data, starts, ends, nulls = _column_bytes(column)
    expected = VALUES[begin : begin + count]
    got = [
        None if nulls and nulls[i] else data[s:e]
        for i, (s, e) in enumerate(zip(starts, ends, strict=True))
    ]
    assert got == expected
    # only the bytes the rows span are copied
    assert len(data) == sum(len(v) for v in expected if v is not None)


def test_chunked_column() -> None:
    column = pa.chunked_array([pa.array(VALUES[:3]), pa.array(VALUES[3:])])
    data, starts, ends, nulls = _column_bytes(column)
    assert nulls == [v is None for v in VALUES]
    assert [data[s:e] for s, e in zip(starts, ends, strict=True)] == [v or b"" for v in VALUES]
