"""Through Spark: an encrypted, zstd-chunked Aiven bucket holding two overlapping copies of a
partition, split by chunks across tasks (the read-only tiered view pickled to the workers,
which read the manifests again), equals a plain read of the log dirs it was made from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

import kafka_segments_ds as ksd
from tests.support.tiered import (
    partitions_of,
    rsa_key_pair,
    write_oracle_log_dir,
    write_oracle_partition,
)
from tests.support.upload import Encryption, upload_aiven

COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value"]


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    source = write_oracle_log_dir(tmp_path_factory.mktemp("spark-tiered-src"))
    other = write_oracle_partition(
        tmp_path_factory.mktemp("spark-tiered-other") / "events-0", segment_bytes=8500
    )
    public, private = rsa_key_pair(tmp_path_factory.mktemp("spark-keys"))
    root = tmp_path_factory.mktemp("spark-bucket")
    local = pafs.LocalFileSystem()
    encryption = Encryption("kp-1", public)
    for i, (directory, topic, partition) in enumerate(partitions_of(source)):
        topic_id = ("A" if topic == "events" else "B") * 22
        upload_aiven(
            directory, local, f"{root}/", topic, partition, topic_id=topic_id, seed=i,
            compression=True, chunk_size=1200, encryption=encryption,
        )  # fmt: skip
    # a second copy of events-0 with other segment boundaries (same topic id): overlaps
    upload_aiven(
        other, local, f"{root}/", "events", 0, topic_id="A" * 22, seed=9,
        compression=True, chunk_size=1200, encryption=encryption,
    )  # fmt: skip
    return root, source, {"privateKeys": json.dumps({"kp-1": str(private)})}


def test_spark_reads_an_aiven_bucket_row_for_row(spark: Any, bucket: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    root, source, options = bucket
    df = (
        spark.read.format("kafkasegments")
        .options(**options, maxBytesPerPartition="2000", minPartitions="4")
        .load(str(root))
        .select(*COLUMNS)
    )
    assert df.rdd.getNumPartitions() >= 4
    expected = ksd.read_table(str(source), columns=COLUMNS)
    assert df.count() == expected.num_rows
    # the schema given: pyspark 4.1 infers int64 for the int32 partition column of pandas
    wanted = spark.createDataFrame(expected.to_pandas(), schema=df.schema)
    assertDataFrameEqual(df, wanted, checkRowOrder=False)
    assert df.select("topic", "partition", "offset").distinct().count() == expected.num_rows
