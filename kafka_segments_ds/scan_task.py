"""``ScanTask``: the unit of reading that planning produces and the reader executes."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs

from kafka_segments_ds.layout import SegmentRef

HOST = socket.gethostname()  # file identities are compared only on the host that took them


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
    # a byte-range piece before the last: the offset its entries stay below (the next piece's
    # after_offset + 1), for reading its offsets from a file that replaced the segment
    span_end: int | None = None
    # (st_dev, st_ino, its directory's st_ino) of a local segment file when planned: a file of
    # the same name that is not it replaced it since (the log cleaner), and the task's offsets
    # are read from that; another directory replaced the partition's (an overwrite)
    file_id: tuple[int, int, int] | None = None
    # the segment before it in the listing, (path, st_dev, st_ino) when planned: found gone or
    # replaced along with this one, the log cleaner merged them (a group into its first one)
    previous: tuple[str, int, int] | None = None
    next_path: str | None = None  # the segment after it in the listing
    planned_on: str | None = None  # the host (HOST) that took file_id and previous

    @property
    def end(self) -> int:
        """The byte position the task's range ends at (the segment's size when open-ended)."""
        return self.segment.size if self.end_position is None else self.end_position


def segment_bounds(segs: Sequence[SegmentRef], i: int) -> tuple[int | None, int | None, int | None]:
    """``(read_from, read_until, next_base)`` of segment ``i``: the offsets it is read for
    (None: unbounded) and the offset its entries must stay below (the next segment's first).
    Only tiered segments that overlap others have read bounds (``tiered.resolve_overlaps``);
    a segment cut at ``read_until`` holds later offsets legitimately, so it has no next base."""
    seg = segs[i]
    if seg.read_until is not None:
        return seg.read_from, seg.read_until, None
    if i + 1 == len(segs):
        return seg.read_from, None, None
    following = segs[i + 1]
    next_first = following.base_offset if following.read_from is None else following.read_from
    return seg.read_from, None, next_first
