"""``ScanTask``: the unit of reading that planning produces and the reader executes."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.fs as pafs

from kafka_segments_ds.layout import SegmentRef


@dataclass(frozen=True, slots=True)
class ScanTask:
    """One unit of reading: entries of one segment that START in [start_position, end_position).

    ``start_offset``/``end_offset`` (inclusive/exclusive) filter rows; ``min_max_timestamp`` lets
    the reader skip magic-2 batches whose maxTimestamp is below it (pruning only, rows are not
    filtered by time). ``aborted`` holds (producerId, firstOffset, lastOffset) of aborted
    transactions for read_committed.
    """

    segment: SegmentRef
    topic: str | None
    partition: int | None
    start_position: int = 0
    end_position: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    min_max_timestamp: int | None = None
    aborted: tuple[tuple[int, int, int], ...] = ()
    next_base_offset: int | None = None  # offsets of this segment must stay below it
    # where the segment lives (pickles, so executors reopen it); None = resolve the path
    filesystem: pafs.FileSystem | None = None
    include_control: bool = False  # return control records as rows (internal lookups)
    # a byte-range piece after the first: the last offset the entries before start_position
    # reach by the reader's order rule (an entry must go above it, as in a whole-segment read)
    after_offset: int | None = None

    @property
    def end(self) -> int:
        """The byte position the task's range ends at (the segment's size when open-ended)."""
        return self.segment.size if self.end_position is None else self.end_position
