"""Offset ranges that cannot be read: a start after the end, or past the end of the log.

Spark's Kafka source fails such a batch read ("Beginning offset ... is after the ending
offset ..."); an archive reader answering with zero rows would hide a wrong option.
"""

from __future__ import annotations

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.layout import PartitionLog, SegmentRef
from kafka_segments_ds.options import begin_after_end_message
from kafka_segments_ds.records.batches import as_array, decode_entry_head, has_valid_checksum

ENTRY_PREFIX_BYTES = 12  # offset (int64) + size (int32), the same for every magic
V2_LAST_OFFSET_DELTA_AT = 23  # offset 8, length 4, leader epoch 4, magic 1, crc 4, attributes 2
MIN_ENTRY_SIZE = 14  # the smallest legacy message after its size field


def check_offset_range(
    filesystem: pafs.FileSystem, part: PartitionLog, start: int, end: int
) -> None:
    """Raise :class:`InvalidOptionError` when ``start`` (an offset, or negative for earliest)
    lies after ``end`` (an exclusive offset, or negative for latest) or after the log end
    offset. A start equal to the end is an empty range, as in Kafka."""
    if start < 0 or not part.segments:
        return
    if 0 <= end < start:
        raise InvalidOptionError(
            begin_after_end_message(start, end, part.topic, part.partition)
            + f" The range of {part.directory} begins after it ends."
        )
    last = part.segments[-1]
    if start <= last.base_offset:
        return  # the last segment's name is an offset the log has reached
    log_end = log_end_offset(filesystem, last)
    if log_end is not None and start > log_end:
        raise InvalidOptionError(
            begin_after_end_message(start, log_end, part.topic, part.partition)
            + f" The log end offset of {part.directory} is {log_end}: startingOffsets "
            "points past the end of the log."
        )


def log_end_offset(filesystem: pafs.FileSystem, seg: SegmentRef) -> int | None:
    """The offset after the last entry of ``seg`` (its base offset when empty); ``None`` when
    that cannot be told: the entries do not end exactly at the end of the file (a torn or
    damaged tail), or the last one is not valid.

    The hop starts at the last ``.index`` position if a whole, checksum-valid entry starts
    there (the index is not checksummed: a damaged one only costs the hop from byte 0)."""
    if seg.size == 0:
        return seg.base_offset
    starts = [0]
    if seg.index_path is not None and seg.index_size:
        index = kidx.parse_offset_index(
            memoryview(kfs.read_file(filesystem, seg.index_path)), seg.base_offset, seg.size
        )
        if index.positions.shape[0] and int(index.positions[-1]) > 0:
            starts.insert(0, int(index.positions[-1]))
    with filesystem.open_input_file(seg.path) as f:
        for position in starts:
            last = _last_entry(f, position, seg.size)
            if last is not None and last >= seg.base_offset:
                return last + 1
    return None


def _last_entry(f: pafs.NativeFile, position: int, size: int) -> int | None:
    """Last offset of the last entry, hopping entry prefixes from ``position``; None unless
    the hop ends exactly at ``size`` and the first and last entries are valid (the first
    proves ``position`` is an entry boundary, the last that its offset field is true)."""
    first = position
    last_start, last_length = -1, 0
    while position < size:
        head = f.read_at(ENTRY_PREFIX_BYTES, position)
        length = int.from_bytes(head[8:12], "big", signed=True) if len(head) == 12 else -1
        if length < MIN_ENTRY_SIZE or position + ENTRY_PREFIX_BYTES + length > size:
            return None
        if (
            position == first
            and first > 0
            and _valid(f, first, ENTRY_PREFIX_BYTES + length) is None
        ):
            return None
        last_start, last_length = position, ENTRY_PREFIX_BYTES + length
        position += last_length
    entry = _valid(f, last_start, last_length) if last_start >= 0 else None
    if entry is None:
        return None
    offset = int.from_bytes(entry[0:8].tobytes(), "big", signed=True)
    if entry[16] < 2:
        return offset  # a legacy entry's offset field is its last (inner) offset
    at = V2_LAST_OFFSET_DELTA_AT
    return offset + int.from_bytes(entry[at : at + 4].tobytes(), "big", signed=True)


def _valid(f: pafs.NativeFile, position: int, length: int) -> np.ndarray | None:
    """The entry of ``length`` bytes at ``position`` if its framing is plausible and its
    checksum matches."""
    entry = as_array(f.read_at(length, position))
    if entry.shape[0] != length or decode_entry_head(entry[:17], position) is None:
        return None
    return entry if has_valid_checksum(entry) else None
