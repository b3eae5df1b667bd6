"""Batches of useful size: runs of small Arrow batches joined, in order, into ``batchRows`` rows.

The reader makes one batch per read window, so a segment smaller than a window (a topic of
thousands of tiny segments) makes one batch each, of a few rows; an engine pays per batch
(Spark: a few hundred microseconds, pandas and Parquet writers a row group). read_table,
iter_batches and the Spark reader pass their batches through :func:`join_small_batches`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from kafka_segments_ds.options import ReadOptions

# Arrow's binary and string offsets are 32-bit: a join never holds more than this
MAX_JOIN_BYTES = 1 << 30


def join_small_batches(
    batches: Iterable[pa.RecordBatch], options: ReadOptions
) -> Iterator[pa.RecordBatch]:
    """The reader's batches for an engine: :func:`coalesce` with the read options' sizes.

    A batch of half a read window (``readChunkBytes``) or more is one the reader made from a
    whole window: passed on. Runs are joined at ``batchRows`` rows or four windows of bytes,
    so memory stays within a few read windows, as the reader's own."""
    window = options.read_chunk_bytes
    return coalesce(batches, options.batch_rows, window // 2, 4 * window)


def coalesce(
    batches: Iterable[pa.RecordBatch],
    rows: int,
    big_bytes: int = MAX_JOIN_BYTES,
    max_bytes: int = MAX_JOIN_BYTES,
) -> Iterator[pa.RecordBatch]:
    """``batches`` in the same order, with runs of small ones joined into batches of ``rows``.

    A batch that is big enough already (``rows`` rows or ``big_bytes`` bytes) is passed on as
    it is, never copied. Smaller ones are held and joined into batches of exactly ``rows`` rows
    (the batch that fills one is cut, a zero-copy slice, its rest starting the next); a run is
    joined early before a batch passed on, at the end, and once it holds ``max_bytes``, so
    memory held stays within ``max_bytes`` and one batch. Batches without rows are left out,
    unless no batch has rows (one is passed on: it carries the schema).
    """
    limit = min(max_bytes, MAX_JOIN_BYTES)
    held: list[pa.RecordBatch] = []
    held_rows = held_bytes = 0
    empty: pa.RecordBatch | None = None
    any_rows = False
    for batch in batches:
        if batch.num_rows == 0:
            empty = batch if empty is None else empty
            continue
        any_rows = True
        if batch.num_rows >= rows or batch.nbytes >= min(big_bytes, limit):
            if held:
                yield _joined(held)
                held, held_rows, held_bytes = [], 0, 0
            yield batch
            continue
        if held_rows + batch.num_rows >= rows:
            room = rows - held_rows
            held.append(batch.slice(0, room))
            yield _joined(held)
            batch = batch.slice(room)
            held, held_rows, held_bytes = [], 0, 0
        if batch.num_rows:
            held.append(batch)
            held_rows += batch.num_rows
            held_bytes += batch.nbytes
        if held_bytes >= limit:
            yield _joined(held)
            held, held_rows, held_bytes = [], 0, 0
    if held:
        yield _joined(held)
    elif empty is not None and not any_rows:
        yield empty


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    if hasattr(pa, "concat_batches"):  # pyarrow >= 19
        return pa.concat_batches(batches)
    table = pa.Table.from_batches(batches).combine_chunks()  # one chunk: under MAX_JOIN_BYTES
    return table.to_batches(max_chunksize=table.num_rows)[0]
