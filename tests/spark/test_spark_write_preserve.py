"""df.write.format("kafkasegments").option("preserveOffsets", "true"): a Spark read of an
archive written back as it is, and the order check across Spark partitions."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kafka_segments_ds import read_table, write_table

ORDER = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]


def _full(path: Path) -> pa.Table:
    return read_table(str(path), includeHeaders=True, includeMetadata=True).sort_by(ORDER)


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_spark_read_written_back_reads_identical(spark, sample_dir: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    frame = (
        spark.read.format("kafkasegments")
        .option("includeHeaders", "true")
        .option("includeMetadata", "true")
        .option("maxBytesPerPartition", "16384")  # a partition's rows over several tasks
        .load(str(sample_dir))
    )
    assert frame.rdd.getNumPartitions() > 4
    target = tmp_path / "copy"
    frame.write.format("kafkasegments").mode("append").option("preserveOffsets", "true").save(
        str(target)
    )
    source, copy = _full(sample_dir), _full(target)
    assert copy.num_rows == source.num_rows
    v2 = pc.equal(source.column("magic"), 2)
    for name in source.column_names:
        if name in ("segment", "position"):
            continue
        if name in ("magic", "timestampType"):  # legacy rows come back as magic 2
            assert copy.filter(v2).column(name).equals(source.filter(v2).column(name)), name
            continue
        assert copy.column(name).to_pylist() == source.column(name).to_pylist(), name


def test_offsets_going_back_across_spark_partitions_change_nothing(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    write_table(
        pa.table({"value": [b"a"], "offset": pa.array([3], pa.int64())}),
        tmp_path,
        topic="t",
        preserveOffsets=True,
    )
    before = _snapshot(tmp_path)
    # Spark partition 0 holds ids 0, 1 (offsets 10, 11), partition 1 ids 2, 3 (offsets 5, 6)
    frame = spark.range(0, 4, 1, 2).selectExpr(
        "CAST(CAST(id AS STRING) AS BINARY) AS value",
        "CASE WHEN id < 2 THEN id + 10 ELSE id + 3 END AS offset",
    )
    writer = frame.write.format("kafkasegments").option("topic", "t").mode("append")
    with pytest.raises(
        Exception,
        match=r"rows start at offset 5 \(the base offset of their first batch\), below offset 11",
    ):
        writer.option("preserveOffsets", "true").save(str(tmp_path))
    assert _snapshot(tmp_path) == before
    writer = frame.write.format("kafkasegments").option("topic", "t").mode("append")
    with pytest.raises(Exception, match=r"set preserveOffsets=true"):
        writer.save(str(tmp_path))
    assert _snapshot(tmp_path) == before
