"""Entry-level view of a ``.log`` buffer: where each entry starts and what its header says.

Every entry starts with int64 offset, int32 size and (at byte 16) the magic byte, so a walk can
hop from entry to entry without decoding records. This is what index rebuilding, planning
without an index, and the CLI's statistics need.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.checksums import crc32, crc32c


@dataclass(frozen=True, slots=True, eq=False)
class EntryTable:
    """Framing and header facts of the complete entries at the start of a buffer."""

    positions: np.ndarray  # int64 byte positions
    sizes: np.ndarray  # int64 entry sizes (12 + size field)
    magics: np.ndarray  # int8
    last_offsets: np.ndarray  # int64: v2 baseOffset + lastOffsetDelta, legacy offset field
    max_timestamps: np.ndarray  # int64: v2 maxTimestamp, magic-1 timestamp, magic 0: -1
    valid_bytes: int  # bytes covered by the complete entries
    outcome: int  # kernels.FRAMING_* of the walk's stop


def as_array(buf: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """A uint8 numpy view of ``buf`` (no copy)."""
    if isinstance(buf, np.ndarray):
        return buf.view(np.uint8)
    return np.frombuffer(buf, np.uint8)


def has_valid_checksum(entry: np.ndarray) -> bool:
    """Whether a whole entry's stored CRC matches: CRC-32C of bytes [21, end) for magic 2,
    CRC-32 of [16, end) for magic 0/1."""
    if entry.shape[0] < 26 or entry[16] > 2:
        return False
    if entry[16] == 2:
        return entry.shape[0] >= 61 and crc32c(entry.data[21:]) == int.from_bytes(
            entry[17:21].tobytes(), "big"
        )
    return crc32(entry.data[16:]) == int.from_bytes(entry[12:16].tobytes(), "big")


def scan_entries(buf: bytes | bytearray | memoryview | np.ndarray) -> EntryTable:
    """Hop the entries of ``buf`` and collect their header facts (no CRC check)."""
    data = as_array(buf)
    positions, magics, outcome, stop = K.hop_entries(data, 0, data.shape[0])
    sizes = np.empty(positions.shape[0], np.int64)
    last = np.empty(positions.shape[0], np.int64)
    max_ts = np.full(positions.shape[0], -1, np.int64)
    if positions.shape[0]:
        sizes[:-1] = np.diff(positions)
        sizes[-1] = stop - positions[-1]
    v2 = magics == 2
    if v2.any():
        headers = K.parse_v2_headers(data, positions[v2])
        last[v2] = headers[:, K.H_BASE_OFFSET] + headers[:, K.H_LOD]
        max_ts[v2] = headers[:, K.H_MAX_TS]
    legacy = np.nonzero(~v2)[0]
    for i in legacy.tolist():
        p = int(positions[i])
        last[i] = int.from_bytes(data[p : p + 8].tobytes(), "big", signed=True)
        if magics[i] == 1:
            max_ts[i] = int.from_bytes(data[p + 18 : p + 26].tobytes(), "big", signed=True)
    return EntryTable(positions, sizes, magics, last, max_ts, int(stop), int(outcome))


def require_complete(table: EntryTable, length: int, path: str | None = None) -> None:
    """Raise unless the walk covered ``length`` bytes (strict callers such as index rebuild)."""
    if table.valid_bytes != length:
        raise CorruptSegmentError(
            f"cannot frame an entry here ({length - table.valid_bytes} bytes unframed)",
            path=path,
            position=table.valid_bytes,
        )
