"""Tests for kafka_segments_ds.records.v2: magic-2 batch headers, records, control markers.

Golden batches are hand-assembled below from the layout in FORMAT.md §4 with ``struct.pack`` and
explicit varint bytes, one comment per field; their CRC-32Cs were computed once with the
``crc32c`` package and are pinned as literals. The malformed-input tests build batches with the
small independent encoders in this file (not the library's builder), so a bug shared by the
builder and the decoder cannot hide.
"""

from __future__ import annotations

import struct
import zlib

import crc32c
import pytest

from kafka_segments_ds.errors import CorruptSegmentError, UnsupportedFormatError
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_control_batch
from kafka_segments_ds.records.compression import CompressionType, decompress
from kafka_segments_ds.records.v2 import (
    BatchHeader,
    ControlMarker,
    Record,
    decode_batch_header,
    iter_records,
)

TS = 1_700_000_000_000
HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte header, as in FORMAT.md §4.1


# --- independent encoders -----------------------------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zz(n: int) -> bytes:
    """zig-zag varint/varlong of ``n``."""
    return _uvarint((n << 1) ^ (n >> 63) if n < 0 else n << 1)


def _blob(b: bytes | None) -> bytes:
    return _zz(-1) if b is None else _zz(len(b)) + b


def _record_body(
    offset_delta: int,
    *,
    ts_delta: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: tuple[tuple[bytes | None, bytes | None], ...] = (),
    header_count: int | None = None,
) -> bytes:
    body = b"\x00" + _zz(ts_delta) + _zz(offset_delta) + _blob(key) + _blob(value)
    body += _zz(len(headers) if header_count is None else header_count)
    for hkey, hvalue in headers:
        body += _blob(hkey) + _blob(hvalue)
    return body


def _record(offset_delta: int, *, length: int | None = None, **fields: object) -> bytes:
    body = _record_body(offset_delta, **fields)  # type: ignore[arg-type]
    return _zz(len(body) if length is None else length) + body


def _batch(
    records: bytes,
    *,
    count: int,
    last_offset_delta: int,
    base_offset: int = 0,
    attributes: int = 0,
    base_ts: int = TS,
    max_ts: int = TS,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    leader_epoch: int = -1,
) -> bytes:
    """A magic-2 batch with a correct CRC-32C over [21, end)."""
    tail = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
        + records
    )
    return (
        struct.pack(">qiibI", base_offset, 49 + len(records), leader_epoch, 2, crc32c.crc32c(tail))
        + tail
    )


def _decode(batch: bytes) -> list[Record]:
    header = decode_batch_header(batch)
    section = memoryview(batch)[61:]
    if header.compression:
        section = decompress(header.compression, section, magic=2)  # type: ignore[assignment]
    return list(iter_records(header, section))


# --- golden data batch: 2 records with headers --------------------------------------------------

RECORD0 = (
    b"\x26"  # length varint: 19 bytes follow
    b"\x00"  # attributes
    b"\x00"  # timestampDelta varlong 0
    b"\x00"  # offsetDelta varint 0
    b"\x04"
    b"k0"  # keyLength 2, key
    b"\x04"
    b"v0"  # valueLength 2, value
    b"\x04"  # headerCount 2
    b"\x04"
    b"h1"
    b"\x02"
    b"x"  # header key "h1", value b"x"
    b"\x04"
    b"h2"
    b"\x01"  # header key "h2", null value (-1)
)
RECORD1 = (
    b"\x16"  # length varint: 11 bytes follow
    b"\x00"  # attributes
    b"\x09"  # timestampDelta varlong -5: an older record after a newer one (CreateTime)
    b"\x02"  # offsetDelta varint 1
    b"\x01"  # keyLength -1: null key
    b"\x00"  # valueLength 0: empty, not null
    b"\x02"  # headerCount 1
    b"\x04"
    b"h1"
    b"\x02"
    b"y"  # repeated header key "h1", value b"y"
)
GOLDEN_CRC = 408049494
GOLDEN = (
    struct.pack(">q", 1000)  # baseOffset
    + struct.pack(">i", 49 + len(RECORD0) + len(RECORD1))  # batchLength
    + struct.pack(">i", 7)  # partitionLeaderEpoch
    + struct.pack(">b", 2)  # magic
    + struct.pack(">I", GOLDEN_CRC)  # CRC-32C of bytes [21, end)
    + struct.pack(">h", 0)  # attributes: no codec, CreateTime, not transactional/control
    + struct.pack(">i", 1)  # lastOffsetDelta
    + struct.pack(">q", TS)  # baseTimestamp = first record's time
    + struct.pack(">q", TS)  # maxTimestamp
    + struct.pack(">q", 42)  # producerId
    + struct.pack(">h", 3)  # producerEpoch
    + struct.pack(">i", 10)  # baseSequence
    + struct.pack(">i", 2)  # recordCount
    + RECORD0
    + RECORD1
)
GOLDEN_RECORDS = [
    Record(1000, TS, 0, b"k0", b"v0", (("h1", b"x"), ("h2", None))),
    Record(1001, TS - 5, 0, None, b"", (("h1", b"y"),)),
]

# golden control batch: a COMMIT marker, coordinator epoch 5, as the broker writes it
CONTROL_RECORD = (
    b"\x20"  # length varint: 16 bytes follow
    b"\x00"  # attributes
    b"\x00"  # timestampDelta 0
    b"\x00"  # offsetDelta 0
    b"\x08"
    b"\x00\x00"
    b"\x00\x01"  # keyLength 4: int16 version 0, int16 type 1 (COMMIT)
    b"\x0c"
    b"\x00\x00"
    b"\x00\x00\x00\x05"  # valueLength 6: int16 version 0, int32 epoch 5
    b"\x00"  # headerCount 0
)
CONTROL_CRC = 4003502810
CONTROL = (
    struct.pack(">q", 2000)  # baseOffset
    + struct.pack(">i", 49 + len(CONTROL_RECORD))  # batchLength
    + struct.pack(">i", -1)  # partitionLeaderEpoch
    + struct.pack(">b", 2)  # magic
    + struct.pack(">I", CONTROL_CRC)  # CRC-32C
    + struct.pack(">h", 0x30)  # attributes: transactional | control
    + struct.pack(">i", 0)  # lastOffsetDelta
    + struct.pack(">q", TS)  # baseTimestamp
    + struct.pack(">q", TS)  # maxTimestamp
    + struct.pack(">q", 42)  # producerId
    + struct.pack(">h", 3)  # producerEpoch
    + struct.pack(">i", -1)  # baseSequence: markers have none
    + struct.pack(">i", 1)  # recordCount
    + CONTROL_RECORD
)


def test_golden_crcs_are_crc32c_from_attributes_to_end() -> None:
    assert crc32c.crc32c(GOLDEN[21:]) == GOLDEN_CRC
    assert crc32c.crc32c(CONTROL[21:]) == CONTROL_CRC
    assert len(GOLDEN) == 61 + 20 + 12
    assert len(CONTROL) == 61 + 17


def test_golden_header() -> None:
    header = decode_batch_header(GOLDEN)
    assert header == BatchHeader(
        base_offset=1000,
        batch_length=81,
        leader_epoch=7,
        magic=2,
        crc=GOLDEN_CRC,
        attributes=0,
        last_offset_delta=1,
        base_timestamp=TS,
        max_timestamp=TS,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        record_count=2,
    )
    assert header.last_offset == 1001
    assert header.size_in_bytes == len(GOLDEN)
    assert header.compression is CompressionType.NONE
    assert header.timestamp_type == 0
    assert (header.is_transactional, header.is_control, header.has_delete_horizon) == (
        False,
        False,
        False,
    )


def test_golden_records() -> None:
    header = decode_batch_header(GOLDEN)
    assert list(iter_records(header, GOLDEN[61:])) == GOLDEN_RECORDS
    assert list(iter_records(header, memoryview(GOLDEN)[61:])) == GOLDEN_RECORDS


def test_header_decodes_at_a_position() -> None:
    buf = CONTROL + GOLDEN
    assert decode_batch_header(buf, len(CONTROL)).base_offset == 1000
    assert decode_batch_header(memoryview(buf), 0).base_offset == 2000


def test_builder_matches_golden_batch() -> None:
    built = encode_batch(
        [
            RecordSpec(value=b"v0", key=b"k0", timestamp=TS, headers=(("h1", b"x"), ("h2", None))),
            RecordSpec(value=b"", key=None, timestamp=TS - 5, headers=(("h1", b"y"),)),
        ],
        base_offset=1000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        leader_epoch=7,
    )
    assert built == GOLDEN


def test_golden_control_batch() -> None:
    header = decode_batch_header(CONTROL)
    assert (header.is_transactional, header.is_control, header.crc) == (True, True, CONTROL_CRC)
    (record,) = iter_records(header, CONTROL[61:])
    assert record == Record(2000, TS, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05", ())
    marker = ControlMarker.parse(record.key, record.value)
    assert marker == ControlMarker(version=0, type=1, coordinator_epoch=5)
    assert marker.type_name == "COMMIT"


def test_builder_matches_golden_control_batch() -> None:
    built = encode_control_batch(
        offset=2000,
        commit=True,
        producer_id=42,
        producer_epoch=3,
        timestamp=TS,
        coordinator_epoch=5,
    )
    assert built == CONTROL


def test_gzip_records_section() -> None:
    # A gzip member with one stored deflate block: fixed bytes, no compression library involved.
    section = RECORD0 + RECORD1
    stored = (
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # gzip header, MTIME 0
        + b"\x01"
        + struct.pack("<HH", len(section), len(section) ^ 0xFFFF)  # stored block
        + section
        + struct.pack("<II", zlib.crc32(section), len(section))  # CRC32, ISIZE
    )
    batch = _batch(
        stored, count=2, last_offset_delta=1, base_offset=1000, attributes=1, base_ts=TS, max_ts=TS
    )
    assert decode_batch_header(batch).compression is CompressionType.GZIP
    assert _decode(batch) == GOLDEN_RECORDS


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_builder_compressed_section_matches_golden_records(codec: int) -> None:
    built = encode_batch(
        [
            RecordSpec(value=b"v0", key=b"k0", timestamp=TS, headers=(("h1", b"x"), ("h2", None))),
            RecordSpec(value=b"", key=None, timestamp=TS - 5, headers=(("h1", b"y"),)),
        ],
        base_offset=1000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        leader_epoch=7,
        compression=codec,
    )
    header = decode_batch_header(built)
    assert header.attributes == codec
    assert decompress(codec, memoryview(built)[61:], magic=2) == RECORD0 + RECORD1
    assert crc32c.crc32c(built[21:]) == header.crc
    assert _decode(built) == GOLDEN_RECORDS


# --- timestamps ---------------------------------------------------------------------------------


def test_log_append_time_uses_max_timestamp_for_every_record() -> None:
    records = _record(0, ts_delta=3) + _record(1, ts_delta=-7) + _record(2, ts_delta=0)
    batch = _batch(
        records,
        count=3,
        last_offset_delta=2,
        base_offset=50,
        attributes=0x08,
        base_ts=TS,
        max_ts=TS + 99_000,
    )
    header = decode_batch_header(batch)
    assert header.timestamp_type == 1
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in _decode(batch)] == [
        (50, TS + 99_000, 1),
        (51, TS + 99_000, 1),
        (52, TS + 99_000, 1),
    ]


def test_create_time_is_base_plus_delta_including_negative_deltas() -> None:
    records = _record(0, ts_delta=0) + _record(1, ts_delta=-1000) + _record(2, ts_delta=250)
    batch = _batch(records, count=3, last_offset_delta=2, base_ts=TS, max_ts=TS + 250)
    assert [(r.timestamp, r.timestamp_type) for r in _decode(batch)] == [
        (TS, 0),
        (TS - 1000, 0),
        (TS + 250, 0),
    ]


def test_delete_horizon_base_timestamp_is_rebased() -> None:
    # The cleaner stores the delete horizon in baseTimestamp and re-bases the deltas on it.
    horizon = TS + 86_400_000
    records = _record(0, ts_delta=-86_400_000) + _record(4, ts_delta=-86_000_000)
    batch = _batch(
        records, count=2, last_offset_delta=4, attributes=0x40, base_ts=horizon, max_ts=TS + 400_000
    )
    header = decode_batch_header(batch)
    assert header.has_delete_horizon
    assert header.timestamp_type == 0
    assert [(r.offset, r.timestamp) for r in _decode(batch)] == [(0, TS), (4, TS + 400_000)]


def test_no_timestamp_records() -> None:
    records = _record(0, ts_delta=0) + _record(1, ts_delta=0)
    batch = _batch(records, count=2, last_offset_delta=1, base_ts=-1, max_ts=-1)
    assert [r.timestamp for r in _decode(batch)] == [-1, -1]


# --- attributes and header checks ---------------------------------------------------------------


def test_attribute_bits() -> None:
    for attributes, expected in [
        (0x10, (True, False, False, 0)),
        (0x20, (False, True, False, 0)),
        (0x40, (False, False, True, 0)),
        (0x08, (False, False, False, 1)),
        (0x7B, (True, True, True, 1)),
    ]:
        header = decode_batch_header(
            _batch(b"", count=0, last_offset_delta=0, attributes=attributes)
        )
        assert (
            header.is_transactional,
            header.is_control,
            header.has_delete_horizon,
            header.timestamp_type,
        ) == expected


def test_high_attribute_byte_is_ignored() -> None:
    header = decode_batch_header(_batch(b"", count=0, last_offset_delta=0, attributes=0x7F00))
    assert header.compression is CompressionType.NONE
    assert (header.is_transactional, header.is_control, header.timestamp_type) == (
        False,
        False,
        0,
    )


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_id_is_unsupported(codec: int) -> None:
    header = decode_batch_header(_batch(_record(0), count=1, last_offset_delta=0, attributes=codec))
    with pytest.raises(UnsupportedFormatError, match=f"codec id {codec}"):
        header.compression  # noqa: B018


def test_empty_batch_after_compaction() -> None:
    batch = _batch(
        b"",
        count=0,
        last_offset_delta=4,
        base_offset=10,
        base_ts=-1,
        max_ts=TS,
        producer_id=7,
        producer_epoch=0,
        base_sequence=3,
    )
    assert len(batch) == 61
    header = decode_batch_header(batch)
    assert (header.batch_length, header.record_count, header.last_offset) == (49, 0, 14)
    assert list(iter_records(header, b"")) == []


def test_compaction_gaps_in_offset_deltas() -> None:
    records = _record(0) + _record(3) + _record(7)
    batch = _batch(records, count=3, last_offset_delta=9, base_offset=100)
    assert decode_batch_header(batch).last_offset == 109
    assert [r.offset for r in _decode(batch)] == [100, 103, 107]


def test_header_short_buffer() -> None:
    with pytest.raises(CorruptSegmentError, match="61-byte header"):
        decode_batch_header(GOLDEN[:60])
    with pytest.raises(CorruptSegmentError, match="61-byte header") as info:
        decode_batch_header(GOLDEN + GOLDEN[:30], len(GOLDEN))
    assert info.value.position == len(GOLDEN)


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_header_wrong_magic(magic: int) -> None:
    batch = bytearray(GOLDEN)
    batch[16] = magic & 0xFF
    with pytest.raises(CorruptSegmentError, match="expected magic 2"):
        decode_batch_header(bytes(batch))


@pytest.mark.parametrize("length", [48, 0, -1])
def test_header_batch_length_below_minimum(length: int) -> None:
    batch = bytearray(GOLDEN)
    struct.pack_into(">i", batch, 8, length)
    with pytest.raises(CorruptSegmentError, match="below the minimum 49") as info:
        decode_batch_header(bytes(batch))
    assert info.value.offset == 1000


def test_header_negative_record_count() -> None:
    with pytest.raises(CorruptSegmentError, match="negative record count"):
        decode_batch_header(_batch(b"", count=-1, last_offset_delta=0))


def test_header_negative_last_offset_delta() -> None:
    with pytest.raises(CorruptSegmentError, match="negative lastOffsetDelta"):
        decode_batch_header(_batch(b"", count=0, last_offset_delta=-1))


# --- structural lies in the records section (FORMAT §4.4, §8 rows 5 and 7) ---------------------


def _records_error(records: bytes, count: int, last_offset_delta: int, match: str | None) -> None:
    batch = _batch(records, count=count, last_offset_delta=last_offset_delta)
    with pytest.raises(CorruptSegmentError, match=match):
        _decode(batch)


def test_header_count_larger_than_the_headers_present() -> None:
    one = ((b"a", None),)
    _records_error(_record(0, headers=one, header_count=3), 1, 0, "header count")
    _records_error(_record(0, header_count=1), 1, 0, "header count")


def test_header_count_lie_that_fits_the_bytes() -> None:
    # Two headers claimed, the bytes hold one header and then the record ends (length honest).
    body = _record_body(0, headers=((b"ab", b"cd"),), header_count=2)
    _records_error(_zz(len(body)) + body, 1, 0, "past the end")


def test_negative_header_count() -> None:
    _records_error(_record(0, header_count=-1), 1, 0, "header count")


def test_null_or_negative_header_key() -> None:
    _records_error(_record(0, headers=((None, b"v"),)), 1, 0, "header key")
    body = b"\x00\x00\x00" + _blob(None) + _blob(b"v") + _zz(1) + _zz(-2) + b"\x00"
    _records_error(_zz(len(body)) + body, 1, 0, "invalid length -2")


def test_header_value_length_invalid() -> None:
    body = b"\x00\x00\x00" + _blob(None) + _blob(b"v") + _zz(1) + _blob(b"k") + _zz(-3) + b"\x00"
    _records_error(_zz(len(body)) + body, 1, 0, "invalid length")


def test_record_length_longer_than_the_section() -> None:
    body = _record_body(0)
    _records_error(_zz(len(body) + 1) + body, 1, 0, "record length")
    _records_error(_zz(len(body) + 1000) + body + b"\x00" * 10, 1, 0, "record length")


def test_record_length_shorter_than_its_fields() -> None:
    records = _record(0, value=b"abcdef", length=8) + _record(1)  # fields take 11 bytes
    _records_error(records, 2, 1, "runs past the end of its record")


def test_record_length_longer_than_its_fields() -> None:
    # The declared record swallows the next record's first bytes: fields do not fill it.
    body = _record_body(0) + b"\x00\x00"
    _records_error(_zz(len(body)) + body, 1, 0, "declares")


def test_record_length_below_minimum() -> None:
    _records_error(_zz(4) + b"\x00\x00\x00\x01" + b"\x00" * 10, 1, 0, "record length")


def test_negative_record_length() -> None:
    _records_error(_zz(-1) + _record_body(0), 1, 0, "record length")


def test_leftover_bytes_after_record_count() -> None:
    _records_error(_record(0) + _record(1), 1, 1, "left after 1 records")
    _records_error(_record(0) + b"\x00", 1, 0, "left after")


def test_record_count_above_what_the_bytes_hold() -> None:
    _records_error(_record(0), 2, 1, "cannot fit")
    _records_error(_record(0), 2**31 - 1, 0, "cannot fit")


def test_offset_deltas_must_increase() -> None:
    _records_error(_record(0) + _record(0), 2, 1, "offset delta")
    _records_error(_record(1) + _record(0), 2, 1, "offset delta")
    _records_error(_record(-1), 1, 0, "offset delta")


def test_offset_delta_beyond_last_offset_delta() -> None:
    _records_error(_record(0) + _record(2), 2, 1, "offset delta")


def test_bad_key_lengths() -> None:
    body = b"\x00\x00\x00" + _zz(-2) + _blob(b"v") + _zz(0)
    _records_error(_zz(len(body)) + body, 1, 0, "invalid length")
    body = b"\x00\x00\x00" + _zz(50) + b"k" + _blob(b"v") + _zz(0)
    _records_error(_zz(len(body)) + body, 1, 0, "past the end")


def test_overlong_varint_inside_a_record() -> None:
    body = b"\x00\x00" + b"\x80\x80\x80\x80\x80\x00" + _blob(None) + _blob(b"v") + _zz(0)
    _records_error(_zz(len(body)) + body, 1, 0, "longer than 5 bytes")


def test_truncated_records_section() -> None:
    records = _record(0, value=b"0123456789") + _record(1, value=b"0123456789")
    _records_error(records[:-3], 2, 1, "record length 16 does not fit")


# --- control markers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "expected", "name"),
    [
        (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x07", ControlMarker(0, 0, 7), "ABORT"),
        (b"\x00\x00\x00\x01", b"\x00\x00\xff\xff\xff\xff", ControlMarker(0, 1, -1), "COMMIT"),
        (b"\x00\x00\x00\x02", b"\x00\x00anything", ControlMarker(0, 2, None), "LEADER_CHANGE"),
        (b"\x00\x00\x00\x03", None, ControlMarker(0, 3, None), "SNAPSHOT_HEADER"),
        (b"\x00\x00\x00\x04", b"", ControlMarker(0, 4, None), "SNAPSHOT_FOOTER"),
        (b"\x00\x00\x00\x05", b"", ControlMarker(0, 5, None), "KRAFT_VERSION"),
        (b"\x00\x00\x00\x06", b"", ControlMarker(0, 6, None), "KRAFT_VOTERS"),
        (b"\x00\x00\x00\x63", None, ControlMarker(0, 99, None), "UNKNOWN"),
        (b"\x00\x00\xff\xff", None, ControlMarker(0, -1, None), "UNKNOWN"),
        # version > 0 is read as version 0; extra key/value bytes are ignored
        (
            b"\x00\x03\x00\x01\xaa",
            b"\x00\x02\x00\x00\x00\x09\xbb",
            ControlMarker(3, 1, 9),
            "COMMIT",
        ),
    ],
)
def test_control_marker_parse(
    key: bytes, value: bytes | None, expected: ControlMarker, name: str
) -> None:
    marker = ControlMarker.parse(key, value)
    assert marker == expected
    assert marker.type_name == name


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (None, b"\x00\x00\x00\x00\x00\x00", "key shorter"),
        (b"", None, "key shorter"),
        (b"\x00\x00\x00", None, "key shorter"),
        (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x00", "negative version"),
        (b"\x80\x00\x00\x02", None, "negative version"),
        (b"\x00\x00\x00\x00", None, "shorter than 6"),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00", "shorter than 6"),
        (b"\x00\x00\x00\x01", b"\xff\xfe\x00\x00\x00\x00", "negative version"),
    ],
)
def test_control_marker_invalid(key: bytes | None, value: bytes | None, match: str) -> None:
    with pytest.raises(CorruptSegmentError, match=match):
        ControlMarker.parse(key, value)
