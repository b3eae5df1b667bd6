"""Transactions for read_committed: the aborted and never-finished transactions of a
partition, from its ``.txnindex`` files or, for a segment without one, from its own ABORT
markers (a walk of the batch headers, records not decoded)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import CorruptIndexError, CorruptSegmentError
from kafka_segments_ds.layout import PartitionLog, SegmentRef
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import failed_checksums, walk_entries
from kafka_segments_ds.records.compression import decompress
from kafka_segments_ds.records.v2 import (
    CONTROL_ABORT,
    ControlMarker,
    decode_batch_header,
    iter_records,
)
from kafka_segments_ds.scan_task import segment_bounds
from kafka_segments_ds.tail import V2_OVERHEAD

log = logging.getLogger(__name__)

OPEN_TRANSACTION_END = 2**63 - 1  # the last offset of a transaction with no marker yet
INSIDE, TAIL = "inside", "tail"  # damage a segment's entries go on after; one they do not


def collect_aborted(
    filesystem: pafs.FileSystem,
    part: PartitionLog,
    options: ReadOptions,
    start_offset: int | None = None,
    end_offset: int | None = None,
) -> tuple[tuple[int, int, int], ...]:
    """(producerId, firstOffset, lastOffset) of the aborted or never-finished transactions
    that may hold records of offsets [start_offset, end_offset) (None: the whole log).

    A segment's ``.txnindex`` lists the transactions its ABORT markers end (a broker writes one
    for every segment holding such a marker). The markers themselves are decoded too, in every
    segment, so an archive that lost a ``.txnindex``, or kept one that lost entries (an empty
    file left by an interrupted copy), hides no aborted transaction; the ``.txnindex`` adds
    those whose first offset the walk does not see (data in segments retention deleted). One
    walk of the batch headers pairs each marker with its producer's first transactional
    offset, wherever that lies (a transaction's data can sit in segments before its marker's).
    Transactions with no marker by the end of the log are excluded too: a read_committed
    consumer never reads past the last stable offset.

    As a broker's fetch collects aborted transactions, the walk starts at the segment holding
    ``start_offset`` (a marker before it aborts nothing after it; a transaction begun earlier
    is masked from its first batch in the walk, which is all of it a read sees) and stops past
    ``end_offset`` once every transaction with data before it has its marker.
    """
    segs = part.segments
    begin = 0
    while start_offset is not None and begin + 1 < len(segs):
        _, read_until, next_base = segment_bounds(segs, begin)
        limit = next_base if read_until is None else read_until
        if limit is None or limit > start_offset:
            break
        begin += 1
    spans: list[tuple[int, int, int]] = []
    open_first: dict[int, int] = {}  # producer -> first offset of its unfinished transaction
    # producer -> first offset of a transaction whose marker may be a damaged entry
    # (DROPMALFORMED): aborted up to the offset before the next batch
    undecided: dict[int, int] = {}
    walked_to = -1  # the last offset of the last batch walked
    for i in range(begin, len(segs)):
        seg = segs[i]
        if seg.txnindex_path is not None:
            spans.extend(_txn_index_spans(filesystem, seg))
        next_base = segment_bounds(segs, i)[2]
        for position, header, read_marker, damage in _iter_v2_headers(
            filesystem, seg, options, next_base
        ):
            # a damage before the range decides none of its records (a marker there ends a
            # transaction whose records all come before it); with a .txnindex: it lists what
            # the segment's ABORT markers end
            if damage is not None or header is None:
                if seg.txnindex_path is None and (
                    start_offset is None or walked_to >= start_offset
                ):
                    undecided.update(_undecided(header, open_first, seg, position, damage, options))
                continue
            base = int(header[K.H_BASE_OFFSET])
            walked_to = base + int(header[K.H_LOD])
            spans.extend((pid, first, base - 1) for pid, first in undecided.items())
            undecided.clear()
            if (
                end_offset is not None
                and base >= end_offset
                and all(first >= end_offset for first in open_first.values())
            ):
                return tuple(sorted(set(spans)))  # nothing later aborts a record of the range
            pid = int(header[K.H_PRODUCER_ID])
            attrs = int(header[K.H_ATTRIBUTES])
            if not attrs & 0x10:
                continue
            if (seg.read_from is not None and base < seg.read_from) or (
                seg.read_until is not None and base >= seg.read_until
            ):
                continue  # another (overlapping) segment's offsets
            if not attrs & 0x20:
                open_first.setdefault(pid, base)
                continue
            if pid not in open_first:
                continue
            first = open_first.pop(pid)
            try:
                marker = control_marker(read_marker(), seg, position)
            except CorruptSegmentError:
                if seg.txnindex_path is None:
                    raise
                continue  # a damaged marker: the segment's .txnindex lists what it aborts
            if marker is not None and marker.type == CONTROL_ABORT:
                spans.append((pid, first, base))
    spans.extend((pid, first, OPEN_TRANSACTION_END) for pid, first in open_first.items())
    spans.extend((pid, first, OPEN_TRANSACTION_END) for pid, first in undecided.items())
    return tuple(sorted(set(spans)))


def _undecided(
    header: np.ndarray | None,
    open_first: dict[int, int],
    seg: SegmentRef,
    position: int,
    damage: str | None,
    options: ReadOptions,
) -> dict[int, int]:
    """The open transactions a damaged entry at ``position`` (``header``: its fields as they
    read, unchecked; None: too short to hold them) may have ended, taken out of
    ``open_first``: a control batch's (or one whose attributes cannot be read), every open
    transaction's unless its producer id names one. FAILFAST raises, inside a segment: whether
    they committed is unknown. DROPMALFORMED drops their records, as it drops the damaged
    entry's; so does a read ending in a torn tail (a marker a broker was writing: the
    transactions stay open, if it is the log's end, as a consumer sees them)."""
    if not open_first or (header is not None and not int(header[K.H_ATTRIBUTES]) & 0x20):
        return {}
    pid = None if header is None else int(header[K.H_PRODUCER_ID])
    pids = [pid] if pid in open_first else sorted(open_first)
    which = ", ".join(f"producer {p}'s transaction from offset {open_first[p]}" for p in pids)
    reason = (
        f"a damaged entry that may be the marker ending {which} (no .txnindex): "
        "read_committed cannot tell whether it committed"
    )
    if damage == INSIDE and not options.drop_malformed:
        raise CorruptSegmentError(reason, path=seg.path, position=position)
    level = logging.WARNING if damage == INSIDE else logging.INFO
    log.log(level, "%s, byte position %d: %s; its records are left out", seg.path, position, reason)
    return {p: open_first.pop(p) for p in pids}


def _txn_index_spans(filesystem: pafs.FileSystem, seg: SegmentRef) -> list[tuple[int, int, int]]:
    """(producerId, firstOffset, lastOffset) of the entries of ``seg``'s ``.txnindex``."""
    assert seg.txnindex_path is not None
    try:
        entries = kidx.parse_txn_index(memoryview(kfs.read_file(filesystem, seg.txnindex_path)))
    except CorruptIndexError as err:
        raise CorruptIndexError(f"{seg.txnindex_path}: {err}") from err
    return [(e.producer_id, e.first_offset, e.last_offset) for e in entries]


def control_marker(entry: bytes, seg: SegmentRef, position: int) -> ControlMarker | None:
    """The COMMIT/ABORT marker of a whole control batch at ``position`` of ``seg`` (None for
    an empty batch); damage raises :class:`CorruptSegmentError` naming the segment."""
    try:
        header = decode_batch_header(entry)
        if header.record_count == 0:
            return None
        region: bytes | memoryview = memoryview(entry)[61:]
        if header.compression:
            region = decompress(header.compression, region, magic=2)
        record = next(iter_records(header, region))
        return ControlMarker.parse(record.key, record.value)
    except CorruptSegmentError as err:
        raise err.located(path=seg.path, position_shift=position) from err


def _iter_v2_headers(
    filesystem: pafs.FileSystem,
    segment: SegmentRef,
    options: ReadOptions,
    next_base_offset: int | None = None,
) -> Iterator[tuple[int, np.ndarray | None, Callable[[], bytes], str | None]]:
    """Hop the entries of a segment without decoding records.

    Yields ``(position, header fields, read_entry, None)`` for each magic-2 batch, where the
    header fields are indexed by the ``kernels.H_*`` constants and ``read_entry()`` returns the
    whole batch, and ``(position, header fields or None, read_entry, INSIDE or TAIL)`` where
    an entry cannot be framed or fails its checksum (its fields as they read, None if fewer
    than a batch header's bytes are left; TAIL: nothing valid follows it in the segment). Past
    such an entry it goes on where the reader resynchronises
    (:meth:`~kafka_segments_ds.records.resync.Resync.resume_after`; the reader reports the
    damage or, with DROPMALFORMED, reads on there too: the markers after it count), and stops
    where nothing valid follows (a torn tail).
    """
    from kafka_segments_ds.records.resync import Resync  # (only past damage)

    with kfs.RangeReader(filesystem, segment.path) as read:  # reopened if read_entry outlives it
        position = 0
        last = -1  # the last offset of the entries walked
        last_start = -1  # the position of the last entry walked
        while position < segment.size:
            stopped = segment.size
            for walked in walk_entries(read, position, segment.size, options.read_chunk_bytes):
                positions, magics = walked.positions, walked.magics
                stopped = walked.base + walked.stop
                # an entry whose checksum fails is damage the reader resynchronises after: its
                # size field (no checksum covers it) may have framed the entries after it
                # wrongly, swallowing a marker (whatever verifyChecksums says: a read decoding
                # such a batch finds the bytes it swallowed)
                failed = np.flatnonzero(failed_checksums(walked.window, positions, magics))
                if failed.shape[0]:
                    cut = int(failed[0])
                    stopped = walked.base + int(positions[cut])
                    positions, magics = positions[:cut], magics[:cut]
                if positions.shape[0]:
                    last = max(last, _last_offset(walked.window, int(positions[-1])))
                    last_start = walked.base + int(positions[-1])
                v2 = positions[magics == 2]
                headers = K.parse_v2_headers(walked.window, v2)
                for i in range(v2.shape[0]):
                    absolute = walked.base + int(v2[i])
                    length = int(headers[i, K.H_LENGTH]) + 12

                    def read_entry(absolute: int = absolute, length: int = length) -> bytes:
                        return bytes(read(absolute, length))

                    yield absolute, headers[i], read_entry, None
                if failed.shape[0]:
                    break
            if stopped >= segment.size:
                return
            resync = Resync(
                lambda p, n: np.frombuffer(bytes(read(p, n)), np.uint8),
                path=segment.path,
                file_end=segment.size,
                range_end=segment.size,
                last_offset=lambda last=last: last,  # type: ignore[misc]
                next_base_offset=next_base_offset,  # (as the reader's: the next segment's)
                read_chunk_bytes=options.read_chunk_bytes,
                max_batch_bytes=options.max_batch_bytes,
                max_decompressed_bytes=options.max_decompressed_bytes,
                logged=False,  # (the reader reports where it resynchronises)
            )
            resume = resync.resume_after(stopped)
            # (it may resume before ``stopped``: at a valid batch the entry before overlapped,
            # past that entry's start)
            followed = resume is not None and resume > max(last_start, position)
            if not (followed and resume is not None and resume < stopped):
                # (resuming before it: the bytes there lie inside a valid batch, no entry)
                header = _unchecked_header(read, stopped, segment.size)
                yield stopped, header, lambda: b"", INSIDE if followed else TAIL
            if resume is None or not followed:
                return
            position = resume


def _unchecked_header(read: kfs.RangeReader, position: int, size: int) -> np.ndarray | None:
    """The batch header fields of the bytes at ``position``, unchecked (None: too few left),
    whatever its magic byte says (the damage may be there)."""
    if size - position < V2_OVERHEAD:
        return None
    head = np.frombuffer(bytes(read(position, V2_OVERHEAD)), np.uint8)
    fields: np.ndarray = K.parse_v2_headers(head, np.zeros(1, np.int64))[0]
    return fields


def _last_offset(window: np.ndarray, position: int) -> int:
    """The last offset of the entry at ``position`` of ``window`` (a batch's base offset and
    last offset delta; a legacy entry's offset field)."""
    offset = int.from_bytes(window[position : position + 8].tobytes(), "big", signed=True)
    if window[position + 16] == 2:
        offset += int.from_bytes(window[position + 23 : position + 27].tobytes(), "big")
    return offset
