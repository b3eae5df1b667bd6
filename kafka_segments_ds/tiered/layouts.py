"""Discovery of tiered-storage buckets (KIP-405 and raw uploaders, TIERED.md §1-3).

Layouts, by the keys below the path given (any prefix above them; ``<seg>`` is
``<offset:020d>-<segmentId>``):

``aiven``          ``<topic>-<topicId>/<partition>/<seg>.{log,indexes,rsm-manifest}``
                   (pre-2023-10: ``.index``/``.timeindex``/``.txnindex`` objects, no ``.indexes``)
``local-tiered``   Kafka's LocalTieredStorage:
                   ``<topic>-<partition>-<topicId>/<seg>.{log,index,timeindex,txnindex}``
``pinterest``      ``[<hash bits>/]<cluster>/<topic>-<partition>/<offset:020d>.{log,index,...}``
                   at any depth (broker-style partition directories; never guessed: a broker
                   log dir's parent must not pass for data)
``linkedin-azure`` ``[<prefix>-]<topicId as UUID>/<partition>.<segmentId as UUID>.{SEGMENT,OFFSET,
                   TIMESTAMP,TRANSACTION,...}``: the topic column holds the topic id (the names
                   carry no topic name) and the base offset is read from each segment's first entry

Ids are 22 characters of URL-safe base64 (Kafka's ``Uuid.toString``). An Aiven segment counts
only once its ``.rsm-manifest`` exists (the plugin writes it last).

Overlapping segments (a copy retried after a leader change, a delete in flight) are resolved
per partition so that each offset is read once (:func:`resolve_overlaps`).
"""

from __future__ import annotations

import logging
import posixpath
import re
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import InvalidOptionError, StorageError, UnsafePathError
from kafka_segments_ds.layout import (
    INDEX_SUFFIX,
    LAYOUTS,
    LOG_SUFFIX,
    MAX_OFFSET,
    TIERED_LAYOUTS,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    PartitionLog,
    SegmentRef,
    discover,
    parse_partition_dir_name,
    partitions_from_listings,
    refuse_escapes,
)
from kafka_segments_ds.tiered.aiven import (
    INDEXES_SUFFIX,
    MANIFEST_SUFFIX,
    ManifestError,
    SegmentManifest,
    parse_manifest,
    parse_stem,
    plain_size,
)
from kafka_segments_ds.tiered.storage import TieredHandler, tiered_filesystem

FETCH_THREADS = 16  # manifests / first entries fetched at once at discovery
_ID = r"[A-Za-z0-9_-]{22}"
_AIVEN_TOPIC_DIR = re.compile(rf"(?P<topic>.+)-(?P<topic_id>{_ID})")
_LOCAL_DIR = re.compile(rf"(?P<topic>.+)-(?P<partition>[0-9]+)-(?P<topic_id>{_ID})")
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_AZURE_CONTAINER = re.compile(rf"(?:.*-)?(?P<topic_id>{_UUID})")
_AZURE_BLOB = re.compile(rf"(?P<partition>[0-9]+)\.(?P<segment_id>{_UUID})\.(?P<kind>[A-Z_]+)")
_AZURE_KINDS = {
    "SEGMENT": LOG_SUFFIX,
    "OFFSET": INDEX_SUFFIX,
    "TIMESTAMP": TIME_INDEX_SUFFIX,
    "TRANSACTION": TXN_INDEX_SUFFIX,
}
_LOCAL_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A segment before overlaps are resolved, with what ranks copies of the same offsets."""

    ref: SegmentRef
    event_timestamp: int = -1


# parsed Aiven manifests by (stem, manifest size, .log size, .indexes size): see discover_layout
ManifestCache = dict[tuple[str, int, int, int], SegmentManifest]


def discover_layout(
    path: str,
    filesystem: pafs.FileSystem,
    layout: str = "auto",
    private_keys: Mapping[str, bytes] | None = None,
    *,
    tiered_only: bool = False,
    manifests: ManifestCache | None = None,
    checked: set[str] | None = None,
) -> tuple[pafs.FileSystem, list[PartitionLog]]:
    """Partitions under ``path`` in any supported layout, and the filesystem to read them with
    (a :class:`TieredHandler` view for Aiven buckets, else ``filesystem``).

    ``layout="auto"`` reads broker log dirs as :func:`kafka_segments_ds.layout.discover` does
    and, when that finds no segment under a directory, looks for the tiered layouts; finding
    more than one of them is an error asking for ``layout``. ``tiered_only`` skips the broker
    listing (a caller that knows ``path`` is a bucket). ``manifests`` keeps parsed Aiven
    manifests between calls (a stream listing the same bucket every trigger): an object
    written once, read again only if the listing shows other sizes; ``checked`` the local
    files that passed the symbolic link check (:func:`~kafka_segments_ds.layout.refuse_escapes`).
    """
    if layout not in LAYOUTS:
        raise InvalidOptionError(
            f"option layout must be one of {', '.join(LAYOUTS)}, not {layout!r}"
        )
    if layout == "broker" or kfs.has_glob(path):
        if layout not in ("auto", "broker"):
            raise InvalidOptionError(f"layout {layout} does not take glob patterns: {path}")
        return filesystem, discover(path, filesystem, checked)
    root = path.rstrip("/") or "/"
    if layout == "auto" and not tiered_only:
        try:
            found = discover(path, filesystem, checked)  # FileNotFoundError when missing
        except InvalidOptionError:
            if _tiered_stem(root) is None:
                raise  # a file that is no segment of any layout
            found = []
        if found:
            return filesystem, found  # a broker log dir: no request more than before
    info = filesystem.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"no such file or directory: {root}")
    stem = None
    if info.type == pafs.FileType.File:
        stem = _tiered_stem(info.path)
        if stem is None:
            raise InvalidOptionError(f"{root} is not a segment file of the {layout} layout")
        root = posixpath.dirname(info.path)
    listing = filesystem.get_file_info(pafs.FileSelector(root, recursive=True))
    if stem is not None:  # one segment: its own objects only
        listing = [i for i in listing if i.path.startswith(stem + ".")]
    return _discover_tiered(
        root, filesystem, listing, layout, dict(private_keys or {}), manifests, checked
    )


def _tiered_stem(path: str) -> str | None:
    """``path`` without its suffix when it names a tiered segment's ``.log`` (or Azure
    ``SEGMENT``) object, else None."""
    name = posixpath.basename(path)
    parsed = parse_stem(name)
    if parsed is not None and parsed[2] == LOG_SUFFIX:
        return path[: -len(LOG_SUFFIX)]
    match = _AZURE_BLOB.fullmatch(name)
    if match is not None and match["kind"] == "SEGMENT":
        return path[: -len(".SEGMENT")]
    return None


def is_tiered_segment(segment: SegmentRef) -> bool:
    """True for a segment named by a tiered layout (not ``<20-digit offset>.log``)."""
    return _tiered_stem(segment.path) is not None


def _discover_tiered(
    root: str,
    filesystem: pafs.FileSystem,
    listing: list[pafs.FileInfo],
    layout: str,
    private_keys: dict[str, bytes],
    manifests: ManifestCache | None = None,
    checked: set[str] | None = None,
) -> tuple[pafs.FileSystem, list[PartitionLog]]:
    by_dir: dict[str, list[pafs.FileInfo]] = {}
    for info in listing:
        if info.type == pafs.FileType.File:
            by_dir.setdefault(posixpath.dirname(info.path), []).append(info)
    kinds: dict[str, dict[str, list[pafs.FileInfo]]] = {}
    for directory, files in by_dir.items():
        kind = _classify(directory, files, layout)
        if kind is not None:
            kinds.setdefault(kind, {})[directory] = files
    if len(kinds) > 1:
        raise InvalidOptionError(
            f"{kfs.display_path(filesystem, root)} holds segments of several layouts "
            f"({', '.join(sorted(kinds))}): choose one with the layout option"
        )
    if not kinds:
        return filesystem, []
    kind, dirs = next(iter(kinds.items()))
    result_fs: pafs.FileSystem = filesystem
    if kind == "aiven":
        result_fs, handler = tiered_filesystem(filesystem, dirs, private_keys.items())
        partitions = _aiven(filesystem, handler, dirs, manifests)
    elif kind == "local-tiered":
        partitions = [_local_tiered(d, files) for d, files in dirs.items()]
    elif kind == "pinterest":
        partitions = [replace(p, remote=True) for p in partitions_from_listings(dirs)]
    else:
        partitions = _linkedin_azure(filesystem, dirs)
    partitions = [p for p in partitions if p.segments]
    partitions.sort(key=lambda p: (p.topic or "", p.partition or 0, p.directory))
    if isinstance(filesystem, pafs.LocalFileSystem):
        refuse_escapes(root, [_files_to_check(p, kind, checked) for p in partitions], checked)
    return result_fs, partitions


def _files_to_check(part: PartitionLog, kind: str, checked: set[str] | None) -> PartitionLog:
    """``part`` with the segments whose files are not in ``checked`` (those passed before).
    Aiven index paths name slices of ``.indexes``, not files: the objects are checked."""
    segments = []
    for seg in part.segments:
        if kind == "aiven":
            if checked is None or seg.path not in checked:
                segments.append(
                    replace(seg, index_path=None, timeindex_path=None, txnindex_path=None)
                )
            continue
        files = (seg.path, seg.index_path, seg.timeindex_path, seg.txnindex_path)
        if checked is None or any(f is not None and f not in checked for f in files):
            segments.append(seg)
    return replace(part, segments=tuple(segments))


def _classify(directory: str, files: list[pafs.FileInfo], layout: str) -> str | None:
    """The layout of one directory's segment files, or None when it holds none we know."""
    name = posixpath.basename(directory)
    parent = posixpath.basename(posixpath.dirname(directory))
    names = [f.base_name for f in files]
    # broker-style partition dirs deeper down are read only when asked for (layout=pinterest):
    # pointed at the parent of a log dir, a check must not pass
    wants = {layout} if layout != "auto" else set(TIERED_LAYOUTS) - {"pinterest"}
    if (
        "aiven" in wants
        and name.isdigit()
        and _AIVEN_TOPIC_DIR.fullmatch(parent)
        and any(parse_stem(n) is not None for n in names)
    ):
        return "aiven"
    if (
        "local-tiered" in wants
        and _LOCAL_DIR.fullmatch(name)
        and any((p := parse_stem(n)) is not None and p[2] == LOG_SUFFIX for n in names)
    ):
        return "local-tiered"
    if (
        "pinterest" in wants
        and parse_partition_dir_name(name)
        and any(n.endswith(LOG_SUFFIX) and n[: -len(LOG_SUFFIX)].isdigit() for n in names)
    ):
        return "pinterest"
    if (
        "linkedin-azure" in wants
        and _AZURE_CONTAINER.fullmatch(name)
        and any((m := _AZURE_BLOB.fullmatch(n)) and m["kind"] == "SEGMENT" for n in names)
    ):
        return "linkedin-azure"
    return None


# -- Aiven ---------------------------------------------------------------------------------------


def _aiven(
    filesystem: pafs.FileSystem,
    handler: TieredHandler,
    dirs: dict[str, list[pafs.FileInfo]],
    cache: ManifestCache | None = None,
) -> list[PartitionLog]:
    jobs = []
    partitions: dict[str, tuple[str, int]] = {}
    for directory, files in dirs.items():
        match = _AIVEN_TOPIC_DIR.fullmatch(posixpath.basename(posixpath.dirname(directory)))
        assert match is not None
        partitions[directory] = (match["topic"], int(posixpath.basename(directory)))
        stems: dict[str, dict[str, pafs.FileInfo]] = {}
        for info in files:
            parsed = parse_stem(info.base_name)
            if parsed is not None:
                stem_path = info.path[: len(info.path) - len(parsed[2])]
                stems.setdefault(stem_path, {})[parsed[2]] = info
        incomplete = []
        for stem_path, objects in stems.items():
            if LOG_SUFFIX not in objects:
                continue
            if MANIFEST_SUFFIX not in objects:
                incomplete.append(posixpath.basename(stem_path))
                continue
            jobs.append((directory, stem_path, objects))
        if incomplete:
            _logger.info(
                "%s: %d segment(s) without .rsm-manifest skipped (upload unfinished or "
                "abandoned): %s",
                kfs.display_path(filesystem, directory),
                len(incomplete),
                ", ".join(sorted(incomplete)[:5]),
            )
    cache = {} if cache is None else cache
    keys = [_manifest_key(stem_path, objects) for _, stem_path, objects in jobs]
    fetch = [(job, key) for job, key in zip(jobs, keys, strict=True) if key not in cache]
    with ThreadPoolExecutor(min(FETCH_THREADS, max(1, len(fetch)))) as pool:
        fetched = list(pool.map(lambda item: _read_manifest(filesystem, *item[0][1:]), fetch))
    for (_, key), manifest in zip(fetch, fetched, strict=True):
        if manifest is not None:
            cache[key] = manifest
    listed = set(keys)
    for key in [k for k in cache if k not in listed and posixpath.dirname(k[0]) in dirs]:
        del cache[key]  # gone from the bucket (retention): forget it
    manifests = [cache.get(key) for key in keys]
    found: dict[str, list[Candidate]] = {d: [] for d in dirs}
    topics: dict[str, str] = {}
    for (directory, stem_path, objects), manifest in zip(jobs, manifests, strict=True):
        if manifest is None:
            continue  # deleted since the listing (retention): as if never listed
        handler.remember(stem_path, manifest)
        found[directory].append(_aiven_segment(handler, directory, stem_path, objects, manifest))
        topic, partition = partitions[directory]
        if manifest.partition is not None and manifest.partition != partition:
            raise ManifestError(
                f"{kfs.display_path(filesystem, stem_path + MANIFEST_SUFFIX)}: the manifest is "
                f"for partition {manifest.partition}, the key says {partition}"
            )
        # a key prefix without a trailing '/' is glued to the topic: the manifest knows better
        if manifest.topic and topic.endswith(manifest.topic):
            topics[directory] = manifest.topic
    return [
        PartitionLog(
            topics.get(d, partitions[d][0]),
            partitions[d][1],
            d,
            resolve_overlaps(found[d]),
            remote=True,
            topic_id=_aiven_topic_id(d),
        )
        for d in dirs
    ]


def _aiven_topic_id(directory: str) -> str | None:
    """The topic id in an Aiven partition's key prefix (``<topic>-<topicId>/<partition>``)."""
    match = _AIVEN_TOPIC_DIR.fullmatch(posixpath.basename(posixpath.dirname(directory)))
    return None if match is None else match["topic_id"]


def _manifest_key(stem_path: str, objects: dict[str, pafs.FileInfo]) -> tuple[str, int, int, int]:
    """What a parsed manifest depends on: its object, and the sizes of the objects it is
    checked against (``.log``, ``.indexes``)."""
    indexes = objects.get(INDEXES_SUFFIX)
    return (
        stem_path,
        int(objects[MANIFEST_SUFFIX].size),
        int(objects[LOG_SUFFIX].size),
        -1 if indexes is None else int(indexes.size),
    )


def _read_manifest(
    filesystem: pafs.FileSystem, stem_path: str, objects: dict[str, pafs.FileInfo]
) -> SegmentManifest | None:
    """The segment's manifest; None when it was deleted since the listing (retention or an
    abandoned upload being cleaned up, which deletes the manifest with the segment)."""
    path = stem_path + MANIFEST_SUFFIX
    shown = kfs.display_path(filesystem, path)
    try:
        data = kfs.read_file(filesystem, path).to_pybytes()
    except FileNotFoundError:
        _logger.info("%s: deleted since the listing; segment skipped", shown)
        return None
    except OSError as err:
        raise StorageError(f"reading the manifest failed: {err}", shown) from err
    indexes = objects.get(INDEXES_SUFFIX)
    try:
        manifest = parse_manifest(
            data,
            int(objects[LOG_SUFFIX].size),
            None if indexes is None else int(indexes.size),
        )
        manifest.check_geometry()
    except ManifestError as err:
        raise ManifestError(f"{shown}: {err}") from err
    offset = parse_stem(posixpath.basename(path))
    assert offset is not None
    if manifest.start_offset is not None and manifest.start_offset != offset[0]:
        raise ManifestError(
            f"{shown}: startOffset {manifest.start_offset} differs from the offset in the "
            f"segment's name ({offset[0]})"
        )
    return manifest


def _aiven_segment(
    handler: TieredHandler,
    directory: str,
    stem_path: str,
    objects: dict[str, pafs.FileInfo],
    manifest: SegmentManifest,
) -> Candidate:
    parsed = parse_stem(posixpath.basename(stem_path) + LOG_SUFFIX)
    assert parsed is not None
    base_offset = parsed[0]
    if base_offset > MAX_OFFSET:
        raise UnsafePathError(f"{stem_path}{LOG_SUFFIX}: base offset exceeds 2^63 - 1")
    suffixes = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
    if manifest.indexes is None:  # legacy: separate objects, sized by the listing
        sizes = {
            s: None if s not in objects else plain_size(int(objects[s].size), manifest.encrypted)
            for s in suffixes
        }
    else:
        sizes = {s: handler.index_size(stem_path, s) for s in suffixes}
    paths = {s: None if size is None else stem_path + s for s, size in sizes.items()}
    ref = SegmentRef(
        path=stem_path + LOG_SUFFIX,
        base_offset=base_offset,
        size=manifest.chunks.original_file_size,
        index_path=paths[INDEX_SUFFIX],
        timeindex_path=paths[TIME_INDEX_SUFFIX],
        txnindex_path=paths[TXN_INDEX_SUFFIX],
        index_size=sizes[INDEX_SUFFIX] or 0,
        timeindex_size=sizes[TIME_INDEX_SUFFIX] or 0,
        txnindex_size=sizes[TXN_INDEX_SUFFIX] or 0,
        last_offset=manifest.end_offset,
        max_timestamp=manifest.max_timestamp,
        chunk_size=manifest.chunks.original_chunk_size if manifest.transformed else 0,
    )
    event = manifest.event_timestamp if manifest.event_timestamp is not None else -1
    return Candidate(ref, event)


# -- raw copies ----------------------------------------------------------------------------------


def _local_tiered(directory: str, files: list[pafs.FileInfo]) -> PartitionLog:
    match = _LOCAL_DIR.fullmatch(posixpath.basename(directory))
    assert match is not None
    stems: dict[str, dict[str, pafs.FileInfo]] = {}
    for info in files:
        parsed = parse_stem(info.base_name)
        if parsed is not None and parsed[2] in _LOCAL_SUFFIXES:
            stems.setdefault(info.path[: len(info.path) - len(parsed[2])], {})[parsed[2]] = info
    candidates = []
    orphans = []
    for stem_path, objects in stems.items():
        if LOG_SUFFIX in objects:
            offset = parse_stem(posixpath.basename(stem_path) + LOG_SUFFIX)
            assert offset is not None
            candidates.append(Candidate(_raw_ref(offset[0], objects)))
        else:
            orphans.append(posixpath.basename(stem_path))
    if orphans:
        _logger.warning(
            "%s: %d segments have index files but no .log (%s): an upload under way, or their "
            "records lost; their offsets are not read",
            directory,
            len(orphans),
            ", ".join(sorted(orphans)[:3]) + (", ..." if len(orphans) > 3 else ""),
        )
    return PartitionLog(
        match["topic"],
        int(match["partition"]),
        directory,
        resolve_overlaps(candidates),
        remote=True,
        topic_id=match["topic_id"],
    )


def _raw_ref(base_offset: int, objects: dict[str, pafs.FileInfo]) -> SegmentRef:
    if base_offset > MAX_OFFSET:
        raise UnsafePathError(f"{objects[LOG_SUFFIX].path}: base offset exceeds 2^63 - 1")
    index, timeindex, txnindex = (
        objects.get(s) for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
    )
    return SegmentRef(
        path=objects[LOG_SUFFIX].path,
        base_offset=base_offset,
        size=int(objects[LOG_SUFFIX].size),
        index_path=None if index is None else index.path,
        timeindex_path=None if timeindex is None else timeindex.path,
        txnindex_path=None if txnindex is None else txnindex.path,
        index_size=0 if index is None else int(index.size),
        timeindex_size=0 if timeindex is None else int(timeindex.size),
        txnindex_size=0 if txnindex is None else int(txnindex.size),
    )


def _linkedin_azure(
    filesystem: pafs.FileSystem, dirs: dict[str, list[pafs.FileInfo]]
) -> list[PartitionLog]:
    groups: dict[tuple[str, int], dict[str, dict[str, pafs.FileInfo]]] = {}
    for directory, files in dirs.items():
        for info in files:
            match = _AZURE_BLOB.fullmatch(info.base_name)
            if match is None or match["kind"] not in _AZURE_KINDS:
                continue
            key = (directory, int(match["partition"]))
            segment = groups.setdefault(key, {}).setdefault(match["segment_id"], {})
            segment[_AZURE_KINDS[match["kind"]]] = info
    logs = [
        objects[LOG_SUFFIX]
        for segments in groups.values()
        for objects in segments.values()
        if LOG_SUFFIX in objects and int(objects[LOG_SUFFIX].size) > 0
    ]
    with ThreadPoolExecutor(min(FETCH_THREADS, max(1, len(logs)))) as pool:
        firsts = dict(
            zip(
                (i.path for i in logs),
                pool.map(lambda info: _first_offset(filesystem, info.path), logs),
                strict=True,
            )
        )
    out = []
    for (directory, partition), segments in groups.items():
        match = _AZURE_CONTAINER.fullmatch(posixpath.basename(directory))
        assert match is not None
        candidates = [
            Candidate(_raw_ref(firsts[objects[LOG_SUFFIX].path], objects))
            for objects in segments.values()
            if LOG_SUFFIX in objects and objects[LOG_SUFFIX].path in firsts
        ]
        topic_id = str(uuid.UUID(match["topic_id"]))
        out.append(
            PartitionLog(
                topic_id,
                partition,
                f"{directory}/{partition}.*",
                resolve_overlaps(candidates),
                remote=True,
            )
        )
    return out


def _first_offset(filesystem: pafs.FileSystem, path: str) -> int:
    """The base offset of a segment named without one: its first entry's offset field (v2: the
    batch's base offset; tiered segments are never compacted, so it is the segment's)."""
    head = kfs.read_range(filesystem, path, 0, 8)
    if head.size != 8:
        raise StorageError("segment shorter than one entry's offset field", path, 0)
    offset = int.from_bytes(head.to_pybytes(), "big", signed=True)
    if offset < 0:
        raise StorageError(f"first entry has a negative offset ({offset})", path, 0)
    return offset


# -- overlaps ------------------------------------------------------------------------------------


def resolve_overlaps(candidates: Iterable[Candidate]) -> tuple[SegmentRef, ...]:
    """Each offset from one segment only.

    Segments are taken by base offset; of several with the same base offset the one reaching
    furthest (manifest ``endOffset``), then the larger, then the most recently copied
    (``eventTimestampMs``) wins. A segment whose known last offset is already covered is
    dropped; one that overlaps the covered range is read from the first offset after it
    (``read_from``). A segment whose last offset is not known (no manifest) is cut where the
    next one begins (``read_until``): its name is all there is.
    """
    ordered = sorted(
        candidates,
        key=lambda c: (
            c.ref.base_offset,
            -(c.ref.last_offset if c.ref.last_offset is not None else -1),
            -c.ref.size,
            -c.event_timestamp,
            c.ref.path,
        ),
    )
    kept: list[SegmentRef] = []
    covered = -1  # last offset read by the kept segments with a known last offset
    for candidate in ordered:
        ref = candidate.ref
        if kept and kept[-1].base_offset == ref.base_offset:
            _logger.info("%s: same base offset as %s; not read", ref.path, kept[-1].path)
            continue
        if ref.last_offset is not None and ref.last_offset <= covered:
            _logger.info("%s: offsets up to %d already read; not read", ref.path, covered)
            continue
        if kept and kept[-1].last_offset is None:
            kept[-1] = replace(kept[-1], read_until=ref.base_offset)
        if covered >= ref.base_offset:
            ref = replace(ref, read_from=covered + 1)
        if ref.last_offset is not None:
            covered = ref.last_offset
        kept.append(ref)
    return tuple(kept)
