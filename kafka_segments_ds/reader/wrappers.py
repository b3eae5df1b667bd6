"""Compressed legacy wrappers (magic 0/1 messages whose value is a compressed message set),
read deep: decompressed (here, or ahead by the read-ahead thread), their inner messages decoded
by one kernel call each (:func:`kafka_segments_ds.records.legacy_kernels.walk_inner`), their
rows built for many wrappers at once, keys and values addressed in the payloads, which join the
window's arena.

The facts the reference decoder (:func:`kafka_segments_ds.records.legacy.expand_wrapper`)
establishes hold here too: inner offsets strictly increase from 0 or more, end at the wrapper's
offset (magic 0), at ``n - 1`` for a producer's wrapper of offset 0 (magic 1) or at most at the
wrapper's offset otherwise (relative: ``absolute = W - R_last + R_i``); a LogAppendTime magic-1
wrapper's timestamp is its inner messages'. A payload that breaks any of them, or holds a
malformed or compressed message, is left to the reference decoder, which says what is wrong.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kafka_segments_ds.errors import KafkaSegmentsError
from kafka_segments_ds.reader.rows import DecodeState, Parts
from kafka_segments_ds.reader.v2 import Decompressed
from kafka_segments_ds.records import legacy_kernels as LK
from kafka_segments_ds.records.compression import decompress
from kafka_segments_ds.records.legacy import TIMESTAMP_TYPE_MASK, LegacyMessage, expand_wrapper

CODEC_MASK = 0x07
# A stretch of wrappers decoded together ends once its payloads reach this many bytes (each
# payload is bounded by maxDecompressedBytes), which bounds the inner messages' fields walked
# at once; the payloads join the window's arena (a copy, unless they lie in the read-ahead's).
STRETCH_BYTES = 64 << 20


@dataclass(frozen=True, slots=True, eq=False)
class Walked:
    """One wrapper's payload, its inner messages decoded (kernel fields, offsets relative to
    the wrapper: ``absolute = offset + shift``), its first and last absolute offsets (in what
    :func:`add_wrappers` takes, ``last`` is the wrapper's: its offset field counts too), and
    where the payload lies in the read-ahead arena (if it came from there)."""

    payload: bytes | memoryview
    inner: np.ndarray
    shift: int
    first: int
    last: int
    span: tuple[int, int] | None = None


def walk_wrapper(
    magic: int, offset: int, payload: bytes | memoryview, verify: bool
) -> Walked | None:
    """The inner messages of a wrapper (magic, offset field) holding ``payload``, or None when
    the reference decoder would refuse them."""
    inner, bad, _ = LK.walk_inner(np.frombuffer(payload, np.uint8), verify)
    n = inner.shape[1]
    if bad or not n:
        return None
    relative = inner[LK.OFFSET]
    first, last = int(relative[0]), int(relative[-1])
    if first < 0 or (n > 1 and not bool((relative[1:] > relative[:-1]).all())):
        return None
    shift = 0
    if magic == 0:
        if last != offset:
            return None
    elif offset == 0:
        if last != n - 1:
            return None  # a producer's numbering 0..n-1, kept as it is
    elif offset < last:
        return None
    else:
        shift = offset - last
    return Walked(payload, inner, shift, first + shift, last + shift)


def expand(message: LegacyMessage, verify: bool, max_bytes: int) -> Walked:
    """A wrapper's inner messages, as :func:`~kafka_segments_ds.records.legacy.expand_wrapper`
    gives them (and raises when it raises: on any doubt, it is asked)."""
    if message.value is not None:
        payload = decompress(
            message.compression, message.value, magic=message.magic, max_bytes=max_bytes
        )
        walked = walk_wrapper(message.magic, message.offset, payload, verify)
        if walked is not None:
            return walked
    return _from_messages(expand_wrapper(message, verify_checksum=verify, max_bytes=max_bytes))


def _from_messages(messages: list[LegacyMessage]) -> Walked:
    """:class:`Walked` of the reference decoder's messages (absolute offsets, effective
    timestamps; keys and values joined)."""
    blobs: list[bytes] = []
    size = 0
    columns = []
    for m in messages:
        kpos, klen = (0, -1) if m.key is None else (size, len(m.key))
        size += max(klen, 0)
        vpos, vlen = (0, -1) if m.value is None else (size, len(m.value))
        size += max(vlen, 0)
        blobs += [m.key or b"", m.value or b""]
        columns.append((0, m.offset, m.magic, m.attributes, m.timestamp, kpos, klen, vpos, vlen))
    inner = np.array(columns, np.int64).reshape(-1, LK.N_FIELDS).T.copy()
    return Walked(b"".join(blobs), inner, 0, messages[0].offset, messages[-1].offset)


def _decompressed_value(view: memoryview, fields: np.ndarray, w: int, max_bytes: int) -> bytes:
    """The payload of the wrapper in column ``w`` of a window's kernel fields (``view``: the
    window), decompressed within ``max_bytes``; raises as :func:`decompress` does."""
    at, length = int(fields[LK.VPOS, w]), int(fields[LK.VLEN, w])
    codec = int(fields[LK.ATTRIBUTES, w]) & CODEC_MASK
    return decompress(
        codec, view[at : at + length], magic=int(fields[LK.MAGIC, w]), max_bytes=max_bytes
    )


def add_wrappers(
    state: DecodeState,
    window: np.ndarray,
    fields: np.ndarray,
    ahead: Ahead,
) -> tuple[list[Walked], bool, Walked | None]:
    """The compressed wrappers these decoded messages start with (every one a wrapper of codec
    1-3 with a value), walked one after another while each takes no decision of the per-entry
    path: its payload decompresses and its inner messages decode, and its offsets follow the
    last ones and stay below the next segment's base offset and the task's end; whether the
    wrapper after them takes one (the per-entry path is next); and that wrapper walked, when
    its offsets were what it takes a decision on (the per-entry path need not walk it again).
    ``state.last_offset`` moves past them."""
    opts = state.options
    b = state.bounds
    view = window.data
    walked: list[Walked] = []
    size = 0
    for w in range(fields.shape[1]):
        magic, offset = int(fields[LK.MAGIC, w]), int(fields[LK.OFFSET, w])
        span = ahead.spans.get(int(fields[LK.POSITION, w]))
        if span is not None and ahead.arena is not None:
            payload: bytes | memoryview = ahead.arena[span[0] : span[1]]
        else:
            try:
                payload = _decompressed_value(view, fields, w, opts.max_decompressed_bytes)
            except KafkaSegmentsError:
                return walked, True, None
        one = walk_wrapper(magic, offset, payload, opts.verify_checksums)
        if one is None:
            return walked, True, None
        last = max(offset, one.last)
        if (
            one.first <= state.last_offset
            or (b.next_base is not None and last >= b.next_base)
            or (b.end_offset is not None and one.first >= b.end_offset)
        ):
            return walked, True, one
        state.last_offset = last
        walked.append(Walked(payload, one.inner, one.shift, one.first, last, span))
        size += len(payload)
        if size >= STRETCH_BYTES:
            break
    return walked, False, None


def wrapper_rows(
    walked: list[Walked],
    wrappers: np.ndarray,
    state: DecodeState,
    parts: Parts,
    ahead: Ahead,
) -> dict[str, np.ndarray]:
    """The rows of these wrappers' inner messages within the task's offsets (``wrappers``: the
    wrappers' own kernel fields, one column each; ``entry``: the wrapper's index here)."""
    b = state.bounds
    counts = np.array([w.inner.shape[1] for w in walked], np.int64)
    inner = walked[0].inner if len(walked) == 1 else np.concatenate([w.inner for w in walked], 1)
    which = np.repeat(np.arange(len(walked)), counts)
    offset = inner[LK.OFFSET] + np.repeat([w.shift for w in walked], counts)
    keep = np.ones(offset.shape[0], np.bool_)
    if b.start_offset is not None:
        keep &= offset >= b.start_offset
    if b.end_offset is not None:
        keep &= offset < b.end_offset
    which = which[keep]
    payload_at = np.cumsum([0] + [len(w.payload) for w in walked[:-1]], dtype=np.int64)
    if keep.any():
        payload_at += _to_arena(parts, walked, ahead)
    magic = inner[LK.MAGIC][keep]
    attributes = wrappers[LK.ATTRIBUTES][which]  # the wrapper's timestamp type is theirs
    log_append = (wrappers[LK.MAGIC][which] == 1) & ((attributes & TIMESTAMP_TYPE_MASK) != 0)
    klen, vlen = inner[LK.KLEN][keep], inner[LK.VLEN][keep]
    n = which.shape[0]
    return {
        "offset": offset[keep],
        "ts": np.where(
            log_append,
            np.where(magic == 1, wrappers[LK.TIMESTAMP][which], -1),
            inner[LK.TIMESTAMP][keep],
        ),
        "ts_type": timestamp_types(magic, attributes),
        "kpos": np.where(klen >= 0, inner[LK.KPOS][keep] + payload_at[which], 0),
        "klen": klen,
        "vpos": np.where(vlen >= 0, inner[LK.VPOS][keep] + payload_at[which], 0),
        "vlen": vlen,
        "hpos": np.zeros(n, np.int64),
        "hcount": np.zeros(n, np.int64),
        "entry": which.astype(np.int64),
    }


def scalar_rows(
    walked: Walked, magic: int, attributes: int, timestamp: int, state: DecodeState, parts: Parts
) -> list[tuple[int, ...]]:
    """:func:`wrapper_rows` of one wrapper (its magic, attributes and timestamp) as tuples
    (offset, ts, ts_type, kpos, klen, vpos, vlen): for a few rows, faster than arrays."""
    b = state.bounds
    log_append = magic == 1 and attributes & TIMESTAMP_TYPE_MASK != 0
    kind = int(attributes & TIMESTAMP_TYPE_MASK != 0)
    address = None
    rows: list[tuple[int, ...]] = []
    for _, relative, inner_magic, _, ts, kpos, klen, vpos, vlen in walked.inner.T.tolist():
        offset = relative + walked.shift
        if (b.start_offset is not None and offset < b.start_offset) or (
            b.end_offset is not None and offset >= b.end_offset
        ):
            continue
        if address is None:
            address = parts.to_arena(walked.payload)
        if log_append:
            ts = timestamp if inner_magic == 1 else -1
        rows.append(
            (offset, ts, -1 if inner_magic == 0 else kind,
             kpos + address if klen >= 0 else 0, klen,
             vpos + address if vlen >= 0 else 0, vlen)
        )  # fmt: skip
    return rows


def timestamp_types(magic: np.ndarray, attributes: np.ndarray) -> np.ndarray:
    """-1 for magic 0; else 1 (LogAppendTime) or 0 (CreateTime) from the attributes."""
    kind = (attributes & TIMESTAMP_TYPE_MASK) != 0
    return np.where(magic == 0, -1, kind).astype(np.int32)


@dataclass(frozen=True, slots=True, eq=False)
class Ahead:
    """What the read-ahead decompressed of a window's wrappers: its arena, and where each
    wrapper's payload lies in it, by the wrapper's window position."""

    arena: memoryview | None
    spans: dict[int, tuple[int, int]]

    @staticmethod
    def of(decompressed: Decompressed | None) -> Ahead:
        if decompressed is None:
            return NOTHING_AHEAD
        starts = (decompressed.src_start - decompressed.src_start[:1]).tolist()
        ends = (decompressed.src_end - decompressed.src_start[:1]).tolist()
        spans = zip(decompressed.positions.tolist(), zip(starts, ends, strict=True), strict=True)
        return Ahead(decompressed.arena, dict(spans))


NOTHING_AHEAD = Ahead(None, {})


def _to_arena(parts: Parts, walked: list[Walked], ahead: Ahead) -> int:
    """The arena address of these wrappers' payloads, added one after another: one view of the
    read-ahead arena when they lie there in this order, else a copy joined."""
    spans = [w.span for w in walked]
    first, last = spans[0], spans[-1]
    if (
        ahead.arena is not None
        and first is not None
        and last is not None
        and all(
            a is not None and b is not None and a[1] == b[0] for a, b in itertools.pairwise(spans)
        )
    ):
        return parts.to_arena(ahead.arena[first[0] : last[1]])
    return parts.to_arena(
        walked[0].payload if len(walked) == 1 else b"".join(w.payload for w in walked)
    )


def decompress_wrappers_ahead(
    window: np.ndarray,
    positions: np.ndarray,
    magics: np.ndarray,
    verify: bool,
    max_decompressed_bytes: int,
    arena_buffer: Callable[[int], np.ndarray],
    called_off: Callable[[], bool] | None = None,
) -> Decompressed | None:
    """Decompress a window's legacy wrappers ahead of time, on the reader's read-ahead thread
    (the codecs release the GIL), as :func:`kafka_segments_ds.reader.v2.decompress_ahead` does
    for v2 batches: the wrappers from the window's first entry up to the first message that
    does not decode or wrapper that does not decompress, into ``arena_buffer``. None when the
    window holds v2 batches or no wrapper. :func:`add_wrappers` takes a wrapper's payload from
    here when it is here, and decompresses it itself otherwise; it makes every check and
    decides what to keep either way. ``called_off()``, asked before each wrapper, says the
    reader will not take this window (None)."""
    if not positions.shape[0] or (magics == 2).any():
        return None
    if not (window[positions + 17] & CODEC_MASK).any():  # (whole entries: the byte is there)
        return None  # no wrapper: nothing to decode twice
    fields, count = LK.read_messages(window, positions, verify)
    codec = fields[LK.ATTRIBUTES, :count] & CODEC_MASK
    wrappers = np.flatnonzero((codec >= 1) & (codec <= 3) & (fields[LK.VLEN, :count] >= 0))
    view = window.data
    blobs: list[bytes] = []
    for w in wrappers.tolist():
        if called_off is not None and called_off():
            return None
        try:
            blobs.append(_decompressed_value(view, fields, w, max_decompressed_bytes))
        except KafkaSegmentsError:
            break  # decompressed (and reported) in the foreground
    if not blobs:
        return None
    sizes = np.array([len(b) for b in blobs], np.int64)
    end = window.shape[0] + np.cumsum(sizes)
    out = arena_buffer(int(sizes.sum())).data
    at = 0
    for blob in blobs:
        out[at : at + len(blob)] = blob
        at += len(blob)
    return Decompressed(fields[LK.POSITION, wrappers[: len(blobs)]], out, end - sizes, end)
