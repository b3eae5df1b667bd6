"""read_committed over a segment without ``.txnindex`` whose entries are damaged: the walk
for transaction markers frames them as the reader does (a batch whose checksum fails is
damage, its size field unproven), and a damaged entry that may be a marker leaves its
transaction undecided: FAILFAST raises, DROPMALFORMED leaves its records out. An aborted
record is never returned."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_control_batch
from kafka_segments_ds.samples import PartitionWriter

PID = 101


def _records(first: int, n: int) -> list[RecordSpec]:
    return [
        RecordSpec(value=b"v%d" % (first + i), timestamp=1_700_000_000_000 + first + i)
        for i in range(n)
    ]


def _segment(directory: Path) -> tuple[Path, dict[str, int]]:
    """Producer 101's transaction at 0-2, plain 3-5, its ABORT at 6, plain 7-9, its next
    transaction at 10-12 and COMMIT at 13, plain 14-16; no .txnindex (the writer records no
    abort). Returns the .log and each batch's byte position."""
    w = PartitionWriter(directory, segment_bytes=1 << 20)
    at: dict[str, int] = {}

    def add(name: str, entry: bytes, last: int) -> None:
        at[name] = w._size
        w.append(entry, last)

    txn = {"producer_id": PID, "producer_epoch": 0, "is_transactional": True}
    add("aborted", encode_batch(_records(0, 3), base_offset=0, base_sequence=0, **txn), 2)
    add("plain", encode_batch(_records(3, 3), base_offset=3), 5)
    abort = encode_control_batch(
        offset=6, commit=False, producer_id=PID, producer_epoch=0, timestamp=1
    )
    add("abort", abort, 6)
    add("plain2", encode_batch(_records(7, 3), base_offset=7), 9)
    add("committed", encode_batch(_records(10, 3), base_offset=10, base_sequence=3, **txn), 12)
    commit = encode_control_batch(
        offset=13, commit=True, producer_id=PID, producer_epoch=0, timestamp=1
    )
    add("commit", commit, 13)
    add("plain3", encode_batch(_records(14, 3), base_offset=14), 16)
    w.roll()
    log = directory / "00000000000000000000.log"
    assert not list(directory.glob("*.txnindex"))
    return log, at


def _damage(log: Path, position: int, xor: int) -> None:
    data = bytearray(log.read_bytes())
    data[position] ^= xor
    log.write_bytes(bytes(data))


def _offsets(directory: Path, **options: str) -> list[int]:
    table = ksd.read_table(
        str(directory), columns=["offset"], isolationLevel="read_committed", **options
    )
    offsets: list[int] = table.column(0).to_pylist()
    return offsets


def test_a_size_field_swallowing_the_abort_marker_does_not_hide_it(tmp_path: Path) -> None:
    """A plain batch's size field raised by 100 frames the ABORT marker inside it: the walk
    took that extent whole and never saw the marker (the reader resynchronises inside it),
    so the aborted transaction's records came back -- in FAILFAST too, for a range ending
    before the damage."""
    directory = tmp_path / "t-0"
    log, at = _segment(directory)
    assert _offsets(directory) == [3, 4, 5, 7, 8, 9, 10, 11, 12, 14, 15, 16]
    data = bytearray(log.read_bytes())
    size_at = at["plain"] + 8
    struct.pack_into(">i", data, size_at, struct.unpack_from(">i", data, size_at)[0] + 100)
    log.write_bytes(bytes(data))
    ending = '{"t":{"0":3}}'
    assert _offsets(directory, endingOffsets=ending) == []
    assert _offsets(directory, endingOffsets=ending, mode="DROPMALFORMED") == []
    assert _offsets(directory, mode="DROPMALFORMED") == [7, 8, 9, 10, 11, 12, 14, 15, 16]
    with pytest.raises(CorruptSegmentError, match=f"byte position {at['plain']}, offset 3"):
        _offsets(directory)


@pytest.mark.parametrize("where", ["crc", "size", "magic"])
def test_a_damaged_abort_marker_leaves_its_transaction_undecided(
    tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The ABORT marker itself damaged (no .txnindex to say what it ended): the producer's
    next COMMIT closed the transaction as committed, its aborted records returned.
    FAILFAST says it cannot tell, naming the file and position, even for a range the reader
    ends before the damage; DROPMALFORMED leaves the transaction's records out with a
    warning and reads the producer's next transaction as it ends."""
    directory = tmp_path / "t-0"
    log, at = _segment(directory)
    _damage(log, at["abort"] + {"crc": 17, "size": 11, "magic": 16}[where], 0x01)
    expected_error = f"{log}, byte position {at['abort']}"
    with pytest.raises(CorruptSegmentError, match="cannot tell whether it committed") as err:
        _offsets(directory, endingOffsets='{"t":{"0":3}}')
    assert expected_error in str(err.value)
    assert "producer 101's transaction from offset 0" in str(err.value)
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.transactions"):
        got = _offsets(directory, mode="DROPMALFORMED")
    assert got == [3, 4, 5, 7, 8, 9, 10, 11, 12, 14, 15, 16]
    (warning,) = [
        r.getMessage() for r in caplog.records if r.name == "kafka_segments_ds.transactions"
    ]
    assert f"{log}, byte position {at['abort']}: a damaged entry that may be the marker" in warning
    # a range from past the damage is decided whatever the marker said: no doubt raised
    caplog.clear()
    with caplog.at_level(logging.WARNING, "kafka_segments_ds.transactions"):
        got = _offsets(directory, startingOffsets='{"t":{"0":7}}', mode="DROPMALFORMED")
    assert got == [7, 8, 9, 10, 11, 12, 14, 15, 16]
    assert not [r for r in caplog.records if r.name == "kafka_segments_ds.transactions"]


def test_damage_that_is_no_marker_decides_nothing(tmp_path: Path) -> None:
    """A damaged plain batch inside an open transaction (its attributes say no control
    batch) is no reason to doubt the transaction: its ABORT still decides it."""
    directory = tmp_path / "t-0"
    log, at = _segment(directory)
    _damage(log, at["plain"] + 40, 0x01)  # inside the checksummed bytes
    assert _offsets(directory, endingOffsets='{"t":{"0":3}}') == []
    assert _offsets(directory, mode="DROPMALFORMED") == [7, 8, 9, 10, 11, 12, 14, 15, 16]


def test_a_torn_marker_at_the_logs_end_is_an_open_transaction(tmp_path: Path) -> None:
    """The last entry of the log cut short (a marker a broker was writing when the copy was
    taken): the transaction is open, its records are not read (the last stable offset),
    and FAILFAST reads on as for any torn tail."""
    directory = tmp_path / "t-0"
    w = PartitionWriter(directory, segment_bytes=1 << 20)
    txn = {"producer_id": PID, "producer_epoch": 0, "is_transactional": True}
    w.append(encode_batch(_records(0, 3), base_offset=0, base_sequence=0, **txn), 2)
    w.append(encode_batch(_records(3, 3), base_offset=3), 5)
    w.append(
        encode_control_batch(offset=6, commit=True, producer_id=PID, producer_epoch=0, timestamp=1),
        6,
    )
    w.roll()
    log = directory / "00000000000000000000.log"
    data = log.read_bytes()
    log.write_bytes(data[:-30])
    assert _offsets(directory) == [3, 4, 5]
    assert _offsets(directory, mode="DROPMALFORMED") == [3, 4, 5]


@pytest.mark.parametrize("commit", [False, True], ids=["abort", "commit"])
def test_the_walk_resumes_where_the_reader_does_before_the_damage(
    tmp_path: Path, commit: bool
) -> None:
    """A batch cut 3 bytes short whose checksum still holds (its last bytes were zeros, as the
    next batch's first are): the framing fails past it and the reader resumes before that,
    at the next batch it overlapped. The walk gave up there, so the ABORT marker after it
    was not seen and the aborted records came back."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    first = encode_batch(
        [
            RecordSpec(key=b"k0", value=b"v0", timestamp=1000),
            RecordSpec(key=b"k1", value=b"v\x00\x00", timestamp=1000),
        ],
        base_offset=0,
    )
    assert first[-3:] == b"\x00\x00\x00"
    txn = encode_batch(
        [RecordSpec(key=b"k2", value=b"v2", timestamp=1000)] * 2,
        base_offset=2,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    marker = encode_control_batch(
        offset=4, commit=commit, producer_id=7, producer_epoch=0, timestamp=1000
    )
    last = encode_batch([RecordSpec(key=b"k5", value=b"v5", timestamp=1000)], base_offset=5)
    (directory / "00000000000000000000.log").write_bytes(first[:-3] + txn + marker + last)
    want = [0, 1, 2, 3, 5] if commit else [0, 1, 5]
    assert _offsets(directory, mode="DROPMALFORMED") == want


def test_bytes_inside_the_batch_the_reader_resumes_at_are_no_marker(tmp_path: Path) -> None:
    """Resuming before the damage (at a batch the entry before it overlapped), the bytes where
    the framing failed lie inside that valid batch: read as a header there, a transaction's
    last offset delta of 32 looked like a control batch's attributes, and producer 9's open
    transaction was taken for undecided (FAILFAST raised, DROPMALFORMED dropped it)."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    txn = {"producer_epoch": 0, "base_sequence": 0, "is_transactional": True}
    nine = encode_batch(
        [RecordSpec(value=b"a", timestamp=1000)] * 2, base_offset=0, producer_id=9, **txn
    )
    cut = encode_batch(
        [
            RecordSpec(key=b"k", value=b"x", timestamp=1000),
            RecordSpec(key=b"k", value=b"v\x00\x00\x00", timestamp=1000),
        ],
        base_offset=2,
    )
    assert cut[-4:] == bytes(4)
    seven = encode_batch(
        [RecordSpec(value=b"b", timestamp=1000)] * 33, base_offset=4, producer_id=7, **txn
    )
    assert seven[25:27] == b"\x00\x20"  # what the walk read as attributes
    markers = [
        encode_control_batch(offset=o, commit=True, producer_id=p, producer_epoch=0, timestamp=1000)
        for o, p in ((37, 9), (38, 7))
    ]
    last = encode_batch([RecordSpec(value=b"z", timestamp=1000)], base_offset=39)
    (directory / "00000000000000000000.log").write_bytes(
        nine + cut[:-4] + seven + b"".join(markers) + last
    )
    assert _offsets(directory, mode="DROPMALFORMED") == [*range(37), 39]
    assert _offsets(directory, endingOffsets='{"t":{"0":2}}') == [0, 1]
