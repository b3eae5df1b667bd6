"""Valid seed logs for the fuzzer, and the reference decode the oracle compares against.

Every seed is a short list of log entries with consecutive offsets from ``base``: magic-2
batches in every codec (snappy both xerial-framed and raw), control and LogAppendTime batches,
magic-0/1 messages and compressed wrappers in every codec they allow (lz4 magic 0 with the
KAFKA-3160 header checksum), an upgraded 0 -> 1 -> 2 log, and a batch larger than a 4 KiB read
window. ``reference_rows`` decodes one entry with the readable reference decoders
(records/v2.py, records/legacy.py), not with the compiled kernels the reader uses.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass

import cramjam

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_control_batch,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.checksums import crc32, crc32c
from kafka_segments_ds.records.compression import compress, decompress
from kafka_segments_ds.records.legacy import decode_legacy_message, expand_wrapper
from kafka_segments_ds.records.v2 import V2_HEADER, decode_batch_header, iter_records

TS = 1_700_000_000_000
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
MAX_DECOMPRESSED = 1 << 20  # the fuzz runs' maxDecompressedBytes: bombs must stop here
_MAX_MS = (2**63 - 1) // 1000  # beyond this a millisecond timestamp has no Arrow form

# (offset, timestamp ms or None, timestampType, key, value, headers)
Row = tuple[int, int | None, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass(frozen=True)
class Seed:
    name: str
    entries: tuple[bytes, ...]


def _specs(first: int, n: int, *, headers: bool = True, size: int = 10) -> list[RecordSpec]:
    out = []
    for j in range(n):
        o = first + j
        out.append(
            RecordSpec(
                value=None if j == 1 else (b"value-%d-" % o).ljust(size, b"x"),
                key=None if j == 2 else b"key-%d" % o,
                timestamp=TS + 37 * o - (5 if j == 1 else 0),
                headers=((f"h{j}", b"%d" % o), ("n", None)) if headers and j != 0 else (),
            )
        )
    return out


def v2(base: int, n: int, codec: int = NONE, **kwargs: object) -> bytes:
    return encode_batch(_specs(base, n), base_offset=base, compression=codec, **kwargs)  # type: ignore[arg-type]


def rebuild_v2(
    batch: bytes,
    records: bytes,
    *,
    codec: int | None = None,
    raw_snappy: bool = False,
    **fields: int,
) -> bytes:
    """``batch`` with its records section replaced by (compressed) ``records``, header fields
    overridden by ``fields`` (V2_HEADER names below), length and CRC-32C recomputed."""
    names = [
        *("base_offset", "length", "epoch", "magic", "crc", "attributes", "lod"),
        *("base_ts", "max_ts", "pid", "epoch_p", "seq", "count"),
    ]
    values = dict(zip(names, V2_HEADER.unpack_from(batch), strict=True))
    values.update(fields)
    if codec is not None:
        values["attributes"] = (values["attributes"] & ~0x07) | codec
    codec_id = values["attributes"] & 0x07
    if raw_snappy and codec_id == SNAPPY:
        payload = bytes(cramjam.snappy.compress_raw(records))
    elif codec_id in (GZIP, SNAPPY, LZ4, ZSTD):
        payload = compress(codec_id, records, magic=2)
    else:
        payload = records
    values["length"] = 49 + len(payload)
    out = bytearray(V2_HEADER.pack(*values.values()) + payload)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def v2_records(batch: bytes) -> bytes:
    """The decompressed records section of a valid batch."""
    header = decode_batch_header(batch)
    payload = memoryview(batch)[61:]
    if header.compression:
        return decompress(header.compression, payload, magic=2)
    return bytes(payload)


def legacy_wrapper(
    inner: bytes, *, last_offset: int, magic: int, codec: int, ts: int = TS
) -> bytes:
    """A magic-0/1 wrapper around already encoded inner entries (which may be anything)."""
    return encode_legacy_message(
        offset=last_offset,
        magic=magic,
        key=None,
        value=compress(codec, inner, magic=magic),
        timestamp=ts,
        attributes=codec,
    )


def fix_legacy_crc(entry: bytes) -> bytes:
    out = bytearray(entry)
    (size,) = struct.unpack_from(">i", out, 8)
    struct.pack_into(">I", out, 12, crc32(bytes(out[16 : 12 + size])))
    return bytes(out)


def fix_v2_crc(entry: bytes) -> bytes:
    out = bytearray(entry)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


# --- seeds ------------------------------------------------------------------------------------


def _v2_codec(codec: int, raw_snappy: bool = False) -> Callable[[int], list[bytes]]:
    def build(base: int) -> list[bytes]:
        out, o = [], base
        for n in (3, 1, 4, 2):
            batch = v2(o, n, codec)
            if raw_snappy:
                batch = rebuild_v2(batch, v2_records(batch), raw_snappy=True)
            out.append(batch)
            o += n
        return out

    return build


def _v2_mixed(base: int) -> list[bytes]:
    o = base
    out = [v2(o, 3)]
    o += 3
    out.append(v2(o, 2, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True))
    o += 2
    out.append(
        encode_control_batch(offset=o, commit=True, producer_id=7, producer_epoch=0, timestamp=TS)
    )
    o += 1
    out.append(v2(o, 2, GZIP, timestamp_type=1, log_append_time=TS + 999))
    o += 2
    out.append(encode_batch([], base_offset=o, last_offset_delta=1))  # compacted away
    o += 2
    gap = _specs(o, 3)
    out.append(
        encode_batch(
            [
                RecordSpec(s.value, s.key, s.timestamp, s.headers, d)
                for s, d in zip(gap, (0, 2, 5), strict=True)
            ],
            base_offset=o,
            last_offset_delta=6,
        )
    )
    o += 7
    out.append(v2(o, 2, ZSTD))
    return out


def _legacy(magic: int) -> Callable[[int], list[bytes]]:
    def build(base: int) -> list[bytes]:
        o = base
        out = [encode_legacy_message(offset=o, magic=magic, key=b"k", value=b"plain", timestamp=TS)]
        o += 1
        out.append(
            encode_legacy_message(offset=o, magic=magic, key=None, value=None, timestamp=TS + 1)
        )
        o += 1
        for codec in (GZIP, SNAPPY, LZ4):
            specs = _specs(o, 3, headers=False)
            out.append(
                encode_legacy_wrapper(specs, last_offset=o + 2, magic=magic, compression=codec)
            )
            o += 3
        if magic == 1:
            specs = _specs(o, 2, headers=False)
            out.append(
                encode_legacy_wrapper(
                    specs,
                    last_offset=o + 1,
                    magic=1,
                    compression=GZIP,
                    timestamp_type=1,
                    log_append_time=TS + 500,
                )
            )
        return out

    return build


def _upgraded(base: int) -> list[bytes]:
    return [
        *_legacy(0)(base)[:3],
        *_legacy(1)(base + 5)[2:4],
        v2(base + 13, 3, LZ4),
        v2(base + 16, 2),
    ]


def _large(base: int) -> list[bytes]:
    big = [RecordSpec(value=bytes(range(256)) * 24, key=b"big", timestamp=TS)]
    return [v2(base, 2), encode_batch(big, base_offset=base + 2), v2(base + 3, 2, SNAPPY)]


_BUILDERS: dict[str, Callable[[int], list[bytes]]] = {
    "v2-none": _v2_codec(NONE),
    "v2-gzip": _v2_codec(GZIP),
    "v2-snappy-xerial": _v2_codec(SNAPPY),
    "v2-snappy-raw": _v2_codec(SNAPPY, raw_snappy=True),
    "v2-lz4": _v2_codec(LZ4),
    "v2-zstd": _v2_codec(ZSTD),
    "v2-mixed": _v2_mixed,
    "magic0": _legacy(0),
    "magic1": _legacy(1),
    "upgraded": _upgraded,
    "large": _large,
}
SEED_NAMES = tuple(_BUILDERS)


@functools.lru_cache(maxsize=256)
def build_seed(name: str, base: int = 0) -> Seed:
    """The seed log ``name`` with offsets from ``base`` (built once per process: the same
    arguments give the same bytes, and each fuzz input starts from one)."""
    return Seed(name, tuple(_BUILDERS[name](base)))


# --- reference decode -------------------------------------------------------------------------


def _ts(ms: int) -> int | None:
    return None if ms == -1 or not -_MAX_MS <= ms <= _MAX_MS else ms


def reference_rows(entry: bytes, *, verify: bool = True) -> list[Row]:
    """The rows a deep read_uncommitted reader returns for one entry (no control records).

    Raises CorruptSegmentError when the reference decoders reject the entry.
    """
    if len(entry) < 17 or struct.unpack_from(">i", entry, 8)[0] + 12 != len(entry):
        raise CorruptSegmentError("entry framing does not match its bytes")
    if entry[16] == 2:
        header = decode_batch_header(entry)
        if verify and crc32c(entry[21:]) != header.crc:
            raise CorruptSegmentError("crc")
        payload: bytes | memoryview = memoryview(entry)[61:]
        if header.compression:
            payload = decompress(header.compression, payload, magic=2, max_bytes=MAX_DECOMPRESSED)
        records = list(iter_records(header, payload))
        if header.is_control:
            return []
        return [
            (r.offset, _ts(r.timestamp), r.timestamp_type, r.key, r.value, r.headers)
            for r in records
        ]
    message = decode_legacy_message(entry, 0, verify_checksum=verify)
    inner = [message]
    if message.compression:
        inner = expand_wrapper(message, verify_checksum=verify, max_bytes=MAX_DECOMPRESSED)
    return [(m.offset, _ts(m.timestamp), m.timestamp_type, m.key, m.value, ()) for m in inner]


def reference_or_none(entry: bytes, *, verify: bool = True) -> list[Row] | None:
    try:
        return reference_rows(entry, verify=verify)
    except CorruptSegmentError:
        return None


@functools.lru_cache(maxsize=4096)
def intact_rows(entry: bytes, verify: bool = True) -> tuple[Row, ...] | None:
    """:func:`reference_or_none` of an entry of a seed log, decoded once per process (each
    fuzz input holds some of the same few hundred seed entries)."""
    rows = reference_or_none(entry, verify=verify)
    return None if rows is None else tuple(rows)
