"""``kafka-segments dump --shallow``: the batch fields kafka-dump-log prints that the reader's
columns do not hold, read from each batch's header at its ``segment`` and ``position``.

* ``size``: the entry's bytes in the ``.log`` (12 + its size field), as kafka-dump-log's ``size``;
* ``crc``: the stored checksum, unsigned (CRC-32C for magic 2, CRC-32 of the wrapper message for
  magic 0/1);
* ``count``: the batch's record count field (magic 2; null for magic 0/1, which have none);
* ``lastSequence``: ``baseSequence + lastOffsetDelta`` wrapping past 2**31 - 1 as Kafka's
  ``DefaultRecordBatch.incrementSequence`` does; -1 without a sequence (magic 2), null for
  magic 0/1.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds.cli.common import int_array
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.fs import resolve

BATCH_FIELDS = ("size", "crc", "count", "lastSequence")
TYPES = (pa.int64(), pa.int64(), pa.int32(), pa.int32())
# what is read of each entry: a magic-2 header is 61 bytes, a legacy entry's head 17
_V2_FIELDS = struct.Struct(
    ">8x"  # baseOffset
    "i"  # batchLength
    "4x"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "2x"  # attributes
    "i"  # lastOffsetDelta
    "24x"  # baseTimestamp, maxTimestamp, producerId
    "2x"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
_LEGACY_FIELDS = struct.Struct(
    ">8x"  # offset
    "i"  # size
    "I"  # crc
    "b"  # magic
)
NO_SEQUENCE = -1
SEQUENCES = 2**31  # a sequence is a non-negative int32


def with_batch_fields(
    arrow_batch: pa.RecordBatch,
    segment_files: Mapping[str, tuple[pafs.FileSystem, str]],
    options: Mapping[str, str],
) -> pa.RecordBatch:
    """``arrow_batch`` (shallow rows with ``segment`` and ``position``) with the columns of
    :data:`BATCH_FIELDS` appended. ``segment_files``: a ``segment`` value -> the file system
    (a tiered-storage view decodes chunked segments) and path to read it at; a value not there
    is resolved with ``options``."""
    columns: list[list[Any]] = [[] for _ in BATCH_FIELDS]
    files: dict[str, Any] = {}
    try:
        for segment, position in zip(
            arrow_batch.column("segment").to_pylist(),
            arrow_batch.column("position").to_pylist(),
            strict=True,
        ):
            if segment not in files:
                filesystem, path = segment_files.get(segment) or resolve(segment, options)
                files[segment] = filesystem.open_input_file(path)
            head = files[segment].read_at(_V2_FIELDS.size, position)
            for column, value in zip(columns, batch_fields(head, segment, position), strict=True):
                column.append(value)
    finally:
        for handle in files.values():
            handle.close()
    for name, kind, values in zip(BATCH_FIELDS, TYPES, columns, strict=True):
        arrow_batch = arrow_batch.append_column(name, int_array(values, kind))
    return arrow_batch


def batch_fields(
    head: bytes, segment: str, position: int
) -> tuple[int, int, int | None, int | None]:
    """(size, crc, count, lastSequence) of the entry whose first bytes are ``head``."""
    if len(head) >= _LEGACY_FIELDS.size and head[16] < 2:
        size, crc, _ = _LEGACY_FIELDS.unpack_from(head)
        return 12 + size, crc, None, None
    if len(head) < _V2_FIELDS.size or head[16] != 2:
        raise CorruptSegmentError(
            f"no batch header where the shallow read found a batch ({len(head)} bytes, magic "
            f"{head[16] if len(head) > 16 else 'missing'}): changed while dumped?",
            path=segment,
            position=position,
        )
    length, _, crc, last_delta, base_sequence, count = _V2_FIELDS.unpack_from(head)
    last = NO_SEQUENCE if base_sequence == NO_SEQUENCE else (base_sequence + last_delta) % SEQUENCES
    return 12 + length, crc, count, last
