"""The legacy (magic 0/1) window decoder: message sets through the reference decoder.

Legacy entries are rare in archives (clusters older than Kafka 0.11, or converted on the way
in), so they go one message at a time through :mod:`kafka_segments_ds.records.legacy`, whose
keys and values are appended to the window's arena.
"""

from __future__ import annotations

import numpy as np

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.reader.rows import ENTRY_FIELDS, ROW_FIELDS, DecodeState, Fault, Parts
from kafka_segments_ds.records.legacy import (
    LegacyMessage,
    decode_legacy_message,
    expand_wrapper,
)


def decode_legacy_run(
    state: DecodeState, window: np.ndarray, base: int, positions: np.ndarray, parts: Parts
) -> Fault | None:
    """Decode the legacy entries at ``positions`` of ``window`` (file position ``base``) into
    ``parts``, up to the first malformed one, which is returned."""
    opts = state.options
    b = state.bounds
    mv = window.data
    rows: dict[str, list[int]] = {f: [] for f in ROW_FIELDS if f not in ("hpos", "hcount")}
    row_entry: list[int] = []
    entries: dict[str, list[int]] = {f: [] for f in ENTRY_FIELDS}
    fault = None
    # FAILFAST: an uncompressed message at/after end_offset ends the task unjudged (were it
    # dropped the read would raise there, so nothing after it is returned either way); a
    # wrapper's offset field is its last offset, its first may be below the end: judged
    failfast_end = None if opts.drop_malformed else b.end_offset
    for p in positions.tolist():
        if failfast_end is not None and _uncompressed_from(window, p, failfast_end):
            state.reached_end = True
            break
        try:
            message = decode_legacy_message(mv, p, verify_checksum=opts.verify_checksums)
            compressed = message.compression != 0  # raises for zstd or ids 5-7
        except CorruptSegmentError as err:
            offset = int.from_bytes(window[p : p + 8].tobytes(), "big", signed=True)
            # the decoder's position is the entry's own (window-relative) start
            fault = Fault(base + p, offset, type(err)(err.reason))
            break
        inner: list[LegacyMessage] = []
        try:
            if compressed and (opts.deep or state.want_entry):
                inner = expand_wrapper(
                    message,
                    verify_checksum=opts.verify_checksums,
                    max_bytes=opts.max_decompressed_bytes,
                )
        except CorruptSegmentError as err:
            where = (
                ""
                if err.position is None
                else f" (byte {err.position} of the decompressed wrapper payload)"
            )
            fault = Fault(base + p, message.offset, type(err)(err.reason + where))
            break
        first = inner[0].offset if inner else message.offset
        # a magic-1 wrapper with offset 0 (old librdkafka) keeps its relative offsets
        last = max(message.offset, inner[-1].offset) if inner else message.offset
        problem = None
        if first <= state.last_offset:
            problem = f"offsets not increasing: offset {first} after offset {state.last_offset}"
        elif b.next_base is not None and last >= b.next_base:
            problem = f"offset {last} reaches the next segment's base offset {b.next_base}"
        if problem is not None:
            fault = Fault(base + p, message.offset, CorruptSegmentError(problem))
            break
        state.last_offset = last
        if b.start_offset is not None and last < b.start_offset:
            continue  # all before the start (a magic-1 wrapper with offset field 0 keeps its
            # producer's numbering 0..n-1: its offset field is not its last: 20261203:178157)
        if b.end_offset is not None and first >= b.end_offset:
            state.reached_end = True
            break
        entry = parts.entry_count + len(entries["position"])
        for name, value in zip(
            ENTRY_FIELDS,
            (
                base + p,
                message.magic,
                int(message.compression),
                first,
                message.offset,
                -1,
                -1,
                -1,
                message.attributes,
                -1,
            ),
            strict=True,
        ):
            entries[name].append(value)
        for m in inner if (compressed and opts.deep) else [message]:
            if opts.deep and (
                (b.start_offset is not None and m.offset < b.start_offset)
                or (b.end_offset is not None and m.offset >= b.end_offset)
            ):
                continue
            for blob, pos_name, len_name in (
                (m.key, "kpos", "klen"),
                (m.value, "vpos", "vlen"),
            ):
                if blob is None:
                    rows[pos_name].append(0)
                    rows[len_name].append(-1)
                else:
                    rows[pos_name].append(parts.to_arena(blob))
                    rows[len_name].append(len(blob))
            rows["offset"].append(m.offset)
            rows["ts"].append(m.timestamp)
            rows["ts_type"].append(m.timestamp_type)
            row_entry.append(entry)
    count = len(entries["position"])
    if count:
        r = {f: np.array(v, np.int64) for f, v in rows.items()}
        r["ts_type"] = r["ts_type"].astype(np.int32)
        r["hpos"] = np.zeros(len(row_entry), np.int64)
        r["hcount"] = np.zeros(len(row_entry), np.int64)
        if state.want_entry:
            r["entry"] = np.array(row_entry, np.int64)
            parts.entries.append({f: np.array(v, np.int64) for f, v in entries.items()})
        parts.rows.append(r)
        parts.entry_count += count
    return fault


def _uncompressed_from(window: np.ndarray, p: int, offset: int) -> bool:
    """Whether the entry at ``p`` of ``window`` is an uncompressed message (its attributes
    byte says so) whose offset field is ``offset`` or above."""
    if p + 17 >= window.shape[0] or window[p + 17] & 0x07:
        return False
    return int.from_bytes(window[p : p + 8].tobytes(), "big", signed=True) >= offset
