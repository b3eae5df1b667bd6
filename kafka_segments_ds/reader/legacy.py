"""The legacy (magic 0/1) window decoder.

One kernel call (:mod:`kafka_segments_ds.records.legacy_kernels`) decodes the messages of a run.
A stretch of uncompressed messages whose offsets follow the rules becomes rows at once, its keys
and values addressed in the window itself. The other entries go one at a time through the
per-entry path: a compressed wrapper (its payload decompressed once, its inner messages decoded
by one kernel call and addressed in the window's arena), an entry that breaks the order of
offsets or reaches the task's end, and a malformed one, for which the reference decoder
(:mod:`kafka_segments_ds.records.legacy`) says what is wrong, so the error is the same on both
paths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafka_segments_ds.errors import CorruptSegmentError, KafkaSegmentsError
from kafka_segments_ds.reader.rows import (
    ENTRY_FIELDS,
    ROW_FIELDS,
    DecodeState,
    Fault,
    Parts,
    merged,
)
from kafka_segments_ds.records import legacy_kernels as LK
from kafka_segments_ds.records.compression import decompress
from kafka_segments_ds.records.legacy import (
    TIMESTAMP_TYPE_MASK,
    LegacyMessage,
    decode_legacy_message,
    expand_wrapper,
)

CODEC_MASK = 0x07
WRAPPER_STRETCH_BYTES = 64 << 20  # decompressed bytes of the wrappers decoded together


@dataclass(slots=True)
class _Inner:
    """A wrapper's inner messages: absolute offsets, effective timestamps, and their keys and
    values as (position, length) in ``payload`` (length -1: null)."""

    offset: np.ndarray
    ts: np.ndarray
    ts_type: np.ndarray
    kpos: np.ndarray
    klen: np.ndarray
    vpos: np.ndarray
    vlen: np.ndarray
    payload: bytes


class _Out:
    """The rows and entries of one run, as arrays, in order."""

    def __init__(self, state: DecodeState, parts: Parts) -> None:
        self.rows: list[dict[str, np.ndarray]] = []
        self.entries: list[dict[str, np.ndarray]] = []
        self.count = 0
        self.first_entry = parts.entry_count
        self.want_entry = state.want_entry

    def add(self, entries: dict[str, np.ndarray], rows: dict[str, np.ndarray]) -> None:
        """Entries (one array per field) and their rows (``rows["entry"]``: the entry's index
        counted from 0 in this run)."""
        rows["entry"] = rows["entry"] + (self.first_entry + self.count)
        self.count += entries["position"].shape[0]
        self.rows.append(rows)
        self.entries.append(entries)

    def finish(self, parts: Parts) -> None:
        if not self.count:
            return
        r = merged((*ROW_FIELDS, "entry"), self.rows)
        if not self.want_entry:
            r = {f: a for f, a in r.items() if f != "entry"}
        else:
            parts.entries.append(merged(ENTRY_FIELDS, self.entries))
        parts.rows.append(r)
        parts.entry_count += self.count


def decode_legacy_run(
    state: DecodeState, window: np.ndarray, base: int, positions: np.ndarray, parts: Parts
) -> Fault | None:
    """Decode the legacy entries at ``positions`` of ``window`` (file position ``base``) into
    ``parts``, up to the first malformed one, which is returned."""
    out = _Out(state, parts)
    fault = None
    i, n = 0, positions.shape[0]
    while i < n and fault is None and not state.reached_end:
        fields, count = LK.read_messages(window, positions[i:], state.options.verify_checksums)
        at = 0
        while at < count:
            plain = at + _plain_stretch(state, fields[:, at:count])
            if plain > at:
                _add_plain(state, fields[:, at:plain], base, out)
                at = plain
            if at < count and state.options.deep:
                wrappers = _add_wrappers(state, window, base, fields[:, at:count], parts, out)
                at += wrappers
                if wrappers:
                    continue
            if at < count:
                fault = _one_entry(state, window, base, int(fields[LK.POSITION, at]), parts, out)
                at += 1
                if fault is not None or state.reached_end:
                    break
        i += at
        if at == count and i < n and fault is None and not state.reached_end:
            # the kernel stopped at this entry: the per-entry path says why (or, should the two
            # ever disagree, decodes it)
            fault = _one_entry(state, window, base, int(positions[i]), parts, out)
            i += 1
    out.finish(parts)
    return fault


def _plain_stretch(state: DecodeState, fields: np.ndarray) -> int:
    """How many of these decoded messages, from the first, are uncompressed and take no
    decision of the per-entry path: offsets increasing from the last one, below the next
    segment's base offset and the task's end."""
    b = state.bounds
    offset = fields[LK.OFFSET]
    previous = np.empty_like(offset)
    previous[0] = state.last_offset
    previous[1:] = offset[:-1]
    stop = ((fields[LK.ATTRIBUTES] & CODEC_MASK) != 0) | (offset <= previous)
    for limit in (b.next_base, b.end_offset):
        if limit is not None:
            stop |= offset >= limit
    found = np.flatnonzero(stop)
    return int(found[0]) if found.shape[0] else offset.shape[0]


def _add_plain(state: DecodeState, fields: np.ndarray, base: int, out: _Out) -> None:
    """Rows and entries of uncompressed messages (one row each) past the task's start."""
    offset = fields[LK.OFFSET]
    state.last_offset = int(offset[-1])
    start = state.bounds.start_offset
    if start is not None and offset[0] < start:
        fields = fields[:, offset >= start]
        offset = fields[LK.OFFSET]
    n = offset.shape[0]
    if not n:
        return
    magic = fields[LK.MAGIC]
    attributes = fields[LK.ATTRIBUTES]
    none = np.full(n, -1, np.int64)
    out.add(
        {
            "position": fields[LK.POSITION] + base,
            "magic": magic,
            "codec": np.zeros(n, np.int64),
            "base_offset": offset,
            "last_offset": offset,
            "producer_id": none,
            "producer_epoch": none,
            "base_sequence": none,
            "attributes": attributes,
            "leader_epoch": none,
        },
        {
            "offset": offset,
            "ts": fields[LK.TIMESTAMP],
            "ts_type": _timestamp_types(magic, attributes),
            "kpos": fields[LK.KPOS],
            "klen": fields[LK.KLEN],
            "vpos": fields[LK.VPOS],
            "vlen": fields[LK.VLEN],
            "hpos": np.zeros(n, np.int64),
            "hcount": np.zeros(n, np.int64),
            "entry": np.arange(n, dtype=np.int64),
        },
    )


def _add_wrappers(
    state: DecodeState,
    window: np.ndarray,
    base: int,
    fields: np.ndarray,
    parts: Parts,
    out: _Out,
) -> int:
    """Rows and entries of the compressed wrappers these decoded messages start with, read deep;
    how many. It stops at the first wrapper that takes a decision of the per-entry path: one
    whose payload does not decompress or holds a malformed message, whose offsets contradict
    themselves or break the order of offsets, or that reaches the task's end."""
    opts = state.options
    b = state.bounds
    codec = fields[LK.ATTRIBUTES] & CODEC_MASK
    eligible = (codec >= 1) & (codec <= 3) & (fields[LK.VLEN] >= 0)
    n = int(np.argmin(eligible)) if not eligible.all() else eligible.shape[0]
    payloads: list[bytes] = []
    walked: list[np.ndarray] = []
    size = 0
    view = window.data
    for w in range(n):
        at, length = int(fields[LK.VPOS, w]), int(fields[LK.VLEN, w])
        magic = int(fields[LK.MAGIC, w])
        try:
            payload = decompress(
                int(codec[w]),
                view[at : at + length],
                magic=magic,
                max_bytes=opts.max_decompressed_bytes,
            )
        except KafkaSegmentsError:
            break
        inner, bad, _ = LK.walk_inner(np.frombuffer(payload, np.uint8), opts.verify_checksums)
        if bad or not inner.shape[1]:
            break
        payloads.append(payload)
        walked.append(inner)
        size += len(payload)
        if size >= WRAPPER_STRETCH_BYTES:
            break
    n = len(walked)
    if not n:
        return 0
    fields = fields[:, :n]
    counts = np.array([w.shape[1] for w in walked], np.int64)
    inner = np.concatenate(walked, axis=1)
    ends = np.cumsum(counts)
    starts = ends - counts
    which = np.repeat(np.arange(n), counts)
    relative = inner[LK.OFFSET]
    w_offset, w_magic = fields[LK.OFFSET], fields[LK.MAGIC]
    last_relative = relative[ends - 1]
    # the wrappers' own offsets agree with their inner ones (records.legacy.check_inner_offsets)
    ok = relative[starts] >= 0
    rising = np.ones(relative.shape[0], np.bool_)
    rising[1:] = relative[1:] > relative[:-1]
    rising[starts] = True
    ok &= np.logical_and.reduceat(rising, starts)
    relative_numbering = (w_magic == 1) & (w_offset != 0)
    ok &= np.where(w_magic == 0, last_relative == w_offset, True)
    ok &= np.where((w_magic == 1) & (w_offset == 0), last_relative == counts - 1, True)
    ok &= np.where(relative_numbering, w_offset >= last_relative, True)
    shift = np.where(relative_numbering, w_offset - last_relative, 0)
    offset = relative + shift[which]
    first, last = offset[starts], np.maximum(w_offset, offset[ends - 1])
    # the order of offsets, the next segment and the task's end (as for plain messages)
    previous = np.empty_like(last)
    previous[0] = state.last_offset
    previous[1:] = last[:-1]
    ok &= first > previous
    if b.next_base is not None:
        ok &= last < b.next_base
    if b.end_offset is not None:
        ok &= first < b.end_offset
    n = int(np.argmin(ok)) if not ok.all() else n
    if not n:
        return 0
    state.last_offset = int(last[n - 1])
    kept = np.ones(n, np.bool_) if b.start_offset is None else last[:n] >= b.start_offset
    rows = which < n
    rows &= kept[np.minimum(which, n - 1)]
    if b.start_offset is not None:
        rows &= offset >= b.start_offset
    if b.end_offset is not None:
        rows &= offset < b.end_offset
    address = parts.to_arena(b"".join(payloads[:n])) if rows.any() else 0
    payload_at = address + np.cumsum([0] + [len(p) for p in payloads[: n - 1]], dtype=np.int64)
    entry_of = np.cumsum(kept) - 1  # a kept wrapper's entry index in this stretch
    lat = (w_magic == 1) & ((fields[LK.ATTRIBUTES] & TIMESTAMP_TYPE_MASK) != 0)
    r_which = which[rows]
    r_magic = inner[LK.MAGIC][rows]
    klen, vlen = inner[LK.KLEN][rows], inner[LK.VLEN][rows]
    entries = np.flatnonzero(kept)
    none = np.full(entries.shape[0], -1, np.int64)
    out.add(
        {
            "position": fields[LK.POSITION, entries] + base,
            "magic": w_magic[entries],
            "codec": codec[entries],
            "base_offset": first[entries],
            "last_offset": w_offset[entries],
            "producer_id": none,
            "producer_epoch": none,
            "base_sequence": none,
            "attributes": fields[LK.ATTRIBUTES, entries],
            "leader_epoch": none,
        },
        {
            "offset": offset[rows],
            "ts": np.where(
                lat[r_which],
                np.where(r_magic == 1, fields[LK.TIMESTAMP][r_which], -1),
                inner[LK.TIMESTAMP][rows],
            ),
            "ts_type": _timestamp_types(r_magic, fields[LK.ATTRIBUTES][r_which]),
            "kpos": np.where(klen >= 0, inner[LK.KPOS][rows] + payload_at[r_which], 0),
            "klen": klen,
            "vpos": np.where(vlen >= 0, inner[LK.VPOS][rows] + payload_at[r_which], 0),
            "vlen": vlen,
            "hpos": np.zeros(r_which.shape[0], np.int64),
            "hcount": np.zeros(r_which.shape[0], np.int64),
            "entry": entry_of[r_which],
        },
    )
    return n


def _timestamp_types(magic: np.ndarray, attributes: np.ndarray) -> np.ndarray:
    """-1 for magic 0; else 1 (LogAppendTime) or 0 (CreateTime) from the attributes."""
    kind = (attributes & TIMESTAMP_TYPE_MASK) != 0
    return np.where(magic == 0, -1, kind).astype(np.int32)


def _one_entry(
    state: DecodeState, window: np.ndarray, base: int, p: int, parts: Parts, out: _Out
) -> Fault | None:
    """The entry at ``p`` the full way: the fault it is, or its rows added to ``out``."""
    opts = state.options
    b = state.bounds
    # FAILFAST: an uncompressed message at/after end_offset ends the task unjudged (were it
    # dropped the read would raise there, so nothing after it is returned either way); a
    # wrapper's offset field is its last offset, its first may be below the end: judged
    failfast_end = None if opts.drop_malformed else b.end_offset
    if failfast_end is not None and _uncompressed_from(window, p, failfast_end):
        state.reached_end = True
        return None
    try:
        message = decode_legacy_message(window.data, p, verify_checksum=opts.verify_checksums)
        compressed = message.compression != 0  # raises for zstd or ids 5-7
    except CorruptSegmentError as err:
        offset = int.from_bytes(window[p : p + 8].tobytes(), "big", signed=True)
        # the decoder's position is the entry's own (window-relative) start
        return Fault(base + p, offset, type(err)(err.reason))
    inner: _Inner | None = None
    try:
        if compressed and (opts.deep or state.want_entry):
            inner = _expand(message, opts.verify_checksums, opts.max_decompressed_bytes)
    except CorruptSegmentError as err:
        where = (
            ""
            if err.position is None
            else f" (byte {err.position} of the decompressed wrapper payload)"
        )
        return Fault(base + p, message.offset, type(err)(err.reason + where))
    first = int(inner.offset[0]) if inner is not None else message.offset
    # a magic-1 wrapper with offset 0 (old librdkafka) keeps its relative offsets
    last = max(message.offset, int(inner.offset[-1])) if inner is not None else message.offset
    problem = None
    if first <= state.last_offset:
        problem = f"offsets not increasing: offset {first} after offset {state.last_offset}"
    elif b.next_base is not None and last >= b.next_base:
        problem = f"offset {last} reaches the next segment's base offset {b.next_base}"
    if problem is not None:
        return Fault(base + p, message.offset, CorruptSegmentError(problem))
    state.last_offset = last
    if b.start_offset is not None and last < b.start_offset:
        return None  # all before the start (a magic-1 wrapper with offset field 0 keeps its
        # producer's numbering 0..n-1: its offset field is not its last: 20261203:178157)
    if b.end_offset is not None and first >= b.end_offset:
        state.reached_end = True
        return None
    entry = {
        "position": base + p,
        "magic": message.magic,
        "codec": int(message.compression),
        "base_offset": first,
        "last_offset": message.offset,
        "producer_id": -1,
        "producer_epoch": -1,
        "base_sequence": -1,
        "attributes": message.attributes,
        "leader_epoch": -1,
    }
    entries = {f: np.array([v], np.int64) for f, v in entry.items()}
    if inner is not None and opts.deep:
        out.add(entries, _inner_rows(inner, state, parts))
    else:
        out.add(entries, _message_rows(message, parts))
    return None


def _message_rows(message: LegacyMessage, parts: Parts) -> dict[str, np.ndarray]:
    """The one row of a message (a wrapper read shallow: its compressed payload as value)."""
    row = {"offset": message.offset, "ts": message.timestamp, "hpos": 0, "hcount": 0, "entry": 0}
    for blob, pos_name, len_name in (
        (message.key, "kpos", "klen"),
        (message.value, "vpos", "vlen"),
    ):
        row[pos_name] = 0 if blob is None else parts.to_arena(blob)
        row[len_name] = -1 if blob is None else len(blob)
    rows = {f: np.array([v], np.int64) for f, v in row.items()}
    rows["ts_type"] = np.array([message.timestamp_type], np.int32)
    return rows


def _inner_rows(inner: _Inner, state: DecodeState, parts: Parts) -> dict[str, np.ndarray]:
    """The rows of a wrapper's inner messages within the task's offsets; their keys and values
    stay in the payload, which joins the arena."""
    b = state.bounds
    keep = np.ones(inner.offset.shape[0], np.bool_)
    if b.start_offset is not None:
        keep &= inner.offset >= b.start_offset
    if b.end_offset is not None:
        keep &= inner.offset < b.end_offset
    n = int(keep.sum())
    address = parts.to_arena(inner.payload) if n else 0
    klen, vlen = inner.klen[keep], inner.vlen[keep]
    return {
        "offset": inner.offset[keep],
        "ts": inner.ts[keep],
        "ts_type": inner.ts_type[keep],
        "kpos": np.where(klen >= 0, inner.kpos[keep] + address, 0),
        "klen": klen,
        "vpos": np.where(vlen >= 0, inner.vpos[keep] + address, 0),
        "vlen": vlen,
        "hpos": np.zeros(n, np.int64),
        "hcount": np.zeros(n, np.int64),
        "entry": np.zeros(n, np.int64),
    }


def _expand(wrapper: LegacyMessage, verify: bool, max_bytes: int) -> _Inner:
    """A wrapper's inner messages, as :func:`~kafka_segments_ds.records.legacy.expand_wrapper`
    gives them (and raises when it raises: on any doubt, it is asked)."""
    if wrapper.value is not None:
        payload = decompress(
            wrapper.compression, wrapper.value, magic=wrapper.magic, max_bytes=max_bytes
        )
        fields, bad, _ = LK.walk_inner(np.frombuffer(payload, np.uint8), verify)
        inner = None if bad else _absolute(wrapper, fields, bytes(payload))
        if inner is not None:
            return inner
    messages = expand_wrapper(wrapper, verify_checksum=verify, max_bytes=max_bytes)
    return _from_messages(messages)


def _absolute(wrapper: LegacyMessage, fields: np.ndarray, payload: bytes) -> _Inner | None:
    """Inner messages with absolute offsets and effective timestamps, or None when their
    offsets contradict each other or the wrapper (the reference decoder then says how)."""
    relative = fields[LK.OFFSET]
    n = relative.shape[0]
    if not n or relative[0] < 0 or (n > 1 and not bool((relative[1:] > relative[:-1]).all())):
        return None
    w, last = wrapper.offset, int(relative[-1])
    if wrapper.magic == 0:
        if last != w:
            return None
        offset = relative
    elif w == 0:
        if last != n - 1:
            return None
        offset = relative  # a producer's numbering 0..n-1
    else:
        if w < last:
            return None
        offset = relative + (w - last)
    magic = fields[LK.MAGIC]
    if wrapper.timestamp_type == 1:
        ts = np.where(magic == 1, wrapper.timestamp, -1)
    else:
        ts = fields[LK.TIMESTAMP]
    wrapper_bit = np.full(n, wrapper.attributes & TIMESTAMP_TYPE_MASK, np.int64)
    return _Inner(
        offset,
        ts,
        _timestamp_types(magic, wrapper_bit),
        fields[LK.KPOS],
        fields[LK.KLEN],
        fields[LK.VPOS],
        fields[LK.VLEN],
        payload,
    )


def _from_messages(messages: list[LegacyMessage]) -> _Inner:
    """:class:`_Inner` of the reference decoder's messages (their keys and values joined)."""
    blobs: list[bytes] = []
    size = 0
    spans: list[tuple[int, int, int, int]] = []
    for m in messages:
        kpos, klen = (0, -1) if m.key is None else (size, len(m.key))
        size += max(klen, 0)
        vpos, vlen = (0, -1) if m.value is None else (size, len(m.value))
        size += max(vlen, 0)
        blobs += [m.key or b"", m.value or b""]
        spans.append((kpos, klen, vpos, vlen))
    where = np.array(spans, np.int64).reshape(-1, 4).T
    return _Inner(
        np.array([m.offset for m in messages], np.int64),
        np.array([m.timestamp for m in messages], np.int64),
        np.array([m.timestamp_type for m in messages], np.int32),
        where[0],
        where[1],
        where[2],
        where[3],
        b"".join(blobs),
    )


def _uncompressed_from(window: np.ndarray, p: int, offset: int) -> bool:
    """Whether the entry at ``p`` of ``window`` is an uncompressed message (its attributes
    byte says so) whose offset field is ``offset`` or above."""
    if p + 17 >= window.shape[0] or window[p + 17] & 0x07:
        return False
    return int.from_bytes(window[p : p + 8].tobytes(), "big", signed=True) >= offset
