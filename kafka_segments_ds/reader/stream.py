"""Incremental reads of a growing archive (``spark.readStream``): offsets and micro-batches.

Offsets are those of Spark's Kafka source: per topic-partition the next offset to read
(end-exclusive), as JSON ``{"topic": {"0": 123}}``. Each trigger lists the archive (one
recursive listing per path) and takes a partition's latest offset from the tail of its last
segment: the last ``.index`` entry, then a walk of the entry framing from there to the last
whole entry whose checksum holds (an entry being appended, or torn in a preallocated segment,
ends the data, and damage is met, as for the batch reader). What is learnt about a segment is
kept between triggers, keyed by its path and size, so a trigger with no new data lists and
compares.

A micro-batch [start, end) is read by the batch reader's scan tasks (``planning``), packed
into input partitions the same way, so it decodes as fast as a batch read.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import (
    CommitInProgressError,
    DataLossError,
    InvalidOptionError,
    UnsafePathError,
)
from kafka_segments_ds.journal import check_readable
from kafka_segments_ds.layout import (
    PartitionLog,
    SegmentRef,
    list_path,
    merge_partitions,
    refuse_escapes,
)
from kafka_segments_ds.options import EARLIEST, LATEST, ReadOptions, StreamOptions
from kafka_segments_ds.planning import (
    OPEN_TRANSACTION_END,
    collect_aborted,
    offset_for_timestamp,
    plan_partitions,
    segment_tasks,
    select_partitions,
)
from kafka_segments_ds.reader.damage import DamagePolicy
from kafka_segments_ds.reader.task import read_task
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import (
    ENTRY_HEAD_BYTES,
    as_array,
    decode_entry_head,
)
from kafka_segments_ds.scan_task import ScanTask
from kafka_segments_ds.selection import check_all_named
from kafka_segments_ds.tail import WINDOW_BYTES, Damage, SegmentTail, tail_start, walk_tail
from kafka_segments_ds.tiered import combine_filesystems, discover_layout, load_private_keys
from kafka_segments_ds.tiered.layouts import ManifestCache

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]

TAIL_WINDOW_BYTES = WINDOW_BYTES  # reads of the tail walk
VERIFY_ENTRY_BYTES = 64 << 20  # entries up to this size are checksummed before they count
RACY_MTIME_NS = 1_000_000_000  # a directory changed this recently is listed again
TAIL_HEAD_BYTES = 17  # offset, size, epoch/crc, magic: enough to tell an entry from damage


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{("t", 0): 5}`` -> ``{"t": {"0": 5}}``, topics and partitions in order (Spark compares
    offsets as JSON text: the same offsets must always read the same)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Any) -> Offsets:
    """The inverse of :func:`offsets_to_json`, checked (a checkpoint may be edited by hand)."""
    if not isinstance(data, Mapping):
        raise InvalidOptionError(f'stream offsets must look like {{"topic":{{"0":23}}}}: {data!r}')
    out: Offsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise InvalidOptionError(f"stream offsets of topic {topic!r} must be an object")
        for partition, offset in parts.items():
            if (
                not str(partition).isdigit()
                or isinstance(offset, bool)
                or not isinstance(offset, int)
                or offset < 0
            ):
                raise InvalidOptionError(
                    f"stream offset {topic}-{partition} = {offset!r} is not an offset"
                )
            out[(str(topic), int(partition))] = offset
    return out


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
    after it is being written and ends the data. Other damage is decided by the batch reader's
    damage rules (with ``options``' mode): an append in progress ends the data; damage raises
    (FAILFAST, naming file, position and offset) or is passed over as the reader passes it
    (DROPMALFORMED: a checksum-valid entry whose offsets go back is dropped whole), so a
    damaged active segment never holds the partition's latest offset back, nor moves it back."""
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
        return walk_tail(
            read,
            seg.size,
            position,
            next_offset,
            on_damage=_StreamDamage(filesystem, seg, read, options or ReadOptions()),
            check_limit=VERIFY_ENTRY_BYTES,
        )


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

    def __call__(self, damage: Damage) -> int | None:
        if damage.entry is None:
            return self._past_framing(damage.position, damage.last_offset)
        end = damage.position + damage.entry.length
        if not damage.checksum_valid and not as_array(self.read(end, TAIL_HEAD_BYTES)).any():
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
        if not head[:TAIL_HEAD_BYTES].any():
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

    def _policy(
        self, position: int, last_offset: int, decide: Callable[[DamagePolicy], int | None]
    ) -> int | None:
        seg = self.seg

        def read(at: int, length: int) -> np.ndarray:  # the walk's reads, as listed
            return as_array(self.read(at, max(0, min(length, seg.size - at))))

        return decide(
            DamagePolicy(
                self.options,
                read,
                shown=kfs.display_path(self.filesystem, seg.path),
                file_end=seg.size,
                range_end=seg.size,
                last_offset=lambda: last_offset,
            )
        )


def _mtime_ns(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return -1


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
        self._filesystem: pafs.FileSystem | None = None
        self._base: pafs.FileSystem | None = None  # where the roots are
        self._roots: list[str] = []
        # a tiered-storage bucket (KIP-405) is listed with discover_layout every trigger and
        # read through the view it gives; None until the first listing tells
        self._tiered: bool | None = None if options.layout == "auto" else options.layout != "broker"
        self._keys: dict[str, bytes] | None = None
        self._manifests: ManifestCache = {}  # Aiven manifests parsed at earlier triggers
        # a root's listing by _is_tiered, used by the _list_tiered right after it
        self._discovered: dict[str, tuple[pafs.FileSystem, list[PartitionLog]]] = {}
        self._checked: set[str] = set()  # local files that passed the symbolic link check
        # the tail of each partition's last segment: (its .log path, tail)
        self._tails: dict[TopicPartition, tuple[str, SegmentTail]] = {}
        self._stable: dict[TopicPartition, tuple[tuple[str, int], int]] = {}
        self._partitions: dict[TopicPartition, PartitionLog] | None = None
        self._watched: dict[str, int] | None = None  # directory -> mtime at the last listing
        self._target: Offsets | None = None  # Trigger.AvailableNow: nothing after these
        # clock() at the last trigger that was not delayed; None: none yet, so the first
        # trigger of this planner (a new query, or a restart from a checkpoint) is due
        self._last_trigger: float | None = None
        self.reported: Offsets | None = None  # the newest offsets the last listing found

    # -- listing -----------------------------------------------------------------------------

    @property
    def filesystem(self) -> pafs.FileSystem:
        """What segments are read with: the storage of the paths, or for a tiered bucket the
        view serving its segments as plain ones (as of the last listing)."""
        if self._base is None:
            self._base, roots = kfs.resolve_paths(self.paths, self.options.storage_options())
            self._roots = list(roots)
            self._filesystem = self._base
        assert self._filesystem is not None
        return self._filesystem

    def list_partitions(self) -> dict[TopicPartition, PartitionLog]:
        """The selected partitions as they are now (raises CommitInProgressError while a
        kafkasegments write commits into a log dir read).

        On local disk, when no directory read has changed since the last listing (the same
        mtimes: no file added, removed or renamed), only the last segment of each partition is
        looked at again (a stat): an active segment grows in place."""
        filesystem = self.filesystem
        for root in self._roots:
            if not kfs.has_glob(root):
                check_readable(filesystem, root)
        if self._tiered:
            return self._list_tiered()
        if self._partitions is not None and self._watched is not None:
            refreshed = self._refresh_last_segments(self._partitions, self._watched)
            if refreshed is not None:
                self._partitions = refreshed
                return refreshed
        # stat before listing: a change during the listing shows at the next trigger
        watched = self._directory_times()
        found: list[PartitionLog] = []
        for root in self._roots:
            try:
                listed = list_path(root.rstrip("/") or "/", filesystem)
            except UnicodeDecodeError as err:
                raise UnsafePathError(
                    f"a file name under {root} is not valid UTF-8: {err}"
                ) from err
            if not listed and self._tiered is None and self._is_tiered(root):
                self._tiered = True
                return self._list_tiered()
            if isinstance(filesystem, pafs.LocalFileSystem):
                # the listing's symbolic link check, for files not checked at earlier triggers
                refuse_escapes(root.rstrip("/") or "/", listed, self._checked)
            found.extend(listed)
        partitions = _by_topic_partition(select_partitions(merge_partitions(found), self.options))
        if partitions:
            self._tiered = False  # a broker log dir: never looked at as a bucket again
        for part in partitions.values():
            if watched is not None and part.directory not in watched:
                watched[part.directory] = -1  # not stat'ed before the listing: list again
        self._partitions, self._watched = partitions, watched
        return partitions

    def _is_tiered(self, root: str) -> bool:
        """Does ``root``, where no broker segment is, hold a tiered-storage bucket? (What it
        lists is kept for the listing that follows, so a first trigger lists it once.)"""
        assert self._base is not None
        discovered = discover_layout(
            root.rstrip("/") or "/",
            self._base,
            "auto",
            self._private_keys(),
            tiered_only=True,
            manifests=self._manifests,
            checked=self._checked,
        )
        if not discovered[1]:
            return False
        self._discovered[root] = discovered
        return True

    def _private_keys(self) -> dict[str, bytes]:
        if self._keys is None:
            private = dict(self.options.private_keys or {})
            self._keys = load_private_keys(private) if private else {}
        return self._keys

    def _list_tiered(self) -> dict[TopicPartition, PartitionLog]:
        """A tiered bucket, listed whole (object stores have no directory times): only
        segments whose upload finished (Aiven: the manifest is written last) are there, each
        offset in one segment (``tiered.resolve_overlaps``); read through the view."""
        assert self._base is not None
        found: list[PartitionLog] = []
        views = []
        for root in self._roots:
            if kfs.has_glob(root):
                raise InvalidOptionError(f"a tiered-storage bucket takes no glob pattern: {root}")
            discovered = self._discovered.pop(root, None)
            if discovered is None:
                discovered = discover_layout(
                    root.rstrip("/") or "/",
                    self._base,
                    self.options.layout,
                    self._private_keys(),
                    tiered_only=True,
                    manifests=self._manifests,
                    checked=self._checked,
                )
            view, listed = discovered
            views.append(view)
            found.extend(listed)
        self._filesystem = combine_filesystems(self._base, views)
        partitions = _by_topic_partition(select_partitions(merge_partitions(found), self.options))
        self._partitions, self._watched = partitions, None
        return partitions

    def _directory_times(self) -> dict[str, int] | None:
        """mtime (ns) of the roots and of the partition directories listed before, when every
        root is a local directory named without a glob; else None (list every trigger)."""
        if not isinstance(self.filesystem, pafs.LocalFileSystem):
            return None
        if any(kfs.has_glob(root) or not os.path.isdir(root) for root in self._roots):
            return None
        directories = [*self._roots, *(p.directory for p in (self._partitions or {}).values())]
        # A file timestamp has the kernel's coarse clock: a directory changed within the last
        # tick may change again with the same mtime. Recent ones are listed again ("racy git").
        racy = time.time_ns() - RACY_MTIME_NS
        times = {directory: _mtime_ns(directory) for directory in directories}
        return {d: -1 if t > racy else t for d, t in times.items()}

    def _refresh_last_segments(
        self, partitions: dict[TopicPartition, PartitionLog], watched: dict[str, int]
    ) -> dict[TopicPartition, PartitionLog] | None:
        """``partitions`` with the sizes of their last segments as they are now; None when a
        directory changed (then a listing is needed)."""
        try:
            for directory, mtime in watched.items():
                if os.stat(directory).st_mtime_ns != mtime:
                    return None
            out = {}
            for key, part in partitions.items():
                last = part.segments[-1]
                size = os.stat(last.path).st_size
                index_size = os.stat(last.index_path).st_size if last.index_path else 0
                if size != last.size or index_size != last.index_size:
                    last = replace(last, size=size, index_size=index_size)
                    part = replace(part, segments=(*part.segments[:-1], last))
                out[key] = part
            return out
        except FileNotFoundError:
            return None

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
        named = {(t, p): n for t, p, n in self.stream.starting_offsets or ()}
        by_time = {(t, p): n for t, p, n in self.options.starting_offsets_by_timestamp or ()}
        # as Spark's Kafka source: offsets JSON names every partition the query starts with
        if self.stream.starting_offsets:
            check_all_named("startingOffsets", named, partitions.values(), stream=True)
        if by_time:
            check_all_named("startingOffsetsByTimestamp", by_time, partitions.values(), stream=True)
        out: Offsets = {}
        for key, part in partitions.items():
            if self.options.starting_timestamp is not None or by_time:
                at = (
                    self.options.starting_timestamp
                    if self.options.starting_timestamp is not None
                    else by_time.get(key, LATEST)
                )
                out[key] = self._offset_at_time(part, at)
            elif self.stream.starting_offsets == ():
                out[key] = part.segments[0].base_offset
            else:
                wanted = named.get(key, LATEST)
                out[key] = (
                    self.latest_of(part)
                    if wanted == LATEST
                    else part.segments[0].base_offset
                    if wanted == EARLIEST
                    else wanted
                )
        return out

    def _offset_at_time(self, part: PartitionLog, at: int) -> int:
        if at == EARLIEST:
            return part.segments[0].base_offset
        if at == LATEST:
            return self.latest_of(part)
        found = offset_for_timestamp(self.filesystem, part, at, self.options, read_task)
        if found is not None:
            return found
        if self.options.starting_by_timestamp_strategy == "error":
            raise InvalidOptionError(
                f"no offset of {part.topic}-{part.partition} has a timestamp >= {at} "
                "(startingOffsetsByTimestampStrategy=error)"
            )
        return self.latest_of(part)

    def prepare_available_now(self) -> None:
        """Trigger.AvailableNow: remember the latest offsets; later triggers stop there."""
        self._target = {key: self.latest_of(part) for key, part in self.list_partitions().items()}

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
        self.reported = {key: self.latest_of(part) for key, part in partitions.items()}
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
        partitions = self._partitions if self._partitions is not None else self.list_partitions()
        for key in sorted(set(start) - set(end)):
            self._data_loss(f"{key[0]}-{key[1]} is gone from the archive", key, start[key])
        tasks: list[ScanTask] = []
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
            try:
                tasks.extend(self._range_tasks(part, begin, stop))
            except FileNotFoundError:
                tasks.extend(self._relisted_tasks(key, begin, stop))
        if not tasks:
            return []
        return plan_partitions(tasks, self.options, self.options.min_partitions or min_partitions)

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
        self._watched = None  # a full listing
        part = self.list_partitions().get(key)
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
        # index lookup (the active segment's preallocated index is megabytes of zeros)
        tasks = segment_tasks(self.filesystem, part, begin, None, aborted)
        cut = [replace(t, end_offset=stop) for t in tasks]
        if cut and cut[-1].segment.path == last.path:
            cut[-1] = replace(cut[-1], end_position=tail.end_position)
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


def _by_topic_partition(partitions: list[PartitionLog]) -> dict[TopicPartition, PartitionLog]:
    out: dict[TopicPartition, PartitionLog] = {}
    for part in partitions:
        if part.topic is None or part.partition is None:
            raise InvalidOptionError(
                f"{part.directory} is not named <topic>-<partition>: a streaming read keeps "
                "offsets per topic and partition"
            )
        out[(part.topic, part.partition)] = part
    return out
