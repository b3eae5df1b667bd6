"""Options + discovered segments -> ScanTasks.

Planning touches directory listings and index files; it reads ``.log`` bytes only to check the
entries at index positions, to resolve timestamps to offsets (Kafka's offsets-for-times
lookup) and, for read_committed, to find the transaction markers (decoded only in segments
without a ``.txnindex``: :mod:`kafka_segments_ds.transactions`). Discovery, selection and the
offsets JSON rules are :mod:`kafka_segments_ds.selection`'s.

Planning sits below the reader: resolving a timestamp decodes records, which it does through
the ``read_records`` function its caller passes in (:func:`kafka_segments_ds.reader.read_task`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import DataLossError, InvalidOptionError
from kafka_segments_ds.layout import PartitionLog, SegmentRef
from kafka_segments_ds.options import EARLIEST, LATEST, ReadOptions
from kafka_segments_ds.ranges import RecordReader, check_offset_range
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import (
    EntryHead,
    Read,
    as_array,
    has_valid_checksum,
    probe_entry,
    walk_entries,
)
from kafka_segments_ds.records.kept import kept_last_offset
from kafka_segments_ds.scan_task import HOST, ScanTask, segment_bounds
from kafka_segments_ds.selection import (
    Bounds,
    check_selection,
    discover_paths,
    select_partitions,
)
from kafka_segments_ds.transactions import collect_aborted


@dataclass(frozen=True, slots=True)
class Pruning:
    """Bounds from pushed-down filters. They only skip data that cannot match: the rows a
    task returns are still filtered by the engine (except the offset bounds, applied exactly)."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    partition_low: int | None = None  # inclusive
    partition_high: int | None = None  # exclusive
    offset_low: int | None = None  # inclusive
    offset_high: int | None = None  # exclusive
    min_timestamp: int | None = None  # ms: skip batches whose max timestamp is below

    def select(self, partitions: Sequence[PartitionLog]) -> list[PartitionLog]:
        """The ``partitions`` whose topic and partition the bounds let through."""
        return [p for p in partitions if self._selects(p.topic, p.partition)]

    def _selects(self, topic: str | None, partition: int | None) -> bool:
        if self.topics is not None and topic not in self.topics:
            return False
        if self.partitions is not None and partition not in self.partitions:
            return False
        if self.partition_low is None and self.partition_high is None:
            return True
        low, high = self.partition_low or 0, self.partition_high
        return partition is not None and partition >= low and (high is None or partition < high)

    def narrow(self, start: int | None, end: int | None) -> tuple[int | None, int | None] | None:
        """Offsets [start, end) (None: unbounded) within the offset bounds; None if empty."""
        if self.offset_low is not None:
            start = max(start or 0, self.offset_low)
        if self.offset_high is not None:
            end = self.offset_high if end is None else min(end, self.offset_high)
        if start is not None and end is not None and end <= start:
            return None
        return start, end


@dataclass(frozen=True, slots=True)
class Plan:
    """The tasks of one read, in (topic, partition, offset) order."""

    tasks: tuple[ScanTask, ...]
    partitions: tuple[PartitionLog, ...]


def plan_scan(
    path: str | os.PathLike[str] | list[str] | tuple[str, ...],
    options: ReadOptions,
    filesystem: pafs.FileSystem | None = None,
    pruning: Pruning | None = None,
    split: bool = True,
    *,
    read_records: RecordReader | None = None,
) -> Plan:
    """Discover the segments under ``path`` and cut them into ScanTasks for ``options``.

    With ``split``, large segments are cut into byte ranges (``maxBytesPerPartition``,
    ``minPartitions``) for parallel readers; a sequential reader does not need it.
    ``read_records`` decodes records where a timestamp option has to be resolved to an offset.
    """
    paths = [os.fspath(p) for p in ([path] if isinstance(path, (str, os.PathLike)) else path)]
    filesystem, found = discover_paths(paths, options, filesystem)
    selected = select_partitions(found, options)
    check_selection(found, selected, options)
    scan = _Scan(filesystem, options, pruning or Pruning(), read_records, selected)
    partitions = scan.pruning.select(selected)
    tasks = [task for part in partitions for task in scan.tasks(part)]
    if split and tasks:
        tasks = split_tasks(filesystem, tasks, options)
    return Plan(tuple(tasks), tuple(partitions))


def resolve_start(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    starts: Bounds,
    options: ReadOptions,
    read_records: RecordReader | None,
) -> int:
    """Where a read of ``part`` starts: an offset, EARLIEST or LATEST (the caller knows what
    latest is). A timestamp gives the first offset whose record is at or after it (Kafka's
    offsetsForTimes); where none is, LATEST, or with startingOffsetsByTimestampStrategy=error
    an :class:`InvalidOptionError`."""
    at = starts.time(part)
    if at is None:
        return starts.offset(part)
    if at == EARLIEST:  # a batch read's startingOffsets, given too, still count (as before)
        return starts.offsets.get((part.topic, part.partition), EARLIEST)
    if at == LATEST:
        return LATEST
    found = offset_for_timestamp(filesystem, part, at, options, read_records)
    if found is not None:
        return found
    if options.starting_by_timestamp_strategy == "error":
        raise InvalidOptionError(
            f"no offset of {_name(part)} has a timestamp >= {at} "
            "(startingOffsetsByTimestampStrategy=error)"
        )
    return LATEST


class _Scan:
    """One batch read's planning, bound once: the filesystem, the options, the pushed-down
    pruning and where each partition's read starts and ends (the offsets JSON checked against
    the ``selected`` partitions)."""

    def __init__(
        self,
        filesystem: pafs.FileSystem,
        options: ReadOptions,
        pruning: Pruning,
        read_records: RecordReader | None,
        selected: Sequence[PartitionLog],
    ) -> None:
        self.filesystem, self.options, self.pruning = filesystem, options, pruning
        self.read_records = read_records
        self.starts = Bounds.of(
            selected,
            options.starting_offsets,
            options.starting_offsets_by_timestamp,
            options.starting_timestamp,
            EARLIEST,
        )
        self.ends = Bounds.of(
            selected,
            options.ending_offsets,
            options.ending_offsets_by_timestamp,
            options.ending_timestamp,
            LATEST,
            end=True,
        )

    def tasks(self, part: PartitionLog) -> list[ScanTask]:
        """The scan tasks of ``part``'s offsets [start, end) (unsplit)."""
        span = self.offsets(part) if part.segments else None
        if span is None:
            return []
        start, end = span
        aborted: tuple[tuple[int, int, int], ...] = ()
        if self.options.read_committed:
            aborted = collect_aborted(self.filesystem, part, self.options, start, end)
        min_timestamp = self.pruning.min_timestamp
        return segment_tasks(self.filesystem, part, start, end, aborted, min_timestamp)

    def offsets(self, part: PartitionLog) -> tuple[int | None, int | None] | None:
        """``part``'s [start, end) (None: from its first offset / to its last), or None when
        there is nothing to read."""
        start = resolve_start(self.filesystem, part, self.starts, self.options, self.read_records)
        if start == LATEST:
            return None  # no record is that new
        end = self._end(part)
        if end is None:
            return None
        first_base = part.segments[0].base_offset
        if start != EARLIEST and start < first_base:
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    f"{_name(part)}: starting offset {start} is no longer in the archive, whose "
                    f"first segment starts at offset {first_base} (set failOnDataLoss=false to "
                    "start at the earliest available offset)"
                )
            start = EARLIEST
        check_offset_range(self.filesystem, part, start, end, self.options, self.read_records)
        return self.pruning.narrow(
            None if start == EARLIEST else start, None if end == LATEST else end
        )

    def _end(self, part: PartitionLog) -> int | None:
        """Where ``part``'s read ends: an offset or LATEST; None where it ends before the
        first offset (endingOffsetsByTimestamp -2)."""
        at = self.ends.time(part)
        if at is None or at == LATEST:
            return self.ends.offset(part)
        if at == EARLIEST:
            return None
        found = offset_for_timestamp(self.filesystem, part, at, self.options, self.read_records)
        return found if found is not None else LATEST


def _name(part: PartitionLog) -> str:
    if part.topic is None:
        return part.directory
    return f"{part.topic}-{part.partition}"


def _load_offset_index(filesystem: pafs.FileSystem, seg: SegmentRef) -> kidx.OffsetIndex | None:
    if seg.index_path is None or seg.index_size == 0:
        return None
    data = kfs.read_index_file(filesystem, seg.index_path)
    return kidx.parse_offset_index(memoryview(data), seg.base_offset, seg.size)


def _load_time_index(
    filesystem: pafs.FileSystem, seg: SegmentRef, next_base: int | None
) -> kidx.TimeIndex | None:
    if seg.timeindex_path is None or seg.timeindex_size == 0:
        return None
    data = kfs.read_index_file(filesystem, seg.timeindex_path)
    return kidx.parse_time_index(memoryview(data), seg.base_offset, next_base)


def _narrow(
    low: int | None, high: int | None, read_from: int | None, read_until: int | None
) -> tuple[int | None, int | None]:
    if read_from is not None:
        low = read_from if low is None else max(low, read_from)
    if read_until is not None:
        high = read_until if high is None else min(high, read_until)
    return low, high


def segment_tasks(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    start_offset: int | None,
    end_offset: int | None,
    aborted: tuple[tuple[int, int, int], ...],
    min_timestamp: int | None = None,
) -> list[ScanTask]:
    """The scan tasks reading offsets [start_offset, end_offset) of ``part`` (None: from the
    first / to the last), one per segment, each cut at ``.index`` positions where the index
    points at an entry that proves the cut; ``aborted`` are the partition's aborted
    transactions (read_committed), ``min_timestamp`` skips what is older."""
    tasks = []
    segs = part.segments
    for i, seg in enumerate(segs):
        read_from, read_until, next_base = segment_bounds(segs, i)
        limit = next_base if read_until is None else read_until  # its offsets end before it
        if start_offset is not None and limit is not None and limit <= start_offset:
            continue
        last = seg.last_offset  # from a manifest: no need to open the segment to know
        if start_offset is not None and last is not None and last < start_offset:
            continue
        if end_offset is not None and seg.base_offset >= end_offset:
            break
        low, high = _narrow(start_offset, end_offset, read_from, read_until)
        if low is not None and high is not None and high <= low:
            continue
        newest = seg.max_timestamp  # a manifest's maxTimestampMs: every record is older
        if min_timestamp is not None and newest is not None and newest < min_timestamp:
            continue
        start_position = 0
        end_position = None
        if (low is not None and low > seg.base_offset) or (
            high is not None and (limit is None or high < limit)
        ):
            index = _load_offset_index(filesystem, seg)
            if index is not None:
                if low is not None and low > seg.base_offset:
                    start_position = _verified_start(filesystem, seg, next_base, index, low)
                if high is not None:
                    end_position = kidx.lookup_position_after(index, high)
                    entry = _entry_head(filesystem, seg, next_base, end_position)
                    # every offset at or after the end position must be >= the end: only a
                    # batch's base offset (or a plain message's offset) says so
                    if entry is None or entry.offset < high or (entry.magic < 2 and entry.codec):
                        end_position = None
        if min_timestamp is not None:
            start_position = max(
                start_position, _position_before_time(filesystem, seg, next_base, min_timestamp)
            )
        seg_aborted = tuple(
            a
            for a in aborted
            if a[2] >= seg.base_offset and (next_base is None or a[1] < next_base)
        )
        tasks.append(
            ScanTask(
                file_id=file_id(filesystem, seg.path, seg.size if i + 1 < len(segs) else None),
                previous=_previous(filesystem, segs[i - 1].path) if i else None,
                next_path=segs[i + 1].path if i + 1 < len(segs) else None,
                planned_on=HOST,
                segment=seg,
                topic=part.topic,
                partition=part.partition,
                start_position=start_position,
                end_position=end_position,
                start_offset=low,
                end_offset=high,
                min_max_timestamp=min_timestamp,
                aborted=seg_aborted,
                next_base_offset=next_base,
                filesystem=filesystem,
            )
        )
    return tasks


# Entries up to this size are checksummed before an index position is trusted.
VERIFY_ENTRY_BYTES = 64 * 1024 * 1024
HOP_WINDOW_BYTES = 4 * 1024 * 1024  # reads of the entry walk that splits a segment without index


def _entry_head(
    filesystem: pafs.FileSystem, seg: SegmentRef, next_base: int | None, position: int | None
) -> EntryHead | None:
    """The entry at ``position`` if one starts there: whole, checksum valid, offsets inside the
    segment. Index files are not checksummed, so every position taken from one is checked like
    this before a read starts or ends there."""
    if position is None:
        return None
    with _reads(filesystem, seg) as read:  # one open: the entry's head, then the whole entry
        entry = probe_entry(read, position, seg.size, check_limit=VERIFY_ENTRY_BYTES)
    if entry is None:
        return None
    if not (seg.base_offset <= entry.offset and (next_base is None or entry.offset < next_base)):
        return None
    return entry


def _reads(filesystem: pafs.FileSystem, seg: SegmentRef) -> kfs.RangeReader:
    """Ranged reads of the segment's ``.log`` through one handle (close it when done)."""
    return kfs.RangeReader(filesystem, seg.path)


def _verified_start(
    filesystem: pafs.FileSystem,
    seg: SegmentRef,
    next_base: int | None,
    index: kidx.OffsetIndex,
    target: int,
) -> int:
    """Where to start reading for offsets >= ``target``: the index's position if an entry
    starting at or below ``target`` is there (so nothing before it can reach ``target``),
    else 0. A v2 batch's offset field is its first offset, a legacy entry's its last."""
    position = kidx.lookup_offset(index, target).position
    if position == 0:
        return 0
    entry = _entry_head(filesystem, seg, next_base, position)
    return position if entry is not None and entry.offset <= target else 0


def file_id(
    filesystem: pafs.FileSystem | None, path: str, listed_size: int | None = None
) -> tuple[int, int, int] | None:
    """(st_dev, st_ino, its directory's st_ino) of a local file (None elsewhere, or when it is
    not there). A file whose size is no longer ``listed_size`` (a segment that is not the
    last, which only the log cleaner rewrites) was replaced since it was listed: its inode
    is given as -1, so that a reader reads its offsets wherever they are now."""
    if not isinstance(filesystem, pafs.LocalFileSystem):
        return None
    try:
        st = os.stat(path)
        directory = os.stat(os.path.dirname(path))
    except OSError:
        return None
    inode = st.st_ino if listed_size is None or st.st_size == listed_size else -1
    return st.st_dev, inode, directory.st_ino


def _previous(filesystem: pafs.FileSystem, path: str) -> tuple[str, int, int] | None:
    """``path`` with its (st_dev, st_ino) (local files only)."""
    found = file_id(filesystem, path)
    return None if found is None else (path, found[0], found[1])


def split_tasks(
    filesystem: pafs.FileSystem,
    tasks: Sequence[ScanTask],
    options: ReadOptions,
    min_partitions: int | None = None,
) -> list[ScanTask]:
    """Cut tasks into byte ranges of at most ``maxBytesPerPartition`` (and into at least
    ``min_partitions`` tasks, default ``minPartitions``, when the data allows), at entry starts
    taken from the ``.index`` or, without a usable index, found by walking the entries."""
    min_partitions = options.min_partitions if min_partitions is None else min_partitions
    total = sum(_task_end(t) - t.start_position for t in tasks)
    limit = options.max_bytes_per_partition
    if min_partitions and total:
        limit = min(limit, max(1, -(-total // min_partitions)))
    out: list[ScanTask] = []
    for task in tasks:
        end = _task_end(task)
        chunk = task.segment.chunk_size
        # a chunked (tiered) segment is decoded a chunk at a time: pieces of whole chunks
        piece = max(chunk, -(-limit // chunk) * chunk) if chunk else limit
        if end - task.start_position <= piece:
            out.append(task)
            continue
        cuts = _index_cuts(filesystem, task, end, piece)
        if cuts is None:
            cuts = _cut_points(
                _snap_to_chunks(
                    _hop_starts(filesystem, task.segment, task.start_position, end), chunk
                ),
                task.start_position,
                end,
                piece,
            )
        cuts, floors = _intact_cuts(filesystem, task, cuts, options)
        starts = [task.start_position, *cuts]
        ends: list[int | None] = [*cuts, task.end_position]
        after: list[int | None] = [task.after_offset, *floors]
        spans: list[int | None] = [None if f is None else f + 1 for f in floors]
        out.extend(
            replace(task, start_position=a, end_position=b, after_offset=f, span_end=e)
            for a, b, f, e in zip(starts, ends, after, [*spans, task.span_end], strict=True)
        )
    return out


def _intact_cuts(
    filesystem: pafs.FileSystem, task: ScanTask, cuts: list[int], options: ReadOptions
) -> tuple[list[int], list[int]]:
    """The cuts of ``task`` a piece may start at, and for each the last offset the entries
    before it reach by the reader's rules (an entry counts when its offsets go above the last
    counted one and stay below the next segment's base offset, and the reader keeps its
    records: :func:`kept_last_offset`), so the pieces return exactly the rows of a
    whole-segment read.

    A cut stands only where the whole read frames an entry too: the entry there is whole and
    valid, and the walk to it frames whole, checksum-valid entries exactly to it (a damaged
    entry, which the reader's search for the next entry could pass over or resume before, makes
    the cut go: its piece joins the one before, so a damage is read by one task from a point
    both reads frame). With ``mode=DROPMALFORMED`` the walk starts at the piece before, also
    with an ``.index``: a walk from an index position would not see a damage between the
    piece's start and that position, which the whole read may resume from past the cut, nor
    count the offsets of the entries there; so planning reads the segment. With FAILFAST a
    damage anywhere fails the read whichever piece meets it, so the walk starts at the last
    ``.index`` position before the cut holding a whole valid entry whose offset follows the
    floor carried from piece to piece (one index interval per cut: planning a 1 GB segment
    takes milliseconds, not the 0.5 s of reading it). Index files and size fields are
    untrusted; a walk stops at the first damage, so a damage costs at most one piece's walk
    per later cut."""
    index = None if options.drop_malformed else _load_offset_index(filesystem, task.segment)
    anchors = np.empty(0, np.int64) if index is None else index.positions
    next_base = task.next_base_offset
    floor = task.segment.base_offset - 1
    if task.after_offset is not None:
        floor = max(floor, task.after_offset)
    kept: list[int] = []
    floors: list[int] = []
    previous = task.start_position
    with _reads(filesystem, task.segment) as read:
        for cut in cuts:
            if _entry_head(filesystem, task.segment, next_base, cut) is None:
                continue
            start = previous
            for anchor in anchors[(anchors > previous) & (anchors < cut)][::-1].tolist():
                head = _entry_head(filesystem, task.segment, next_base, anchor)
                if head is not None:
                    start = anchor if head.offset > floor else previous
                    break
            heads = _framed_heads(read, task, start, cut)
            if heads is None:
                continue
            found = _kept_floor(read, heads, floor, next_base, options, options.deep)
            # a shallow read expands legacy compressed wrappers where its columns want each
            # row's entry (reader.legacy), which planning does not know: the cut stands where
            # the floor is the same either way
            if (
                not options.deep
                and any(h[4] == _WRAPPER_REACH for h in heads)
                and _kept_floor(read, heads, floor, next_base, options, True) != found
            ):
                continue
            floor = found
            kept.append(cut)
            floors.append(floor)
            previous = cut
    return kept, floors


_WRAPPER_REACH = 2**63  # the offsets a legacy compressed wrapper's records may reach: any


def _framed_heads(
    read: Read, task: ScanTask, start: int, cut: int
) -> list[tuple[int, int, int, int, int]] | None:
    """(position, length, first offset, last offset, highest offset its records may reach) of
    each entry framed from ``start`` to ``cut``; None at the first entry that is not whole and
    checksum valid with offsets inside the segment, or when the framing does not end there."""
    window = min(HOP_WINDOW_BYTES, max(cut - start, 4096))  # an index interval: one read
    base, next_base = task.segment.base_offset, task.next_base_offset
    heads = []
    for walked in walk_entries(read, start, cut, window, file_size=task.segment.size):
        lasts = K.entry_last_offsets(walked.window, walked.positions, walked.magics).tolist()
        for at, last, magic in zip(
            walked.positions.tolist(), lasts, walked.magics.tolist(), strict=True
        ):
            head = walked.window[at : at + 18].tobytes()
            first = int.from_bytes(head[:8], "big", signed=True) if magic == 2 else last
            length = 12 + int.from_bytes(head[8:12], "big", signed=True)
            entry = walked.window[at : at + length]
            if (
                entry.shape[0] < length
                or not has_valid_checksum(entry)
                or not base <= first <= last
                or (next_base is not None and last >= next_base)
            ):
                return None
            # a legacy wrapper's offsets are its inner messages' (relative ones after offset 0)
            reach = last if magic == 2 or not head[17] & 0x07 else _WRAPPER_REACH
            heads.append((walked.base + at, length, first, last, reach))
            end = walked.base + at + length
            if end >= cut:
                return heads if end == cut else None
    return None


def _kept_floor(
    read: Read,
    heads: list[tuple[int, int, int, int, int]],
    floor: int,
    next_base: int | None,
    options: ReadOptions,
    expand_wrappers: bool,
) -> int:
    """The last offset the reader keeps of the entries ``heads`` (:func:`_framed_heads`) read
    after offset ``floor``: an entry raises it when its offsets follow it and the reader keeps
    its records (:func:`kept_last_offset`; ``expand_wrappers``: whether the reader expands
    legacy compressed wrappers). Planning cost stays about one entry decoded per
    cut: the last entry whose first offset is above every offset the entries before it may reach
    is kept whatever became of those, if the reader keeps it at all, so the walk starts there
    (from the start only when no such entry is kept)."""

    def kept(i: int, below: int) -> int | None:
        position, length, first, last, _ = heads[i]
        if first <= below or last < first or (next_base is not None and last >= next_base):
            return None
        found = kept_last_offset(
            as_array(read(position, length)),
            below,
            verify_checksums=options.verify_checksums,
            deep=options.deep,
            max_decompressed_bytes=options.max_decompressed_bytes,
            expand_wrappers=expand_wrappers,
        )
        return found if found is not None and (next_base is None or found < next_base) else None

    reach = list(itertools.accumulate((h[4] for h in heads[:-1]), max, initial=floor))
    resume = 0
    for i in range(len(heads) - 1, -1, -1):
        found = kept(i, reach[i]) if heads[i][2] > reach[i] else None
        if found is not None:
            floor, resume = found, i + 1
            break
    for i in range(resume, len(heads)):
        found = kept(i, floor)
        if found is not None:
            floor = found
    return floor


def plan_partitions(
    tasks: Sequence[ScanTask], options: ReadOptions, min_partitions: int
) -> list[tuple[ScanTask, ...]]:
    """Input partitions for parallel readers: large tasks split (:func:`split_tasks`), then all
    of them bin-packed in order (:func:`pack_tasks`). ``min_partitions``: ``minPartitions``
    if given, else the engine's parallelism."""
    if not tasks:
        return []
    filesystem = tasks[0].filesystem
    assert filesystem is not None
    pieces = split_tasks(filesystem, tasks, options, min_partitions)
    groups = pack_tasks(
        [_task_end(t) - t.start_position for t in pieces],
        options.max_bytes_per_partition,
        options.open_cost_bytes,
        min_partitions,
    )
    return [tuple(pieces[i] for i in group) for group in groups]


def pack_tasks(
    sizes: Sequence[int], max_bytes: int, open_cost: int, min_partitions: int
) -> list[range]:
    """Bin-pack tasks of ``sizes`` bytes, in their order, into input partitions; returns each
    partition's task indices.

    Much as Spark packs files: each task weighs its size plus ``open_cost`` (what opening one
    costs, in bytes), and a partition takes tasks while its weight stays within the total
    weight over the partitions wanted (``min_partitions``, or as many as ``max_bytes`` needs
    rounded up to a multiple of ``min_partitions``) and the bytes it reads within
    ``max_bytes``; a task
    beyond either alone makes a partition. Unlike Spark, the open cost does not count towards
    ``max_bytes``: a Python data source's Spark task costs tens of milliseconds (tens of small
    segments' worth of reading), far more than a JVM file task, so small segments are packed
    into as few partitions as the parallelism allows rather than into many of 128 MiB of open
    costs. Tasks are taken in order (the plan's topic, partition, offset order), so the tasks of
    a Kafka partition stay in offset order within an input partition. There are at least
    ``min(min_partitions, len(sizes))`` partitions: when tasks beyond the limits leave too few,
    the heaviest partitions of several tasks are halved.
    """
    weights = [size + open_cost for size in sizes]
    min_partitions = max(1, min_partitions)
    # as many partitions as maxBytesPerPartition needs, rounded up to a multiple of the
    # parallelism (3 partitions on 2 cores take as long as 4)
    wanted = max(min_partitions, -(-sum(sizes) // max(1, max_bytes)))
    wanted = -(-wanted // min_partitions) * min_partitions
    target = max(1, sum(weights) // wanted)
    groups: list[range] = []
    start = 0
    weight = read = 0
    for i, (size, w) in enumerate(zip(sizes, weights, strict=True)):
        if i > start and (weight + w > target or read + size > max_bytes):
            groups.append(range(start, i))
            start, weight, read = i, 0, 0
        weight += w
        read += size
    if weights:
        groups.append(range(start, len(weights)))
    while len(groups) < min(min_partitions, len(weights)):
        at = max(
            (j for j, g in enumerate(groups) if len(g) > 1),
            key=lambda j: sum(weights[i] for i in groups[j]),
        )
        group = groups[at]
        half = sum(weights[i] for i in group) / 2
        cut, weight = group.start + 1, weights[group.start]
        while cut < group.stop - 1 and weight + weights[cut] <= half:
            weight += weights[cut]
            cut += 1
        groups[at : at + 1] = [range(group.start, cut), range(cut, group.stop)]
    return groups


def _index_cuts(
    filesystem: pafs.FileSystem, task: ScanTask, end: int, limit: int
) -> list[int] | None:
    """Cuts at ``.index`` positions, each checked to be an entry start; None if unusable or
    too sparse."""
    index = _load_offset_index(filesystem, task.segment)
    if index is None or index.positions.shape[0] == 0:
        return None
    chunk = task.segment.chunk_size
    starts = _snap_to_chunks(index.positions, chunk)
    cuts = _cut_points(starts, task.start_position, end, limit)
    edges = np.asarray([task.start_position, *cuts, end], np.int64)
    # a cut snapped to the first entry after a chunk boundary may overshoot by up to a chunk
    if (np.diff(edges) > limit + chunk).any():
        return None  # the index is too sparse for this limit: hop to every entry instead
    for cut in cuts:
        if _entry_head(filesystem, task.segment, task.next_base_offset, cut) is None:
            return None
    return cuts


def _snap_to_chunks(starts: np.ndarray, chunk: int) -> np.ndarray:
    """Of sorted entry ``starts``, the first at or after each multiple of ``chunk`` (all of
    them when ``chunk`` is 0): a piece cut there decodes no chunk another piece decodes,
    except the one an entry straddles."""
    if not chunk or starts.shape[0] == 0:
        return starts
    boundaries = np.arange(chunk, int(starts[-1]) + 1, chunk, dtype=np.int64)
    picked = np.searchsorted(starts, boundaries, side="left")
    return np.unique(starts[picked[picked < starts.shape[0]]])


def _task_end(task: ScanTask) -> int:
    return task.segment.size if task.end_position is None else task.end_position


def _cut_points(starts: np.ndarray, start: int, end: int, limit: int) -> list[int]:
    """Greedy cuts from sorted entry ``starts`` so that pieces stay within ``limit`` bytes
    (a piece holding one larger entry is larger)."""
    cuts: list[int] = []
    position = start
    while end - position > limit:
        j = int(np.searchsorted(starts, position + limit, side="right")) - 1
        if j < 0 or starts[j] <= position:
            j = int(np.searchsorted(starts, position, side="right"))
            if j >= starts.shape[0]:
                break
        cut = int(starts[j])
        if cut >= end:
            break
        cuts.append(cut)
        position = cut
    return cuts


def _hop_starts(filesystem: pafs.FileSystem, seg: SegmentRef, start: int, end: int) -> np.ndarray:
    """Entry starts after ``start`` and before ``end``, found by walking the entry framing."""
    with _reads(filesystem, seg) as read:
        found = [
            walked.base + walked.positions
            for walked in walk_entries(read, start, end, HOP_WINDOW_BYTES, file_size=seg.size)
        ]
    starts = np.concatenate(found) if found else np.empty(0, np.int64)
    return starts[(starts > start) & (starts < end)]


def _position_before_time(
    filesystem: pafs.FileSystem, seg: SegmentRef, next_base: int | None, target: int
) -> int:
    """A position before which no record has a timestamp >= ``target`` (0 if unknown).

    A time-index entry (T, O) with T < target says every record up to O has a timestamp
    <= T, so reading may start at the batch holding O.
    """
    tindex = _load_time_index(filesystem, seg, next_base)
    if tindex is None or tindex.timestamps.shape[0] == 0 or target <= -(2**63) + 1:
        return 0
    entry = kidx.lookup_timestamp(tindex, target - 1)
    if entry.timestamp < 0:
        return 0
    index = _load_offset_index(filesystem, seg)
    if index is None:
        return 0
    return _verified_start(filesystem, seg, next_base, index, entry.offset)


def offset_for_timestamp(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    target: int,
    options: ReadOptions,
    read_records: RecordReader | None,
) -> int | None:
    """Earliest offset whose record timestamp is >= ``target`` (Kafka's offsetsForTimes).

    Like the broker's lookup, it walks every record in offset order, control records and
    aborted transactions included, whatever the read's iteration and isolation.
    """
    if read_records is None:
        raise TypeError("plan_scan(read_records=...) is needed to resolve timestamps to offsets")
    options = replace(options, iteration="deep", read_committed=False)
    segs = part.segments
    for i, seg in enumerate(segs):
        read_from, read_until, next_base = segment_bounds(segs, i)
        if seg.max_timestamp is not None and seg.max_timestamp < target:
            continue  # the manifest's maxTimestampMs: no record here reaches the target
        start_position = 0
        tindex = _load_time_index(filesystem, seg, next_base)
        if tindex is not None and tindex.timestamps.shape[0]:
            # An entry (T, O) with T <= target: every record before O's batch has a timestamp
            # below T, so the scan can start at O's batch.
            entry = kidx.lookup_timestamp(tindex, target)
            if entry.timestamp >= 0:
                index = _load_offset_index(filesystem, seg)
                if index is not None:
                    start_position = _verified_start(
                        filesystem, seg, next_base, index, entry.offset
                    )
        task = ScanTask(
            segment=seg,
            topic=part.topic,
            partition=part.partition,
            start_position=start_position,
            start_offset=read_from,
            end_offset=read_until,
            min_max_timestamp=target,
            next_base_offset=next_base,
            include_control=True,
        )
        for arrow_batch in read_records(task, options, ("offset", "timestamp"), filesystem):
            ts = arrow_batch.column(1).cast("int64").to_numpy(zero_copy_only=False)
            valid = arrow_batch.column(1).is_valid().to_numpy(zero_copy_only=False)
            hits = np.nonzero(valid & (ts >= target * 1000))[0]
            if hits.shape[0]:
                return int(arrow_batch.column(0)[int(hits[0])].as_py())
    return None
