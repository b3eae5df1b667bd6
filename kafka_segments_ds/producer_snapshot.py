"""Producer-state snapshots: the ``<20-digit offset>.snapshot`` files of a partition directory.

A broker writes one when it rolls a segment (and on clean shutdown) so that it can rebuild the
idempotent/transactional producer state without re-reading the whole log [PSM,
ProducerSnapshot.json]. All integers big-endian:

====  =====  ==============================================================
off   size   field
====  =====  ==============================================================
0     2      int16 version (1)
2     4      uint32 CRC-32C of bytes [6, end of file)
6     4      int32 entry count
10    46·n   entries
====  =====  ==============================================================

Entry (46 bytes): int64 producerId, int16 producerEpoch, int32 lastSequence, int64 lastOffset,
int32 offsetDelta (lastOffset - first offset of the producer's last batch), int64 timestamp
(max timestamp of that batch), int32 coordinatorEpoch, int64 currentTxnFirstOffset (-1 when no
transaction is open).

The count is only trusted after it is checked against the file size.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass

import numpy as np

from kafka_segments_ds.errors import ChecksumError, CorruptSegmentError, UnsupportedFormatError
from kafka_segments_ds.records.checksums import crc32c

SUFFIX = ".snapshot"
SUPPORTED_VERSION = 1
_HEADER = struct.Struct(
    ">h"  # version
    "I"  # crc: CRC-32C of everything after this field
    "i"  # entry count
)
_CRC_START = 6  # the CRC covers the count and the entries
ENTRY_SIZE = 46
_ENTRY = np.dtype(
    [
        ("producer_id", ">i8"),
        ("producer_epoch", ">i2"),
        ("last_sequence", ">i4"),
        ("last_offset", ">i8"),
        ("offset_delta", ">i4"),
        ("timestamp", ">i8"),
        ("coordinator_epoch", ">i4"),
        ("current_txn_first_offset", ">i8"),
    ]
)
assert _ENTRY.itemsize == ENTRY_SIZE


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state at the snapshot offset."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    version: int
    crc: int
    entries: tuple[ProducerStateEntry, ...]


def parse_producer_snapshot(data: bytes | memoryview) -> ProducerSnapshot:
    """Parse a whole ``.snapshot`` file; raise on any damage (positions are file positions)."""
    if len(data) < _HEADER.size:
        raise CorruptSegmentError(
            f"producer snapshot is {len(data)} bytes; its header alone needs {_HEADER.size}",
            position=0,
        )
    version, stored_crc, count = _HEADER.unpack_from(data, 0)
    if version != SUPPORTED_VERSION:
        raise UnsupportedFormatError(
            f"producer snapshot version {version}; only version {SUPPORTED_VERSION} is known",
            position=0,
        )
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != stored_crc:
        raise ChecksumError(
            f"producer snapshot CRC-32C mismatch: stored {stored_crc:#010x}, computed "
            f"{computed:#010x} over bytes [{_CRC_START}, {len(data)})",
            position=2,
        )
    room = len(data) - _HEADER.size
    if count < 0:
        raise CorruptSegmentError(
            f"producer snapshot entry count {count} is negative", position=_CRC_START
        )
    if count * ENTRY_SIZE != room:
        raise CorruptSegmentError(
            f"producer snapshot entry count {count} needs {count * ENTRY_SIZE} bytes after the "
            f"{_HEADER.size}-byte header, the file has {room}",
            position=_CRC_START,
        )
    rows = np.frombuffer(data, dtype=_ENTRY, count=count, offset=_HEADER.size)
    entries = tuple(ProducerStateEntry(*row) for row in rows.tolist())
    return ProducerSnapshot(version=version, crc=stored_crc, entries=entries)


def encode_producer_snapshot(
    entries: tuple[ProducerStateEntry, ...] | list[ProducerStateEntry],
) -> bytes:
    """The bytes of a version-1 ``.snapshot`` file holding ``entries``."""
    rows = np.array([dataclasses.astuple(e) for e in entries], dtype=_ENTRY)
    body = struct.pack(">i", len(entries)) + rows.tobytes()
    return struct.pack(">hI", SUPPORTED_VERSION, crc32c(body)) + body
