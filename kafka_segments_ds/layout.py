"""Discovery of Kafka partitions and segments on disk (FORMAT §6.1, §7.1).

A broker log dir (a ``log.dirs`` entry) holds one directory per partition replica::

    <log dir>/
      meta.properties, .lock, .kafka_cleanshutdown, *-checkpoint     ignored
      <topic>-<partition>/                                          e.g. my-topic.v2-13
        00000000000000368769.log        segment: batches from base offset 368769
        00000000000000368769.index      offset index    (optional)
        00000000000000368769.timeindex  time index      (optional)
        00000000000000368769.txnindex   aborted txns    (optional, created lazily)
        00000000000000368769.snapshot   producer state  ignored
        *.deleted, *.cleaned            transient       ignored
        *.swap                          replacement     read as the broker's loader would
        leader-epoch-checkpoint, partition.metadata     ignored
      <topic>-<partition>.<32 hex>-delete | -future | -stray/        skipped

The partition number is the text after the last ``-``; the topic (``[a-zA-Z0-9._-]``, at most 249
characters, not ``.`` or ``..``) may itself contain ``-`` and ``.``. Segment files are named by
their base offset, 20 digits zero-padded; the offset is the text before the first ``.``.

All listing goes through ``pyarrow.fs`` (``get_file_info`` / ``FileSelector``), whose results carry
file sizes, so planning thousands of segments costs a few listing calls and no per-file stat.
"""

from __future__ import annotations

import itertools
import logging
import os
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace

import pyarrow.fs as pafs

from kafka_segments_ds.errors import InvalidOptionError, UnsafePathError
from kafka_segments_ds.fs import glob_file_info, has_glob

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SWAP_SUFFIX = ".swap"
CLEANED_SUFFIX = ".cleaned"
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
SEGMENT_NAME_DIGITS = 20
MAX_TOPIC_LENGTH = 249
MAX_PARTITION = 2**31 - 1  # Kafka parses the partition with Integer.parseInt
MAX_OFFSET = 2**63 - 1
# the values of the read option ``layout``: a broker log dir, or a tiered-storage bucket layout
# (kafka_segments_ds.tiered.layouts discovers those; docs/TIERED.md)
LAYOUTS = ("auto", "broker", "aiven", "local-tiered", "pinterest", "linkedin-azure")
TIERED_LAYOUTS = LAYOUTS[2:]

# the characters of a topic name (its length and the names "." and ".." are checked apart)
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_DIGITS = re.compile(r"[0-9]+")
# Kafka's names for a replica awaiting deletion, moving between log dirs, or not assigned here:
# '<topic>-<partition>.<uuid without dashes>-<suffix>' (the topic may be truncated).
_SPECIAL_PARTITION_DIR = re.compile(r".*-[0-9]+\.[0-9a-fA-F]{32}-(?:delete|future|stray)")

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One segment: its ``.log`` file and the sibling index files that exist."""

    path: str  # the .log file
    base_offset: int  # from the file name
    size: int  # .log size in bytes
    index_path: str | None  # sibling .index, if present
    timeindex_path: str | None
    txnindex_path: str | None
    index_size: int = 0
    timeindex_size: int = 0
    txnindex_size: int = 0
    # Tiered storage (kafka_segments_ds.tiered): where overlapping copies share offsets, only
    # [read_from, read_until) of this one is read; last_offset / max_timestamp come from a
    # manifest (pruning without reading the .log); chunk_size > 0: the .log is stored in chunks
    # of that many original bytes, each decoded whole (planning cuts at chunk boundaries).
    read_from: int | None = None
    read_until: int | None = None
    last_offset: int | None = None
    max_timestamp: int | None = None
    chunk_size: int = 0


@dataclass(frozen=True, slots=True)
class PartitionLog:
    """The segments of one partition directory, sorted by base offset."""

    topic: str | None  # None when the directory is not named <topic>-<partition>
    partition: int | None
    directory: str
    segments: tuple[SegmentRef, ...]
    # the directory's modification time (ns) as its listing began (local disk; else None):
    # a commit into it since changes it (kafka_segments_ds.selection.discover_root)
    listed_ns: int | None = None
    # a tiered-storage bucket's (kafka_segments_ds.tiered), and its topic id where its keys
    # name it (Kafka's base64 form, as a broker's partition.metadata writes it)
    remote: bool = False
    topic_id: str | None = None


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """``'<topic>-<partition>'`` -> ``(topic, partition)``; ``None`` if not a plain partition dir.

    Splits at the last ``-`` as Kafka does, so ``-delete``/``-future``/``-stray`` directories
    (whose last component is not a number) and invalid topics give ``None``.
    """
    topic, dash, partition = name.rpartition("-")
    if not dash or not _DIGITS.fullmatch(partition) or not TOPIC_NAME.fullmatch(topic):
        return None
    if len(topic) > MAX_TOPIC_LENGTH or topic in (".", ".."):
        return None
    number = int(partition)
    if number > MAX_PARTITION:
        return None
    return topic, number


def is_special_partition_dir(name: str) -> bool:
    """True for ``<topic>-<partition>.<uuid>-delete``, ``-future`` and ``-stray`` directories."""
    return _SPECIAL_PARTITION_DIR.fullmatch(name) is not None


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """``'00000000000000000123.log'`` -> ``(123, '.log')``; ``None`` when not offset-named.

    The base offset is the text before the first ``.`` and must be all digits (Kafka writes 20;
    any count is accepted). The suffix is the rest, e.g. ``.index`` or ``.log.deleted``.
    """
    stem, dot, rest = name.partition(".")
    if not dot or not _DIGITS.fullmatch(stem):
        return None
    return int(stem), dot + rest


def segment_file_name(base_offset: int, suffix: str) -> str:
    """File name for a segment file: ``segment_file_name(123, '.log')`` -> 20 digits + ``.log``."""
    if base_offset < 0:
        raise ValueError(f"base offset must be >= 0, got {base_offset}")
    if not suffix.startswith("."):
        suffix = "." + suffix
    return f"{base_offset:0{SEGMENT_NAME_DIGITS}d}{suffix}"


def discover(
    path: str, filesystem: pafs.FileSystem, checked: set[str] | None = None
) -> list[PartitionLog]:
    """Find the partitions and segments under ``path``, sorted by (topic, partition).

    ``path`` (already resolved for ``filesystem``, see :func:`kafka_segments_ds.fs.resolve`) is
    a log dir, one partition directory, a single ``.log`` file, or a glob whose matches are each
    one of these. A directory holding ``.log`` segment files is a partition directory; any other
    directory is a log dir whose ``<topic>-<partition>`` subdirectories are read. Skipped:
    transient ``.deleted``/``.cleaned``/``.swap`` files, snapshots, checkpoints, metadata files,
    index files without a ``.log``, ``-delete``/``-future``/``-stray`` directories (inside a log
    dir or matched by a glob; a directory named explicitly is read, with topic ``None``), and
    files a glob matches that are not ``.log`` segments.

    Raises ``FileNotFoundError`` when ``path`` does not exist or a glob matches nothing, and
    :class:`InvalidOptionError` when ``path`` names a file that is not a ``.log`` segment. A
    directory without segments gives an empty list. ``checked``: the files that passed the
    symbolic link check before (:func:`refuse_escapes`), for a caller that lists again and again.
    """
    path = path.rstrip("/") or "/"
    try:
        result = list_path(path, filesystem)
    except UnicodeDecodeError as err:
        raise UnsafePathError(f"a file name under {path} is not valid UTF-8: {err}") from err
    if isinstance(filesystem, pafs.LocalFileSystem):
        refuse_escapes(path, result, checked)
    return result


def merge_partitions(
    partitions: Iterable[PartitionLog],
    location: Callable[[str], str] | None = None,
    next_offset: Callable[[SegmentRef], int] | None = None,
    topic_id: Callable[[PartitionLog], str | None] | None = None,
) -> list[PartitionLog]:
    """One PartitionLog per directory, each segment once: the union of what overlapping inputs
    (a log dir and one of its partition dirs, a dir and one of its ``.log`` files, globs that
    match the same files) found, in first-seen order. ``location`` maps a path to where it
    really is (on local disk: through symbolic links), so that one file reached by two paths
    is read once; by default a path is its location. A directory reached by several names is
    labelled by its own name when that is ``<topic>-<partition>`` (else by the first name that
    is), whatever the order of the inputs. Given ``next_offset`` (the offset after a segment's
    last entry), a read of records: :func:`join_copies` (``topic_id``: a broker partition
    directory's topic id)."""
    where = location or (lambda path: path)
    merged: dict[str, PartitionLog] = {}
    for partition in partitions:
        key = where(partition.directory)
        seen = merged.get(key)
        if seen is None:
            merged[key] = partition
            continue
        by_place = {where(seg.path): seg for seg in partition.segments}
        by_place.update((where(seg.path), seg) for seg in seen.segments)  # first seen wins
        ordered = sorted(by_place.values(), key=lambda s: (s.base_offset, s.path))
        topic, number = seen.topic, seen.partition
        if location is not None and (own := parse_partition_dir_name(posixpath.basename(key))):
            topic, number = own
        elif topic is None:
            topic, number = partition.topic, partition.partition
        merged[key] = replace(
            seen, topic=topic, partition=number, segments=tuple(ordered), listed_ns=seen.listed_ns
        )
    found = list(merged.values())
    return found if next_offset is None else join_copies(found, next_offset, topic_id)


def join_copies(
    partitions: list[PartitionLog],
    next_offset: Callable[[SegmentRef], int],
    topic_id: Callable[[PartitionLog], str | None] | None = None,
) -> list[PartitionLog]:
    """Pieces of one ``<topic>-<partition>`` in different places read as one partition.

    Broker partition directories of the same name: their segments in offset order, when each
    piece ends (``next_offset`` of its last segment) at or before the next one begins (an
    archive kept in pieces), else :class:`InvalidOptionError`: copies of one partition
    (replicas from two brokers, a backup and its source) would give records twice, and a topic
    of the same name from two clusters two records one key. The same for pieces in
    tiered-storage buckets.

    A tiered bucket's piece and a log dir's (a tiered topic read whole): each offset from one
    of them, as a broker serves it (:func:`_tiered_then_local`). Their topic ids (the bucket's
    keys, the log dir's ``partition.metadata``, ``topic_id``) must agree where both are known:
    a topic deleted and created again under the same name is another topic."""
    brokers: dict[tuple[str, int], list[PartitionLog]] = {}
    remotes: dict[tuple[str, int], list[PartitionLog]] = {}
    for part in partitions:
        if not part.segments or part.topic is None or part.partition is None:
            continue
        key = (part.topic, part.partition)
        if part.remote:
            remotes.setdefault(key, []).append(part)
        elif parse_partition_dir_name(posixpath.basename(part.directory)) == key:
            brokers.setdefault(key, []).append(part)
    joined: dict[int, PartitionLog | None] = {}
    for key in [*brokers, *(k for k in remotes if k not in brokers)]:
        local, tiered = brokers.get(key, []), remotes.get(key, [])
        if len(local) + len(tiered) < 2:
            continue
        if local and tiered:
            whole = _tiered_then_local(
                _chain(tiered, next_offset), _chain(local, next_offset), next_offset, topic_id
            )
        else:
            whole = _chain(local or tiered, next_offset)
        first, *others = local or tiered
        joined[id(first)] = whole
        joined.update((id(part), None) for part in (*others, *(tiered if local else ())))
    out = []
    for part in partitions:
        replacement = joined.get(id(part), part)
        if replacement is not None:
            out.append(replacement)
    return out


def _chain(parts: list[PartitionLog], next_offset: Callable[[SegmentRef], int]) -> PartitionLog:
    """Pieces of one partition of one kind (broker directories, or buckets) as one, each
    ending at or before the next begins; else :class:`InvalidOptionError`."""
    if len(parts) == 1:
        return parts[0]
    parts = sorted(parts, key=lambda p: p.segments[0].base_offset)
    for before, after in itertools.pairwise(parts):
        begins = after.segments[0].base_offset
        last = before.segments[-1]
        if last.base_offset >= begins or next_offset(last) > begins:
            raise InvalidOptionError(
                f"{before.topic}-{before.partition} is in two directories whose offsets "
                f"overlap, {before.directory} (segments {_bases(before)}) and {after.directory} "
                f"({_bases(after)}): the same offsets twice (replicas from two brokers? one "
                "topic from two clusters?) break the (topic, partition, offset) key; read "
                "them apart"
            )
    segments = tuple(seg for part in parts for seg in part.segments)
    return replace(parts[0], segments=segments, listed_ns=None)


def _tiered_then_local(
    tiered: PartitionLog,
    local: PartitionLog,
    next_offset: Callable[[SegmentRef], int],
    topic_id: Callable[[PartitionLog], str | None] | None,
) -> PartitionLog:
    """A partition's tiered segments and its log dir's as one, each offset once, as a broker
    serves a fetch: from the log dir from its first segment's base offset ``L`` to its end
    ``E``, from the bucket below ``L`` (a bucket segment reaching past ``L`` is read up to it)
    and from ``E`` on (a bucket newer than the log dir). A bucket segment inside ``[L, E)`` is
    the log dir's copy (with the default ``local.retention.ms`` a broker keeps what it
    uploaded) and is not read."""
    name = f"{local.topic}-{local.partition}"
    ids = {tiered.topic_id, topic_id(local) if topic_id is not None else None} - {None}
    if len(ids) > 1:
        raise InvalidOptionError(
            f"{name}: the tiered segments in {tiered.directory} are of topic id "
            f"{tiered.topic_id}, the log dir's {local.directory} of another (its "
            "partition.metadata): a topic deleted and created again under the same name? "
            "read them apart"
        )
    low = local.segments[0].base_offset
    segs = tiered.segments
    high: int | None = None  # the log dir's end, found when a bucket segment reaches past low

    def end_of(i: int, seg: SegmentRef) -> int:
        """The offset after a bucket segment's: a manifest's last offset, its cut, the next
        segment's base, or its tail."""
        if seg.last_offset is not None:
            return seg.last_offset + 1
        if seg.read_until is not None:
            return seg.read_until
        if i + 1 < len(segs):
            return segs[i + 1].base_offset
        return next_offset(seg)

    before: list[SegmentRef] = []
    after: list[SegmentRef] = []
    dropped: list[str] = []
    for i, seg in enumerate(segs):
        start = seg.base_offset if seg.read_from is None else seg.read_from
        if start < low:
            until = low if seg.read_until is None else min(seg.read_until, low)
            before.append(replace(seg, read_until=until))
        end = end_of(i, seg)
        if end <= low:
            continue
        if high is None:
            high = max(low, next_offset(local.segments[-1]))
        if end > high:  # (a part of it) beyond the log dir's end
            after.append(replace(seg, read_from=max(start, high)))
        elif start >= low:
            dropped.append(posixpath.basename(seg.path))
    if dropped:
        _logger.info(
            "%s: %d tiered segments hold offsets the log dir %s holds too; read from the log "
            "dir (%s)",
            name,
            len(dropped),
            local.directory,
            ", ".join(dropped[:3]) + (", ..." if len(dropped) > 3 else ""),
        )
    return replace(local, segments=(*before, *local.segments, *after))


def segment_directories(part: PartitionLog) -> list[str]:
    """The directories ``part``'s segments are in (more than its own when joined)."""
    return sorted({part.directory, *(posixpath.dirname(seg.path) for seg in part.segments)})


def _bases(part: PartitionLog) -> str:
    bases = [seg.base_offset for seg in part.segments]
    shown = ", ".join(str(b) for b in bases[:3])
    return shown + (f", ... {bases[-1]}" if len(bases) > 3 else "")


def refuse_escapes(
    path: str, partitions: list[PartitionLog], checked: set[str] | None = None
) -> None:
    """Refuse segment files that resolve (through symbolic links) outside the input: a
    hostile archive must not make the reader expose files elsewhere on the machine.
    ``checked`` holds files that passed before (a caller listing again and again: a realpath
    per file is most of a listing's cost); those that pass now are added to it."""
    fixed = "/".join(itertools.takewhile(lambda part: not has_glob(part), path.split("/")))
    fixed = fixed or "/"
    root = os.path.realpath(fixed if os.path.isdir(fixed) else os.path.dirname(fixed))
    for partition in partitions:
        for seg in partition.segments:
            for file in (seg.path, seg.index_path, seg.timeindex_path, seg.txnindex_path):
                if file is None or (checked is not None and file in checked):
                    continue
                real = os.path.realpath(file)
                if os.path.commonpath([root, real]) != root:
                    raise UnsafePathError(
                        f"{file} resolves to {real}, outside the input {root} (symbolic link)"
                    )
                if checked is not None:
                    checked.add(file)


def list_path(path: str, filesystem: pafs.FileSystem) -> list[PartitionLog]:
    """:func:`discover` without the symbolic link check (``path`` without a trailing slash):
    a caller that lists again and again checks only the files it has not seen
    (:func:`refuse_escapes`)."""
    found: dict[str, _Partition] = {}

    if has_glob(path):
        matches = glob_file_info(filesystem, path)
        if not matches:
            raise FileNotFoundError(f"no file or directory matches {path}")
        log_files: dict[str, set[str]] = {}
        for info in matches:
            if info.type == pafs.FileType.Directory:
                if not is_special_partition_dir(info.base_name):
                    _discover_directory(filesystem, info.path, found)
            elif _is_log_file(info.base_name):
                parent = posixpath.dirname(info.path)
                if not is_special_partition_dir(posixpath.basename(parent)):
                    log_files.setdefault(parent, set()).add(info.path)
        for directory, paths in log_files.items():
            _discover_log_files(filesystem, directory, paths, found)
    else:
        info = filesystem.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"no such file or directory: {path}")
        if info.type == pafs.FileType.Directory:
            _discover_directory(filesystem, path, found)
        elif _is_log_file(info.base_name):
            _discover_log_files(filesystem, posixpath.dirname(path), {path}, found)
        else:
            raise InvalidOptionError(
                f"{path} is not a Kafka segment file (expected <20-digit base offset>.log), "
                "a partition directory or a log directory"
            )

    result = [partition.freeze() for partition in found.values() if partition.segments]
    result.sort(
        key=lambda p: (
            p.topic is None,
            p.topic or "",
            -1 if p.partition is None else p.partition,
            p.directory,
        )
    )
    return result


def partitions_from_listings(
    listings: Mapping[str, Iterable[pafs.FileInfo]],
) -> list[PartitionLog]:
    """The partitions held by already-listed directories (directory -> its files), each
    directory's segments as :func:`discover` finds them; directories without a segment are
    left out."""
    found: dict[str, _Partition] = {}
    for directory, files in listings.items():
        _collect(directory, files, None, found)
    return [p.freeze() for p in found.values() if p.segments]


# --------------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Partition:
    """Mutable accumulator for one directory; a glob may reach it more than once."""

    directory: str
    segments: dict[str, SegmentRef]
    listed_ns: int | None = None

    def freeze(self) -> PartitionLog:
        parsed = parse_partition_dir_name(posixpath.basename(self.directory))
        topic, partition = parsed if parsed is not None else (None, None)
        ordered = sorted(self.segments.values(), key=lambda s: (s.base_offset, s.path))
        return PartitionLog(topic, partition, self.directory, tuple(ordered), self.listed_ns)


def _is_log_file(name: str) -> bool:
    parsed = parse_segment_file_name(name)
    return parsed is not None and parsed[1] == LOG_SUFFIX


def _is_segment_data(name: str) -> bool:
    """A ``.log``, or the ``.log.swap`` of an interrupted replacement (what makes a directory a
    partition directory)."""
    parsed = parse_segment_file_name(name)
    return parsed is not None and parsed[1] in (LOG_SUFFIX, LOG_SUFFIX + SWAP_SUFFIX)


def _discover_directory(
    filesystem: pafs.FileSystem, directory: str, found: dict[str, _Partition]
) -> None:
    """Read a partition directory or a log dir with a single recursive listing."""
    # One recursive listing is one paginated request on object stores, far cheaper than a
    # listing per partition directory; levels below the partition directories are ignored.
    local = isinstance(filesystem, pafs.LocalFileSystem)
    own_ns = mtime_ns(directory) if local else None  # (before its listing)
    children: dict[str, list[pafs.FileInfo]] = {}
    times: dict[str, int | None] = {}  # a directory's time, stat'ed before it was walked
    for info in filesystem.get_file_info(pafs.FileSelector(directory, recursive=True)):
        children.setdefault(posixpath.dirname(info.path), []).append(info)
        if local and info.type == pafs.FileType.Directory:
            times[info.path] = info.mtime_ns

    top = children.get(directory, [])
    if any(info.type == pafs.FileType.File and _is_segment_data(info.base_name) for info in top):
        _collect(directory, top, None, found, filesystem)
        found[directory].listed_ns = own_ns
        return
    if isinstance(filesystem, pafs.LocalFileSystem):
        # a partition dir whose only segment is one; a log dir's partition dir that is one
        _refuse_dangling_links(directory, top, partitions=True)
    for info in top:
        if info.type == pafs.FileType.Directory and parse_partition_dir_name(info.base_name):
            _collect(info.path, children.get(info.path, []), None, found, filesystem)
            found[info.path].listed_ns = times.get(info.path)


def mtime_ns(path: str) -> int | None:
    """A local directory's or file's modification time (ns), or None when it is not there."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _discover_log_files(
    filesystem: pafs.FileSystem,
    directory: str,
    paths: set[str],
    found: dict[str, _Partition],
) -> None:
    """Read the named ``.log`` files of one directory, with their index siblings."""
    listing = filesystem.get_file_info(pafs.FileSelector(directory or "/"))
    listed = {info.path for info in listing}
    missing = sorted(paths - listed)
    if missing:
        raise FileNotFoundError(f"no such file or directory: {missing[0]}")
    _collect(directory, listing, paths, found, filesystem)


def _collect(
    directory: str,
    files: Iterable[pafs.FileInfo],
    only: set[str] | None,
    found: dict[str, _Partition],
    filesystem: pafs.FileSystem | None = None,
) -> None:
    """Turn one directory's listing into SegmentRefs (restricted to ``only`` when given).
    Given ``filesystem``, the ``.swap`` files of an interrupted segment replacement take the
    place of the segments they replace (:func:`_complete_swaps`)."""
    files = list(files)
    if isinstance(filesystem, pafs.LocalFileSystem):
        _refuse_dangling_links(directory, files, only)
    logs: dict[str, pafs.FileInfo] = {}
    siblings: dict[tuple[str, str], pafs.FileInfo] = {}
    swaps: dict[str, pafs.FileInfo] = {}  # stem -> <stem>.log.swap
    swap_siblings: dict[tuple[str, str], pafs.FileInfo] = {}  # (stem, .index) -> .index.swap
    cleaned: list[int] = []
    for info in files:
        if info.type != pafs.FileType.File:
            continue
        parsed = parse_segment_file_name(info.base_name)
        if parsed is None:
            continue  # checkpoints, partition.metadata, KRaft <offset>-<epoch>.checkpoint, ...
        stem = info.base_name.partition(".")[0]
        suffix = parsed[1]
        if parsed[0] > MAX_OFFSET and suffix in (LOG_SUFFIX, LOG_SUFFIX + SWAP_SUFFIX):
            raise UnsafePathError(f"{info.path}: base offset {stem} exceeds 2^63 - 1")
        if suffix == LOG_SUFFIX:
            logs[stem] = info
        elif suffix in _INDEX_SUFFIXES:
            siblings[(stem, suffix)] = info
        elif suffix == LOG_SUFFIX + SWAP_SUFFIX:
            swaps[stem] = info
        elif suffix.endswith(SWAP_SUFFIX) and suffix[: -len(SWAP_SUFFIX)] in _INDEX_SUFFIXES:
            swap_siblings[(stem, suffix[: -len(SWAP_SUFFIX)])] = info
        elif suffix.endswith(CLEANED_SUFFIX):
            cleaned.append(parsed[0])
        # Anything else (.snapshot, .deleted, a snapshot's .swap, ...) is not data to read.

    wanted = {stem for stem, info in logs.items() if only is None or info.path in only}
    kept_swaps: dict[str, pafs.FileInfo] = {}
    if swaps and filesystem is not None:
        kept_swaps = _complete_swaps(directory, logs, swaps, cleaned, filesystem, swap_siblings)
        if only is not None and wanted <= logs.keys():
            kept_swaps = {}  # no named file replaced: read as named
    elif swaps:
        # a listing without a file system to read the .swap files (a tiered bucket's, where
        # no broker leaves one) keeps the regular files
        _logger.warning(
            "%s holds unfinished .swap files (%s); reading the regular segment files instead",
            directory,
            ", ".join(sorted(info.base_name for info in swaps.values())),
        )
    logs = {stem: info for stem, info in logs.items() if stem in wanted}  # (less the replaced)

    chosen = [(stem, info, siblings) for stem, info in logs.items()]
    chosen += [(stem, info, swap_siblings) for stem, info in kept_swaps.items()]
    partition = found.setdefault(directory, _Partition(directory, {}))
    for stem, info, named in chosen:
        index = named.get((stem, INDEX_SUFFIX))
        timeindex = named.get((stem, TIME_INDEX_SUFFIX))
        txnindex = named.get((stem, TXN_INDEX_SUFFIX))
        partition.segments[info.path] = SegmentRef(
            path=info.path,
            base_offset=int(stem),
            size=int(info.size),
            index_path=None if index is None else index.path,
            timeindex_path=None if timeindex is None else timeindex.path,
            txnindex_path=None if txnindex is None else txnindex.path,
            index_size=0 if index is None else int(index.size),
            timeindex_size=0 if timeindex is None else int(timeindex.size),
            txnindex_size=0 if txnindex is None else int(txnindex.size),
        )


class DanglingSegmentLinkError(FileNotFoundError):
    """A segment file that is a symbolic link to nothing (not a file that went meanwhile)."""


# the partitions a read selects (subscribe / assign), set around its listing: a partition
# directory linked to nothing is refused only when the read wants it
WANTED_PARTITIONS: ContextVar[Callable[[str, int], bool] | None] = ContextVar(
    "WANTED_PARTITIONS", default=None
)


def _refuse_dangling_links(
    directory: str,
    files: list[pafs.FileInfo],
    only: set[str] | None = None,
    *,
    partitions: bool = False,
) -> None:
    """A segment file (or, with ``partitions``, a partition directory) that is a symbolic link
    to nothing (a volume not mounted) is missing data: raise FileNotFoundError naming it
    (pyarrow's listing leaves such links out)."""
    listed = {info.base_name for info in files}
    try:
        names = os.listdir(directory)
    except OSError:
        return  # gone meanwhile: the reads that follow say so
    for name in names:
        if name in listed:
            continue
        parsed = parse_segment_file_name(name)
        partition = parse_partition_dir_name(name) if partitions else None
        if partition is not None:
            wanted = WANTED_PARTITIONS.get()
            if wanted is not None and not wanted(*partition):
                continue  # a partition the read does not select
        elif parsed is None or parsed[1] not in (LOG_SUFFIX, LOG_SUFFIX + SWAP_SUFFIX):
            continue
        path = posixpath.join(directory, name)
        if only is not None and path not in only:
            continue  # (named files are read: the others are not in question)
        if os.path.islink(path) and not os.path.exists(path):
            raise DanglingSegmentLinkError(
                f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: "
                "its records cannot be read (a volume not mounted?)"
            )


def _complete_swaps(
    directory: str,
    logs: dict[str, pafs.FileInfo],
    swaps: dict[str, pafs.FileInfo],
    cleaned: list[int],
    filesystem: pafs.FileSystem,
    swap_siblings: Mapping[tuple[str, str], pafs.FileInfo],
) -> dict[str, pafs.FileInfo]:
    """What the broker's log loader makes of the ``.swap`` files of a replacement that a crash
    interrupted (FORMAT §7.2; Kafka's ``LogLoader``): a ``.swap`` at or above the lowest
    ``.cleaned`` base offset belongs to an unfinished split and is dropped; the others are
    finished segments that replace every segment whose base offset lies from the lowest swap
    base offset up to the highest swap next offset (and one of the same name). Removes the
    replaced ones from ``logs`` and returns the swaps to read (stem -> ``.log.swap`` file)."""
    lowest_cleaned = min(cleaned, default=None)
    unfinished = sorted(
        info.base_name
        for stem, info in swaps.items()
        if lowest_cleaned is not None and int(stem) >= lowest_cleaned
    )
    if unfinished:
        _logger.warning(
            "%s: %s belong to an unfinished split (.cleaned files from offset %d); not read, "
            "as the broker deletes them",
            directory,
            ", ".join(unfinished),
            lowest_cleaned,
        )
    kept = {
        stem: info
        for stem, info in swaps.items()
        if lowest_cleaned is None or int(stem) < lowest_cleaned
    }
    if not kept:
        return {}
    low = min(int(stem) for stem in kept)
    high = max(
        _next_offset(filesystem, info, int(stem), swap_siblings.get((stem, INDEX_SUFFIX)))
        for stem, info in kept.items()
    )
    replaced = sorted(stem for stem in logs if low <= int(stem) < high or stem in kept)
    for stem in replaced:
        del logs[stem]
    _logger.warning(
        "%s: a segment replacement (log compaction or a split) was interrupted; reading %s as "
        "the broker would on restart, in place of %s",
        directory,
        ", ".join(sorted(info.base_name for info in kept.values())),
        ", ".join(f"{stem}.log" for stem in replaced) or "segments already renamed .deleted",
    )
    return kept


def _next_offset(
    filesystem: pafs.FileSystem, info: pafs.FileInfo, base: int, index: pafs.FileInfo | None
) -> int:
    """The offset after the last entry of a ``.log.swap`` (Kafka's ``readNextOffset``: its base
    offset when it holds none), walked from its ``.index.swap``'s last entry when that checks
    out, else from its start (:func:`kafka_segments_ds.tail.segment_tail`)."""
    from kafka_segments_ds.tail import segment_tail  # (a swap is rare: imported when met)

    seg = SegmentRef(
        path=info.path,
        base_offset=base,
        size=int(info.size),
        index_path=None if index is None else index.path,
        timeindex_path=None,
        txnindex_path=None,
        index_size=0 if index is None else int(index.size),
    )
    return max(base, segment_tail(filesystem, seg).next_offset)
