"""What a read covers: every path resolved and discovered, each segment once; the partitions
``subscribe`` / ``subscribePattern`` / ``assign`` select; the checks that make an input without
Kafka data, a selection naming what is not there, or offsets JSON naming only some of the
selected partitions an error rather than a silent empty or partial result.

Batch reads (:func:`kafka_segments_ds.planning.plan_scan`) apply all of it; a stream lists
with :func:`select_partitions` only, as it waits for topics that do not exist yet.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import InvalidOptionError, KafkaSegmentsError, NoKafkaDataError
from kafka_segments_ds.journal import check_readable
from kafka_segments_ds.layout import TIERED_LAYOUTS, PartitionLog, merge_partitions
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.tiered import combine_filesystems, discover_layout, load_private_keys

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
    storage = options.storage_options()
    if filesystem is None:
        filesystem, roots = kfs.resolve_paths(paths, storage)
    else:
        roots = {}
        for path in paths:
            roots.setdefault(path.rstrip("/") or "/", path)
    keys = load_private_keys(dict(options.private_keys)) if options.private_keys else {}
    found: list[PartitionLog] = []
    views: list[pafs.FileSystem] = []
    for root, given in roots.items():
        try:
            if not kfs.has_glob(root):
                check_readable(filesystem, root)  # never a half-published write
            view, discovered = discover_layout(root, filesystem, options.layout, keys)
        except (KafkaSegmentsError, *PATH_ERRORS):
            raise
        except OSError as err:
            raise kfs.unreachable(err, filesystem, root, storage) from err
        if not options.allow_empty and not any(part.segments for part in discovered):
            raise NoKafkaDataError(no_data_message(given, options.layout))
        found.extend(discovered)
        views.append(view)
    location = None
    if len(roots) > 1 and isinstance(filesystem, pafs.LocalFileSystem):
        location = os.path.realpath  # one file reached through a symbolic link and directly
    # a tiered bucket is read through a view that serves its segments as plain ones
    return combine_filesystems(filesystem, views), merge_partitions(found, location)


def no_data_message(path: str, layout: str) -> str:
    """Why ``path`` gives nothing to read, and what to do about it."""
    hint = (
        f"is it a tiered-storage bucket of another layout than {layout}?"
        if layout != "auto"
        else "for a tiered-storage bucket of a layout not recognised, set the option layout "
        f"({', '.join(TIERED_LAYOUTS)})"
    )
    return (
        f"{path}: no Kafka log segments (<20-digit offset>.log files) in it, in its "
        f"<topic>-<partition> subdirectories, or matching it ({hint}; allowEmpty=true reads "
        "an input without Kafka data as 0 rows)"
    )


def select_partitions(partitions: list[PartitionLog], options: ReadOptions) -> list[PartitionLog]:
    """The partitions ``subscribe`` / ``subscribePattern`` / ``assign`` select, in (topic,
    partition) order."""
    if options.subscribe is not None:
        wanted = set(options.subscribe)
        partitions = [p for p in partitions if p.topic in wanted]
    elif options.subscribe_pattern is not None:
        pattern = re.compile(options.subscribe_pattern)
        partitions = [p for p in partitions if p.topic is not None and pattern.fullmatch(p.topic)]
    elif options.assign is not None:
        wanted_parts = set(options.assign)
        partitions = [p for p in partitions if (p.topic, p.partition) in wanted_parts]
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


def _order(tp: TopicPartition) -> tuple[str, int]:
    return (tp[0] or "", -1 if tp[1] is None else tp[1])


def _partition_name(part: PartitionLog) -> str:
    return part.directory if part.topic is None else f"{part.topic}-{part.partition}"


def _names(names: Iterable[str]) -> str:
    listed = list(names)
    shown = ", ".join(listed[:SHOWN_NAMES])
    more = len(listed) - SHOWN_NAMES
    return f"{shown} and {more} more" if more > 0 else shown
