"""Tests for kafka_segments_ds.records.legacy_kernels: both paths (compiled, pure Python) against
each other and against the reference decoder (records/legacy.py), on intact and damaged
messages."""

from __future__ import annotations

import ctypes
import struct
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records import legacy_kernels as LK
from kafka_segments_ds.records.builder import encode_legacy_message
from kafka_segments_ds.records.legacy import CODEC_MASK, LOG_OVERHEAD, decode_legacy_message

NAMES = ("read_messages", "walk_inner", "crc32_range", "crc32_ranges", "crc32_tables_range")
PATHS = {"active": tuple(getattr(LK, n) for n in NAMES)}
PATHS["pure"] = tuple(LK.PURE_PYTHON[n] for n in NAMES)

blobs = st.one_of(st.none(), st.binary(max_size=30))
messages = st.lists(
    st.tuples(
        st.sampled_from([0, 1]),  # magic
        st.sampled_from([0, 0, 0, 0x08, 0x01, 0x02, 0x04, 0x07]),  # attributes
        st.integers(-(2**62), 2**62),  # offset
        st.integers(-1, 2**45),  # timestamp
        blobs,
        blobs,
    ),
    min_size=1,
    max_size=12,
)
# past the kernels' block of 64 messages framed and checksummed ahead of their decoding
long_messages = st.lists(
    st.tuples(
        st.sampled_from([0, 1]),
        st.sampled_from([0, 0, 0, 0, 0, 0, 0x08, 0x01]),
        st.integers(0, 2**40),
        st.integers(-1, 2**45),
        st.one_of(st.none(), st.binary(max_size=4)),
        st.one_of(st.none(), st.binary(max_size=1100)),  # and past zlib's switch-over
    ),
    min_size=60,
    max_size=200,
)
# damage: (position as a fraction of the buffer, xor mask); a cut of the end
damages = st.lists(st.tuples(st.floats(0, 0.999), st.integers(1, 255)), max_size=3)


def _encode(msgs: list[tuple[int, int, int, int, bytes | None, bytes | None]]) -> bytes:
    return b"".join(
        encode_legacy_message(offset=o, magic=m, key=k, value=v, timestamp=t, attributes=a)
        for m, a, o, t, k, v in msgs
    )


def _damaged(data: bytes, damage: list[tuple[float, int]], cut: int) -> np.ndarray:
    out = bytearray(data)
    for where, mask in damage:
        out[int(where * len(out))] ^= mask
    return np.frombuffer(bytes(out[: max(0, len(out) - cut)]), np.uint8)


def _framed(buf: np.ndarray) -> list[int]:
    """Entry positions by their size fields (as the window's framing finds them)."""
    positions, pos = [], 0
    while len(buf) - pos >= LOG_OVERHEAD:
        positions.append(pos)
        size = struct.unpack_from(">i", buf, pos + 8)[0]
        if size < 14:
            break
        pos += LOG_OVERHEAD + size
    return positions


def _reference(buf: np.ndarray, pos: int, verify: bool) -> tuple[int, ...] | None:
    """The kernel's fields of the message at ``pos`` per the reference decoder, or None."""
    try:
        m = decode_legacy_message(buf.data, pos, verify_checksum=verify)
    except CorruptSegmentError:
        return None
    cursor = pos + (18 if m.magic == 0 else 26)
    kpos, klen = (0, -1) if m.key is None else (cursor + 4, len(m.key))
    cursor += 4 + max(klen, 0)
    vpos, vlen = (0, -1) if m.value is None else (cursor + 4, len(m.value))
    return (pos, m.offset, m.magic, m.attributes, m.timestamp, kpos, klen, vpos, vlen)


def test_the_compiled_kernels_checksum_with_zlib_where_it_is_found() -> None:
    """Where libz.so.1 loads (Linux), the compiled kernels take its crc32, checked."""
    if not LK.COMPILED:
        assert not LK.ZLIB_CRC32
        return
    try:
        ctypes.CDLL("libz.so.1")
    except OSError:
        pytest.skip("no libz.so.1 here: the kernels keep the table walk")
    assert LK.ZLIB_CRC32 is sys.platform.startswith("linux")


def test_a_crc32_that_disagrees_with_zlibs_is_not_used() -> None:
    class Liar:  # a "zlib" whose crc32 is off by one
        def __init__(self) -> None:
            self.address = 0

        def use_zlib_crc32(self, address: int) -> None:
            self.address = address

        def zlib_crc32_in_use(self) -> bool:
            return self.address != 0

        def crc32_range(self, buf: np.ndarray, start: int, end: int) -> int:
            return zlib.crc32(buf[start:end]) + 1

    liar = Liar()
    if LK._zlib_crc32_address() == 0:
        pytest.skip("no zlib library found")
    assert LK._use_zlib_crc32(liar) is False
    assert liar.address == 0


@pytest.mark.parametrize("path", sorted(PATHS))
def test_crc32_is_zlibs(path: str) -> None:
    crc32_range, tables = PATHS[path][2], PATHS[path][4]
    data = np.frombuffer(np.random.default_rng(3).bytes(10_000), np.uint8)
    for start in (0, 1, 7):
        # the compiled kernel hands zlib's crc32 the lengths from 1024 on
        for length in [*range(0, 40), 255, 1000, 1023, 1024, 1025, 9000]:
            expected = zlib.crc32(data[start : start + length].tobytes())
            assert int(crc32_range(data, start, start + length)) == expected, (start, length)
            assert int(tables(data, start, start + length)) == expected, (start, length)
    with pytest.raises(ValueError, match="outside a buffer of 10000 bytes"):
        crc32_range(data, 10, 10_001)
    crc32_ranges = PATHS[path][3]
    starts = np.array([0, 5, 100, 9999, 10_000], np.int64)
    ends = np.array([10_000, 5, 371, 10_000, 10_000], np.int64)
    expected = [zlib.crc32(data[a:b].tobytes()) for a, b in zip(starts, ends, strict=True)]
    assert crc32_ranges(data, starts, ends).tolist() == expected
    with pytest.raises(ValueError, match=r"range \[7, 6\) outside a buffer of 10000 bytes"):
        crc32_ranges(data, np.array([0, 7]), np.array([1, 6]))
    with pytest.raises(ValueError, match="differ in length"):
        crc32_ranges(data, np.array([0, 7]), np.array([1]))


@pytest.mark.parametrize("zlib_in_use", [True, False])
def test_crc32_ranges_of_many_lengths(zlib_in_use: bool) -> None:
    """Ranges checksummed four at a time (the table walk side by side, then each one's rest)
    and one by one (zlib's from 1 KiB, when in use), in every mix of lengths."""
    data = np.frombuffer(np.random.default_rng(5).bytes(300_000), np.uint8)
    rng = np.random.default_rng(6)
    lengths = np.concatenate(
        [
            np.arange(0, 40),
            rng.integers(0, 200, 400),
            rng.integers(1000, 1050, 40),
            rng.choice([0, 3, 8, 150, 1023, 1024, 5000], 200),
        ]
    )
    starts = rng.integers(0, data.shape[0] - 5000, lengths.shape[0]).astype(np.int64)
    ends = starts + lengths
    expected = [zlib.crc32(data[a:b].tobytes()) for a, b in zip(starts, ends, strict=True)]
    compiled = LK._compiled
    if not zlib_in_use and compiled is None:
        pytest.skip("without the compiled kernels zlib always checksums")
    if zlib_in_use and compiled is not None and not LK.ZLIB_CRC32:
        pytest.skip("no zlib library found for the compiled kernels")
    if compiled is not None and not zlib_in_use:
        compiled.use_zlib_crc32(0)
    try:
        for path in sorted(PATHS):
            crc32_ranges = PATHS[path][3]
            for lo in range(0, 8):  # every alignment of the groups of four
                got = crc32_ranges(data, starts[lo:], ends[lo:])
                assert got.dtype == np.int64
                assert got.tolist() == expected[lo:], (path, lo)
    finally:
        if compiled is not None and not zlib_in_use:
            assert LK._use_zlib_crc32(compiled) is LK.ZLIB_CRC32


@settings(max_examples=150)
@given(messages, damages, st.integers(0, 30), st.booleans())
def test_read_messages_stops_where_the_reference_decoder_fails(
    msgs: list, damage: list, cut: int, verify: bool
) -> None:  # type: ignore[type-arg]
    _check_read_messages(msgs, damage, cut, verify)


@settings(max_examples=60, deadline=None)
@given(long_messages, damages, st.integers(0, 30), st.booleans())
def test_read_messages_over_many_blocks(msgs: list, damage: list, cut: int, verify: bool) -> None:  # type: ignore[type-arg]
    _check_read_messages(msgs, damage, cut, verify)
    _check_walk_inner(msgs, damage, cut, verify)


@pytest.mark.parametrize("bad", [0, 1, 3, 4, 5, 62, 63, 64, 65, 127, 128, 129, 199])
@pytest.mark.parametrize("how", ["crc", "compressed", "two compressed", "size"])
def test_a_bad_message_at_each_place_of_a_block(bad: int, how: str) -> None:
    """200 messages with message ``bad`` damaged (or compressed, and with it every later one):
    both walks stop there (checksummed, framed and decoded a block of 64 at a time, four
    checksums side by side)."""
    msgs = [
        (
            1,
            0x01
            if "compressed" in how and (i == bad or (how == "two compressed" and i > bad))
            else 0,
            i,
            1000 + i,
            None,
            bytes([i]) * (i % 40),
        )
        for i in range(200)
    ]
    data = bytearray(_encode(msgs))
    at = _framed(np.frombuffer(bytes(data), np.uint8))[bad]
    if how == "crc":
        data[at + 12] ^= 0x40
    elif how == "size":
        data[at + 8 : at + 12] = struct.pack(">i", 13)
    buf = np.frombuffer(bytes(data), np.uint8)
    positions = np.array(_framed(buf), np.int64)
    if how == "size":  # the framing ends at it: hand the kernel the intact positions
        positions = np.array(_framed(np.frombuffer(_encode(msgs), np.uint8)), np.int64)
    for path, (read_messages, walk_inner, *_) in PATHS.items():
        fields, count = read_messages(buf, positions, True)
        expect_count = 200 if "compressed" in how else bad  # a codec is no fault of a message
        assert count == expect_count, path
        assert fields[LK.OFFSET, :count].tolist() == list(range(count))
        fields, flagged, stop = walk_inner(buf, True)
        assert (fields.shape[1], flagged, stop) == (bad, True, at), path
        assert fields[LK.OFFSET].tolist() == list(range(bad))


def _check_read_messages(msgs: list, damage: list, cut: int, verify: bool) -> None:  # type: ignore[type-arg]
    buf = _damaged(_encode(msgs), damage, cut)
    positions = np.array(_framed(buf), np.int64)
    expected = []
    for p in positions.tolist():
        fields = _reference(buf, p, verify)
        if fields is None:
            break
        expected.append(fields)
    for path, (read_messages, *_) in PATHS.items():
        fields, count = read_messages(buf, positions, verify)
        assert count == len(expected), path
        assert [tuple(c) for c in fields[:, :count].T.tolist()] == expected, path
    if not damage and not cut:  # intact: every message, its key and value at their positions
        assert count == len(msgs)
        for (_, _, _, _, key, value), column in zip(msgs, fields.T, strict=True):
            for blob, where, length in ((key, LK.KPOS, LK.KLEN), (value, LK.VPOS, LK.VLEN)):
                got = None if column[length] < 0 else buf[column[where] :][: column[length]]
                assert got is None if blob is None else bytes(got) == blob


def _reference_inner(payload: np.ndarray, verify: bool) -> tuple[list[tuple[int, ...]], bool]:
    """The walk of records.legacy.expand_wrapper over a payload: (fields, bad)."""
    out, pos = [], 0
    while len(payload) - pos >= LOG_OVERHEAD:
        size = struct.unpack_from(">i", payload, pos + 8)[0]
        if size < 14:
            return out, True
        if pos + LOG_OVERHEAD + size > len(payload):
            break
        fields = _reference(payload, pos, verify)
        if fields is None or fields[LK.ATTRIBUTES] & CODEC_MASK:
            return out, True
        out.append(fields)
        pos += LOG_OVERHEAD + size
    return out, False


@settings(max_examples=150)
@given(messages, damages, st.integers(0, 30), st.booleans())
def test_walk_inner_is_the_reference_walk(msgs: list, damage: list, cut: int, verify: bool) -> None:  # type: ignore[type-arg]
    _check_walk_inner(msgs, damage, cut, verify)


def _check_walk_inner(msgs: list, damage: list, cut: int, verify: bool) -> None:  # type: ignore[type-arg]
    payload = _damaged(_encode(msgs), damage, cut)
    expected, expected_bad = _reference_inner(payload, verify)
    for path, (_, walk_inner, *_) in PATHS.items():
        fields, bad, stop = walk_inner(payload, verify)
        assert (bad, [tuple(c) for c in fields.T.tolist()]) == (expected_bad, expected), path
        assert fields.shape == (LK.N_FIELDS, len(expected))
        after = 0  # where the walk stopped: after the last message it took
        if expected:
            after = expected[-1][0] + LOG_OVERHEAD
            after += struct.unpack_from(">i", payload, expected[-1][0] + 8)[0]
        assert stop == after, path


@pytest.mark.parametrize("path", sorted(PATHS))
def test_read_messages_refuses_positions_outside_the_buffer(path: str) -> None:
    read_messages = PATHS[path][0]
    buf = np.frombuffer(encode_legacy_message(offset=3, magic=1, key=b"k", value=b"v"), np.uint8)
    fields, count = read_messages(buf, np.array([], np.int64), True)
    assert (fields.shape, count) == ((LK.N_FIELDS, 0), 0)
    fields, count = read_messages(buf, np.array([0], np.int64), True)
    assert count == 1 and fields[:, 0].tolist() == [0, 3, 1, 0, -1, 30, 1, 35, 1]
    with pytest.raises(ValueError, match=f"position {len(buf) + 1} outside a buffer"):
        read_messages(buf, np.array([0, len(buf) + 1], np.int64), True)
    with pytest.raises(ValueError, match="position -1 outside a buffer"):
        read_messages(buf, np.array([-1], np.int64), True)
    # a position at the very end, or short of a header: malformed, not an error of the call
    assert read_messages(buf, np.array([len(buf)], np.int64), True)[1] == 0


@pytest.mark.parametrize("path", sorted(PATHS))
def test_an_inner_size_field_cannot_outgrow_the_payload(path: str) -> None:
    walk_inner = PATHS[path][1]
    one = encode_legacy_message(offset=0, magic=0, key=None, value=b"x")
    huge = bytearray(one)
    huge[8:12] = struct.pack(">i", 2**31 - 1)  # a size past the payload: the walk ends there
    fields, bad, stop = walk_inner(np.frombuffer(one + bytes(huge), np.uint8), True)
    assert (fields.shape[1], bad, stop) == (1, False, len(one))
    small = bytearray(one)
    small[8:12] = struct.pack(">i", 13)  # below any message: malformed
    fields, bad, stop = walk_inner(np.frombuffer(one + bytes(small), np.uint8), True)
    assert (fields.shape[1], bad, stop) == (1, True, len(one))
    compressed = encode_legacy_message(offset=1, magic=0, key=None, value=b"x", attributes=1)
    fields, bad, stop = walk_inner(np.frombuffer(one + compressed, np.uint8), True)
    assert (fields.shape[1], bad, stop) == (1, True, len(one))
