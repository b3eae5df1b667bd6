"""Compression codecs as Kafka stores them.

The codec id is ``attributes & 0x07`` of a legacy wrapper message or a v2 batch. The compressed
payload is the wrapper's value (magic 0/1) or the batch bytes after the 61-byte header (magic 2):

* 0 none -- the payload is the records themselves.
* 1 gzip -- RFC 1952 stream from Java's ``GZIPOutputStream``. Java's reader also reads further
  concatenated members, and silently ignores trailing bytes that do not start a gzip header.
* 2 snappy -- snappy-java ("xerial") stream framing::

      82 53 4E 41 50 50 59 00 | int32 BE version | int32 BE min compatible version   (16 bytes)
      then blocks: int32 BE compressed length | raw snappy block (varint length + data)

  Only the 8-byte magic is matched (some producers write the two ints little-endian). A payload
  without the magic, or shorter than 16 bytes, is one raw snappy block (snappy-java's fallback,
  which is how raw snappy from non-Java producers gets read).
* 3 lz4 -- one LZ4 frame: magic ``04 22 4D 18``, FLG, BD, [8-byte LE content size],
  [4-byte dict id], HC, blocks (uint32 LE size, bit 31 = stored), end mark ``00000000``,
  [content checksum]. HC = ``(xxh32(FLG..last descriptor byte) >> 8) & 0xFF``. Magic-0 frames
  carry a broken HC that also hashes the 4 magic bytes (KAFKA-3160); Kafka skips the HC check for
  magic 0 only. Kafka reads one frame and ignores bytes after its end mark.
* 4 zstd -- magic 2 only; one or more zstd frames (``28 B5 2F FD``), normally written by a
  streaming encoder and therefore without a content size.

Every decoder enforces ``max_bytes`` while it produces output, so a small payload that expands
to gigabytes fails after at most ``max_bytes`` (plus one chunk) of memory.
"""

from __future__ import annotations

import enum
import struct
import threading
import zlib
from collections.abc import Callable

from kafka_segments_ds.errors import (
    CorruptSegmentError,
    LimitExceededError,
    MissingCodecError,
    UnsupportedFormatError,
)

try:
    import lz4.frame as _lz4f
except ImportError:  # pragma: no cover - exercised only without the extra
    _lz4f = None
try:
    import zstandard as _zstd
except ImportError:  # pragma: no cover
    _zstd = None  # type: ignore[assignment]
try:
    import cramjam as _cramjam
except ImportError:  # pragma: no cover
    _cramjam = None  # type: ignore[assignment]

DEFAULT_MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024
CODEC_LABELS: tuple[str, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_MASK = 0x07

GZIP_DEFAULT_LEVEL = 6  # Deflater.DEFAULT_COMPRESSION, what Kafka's GZIPOutputStream uses
ZSTD_DEFAULT_LEVEL = 3  # zstd-jni / Kafka default
GZIP_MEMBER_START = b"\x1f\x8b\x08"  # ID1 ID2 CM=deflate: what Java's readHeader insists on
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_BLOCK_INPUT = 32 * 1024  # snappy-java's default block size, used by Kafka's writer
LZ4_MAGIC = b"\x04\x22\x4d\x18"
LZ4_KAFKA_FLG = 0x60  # version 01, independent blocks, no checksums, no content size
LZ4_KAFKA_BD = 0x40  # 64 KiB max block size
LZ4_STORED_BIT = 0x80000000  # in a block size: the block is stored uncompressed
ZSTD_FRAME_MAGIC = 0xFD2FB528
ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
ZSTD_BLOCK_MAX = 128 * 1024  # no zstd block regenerates more than this (format spec)
ZSTD_CONTENT_SIZE_UNKNOWN = 2**64 - 1
ZSTD_BLOCKS_PER_FEED = 8  # 1 MiB of output at most per decompressobj call
LZ4_MIN_CHUNK = 64 * 1024  # output buffer sizes of the bounded lz4 decoder
LZ4_MAX_CHUNK = 16 * 1024 * 1024

_XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, min compatible version
_XERIAL_BLOCK_LEN = struct.Struct(">i")  # compressed length of the raw snappy block that follows
_LZ4_CONTENT_SIZE = struct.Struct("<Q")  # optional, right after FLG BD
_U32_LE = struct.Struct("<I")  # zstd frame magic, skippable frame size; xxh32 input words
_XXH32_STRIPE = struct.Struct("<IIII")  # one 16-byte xxh32 stripe

_XXH_P1, _XXH_P2, _XXH_P3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
_XXH_P4, _XXH_P5 = 0x27D4EB2F, 0x165667B1
_MASK32 = 0xFFFFFFFF

Buffer = bytes | bytearray | memoryview


class CompressionType(enum.IntEnum):
    """Codec ids as stored in the low three bits of ``attributes``."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def label(self) -> str:
        return CODEC_LABELS[self]


def codec_from_attributes(attributes: int, magic: int) -> CompressionType:
    """The codec named by ``attributes``; ids 5-7 and zstd outside magic 2 are errors."""
    codec_id = attributes & CODEC_MASK
    if codec_id >= len(CODEC_LABELS):
        raise UnsupportedFormatError(f"unknown compression codec id {codec_id}")
    if codec_id == CompressionType.ZSTD and magic < 2:
        raise CorruptSegmentError(f"zstd is not allowed in a magic {magic} message set")
    return _CODEC_BY_ID[codec_id]


_CODEC_BY_ID: tuple[CompressionType, ...] = tuple(CompressionType)  # faster than the enum call


def decompress(
    codec: int,
    payload: Buffer,
    *,
    magic: int,
    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """Decompress one stored payload; raises CorruptSegmentError / LimitExceededError, no path."""
    if (
        codec == CompressionType.LZ4
        and magic != 0
        and len(payload) * LZ4_MAX_RATIO + LZ4_MAX_BLOCK <= max_bytes
        and payload[:4] == LZ4_MAGIC
        and len(payload) > 6
        and not payload[4] & 0x08
        and _lz4f is not None
    ):
        # The common case, called once per batch: a frame with no declared content size that
        # cannot expand past the limit (LZ4 expands at most ~255 times) and whose header
        # checksum liblz4 verifies itself. Everything else takes the checked path below.
        try:
            plain: bytes = _lz4f.decompress(payload)
            return plain
        except _CODEC_ERRORS as err:
            raise CorruptSegmentError(f"lz4: {err}") from err
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    if not 0 <= codec <= CODEC_MASK:
        raise ValueError(f"codec id must be in 0..{CODEC_MASK}, got {codec}")
    codec_from_attributes(codec, magic)  # rejects ids 5-7 and zstd in magic 0/1
    if codec == CompressionType.NONE:
        if len(payload) > max_bytes:
            raise _limit("none", max_bytes)
        return bytes(payload)
    if not payload:
        # No Kafka writer emits an empty compressed payload, and no codec decodes one.
        raise CorruptSegmentError(f"{CODEC_LABELS[codec]}: empty compressed payload")
    view = payload if isinstance(payload, memoryview) else memoryview(payload)
    try:
        return _DECODERS[codec](view, max_bytes, magic)
    except _CODEC_ERRORS as err:
        raise CorruptSegmentError(f"{CODEC_LABELS[codec]}: {err}") from err


def compress(codec: int, data: Buffer, *, magic: int = 2, level: int | None = None) -> bytes:
    """Compress ``data`` the way Kafka's Java client writes it (``level`` None = Kafka default).

    ``level`` is ignored for none and snappy and passed unchanged to zlib, lz4.frame (default:
    its fast mode) and zstandard.
    """
    codec_type = CompressionType(codec)
    if codec_type is CompressionType.NONE:
        return bytes(data)
    if codec_type is CompressionType.GZIP:
        # One gzip member with mtime 0, so equal input gives equal bytes.
        return zlib.compress(data, GZIP_DEFAULT_LEVEL if level is None else level, wbits=31)
    if codec_type is CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec_type is CompressionType.LZ4:
        return _lz4_compress(data, magic, level)
    if magic < 2:
        raise ValueError("zstd needs magic 2")
    return _zstd_compressor(ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)


def xxh32(data: Buffer, seed: int = 0) -> int:
    """XXH32 in pure Python; only used on LZ4 frame descriptors (a few bytes), so speed is moot."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _XXH_P1 + _XXH_P2) & _MASK32
        v2 = (seed + _XXH_P2) & _MASK32
        v3 = seed & _MASK32
        v4 = (seed - _XXH_P1) & _MASK32
        while pos + 16 <= n:
            w1, w2, w3, w4 = _XXH32_STRIPE.unpack_from(data, pos)
            v1 = _rotl32((v1 + w1 * _XXH_P2) & _MASK32, 13) * _XXH_P1 & _MASK32
            v2 = _rotl32((v2 + w2 * _XXH_P2) & _MASK32, 13) * _XXH_P1 & _MASK32
            v3 = _rotl32((v3 + w3 * _XXH_P2) & _MASK32, 13) * _XXH_P1 & _MASK32
            v4 = _rotl32((v4 + w4 * _XXH_P2) & _MASK32, 13) * _XXH_P1 & _MASK32
            pos += 16
        h = _rotl32(v1, 1) + _rotl32(v2, 7) + _rotl32(v3, 12) + _rotl32(v4, 18)
    else:
        h = seed + _XXH_P5
    h = (h + n) & _MASK32
    while pos + 4 <= n:
        (word,) = _U32_LE.unpack_from(data, pos)
        h = _rotl32((h + word * _XXH_P3) & _MASK32, 17) * _XXH_P4 & _MASK32
        pos += 4
    while pos < n:
        h = _rotl32((h + data[pos] * _XXH_P5) & _MASK32, 11) * _XXH_P1 & _MASK32
        pos += 1
    h ^= h >> 15
    h = h * _XXH_P2 & _MASK32
    h ^= h >> 13
    h = h * _XXH_P3 & _MASK32
    return h ^ (h >> 16)


def lz4_header_checksum(hashed: Buffer) -> int:
    """The HC byte of an LZ4 frame whose hashed header bytes are ``hashed``."""
    return (xxh32(hashed) >> 8) & 0xFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def _limit(label: str, max_bytes: int) -> LimitExceededError:
    return LimitExceededError(
        f"{label}: decompressed size exceeds the limit of {max_bytes} bytes "
        "(option maxDecompressedBytes)"
    )


# What the libraries raise on undecodable input (lz4.frame raises a plain RuntimeError).
_CODEC_ERRORS: tuple[type[Exception], ...] = (
    zlib.error,
    RuntimeError,
    *((_zstd.ZstdError,) if _zstd is not None else ()),
    *((_cramjam.DecompressionError,) if _cramjam is not None else ()),
)


# --- gzip -------------------------------------------------------------------------------------


def _gzip_decompress(view: memoryview, max_bytes: int, magic: int) -> bytes:
    parts: list[bytes] = []
    produced = 0
    data: Buffer = view
    while True:
        member = zlib.decompressobj(wbits=31)
        # zlib grows its output in blocks, so a large max_length costs nothing up front.
        out = member.decompress(data, max_bytes - produced + 1)
        produced += len(out)
        if produced > max_bytes:
            raise _limit("gzip", max_bytes)
        parts.append(out)
        if not member.eof:
            raise CorruptSegmentError("gzip: truncated stream (no end of member)")
        data = member.unused_data
        # Java's GZIPInputStream reads on only if the rest parses as a member header.
        if not data.startswith(GZIP_MEMBER_START):
            return b"".join(parts)


# --- snappy -----------------------------------------------------------------------------------


def _snappy_decompress(view: memoryview, max_bytes: int, magic: int) -> bytes:
    if _cramjam is None:
        raise MissingCodecError("snappy", "python-snappy")
    n = len(view)
    if n < _XERIAL_HEADER.size or view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return b"".join([_snappy_raw_block(view, max_bytes, max_bytes)])  # type: ignore[list-item]
    parts: list[object] = []
    produced = 0
    pos = _XERIAL_HEADER.size
    while pos < n:
        if n - pos < _XERIAL_BLOCK_LEN.size:
            raise CorruptSegmentError(
                f"snappy: truncated xerial block length at payload byte {pos}"
            )
        (size,) = _XERIAL_BLOCK_LEN.unpack_from(view, pos)
        pos += _XERIAL_BLOCK_LEN.size
        if size < 0 or size > n - pos:
            raise CorruptSegmentError(
                f"snappy: xerial block length {size} at payload byte {pos - 4} "
                f"exceeds the {n - pos} bytes left"
            )
        block = _snappy_raw_block(view[pos : pos + size], max_bytes - produced, max_bytes)
        produced += len(block)  # type: ignore[arg-type]
        parts.append(block)
        pos += size
    return b"".join(parts)  # type: ignore[arg-type]


def _snappy_raw_block(block: memoryview, remaining: int, max_bytes: int) -> object:
    # The leading varint is the exact output size; the decoder allocates it before decoding,
    # so it must pass the bound first.
    if _cramjam.snappy.decompress_raw_len(block) > remaining:
        raise _limit("snappy", max_bytes)
    return _cramjam.snappy.decompress_raw(block)


def _snappy_compress(data: Buffer) -> bytes:
    if _cramjam is None:
        raise MissingCodecError("snappy", "python-snappy")
    view = data if isinstance(data, memoryview) else memoryview(data)
    parts: list[object] = [_XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_VERSION)]
    for start in range(0, len(view), XERIAL_BLOCK_INPUT):
        block = _cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_INPUT])
        parts.append(_XERIAL_BLOCK_LEN.pack(len(block)))
        parts.append(block)
    return b"".join(parts)  # type: ignore[arg-type]


# --- lz4 --------------------------------------------------------------------------------------


# An LZ4 sequence turns each extra length byte into at most 255 output bytes; a block adds at
# most its own size (4 MiB) on top.
LZ4_MAX_RATIO = 256
LZ4_MAX_BLOCK = 4 * 1024 * 1024


def _lz4_decompress(view: memoryview, max_bytes: int, magic: int) -> bytes:
    if _lz4f is None:
        raise MissingCodecError("lz4", "lz4")
    n = len(view)
    if n < 7 or view[:4] != LZ4_MAGIC:
        raise CorruptSegmentError(f"lz4: not an LZ4 frame (starts {bytes(view[:4]).hex()})")
    flg = view[4]
    hc_pos = 6 + (_LZ4_CONTENT_SIZE.size if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if n <= hc_pos:
        raise CorruptSegmentError("lz4: truncated frame header")
    if flg & 0x08:
        (bound,) = _LZ4_CONTENT_SIZE.unpack_from(view, 6)
        if bound > max_bytes:  # liblz4 rejects output that differs from the declared size
            raise _limit("lz4", max_bytes)
    elif n * LZ4_MAX_RATIO + LZ4_MAX_BLOCK <= max_bytes:
        # LZ4 cannot expand input more than ~255 times, so the frame surely fits: skip the walk
        bound = n * LZ4_MAX_RATIO + LZ4_MAX_BLOCK
    else:
        # Above max_bytes this is only an upper bound: the stream decoder finds out.
        bound = _lz4_output_bound(view, hc_pos + 1, flg, view[5], max_bytes)
    # KAFKA-3160: magic-0 frames may carry an HC that also hashes the magic bytes; Kafka
    # ignores it, liblz4 does not, so liblz4 gets the correct HC in a patched header.
    hc = lz4_header_checksum(view[4:hc_pos]) if magic == 0 else view[hc_pos]
    if hc == view[hc_pos] and bound <= max_bytes:
        # The bound proves the output fits, so the one-shot call (the fastest) is safe. Like
        # Kafka it stops at the end mark, ignoring any bytes after it.
        whole: bytes = _lz4f.decompress(view)
        return whole
    return _lz4_stream(view, hc_pos, hc, min(max(bound, LZ4_MIN_CHUNK), LZ4_MAX_CHUNK), max_bytes)


def _lz4_stream(view: memoryview, hc_pos: int, hc: int, chunk: int, max_bytes: int) -> bytes:
    """Decode in bounded output chunks: for frames that may break the limit or need a new HC."""
    context = _lz4f.create_decompression_context()
    data = view
    if hc != view[hc_pos]:
        header = bytearray(view[:hc_pos])
        header.append(hc)
        _lz4f.decompress_chunk(context, bytes(header))
        data = view[hc_pos + 1 :]
    # Dependent-block frames (Kafka rejects them) decode to the same bytes, so we accept them.
    parts: list[bytes] = []
    produced = 0
    pos = 0
    while True:
        max_length = min(chunk, max_bytes - produced) + 1
        out, read, eof = _lz4f.decompress_chunk(context, data[pos:], max_length=max_length)
        pos += read
        produced += len(out)
        if produced > max_bytes:
            raise _limit("lz4", max_bytes)
        parts.append(out)
        if eof:
            return b"".join(parts)
        if len(out) < max_length:  # liblz4 stopped for want of input
            raise CorruptSegmentError("lz4: truncated frame (no end mark)")
        chunk = min(chunk * 2, LZ4_MAX_CHUNK)


def _lz4_output_bound(view: memoryview, pos: int, flg: int, bd: int, max_bytes: int) -> int:
    """Upper bound of the frame's output from its block headers; stops once past ``max_bytes``.

    liblz4 caps every block at the BD block size, so a frame within the bound may use the
    one-shot call; the walk costs ~0.3 us per block.
    """
    block_max = 1 << (8 + 2 * ((bd >> 4) & 0x7))  # BD ids 4-7: 64 KiB, 256 KiB, 1 MiB, 4 MiB
    trailer = 4 if flg & 0x10 else 0  # block checksum
    n = len(view)
    bound = 0
    while pos + 4 <= n and bound <= max_bytes:
        (size,) = _U32_LE.unpack_from(view, pos)
        if size == 0:
            break
        stored = size & LZ4_STORED_BIT
        size &= ~LZ4_STORED_BIT
        bound += size if stored else block_max
        pos += 4 + size + trailer
    return bound


def _lz4_compress(data: Buffer, magic: int, level: int | None) -> bytes:
    if _lz4f is None:
        raise MissingCodecError("lz4", "lz4")
    frame: bytes = _lz4f.compress(
        data,
        compression_level=0 if level is None else level,
        block_size=_lz4f.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    if frame[4] != LZ4_KAFKA_FLG or frame[5] != LZ4_KAFKA_BD:
        raise RuntimeError(f"lz4.frame wrote FLG/BD {frame[4:6].hex()}, expected 6040")
    if magic != 0:
        return frame
    # Kafka still writes the KAFKA-3160 HC (hash over magic + FLG + BD) in magic-0 messages.
    return b"".join([frame[:6], bytes([lz4_header_checksum(frame[:6])]), memoryview(frame)[7:]])


# --- zstd -------------------------------------------------------------------------------------

_local = threading.local()


def _zstd_decompressor() -> _zstd.ZstdDecompressor:
    # Creating a DCtx costs ~7 us (15% of a 64 KB batch) and one must not be shared by threads.
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        if _zstd is None:
            raise MissingCodecError("zstd", "zstandard")
        dctx = _local.dctx = _zstd.ZstdDecompressor()
    return dctx


def _zstd_compressor(level: int) -> _zstd.ZstdCompressor:
    if _zstd is None:
        raise MissingCodecError("zstd", "zstandard")
    cache: dict[int, _zstd.ZstdCompressor] = _local.__dict__.setdefault("cctx", {})
    if level not in cache:
        cache[level] = _zstd.ZstdCompressor(level=level)
    return cache[level]


def _zstd_decompress(view: memoryview, max_bytes: int, magic: int) -> bytes:
    # zstandard's stream reader silently returns nothing for a truncated frame, and its one-shot
    # call needs an output size, so we walk the block headers ourselves: that proves each frame
    # complete and bounds its output, which then picks a one-shot call or a block-fed stream.
    dctx = _zstd_decompressor()
    parts: list[bytes] = []
    produced = 0
    pos = 0
    n = len(view)
    while pos < n:
        if n - pos < 4:
            raise CorruptSegmentError(f"zstd: truncated frame magic at payload byte {pos}")
        (frame_magic,) = _U32_LE.unpack_from(view, pos)
        if frame_magic & ZSTD_SKIPPABLE_MASK == ZSTD_SKIPPABLE_MAGIC:
            if n - pos < 8:
                raise CorruptSegmentError(f"zstd: truncated skippable frame at payload byte {pos}")
            pos += 8 + _U32_LE.unpack_from(view, pos + 4)[0]
            if pos > n:
                raise CorruptSegmentError("zstd: skippable frame runs past the payload")
            continue
        if frame_magic != ZSTD_FRAME_MAGIC:
            raise CorruptSegmentError(
                f"zstd: bad frame magic {frame_magic:#010x} at payload byte {pos}"
            )
        frame = view[pos:]
        params = _zstd.get_frame_parameters(frame)
        blocks_start = pos + _zstd.frame_header_size(frame)
        ends, bound = _zstd_walk_blocks(view, blocks_start, params.has_checksum)
        end = ends[-1]
        remaining = max_bytes - produced
        if params.content_size != ZSTD_CONTENT_SIZE_UNKNOWN:
            if params.content_size > remaining:
                raise _limit("zstd", max_bytes)
            bound = params.content_size  # libzstd rejects a frame that does not match it
        if bound <= remaining and params.content_size == ZSTD_CONTENT_SIZE_UNKNOWN:
            # Proven complete and bounded by the walk: a decompressobj grows its output as it
            # goes, where the one-shot call would first allocate the whole (128 KiB a block)
            # bound — the usual Kafka frame, which declares no content size.
            out = dctx.decompressobj().decompress(view[pos:end])
        elif bound <= remaining:
            frame = view[pos:end]
            out = dctx.decompress(frame, max_output_size=max(bound, 1), allow_extra_data=False)
        else:
            out = _zstd_stream_frame(dctx, view, pos, ends, remaining, max_bytes)
        produced += len(out)
        parts.append(out)
        pos = end
    return b"".join(parts)


def _zstd_walk_blocks(view: memoryview, pos: int, has_checksum: bool) -> tuple[list[int], int]:
    """End offset of each block (the last entry is the frame end) and an output upper bound."""
    n = len(view)
    ends: list[int] = []
    bound = 0
    while True:
        if n - pos < 3:
            raise CorruptSegmentError("zstd: truncated frame (missing block header)")
        header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        block_type = (header >> 1) & 0x3
        size = header >> 3
        if block_type == 0:  # raw: size bytes, copied
            bound += size
            pos += 3 + size
        elif block_type == 1:  # RLE: one byte, repeated size times
            bound += size
            pos += 4
        elif block_type == 2:  # compressed: size bytes in, at most ZSTD_BLOCK_MAX out
            bound += ZSTD_BLOCK_MAX
            pos += 3 + size
        else:
            raise CorruptSegmentError("zstd: reserved block type")
        if header & 1:
            pos += 4 if has_checksum else 0
            ends.append(pos)
            break
        ends.append(pos)
    if pos > n:
        raise CorruptSegmentError("zstd: truncated frame (block runs past the payload)")
    return ends, bound


def _zstd_stream_frame(
    dctx: _zstd.ZstdDecompressor,
    view: memoryview,
    pos: int,
    ends: list[int],
    remaining: int,
    max_bytes: int,
) -> bytes:
    # Feed whole blocks, a few at a time: each block yields at most ZSTD_BLOCK_MAX, so memory
    # never passes the limit by more than one group.
    stream = dctx.decompressobj()
    parts: list[bytes] = []
    produced = 0
    fed = pos
    for first in range(0, len(ends), ZSTD_BLOCKS_PER_FEED):
        end = ends[min(first + ZSTD_BLOCKS_PER_FEED, len(ends)) - 1]
        out = stream.decompress(view[fed:end])
        fed = end
        produced += len(out)
        if produced > remaining:
            raise _limit("zstd", max_bytes)
        parts.append(out)
    if not stream.eof or stream.unused_data:
        raise CorruptSegmentError("zstd: frame did not end where its last block ends")
    return b"".join(parts)


_DECODERS: dict[int, Callable[[memoryview, int, int], bytes]] = {
    CompressionType.GZIP: _gzip_decompress,
    CompressionType.SNAPPY: _snappy_decompress,
    CompressionType.LZ4: _lz4_decompress,
    CompressionType.ZSTD: _zstd_decompress,
}
