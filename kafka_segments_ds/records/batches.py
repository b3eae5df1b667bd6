"""Entry-level view of a ``.log`` buffer: where each entry starts and what its header says.

Every entry starts with int64 offset, int32 size and (at byte 16) the magic byte, so a walk can
hop from entry to entry without decoding records. This is what index rebuilding, planning
without an index, and the CLI's statistics need::

    offset   int64   a v2 batch's base offset; a legacy message's (a wrapper's last) offset
    size     int32   bytes that follow (the entry is 12 + size bytes long)
    ...      4       v2: partitionLeaderEpoch; legacy: the CRC-32
    magic    int8    0, 1 or 2
    ...              v2: CRC-32C (4), attributes (int16: codec in bits 0-2);
                     legacy: attributes (int8: codec in bits 0-2)

Two APIs over that framing, used by every caller that walks or probes a ``.log``:

* :func:`walk_entries` hops the entries of a byte range read window by window;
* :func:`probe_entry` answers "is a whole valid entry at this position?" (framing, extent and
  checksum), the check made before trusting a position taken from an index or found when
  resynchronising after damage.

Both take a ``read(position, length)`` callable rather than a file: the caller owns the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


Read = Callable[[int, int], "np.ndarray | bytes"]
"""``read(position, length)``: up to ``length`` bytes of the ``.log`` at ``position`` (fewer only
at the end of the file)."""

ENTRY_HEAD_BYTES = 27  # offset, size, epoch/CRC, magic, v2 attributes and lastOffsetDelta
LOG_OVERHEAD = 12  # offset + size: the bytes of an entry its size field does not count
V2_LAST_OFFSET_DELTA_AT = 23  # offset 8, size 4, leader epoch 4, magic 1, CRC 4, attributes 2


@dataclass(frozen=True, slots=True)
class EntryHead:
    """The framing facts of one entry (see the module docstring)."""

    position: int
    offset: int  # the offset field
    length: int  # 12 + size
    magic: int
    codec: int  # compression codec id (attributes & 0x07)
    last_offset: int  # v2: baseOffset + lastOffsetDelta (int64, wrapped); legacy: the offset field


def decode_entry_head(head: np.ndarray, position: int = 0) -> EntryHead | None:
    """The framing of the entry whose first bytes are ``head``, if it is plausible: magic 0-2
    and a size no smaller than the smallest such entry (14, a v2 batch 49). A v2 head shorter
    than :data:`ENTRY_HEAD_BYTES` gives the base offset as its last offset."""
    if head.shape[0] < 17:
        return None
    size = int.from_bytes(head[8:12].tobytes(), "big", signed=True)
    magic = int(head[16])
    if magic > 2 or size < (49 if magic == 2 else 14):
        return None
    at = 22 if magic == 2 else 17
    codec = int(head[at]) & 0x07 if head.shape[0] > at else 0
    offset = int.from_bytes(head[0:8].tobytes(), "big", signed=True)
    last = offset
    if magic == 2 and head.shape[0] >= ENTRY_HEAD_BYTES:
        at = V2_LAST_OFFSET_DELTA_AT
        last += int.from_bytes(head[at : at + 4].tobytes(), "big", signed=True)
        # wraps as the kernels' int64 does: below the base offset, damage (a baseOffset of
        # 2**63 - 1: 20261130:17811)
        last = (last + (1 << 63)) % (1 << 64) - (1 << 63)
    return EntryHead(position, offset, LOG_OVERHEAD + size, magic, codec, last)


def probe_entry(
    read: Read,
    position: int,
    end: int,
    *,
    max_bytes: int | None = None,
    check_limit: int | None = None,
) -> EntryHead | None:
    """The entry at ``position`` if a whole valid one starts there, else None.

    Whole: plausible framing (:func:`decode_entry_head`) and it ends by ``end`` (the file's
    size); valid: its stored checksum matches. An entry longer than ``max_bytes`` is not
    accepted; one longer than ``check_limit`` is accepted on its framing alone, without
    reading it whole.
    """
    head = decode_entry_head(as_array(read(position, ENTRY_HEAD_BYTES)), position)
    if head is None or position + head.length > end:
        return None
    if max_bytes is not None and head.length > max_bytes:
        return None
    if check_limit is not None and head.length > check_limit:
        return head
    return head if has_valid_checksum(as_array(read(position, head.length))) else None


@dataclass(frozen=True, slots=True, eq=False)
class EntryWindow:
    """The complete, plausibly framed entries of one window of a walk."""

    base: int  # the window's file position
    window: np.ndarray
    positions: np.ndarray  # int64, relative to ``base``
    magics: np.ndarray
    outcome: int = K.FRAMING_END  # kernels.FRAMING_* of the walk's stop in this window
    stop: int = 0  # where the walk stopped, relative to ``base``

    @property
    def end(self) -> int:
        """The file position after the window's last whole entry: where the walk's framing
        ends when this is the last window it yields."""
        return self.base + self.stop


def walk_entries(
    read: Read, start: int, end: int, window_bytes: int, file_size: int | None = None
) -> Iterator[EntryWindow]:
    """Hop the entries from ``start`` on while they start before ``end``, reading windows of
    ``window_bytes`` (widened to hold one larger entry; a window may run past ``end``). Stops
    quietly where the framing does: damage, a zero or truncated tail (a reader reports those;
    the last window yielded says where and why: ``end``, ``outcome``). ``file_size`` (default
    ``end``) bounds the entries. ``read`` may reuse one buffer: a window is yielded before the
    next is read."""
    file_size = end if file_size is None else file_size
    position = start
    want = window_bytes
    while position < end:
        window = as_array(read(position, want))
        positions, magics, outcome, stop = K.hop_entries(window, 0, window.shape[0])
        yield EntryWindow(position, window, positions, magics, int(outcome), int(stop))
        if outcome == K.FRAMING_PARTIAL and stop == 0:
            # one entry larger than the window: widen the window to hold it
            if window.shape[0] < 17:
                return  # truncated tail
            want = LOG_OVERHEAD + int.from_bytes(window[8:12].tobytes(), "big", signed=True)
            if position + want > file_size or want <= window.shape[0]:
                return  # truncated tail (or the file shrank while read)
            continue
        if outcome != K.FRAMING_END and outcome != K.FRAMING_PARTIAL:
            return
        if stop == 0:
            return
        position += int(stop)
        want = window_bytes


def failed_checksums(window: np.ndarray, positions: np.ndarray, magics: np.ndarray) -> np.ndarray:
    """Whether the stored checksum of each whole entry of ``window`` at ``positions`` (as a hop
    frames them: inside the window, magic 0-2) fails: CRC-32C of bytes [21, end) of a batch,
    CRC-32 of [16, end) of a legacy message."""
    from kafka_segments_ds.records import crc_kernels as C
    from kafka_segments_ds.records import legacy_kernels as LK

    four = np.arange(4)
    ends = positions + window[positions[:, None] + 8 + four].view(">i4").ravel() + LOG_OVERHEAD
    v2 = magics == 2
    computed = np.empty(positions.shape[0], np.int64)
    crc32c_sums = np.empty(int(v2.sum()), np.int64)
    C.batch_crcs(window, positions[v2] + 21, ends[v2], crc32c_sums)
    computed[v2] = crc32c_sums
    computed[~v2] = LK.crc32_ranges(window, positions[~v2] + 16, ends[~v2])
    at = np.where(v2, positions + 17, positions + 12)
    stored = window[at[:, None] + four].view(">u4").ravel().astype(np.int64)
    failed: np.ndarray = computed != stored
    return failed


def scan_entries(buf: bytes | bytearray | memoryview | np.ndarray) -> EntryTable:
    """Hop the entries of ``buf`` and collect their header facts (no CRC check)."""
    data = as_array(buf)
    positions, magics, outcome, stop = K.hop_entries(data, 0, data.shape[0])
    return entry_table(data, positions, magics, int(stop), int(outcome))


def entry_table(
    data: np.ndarray, positions: np.ndarray, magics: np.ndarray, stop: int, outcome: int
) -> EntryTable:
    """The header facts of the entries a hop of ``data`` found (``kernels.hop_entries``'
    answer, or a walk's window: :class:`EntryWindow`)."""
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
    if not v2.all():  # legacy: the offset field; magic 1: the timestamp
        last[~v2] = _big_endian_int64(data, positions[~v2])
        one = magics == 1
        max_ts[one] = _big_endian_int64(data, positions[one] + 18)
    return EntryTable(positions, sizes, magics, last, max_ts, stop, outcome)


def _big_endian_int64(data: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The big-endian int64 at each of ``positions`` (inside whole entries) of ``data``."""
    return data[positions[:, None] + np.arange(8)].view(">i8").ravel().astype(np.int64)


def require_complete(table: EntryTable, length: int, path: str | None = None) -> None:
    """Raise unless the walk covered ``length`` bytes (strict callers such as index rebuild)."""
    if table.valid_bytes != length:
        raise CorruptSegmentError(
            f"cannot frame an entry here ({length - table.valid_bytes} bytes unframed)",
            path=path,
            position=table.valid_bytes,
        )
