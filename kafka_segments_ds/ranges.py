"""Offset ranges that cannot be read: a start after the end, or past the end of the log.

Spark's Kafka source fails such a batch read ("Beginning offset ... is after the ending
offset ..."); an archive reader answering with zero rows would hide a wrong option.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.layout import PartitionLog, SegmentRef
from kafka_segments_ds.options import ReadOptions, begin_after_end_message
from kafka_segments_ds.reporting import quiet_damage
from kafka_segments_ds.scan_task import ScanTask
from kafka_segments_ds.tail import (
    Recorder,
    segment_tail,
    skip_dropped,
    tail_start,
)

RecordReader = Callable[
    [ScanTask, ReadOptions, tuple[str, ...], "pafs.FileSystem | None"], Iterator[pa.RecordBatch]
]
"""``read_records(task, options, columns, filesystem)``: the reader executing a ScanTask
(:func:`kafka_segments_ds.reader.read_task`, passed in from the layers above)."""


def check_offset_range(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    start: int,
    end: int,
    options: ReadOptions | None = None,
    read_records: RecordReader | None = None,
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
    log_end = log_end_offset(filesystem, last, options, read_records)
    if log_end is not None and start > log_end:
        raise InvalidOptionError(
            begin_after_end_message(start, log_end, part.topic, part.partition)
            + f" The log end offset of {part.directory} is {log_end}: startingOffsets "
            "points past the end of the log."
        )


def log_end_offset(
    filesystem: pafs.FileSystem,
    seg: SegmentRef,
    options: ReadOptions | None = None,
    read_records: RecordReader | None = None,
) -> int | None:
    """The offset after the last entry of ``seg`` the reader returns with ``options`` (its base
    offset when empty), by the reader's own rules (:mod:`~kafka_segments_ds.tail`): a
    checksum-valid entry whose offsets do not follow those of the last entry returned is
    dropped whole, and so is a batch whose records do not decode (deep iteration). Where the
    walk passed over such an entry, with deep iteration, what the reader (``read_records``)
    returns with DROPMALFORMED when that is more (:func:`reader_next_offset`: its order floor
    follows the records it returned, 20261128:40813; a FAILFAST read from there raises the
    damage error where it reaches the damage). ``None`` when that cannot be told: other damage,
    which only the reader's resynchronisation sees past (FAILFAST names it when it reaches it),
    or entries that do not end exactly at the end of the file (a torn or zero-filled tail)."""
    options = options or ReadOptions()
    damage = Recorder(skip_dropped)
    tail = segment_tail(
        filesystem,
        seg,
        on_damage=damage,
        max_decompressed_bytes=decode_limit(options),
        verify_checksums=options.verify_checksums,
    )
    if tail.end_position != seg.size:
        return None
    if (damage.resumed or tail.guessed) and options.deep and read_records is not None:
        with kfs.RangeReader(filesystem, seg.path) as read:
            start = tail_start(filesystem, seg, read)  # where the walk started
        confirmed = reader_next_offset(
            filesystem, seg, start, seg.base_offset, seg.size, options, read_records
        )
        return max(tail.next_offset, confirmed)
    return tail.next_offset


def reader_next_offset(
    filesystem: pafs.FileSystem,
    seg: SegmentRef,
    start: int,
    next_offset: int,
    end: int,
    options: ReadOptions,
    read_records: RecordReader,
) -> int:
    """1 + the last offset the batch reader (DROPMALFORMED, ``options``) returns from the
    entries of ``seg`` that start in [``start``, ``end``), after entries whose last offset is
    ``next_offset - 1`` (control records included); ``next_offset`` when it returns none.

    A tail walk that went on past damage (:class:`~kafka_segments_ds.tail.Recorder`) asks this
    of the reader itself: past damage the reader resynchronises, and its order floor follows
    the records it returned, not an entry's header (a batch whose lastOffsetDelta lies, a
    wrapper dropped for its inner offsets), which the walk's rules do not see in every damaged
    shape (20261129:11784, 20261128:40813). The walk's answer counts an entry's last offset from
    its header, this one the last record's: the caller takes the larger. The range is read a
    second time (from the walk's start: the last ``.index`` entry, or where a stream's last walk
    ended), without decoding values (``decode``) or reporting its damage again
    (:func:`~kafka_segments_ds.reporting.quiet_damage`)."""
    task = ScanTask(
        seg,
        None,
        None,
        start_position=start,
        end_position=end,
        after_offset=next_offset - 1 if start > 0 else None,
        filesystem=filesystem,
        include_control=True,
    )
    best = next_offset - 1
    plain = replace(options, mode="DROPMALFORMED", decode=())
    with quiet_damage():
        for batch in read_records(task, plain, ("offset",), filesystem):
            if batch.num_rows:
                best = max(best, int(pc.max(batch.column(0)).as_py()))
    return best + 1


def decode_limit(options: ReadOptions) -> int | None:
    """The ``max_decompressed_bytes`` of a tail walk that decodes as the reader does with
    ``options`` (:mod:`~kafka_segments_ds.tail`), or None for one that does not: with shallow
    iteration the reader decodes no records. With verifyChecksums=false the reader decodes the
    entries whose checksum fails too: a walk counting them (``verify_checksums=False``) decodes
    them, and one stopping at them never passes over them."""
    if not options.deep:
        return None
    return options.max_decompressed_bytes
