"""Whether the batch reader returns the records of one whole entry, and up to which offset.

A walk that counts offsets by the reader's rules without running the reader needs this: the
order floor a byte-range piece starts from (:mod:`kafka_segments_ds.planning`), and the tail of
a segment (the offset after the last entry the reader returns) can ask the same. The checks are
the reader's, as its options set them: the stored checksum (``verify_checksums``), a v2 batch's
structural fields, and in a deep read (``deep``) that its payload decompresses and its records
decode; a legacy entry must decode, and a compressed wrapper's inner messages (expanded in a
deep read, and in a shallow one that wants each row's entry) must follow the last offset kept
before it.
"""

from __future__ import annotations

import numpy as np

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records.batches import has_valid_checksum
from kafka_segments_ds.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, decompress
from kafka_segments_ds.records.legacy import decode_legacy_message, expand_wrapper
from kafka_segments_ds.records.v2 import (
    MIN_RECORD_BYTES,
    RECORD_BATCH_OVERHEAD,
    decode_batch_header,
    iter_records,
)


def kept_last_offset(
    entry: np.ndarray,
    floor: int,
    *,
    verify_checksums: bool = True,
    deep: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    expand_wrappers: bool | None = None,
) -> int | None:
    """The last offset of ``entry`` (a whole, plausibly framed entry whose head puts its offsets
    above ``floor``, the last offset kept before it) if the reader returns its records, else
    None (module docstring). The caller checks the head's offsets against ``floor`` and the
    next segment's base offset. ``expand_wrappers``: whether the reader expands a legacy
    compressed wrapper (default ``deep``; a shallow read expands them too where its rows need
    their entry, :mod:`kafka_segments_ds.reader.legacy`)."""
    expand = deep if expand_wrappers is None else expand_wrappers
    try:
        if entry[16] == 2:
            return _v2_last_offset(entry, verify_checksums, deep, max_decompressed_bytes)
        message = decode_legacy_message(entry.data, 0, verify_checksum=verify_checksums)
        if message.compression == 0 or not expand:  # compression raises for zstd, ids 5-7
            return message.offset
        inner = expand_wrapper(
            message, verify_checksum=verify_checksums, max_bytes=max_decompressed_bytes
        )
    except CorruptSegmentError:
        return None
    if inner[0].offset <= floor:
        return None
    return max(message.offset, inner[-1].offset)


def _v2_last_offset(
    entry: np.ndarray, verify_checksums: bool, deep: bool, max_decompressed_bytes: int
) -> int | None:
    """:func:`kept_last_offset` of a v2 batch; raises CorruptSegmentError where it is dropped."""
    if verify_checksums and not has_valid_checksum(entry):
        return None
    header = decode_batch_header(entry.data)  # raises for negative counts and deltas
    codec = header.attributes & 0x07
    payload: bytes | memoryview = entry.data[RECORD_BATCH_OVERHEAD:]
    if codec > 4 or (codec == 0 and header.record_count > len(payload) // MIN_RECORD_BYTES):
        return None
    if deep:
        if codec != 0:
            payload = decompress(codec, payload, magic=2, max_bytes=max_decompressed_bytes)
        for _ in iter_records(header, payload):
            pass
    return header.base_offset + header.last_offset_delta


__all__ = ["kept_last_offset"]
