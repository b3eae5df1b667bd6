"""The legacy (magic 0/1) window decoder.

One kernel call (:mod:`kafka_segments_ds.records.legacy_kernels`) decodes the messages of a run.
Stretches of uncompressed messages whose offsets follow the rules become rows at once, their
keys and values addressed in the window itself (so do wrappers read shallow, one row each,
unless a column wants their entry); read deep, stretches of compressed wrappers do too
(:mod:`kafka_segments_ds.reader.wrappers`). The other entries go one at a time through the
per-entry path: a wrapper read shallow whose entry a column wants (its first offset is its
first inner message's), an entry that breaks the order of offsets or reaches the task's end,
and a malformed one, for which the reference decoder
(:mod:`kafka_segments_ds.records.legacy`) says what is wrong, so the error is the same on both
paths. The stretches are found from masks computed once per kernel call, so a window of
entries alternating between the paths costs no more than one of either.
"""

from __future__ import annotations

import numpy as np

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.reader.rows import (
    ENTRY_FIELDS,
    ROW_FIELDS,
    DecodeState,
    Fault,
    Parts,
    merged,
)
from kafka_segments_ds.reader.v2 import Decompressed
from kafka_segments_ds.reader.wrappers import (
    CODEC_MASK,
    NOTHING_AHEAD,
    Ahead,
    Walked,
    add_wrappers,
    expand,
    scalar_rows,
    timestamp_types,
    wrapper_rows,
)
from kafka_segments_ds.records import legacy_kernels as LK
from kafka_segments_ds.records.legacy import (
    TIMESTAMP_TYPE_MASK,
    LegacyMessage,
    decode_legacy_message,
)

# stretches of fewer entries (or rows) than this are added row by row: arrays cost more below
SMALL = 32
# a row added row by row: offset, ts, ts_type, kpos, klen, vpos, vlen
_SCALAR_ROW_FIELDS = ("offset", "ts", "ts_type", "kpos", "klen", "vpos", "vlen")


class _Out:
    """The rows and entries of one run, in order: arrays of stretches, and single entries with
    their rows as tuples (joined into arrays before the next stretch)."""

    def __init__(self, state: DecodeState, parts: Parts) -> None:
        self.rows: list[dict[str, np.ndarray]] = []
        self.entries: list[dict[str, np.ndarray]] = []
        self.count = 0
        self.first_entry = parts.entry_count
        self.want_entry = state.want_entry
        self._entry_values: list[tuple[int, ...]] = []
        self._row_values: list[tuple[int, ...]] = []  # _SCALAR_ROW_FIELDS and the entry

    def add(self, entries: dict[str, np.ndarray], rows: dict[str, np.ndarray]) -> None:
        """Entries (one array per field) and their rows (``rows["entry"]``: the entry's index
        counted from 0 in this run)."""
        self._join()
        rows["entry"] = rows["entry"] + (self.first_entry + self.count)
        self.count += entries["position"].shape[0]
        self.rows.append(rows)
        self.entries.append(entries)

    def add_one(self, entry: tuple[int, ...], rows: list[tuple[int, ...]]) -> None:
        """One entry (:data:`ENTRY_FIELDS`) and its rows (:data:`_SCALAR_ROW_FIELDS`)."""
        index = self.first_entry + self.count
        self._entry_values.append(entry)
        self._row_values += [(*row, index) for row in rows]
        self.count += 1

    def _join(self) -> None:
        if not self._entry_values:
            return
        entries = np.array(self._entry_values, np.int64).reshape(-1, len(ENTRY_FIELDS))
        self.entries.append(dict(zip(ENTRY_FIELDS, entries.T, strict=True)))
        values = np.array(self._row_values, np.int64).reshape(-1, len(_SCALAR_ROW_FIELDS) + 1)
        rows = dict(zip((*_SCALAR_ROW_FIELDS, "entry"), values.T, strict=True))
        rows["ts_type"] = rows["ts_type"].astype(np.int32)
        rows["hpos"] = rows["hcount"] = np.zeros(values.shape[0], np.int64)
        self.rows.append(rows)
        self._entry_values, self._row_values = [], []

    def finish(self, parts: Parts) -> None:
        self._join()
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
    state: DecodeState,
    window: np.ndarray,
    base: int,
    positions: np.ndarray,
    parts: Parts,
    decompressed: Decompressed | None = None,
) -> Fault | None:
    """Decode the legacy entries at ``positions`` of ``window`` (file position ``base``) into
    ``parts``, up to the first malformed one, which is returned. ``decompressed`` may hold the
    window's wrappers decompressed by the read-ahead
    (:func:`~kafka_segments_ds.reader.wrappers.decompress_wrappers_ahead`)."""
    out = _Out(state, parts)
    ahead = Ahead.of(decompressed)
    fault = None
    walked: Walked | None = None  # the wrapper the wrapper path refused, walked
    i, n = 0, positions.shape[0]
    while i < n and fault is None and not state.reached_end:
        fields, count = LK.read_messages(window, positions[i:], state.options.verify_checksums)
        stretches = _Stretches(state, fields[:, :count])
        at = 0
        while at < count:
            plain = stretches.plain_from(at)
            if plain > at:
                _add_plain(state, fields[:, at:plain], base, out)
                at = plain
            if at < count and state.options.deep:
                wrappers, refused, walked = _add_wrappers(
                    state, window, base, fields[:, at : stretches.wrappers_from(at)], parts, out,
                    ahead,
                )  # fmt: skip
                at += wrappers
                if wrappers and not refused:
                    continue  # (a refused wrapper goes to the per-entry path, walked once)
            if at < count:
                p = int(fields[LK.POSITION, at])
                fault = _one_entry(state, window, base, p, parts, out, walked)
                walked = None
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


class _Stretches:
    """Where the stretches of a kernel call's decoded messages end, from masks computed once."""

    def __init__(self, state: DecodeState, fields: np.ndarray) -> None:
        b = state.bounds
        self.state = state
        self.offset = offset = fields[LK.OFFSET]
        codec = fields[LK.ATTRIBUTES] & CODEC_MASK
        # a wrapper read shallow, with no column of its entry, is one row as a message is (its
        # compressed payload the value): the same decisions, but for a codec that is no codec
        shallow = not (state.options.deep or state.want_entry)
        self.plain = codec <= 3 if shallow else codec == 0
        self.limit = min((x for x in (b.next_base, b.end_offset) if x is not None), default=None)
        # a plain message ends a stretch of them when compressed, at or past a limit, or not
        # above the one before (the first's "before" is the state's, checked in plain_from)
        stop = ~self.plain
        stop[1:] |= offset[1:] <= offset[:-1]
        if self.limit is not None:
            stop |= offset >= self.limit
        self.plain_stops = np.flatnonzero(stop)
        eligible = (codec >= 1) & (codec <= 3) & (fields[LK.VLEN] >= 0)
        self.wrapper_stops = np.flatnonzero(~eligible)
        self.count = offset.shape[0]

    def plain_from(self, at: int) -> int:
        """The end of the stretch of plain messages from ``at`` (``at`` itself: none)."""
        offset = int(self.offset[at])
        if (
            not self.plain[at]
            or offset <= self.state.last_offset
            or (self.limit is not None and offset >= self.limit)
        ):
            return at
        return self._next(self.plain_stops, at + 1)

    def wrappers_from(self, at: int) -> int:
        """The end of the stretch of wrappers (codec 1-3, with a value) from ``at``."""
        return self._next(self.wrapper_stops, at)

    def _next(self, stops: np.ndarray, at: int) -> int:
        i = int(np.searchsorted(stops, at))
        return int(stops[i]) if i < stops.shape[0] else self.count


def _add_plain(state: DecodeState, fields: np.ndarray, base: int, out: _Out) -> None:
    """Rows and entries of messages that are one row each (uncompressed ones, and wrappers read
    shallow with no entry column) past the task's start."""
    offset = fields[LK.OFFSET]
    state.last_offset = int(offset[-1])
    start = state.bounds.start_offset
    if start is not None and offset[0] < start:
        fields = fields[:, offset >= start]
        offset = fields[LK.OFFSET]
    n = offset.shape[0]
    if n < SMALL:
        for position, o, magic_, attributes_, ts, kpos, klen, vpos, vlen in fields.T.tolist():
            kind = -1 if magic_ == 0 else int(attributes_ & TIMESTAMP_TYPE_MASK != 0)
            out.add_one(
                (base + position, magic_, attributes_ & CODEC_MASK, o, o, -1, -1, -1, attributes_,
                 -1),
                [(o, ts, kind, kpos, klen, vpos, vlen)],
            )  # fmt: skip
        return
    magic = fields[LK.MAGIC]
    attributes = fields[LK.ATTRIBUTES]
    none = np.full(n, -1, np.int64)
    out.add(
        {
            "position": fields[LK.POSITION] + base,
            "magic": magic,
            "codec": attributes & CODEC_MASK,
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
            "ts_type": timestamp_types(magic, attributes),
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
    ahead: Ahead,
) -> tuple[int, bool, Walked | None]:
    """Rows and entries of the wrappers these decoded messages start with (:func:`~kafka_segments
    _ds.reader.wrappers.add_wrappers` says which): how many, whether the next one is for the
    per-entry path, and that one walked if it was."""
    walked, refused, refused_walked = add_wrappers(state, window, fields, ahead)
    n = len(walked)
    start = state.bounds.start_offset
    kept = [i for i, w in enumerate(walked) if start is None or w.last >= start]
    if not kept:
        return n, refused, refused_walked
    if sum(walked[i].inner.shape[1] for i in kept) < SMALL:
        for i in kept:
            magic, offset, attributes, timestamp = (
                int(fields[f, i]) for f in (LK.MAGIC, LK.OFFSET, LK.ATTRIBUTES, LK.TIMESTAMP)
            )
            out.add_one(
                (base + int(fields[LK.POSITION, i]), magic, attributes & CODEC_MASK,
                 walked[i].first, offset, -1, -1, -1, attributes, -1),
                scalar_rows(walked[i], magic, attributes, timestamp, state, parts),
            )  # fmt: skip
        return n, refused, refused_walked
    wrappers = fields[:, kept]
    m = len(kept)
    none = np.full(m, -1, np.int64)
    out.add(
        {
            "position": wrappers[LK.POSITION] + base,
            "magic": wrappers[LK.MAGIC],
            "codec": wrappers[LK.ATTRIBUTES] & CODEC_MASK,
            "base_offset": np.array([walked[i].first for i in kept], np.int64),
            "last_offset": wrappers[LK.OFFSET],
            "producer_id": none,
            "producer_epoch": none,
            "base_sequence": none,
            "attributes": wrappers[LK.ATTRIBUTES],
            "leader_epoch": none,
        },
        wrapper_rows([walked[i] for i in kept], wrappers, state, parts, ahead),
    )
    return n, refused, refused_walked


def _one_entry(
    state: DecodeState,
    window: np.ndarray,
    base: int,
    p: int,
    parts: Parts,
    out: _Out,
    walked: Walked | None = None,
) -> Fault | None:
    """The entry at ``p`` the full way: the fault it is, or its rows added to ``out``
    (``walked``: the wrapper there, walked already)."""
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
    inner: Walked | None = None
    try:
        if compressed and (opts.deep or state.want_entry):
            inner = walked or expand(message, opts.verify_checksums, opts.max_decompressed_bytes)
    except CorruptSegmentError as err:
        where = (
            ""
            if err.position is None
            else f" (byte {err.position} of the decompressed wrapper payload)"
        )
        return Fault(base + p, message.offset, type(err)(err.reason + where))
    first = inner.first if inner is not None else message.offset
    # a magic-1 wrapper with offset 0 (old librdkafka) keeps its relative offsets
    last = max(message.offset, inner.last) if inner is not None else message.offset
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
    entry = (base + p, message.magic, int(message.compression), first, message.offset, -1, -1,
             -1, message.attributes, -1)  # fmt: skip
    # (a wrapper read deep gets here only should the kernel and the reference decoder disagree:
    # the wrapper path takes every other one that is not a fault or the task's end)
    if inner is not None and opts.deep and inner.inner.shape[1] >= SMALL:
        wrapper = np.array(
            [[base + p], [message.offset], [message.magic], [message.attributes],
             [message.timestamp], [0], [-1], [0], [-1]], np.int64,
        )  # fmt: skip
        entries = {f: np.array([v], np.int64) for f, v in zip(ENTRY_FIELDS, entry, strict=True)}
        out.add(entries, wrapper_rows([inner], wrapper, state, parts, NOTHING_AHEAD))
    elif inner is not None and opts.deep:
        rows = scalar_rows(
            inner, message.magic, message.attributes, message.timestamp, state, parts
        )
        out.add_one(entry, rows)
    else:
        out.add_one(entry, [_message_row(message, parts)])
    return None


def _message_row(message: LegacyMessage, parts: Parts) -> tuple[int, ...]:
    """The one row of a message (a wrapper read shallow: its compressed payload as value)."""
    key, value = message.key, message.value
    return (
        message.offset,
        message.timestamp,
        message.timestamp_type,
        0 if key is None else parts.to_arena(key),
        -1 if key is None else len(key),
        0 if value is None else parts.to_arena(value),
        -1 if value is None else len(value),
    )


def _uncompressed_from(window: np.ndarray, p: int, offset: int) -> bool:
    """Whether the entry at ``p`` of ``window`` is an uncompressed message (its attributes
    byte says so) whose offset field is ``offset`` or above."""
    if p + 17 >= window.shape[0] or window[p + 17] & 0x07:
        return False
    return int.from_bytes(window[p : p + 8].tobytes(), "big", signed=True) >= offset
