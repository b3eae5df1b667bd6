"""Tests for kafka_segments_ds.records.legacy: magic 0/1 messages and compressed wrappers.

Golden entries are hand-assembled below with ``struct.pack`` from the layout in FORMAT.md §3.1,
one comment per field; their CRC-32s were computed once with ``zlib.crc32`` and are pinned as
literals. Compressed payloads are hand-assembled too, in forms whose bytes do not depend on a
compression library: a gzip member holding one *stored* deflate block, and a snappy-java (xerial)
stream holding one raw snappy block made of a single literal.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from kafka_segments_ds.errors import (
    ChecksumError,
    CorruptSegmentError,
    LimitExceededError,
    UnsupportedFormatError,
)
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.compression import CompressionType, decompress
from kafka_segments_ds.records.legacy import (
    LegacyMessage,
    decode_legacy_message,
    expand_wrapper,
    iter_inner_messages,
)

GZIP, SNAPPY = 1, 2
LOG_APPEND_TIME_BIT = 0x08


# --- hand assembly (independent of the library's builder) ---------------------------------------


def _bytes_field(blob: bytes | None) -> bytes:
    """int32 length (-1 = null) + the bytes."""
    return struct.pack(">i", -1) if blob is None else struct.pack(">i", len(blob)) + blob


def _message_body(
    magic: int, attributes: int, timestamp: int | None, key: bytes | None, value: bytes | None
) -> bytes:
    """The CRC-covered part of a legacy message: magic .. end of value."""
    body = struct.pack(">bb", magic, attributes)  # magic, attributes
    if magic == 1:
        body += struct.pack(">q", timestamp)  # timestamp (magic 1 only)
    return body + _bytes_field(key) + _bytes_field(value)


def _entry(offset: int, body: bytes, crc: int | None = None) -> bytes:
    """offset int64, size int32 (crc + body), crc uint32, body."""
    crc = zlib.crc32(body) if crc is None else crc
    return struct.pack(">qiI", offset, 4 + len(body), crc) + body


def _message(
    offset: int,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    *,
    timestamp: int = -1,
    attributes: int = 0,
) -> bytes:
    return _entry(offset, _message_body(magic, attributes, timestamp, key, value))


def gzip_stored(data: bytes) -> bytes:
    """One gzip member (RFC 1952) holding one stored (uncompressed) deflate block."""
    assert len(data) < 65536
    return (
        b"\x1f\x8b"  # ID1 ID2
        b"\x08"  # CM = deflate
        b"\x00"  # FLG: no extra fields
        b"\x00\x00\x00\x00"  # MTIME 0
        b"\x00"  # XFL
        b"\xff"  # OS unknown
        b"\x01"  # deflate block header: BFINAL=1, BTYPE=00 (stored)
        + struct.pack("<HH", len(data), len(data) ^ 0xFFFF)  # LEN, NLEN
        + data
        + struct.pack("<II", zlib.crc32(data), len(data))  # CRC32, ISIZE
    )


def xerial_literal(data: bytes) -> bytes:
    """snappy-java stream: 16-byte header, then one block = a raw snappy literal of ``data``."""
    assert 1 <= len(data) <= 60
    raw = bytes([len(data)])  # varint uncompressed length (< 128: one byte)
    raw += bytes([(len(data) - 1) << 2])  # literal tag, length - 1 in the upper six bits
    raw += data
    return (
        b"\x82SNAPPY\x00"  # xerial magic
        + struct.pack(">ii", 1, 1)  # version, minimum compatible version
        + struct.pack(">i", len(raw))  # block: compressed length
        + raw
    )


# --- golden entries -----------------------------------------------------------------------------

# magic 0, offset 5, key b"key", value b"value"
MAGIC0_CRC = 592888119
MAGIC0 = (
    struct.pack(">q", 5)  # offset
    + struct.pack(">i", 22)  # size: crc 4 + magic 1 + attributes 1 + 4 + 3 + 4 + 5
    + struct.pack(">I", MAGIC0_CRC)  # CRC-32 of the bytes from magic to the end
    + struct.pack(">b", 0)  # magic
    + struct.pack(">b", 0)  # attributes: no codec
    + struct.pack(">i", 3)  # key length
    + b"key"
    + struct.pack(">i", 5)  # value length
    + b"value"
)

# magic 1, offset 7, CreateTime 1_700_000_000_000, null key, value b"hello"
MAGIC1_CRC = 2397244346
MAGIC1 = (
    struct.pack(">q", 7)  # offset
    + struct.pack(">i", 27)  # size: crc 4 + magic 1 + attributes 1 + timestamp 8 + 4 + 4 + 5
    + struct.pack(">I", MAGIC1_CRC)  # CRC-32
    + struct.pack(">b", 1)  # magic
    + struct.pack(">b", 0)  # attributes: no codec, CreateTime
    + struct.pack(">q", 1_700_000_000_000)  # timestamp
    + struct.pack(">i", -1)  # key length: null
    + struct.pack(">i", 5)  # value length
    + b"hello"
)

# magic-1 gzip wrapper: inner relative offsets 0, 1, 2 and wrapper offset 102 -> 100, 101, 102
INNER1_CRCS = (2874710196, 2851107803, 2492135254)
INNER1 = (
    _entry(0, _message_body(1, 0, 1000, b"a", b"one"), INNER1_CRCS[0])  # relative offset 0
    + _entry(1, _message_body(1, 0, 1002, None, b"two"), INNER1_CRCS[1])  # relative offset 1
    + _entry(2, _message_body(1, 0, 1001, b"c", None), INNER1_CRCS[2])  # relative offset 2
)
WRAPPER1_CRC = 4236474526
WRAPPER1_PAYLOAD = gzip_stored(INNER1)
WRAPPER1 = (
    struct.pack(">q", 102)  # offset = absolute offset of the last inner message
    + struct.pack(">i", 22 + len(WRAPPER1_PAYLOAD))  # size
    + struct.pack(">I", WRAPPER1_CRC)  # CRC-32 (covers the compressed value)
    + struct.pack(">b", 1)  # magic
    + struct.pack(">b", GZIP)  # attributes: gzip, CreateTime
    + struct.pack(">q", 1002)  # timestamp = max inner timestamp
    + struct.pack(">i", -1)  # key: null, as Kafka writes wrappers
    + struct.pack(">i", len(WRAPPER1_PAYLOAD))  # value length
    + WRAPPER1_PAYLOAD
)

# magic-0 snappy wrapper: inner offsets are absolute (200, 201); wrapper offset 201
INNER0_CRCS = (901026546, 130470128)
INNER0 = _entry(200, _message_body(0, 0, None, None, b"x"), INNER0_CRCS[0]) + _entry(
    201, _message_body(0, 0, None, b"k", b"yz"), INNER0_CRCS[1]
)
WRAPPER0_CRC = 1292586107
WRAPPER0_PAYLOAD = xerial_literal(INNER0)
WRAPPER0 = (
    struct.pack(">q", 201)  # offset
    + struct.pack(">i", 14 + len(WRAPPER0_PAYLOAD))  # size
    + struct.pack(">I", WRAPPER0_CRC)  # CRC-32
    + struct.pack(">b", 0)  # magic
    + struct.pack(">b", SNAPPY)  # attributes: snappy
    + struct.pack(">i", -1)  # key: null
    + struct.pack(">i", len(WRAPPER0_PAYLOAD))  # value length
    + WRAPPER0_PAYLOAD
)


def test_golden_crcs_are_crc32_of_magic_to_end() -> None:
    assert zlib.crc32(MAGIC0[16:]) == MAGIC0_CRC
    assert zlib.crc32(MAGIC1[16:]) == MAGIC1_CRC
    assert zlib.crc32(WRAPPER1[16:]) == WRAPPER1_CRC
    assert zlib.crc32(WRAPPER0[16:]) == WRAPPER0_CRC
    assert len(MAGIC0) == 34 and len(MAGIC1) == 39


def test_magic0_golden() -> None:
    assert decode_legacy_message(MAGIC0, 0) == LegacyMessage(
        offset=5,
        magic=0,
        crc=MAGIC0_CRC,
        attributes=0,
        timestamp=-1,
        key=b"key",
        value=b"value",
        size=22,
    )
    message = decode_legacy_message(MAGIC0, 0)
    assert message.timestamp_type == -1
    assert message.compression is CompressionType.NONE


def test_magic1_golden() -> None:
    message = decode_legacy_message(MAGIC1, 0)
    assert message == LegacyMessage(
        offset=7,
        magic=1,
        crc=MAGIC1_CRC,
        attributes=0,
        timestamp=1_700_000_000_000,
        key=None,
        value=b"hello",
        size=27,
    )
    assert message.timestamp_type == 0
    assert message.compression is CompressionType.NONE


def test_consecutive_entries_decode_at_their_positions() -> None:
    buf = MAGIC0 + MAGIC1 + WRAPPER1
    assert decode_legacy_message(buf, 0).offset == 5
    assert decode_legacy_message(buf, len(MAGIC0)).offset == 7
    assert decode_legacy_message(memoryview(buf), len(MAGIC0) + len(MAGIC1)).offset == 102


def test_builder_matches_golden_uncompressed_messages() -> None:
    assert encode_legacy_message(offset=5, magic=0, key=b"key", value=b"value") == MAGIC0
    assert (
        encode_legacy_message(
            offset=7, magic=1, key=None, value=b"hello", timestamp=1_700_000_000_000
        )
        == MAGIC1
    )


def test_magic1_gzip_wrapper_golden() -> None:
    wrapper = decode_legacy_message(WRAPPER1, 0)
    assert wrapper == LegacyMessage(
        offset=102,
        magic=1,
        crc=WRAPPER1_CRC,
        attributes=GZIP,
        timestamp=1002,
        key=None,
        value=WRAPPER1_PAYLOAD,
        size=22 + len(WRAPPER1_PAYLOAD),
    )
    assert wrapper.compression is CompressionType.GZIP
    inner = list(iter_inner_messages(wrapper))
    assert [(m.offset, m.magic, m.timestamp, m.timestamp_type, m.key, m.value) for m in inner] == [
        (100, 1, 1000, 0, b"a", b"one"),
        (101, 1, 1002, 0, None, b"two"),
        (102, 1, 1001, 0, b"c", None),
    ]
    assert tuple(m.crc for m in inner) == INNER1_CRCS
    assert [m.attributes for m in inner] == [0, 0, 0]
    assert expand_wrapper(wrapper) == inner


def test_builder_magic1_wrapper_matches_golden_inner_entries() -> None:
    specs = [
        RecordSpec(value=b"one", key=b"a", timestamp=1000),
        RecordSpec(value=b"two", key=None, timestamp=1002),
        RecordSpec(value=None, key=b"c", timestamp=1001),
    ]
    built = decode_legacy_message(
        encode_legacy_wrapper(specs, last_offset=102, magic=1, compression=GZIP), 0
    )
    assert (built.offset, built.magic, built.attributes, built.timestamp, built.key) == (
        102,
        1,
        GZIP,
        1002,
        None,
    )
    assert built.value is not None
    assert decompress(GZIP, built.value, magic=1) == INNER1


def test_magic0_snappy_wrapper_golden() -> None:
    wrapper = decode_legacy_message(WRAPPER0, 0)
    assert wrapper == LegacyMessage(
        offset=201,
        magic=0,
        crc=WRAPPER0_CRC,
        attributes=SNAPPY,
        timestamp=-1,
        key=None,
        value=WRAPPER0_PAYLOAD,
        size=14 + len(WRAPPER0_PAYLOAD),
    )
    inner = list(iter_inner_messages(wrapper))
    assert [(m.offset, m.magic, m.timestamp, m.timestamp_type, m.key, m.value) for m in inner] == [
        (200, 0, -1, -1, None, b"x"),
        (201, 0, -1, -1, b"k", b"yz"),
    ]
    assert tuple(m.crc for m in inner) == INNER0_CRCS


def test_builder_magic0_wrapper_matches_golden_inner_entries() -> None:
    specs = [RecordSpec(value=b"x"), RecordSpec(value=b"yz", key=b"k")]
    built = decode_legacy_message(
        encode_legacy_wrapper(specs, last_offset=201, magic=0, compression=SNAPPY), 0
    )
    assert (built.offset, built.magic, built.attributes, built.key) == (201, 0, SNAPPY, None)
    assert built.value is not None
    assert decompress(SNAPPY, built.value, magic=0) == INNER0


# --- wrapper rules (FORMAT §3.3) ----------------------------------------------------------------


def _wrapper(
    inner: bytes,
    offset: int,
    *,
    magic: int = 1,
    codec: int = GZIP,
    timestamp: int = 5000,
    log_append_time: bool = False,
    null_value: bool = False,
) -> LegacyMessage:
    payload = None if null_value else gzip_stored(inner)
    attributes = codec | (LOG_APPEND_TIME_BIT if log_append_time else 0)
    return decode_legacy_message(
        _message(offset, magic, None, payload, timestamp=timestamp, attributes=attributes), 0
    )


def _inner_v1(*relative: int, timestamps: tuple[int, ...] | None = None) -> bytes:
    timestamps = timestamps or tuple(1000 + i for i in range(len(relative)))
    return b"".join(
        _message(r, 1, None, f"v{r}".encode(), timestamp=t)
        for r, t in zip(relative, timestamps, strict=True)
    )


def _offsets(wrapper: LegacyMessage) -> list[int]:
    return [m.offset for m in iter_inner_messages(wrapper)]


def test_magic1_relative_offsets_with_compaction_gaps() -> None:
    # absolute(i) = W - R_last + R_i
    assert _offsets(_wrapper(_inner_v1(0, 2, 5), 1005)) == [1000, 1002, 1005]
    assert _offsets(_wrapper(_inner_v1(3, 4, 9), 1009)) == [1003, 1004, 1009]


def test_magic1_wrapper_offset_equal_to_last_relative() -> None:
    assert _offsets(_wrapper(_inner_v1(0, 1, 5), 5)) == [0, 1, 5]


def test_magic1_wrapper_offset_zero_means_base_zero() -> None:
    # Some librdkafka versions wrote wrapper offset 0; Kafka then takes base 0. Only the
    # producer's numbering 0..n-1 fits such a wrapper; other inner offsets contradict it.
    assert _offsets(_wrapper(_inner_v1(0, 1, 2), 0)) == [0, 1, 2]
    assert _offsets(_wrapper(_inner_v1(0), 0)) == [0]
    for inner in ((3, 4), (1,), (2**32 - 1,), (0, 2)):
        with pytest.raises(CorruptSegmentError, match="do not end at the wrapper offset 0"):
            _offsets(_wrapper(_inner_v1(*inner), 0))


@pytest.mark.parametrize(
    ("inner", "wrapper_offset", "message"),
    [
        ((0, 0, 1), 9, "inner message offsets are not increasing: 0 after 0"),
        ((0, 2, 1), 9, "not increasing: 1 after 2"),
        ((-1, 0), 9, "negative inner message offset -1"),
    ],
)
def test_magic1_wrapper_contradicting_itself_is_corrupt(
    inner: tuple[int, ...], wrapper_offset: int, message: str
) -> None:
    with pytest.raises(CorruptSegmentError, match=message):
        _offsets(_wrapper(_inner_v1(*inner), wrapper_offset))


def test_magic1_wrapper_offset_below_last_relative_is_corrupt() -> None:
    with pytest.raises(CorruptSegmentError, match="below its last relative offset"):
        _offsets(_wrapper(_inner_v1(0, 1, 2, 3, 4, 5), 3))


def test_magic0_wrapper_offsets_are_absolute() -> None:
    inner = _message(40, 0, None, b"a") + _message(47, 0, None, b"b")
    assert _offsets(_wrapper(inner, 47, magic=0)) == [40, 47]


def test_offsets_follow_the_wrapper_magic_when_inner_magic_differs() -> None:
    # KAFKA-4298: old cleaners wrote magic-0 inner messages into magic-1 wrappers.
    inner = _message(0, 0, None, b"a") + _message(1, 0, None, b"b")
    wrapper = _wrapper(inner, 51)
    inner_messages = list(iter_inner_messages(wrapper))
    assert [m.offset for m in inner_messages] == [50, 51]
    assert [m.timestamp for m in inner_messages] == [-1, -1]


def test_log_append_time_wrapper_stamps_inner_messages() -> None:
    wrapper = _wrapper(_inner_v1(0, 1, timestamps=(10, 20)), 8, timestamp=777, log_append_time=True)
    assert wrapper.timestamp_type == 1
    inner = list(iter_inner_messages(wrapper))
    assert [(m.offset, m.timestamp, m.timestamp_type) for m in inner] == [(7, 777, 1), (8, 777, 1)]


def test_create_time_wrapper_keeps_inner_timestamps_and_its_type() -> None:
    # The reported type is the wrapper's, whatever the inner attribute bit says.
    inner = _message(0, 1, None, b"a", timestamp=10, attributes=LOG_APPEND_TIME_BIT)
    inner += _message(1, 1, None, b"b", timestamp=30)
    messages = list(iter_inner_messages(_wrapper(inner, 1, timestamp=30)))
    assert [(m.timestamp, m.timestamp_type) for m in messages] == [(10, 0), (30, 0)]


def test_inner_compressed_message_is_corrupt() -> None:
    nested = _message(0, 1, None, gzip_stored(_inner_v1(0)), timestamp=1, attributes=GZIP)
    with pytest.raises(CorruptSegmentError, match="must not be compressed"):
        _offsets(_wrapper(_inner_v1(0) + nested, 1))


def test_empty_wrapper_is_corrupt() -> None:
    with pytest.raises(CorruptSegmentError, match="no messages"):
        _offsets(_wrapper(b"", 3))


def test_null_wrapper_value_is_corrupt() -> None:
    with pytest.raises(CorruptSegmentError, match="null value"):
        _offsets(_wrapper(b"", 3, null_value=True))


def test_zstd_in_a_legacy_wrapper_is_corrupt() -> None:
    message = decode_legacy_message(_message(0, 1, None, b"x", timestamp=1, attributes=4), 0)
    with pytest.raises(CorruptSegmentError, match="zstd"):
        _offsets(message)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_a_legacy_wrapper_is_unsupported(codec: int) -> None:
    message = decode_legacy_message(_message(0, 1, None, b"x", timestamp=1, attributes=codec), 0)
    with pytest.raises(UnsupportedFormatError, match=f"codec id {codec}"):
        _offsets(message)


def test_short_read_at_the_end_of_the_payload_ends_iteration() -> None:
    extra = _message(2, 1, None, b"cut", timestamp=3)
    for cut in (5, 12, 20, len(extra) - 1):
        assert _offsets(_wrapper(_inner_v1(0, 1) + extra[:cut], 9)) == [8, 9]


def test_inner_size_below_minimum_is_corrupt() -> None:
    bad = struct.pack(">qi", 2, 13) + b"\x00" * 13
    with pytest.raises(CorruptSegmentError, match="below 14"):
        _offsets(_wrapper(_inner_v1(0, 1) + bad, 2))


def test_inner_checksum_mismatch() -> None:
    inner = bytearray(_inner_v1(0, 1))
    inner[-1] ^= 0x01  # last byte of the second inner value
    wrapper = _wrapper(bytes(inner), 1)
    with pytest.raises(ChecksumError):
        _offsets(wrapper)
    values = [m.value for m in iter_inner_messages(wrapper, verify_checksum=False)]
    assert values == [b"v0", b"v" + bytes([ord("1") ^ 1])]


def test_wrapper_decompression_bound() -> None:
    wrapper = _wrapper(_inner_v1(*range(100)), 99)
    with pytest.raises(LimitExceededError):
        _offsets_limited(wrapper, 1024)


def _offsets_limited(wrapper: LegacyMessage, max_bytes: int) -> list[int]:
    return [m.offset for m in iter_inner_messages(wrapper, max_bytes=max_bytes)]


# --- single-message structure -------------------------------------------------------------------


def test_checksum_mismatch_names_position_and_offset() -> None:
    buf = bytearray(MAGIC1 + MAGIC0)
    buf[len(MAGIC1) + len(MAGIC0) - 1] ^= 0xFF  # last value byte of MAGIC0
    with pytest.raises(ChecksumError) as info:
        decode_legacy_message(bytes(buf), len(MAGIC1))
    assert (info.value.position, info.value.offset) == (len(MAGIC1), 5)
    message = decode_legacy_message(bytes(buf), len(MAGIC1), verify_checksum=False)
    assert message.value == b"valu" + bytes([ord("e") ^ 0xFF])


def test_empty_and_null_are_distinct() -> None:
    message = decode_legacy_message(_message(0, 0, b"", None), 0)
    assert (message.key, message.value) == (b"", None)
    message = decode_legacy_message(_message(0, 1, None, b"", timestamp=-1), 0)
    assert (message.key, message.value, message.timestamp) == (None, b"", -1)


def test_magic0_ignores_the_timestamp_type_bit() -> None:
    message = decode_legacy_message(_message(0, 0, None, b"v", attributes=LOG_APPEND_TIME_BIT), 0)
    assert (message.timestamp, message.timestamp_type) == (-1, -1)


def test_magic1_log_append_time_message() -> None:
    message = decode_legacy_message(
        _message(0, 1, None, b"v", timestamp=42, attributes=LOG_APPEND_TIME_BIT), 0
    )
    assert (message.timestamp, message.timestamp_type) == (42, 1)


@pytest.mark.parametrize(("magic", "size"), [(0, 13), (1, 21), (1, 14), (0, 0), (0, -5)])
def test_size_below_minimum_is_corrupt(magic: int, size: int) -> None:
    buf = struct.pack(">qiIbb", 9, size, 0, magic, 0) + b"\x00" * 40
    with pytest.raises(CorruptSegmentError, match="below the minimum") as info:
        decode_legacy_message(buf, 0)
    assert info.value.offset == 9


@pytest.mark.parametrize("magic", [2, 3, 0x80])
def test_other_magic_is_corrupt(magic: int) -> None:
    buf = bytearray(MAGIC0)
    buf[16] = magic
    with pytest.raises(CorruptSegmentError, match="expected magic 0 or 1"):
        decode_legacy_message(bytes(buf), 0)


def test_message_running_past_the_buffer_is_corrupt() -> None:
    with pytest.raises(CorruptSegmentError, match="runs past the end"):
        decode_legacy_message(MAGIC0[:-1], 0)
    with pytest.raises(CorruptSegmentError, match="past the end"):
        decode_legacy_message(MAGIC0[:15], 0)


def test_leftover_bytes_after_the_value_are_corrupt() -> None:
    entry = _entry(3, _message_body(0, 0, None, None, b"v") + b"\x00")  # CRC covers the extra
    with pytest.raises(CorruptSegmentError, match="left over"):
        decode_legacy_message(entry, 0)


@pytest.mark.parametrize("length", [-2, -(2**31), 100, 2**31 - 1])
def test_bad_key_length_is_corrupt(length: int) -> None:
    body = struct.pack(">bbi", 0, 0, length) + struct.pack(">i", -1) + b"\x00" * 4
    with pytest.raises(CorruptSegmentError):
        decode_legacy_message(_entry(3, body), 0)


def test_value_length_running_past_the_message_is_corrupt() -> None:
    body = struct.pack(">bbii", 0, 0, -1, 5) + b"abc"
    with pytest.raises(CorruptSegmentError, match="runs past the message"):
        decode_legacy_message(_entry(3, body), 0)
