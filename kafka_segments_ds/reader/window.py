"""Decode one window of ``.log`` bytes (complete entries) into one Arrow record batch.

The window decoder never applies a damage policy: it decodes entries in file order up to the
first malformed one and reports that one as a :class:`Fault`; the task loop
(:mod:`kafka_segments_ds.reader.task`) hands it to the damage policy
(:mod:`kafka_segments_ds.reader.damage`), which raises or resynchronises after it.

A window is cut into runs of v2 batches (:mod:`~kafka_segments_ds.reader.v2`) and legacy
messages (:mod:`~kafka_segments_ds.reader.legacy`); their rows go to the Arrow column builders
(:mod:`~kafka_segments_ds.reader.columns`).
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.reader.columns import ColumnBuilder
from kafka_segments_ds.reader.legacy import decode_legacy_run
from kafka_segments_ds.reader.rows import (
    ENTRY_FIELDS,
    ROW_FIELDS,
    DecodeState,
    Fault,
    Parts,
    TaskBounds,
    merged,
)
from kafka_segments_ds.reader.v2 import Decompressed, decode_v2_run
from kafka_segments_ds.schema import BY_NAME


class WindowDecoder:
    """Decodes windows of one task; keeps scratch buffers between windows."""

    def __init__(self, options: ReadOptions, bounds: TaskBounds, columns: tuple[str, ...]):
        self.options = options
        self.bounds = bounds
        self.columns = columns
        # batch-level metadata columns need each row's entry ("segment" is per task)
        want_entry = any(BY_NAME[c].group == "metadata" and c != "segment" for c in columns)
        self.state = DecodeState(options, bounds, want_entry, bounds.segment_base - 1)
        self.builder = ColumnBuilder(columns, bounds)

    @property
    def reached_end(self) -> bool:
        """Whether an entry at or past the task's end_offset was seen."""
        return self.state.reached_end

    @property
    def last_offset(self) -> int:
        """The last offset of the last good entry (offsets strictly increase through a log)."""
        return self.state.last_offset

    def decode(
        self,
        window: np.ndarray,
        base: int,
        positions: np.ndarray,
        magics: np.ndarray,
        checksums: tuple[np.ndarray, np.ndarray] | None = None,
        decompressed: Decompressed | None = None,
    ) -> tuple[pa.RecordBatch | None, Fault | None]:
        """Decode the complete entries at ``positions`` of ``window`` (file position ``base``).

        ``checksums`` may carry CRC-32C values already computed for magic-2 batches (by
        position), and ``decompressed`` its compressed batches decompressed, as the reader's
        read-ahead computes them.
        """
        state = self.state
        parts = Parts(window.shape[0])
        fault: Fault | None = None
        run_bounds = _runs(magics)
        scratch_free = len(run_bounds) == 1
        # No look-ahead: an entry is never dropped because of what comes after it (the prefix
        # rule). When a later entry's offsets collide with it, the later one is the problem,
        # as for Kafka's log recovery, which keeps the valid prefix.
        for start, end, is_v2 in run_bounds:
            run = positions[start:end]
            if is_v2:
                fault = decode_v2_run(
                    state, window, base, run, parts, scratch_free, checksums, decompressed
                )
            else:
                fault = decode_legacy_run(state, window, base, run, parts, decompressed)
            if fault is not None or state.reached_end:
                break
        if not parts.rows:
            return None, fault
        rows = merged(ROW_FIELDS + (("entry",) if state.want_entry else ()), parts.rows)
        entries = merged(ENTRY_FIELDS, parts.entries) if state.want_entry else {}
        if rows["offset"].shape[0] == 0:
            return None, fault
        return self.builder.build(window, parts.arena_array(), rows, entries), fault


def _runs(magics: np.ndarray) -> list[tuple[int, int, bool]]:
    """(start, end, is_v2) of the runs of v2 / legacy entries, in order."""
    n = magics.shape[0]
    is_v2 = magics == 2
    if n and is_v2.all():
        return [(0, n, True)]
    bounds = [0, *(np.flatnonzero(is_v2[1:] != is_v2[:-1]) + 1).tolist(), n] if n else []
    return [(a, b, bool(is_v2[a])) for a, b in itertools.pairwise(bounds)]
