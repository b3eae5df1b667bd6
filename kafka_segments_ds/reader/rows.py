"""What the window decoders share: the task's bounds, the decoding state, the row arrays of a
window (its ``Parts``) and the :class:`Fault` a decoder reports instead of raising.

Row arrays address keys and values in one space: positions below ``len(window)`` are in the
window itself, positions above it are in the window's arena of decompressed data (and of
legacy messages, which the reference decoder hands over as bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.options import ReadOptions

V2_OVERHEAD = 61  # bytes of a v2 batch before its first record
ROW_FIELDS = ("offset", "ts", "ts_type", "kpos", "klen", "vpos", "vlen", "hpos", "hcount")
ENTRY_FIELDS = (
    "position",
    "magic",
    "codec",
    "base_offset",
    "last_offset",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "attributes",
    "leader_epoch",
)


@dataclass(frozen=True, slots=True)
class Fault:
    """The first malformed entry of a window: its file position and (if known) offset."""

    position: int
    offset: int | None
    error: CorruptSegmentError


@dataclass(frozen=True, slots=True)
class TaskBounds:
    """What a window decoder needs to know of its ScanTask."""

    topic: str | None
    partition: int | None
    segment: str
    start_offset: int | None
    end_offset: int | None
    min_max_timestamp: int | None
    aborted: tuple[tuple[int, int, int], ...]
    segment_base: int = 0  # offsets in the segment are >= its base offset ...
    next_base: int | None = None  # ... and below the next segment's
    include_control: bool = False  # control records as rows (offset lookups count them)


@dataclass(slots=True)
class DecodeState:
    """What decoding one task carries from window to window."""

    options: ReadOptions
    bounds: TaskBounds
    want_entry: bool  # rows need their entry (batch-level metadata columns)
    # offsets strictly increase through a log: the last offset of the last good entry
    last_offset: int
    last_offset_in: int = 0  # last_offset as the current v2 run found it
    reached_end: bool = False  # an entry at or past end_offset was seen


class Parts:
    """Row and entry arrays of the runs of one window, plus its arena."""

    def __init__(self, window_size: int) -> None:
        self.rows: list[dict[str, np.ndarray]] = []
        self.entries: list[dict[str, np.ndarray]] = []
        self.entry_count = 0
        self.arena: list[bytes | memoryview] = []  # memoryview: a read-ahead arena buffer
        self.window_size = window_size
        self.arena_base = window_size  # address of the next arena byte
        self._joined: np.ndarray | None = np.empty(0, np.uint8)

    def to_arena(self, blob: bytes | memoryview) -> int:
        address = self.arena_base
        self.arena.append(blob)
        self.arena_base += len(blob)
        self._joined = None
        return address

    def to_arena_many(self, blobs: list[bytes]) -> None:
        """Append blobs in order (their addresses follow on from ``arena_base``)."""
        if blobs:
            joined = blobs[0] if len(blobs) == 1 else b"".join(blobs)
            self.to_arena(joined)

    def arena_array(self) -> np.ndarray:
        """The arena as one array (joined once per change)."""
        if self._joined is None:
            self._joined = np.frombuffer(
                self.arena[0] if len(self.arena) == 1 else b"".join(self.arena), np.uint8
            )
        return self._joined


def merged(fields: tuple[str, ...], parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The runs' arrays as one set (no copy for the usual single run)."""
    if len(parts) == 1:
        return parts[0]
    return {f: np.concatenate([p[f] for p in parts]) for f in fields}
