"""Tests for kafka_segments_ds.records.varint (reference codec) and the kernel varint readers in
kafka_segments_ds.records.kernels: the same ``(bytes, value)`` tables run over both.

The encodings below were worked out by hand from FORMAT.md §4.4 (zig-zag, then unsigned LEB128,
least significant group first); none is copied from another project's tests.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.varint import (
    MAX_VARINT_BYTES,
    MAX_VARLONG_BYTES,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# (encoded bytes, int32 value): zig-zag maps 0,-1,1,-2,... to 0,1,2,3,...
VARINT_CASES = [
    (bytes.fromhex("00"), 0),
    (bytes.fromhex("01"), -1),
    (bytes.fromhex("02"), 1),
    (bytes.fromhex("03"), -2),
    (bytes.fromhex("7e"), 63),  # zig-zag 126: the largest one-byte positive value
    (bytes.fromhex("7f"), -64),  # zig-zag 127: the smallest one-byte negative value
    (bytes.fromhex("8001"), 64),  # zig-zag 128 = 0b1_0000000: first two-byte value
    (bytes.fromhex("8101"), -65),  # zig-zag 129
    (bytes.fromhex("ac02"), 150),  # zig-zag 300 = 0b10_0101100
    (bytes.fromhex("feffffff0f"), INT32_MAX),  # zig-zag 0xFFFFFFFE, five bytes
    (bytes.fromhex("ffffffff0f"), INT32_MIN),  # zig-zag 0xFFFFFFFF, five bytes
]

# (encoded bytes, int64 value)
VARLONG_CASES = [
    (bytes.fromhex("00"), 0),
    (bytes.fromhex("01"), -1),
    (bytes.fromhex("02"), 1),
    (bytes.fromhex("7e"), 63),
    (bytes.fromhex("7f"), -64),
    (bytes.fromhex("8001"), 64),
    (bytes.fromhex("8101"), -65),
    (bytes.fromhex("feffffff0f"), INT32_MAX),
    (bytes.fromhex("ffffffff0f"), INT32_MIN),
    (bytes.fromhex("8080808010"), 2**31),  # zig-zag 2**32: the first value past int32
    (bytes.fromhex("80a0abfef962"), 1_700_000_000_000),  # a Kafka timestamp in ms (zig-zag)
    (bytes.fromhex("feffffffffffffffff01"), INT64_MAX),  # zig-zag 2**64 - 2, ten bytes
    (bytes.fromhex("ffffffffffffffffff01"), INT64_MIN),  # zig-zag 2**64 - 1, ten bytes
]

OVERLONG_VARINTS = [
    bytes.fromhex("808080808000"),  # six bytes, value 0 padded with continuation bytes
    bytes.fromhex("ffffffffff01"),  # six bytes
    bytes.fromhex("ffffffffffffffffff"),  # never ends within five bytes
]
OVERLONG_VARLONGS = [
    bytes.fromhex("8080808080808080808000"),  # eleven bytes
    bytes.fromhex("ffffffffffffffffffff01"),  # eleven bytes
]
TRUNCATED = [
    b"",
    bytes.fromhex("80"),
    bytes.fromhex("ff"),
    bytes.fromhex("8080"),
    bytes.fromhex("ffffffff"),  # four continuation bytes, the fifth is missing
]


def _ids(case: tuple[bytes, int]) -> str:
    return f"{case[1]}"


# --- reference codec ----------------------------------------------------------------------------


@pytest.mark.parametrize(("encoded", "value"), VARINT_CASES, ids=[_ids(c) for c in VARINT_CASES])
def test_varint_table(encoded: bytes, value: int) -> None:
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)


@pytest.mark.parametrize(("encoded", "value"), VARLONG_CASES, ids=[_ids(c) for c in VARLONG_CASES])
def test_varlong_table(encoded: bytes, value: int) -> None:
    assert encode_varlong(value) == encoded
    assert decode_varlong(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(("encoded", "value"), VARINT_CASES, ids=[_ids(c) for c in VARINT_CASES])
def test_varint_decodes_at_a_position_and_ignores_what_follows(encoded: bytes, value: int) -> None:
    buf = b"\xaa\xbb" + encoded + b"\xff\xff\xff"
    assert decode_varint(buf, 2) == (value, 2 + len(encoded))
    assert decode_varint(memoryview(buf), 2) == (value, 2 + len(encoded))


def test_consecutive_varints() -> None:
    buf = bytes.fromhex("00 01 02 8001 feffffff0f 7f".replace(" ", ""))
    pos = 0
    values = []
    while pos < len(buf):
        value, pos = decode_varint(buf, pos)
        values.append(value)
    assert values == [0, -1, 1, 64, INT32_MAX, -64]
    assert pos == len(buf)


def test_limits() -> None:
    assert MAX_VARINT_BYTES == 5
    assert MAX_VARLONG_BYTES == 10


def test_fifth_varint_byte_extra_bits_are_dropped_like_kafka() -> None:
    # 0x7f in the fifth byte carries bits 28..34; Kafka keeps only bits 28..31.
    assert decode_varint(bytes.fromhex("ffffffff7f"), 0) == (INT32_MIN, 5)
    assert decode_varint(bytes.fromhex("feffffff7f"), 0) == (INT32_MAX, 5)


def test_tenth_varlong_byte_extra_bits_are_dropped_like_kafka() -> None:
    # Java's ``b << 63`` keeps only the low bit of the tenth byte.
    assert decode_varlong(bytes.fromhex("ffffffffffffffffff7f"), 0) == (INT64_MIN, 10)


@pytest.mark.parametrize("encoded", OVERLONG_VARINTS, ids=lambda b: b.hex())
def test_overlong_varint_is_corrupt(encoded: bytes) -> None:
    with pytest.raises(CorruptSegmentError, match="longer than 5 bytes"):
        decode_varint(encoded, 0)


@pytest.mark.parametrize("encoded", OVERLONG_VARLONGS, ids=lambda b: b.hex())
def test_overlong_varlong_is_corrupt(encoded: bytes) -> None:
    with pytest.raises(CorruptSegmentError, match="longer than 10 bytes"):
        decode_varlong(encoded, 0)


def test_six_byte_varint_is_a_valid_varlong() -> None:
    assert decode_varlong(bytes.fromhex("808080808000"), 0) == (0, 6)


@pytest.mark.parametrize("encoded", TRUNCATED, ids=lambda b: b.hex() or "empty")
def test_truncated_varint_is_corrupt(encoded: bytes) -> None:
    with pytest.raises(CorruptSegmentError, match="past the end"):
        decode_varint(encoded, 0)
    with pytest.raises(CorruptSegmentError, match="past the end"):
        decode_varlong(encoded, 0)


def test_truncated_error_names_the_start_position() -> None:
    with pytest.raises(CorruptSegmentError) as info:
        decode_varint(b"\x00\x00\x00\x80\x80", 3)
    assert info.value.position == 3


@pytest.mark.parametrize("value", [INT32_MIN - 1, INT32_MAX + 1, 2**40])
def test_encode_varint_rejects_values_outside_int32(value: int) -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_varint(value)


@pytest.mark.parametrize("value", [INT64_MIN - 1, INT64_MAX + 1])
def test_encode_varlong_rejects_values_outside_int64(value: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        encode_varlong(value)


@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert 1 <= len(encoded) <= 5
    assert all(b & 0x80 for b in encoded[:-1]) and not encoded[-1] & 0x80
    assert decode_varint(encoded, 0) == (value, len(encoded))
    assert decode_varlong(encoded, 0) == (value, len(encoded))  # same zig-zag for int32 range


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trip(value: int) -> None:
    encoded = encode_varlong(value)
    assert 1 <= len(encoded) <= 10
    assert decode_varlong(encoded, 0) == (value, len(encoded))


# --- kernels (compiled or pure Python, same tables) -------------------------------------------


def _arr(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)


@pytest.mark.parametrize(("encoded", "value"), VARINT_CASES, ids=[_ids(c) for c in VARINT_CASES])
def test_kernel_varint_table(encoded: bytes, value: int) -> None:
    buf = _arr(b"\x00" + encoded + b"\xff")
    assert K._varint(buf, 1, len(encoded) + 1) == (value, len(encoded) + 1)


@pytest.mark.parametrize(("encoded", "value"), VARLONG_CASES, ids=[_ids(c) for c in VARLONG_CASES])
def test_kernel_varlong_table(encoded: bytes, value: int) -> None:
    buf = _arr(encoded)
    assert K._varlong(buf, 0, len(encoded)) == (value, len(encoded))


def test_kernel_fifth_byte_bits_dropped() -> None:
    assert K._varint(_arr(bytes.fromhex("ffffffff7f")), 0, 5) == (INT32_MIN, 5)


@pytest.mark.parametrize("encoded", OVERLONG_VARINTS, ids=lambda b: b.hex())
def test_kernel_overlong_varint_fails(encoded: bytes) -> None:
    assert K._varint(_arr(encoded), 0, len(encoded))[1] == -1


@pytest.mark.parametrize("encoded", OVERLONG_VARLONGS, ids=lambda b: b.hex())
def test_kernel_overlong_varlong_fails(encoded: bytes) -> None:
    assert K._varlong(_arr(encoded), 0, len(encoded))[1] == -1


@pytest.mark.parametrize("encoded", TRUNCATED[1:], ids=lambda b: b.hex())
def test_kernel_truncated_fails(encoded: bytes) -> None:
    # The end bound, not the array size, limits the read.
    buf = _arr(encoded + b"\x00\x00\x00\x00\x00\x00")
    assert K._varint(buf, 0, len(encoded))[1] == -1
    assert K._varlong(buf, 0, len(encoded))[1] == -1


@given(st.integers(INT64_MIN, INT64_MAX))
def test_kernel_varlong_agrees_with_reference(value: int) -> None:
    encoded = encode_varlong(value)
    assert K._varlong(_arr(encoded), 0, len(encoded)) == (value, len(encoded))


@given(st.integers(INT32_MIN, INT32_MAX))
def test_kernel_varint_agrees_with_reference(value: int) -> None:
    encoded = encode_varint(value)
    buf = _arr(encoded + b"\x01")  # a byte that would end the varint, past the end bound
    assert K._varint(buf, 0, len(encoded)) == (value, len(encoded))
    assert K._varint(buf, 0, len(encoded) - 1)[1] == -1
    assert K._varlong(buf, 0, len(encoded) - 1)[1] == -1
