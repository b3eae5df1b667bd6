"""Review of the writer: regressions for bugs found by reading the code (no Spark)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from kafka_segments_ds.writer import task as task_module
from kafka_segments_ds.writer.columns import record_columns
from kafka_segments_ds.writer.options import parse_write_options
from kafka_segments_ds.writer.task import JobSpec, TaskWriter


def _job(tmp_path: Path, **options: str) -> JobSpec:
    staging = tmp_path / "staging"
    staging.mkdir()
    return JobSpec(str(tmp_path), str(staging), parse_write_options(options), now_ms=5)


def test_nanosecond_timestamps_with_a_null_keep_their_millisecond() -> None:
    # A null in the column made the cast go through float64, which has 256 ns steps near 2023.
    stamps = pa.array([1_699_999_999_999_999_999, None], pa.timestamp("ns"))
    table = pa.table({"value": pa.array([b"a", b"b"]), "timestamp": stamps})
    columns = record_columns(table, now_ms=7)
    assert columns.timestamps.tolist() == [1_699_999_999_999, 7]


def _count_encoded_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = task_module.encode_v2

    def counting(columns, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(columns.rows)
        return real(columns, *args, **kwargs)

    monkeypatch.setattr(task_module, "encode_v2", counting)
    return seen


def test_a_chunk_whose_pending_rows_fill_no_batch_is_not_reencoded_on_every_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # batchBytes above the chunk flush size: every flush kept all rows (one unfilled batch), so
    # each later add encoded the whole growing pending table again (quadratic work).
    monkeypatch.setattr(task_module, "CHUNK_FLUSH_BYTES", 10_000)
    seen = _count_encoded_rows(monkeypatch)
    job = _job(tmp_path, topic="t", batchBytes="1000000")
    writer = TaskWriter(job, 0, pafs.LocalFileSystem())
    for i in range(200):
        writer.write(pa.table({"value": [b"%04d" % i + b"x" * 1000]}))
    result = writer.finish()
    assert result.chunks[0].records == 200
    assert sum(seen) <= 3 * 200, sum(seen)


def test_task_flush_with_many_partitions_encodes_each_row_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many partitions each holding an unfilled batch kept the task over its pending limit, so
    # every later write re-encoded every partition's carried rows.
    monkeypatch.setattr(task_module, "TASK_PENDING_BYTES", 50_000)
    seen = _count_encoded_rows(monkeypatch)
    job = _job(tmp_path, topic="t", numPartitions="20")
    writer = TaskWriter(job, 0, pafs.LocalFileSystem())
    for _ in range(100):
        writer.write(
            pa.table({"value": [b"y" * 1000] * 20, "partition": pa.array(range(20), pa.int32())})
        )
    result = writer.finish()
    assert sum(c.records for c in result.chunks) == 2000
    assert sum(seen) == 2000


def test_chunks_share_the_encoder_buffers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each chunk kept its own scratch and output buffers (each >= one flush) for the life of the
    # task: with many partitions that is partitions x 2 x CHUNK_FLUSH_BYTES of idle memory.
    monkeypatch.setattr(task_module, "CHUNK_FLUSH_BYTES", 20_000)
    job = _job(tmp_path, topic="t", numPartitions="30", compression="gzip", batchBytes="2000")
    writer = TaskWriter(job, 0, pafs.LocalFileSystem())
    rng = np.random.default_rng(1)
    for _ in range(3):
        values = [rng.bytes(500) for _ in range(30 * 50)]
        parts = pa.array(np.repeat(np.arange(30), 50), pa.int32())
        writer.write(pa.table({"value": values, "partition": parts}))
    held = {
        id(array): array.nbytes
        for chunk in writer.chunks.values()
        for holder in chunk.buffers
        for array in holder
    }
    writer.finish()
    assert sum(held.values()) <= 4 * max(held.values())
