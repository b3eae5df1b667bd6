"""What a read covers: every path resolved and discovered, each segment once; the partitions
``subscribe`` / ``subscribePattern`` / ``assign`` select; the checks that make an input without
Kafka data, a selection naming what is not there, or offsets JSON naming only some of the
selected partitions an error rather than a silent empty or partial result.

Batch reads (:func:`kafka_segments_ds.planning.plan_scan`) apply all of it; a stream lists
its roots with :class:`Discovery` and selects with :func:`select_partitions` only, as it waits
for topics that do not exist yet; the command line lists each path with :func:`discover_root`.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import (
    CommitInProgressError,
    InvalidOptionError,
    KafkaSegmentsError,
    NoKafkaDataError,
)
from kafka_segments_ds.journal import check_readable, writes_under_way
from kafka_segments_ds.layout import (
    TIERED_LAYOUTS,
    WANTED_PARTITIONS,
    DanglingSegmentLinkError,
    PartitionLog,
    SegmentRef,
    merge_partitions,
    mtime_ns,
    parse_partition_dir_name,
)
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.tiered import combine_filesystems, discover_layout, load_private_keys
from kafka_segments_ds.tiered.layouts import ManifestCache

TopicPartition = tuple[str | None, int | None]
SHOWN_NAMES = 20  # partitions or topics named in a message, the rest counted
# what an OS error from listing means for the path (not the store): raised as it is
PATH_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)


def discover_paths(
    paths: Sequence[str], options: ReadOptions, filesystem: pafs.FileSystem | None = None
) -> tuple[pafs.FileSystem, list[PartitionLog]]:
    """Resolve every path (relative, ``~``, globs, URIs; ``filesystem``: already resolved for
    it) and discover the partitions under each, broker log dirs or tiered buckets: the
    filesystem to read them with and the partitions, each segment once however many paths
    reach it.

    Raises :class:`NoKafkaDataError` for a path without a Kafka segment (unless
    ``allowEmpty``), :class:`~kafka_segments_ds.errors.StorageError` naming the URI and the
    endpoint for a store that cannot be listed."""
    return Discovery(paths, options, filesystem).partitions()


def discover_root(
    filesystem: pafs.FileSystem,
    root: str,
    layout: str,
    keys: Mapping[str, bytes],
    storage: Mapping[str, str] | None = None,
    *,
    check: bool = True,
    tiered_only: bool = False,
    manifests: ManifestCache | None = None,
    checked: set[str] | None = None,
    selected: Callable[[list[PartitionLog]], list[PartitionLog]] | None = None,
) -> tuple[pafs.FileSystem, list[PartitionLog]]:
    """The partitions under one resolved ``root`` (``layout``, ``tiered_only``, ``manifests``,
    ``checked``: see :func:`~kafka_segments_ds.tiered.discover_layout`) and the filesystem to
    read them with: a tiered bucket's view serving its segments as plain ones. With ``check``,
    a log dir a write is committing into is refused (never a half-published write).

    Path errors (not found, permission denied) are raised as they are; a store that cannot be
    listed is a :class:`~kafka_segments_ds.errors.StorageError` naming URI and endpoint."""
    listing = functools.partial(
        discover_layout,
        root,
        filesystem,
        layout,
        keys,
        tiered_only=tiered_only,
        manifests=manifests,
        checked=checked,
    )
    try:
        if not check or kfs.has_glob(root) or not isinstance(filesystem, pafs.LocalFileSystem):
            if check and not kfs.has_glob(root):
                # (an object store: the journal check alone, one listing of requests; its
                # moves are copies, and a listing there is no snapshot either)
                check_readable(filesystem, root)
            return listing()
        log_dir = root
        if parse_partition_dir_name(posixpath.basename(root)) is not None:
            log_dir = posixpath.dirname(root)
        found = None
        changed = [root]  # (until a listing is whole)
        for _ in range(LISTING_ATTEMPTS):
            check_readable(filesystem, root)
            log_dir_ns = mtime_ns(log_dir)
            writing = writes_under_way(log_dir)
            try:
                found = listing()
            except FileNotFoundError as err:
                # a directory went while the recursive listing walked it (a write's staging
                # directory removed at the end of its commit): list again, unless the root went
                if filesystem.get_file_info(root).type != pafs.FileType.Directory:
                    if log_dir != root:
                        check_readable(filesystem, log_dir)  # an overwrite replacing it
                    raise
                if isinstance(err, DanglingSegmentLinkError):
                    raise
                continue
            check_readable(filesystem, root)  # a commit under way now
            # A commit into a partition read changes its directory's time: one changed since
            # its listing began may be listed half before, half after; a new partition
            # directory changes the log dir's time. Either: list again.
            changed = [
                part.directory
                for part in (selected or list)(found[1])
                if part.listed_ns is not None and mtime_ns(part.directory) != part.listed_ns
            ]
            log_dir_kept = mtime_ns(log_dir) == log_dir_ns
            if not changed and log_dir_kept:
                return found
            if log_dir_kept and not writing and not writes_under_way(log_dir):
                # partition directories changed with no kafkasegments write under way (its
                # staging directory, in the log dir from its start to its commit's end, would
                # have been there or changed the log dir's time): a broker's own file churn
                # (rolls, the cleaner's renames, retention), read as any live log dir is
                return found
        if found is not None and not changed:
            return found  # only the log dir's time kept changing (other topics, checkpoints)
        raise CommitInProgressError(
            f"kafkasegments writes kept committing into {changed[0]} while {root} was listed "
            f"({LISTING_ATTEMPTS} attempts); retry when they are done"
        )
    except (KafkaSegmentsError, *PATH_ERRORS):
        raise
    except OSError as err:
        raise kfs.unreachable(err, filesystem, root, storage) from err


class Discovery:
    """The paths of a read resolved once: ``filesystem`` (where the roots are), ``roots``
    (each resolved root -> the path that named it) and how to list them. ``keep`` keeps, for
    a stream listing the same roots at every trigger, the parsed Aiven manifests and the files
    that passed the symbolic link check."""

    def __init__(
        self,
        paths: Sequence[str],
        options: ReadOptions,
        filesystem: pafs.FileSystem | None = None,
        *,
        keep: bool = False,
    ) -> None:
        self.options = options
        self.storage = options.storage_options()
        self.roots: dict[str, str] = {}
        if filesystem is None:
            filesystem, self.roots = kfs.resolve_paths(paths, self.storage)
        else:
            for path in paths:
                self.roots.setdefault(path.rstrip("/") or "/", path)
        self.filesystem: pafs.FileSystem = filesystem
        self.manifests: ManifestCache | None = {} if keep else None
        self.checked: set[str] | None = set() if keep else None
        self._keys: dict[str, bytes] | None = None

    @property
    def keys(self) -> dict[str, bytes]:
        """The private keys of option privateKeys (PEM files read once)."""
        if self._keys is None:
            private = dict(self.options.private_keys or {})
            self._keys = load_private_keys(private) if private else {}
        return self._keys

    def check_readable(self) -> None:
        """Refuse the roots a write is committing into (CommitInProgressError)."""
        for root in self.roots:
            if not kfs.has_glob(root):
                check_readable(self.filesystem, root)

    def list_root(
        self, root: str, layout: str, *, check: bool = True, tiered_only: bool = False
    ) -> tuple[pafs.FileSystem, list[PartitionLog]]:
        """:func:`discover_root` of one of the roots."""
        token = WANTED_PARTITIONS.set(partition_filter(self.options))
        try:
            return discover_root(
                self.filesystem,
                root,
                layout,
                self.keys,
                self.storage,
                check=check,
                tiered_only=tiered_only,
                manifests=self.manifests,
                checked=self.checked,
                selected=lambda found: select_partitions(found, self.options),
            )
        finally:
            WANTED_PARTITIONS.reset(token)

    def partitions(self) -> tuple[pafs.FileSystem, list[PartitionLog]]:
        """Every root listed (see :func:`discover_paths`)."""
        found: list[PartitionLog] = []
        views: list[pafs.FileSystem] = []
        for root, given in self.roots.items():
            view, discovered = self.list_root(root, self.options.layout)
            if not self.options.allow_empty and not any(part.segments for part in discovered):
                raise NoKafkaDataError(no_data_message(given, self.options.layout))
            found.extend(discovered)
            views.append(view)
        location = None
        if len(self.roots) > 1 and isinstance(self.filesystem, pafs.LocalFileSystem):
            location = os.path.realpath  # one file reached through a symbolic link and directly
        # a tiered bucket is read through a view that serves its segments as plain ones
        view = combine_filesystems(self.filesystem, views)
        return view, merge_partitions(found, location, next_offset_on(view), topic_id_on(view))


LISTING_ATTEMPTS = 3


def next_offset_on(filesystem: pafs.FileSystem) -> Callable[[SegmentRef], int]:
    """The offset after a segment's last entry, walked from its index's last entry
    (:func:`kafka_segments_ds.tail.segment_tail`): where a piece of a partition ends."""

    def next_offset(seg: SegmentRef) -> int:
        from kafka_segments_ds.tail import segment_tail  # (only for same-named directories)

        return segment_tail(filesystem, seg).next_offset

    return next_offset


def topic_id_on(filesystem: pafs.FileSystem) -> Callable[[PartitionLog], str | None]:
    """The topic id a broker partition directory's ``partition.metadata`` holds (None when it
    has none, or not in Kafka's form)."""

    def topic_id(part: PartitionLog) -> str | None:
        try:
            with filesystem.open_input_stream(f"{part.directory}/partition.metadata") as f:
                data: bytes = f.read(4096)
        except (OSError, pa.ArrowException):
            return None
        for line in data.decode("utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            found = value.strip()
            if key.strip() == "topic_id" and re.fullmatch(r"[A-Za-z0-9_-]{22}", found):
                return found
        return None

    return topic_id


def no_data_message(path: str, layout: str | None) -> str:
    """Why ``path`` gives nothing to read, and (for a read with option ``layout``; None: the
    command line) what to do about it."""
    message = (
        f"{path}: no Kafka log segments (<20-digit offset>.log files) in it, in its "
        "<topic>-<partition> subdirectories, or matching it"
    )
    if layout is None:
        return message
    hint = (
        f"is it a tiered-storage bucket of another layout than {layout}?"
        if layout != "auto"
        else "for a tiered-storage bucket of a layout not recognised, set the option layout "
        f"({', '.join(TIERED_LAYOUTS)})"
    )
    return f"{message} ({hint}; allowEmpty=true reads an input without Kafka data as 0 rows)"


def partition_filter(options: ReadOptions) -> Callable[[str | None, int | None], bool] | None:
    """Whether ``subscribe`` / ``subscribePattern`` / ``assign`` select a (topic, partition);
    None when they are not set (every partition)."""
    if options.subscribe is not None:
        topics = set(options.subscribe)
        return lambda topic, _partition: topic in topics
    if options.subscribe_pattern is not None:
        pattern = re.compile(options.subscribe_pattern)
        return lambda topic, _partition: topic is not None and bool(pattern.fullmatch(topic))
    if options.assign is not None:
        assigned = set(options.assign)
        return lambda topic, partition: (topic, partition) in assigned
    return None


def select_partitions(partitions: list[PartitionLog], options: ReadOptions) -> list[PartitionLog]:
    """The partitions ``subscribe`` / ``subscribePattern`` / ``assign`` select, in (topic,
    partition) order."""
    wanted = partition_filter(options)
    if wanted is not None:
        partitions = [p for p in partitions if wanted(p.topic, p.partition)]
    return sorted(partitions, key=lambda p: (p.topic or "", p.partition or 0, p.directory))


def check_selection(
    found: list[PartitionLog], selected: list[PartitionLog], options: ReadOptions
) -> None:
    """Refuse (:class:`NoKafkaDataError`, unless ``allowEmpty``) a ``subscribe`` naming a topic
    the archive does not hold, an ``assign`` naming a partition it does not hold, and a
    ``subscribePattern`` matching no topic; the message names the topics that are there."""
    if options.allow_empty:
        return
    topics = sorted({p.topic for p in found if p.topic is not None})
    there = f"topics there: {_names(topics) or 'none'}"
    if options.subscribe is not None:
        missing = sorted(set(options.subscribe) - set(topics))
        if missing:
            raise NoKafkaDataError(
                f"subscribe names topics that are not in the archive: {_names(missing)}; {there}"
            )
    elif options.subscribe_pattern is not None and not selected:
        raise NoKafkaDataError(
            f"subscribePattern {options.subscribe_pattern!r} matches no topic in the archive; "
            f"{there}"
        )
    elif options.assign is not None:
        held = {(p.topic, p.partition) for p in found}
        missing_parts = [tp for tp in options.assign if tp not in held]
        if missing_parts:
            raise NoKafkaDataError(
                "assign names partitions that are not in the archive: "
                f"{_names(f'{t}-{p}' for t, p in missing_parts)}; {there}"
            )


def check_all_named(
    option: str,
    specified: Iterable[TopicPartition],
    selected: Iterable[PartitionLog],
    *,
    stream: bool = False,
) -> None:
    """Spark's Kafka source's rule for offsets JSON: it names exactly the selected partitions
    (:class:`InvalidOptionError` otherwise, in Spark's words). A partition whose directory is
    not named ``<topic>-<partition>`` cannot be named in JSON: it keeps the default bound."""
    named = set(specified)
    assigned = {(p.topic, p.partition): p for p in selected if p.topic is not None}
    if named == set(assigned):
        return
    unnamed = [_partition_name(assigned[tp]) for tp in sorted(set(assigned) - named, key=_order)]
    absent = [f"{t}-{p}" for t, p in sorted(named - set(assigned), key=_order)]
    details = []
    if unnamed:
        details.append(f"not named: {_names(unnamed)}")
    if absent:
        details.append(f"not in the (selected) archive: {_names(absent)}")
    care = ", if you don't care" if stream else ""
    raise InvalidOptionError(
        f"If {option} contains specific offsets, you must specify all TopicPartitions. "
        f"Use -1 for latest, -2 for earliest{care}. Specified: "
        f"{{{_names(f'{t}-{p}' for t, p in sorted(named, key=_order))}}} Assigned: "
        f"{{{_names(_partition_name(assigned[tp]) for tp in sorted(assigned, key=_order))}}} "
        f"({'; '.join(details)})"
    )


@dataclass(frozen=True, slots=True)
class Bounds:
    """Where the options put one end of each partition's read: an offset per partition
    (startingOffsets / endingOffsets JSON), or a timestamp (startingTimestamp, or per partition
    startingOffsetsByTimestamp; the ending ones likewise), which comes first; EARLIEST and
    LATEST are Spark's -2 and -1. ``default``: the offset of a partition not named."""

    offsets: dict[TopicPartition, int]
    timestamps: dict[TopicPartition, int]
    timestamp: int | None
    default: int

    @classmethod
    def of(
        cls,
        partitions: Sequence[PartitionLog],
        offsets: tuple[tuple[str, int, int], ...] | None,
        timestamps: tuple[tuple[str, int, int], ...] | None,
        timestamp: int | None,
        default: int,
        *,
        end: bool = False,
        stream: bool = False,
    ) -> Bounds:
        """The bounds of the options' offsets JSON (``offsets``, ``timestamps``: (topic,
        partition, value) triples), each checked to name every selected partition as Spark's
        Kafka source asks (:func:`~kafka_segments_ds.selection.check_all_named`)."""
        side = "ending" if end else "starting"
        return cls(
            _named(f"{side}Offsets", offsets, partitions, stream),
            _named(f"{side}OffsetsByTimestamp", timestamps, partitions, stream),
            timestamp,
            default,
        )

    def offset(self, part: PartitionLog) -> int:
        return self.offsets.get((part.topic, part.partition), self.default)

    def time(self, part: PartitionLog) -> int | None:
        """The timestamp ``part``'s bound is at (ms), None where an offset gives it."""
        if self.timestamp is not None:
            return self.timestamp
        return self.timestamps.get((part.topic, part.partition))


def _named(
    option: str,
    triples: tuple[tuple[str, int, int], ...] | None,
    partitions: Sequence[PartitionLog],
    stream: bool,
) -> dict[TopicPartition, int]:
    if triples is None:
        return {}
    check_all_named(option, ((t, p) for t, p, _ in triples), partitions, stream=stream)
    return {(t, p): n for t, p, n in triples}


def _order(tp: TopicPartition) -> tuple[str, int]:
    return (tp[0] or "", -1 if tp[1] is None else tp[1])


def _partition_name(part: PartitionLog) -> str:
    return part.directory if part.topic is None else f"{part.topic}-{part.partition}"


def _names(names: Iterable[str]) -> str:
    listed = list(names)
    shown = ", ".join(listed[:SHOWN_NAMES])
    more = len(listed) - SHOWN_NAMES
    return f"{shown} and {more} more" if more > 0 else shown
