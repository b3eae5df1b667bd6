"""Offset ranges that cannot be read: a start after the end, or past the end of the log.

Spark's Kafka source fails such a batch read ("Beginning offset ... is after the ending
offset ..."); an archive reader answering with zero rows would hide a wrong option.
"""

from __future__ import annotations

import pyarrow.fs as pafs

from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.layout import PartitionLog, SegmentRef
from kafka_segments_ds.options import ReadOptions, begin_after_end_message
from kafka_segments_ds.tail import segment_tail, skip_dropped


def check_offset_range(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    start: int,
    end: int,
    options: ReadOptions | None = None,
) -> None:
    """Raise :class:`InvalidOptionError` when ``start`` (an offset, or negative for earliest)
    lies after ``end`` (an exclusive offset, or negative for latest) or after the log end
    offset (:func:`log_end_offset` with ``options``). A start equal to the end is an empty
    range, as in Kafka."""
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
    log_end = log_end_offset(filesystem, last, options)
    if log_end is not None and start > log_end:
        raise InvalidOptionError(
            begin_after_end_message(start, log_end, part.topic, part.partition)
            + f" The log end offset of {part.directory} is {log_end}: startingOffsets "
            "points past the end of the log."
        )


def log_end_offset(
    filesystem: pafs.FileSystem, seg: SegmentRef, options: ReadOptions | None = None
) -> int | None:
    """The offset after the last entry of ``seg`` the reader returns with ``options`` (its base
    offset when empty), by the reader's own rules (:mod:`~kafka_segments_ds.tail`): a
    checksum-valid entry whose offsets do not follow those of the last entry returned is
    dropped whole, and so is a batch whose records do not decode (deep iteration). ``None``
    when that cannot be told without the reader's resynchronisation: other damage, or entries
    that do not end exactly at the end of the file (a torn or damaged tail)."""
    options = options or ReadOptions()
    tail = segment_tail(
        filesystem,
        seg,
        on_damage=skip_dropped,
        max_decompressed_bytes=decode_limit(options),
        verify_checksums=options.verify_checksums,
    )
    return tail.next_offset if tail.end_position == seg.size else None


def decode_limit(options: ReadOptions) -> int | None:
    """The ``max_decompressed_bytes`` of a tail walk that decodes as the reader does with
    ``options`` (:mod:`~kafka_segments_ds.tail`), or None for one that does not: with shallow
    iteration the reader decodes no records. With verifyChecksums=false the reader decodes the
    entries whose checksum fails too: a walk counting them (``verify_checksums=False``) decodes
    them, and one stopping at them never passes over them."""
    if not options.deep:
        return None
    return options.max_decompressed_bytes
