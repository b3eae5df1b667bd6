"""A stream's listing of its archive at each trigger: the selected partitions by topic and
partition, broker log dirs or a tiered-storage bucket (found out at the first listing), and
on local disk no listing while no directory read has changed (the last segments' sizes are
looked at again: an active segment grows in place)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace

import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.layout import PartitionLog, merge_partitions, mtime_ns, segment_directories
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.selection import (
    Discovery,
    next_offset_on,
    select_partitions,
    topic_id_on,
)
from kafka_segments_ds.tiered import combine_filesystems

TopicPartition = tuple[str, int]
RACY_MTIME_NS = 1_000_000_000  # a directory changed this recently is listed again


class ArchiveListing:
    """The partitions a stream reads, listed again at each trigger; holds what the listings
    learnt (directory times, whether the input is a tiered bucket, its view)."""

    def __init__(self, paths: Sequence[str], options: ReadOptions) -> None:
        self.paths = list(paths)
        self.options = options
        self._discovery: Discovery | None = None
        self._filesystem: pafs.FileSystem | None = None  # for a tiered bucket, its view
        # a tiered-storage bucket (KIP-405) is listed with discover_layout every trigger and
        # read through the view it gives; None until the first listing tells
        self._tiered: bool | None = None if options.layout == "auto" else options.layout != "broker"
        # a root's listing by _is_tiered, used by the _list_tiered right after it
        self._discovered: dict[str, tuple[pafs.FileSystem, list[PartitionLog]]] = {}
        self.last: dict[TopicPartition, PartitionLog] | None = None  # the last listing
        self._watched: dict[str, int] | None = None  # directory -> mtime at the last listing

    @property
    def discovery(self) -> Discovery:
        """The paths resolved (at the first listing), and what is kept between listings."""
        if self._discovery is None:
            self._discovery = Discovery(self.paths, self.options, keep=True)
        return self._discovery

    @property
    def filesystem(self) -> pafs.FileSystem:
        """What segments are read with: the storage of the paths, or for a tiered bucket the
        view serving its segments as plain ones (as of the last listing)."""
        if self._filesystem is not None:
            return self._filesystem
        return self.discovery.filesystem

    def list_partitions(self, full: bool = False) -> dict[TopicPartition, PartitionLog]:
        """The selected partitions as they are now (raises CommitInProgressError while a
        kafkasegments write commits into a log dir read); ``full``: listed whatever the
        directory times say (a segment was removed since the last listing).

        On local disk, when no directory read has changed since the last listing (the same
        mtimes: no file added, removed or renamed), only the last segment of each partition is
        looked at again (a stat): an active segment grows in place."""
        discovery = self.discovery
        discovery.check_readable()
        if full:
            self._watched = None
        if self._tiered:
            return self._list_tiered()
        if self.last is not None and self._watched is not None:
            refreshed = self._refresh_last_segments(self.last, self._watched)
            if refreshed is not None:
                self.last = refreshed
                return refreshed
        # stat before listing: a change during the listing shows at the next trigger
        watched = self._directory_times()
        found: list[PartitionLog] = []
        for root in discovery.roots:
            _, listed = discovery.list_root(root, "broker", check=False)
            if not listed and self._tiered is None and self._is_tiered(root):
                self._tiered = True
                return self._list_tiered()
            found.extend(listed)
        location = None
        if len(discovery.roots) > 1 and isinstance(self.filesystem, pafs.LocalFileSystem):
            location = os.path.realpath  # one file reached through a symbolic link and directly
        merged = merge_partitions(found, location, next_offset_on(self.filesystem))
        partitions = _by_topic_partition(select_partitions(merged, self.options))
        if partitions:
            self._tiered = False  # a broker log dir: never looked at as a bucket again
        for part in partitions.values():
            for directory in segment_directories(part):  # (a partition's pieces: several)
                if watched is not None and directory not in watched:
                    watched[directory] = -1  # not stat'ed before the listing: list again
        self.last, self._watched = partitions, watched
        return partitions

    def _is_tiered(self, root: str) -> bool:
        """Does ``root``, where no broker segment is, hold a tiered-storage bucket? (What it
        lists is kept for the listing that follows, so a first trigger lists it once.)"""
        discovered = self.discovery.list_root(root, "auto", check=False, tiered_only=True)
        if not discovered[1]:
            return False
        self._discovered[root] = discovered
        return True

    def _list_tiered(self) -> dict[TopicPartition, PartitionLog]:
        """A tiered bucket, listed whole (object stores have no directory times): only
        segments whose upload finished (Aiven: the manifest is written last) are there, each
        offset in one segment (``tiered.resolve_overlaps``); read through the view."""
        discovery = self.discovery
        found: list[PartitionLog] = []
        views = []
        for root in discovery.roots:
            if kfs.has_glob(root):
                raise InvalidOptionError(f"a tiered-storage bucket takes no glob pattern: {root}")
            discovered = self._discovered.pop(root, None)
            if discovered is None:
                discovered = discovery.list_root(
                    root, self.options.layout, check=False, tiered_only=True
                )
            view, listed = discovered
            if not listed:  # a broker log dir given beside the bucket (a tiered topic whole)
                view, listed = discovery.list_root(root, "broker", check=False)
            views.append(view)
            found.extend(listed)
        self._filesystem = view = combine_filesystems(discovery.filesystem, views)
        merged = merge_partitions(found, None, next_offset_on(view), topic_id_on(view))
        partitions = _by_topic_partition(select_partitions(merged, self.options))
        self.last, self._watched = partitions, None
        return partitions

    def _directory_times(self) -> dict[str, int] | None:
        """mtime (ns) of the roots and of the partition directories listed before, when every
        root is a local directory named without a glob; else None (list every trigger)."""
        if not isinstance(self.filesystem, pafs.LocalFileSystem):
            return None
        roots = list(self.discovery.roots)
        if any(kfs.has_glob(root) or not os.path.isdir(root) for root in roots):
            return None
        directories = [*roots]
        for part in (self.last or {}).values():
            directories += segment_directories(part)
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


def _mtime_ns(path: str) -> int:
    found = mtime_ns(path)
    return -1 if found is None else found


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
