"""The two checksums of the log format.

Magic 0/1 messages carry a CRC-32 (IEEE, zlib's polynomial) over the message from the magic byte to
the end of the value. Magic 2 batches carry a CRC-32C (Castagnoli) over the bytes from the
attributes field to the end of the batch.

CRC-32C runs on the compiled kernel (:mod:`.crc_kernels`) when it is built; the :mod:`crc32c`
package (whose import costs a fresh process about 15 ms: it loads ``importlib.metadata``) is
imported only for a checksum computed in pieces, or when the kernels are not compiled.
"""

from __future__ import annotations

import zlib
from types import ModuleType
from typing import Any, cast

from kafka_segments_ds.records import crc_kernels


def crc32(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 (IEEE) as stored by legacy messages."""
    return zlib.crc32(data) & 0xFFFFFFFF


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) as stored by magic-2 batches."""
    if crc_kernels.COMPILED:
        # the compiled kernel takes any contiguous buffer of bytes
        return int(crc_kernels.crc32c_range(cast(Any, data), 0, memoryview(data).nbytes))
    return int(_package().crc32c(data))


def crc32c_update(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C of what ``crc`` covered followed by ``data`` (a checksum computed in pieces)."""
    return int(_package().crc32c(data, crc))


def _package() -> ModuleType:
    import crc32c as package

    return package
