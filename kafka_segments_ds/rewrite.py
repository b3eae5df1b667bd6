"""Erase and compact a log dir without moving offsets: read, filter, write with preserveOffsets.

:func:`erase` removes the records chosen by key or by a predicate; :func:`compact` keeps the last
record of each key, as Kafka's log cleaner does. Both read ``src`` (a log dir, partition dir or
tiered-storage bucket; any path :func:`kafka_segments_ds.read_table` takes) partition by
partition and write the kept rows into the new log dir ``dst`` with ``preserveOffsets=true``:
every kept record keeps its offset, timestamp, timestamp type, headers, producer id, epoch and
sequence, leader epoch, codec and the offsets of its batch (a batch that lost records keeps its
base and last offset, the removed ones are gaps inside it). A partition keeps its end offset: where
the records (or transaction markers) at its end are not written, a local ``dst`` gets an empty
batch spanning them, as Kafka's cleaner leaves one, so a consumer group committed at the end
is not out of range (on a remote ``dst`` the partition ends after its last kept batch).
:func:`copy` writes every record (``kafka-segments restore`` stages its copy so). ``dst`` must
not hold the topics yet: write into a new directory, check it, then swap it in.

Transactions: the source is read with ``isolationLevel=read_committed``, so records of aborted
transactions are left out (the cleaner removes them too), and transaction markers are not
written (a deep read never returns them; their offsets become gaps). The records of committed
transactions are written as non-transactional batches that keep their producer id, epoch and
sequences: without their markers a broker would take them for a transaction still open and hold
every ``read_committed`` consumer before them.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafka_segments_ds import iter_batches
from kafka_segments_ds.errors import InvalidInputError, InvalidOptionError
from kafka_segments_ds.layout import PartitionLog
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.records.builder import encode_batch
from kafka_segments_ds.selection import check_selection, discover_paths, select_partitions
from kafka_segments_ds.writer import write_table

__all__ = ["PartitionSummary", "compact", "copy", "erase"]

ISOLATION = "read_committed"
SELECTION = ("subscribe", "subscribepattern", "assign")
# reader columns a preserveOffsets write must not get: isTransactional (see the module doc),
# isControl (never true in deep rows), and where the record was read from
DROPPED = ("isTransactional", "isControl", "magic", "segment", "position")
# writer options the rewrite sets itself
WRITE_FIXED = ("topic", "numpartitions", "preserveoffsets", "erroriftopicexists", "magic")

MAX_DELTA = 2**31 - 1  # a batch's last offset delta is an int32

# rows of one Arrow batch -> which of them to remove (True: remove)
Predicate: TypeAlias = Callable[[pa.Table], Any]


@dataclass(frozen=True)
class PartitionSummary:
    """What a rewrite did to one partition."""

    topic: str
    partition: int
    records: int  # read (committed records)
    removed: int  # erased, or shadowed by a later record of the same key
    null_keys: int  # removed by compaction: records without a key
    first_offset: int  # of the kept records; -1 when none were kept
    last_offset: int  # of the kept records' batches; -1 when none were kept
    end_offset: int  # the source partition's next offset (after its last batch, markers too)
    padded: bool  # an empty batch written up to end_offset


def erase(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    keys: Iterable[bytes | str] | None = None,
    predicate: Predicate | None = None,
    options: Mapping[str, Any] | None = None,
    write_options: Mapping[str, Any] | None = None,
) -> list[PartitionSummary]:
    """Write ``src`` into the new log dir ``dst`` without the records chosen for erasure.

    Parameters
    ----------
    src, dst
        The log dir (or bucket) to read, and the log dir to write (the topics must not exist
        in it).
    keys
        Records whose key is one of these are removed (``str`` is taken as UTF-8).
    predicate
        Called with each Arrow table of rows read (every column: ``topic``, ``partition``,
        ``offset``, ``key``, ``value``, ``timestamp``, ``headers`` and the metadata columns);
        returns one boolean per row, true for the rows to remove. With ``keys`` too, a record
        either chooses is removed.
    options
        Reader options: ``subscribe`` / ``subscribePattern`` / ``assign`` choose the partitions
        to rewrite (default: all), ``layout``, ``fs.*``, ``mode``, ... . ``includeHeaders``,
        ``includeMetadata`` and ``isolationLevel`` are the rewrite's own.
    write_options
        Writer options for ``dst``: ``segmentBytes``, ``indexIntervalBytes``, ``compression``
        (for batches the source gives no codec), ``fs.*``, ... .

    Returns
    -------
    list of PartitionSummary
        One per partition rewritten, in (topic, partition) order.
    """
    if keys is None and predicate is None:
        raise InvalidOptionError("erase needs keys or a predicate (the records to remove)")
    chosen = (
        None
        if keys is None
        else pa.array([k.encode() if isinstance(k, str) else bytes(k) for k in keys], pa.binary())
    )

    def remove(table: pa.Table, where: str) -> np.ndarray:
        out = np.zeros(table.num_rows, bool)
        if chosen is not None:
            hit = pc.is_in(table.column("key"), value_set=chosen)
            out |= pc.fill_null(hit, False).to_numpy(zero_copy_only=False)
        if predicate is not None:
            out |= _predicate_mask(predicate, table, where)
        return out

    return _rewrite(src, dst, lambda topic, partition: remove, options, write_options)


def compact(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    options: Mapping[str, Any] | None = None,
    write_options: Mapping[str, Any] | None = None,
    exact: bool = False,
) -> list[PartitionSummary]:
    """Write ``src`` into the new log dir ``dst`` keeping only the last record of each key per
    partition, as Kafka's log cleaner does: a later record of a key removes the earlier ones,
    tombstones (null values) are kept as the last record of their key, and records without a
    key are removed (the cleaner counts them invalid). Unlike the cleaner, the whole log is
    compacted, its last segment too, and tombstones are never dropped for their age.

    A first pass reads each partition's keys and offsets into a map from a keyed 16-byte BLAKE2b
    digest of the key to its last offset, as the cleaner keeps an offset map of key hashes:
    memory is 24 bytes per distinct key of one partition, not the keys themselves; beside it the
    digests of the records read since the last merge (24 bytes a record, at most as many as the
    map's keys or about a million), a merge needing 40 bytes a row of both for a moment, and 8
    bytes per kept record in the second pass. Two keys share a digest with a probability of
    about n**2 / 2**129 for n keys (the digest is keyed with a random secret, so keys cannot be
    chosen to collide); then the earlier key's last record would be removed too.
    ``exact=True`` groups the keys themselves instead: no collision, every distinct key of a
    partition in memory.
    ``options`` and ``write_options`` as for :func:`erase`."""

    def shadowed(topic: str, partition: int) -> Callable[[pa.Table, str], np.ndarray]:
        keep = _last_offsets(src, topic, partition, dict(options or {}), exact)

        def remove(table: pa.Table, where: str) -> np.ndarray:
            offsets = table.column("offset").to_numpy(zero_copy_only=False)
            at = np.minimum(np.searchsorted(keep, offsets), max(len(keep) - 1, 0))
            return ~(keep[at] == offsets) if len(keep) else np.ones(len(offsets), bool)

        return remove

    return _rewrite(src, dst, shadowed, options, write_options, count_null_keys=True)


def copy(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    topic: str | None = None,
    options: Mapping[str, Any] | None = None,
    write_options: Mapping[str, Any] | None = None,
) -> list[PartitionSummary]:
    """Every committed record of ``src`` into the new log dir ``dst`` (offsets kept), under the
    topic name ``topic`` when given (the source must then hold one topic)."""
    keep_all = lambda table, where: np.zeros(table.num_rows, bool)  # noqa: E731
    return _rewrite(src, dst, lambda t, p: keep_all, options, write_options, rename=topic)


def _rewrite(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    remover: Callable[[str, int], Callable[[pa.Table, str], np.ndarray]],
    options: Mapping[str, Any] | None,
    write_options: Mapping[str, Any] | None,
    *,
    count_null_keys: bool = False,
    rename: str | None = None,
) -> list[PartitionSummary]:
    read = _read_options(options)
    writes = _write_options(write_options)
    source, target = os.fspath(src), os.fspath(dst)
    if _same_place(source, target):
        raise InvalidOptionError(
            f"{target}: a rewrite writes into a new log dir, not into its source; swap it in after"
        )
    parsed = parse_read_options(read)
    _, found = discover_paths([source], parsed)
    chosen = select_partitions(found, parsed)
    check_selection(found, chosen, parsed)
    counts: dict[str, int] = {}
    for part in found:
        if part.topic is not None and part.partition is not None:
            counts[part.topic] = max(counts.get(part.topic, 0), part.partition + 1)
    by_topic: dict[str, list[int]] = {}
    for part in chosen:
        if part.topic is None or part.partition is None:
            raise InvalidInputError(
                f"{part.directory}: not named <topic>-<partition>; a rewrite needs the topic "
                "and partition of what it reads"
            )
        by_topic.setdefault(part.topic, []).append(part.partition)
    if rename is not None and len(by_topic) != 1:
        raise InvalidOptionError(
            f"a new topic name ({rename}) needs one source topic; the selection holds "
            f"{len(by_topic)}: {', '.join(sorted(by_topic)) or 'none'}"
        )
    plain = {k: v for k, v in read.items() if k.lower() not in SELECTION}
    ends = {(p.topic, p.partition): _end_offset(source, plain, p) for p in chosen}
    summaries: list[PartitionSummary] = []
    for topic, parts in sorted(by_topic.items()):
        name = rename or topic

        def rows(
            topic: str = topic, parts: list[int] = parts, name: str = name
        ) -> Iterator[pa.RecordBatch]:
            for partition in sorted(parts):
                summary = _Summary(name, partition, count_null_keys, ends[topic, partition])
                remove = remover(topic, partition)
                where = f"{source} {topic}-{partition}"
                assign = json.dumps({topic: [partition]})
                for arrow_batch in iter_batches(source, **plain, assign=assign):
                    table = pa.Table.from_batches([arrow_batch])
                    mask = remove(table, where)
                    summary.add(table, mask)
                    kept = table.filter(pa.array(~mask))
                    kept = kept.drop_columns(
                        [c for c in (*DROPPED, "topic") if c in kept.schema.names]
                    )
                    yield from kept.to_batches()
                summaries.append(summary.done())

        write_table(
            rows(),
            target,
            topic=name,
            numPartitions=counts[topic],
            preserveOffsets="true",
            errorIfTopicExists="true",
            **writes,
        )
    if "://" in target:
        return summaries
    return [_pad(Path(target) / f"{s.topic}-{s.partition}", s) for s in summaries]


def _end_offset(source: str, plain: dict[str, Any], part: PartitionLog) -> int:
    """The next offset after the partition's last batch (control batches count): a shallow read
    of its last segment."""
    if not part.segments:
        return 0
    last = part.segments[-1]
    options = {
        k: v for k, v in plain.items() if k.lower() not in ("isolationlevel", "includeheaders")
    }
    options.update(
        iteration="shallow",
        assign=json.dumps({part.topic: [part.partition]}),
        startingOffsets=json.dumps({part.topic: {str(part.partition): last.base_offset}}),
    )
    end = last.base_offset
    for arrow_batch in iter_batches(source, ["batchLastOffset"], **options):
        if arrow_batch.num_rows:
            end = max(end, int(pc.max(arrow_batch.column(0)).as_py()) + 1)
    return end


def _pad(directory: Path, summary: PartitionSummary) -> PartitionSummary:
    """Append empty batches (no records, not idempotent, no leader epoch) to the partition's last
    segment, from after its last kept batch up to the source's end offset."""
    start = summary.last_offset + 1 if summary.last_offset >= 0 else _log_start(directory)
    if start >= summary.end_offset:
        return summary
    batches = []
    for base in range(start, summary.end_offset, MAX_DELTA + 1):
        last = min(base + MAX_DELTA, summary.end_offset - 1)
        batches.append(encode_batch([], base_offset=base, last_offset_delta=last - base))
    segment = max(directory.glob("*.log"))
    with segment.open("ab") as log:
        log.write(b"".join(batches))
        log.flush()
        os.fsync(log.fileno())
    return replace(summary, padded=True)


def _log_start(directory: Path) -> int:
    return int(min(directory.glob("*.log")).stem)


class _Summary:
    """Counts of one partition's rewrite, as its batches go by."""

    def __init__(self, topic: str, partition: int, count_null_keys: bool, end: int) -> None:
        self.topic, self.partition, self.count_null_keys = topic, partition, count_null_keys
        self.end = end
        self.records = self.removed = self.null_keys = 0
        self.first, self.last = -1, -1

    def add(self, table: pa.Table, remove: np.ndarray) -> None:
        self.records += table.num_rows
        self.removed += int(remove.sum())
        if self.count_null_keys:
            self.null_keys += table.column("key").null_count
        kept = np.flatnonzero(~remove)
        if len(kept):
            if self.first < 0:
                self.first = int(table.column("offset")[int(kept[0])].as_py())
            self.last = int(table.column("batchLastOffset")[int(kept[-1])].as_py())

    def done(self) -> PartitionSummary:
        return PartitionSummary(
            self.topic, self.partition, self.records, self.removed, self.null_keys,
            self.first, self.last, self.end, False,
        )  # fmt: skip


def _last_offsets(
    src: str | os.PathLike[str],
    topic: str,
    partition: int,
    options: dict[str, Any],
    exact: bool = False,
) -> np.ndarray:
    """Sorted offsets of the last committed record of each key of one partition (keys only;
    records without a key have none). A key is known by its keyed 16-byte BLAKE2b digest (a
    :class:`_KeyMap`); ``exact`` groups the keys themselves (every distinct key in memory)."""
    plain = {k: v for k, v in _read_options(options).items() if k.lower() not in SELECTION}
    batches = iter_batches(src, ["key", "offset"], **plain, assign=json.dumps({topic: [partition]}))
    if exact:
        table = pa.Table.from_batches(list(batches), _KEYS_AND_OFFSETS)
        table = table.filter(pc.is_valid(table.column("key")))
        last = table.group_by("key", use_threads=False).aggregate([("offset", "max")])
        return np.sort(last.column("offset_max").to_numpy(zero_copy_only=False))
    last_of = _KeyMap()
    for arrow_batch in batches:
        last_of.add(arrow_batch.column(0), arrow_batch.column(1))
    return last_of.offsets()


_KEYS_AND_OFFSETS = pa.schema([("key", pa.binary()), ("offset", pa.int64())])


class _KeyMap:
    """Key digest -> the offset of the key's last record, as Kafka's cleaner keeps its offset map
    of key hashes: 24 bytes per distinct key (a 16-byte BLAKE2b digest, keyed with a random
    secret so keys cannot be chosen to collide, as two uint64 halves, and an 8-byte offset) in
    numpy arrays sorted by digest. The digests of the records read since the last merge wait
    beside it (24 bytes a record) until they are as many as the map's keys, or MERGE_EVERY: each
    record is merged in a logarithmic number of times. The highest offset of a key wins,
    whatever order the records come in."""

    MERGE_EVERY = 1 << 20  # records

    def __init__(self) -> None:
        self.hasher = hashlib.blake2b(digest_size=16, key=os.urandom(16))
        empty = np.zeros(0, np.uint64)
        self.high, self.low, self.last = empty, empty, np.zeros(0, np.int64)
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.pending_rows = 0

    def add(self, keys: pa.Array, offsets: pa.Array) -> None:
        if keys.null_count:
            valid = keys.is_valid()
            keys, offsets = keys.filter(valid), offsets.filter(valid)
        if not len(keys):
            return
        copy = self.hasher.copy

        def digest(key: bytes) -> bytes:
            hasher = copy()
            hasher.update(key)
            return hasher.digest()

        joined = b"".join(map(digest, keys.to_pylist()))
        digests = np.frombuffer(joined, np.uint64).reshape(-1, 2)
        self.pending.append((digests, offsets.to_numpy(zero_copy_only=False)))
        self.pending_rows += len(digests)
        if self.pending_rows >= max(self.MERGE_EVERY, len(self.last)):
            self._merge()

    def offsets(self) -> np.ndarray:
        self._merge()
        return np.sort(self.last)

    def _merge(self) -> None:
        if not self.pending:
            return
        high = np.concatenate([self.high, *(d[:, 0] for d, _ in self.pending)])
        low = np.concatenate([self.low, *(d[:, 1] for d, _ in self.pending)])
        last = np.concatenate([self.last, *(o for _, o in self.pending)]).astype(np.int64)
        self.pending, self.pending_rows = [], 0
        self.high = self.low = self.last = np.zeros(0, np.uint64)  # freed before the sort
        # one array reordered at a time: at most 40 bytes a row at once (24 + the order + one)
        order = np.argsort(high)
        high = high[order]
        low = low[order]
        last = last[order]
        same_high = high[1:] == high[:-1]
        if np.any(same_high & (low[1:] != low[:-1])):  # two keys share a first half: rare
            order = np.lexsort((low, high))
            high = high[order]
            low = low[order]
            last = last[order]
            same_high = (high[1:] == high[:-1]) & (low[1:] == low[:-1])
        del order
        starts = np.flatnonzero(np.concatenate([[True], ~same_high]))
        del same_high
        self.high = high[starts]
        del high
        self.low = low[starts]
        del low
        self.last = np.maximum.reduceat(last, starts) if len(last) else last


def _predicate_mask(predicate: Predicate, table: pa.Table, where: str) -> np.ndarray:
    """The predicate's answer for ``table`` as one bool per row; anything else is refused."""
    answer = predicate(table)
    if isinstance(answer, pa.ChunkedArray | pa.Array):
        if answer.null_count:
            raise InvalidInputError(f"{where}: the predicate returned null for some rows")
        answer = answer.to_numpy(zero_copy_only=False)
    mask = np.asarray(answer)
    if mask.dtype != np.bool_ or mask.shape != (table.num_rows,):
        raise InvalidInputError(
            f"{where}: the predicate must return one boolean per row ({table.num_rows}), not "
            f"{mask.dtype} of shape {mask.shape}"
        )
    return mask


def _read_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    given = dict(options or {})
    for name in given:
        lower = name.lower()
        if lower in ("includeheaders", "includemetadata", "isolationlevel", "iteration"):
            raise InvalidOptionError(
                f"option {name}: a rewrite reads every column of every committed record itself "
                "(includeHeaders, includeMetadata, isolationLevel=read_committed, deep)"
            )
    return {
        **given,
        "includeHeaders": "true",
        "includeMetadata": "true",
        "isolationLevel": ISOLATION,
    }


def _write_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    given = dict(options or {})
    for name in given:
        if name.lower() in WRITE_FIXED:
            raise InvalidOptionError(
                f"write option {name}: a rewrite sets it itself (the topic and its partition "
                "count are the source's, offsets are kept, the target topic must be new)"
            )
    return given


def _same_place(source: str, target: str) -> bool:
    if "://" in source or "://" in target:
        return source.rstrip("/") == target.rstrip("/")
    return os.path.realpath(source) == os.path.realpath(target)
