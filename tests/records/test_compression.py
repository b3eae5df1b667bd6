"""Tests for kafka_segments_ds.records.compression: round trips, golden headers, Kafka quirks,
bounded output (bombs), corrupt input, and kafka-python's codecs in both directions.

Golden bytes here are small header literals worked out from the format (FORMAT.md section 5);
compressed bodies are never pinned because they change with library versions.
"""

from __future__ import annotations

import contextlib
import random
import struct
import tracemalloc
import types
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from kafka_segments_ds.errors import (
    CorruptSegmentError,
    LimitExceededError,
    UnsupportedFormatError,
)
from kafka_segments_ds.records.compression import (
    CODEC_LABELS,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
    codec_from_attributes,
    compress,
    decompress,
    lz4_header_checksum,
    xxh32,
)

NONE, GZIP, SNAPPY, LZ4, ZSTD = (int(c) for c in CompressionType)
MIB = 1024 * 1024
_RNG = random.Random(20240601)
PAYLOADS = {
    "empty": b"",
    "one-byte": b"k",
    "random-100k": _RNG.randbytes(100_000),
    "repetitive-1m": (b"kafka segment record value 0123456789 " * 27_000)[:MIB],
}
CODEC_MAGIC = [
    pytest.param(int(codec), magic, id=f"{codec.label}-magic{magic}")
    for codec in CompressionType
    for magic in (0, 1, 2)
    if not (codec == ZSTD and magic < 2)
]
COMPRESSED_CODECS = [GZIP, SNAPPY, LZ4, ZSTD]
XERIAL_HEADER = bytes.fromhex("82534e415050590000000001 00000001".replace(" ", ""))


def _ids(value: object) -> str:
    return CODEC_LABELS[value] if isinstance(value, int) else str(value)


# --- codec ids --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attributes", "magic", "expected"),
    [
        (0, 0, CompressionType.NONE),
        (1, 0, CompressionType.GZIP),
        (2, 1, CompressionType.SNAPPY),
        (3, 1, CompressionType.LZ4),
        (4, 2, CompressionType.ZSTD),
        (0x1B, 2, CompressionType.LZ4),  # timestamp type + transactional bits are not the codec
        (0x30, 2, CompressionType.NONE),
    ],
)
def test_codec_from_attributes(attributes: int, magic: int, expected: CompressionType) -> None:
    assert codec_from_attributes(attributes, magic) is expected


@pytest.mark.parametrize("codec_id", [5, 6, 7])
@pytest.mark.parametrize("magic", [0, 1, 2])
def test_codec_from_attributes_unknown_ids(codec_id: int, magic: int) -> None:
    with pytest.raises(UnsupportedFormatError, match=f"unknown compression codec id {codec_id}"):
        codec_from_attributes(0x08 | codec_id, magic)


@pytest.mark.parametrize("magic", [0, 1])
def test_zstd_needs_magic_2(magic: int) -> None:
    with pytest.raises(CorruptSegmentError, match=f"zstd is not allowed in a magic {magic}"):
        codec_from_attributes(4, magic)
    with pytest.raises(CorruptSegmentError, match="zstd is not allowed"):
        decompress(ZSTD, compress(ZSTD, b"x"), magic=magic)
    with pytest.raises(ValueError, match="zstd needs magic 2"):
        compress(ZSTD, b"x", magic=magic)


def test_labels() -> None:
    assert CODEC_LABELS == ("none", "gzip", "snappy", "lz4", "zstd")
    assert [c.label for c in CompressionType] == list(CODEC_LABELS)
    assert DEFAULT_MAX_DECOMPRESSED_BYTES == 256 * MIB


def test_decompress_rejects_bad_arguments() -> None:
    with pytest.raises(UnsupportedFormatError):
        decompress(6, b"abc", magic=2)
    with pytest.raises(ValueError):
        decompress(9, b"abc", magic=2)
    with pytest.raises(ValueError):
        decompress(GZIP, b"abc", magic=2, max_bytes=-1)


# --- xxh32 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        (b"", 0, 0x02CC5D05),
        (b"a", 0, 0x550D7456),
        (b"abc", 0, 0x32D153FF),
        (b"Nobody inspects the spammish repetition", 0, 0xE2293B2F),
    ],
)
def test_xxh32_known_vectors(data: bytes, seed: int, expected: int) -> None:
    assert xxh32(data, seed) == expected


def test_xxh32_matches_liblz4_content_checksum() -> None:
    # liblz4 appends xxh32(content, seed 0) little-endian when content_checksum is on.
    for size in [*range(40), 63, 64, 65, 1000]:
        data = _RNG.randbytes(size)
        frame = lz4.frame.compress(data, content_checksum=True)
        assert xxh32(data) == struct.unpack("<I", frame[-4:])[0], size


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("payload_name", list(PAYLOADS))
@pytest.mark.parametrize(("codec", "magic"), CODEC_MAGIC)
def test_round_trip(codec: int, magic: int, payload_name: str) -> None:
    data = PAYLOADS[payload_name]
    stored = compress(codec, data, magic=magic)
    assert decompress(codec, stored, magic=magic) == data
    assert decompress(codec, memoryview(bytearray(stored)), magic=magic) == data


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=_ids)
def test_levels(codec: int) -> None:
    data = PAYLOADS["repetitive-1m"][:200_000]
    for level in (1, 9):
        assert decompress(codec, compress(codec, data, level=level), magic=2) == data


def test_none_is_identity_and_bounded() -> None:
    assert decompress(NONE, memoryview(b"abc"), magic=0) == b"abc"
    assert compress(NONE, bytearray(b"abc")) == b"abc"
    with pytest.raises(LimitExceededError, match="none: decompressed size exceeds"):
        decompress(NONE, b"abcd", magic=2, max_bytes=3)


# --- golden headers ---------------------------------------------------------------------------


def test_xerial_framing_bytes() -> None:
    data = PAYLOADS["repetitive-1m"][:100_000]
    stored = compress(SNAPPY, data)
    assert stored[:16] == XERIAL_HEADER
    # Blocks hold at most 32 KiB of input: 32768 x 3 + 1696; each raw block opens with a varint
    # of its uncompressed size (32768 = 80 80 02).
    pos, varints = 16, []
    while pos < len(stored):
        (size,) = struct.unpack_from(">i", stored, pos)
        varints.append(stored[pos + 4 : pos + 7])
        pos += 4 + size
    assert pos == len(stored)
    assert varints[:3] == [b"\x80\x80\x02"] * 3
    assert varints[3][:2] == b"\xa0\x0d"  # 1696
    assert compress(SNAPPY, b"") == XERIAL_HEADER


@pytest.mark.parametrize(
    ("magic", "header"),
    [
        (0, "04224d18 6040 1a"),  # KAFKA-3160: HC = (xxh32(04 22 4D 18 60 40) >> 8) & 0xFF
        (1, "04224d18 6040 82"),  # HC = (xxh32(60 40) >> 8) & 0xFF
        (2, "04224d18 6040 82"),
    ],
)
def test_lz4_frame_header_bytes(magic: int, header: str) -> None:
    stored = compress(LZ4, PAYLOADS["repetitive-1m"][:150_000], magic=magic)
    assert stored[:7] == bytes.fromhex(header.replace(" ", ""))
    assert stored[-4:] == b"\x00\x00\x00\x00"  # end mark, no content checksum
    assert lz4_header_checksum(bytes.fromhex("6040")) == 0x82
    assert lz4_header_checksum(bytes.fromhex("04224d186040")) == 0x1A


# --- LZ4 header checksum (KAFKA-3160) ---------------------------------------------------------


def _with_hc(frame: bytes, hc: int) -> bytes:
    return frame[:6] + bytes([hc]) + frame[7:]


def test_lz4_magic0_accepts_broken_and_correct_hc() -> None:
    data = PAYLOADS["random-100k"]
    correct = compress(LZ4, data, magic=2)
    broken = compress(LZ4, data, magic=0)
    assert broken[6] == 0x1A and correct[6] == 0x82
    assert decompress(LZ4, broken, magic=0) == data
    assert decompress(LZ4, correct, magic=0) == data
    assert decompress(LZ4, _with_hc(correct, 0x00), magic=0) == data  # Kafka skips the check


@pytest.mark.parametrize("magic", [1, 2])
def test_lz4_broken_hc_rejected_outside_magic0(magic: int) -> None:
    broken = compress(LZ4, b"some records", magic=0)
    with pytest.raises(CorruptSegmentError, match=r"^lz4: "):
        decompress(LZ4, broken, magic=magic)


def test_lz4_magic0_patched_hc_still_bounded() -> None:
    broken = compress(LZ4, bytes(8 * MIB), magic=0)
    with pytest.raises(LimitExceededError):
        decompress(LZ4, broken, magic=0, max_bytes=MIB)
    assert len(decompress(LZ4, broken, magic=0, max_bytes=8 * MIB)) == 8 * MIB


def test_lz4_frame_variants_decode() -> None:
    data = PAYLOADS["repetitive-1m"][:300_000]
    variants = [
        lz4.frame.compress(data, store_size=True, content_checksum=True, block_checksum=True),
        lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX4MB),
        # Kafka rejects dependent blocks; decoding them gives the same bytes, so we accept them.
        lz4.frame.compress(data, block_linked=True, store_size=False),
        lz4.frame.compress(_RNG.randbytes(70_000), store_size=False),  # stored (raw) blocks
    ]
    for frame in variants[:3]:
        assert decompress(LZ4, frame, magic=2) == data
        assert decompress(LZ4, frame, magic=0) == data
    assert len(decompress(LZ4, variants[3], magic=2)) == 70_000


@pytest.mark.parametrize("magic", [0, 2])
def test_lz4_ignores_bytes_after_end_mark(magic: int) -> None:
    # Kafka's KafkaLZ4BlockInputStream reads one frame and stops at its end mark.
    stored = compress(LZ4, b"first frame", magic=magic)
    assert decompress(LZ4, stored + b"trailing junk", magic=magic) == b"first frame"


# --- snappy -----------------------------------------------------------------------------------


def test_raw_snappy_decodes() -> None:
    data = PAYLOADS["repetitive-1m"][:100_000]
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(SNAPPY, raw, magic=2) == data
    assert decompress(SNAPPY, bytes(cramjam.snappy.compress_raw(b"")), magic=1) == b""


def test_xerial_versions_are_not_checked() -> None:
    # Some producers write the two version ints little-endian; only the 8-byte magic counts.
    stored = compress(SNAPPY, b"hello")
    odd = stored[:8] + struct.pack("<ii", 1, 1) + stored[16:]
    assert decompress(SNAPPY, odd, magic=2) == b"hello"


@pytest.mark.parametrize(
    "tail",
    [
        struct.pack(">i", 1000) + b"\x05hello",  # length longer than the bytes left
        struct.pack(">i", -1) + b"\x05hello",  # negative length
        b"\x00\x00",  # truncated length
        struct.pack(">i", 3) + b"\x05hello",  # length shorter than the block
    ],
    ids=["too-long", "negative", "truncated-length", "too-short"],
)
def test_xerial_block_length_lies(tail: bytes) -> None:
    with pytest.raises(CorruptSegmentError, match=r"^snappy: "):
        decompress(SNAPPY, XERIAL_HEADER + tail, magic=2)


# --- gzip and zstd framing --------------------------------------------------------------------


def test_concatenated_gzip_members() -> None:
    first, second = PAYLOADS["random-100k"], b"second member"
    stored = compress(GZIP, first) + compress(GZIP, second, level=1)
    assert decompress(GZIP, stored, magic=1) == first + second


def test_gzip_trailing_bytes() -> None:
    stored = compress(GZIP, b"records")
    # Java's GZIPInputStream ignores trailing bytes that do not parse as a member header...
    assert decompress(GZIP, stored + b"\x00\x00\x00", magic=2) == b"records"
    # ...but a started member must be complete.
    with pytest.raises(CorruptSegmentError, match=r"^gzip: "):
        decompress(GZIP, stored + b"\x1f\x8b\x08\x00\x00", magic=2)


def test_zstd_frames() -> None:
    data = PAYLOADS["repetitive-1m"]
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.get_frame_parameters(no_size).content_size == 2**64 - 1
    assert decompress(ZSTD, no_size, magic=2) == data
    streamed = zstandard.ZstdCompressor(write_checksum=True).compressobj()
    framed = streamed.compress(data[:5000]) + streamed.flush()
    assert decompress(ZSTD, framed, magic=2) == data[:5000]
    # Concatenated frames (zstd-jni's stream reads on), with a skippable frame between.
    skippable = struct.pack("<II", 0x184D2A53, 3) + b"abc"
    stored = compress(ZSTD, b"one ") + skippable + no_size + compress(ZSTD, b"")
    assert decompress(ZSTD, stored, magic=2) == b"one " + data


def test_zstd_trailing_garbage_is_corrupt() -> None:
    with pytest.raises(CorruptSegmentError, match=r"^zstd: "):
        decompress(ZSTD, compress(ZSTD, b"records") + b"junk", magic=2)


# --- bounds (decompression bombs) -------------------------------------------------------------


def _bombs() -> dict[str, tuple[int, bytes]]:
    zeros = bytes(32 * MIB)
    return {
        "gzip": (GZIP, compress(GZIP, zeros, level=9)),
        "snappy-xerial": (SNAPPY, compress(SNAPPY, zeros)),
        "snappy-raw": (SNAPPY, bytes(cramjam.snappy.compress_raw(zeros))),
        "lz4": (LZ4, compress(LZ4, zeros)),
        "lz4-content-size": (LZ4, lz4.frame.compress(zeros, store_size=True)),
        "zstd": (ZSTD, compress(ZSTD, zeros)),
        "zstd-no-size": (ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(zeros)),
    }


BOMBS = _bombs()


@pytest.mark.parametrize("name", list(BOMBS))
def test_bomb_fails_with_bounded_memory(name: str) -> None:
    codec, stored = BOMBS[name]
    assert len(stored) < 2 * MIB  # 32 MiB out of a small payload
    tracemalloc.start()
    try:
        with pytest.raises(
            LimitExceededError,
            match=f"{CODEC_LABELS[codec]}: decompressed size "
            "exceeds the limit of 1048576 bytes \\(option maxDecompressedBytes\\)",
        ):
            decompress(codec, stored, magic=2, max_bytes=MIB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MIB


@pytest.mark.parametrize("name", list(BOMBS))
def test_limit_is_exact(name: str) -> None:
    codec, stored = BOMBS[name]
    assert len(decompress(codec, stored, magic=2, max_bytes=32 * MIB)) == 32 * MIB
    with pytest.raises(LimitExceededError):
        decompress(codec, stored, magic=2, max_bytes=32 * MIB - 1)


def test_declared_sizes_are_checked_before_allocating() -> None:
    # A raw snappy block whose varint claims 4 GiB.
    with pytest.raises(LimitExceededError, match=r"^snappy: "):
        decompress(SNAPPY, b"\xff\xff\xff\xff\x0f\x00", magic=2)
    # An LZ4 frame declaring 1 TiB of content (FLG 0x68: content size present).
    descriptor = b"\x68\x40" + struct.pack("<Q", 2**40)
    frame = b"\x04\x22\x4d\x18" + descriptor + bytes([lz4_header_checksum(descriptor)])
    with pytest.raises(LimitExceededError, match=r"^lz4: "):
        decompress(LZ4, frame + b"\x00\x00\x00\x00", magic=2)
    # A zstd frame declaring 1 TiB (single segment, 8-byte size) with one RLE block.
    zframe = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 2**40) + b"\x0b\x00\x00\x00"
    with pytest.raises(LimitExceededError, match=r"^zstd: "):
        decompress(ZSTD, zframe, magic=2)


# --- corrupt input ----------------------------------------------------------------------------

GARBAGE = bytes(range(7, 250, 3))


def _corruptions(codec: int) -> dict[str, bytes]:
    stored = compress(codec, PAYLOADS["repetitive-1m"][:200_000])
    return {
        "empty": b"",
        "garbage": GARBAGE,
        "truncated-half": stored[: len(stored) // 2],
        "truncated-1": stored[:-1],
        "truncated-4": stored[:-4],
        "header-only": stored[:7],
    }


@pytest.mark.parametrize("kind", list(_corruptions(GZIP)))
@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=_ids)
def test_corrupt_payload_raises_corrupt_segment_error(codec: int, kind: str) -> None:
    bad = _corruptions(codec)[kind]
    with pytest.raises(CorruptSegmentError, match=f"^{CODEC_LABELS[codec]}: ") as info:
        decompress(codec, bad, magic=2)
    assert info.value.path is None and info.value.position is None
    cause = info.value.__cause__
    assert cause is None or not isinstance(cause, CorruptSegmentError)


def test_library_errors_are_chained() -> None:
    with pytest.raises(CorruptSegmentError) as info:
        decompress(GZIP, b"\x1f\x8b\x08\x00" + GARBAGE, magic=2)
    assert isinstance(info.value.__cause__, zlib.error)


def test_random_corruption_only_raises_corrupt_segment_error() -> None:
    rng = random.Random(7)
    data = PAYLOADS["repetitive-1m"][:20_000]
    for codec, magic in (param.values for param in CODEC_MAGIC):
        if codec == NONE:
            continue
        stored = compress(codec, data, magic=magic)
        for _ in range(60):
            bad = bytearray(stored)
            for _ in range(rng.randrange(1, 4)):
                bad[rng.randrange(min(len(bad), 64))] = rng.randrange(256)
            with contextlib.suppress(CorruptSegmentError):
                decompress(codec, bytes(bad), magic=magic, max_bytes=MIB)


# --- kafka-python, both directions ------------------------------------------------------------

kafka_codec = pytest.importorskip("kafka.codec")


class _Xxh32Digest:
    def __init__(self, data: bytes) -> None:
        self._value = xxh32(data)

    def digest(self) -> bytes:
        return self._value.to_bytes(4, "big")  # python-xxhash digests are big-endian


@pytest.fixture
def kafka_xxhash(monkeypatch: pytest.MonkeyPatch) -> None:
    # kafka-python's magic-0 LZ4 helpers need the xxhash package; without it, stand in ours
    # (our xxh32 is checked against liblz4 above).
    if kafka_codec.xxhash is None:
        monkeypatch.setattr(kafka_codec, "xxhash", types.SimpleNamespace(xxh32=_Xxh32Digest))


CROSS_PAYLOADS = [b"x", PAYLOADS["random-100k"][:5000], PAYLOADS["repetitive-1m"][:300_000]]


@pytest.mark.crosscheck
@pytest.mark.parametrize("data", CROSS_PAYLOADS, ids=["1B", "5KB-random", "300KB"])
def test_kafka_python_encoders_to_ours(data: bytes, kafka_xxhash: None) -> None:
    assert decompress(GZIP, kafka_codec.gzip_encode(data), magic=1) == data
    xerial = kafka_codec.snappy_encode(data, xerial_compatible=True)
    assert xerial[:16] == XERIAL_HEADER
    assert decompress(SNAPPY, xerial, magic=1) == data
    raw = kafka_codec.snappy_encode(data, xerial_compatible=False)
    assert decompress(SNAPPY, raw, magic=2) == data
    assert decompress(LZ4, kafka_codec.lz4_encode(data), magic=2) == data
    old = kafka_codec.lz4_encode_old_kafka(data)
    assert old[:7] == bytes.fromhex("04224d1860401a")  # content size dropped, broken HC
    assert decompress(LZ4, old, magic=0) == data
    assert decompress(ZSTD, kafka_codec.zstd_encode(data), magic=2) == data


@pytest.mark.crosscheck
@pytest.mark.parametrize("data", CROSS_PAYLOADS, ids=["1B", "5KB-random", "300KB"])
def test_ours_to_kafka_python_decoders(data: bytes, kafka_xxhash: None) -> None:
    assert kafka_codec.gzip_decode(compress(GZIP, data)) == data
    assert kafka_codec.snappy_decode(compress(SNAPPY, data)) == data
    assert kafka_codec.lz4_decode(compress(LZ4, data, magic=2)) == data
    assert kafka_codec.lz4_decode_old_kafka(compress(LZ4, data, magic=0)) == data
    assert kafka_codec.zstd_decode(compress(ZSTD, data)) == data
