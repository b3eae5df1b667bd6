"""The two checksums of the log format.

Magic 0/1 messages carry a CRC-32 (IEEE, zlib's polynomial) over the message from the magic byte to
the end of the value. Magic 2 batches carry a CRC-32C (Castagnoli) over the bytes from the
attributes field to the end of the batch.
"""

from __future__ import annotations

import zlib

import crc32c as _crc32c


def crc32(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 (IEEE) as stored by legacy messages."""
    return zlib.crc32(data) & 0xFFFFFFFF


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) as stored by magic-2 batches."""
    return _crc32c.crc32c(data)


def crc32c_update(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C of what ``crc`` covered followed by ``data`` (a checksum computed in pieces)."""
    return _crc32c.crc32c(data, crc)
