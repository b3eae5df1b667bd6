"""Damaged ``.log`` input, per ``mode`` (FAILFAST / DROPMALFORMED), through ``read_table``.

Rules under test (FORMAT.md §2 and §8; the damage policy lives in reader.py):

* a truncated last entry or a zero-filled (preallocated) tail is the end of the data, no error;
* FAILFAST raises a ``CorruptSegmentError`` subclass naming the file, the exact byte position of
  the damaged entry and its offset (``ChecksumError`` for CRC mismatches);
* DROPMALFORMED drops the damaged entry and returns every other record, resynchronising after
  size lies and garbage;
* unknown codecs / magic bytes, decompression bombs and record-count lies fail cleanly and fast;
* no damage ever leaks a bare IndexError / struct.error / ValueError / zlib.error.

Logs are built with the library's builder; every test knows the exact offsets it expects.
"""

from __future__ import annotations

import collections
import itertools
import logging
import random
import struct
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import crc32c
import pytest
import zstandard

import kafka_segments_ds
from kafka_segments_ds.errors import (
    ChecksumError,
    CorruptSegmentError,
    KafkaSegmentsError,
    LimitExceededError,
    UnsupportedFormatError,
)
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_control_batch,
    encode_legacy_message,
    encode_legacy_wrapper,
)

TS = 1_700_000_000_000
SEGMENT = "00000000000000000000.log"
GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODECS = {"gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}


@pytest.fixture(autouse=True)
def _quiet_reader_warnings(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    # DROPMALFORMED logs every dropped entry; keep the output readable.
    caplog.set_level(logging.ERROR, logger="kafka_segments_ds")
    yield


# --- building logs ------------------------------------------------------------------------------


@dataclass
class Entry:
    data: bytes
    offsets: list[int]  # the offsets of the records a consumer sees from this entry


@dataclass
class Log:
    entries: list[Entry]

    @property
    def data(self) -> bytes:
        return b"".join(e.data for e in self.entries)

    def position(self, i: int) -> int:
        return sum(len(e.data) for e in self.entries[:i])

    def offsets(self, *, without: tuple[int, ...] = ()) -> list[int]:
        return [o for i, e in enumerate(self.entries) if i not in without for o in e.offsets]


def v2_batch(base: int, n: int = 3, codec: int = 0, value_size: int = 12) -> Entry:
    specs = [
        RecordSpec(
            value=(b"%d:" % (base + j)).ljust(value_size, b"."),
            key=b"k%d" % j,
            timestamp=TS + base + j,
            headers=(("h", b"%d" % j),),
        )
        for j in range(n)
    ]
    return Entry(
        encode_batch(specs, base_offset=base, compression=codec), list(range(base, base + n))
    )


def v2_log(count: int = 5, n: int = 3, codec: int | None = None) -> Log:
    """``count`` batches of ``n`` records, codecs cycling through none..zstd unless given."""
    return Log([v2_batch(i * n, n, i % 5 if codec is None else codec) for i in range(count)])


def legacy_log() -> Log:
    """Messages and wrappers of magic 0 and 1, then a magic-2 batch."""
    values = [b"a-value-long-enough-%d" % i for i in range(3)]
    return Log(
        [
            Entry(encode_legacy_message(offset=0, magic=0, key=b"k", value=b"m0"), [0]),
            Entry(
                encode_legacy_message(offset=1, magic=1, key=None, value=b"m1", timestamp=TS), [1]
            ),
            Entry(
                encode_legacy_wrapper(
                    [RecordSpec(v, timestamp=TS) for v in values],
                    last_offset=4,
                    magic=1,
                    compression=GZIP,
                ),
                [2, 3, 4],
            ),
            Entry(
                encode_legacy_wrapper(
                    [RecordSpec(v) for v in values], last_offset=7, magic=0, compression=SNAPPY
                ),
                [5, 6, 7],
            ),
            Entry(
                encode_legacy_wrapper(
                    [RecordSpec(v, timestamp=TS) for v in values],
                    last_offset=10,
                    magic=1,
                    compression=LZ4,
                ),
                [8, 9, 10],
            ),
            Entry(
                encode_legacy_wrapper(
                    [RecordSpec(v) for v in values], last_offset=13, magic=0, compression=LZ4
                ),
                [11, 12, 13],
            ),
            v2_batch(14),
        ]
    )


def write(tmp_path: Path, data: bytes) -> str:
    part = tmp_path / "t-0"
    part.mkdir(exist_ok=True)
    path = part / SEGMENT
    path.write_bytes(data)
    return str(path)


def offsets(path: str, **options: Any) -> list[int]:
    return kafka_segments_ds.read_table(path, **options).column("offset").to_pylist()


def recompute_v2_crc(data: bytearray, position: int) -> None:
    (length,) = struct.unpack_from(">i", data, position + 8)
    crc = crc32c.crc32c(bytes(data[position + 21 : position + 12 + length]))
    struct.pack_into(">I", data, position + 17, crc)


def recompute_legacy_crc(data: bytearray, position: int) -> None:
    (size,) = struct.unpack_from(">i", data, position + 8)
    struct.pack_into(
        ">I", data, position + 12, zlib.crc32(bytes(data[position + 16 : position + 12 + size]))
    )


def flip(data: bytes, index: int, mask: int = 0x01) -> bytes:
    out = bytearray(data)
    out[index] ^= mask
    return bytes(out)


def assert_located(err: CorruptSegmentError, path: str, position: int, offset: int) -> None:
    assert (err.path, err.position, err.offset) == (path, position, offset)
    text = str(err)
    assert path in text
    assert f"byte position {position}" in text
    assert f"offset {offset}" in text


BOTH_MODES = pytest.mark.parametrize("mode", ["FAILFAST", "DROPMALFORMED"])
CHUNKS = pytest.mark.parametrize("chunk", [4096, 4 * 1024 * 1024], ids=["4KiB", "4MiB"])


# --- end of data: truncated last entry, zero tail -----------------------------------------------


@BOTH_MODES
@CHUNKS
@pytest.mark.parametrize("cut", [1, 5, 20, 44, 60, "all-but-16", "all-but-1"])
def test_truncated_last_entry_is_end_of_data(
    tmp_path: Path, mode: str, chunk: int, cut: int | str
) -> None:
    log = v2_log(count=40)
    last = len(log.entries[-1].data)
    n = cut if isinstance(cut, int) else {"all-but-16": last - 16, "all-but-1": last - 1}[cut]
    path = write(tmp_path, log.data[:-n])
    assert offsets(path, mode=mode, readChunkBytes=chunk) == log.offsets(without=(39,))


@BOTH_MODES
@pytest.mark.parametrize("cut", [1, 10, 30])
def test_truncated_last_legacy_entry_is_end_of_data(tmp_path: Path, mode: str, cut: int) -> None:
    log = legacy_log()
    log.entries.pop()  # end with the magic-0 lz4 wrapper
    path = write(tmp_path, log.data[:-cut])
    assert offsets(path, mode=mode) == log.offsets(without=(len(log.entries) - 1,))


@BOTH_MODES
@CHUNKS
@pytest.mark.parametrize("zeros", [10_000, 5, 16, 17, 61, 3 * 4096])
def test_zero_tail_is_end_of_data(tmp_path: Path, mode: str, chunk: int, zeros: int) -> None:
    log = v2_log(count=40)
    path = write(tmp_path, log.data + bytes(zeros))
    assert offsets(path, mode=mode, readChunkBytes=chunk) == log.offsets()


@BOTH_MODES
def test_zero_tail_after_legacy_entries(tmp_path: Path, mode: str) -> None:
    log = legacy_log()
    path = write(tmp_path, log.data + bytes(10_000))
    assert offsets(path, mode=mode) == log.offsets()


def test_zero_file_is_empty(tmp_path: Path) -> None:
    path = write(tmp_path, bytes(10_000))
    assert offsets(path) == []


# --- FAILFAST: checksum mismatches name file, position, offset ----------------------------------


@CHUNKS
@pytest.mark.parametrize("victim", [0, 1, 17, 39])
def test_failfast_v2_checksum_error_is_located(tmp_path: Path, chunk: int, victim: int) -> None:
    log = v2_log(count=40)
    position = log.position(victim)
    # a byte of the first record's value, inside the (possibly compressed) records
    path = write(tmp_path, flip(log.data, position + len(log.entries[victim].data) - 5))
    with pytest.raises(ChecksumError) as info:
        offsets(path, readChunkBytes=chunk)
    assert_located(info.value, path, position, log.entries[victim].offsets[0])


@pytest.mark.parametrize(
    ("field_at", "error"),
    [
        (21, ChecksumError),
        (22, ChecksumError),
        (27, ChecksumError),
        (43, ChecksumError),
        # a record count that cannot fit may be reported before the checksum is looked at
        (57, CorruptSegmentError),
    ],
    ids=["attributes-high", "attributes", "baseTimestamp", "producerId", "recordCount"],
)
def test_failfast_v2_header_field_covered_by_crc(
    tmp_path: Path, field_at: int, error: type[CorruptSegmentError]
) -> None:
    log = v2_log(count=3, codec=0)
    position = log.position(1)
    path = write(tmp_path, flip(log.data, position + field_at))
    with pytest.raises(error) as info:
        offsets(path)
    assert_located(info.value, path, position, 3)


@pytest.mark.parametrize("victim", [0, 1, 2, 3, 4, 5])
def test_failfast_legacy_checksum_error_is_located(tmp_path: Path, victim: int) -> None:
    log = legacy_log()
    position = log.position(victim)
    path = write(tmp_path, flip(log.data, position + len(log.entries[victim].data) - 3, 0x10))
    with pytest.raises(ChecksumError) as info:
        offsets(path)
    # a legacy entry's offset field is its last offset (the wrapper offset for a wrapper)
    assert_located(info.value, path, position, log.entries[victim].offsets[-1])


def test_failfast_legacy_error_does_not_misplace_the_fault_inside_the_entry(
    tmp_path: Path,
) -> None:
    log = legacy_log()
    position = log.position(2)
    path = write(tmp_path, flip(log.data, position + len(log.entries[2].data) - 3, 0x10))
    with pytest.raises(ChecksumError) as info:
        offsets(path)
    # The entry starts at `position`; a note like "at byte <position> inside the entry" would
    # point past the entry's own bytes.
    assert f"at byte {position} inside the entry" not in str(info.value)


def test_failfast_inner_checksum_of_a_wrapper(tmp_path: Path) -> None:
    inner = bytearray(
        encode_legacy_message(offset=0, magic=1, key=None, value=b"one", timestamp=TS)
        + encode_legacy_message(offset=1, magic=1, key=None, value=b"two", timestamp=TS)
    )
    inner[-1] ^= 0x01  # the second inner message fails its own CRC-32
    payload = zlib.compress(bytes(inner), wbits=31)
    wrapper = encode_legacy_message(
        offset=6, magic=1, key=None, value=payload, timestamp=TS, attributes=GZIP
    )
    before = v2_batch(0, n=5)
    after = v2_batch(7)
    path = write(tmp_path, before.data + wrapper + after.data)
    with pytest.raises(ChecksumError) as info:
        offsets(path)
    assert_located(info.value, path, len(before.data), 6)
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 2, 3, 4, 7, 8, 9]


def _record_length_lie(log: Log, victim: int) -> bytes:
    """Make the first record's length varint claim one byte more; keep the CRC consistent."""
    data = bytearray(log.data)
    position = log.position(victim)
    first_record = position + 61
    assert data[first_record] < 0x7E  # a one-byte varint holding an even (zig-zag) length
    data[first_record] += 2  # zig-zag: +1 byte
    recompute_v2_crc(data, position)
    return bytes(data)


@pytest.mark.parametrize("verify", [False, True])
def test_failfast_structure_error_is_located(tmp_path: Path, verify: bool) -> None:
    log = v2_log(count=4, codec=0)
    path = write(tmp_path, _record_length_lie(log, 2))
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path, verifyChecksums=verify)
    assert not isinstance(info.value, ChecksumError)
    assert_located(info.value, path, log.position(2), 6)


def test_failfast_legacy_structure_error_is_located(tmp_path: Path) -> None:
    log = legacy_log()
    data = bytearray(log.data)
    position = log.position(1)  # magic 1: key length at entry byte 26
    struct.pack_into(">i", data, position + 26, 1000)
    recompute_legacy_crc(data, position)
    path = write(tmp_path, bytes(data))
    for verify in (False, True):
        with pytest.raises(CorruptSegmentError) as info:
            offsets(path, verifyChecksums=verify)
        assert not isinstance(info.value, ChecksumError)
        assert_located(info.value, path, position, 1)
    assert offsets(path, mode="DROPMALFORMED") == log.offsets(without=(1,))


def test_verify_checksums_false_reads_a_flipped_value(tmp_path: Path) -> None:
    log = v2_log(count=2, codec=0)
    # the last value byte: the last record ends with 5 header bytes (count, "h", "2")
    path = write(tmp_path, flip(log.data, len(log.data) - 6))
    with pytest.raises(ChecksumError):
        offsets(path)
    table = kafka_segments_ds.read_table(path, verifyChecksums=False)
    assert table.column("offset").to_pylist() == log.offsets()
    assert table.column("value").to_pylist()[-1] == b"5:........./"


# --- DROPMALFORMED: exactly the other records ---------------------------------------------------


@CHUNKS
@pytest.mark.parametrize(
    "victims", [(0,), (1,), (20,), (39,), (1, 2), (0, 1), (38, 39), (3, 10, 11, 30)]
)
def test_dropmalformed_drops_only_the_damaged_batches(
    tmp_path: Path, chunk: int, victims: tuple[int, ...]
) -> None:
    log = v2_log(count=40)
    data = log.data
    for v in victims:
        data = flip(data, log.position(v) + len(log.entries[v].data) - 5)
    path = write(tmp_path, data)
    assert offsets(path, mode="DROPMALFORMED", readChunkBytes=chunk) == log.offsets(without=victims)


def _big_log() -> Log:
    """Every third batch (7 KiB values) is larger than the smallest read window."""
    return Log(
        [
            v2_batch(i * 2, n=2, codec=i % 5, value_size=7000 if i % 3 == 0 else 20)
            for i in range(12)
        ]
    )


@pytest.mark.parametrize("victims", [(0,), (3,), (4,), (6, 7), (11,)])
def test_damage_in_batches_larger_than_the_window(tmp_path: Path, victims: tuple[int, ...]) -> None:
    log = _big_log()
    data = log.data
    for v in victims:
        data = flip(data, log.position(v) + len(log.entries[v].data) - 5)
    path = write(tmp_path, data)
    with pytest.raises(ChecksumError) as info:
        offsets(path, readChunkBytes=4096)
    assert_located(info.value, path, log.position(victims[0]), log.entries[victims[0]].offsets[0])
    assert offsets(path, mode="DROPMALFORMED", readChunkBytes=4096) == log.offsets(without=victims)


@pytest.mark.parametrize("victim", [3, 6])
@pytest.mark.parametrize("new_length", ["+1", "-1", "+100000", 13])
def test_size_lie_on_a_batch_larger_than_the_window(
    tmp_path: Path, victim: int, new_length: int | str
) -> None:
    log = _big_log()
    data = bytearray(log.data)
    position = log.position(victim)
    (old,) = struct.unpack_from(">i", data, position + 8)
    length = old + int(new_length) if isinstance(new_length, str) else new_length
    struct.pack_into(">i", data, position + 8, length)
    path = write(tmp_path, bytes(data))
    assert offsets(path, mode="DROPMALFORMED", readChunkBytes=4096) == log.offsets(
        without=(victim,)
    )


@pytest.mark.parametrize("victims", [(0,), (2,), (4,), (1, 2)])
def test_shallow_iteration_checks_and_drops_too(tmp_path: Path, victims: tuple[int, ...]) -> None:
    log = v2_log(count=5)
    data = log.data
    for v in victims:
        data = flip(data, log.position(v) + len(log.entries[v].data) - 5)
    path = write(tmp_path, data)
    with pytest.raises(ChecksumError) as info:
        offsets(path, iteration="shallow")
    assert_located(info.value, path, log.position(victims[0]), log.entries[victims[0]].offsets[0])
    # shallow: one row per batch, at the batch's last offset
    assert offsets(path, iteration="shallow", mode="DROPMALFORMED") == [
        e.offsets[-1] for i, e in enumerate(log.entries) if i not in victims
    ]


@CHUNKS
@pytest.mark.parametrize(
    "new_length",
    [
        "+1",
        "+100",
        "-1",
        "-30",
        "+1000000",
        2**31 - 1,
        49,
        48,
        13,
        0,
        -1,
        -(2**31),
    ],
)
def test_dropmalformed_resynchronises_after_a_batch_length_lie(
    tmp_path: Path, chunk: int, new_length: int | str
) -> None:
    log = v2_log(count=40)
    victim = 17
    data = bytearray(log.data)
    position = log.position(victim)
    (old,) = struct.unpack_from(">i", data, position + 8)
    length = old + int(new_length) if isinstance(new_length, str) else new_length
    struct.pack_into(">i", data, position + 8, length)
    path = write(tmp_path, bytes(data))
    assert offsets(path, mode="DROPMALFORMED", readChunkBytes=chunk) == log.offsets(
        without=(victim,)
    )
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path, readChunkBytes=chunk)
    assert_located(info.value, path, position, log.entries[victim].offsets[0])


@pytest.mark.parametrize("victim", [1, 2, 3, 4, 5])
def test_dropmalformed_resynchronises_after_a_legacy_size_lie(tmp_path: Path, victim: int) -> None:
    log = legacy_log()
    data = bytearray(log.data)
    position = log.position(victim)
    (old,) = struct.unpack_from(">i", data, position + 8)
    struct.pack_into(">i", data, position + 8, old + 7)
    path = write(tmp_path, bytes(data))
    assert offsets(path, mode="DROPMALFORMED") == log.offsets(without=(victim,))


GARBAGE = {
    "ones": b"\x01" * 7,
    "text": b"garbage between two batches",
    "zeros": bytes(30),
    "ff": b"\xff" * 100,
    # looks like a batch header (magic 2, plausible size) but its CRC is wrong
    "fake-header": struct.pack(">qiibI", 99, 60, -1, 2, 0) + bytes(60),
    # looks like a legacy message whose size runs far past the end of the file
    "fake-huge": struct.pack(">qiIbb", 5, 10**9, 0, 1, 0) + b"zz",
    "one-byte": b"\x02",
}


@CHUNKS
@pytest.mark.parametrize("garbage", list(GARBAGE), ids=list(GARBAGE))
def test_dropmalformed_skips_garbage_between_batches(
    tmp_path: Path, chunk: int, garbage: str
) -> None:
    log = v2_log(count=40)
    cut = log.position(23)
    data = log.data[:cut] + GARBAGE[garbage] + log.data[cut:]
    path = write(tmp_path, data)
    assert offsets(path, mode="DROPMALFORMED", readChunkBytes=chunk) == log.offsets()
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path, readChunkBytes=chunk)
    assert (info.value.path, info.value.position) == (path, cut)


@pytest.mark.parametrize(
    "victim", [2, 3, 4, 5], ids=["magic1-gzip", "magic0-snappy", "magic1-lz4", "magic0-lz4"]
)
@pytest.mark.parametrize("where", ["value", "crc"])
def test_dropmalformed_drops_a_damaged_legacy_wrapper(
    tmp_path: Path, victim: int, where: str
) -> None:
    log = legacy_log()
    position = log.position(victim)
    index = position + (len(log.entries[victim].data) - 3 if where == "value" else 13)
    path = write(tmp_path, flip(log.data, index, 0x40))
    assert offsets(path, mode="DROPMALFORMED") == log.offsets(without=(victim,))


@pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))
@pytest.mark.parametrize("damage", ["first-byte", "truncated"])
def test_damaged_compressed_payload(tmp_path: Path, codec: int, damage: str) -> None:
    log = v2_log(count=5, n=20, codec=codec)
    victim = 2
    position = log.position(victim)
    data = bytearray(log.data)
    if damage == "first-byte":
        data[position + 61] ^= 0xFF  # codec magic / header
    else:  # drop the last 4 payload bytes and fix batchLength, so only the stream is short
        end = position + len(log.entries[victim].data)
        del data[end - 4 : end]
        (length,) = struct.unpack_from(">i", data, position + 8)
        struct.pack_into(">i", data, position + 8, length - 4)
    recompute_v2_crc(data, position)
    path = write(tmp_path, bytes(data))
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path)
    assert not isinstance(info.value, ChecksumError | LimitExceededError)
    assert_located(info.value, path, position, 40)
    assert offsets(path, mode="DROPMALFORMED") == log.offsets(without=(victim,))


# --- unsupported formats ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [5, 6, 7])
@pytest.mark.parametrize("victim", [0, 2, 4])
def test_unknown_codec_id(tmp_path: Path, codec: int, victim: int) -> None:
    log = v2_log(count=5, codec=0)
    data = bytearray(log.data)
    position = log.position(victim)
    data[position + 22] = (data[position + 22] & ~0x07) | codec
    recompute_v2_crc(data, position)
    path = write(tmp_path, bytes(data))
    with pytest.raises(UnsupportedFormatError) as info:
        offsets(path)
    assert_located(info.value, path, position, 3 * victim)
    assert offsets(path, mode="DROPMALFORMED") == log.offsets(without=(victim,))


@pytest.mark.parametrize("magic", [3, 4, 0x7F, 0x80, 0xFF])
@pytest.mark.parametrize("victim", [0, 2, 4])
def test_unknown_magic_byte(tmp_path: Path, magic: int, victim: int) -> None:
    log = v2_log(count=5)
    data = bytearray(log.data)
    position = log.position(victim)
    data[position + 16] = magic
    path = write(tmp_path, bytes(data))
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path)
    assert_located(info.value, path, position, 3 * victim)
    assert offsets(path, mode="DROPMALFORMED") == log.offsets(without=(victim,))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_id_in_a_legacy_message(tmp_path: Path, codec: int) -> None:
    odd = encode_legacy_message(
        offset=3, magic=1, key=None, value=b"payload", timestamp=TS, attributes=codec
    )
    before = v2_batch(0)
    path = write(tmp_path, before.data + odd + v2_batch(4).data)
    with pytest.raises(UnsupportedFormatError) as info:
        offsets(path)
    assert_located(info.value, path, len(before.data), 3)
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 2, 4, 5, 6]


def test_zstd_in_a_legacy_wrapper_is_rejected(tmp_path: Path) -> None:
    inner = encode_legacy_message(offset=0, magic=1, key=None, value=b"v", timestamp=TS)
    payload = zstandard.ZstdCompressor().compress(inner)
    wrapper = encode_legacy_message(
        offset=3, magic=1, key=None, value=payload, timestamp=TS, attributes=ZSTD
    )
    before = v2_batch(0)
    path = write(tmp_path, before.data + wrapper + v2_batch(4).data)
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path)
    assert_located(info.value, path, len(before.data), 3)
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 2, 4, 5, 6]


# --- offsets must increase (FORMAT §8 row 7) ----------------------------------------------------


@pytest.mark.parametrize("overlap", ["same-base", "overlaps-last", "legacy-repeat"])
def test_offsets_not_increasing_between_entries(tmp_path: Path, overlap: str) -> None:
    first = v2_batch(0)  # offsets 0..2
    if overlap == "same-base":
        bad = v2_batch(0)
    elif overlap == "overlaps-last":
        bad = v2_batch(2)  # baseOffset 2 <= previous lastOffset 2
    else:
        bad = Entry(
            encode_legacy_message(offset=1, magic=1, key=None, value=b"v", timestamp=TS), [1]
        )
    path = write(tmp_path, first.data + bad.data + v2_batch(5).data)
    with pytest.raises(CorruptSegmentError) as info:
        offsets(path)
    assert_located(
        info.value,
        path,
        len(first.data),
        bad.offsets[-1] if overlap == "legacy-repeat" else bad.offsets[0],
    )
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 2, 5, 6, 7]


# --- resource limits ----------------------------------------------------------------------------


def _raw_v2(base: int, records: bytes, *, count: int, attributes: int, lod: int) -> bytes:
    tail = struct.pack(">hiqqqhii", attributes, lod, TS, TS, -1, -1, -1, count) + records
    return struct.pack(">qiibI", base, 49 + len(records), -1, 2, crc32c.crc32c(tail)) + tail


def _measure(fn: Any) -> tuple[Any, float, int]:
    """(result or raised exception, seconds, peak traced bytes)."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        result = fn()
    except Exception as err:  # the caller asserts on the type
        result = err
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return result, seconds, peak


@pytest.fixture
def warm(tmp_path: Path) -> None:
    """Load the kernels once, outside the measured region."""
    (tmp_path / "warm").mkdir()
    offsets(write(tmp_path / "warm", v2_log(count=2).data))


def _zstd_bomb(size: int) -> bytes:
    compressor = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = bytes(1 << 20)
    return b"".join(compressor.compress(chunk) for _ in range(size >> 20)) + compressor.flush()


def test_decompression_bomb_hits_the_limit(tmp_path: Path, warm: None) -> None:
    payload = _zstd_bomb(64 << 20)
    assert len(payload) < 10_000
    before = v2_batch(0)
    bomb = _raw_v2(3, payload, count=1000, attributes=ZSTD, lod=999)
    path = write(tmp_path, before.data + bomb + v2_batch(1003).data)
    result, seconds, peak = _measure(lambda: offsets(path, maxDecompressedBytes=1048576))
    assert isinstance(result, LimitExceededError), result
    assert_located(result, path, len(before.data), 3)
    assert seconds < 5
    assert peak < 32 << 20


def test_record_count_lie_fails_fast_without_allocating(tmp_path: Path, warm: None) -> None:
    one_record = v2_batch(0, n=1).data[61:]
    before = v2_batch(0)
    liar = _raw_v2(3, one_record, count=2**31 - 1, attributes=0, lod=0)
    path = write(tmp_path, before.data + liar + v2_batch(4).data)
    result, seconds, peak = _measure(lambda: offsets(path))
    assert isinstance(result, CorruptSegmentError), result
    assert_located(result, path, len(before.data), 3)
    assert seconds < 5
    assert peak < 32 << 20
    result, seconds, peak = _measure(lambda: offsets(path, mode="DROPMALFORMED"))
    assert result == [0, 1, 2, 4, 5, 6]
    assert seconds < 5
    assert peak < 32 << 20


@pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))
def test_record_count_lie_in_a_compressed_batch(tmp_path: Path, warm: None, codec: int) -> None:
    honest = encode_batch([RecordSpec(b"v", timestamp=TS)], base_offset=3, compression=codec)
    data = bytearray(honest)
    struct.pack_into(">i", data, 57, 2**31 - 1)
    recompute_v2_crc(data, 0)
    before = v2_batch(0)
    path = write(tmp_path, before.data + bytes(data) + v2_batch(4).data)
    result, seconds, peak = _measure(lambda: offsets(path))
    assert isinstance(result, CorruptSegmentError), result
    assert_located(result, path, len(before.data), 3)
    assert seconds < 5
    assert peak < 32 << 20
    assert offsets(path, mode="DROPMALFORMED") == [0, 1, 2, 4, 5, 6]


# --- random single-byte damage ------------------------------------------------------------------


def _mixed_log() -> Log:
    hdrs = (("h", b"1"), ("n", None))
    entries = legacy_log().entries[:-1]
    base = 14
    for codec in range(5):
        specs = [
            RecordSpec(b"v%d-%d" % (codec, i) * 3, key=b"k%d" % i, timestamp=TS - i, headers=hdrs)
            for i in range(4)
        ]
        entries.append(
            Entry(
                encode_batch(specs, base_offset=base, compression=codec),
                list(range(base, base + 4)),
            )
        )
        base += 4
    entries.append(
        Entry(
            encode_batch(
                [RecordSpec(b"t", timestamp=TS)],
                base_offset=base,
                is_transactional=True,
                producer_id=5,
                producer_epoch=0,
                base_sequence=0,
            ),
            [base],
        )
    )
    entries.append(
        Entry(
            encode_control_batch(
                offset=base + 1, commit=True, producer_id=5, producer_epoch=0, timestamp=TS
            ),
            [],
        )
    )
    entries.append(
        Entry(
            encode_batch(
                [RecordSpec(b"x", timestamp=TS)],
                base_offset=base + 2,
                timestamp_type=1,
                log_append_time=TS + 1,
            ),
            [base + 2],
        )
    )
    return Log(entries)


def _rows(path: str, **options: Any) -> list[tuple[Any, ...]]:
    table = kafka_segments_ds.read_table(path, includeHeaders=True, includeMetadata=True, **options)
    return [tuple((k, repr(v)) for k, v in row.items()) for row in table.to_pylist()]


@pytest.mark.slow
def test_random_single_byte_damage(tmp_path: Path) -> None:
    log = _mixed_log()
    clean = log.data
    path = write(tmp_path, clean)
    reference = _rows(path)
    assert [dict(r)["offset"] for r in reference] == [str(o) for o in log.offsets()]
    bounds = [log.position(i) for i in range(len(log.entries) + 1)]
    by_entry = collections.defaultdict(list)
    for row in reference:
        by_entry[int(dict(row)["position"])].append(row)
    rng = random.Random(20240601)
    outcomes: collections.Counter[str] = collections.Counter()
    for _ in range(200):
        index = rng.randrange(len(clean))
        path = write(tmp_path, flip(clean, index, rng.randrange(1, 256)))
        strict: list[tuple[Any, ...]] | None = None
        try:
            strict = _rows(path)
            outcomes["rows"] += 1
        except KafkaSegmentsError as err:
            outcomes[type(err).__name__] += 1
        # any other exception type fails the test here
        dropping = _rows(path, mode="DROPMALFORMED")
        if strict is not None:  # nothing was found wrong, so nothing may be dropped
            assert dropping == strict, index
        got = collections.Counter(dropping)
        # An offset field has no checksum: one raised over the entries after it still decodes,
        # and the prefix rule keeps it; entries whose offsets it now covers are dropped (R3a).
        raised = -1
        if _in_offset_field(bounds, index):
            at = repr(_entry_start(bounds, index))
            kept = [int(dict(r)["offset"]) for r in dropping if dict(r)["position"] == at]
            raised = max(kept, default=-1)
        for (start, end), entry in zip(itertools.pairwise(bounds), log.entries, strict=True):
            if start <= index < end:
                continue  # the damaged entry: anything goes
            if start > index and entry.offsets and entry.offsets[0] <= raised:
                continue  # after an entry whose offset field was raised over it
            want = collections.Counter(by_entry[start])
            assert not want - got, (index, start)
    assert outcomes["ChecksumError"] > 100  # the damage mostly lands in CRC-covered bytes


def _entry_start(bounds: list[int], index: int) -> int:
    return max(b for b in bounds if b <= index)


def _in_offset_field(bounds: list[int], index: int) -> bool:
    return index - _entry_start(bounds, index) < 8
