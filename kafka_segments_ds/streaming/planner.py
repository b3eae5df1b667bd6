"""Incremental reads of a growing archive (``spark.readStream``): offsets and micro-batches.

Offsets are those of Spark's Kafka source: per topic-partition the next offset to read
(end-exclusive; ``datasource`` turns them into Spark's JSON ``{"topic": {"0": 123}}``). Each
trigger lists the archive (:class:`~kafka_segments_ds.selection.Discovery`, one recursive
listing per path) and takes a partition's latest offset from the tail of its last segment:
the last ``.index`` entry, then a walk of the entry framing from there to the last whole
entry whose checksum holds (an entry being appended, or torn in a preallocated segment,
ends the data, and damage is met, as for the batch reader). What is learnt about a segment is
kept between triggers, keyed by its path and size, so a trigger with no new data lists and
compares.

A micro-batch [start, end) is read by the batch reader's scan tasks (``planning``), packed
into input partitions the same way, so it decodes as fast as a batch read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import CommitInProgressError, DataLossError
from kafka_segments_ds.layout import PartitionLog, SegmentRef
from kafka_segments_ds.options import EARLIEST, LATEST, ReadOptions, StreamOptions
from kafka_segments_ds.planning import plan_partitions, resolve_start, segment_tasks
from kafka_segments_ds.ranges import decode_limit, reader_next_offset
from kafka_segments_ds.reader.damage import DamagePolicy
from kafka_segments_ds.reader.task import read_task
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import (
    ENTRY_HEAD_BYTES,
    EntryHead,
    as_array,
    decode_entry_head,
)
from kafka_segments_ds.scan_task import ScanTask
from kafka_segments_ds.selection import Bounds
from kafka_segments_ds.streaming.listing import ArchiveListing, TopicPartition
from kafka_segments_ds.tail import (
    WINDOW_BYTES,
    ZERO_TAIL_BYTES,
    Damage,
    Decodes,
    Recorder,
    SegmentTail,
    records_decode,
    tail_start,
    walk_tail,
)
from kafka_segments_ds.transactions import OPEN_TRANSACTION_END, collect_aborted

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]

TAIL_WINDOW_BYTES = WINDOW_BYTES  # reads of the tail walk
VERIFY_ENTRY_BYTES = 64 << 20  # entries up to this size are checksummed before they count
TAIL_HEAD_BYTES = 17  # offset, size, epoch/crc, magic: enough to tell an entry from damage
ZERO_END_BYTES = 4096  # zeros ending a file: a preallocated segment (or an entry being written)


def scan_tail(
    filesystem: pafs.FileSystem,
    seg: SegmentRef,
    known: SegmentTail | None = None,
    options: ReadOptions | None = None,
) -> SegmentTail:
    """The tail of ``seg`` by the batch reader's rules (:mod:`~kafka_segments_ds.tail`): walked
    on from ``known`` (the same file, smaller or as large) when given, else from the last
    ``.index`` entry that points at a whole valid entry. A file of the known size is read again
    only where ``known`` ends before its end (a torn entry, or the zeros of a preallocated
    segment being written in place): 27 bytes there.

    Appends are sequential, so only the last entry can be incomplete (a preallocated segment's
    zero bytes make a torn entry look whole): one whose checksum fails with nothing written
    after it is being written and ends the data. With verifyChecksums=false the reader returns
    a whole entry whose checksum fails, so the walk counts it too, unless it may still be being
    written (:func:`~kafka_segments_ds.tail.unchecked_in_progress`: zeros follow it, or it ends
    the file in zeros). Other damage is decided by the batch reader's
    damage rules (with ``options``' mode): an append in progress ends the data; damage raises
    (FAILFAST, naming file, position and offset) or is passed over as the reader passes it
    (DROPMALFORMED: a checksum-valid entry whose offsets go back is dropped whole), so a
    damaged active segment never holds the partition's latest offset back, nor moves it back.
    A walk that went on past damage (DROPMALFORMED, deep iteration) then asks the reader what it
    returns from the walked range (:func:`~kafka_segments_ds.ranges.reader_next_offset`): the
    latest offset is the larger answer."""
    if known is not None and known.size == seg.size and known.end_position >= seg.size:
        return known
    with kfs.RangeReader(filesystem, seg.path) as read:
        if known is not None and known.size == seg.size:
            # written in place (a preallocated segment): has an entry begun since?
            after = as_array(read(known.end_position, ENTRY_HEAD_BYTES))
            if decode_entry_head(after, known.end_position) is None:
                return known
        if known is not None and known.size <= seg.size:
            position, next_offset = known.end_position, known.next_offset
        else:
            position = tail_start(filesystem, seg, read, VERIFY_ENTRY_BYTES)
            next_offset = seg.base_offset
        options = options or ReadOptions()
        stream_damage = _StreamDamage(filesystem, seg, read, options)
        damage = Recorder(stream_damage)
        tail = walk_tail(
            read,
            seg.size,
            position,
            next_offset,
            on_damage=damage,
            check_limit=VERIFY_ENTRY_BYTES,
            decodes=_decodes(options),
            verify_checksums=options.verify_checksums,
        )
    if known is not None and known.damaged:
        tail = replace(tail, damaged=True)
    to_end = stream_damage.dropped_to_end
    damaged = (damage.resumed or to_end) and options.drop_malformed
    if damaged:  # read to the listed end, whatever the iteration (_range_tasks)
        tail = replace(tail, damaged=True)
    if (damaged or tail.guessed) and options.deep:
        # past damage, what the reader returns (ranges.reader_next_offset); where the walk
        # stopped at damage, to the end of the file (20261130:53067: after a batch whose
        # lastOffsetDelta lies, the walk found nothing above its floor, the reader 10013..);
        # and where a wrapper's header does not tell its last offset (20261203:178157)
        end = seg.size if to_end else tail.end_position
        confirmed = reader_next_offset(
            filesystem, seg, position, next_offset, end, options, read_task
        )
        tail = replace(tail, end_position=end, next_offset=max(tail.next_offset, confirmed))
    return tail


def _decodes(options: ReadOptions) -> Decodes | None:
    """Whether the reader returns an entry's records (deep iteration, as the micro-batches read;
    :mod:`~kafka_segments_ds.tail`)."""
    limit = decode_limit(options)
    return None if limit is None else records_decode(limit, options.verify_checksums)


class _StreamDamage:
    """A stream tail's ``on_damage``: the batch reader's damage rules for the active segment."""

    def __init__(
        self,
        filesystem: pafs.FileSystem,
        seg: SegmentRef,
        read: kfs.RangeReader,
        options: ReadOptions,
    ) -> None:
        self.filesystem, self.seg, self.read, self.options = filesystem, seg, read, options
        self.dropped_to_end = False  # the walk stopped at damage DROPMALFORMED dropped

    def __call__(self, damage: Damage) -> int | None:
        if damage.entry is None:
            return self._past_framing(damage.position, damage.last_offset)
        end = damage.position + damage.entry.length
        if not damage.checksum_valid and self._being_written(damage.entry):
            return None  # being written (or damaged: the reader says so once it follows)
        error = damage.error
        assert error is not None
        resume = self._policy(
            damage.position,
            damage.last_offset,
            lambda p: p.fail(error, damage.position, damage.offset),
        )
        if resume is None and damage.checksum_valid and end == self.seg.size:
            return end  # the last entry, dropped whole: walked (not again at every trigger)
        return resume

    def _past_framing(self, position: int, last_offset: int) -> int | None:
        """Where a tail walk whose framing broke at ``position`` goes on (DROPMALFORMED past
        damage), or None where the data ends there: zeros (a preallocated segment), an entry
        being appended, or one written since the walk read it (walked at the next trigger).
        Damage raises in FAILFAST mode, as the batch reader does."""
        head = as_array(self.read(position, ENTRY_HEAD_BYTES))
        if not head[:TAIL_HEAD_BYTES].any() and self._zero_ended():
            return None  # zeros: preallocated, or a head not yet written
        entry = decode_entry_head(head, position)
        if entry is not None and position + entry.length <= self.seg.size:
            return None  # whole now: written since the walk read it
        if entry is not None or head.shape[0] < TAIL_HEAD_BYTES:
            return self._policy(position, last_offset, lambda p: p.past_eof(position, quiet=True))
        _, _, outcome, _ = K.hop_entries(head, 0, head.shape[0])
        seen = head[:TAIL_HEAD_BYTES].tobytes()
        return self._policy(
            position, last_offset, lambda p: p.bad_framing(position, int(outcome), seen)
        )

    def _being_written(self, entry: EntryHead) -> bool:
        """Whether a whole entry whose checksum fails may still be being written: zeros follow
        it to the end of the file (a preallocated segment), or it ends the file in
        ``ZERO_TAIL_BYTES`` zeros (its last bytes not written yet). One ending the file in
        nonzero bytes is whole: its checksum fails for damage, which the reader may see
        through (20261203:8681: a damaged size field led exactly to the end of the file, and
        the batch's own checksum proved where it ended)."""
        end = entry.position + entry.length
        if end >= self.seg.size:
            last = as_array(self.read(max(entry.position, end - ZERO_TAIL_BYTES), ZERO_TAIL_BYTES))
            return not last.any()
        return not as_array(self.read(end, TAIL_HEAD_BYTES)).any() and self._zero_ended()

    def _zero_ended(self) -> bool:
        """Whether the file (as listed) ends in ``ZERO_END_BYTES`` zeros, as a preallocated
        segment being written does, or a file whose last entry is being appended in place:
        zeros inside the data are then its unwritten end. Zeros before a nonzero end are
        damage the reader sees past (a zero-filled run inside a copy: 777:121), not the end."""
        size = self.seg.size
        start = max(0, size - ZERO_END_BYTES)
        return not as_array(self.read(start, size - start)).any()

    def _policy(
        self, position: int, last_offset: int, decide: Callable[[DamagePolicy], int | None]
    ) -> int | None:
        seg = self.seg

        def read(at: int, length: int) -> np.ndarray:  # the walk's reads, as listed
            return as_array(self.read(at, max(0, min(length, seg.size - at))))

        policy = DamagePolicy(
            self.options,
            read,
            shown=kfs.display_path(self.filesystem, seg.path),
            file_end=seg.size,
            range_end=seg.size,
            last_offset=lambda: last_offset,
        )
        resume = decide(policy)
        if resume is None and any(e.kind.is_drop for e in policy.events):
            self.dropped_to_end = True  # damage with nothing after it that follows the walk's
        return resume  # order floor: the rest of the file is the reader's to judge


def rate_limit(begin: Offsets, latest: Offsets, limit: int) -> Offsets:
    """At most about ``limit`` offsets past ``begin`` in all, shared by the partitions in
    proportion to what each has to read (as Spark's Kafka source's maxOffsetsPerTrigger)."""
    lags = {tp: max(0, latest[tp] - begin[tp]) for tp in latest}
    total = sum(lags.values())
    if total <= limit:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        share = limit * lags[tp] / total
        # as Spark: a partition whose share is under one offset still moves on by one
        step = -(-lags[tp] * limit // total) if share < 1 else lags[tp] * limit // total
        out[tp] = min(end, begin[tp] + step) if lags[tp] else end
    return out


class StreamPlanner:
    """The driver side of a streaming read: the offsets of each trigger and the scan tasks of
    each micro-batch. Holds what it learnt about the archive between triggers."""

    def __init__(
        self,
        paths: Sequence[str],
        options: ReadOptions,
        stream: StreamOptions,
        clock: Callable[[], float] | None = None,
    ):
        self.paths = list(paths)
        self.options = options
        self.stream = stream
        self.clock = clock or time.monotonic  # seconds, for maxTriggerDelay only
        self.listing = ArchiveListing(self.paths, options)
        # the tail of each partition's last segment: (its .log path, tail)
        self._tails: dict[TopicPartition, tuple[str, SegmentTail]] = {}
        self._stable: dict[TopicPartition, tuple[tuple[str, int], int]] = {}
        self._target: Offsets | None = None  # Trigger.AvailableNow: nothing after these
        # clock() at the last trigger that was not delayed; None: none yet, so the first
        # trigger of this planner (a new query, or a restart from a checkpoint) is due
        self._last_trigger: float | None = None
        self.reported: Offsets | None = None  # the newest offsets the last listing found

    # -- listing -----------------------------------------------------------------------------

    @property
    def filesystem(self) -> pafs.FileSystem:
        """What segments are read with (see :attr:`ArchiveListing.filesystem`)."""
        return self.listing.filesystem

    def list_partitions(self) -> dict[TopicPartition, PartitionLog]:
        """The selected partitions as they are now (see :meth:`ArchiveListing.list_partitions`)."""
        return self.listing.list_partitions()

    # -- offsets -----------------------------------------------------------------------------

    def latest_of(self, part: PartitionLog) -> int:
        """The offset after the last whole entry of the partition (below the first open
        transaction with read_committed)."""
        assert part.topic is not None and part.partition is not None
        key = (part.topic, part.partition)
        last = part.segments[-1]
        cached = self._tails.get(key)
        known = cached[1] if cached is not None and cached[0] == last.path else None
        if known is None and last.last_offset is not None and last.read_until is None:
            # a tiered segment is complete, and its manifest says where it ends
            known = SegmentTail(last.size, last.size, last.last_offset + 1)
        tail = scan_tail(self.filesystem, last, known, self.options)
        self._tails[key] = (last.path, tail)
        latest = tail.next_offset
        if self.options.read_committed:
            latest = min(latest, self._first_open_transaction(part, latest))
        return latest

    def _first_open_transaction(self, part: PartitionLog, latest: int) -> int:
        """Where the last stable offset is: no read_committed batch reads a transaction that
        may still commit (it would be missed once it did)."""
        assert part.topic is not None and part.partition is not None
        key = (part.topic, part.partition)
        shape = (part.segments[-1].path, part.segments[-1].size)
        cached = self._stable.get(key)
        if cached is not None and cached[0] == shape:
            return cached[1]
        spans = collect_aborted(self.filesystem, part, self.options)
        stable = min(
            (first for _, first, last in spans if last == OPEN_TRANSACTION_END), default=latest
        )
        self._stable[key] = (shape, stable)
        return stable

    def initial_offsets(self) -> Offsets:
        """Where a new query starts: startingOffsets (latest by default), or the first offset
        at or after startingTimestamp / startingOffsetsByTimestamp."""
        partitions = self.list_partitions()
        named = self.stream.starting_offsets
        starts = Bounds.of(
            list(partitions.values()),
            named or None,
            self.options.starting_offsets_by_timestamp or None,
            self.options.starting_timestamp,
            EARLIEST if named == () else LATEST,
            stream=True,
        )
        out: Offsets = {}
        for key, part in partitions.items():
            start = resolve_start(self.filesystem, part, starts, self.options, read_task)
            if start == EARLIEST:
                start = part.segments[0].base_offset
            out[key] = self.latest_of(part) if start == LATEST else start
        return out

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: remember the latest offsets; later triggers stop there."""
        self._target = self._latest_all(self.list_partitions())[1]

    def _latest_all(
        self, partitions: dict[TopicPartition, PartitionLog]
    ) -> tuple[dict[TopicPartition, PartitionLog], Offsets]:
        """``partitions`` and the latest offset of each; a segment gone since they were listed
        (retention, the cleaner replacing segments): listed again, once."""
        try:
            return partitions, {key: self.latest_of(part) for key, part in partitions.items()}
        except FileNotFoundError:
            partitions = self.listing.list_partitions(full=True)
            return partitions, {key: self.latest_of(part) for key, part in partitions.items()}

    def next_offsets(
        self,
        start: Offsets | None,
        max_offsets: int | None = None,
        min_offsets: int | None = None,
    ) -> Offsets:
        """The end of the next micro-batch from ``start`` (``None``: Spark did not say, an old
        API): every listed partition's latest offset, capped by the AvailableNow target and
        ``max_offsets`` (shared by the partitions); ``start`` itself while fewer than
        ``min_offsets`` are there and maxTriggerDelay has not passed since the last batch (the
        first trigger is due, as in Spark's Kafka source)."""
        try:
            partitions = self.list_partitions()
        except CommitInProgressError as err:
            before = start if start is not None else self.reported
            if before is None:
                raise
            log.warning("no new offsets this trigger: %s", err)
            return dict(before)
        partitions, self.reported = self._latest_all(partitions)
        latest = dict(self.reported)
        if self._target is not None:  # partitions that appeared after the start are left out
            target = self._target
            latest = {key: min(n, target[key]) for key, n in latest.items() if key in target}
        if start is None:
            return latest
        begin = {key: start.get(key, partitions[key].segments[0].base_offset) for key in latest}
        if min_offsets is not None and self._target is None:
            waiting = sum(max(0, latest[k] - begin[k]) for k in latest)
            now = self.clock()
            last = self._last_trigger
            if (
                waiting < min_offsets
                and last is not None
                and (now - last) * 1000 < self.stream.max_trigger_delay_ms
            ):
                return dict(start)
            self._last_trigger = now
        if max_offsets is not None:
            latest = rate_limit(begin, latest, max_offsets)
        return latest

    # -- micro-batches -----------------------------------------------------------------------

    def plan(self, start: Offsets, end: Offsets, min_partitions: int) -> list[tuple[ScanTask, ...]]:
        """Scan tasks of the micro-batch [start, end), packed into input partitions (at least
        ``min_partitions`` when there is enough to read)."""
        partitions = self.listing.last if self.listing.last is not None else self.list_partitions()
        for key in sorted(set(start) - set(end)):
            self._data_loss(f"{key[0]}-{key[1]} is gone from the archive", key, start[key])
        tasks: list[ScanTask] = []
        ranges: dict[TopicPartition, tuple[int, int]] = {}  # what each partition's tasks read
        for key, stop in sorted(end.items()):
            part = partitions.get(key)
            if part is None:
                part = self.list_partitions().get(key)
            if part is None:
                self._data_loss(f"{key[0]}-{key[1]} is gone from the archive", key, stop)
                continue
            earliest = part.segments[0].base_offset
            begin = start.get(key, earliest)
            if key not in start and earliest != 0:
                # as Spark's Kafka source: a partition added since the last batch is read from
                # its first offset, and the offsets before it were never seen
                self._data_loss(
                    f"added partition {key[0]}-{key[1]} starts from offset {earliest} instead of 0",
                    key,
                )
            if stop == begin:
                continue  # nothing to read (a loss below it shows in the batch that reads on)
            if stop < begin:
                self._data_loss(
                    f"{key[0]}-{key[1]}: the offset went back from {begin} to {stop} (the log "
                    "was truncated)",
                    key,
                    begin,
                )
                continue
            if begin < earliest:
                self._lost_below(key, begin, earliest, stop)
                begin = earliest
            if stop <= begin:
                continue
            ranges[key] = (begin, stop)
            try:
                tasks.extend(self._range_tasks(part, begin, stop))
            except FileNotFoundError:
                tasks.extend(self._relisted_tasks(key, begin, stop))
        if not tasks:
            return []
        wanted = self.options.min_partitions or min_partitions
        try:
            return plan_partitions(tasks, self.options, wanted)
        except FileNotFoundError:
            # a segment went while its tasks were cut (retention, the cleaner replacing
            # segments): the partitions whose segments went, planned again from a new listing
            gone = {
                tp
                for tp in ranges
                if any(
                    (t.topic, t.partition) == tp
                    and not self.filesystem.get_file_info(t.segment.path).is_file
                    for t in tasks
                )
            }
            kept = [t for t in tasks if (t.topic, t.partition) not in gone]
            for tp in sorted(gone):
                kept.extend(self._relisted_tasks(tp, *ranges[tp]))
            return plan_partitions(kept, self.options, wanted) if kept else []

    def _lost_below(self, key: TopicPartition, begin: int, earliest: int, stop: int) -> None:
        self._data_loss(
            f"{key[0]}-{key[1]}: offsets {begin} to {min(earliest, stop) - 1} are no longer in "
            f"the archive, whose first segment starts at offset {earliest} (removed by "
            "retention or compaction)",
            key,
            begin,
        )

    def _relisted_tasks(self, key: TopicPartition, begin: int, stop: int) -> list[ScanTask]:
        """The tasks of ``key``'s [begin, stop) when a segment was removed (retention) since
        the trigger listed it: listed again, and planned from what is there now."""
        part = self.listing.list_partitions(full=True).get(key)
        if part is None:
            self._data_loss(f"{key[0]}-{key[1]} is gone from the archive", key, begin)
            return []
        earliest = part.segments[0].base_offset
        if begin < earliest:
            self._lost_below(key, begin, earliest, stop)
            begin = earliest
        if stop <= begin:
            return []
        try:
            return self._range_tasks(part, begin, stop)
        except FileNotFoundError as err:
            self._data_loss(
                f"{key[0]}-{key[1]}: segments are being removed while the micro-batch is "
                f"planned ({err})",
                key,
                begin,
            )
            return []

    def _range_tasks(self, part: PartitionLog, begin: int, stop: int) -> list[ScanTask]:
        aborted: tuple[tuple[int, int, int], ...] = ()
        if self.options.read_committed:
            aborted = collect_aborted(self.filesystem, part, self.options)
        assert part.topic is not None and part.partition is not None
        last = part.segments[-1]
        cached = self._tails.get((part.topic, part.partition))
        tail = cached[1] if cached is not None and cached[0] == last.path else None
        if tail is None or tail.size != last.size or tail.next_offset != stop:
            return segment_tasks(self.filesystem, part, begin, stop, aborted)
        # the batch ends at the end of the last segment's whole entries: cut there, not at an
        # index lookup (the active segment's preallocated index is megabytes of zeros), and
        # at ``stop`` (the tail's offset) too: the walk may pass over an entry the reader
        # returns (verifyChecksums=false: a checksum that fails), whose rows at/after ``stop``
        # the next micro-batch emits. Only a batch the reader keeps ends a task at ``stop``,
        # so a dropped one there does not hide the batches after it (20260601:94)
        tasks = segment_tasks(self.filesystem, part, begin, None, aborted)
        # (a task may end before ``stop`` already: a bucket segment the join with a log dir
        # cut where the log dir begins; 20261202: lifting it read those offsets twice)
        cut = [replace(t, end_offset=_earlier(t.end_offset, stop)) for t in tasks]
        if cut and cut[-1].segment.path == last.path and not tail.damaged:
            cut[-1] = replace(cut[-1], end_position=tail.end_position)
        # past damage the reader's resynchronisation depends on what follows: a damaged
        # segment is read to its listed end, as a batch read reads it, its rows cut at ``stop``
        # (20261201:16564: cut where the walk stopped, the read left out offset 2)
        return cut

    def _data_loss(self, what: str, key: TopicPartition, offset: int | None = None) -> None:
        if self.options.fail_on_data_loss:
            where = (
                ""
                if offset is None
                else f"; the stream was at offset {offset} of {key[0]}-{key[1]}"
            )
            raise DataLossError(
                f"{what}{where}. Some data may have been missed: set failOnDataLoss=false to go "
                "on from the earliest offset available"
            )
        log.warning("%s; some data may have been missed (failOnDataLoss=false)", what)


def _earlier(end: int | None, stop: int) -> int:
    return stop if end is None else min(end, stop)
