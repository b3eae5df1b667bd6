"""``kafka-segments dump`` of producer-state ``.snapshot`` files, built byte by byte here."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import crc32c
import pytest

from kafka_segments_ds.cli import main
from kafka_segments_ds.errors import ChecksumError, CorruptSegmentError, UnsupportedFormatError
from kafka_segments_ds.producer_snapshot import parse_producer_snapshot

NAME = "00000000000000000150.snapshot"
# producerId, epoch, lastSequence, lastOffset, offsetDelta, timestamp, coordinatorEpoch,
# currentTxnFirstOffset
ENTRIES = [
    (4242, 3, 17, 149, 4, 1_700_000_000_123, 7, -1),
    (-9_000_000_000, -1, 2_147_483_647, 9_000_000_000_000, 0, -1, -1, 120),
]
FIELDS = [
    "producer_id",
    "producer_epoch",
    "last_sequence",
    "last_offset",
    "offset_delta",
    "timestamp",
    "coordinator_epoch",
    "current_txn_first_offset",
]


def snapshot_bytes(entries: list[tuple[int, ...]], *, count: int | None = None, version=1) -> bytes:
    body = struct.pack(">i", len(entries) if count is None else count)
    body += b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", version, crc32c.crc32c(body)) + body


def run(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, str, str]:
    status = main(["dump", str(path)])
    out, err = capsys.readouterr()
    return status, out, err


def test_entry_layout_is_46_bytes() -> None:
    data = snapshot_bytes(ENTRIES)
    assert len(data) == 10 + 2 * 46
    # pin the header bytes: version 1, then the CRC, then count 2
    assert data[:2] == b"\x00\x01" and data[6:10] == b"\x00\x00\x00\x02"


def test_dump_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / NAME
    data = snapshot_bytes(ENTRIES)
    path.write_bytes(data)
    status, out, err = run(capsys, path)
    assert (status, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[:-1] == [dict(zip(FIELDS, e, strict=True)) for e in ENTRIES]
    assert rows[-1] == {
        "summary": {
            "file": str(path),
            "version": 1,
            "crc": crc32c.crc32c(data[6:]),
            "entries": 2,
        }
    }


def test_empty_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / NAME
    path.write_bytes(snapshot_bytes([]))
    status, out, _ = run(capsys, path)
    assert status == 0
    assert [json.loads(line) for line in out.splitlines()] == [
        {
            "summary": {
                "file": str(path),
                "version": 1,
                "crc": crc32c.crc32c(b"\0" * 4),
                "entries": 0,
            }
        }
    ]


@pytest.mark.parametrize("flip", [6, 9, 10, 55])
def test_flipped_byte_is_a_checksum_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flip: int
) -> None:
    data = bytearray(snapshot_bytes(ENTRIES))
    data[flip] ^= 0x40
    path = tmp_path / NAME
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumError) as info:
        parse_producer_snapshot(bytes(data))
    assert info.value.position == 2
    status, out, err = run(capsys, path)
    assert (status, out) == (1, "")
    assert err.count("\n") == 1
    assert err.startswith("kafka-segments: error: producer snapshot CRC-32C mismatch: stored 0x")
    assert f"over bytes [6, 102) (file {path}, byte position 2)" in err


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (3, "entry count 3 needs 138 bytes after the 10-byte header, the file has 92"),
        (1, "entry count 1 needs 46 bytes after the 10-byte header, the file has 92"),
        (2**31 - 1, "entry count 2147483647 needs 98784247762 bytes"),
        (-1, "entry count -1 is negative"),
    ],
)
def test_count_not_trusted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], count: int, message: str
) -> None:
    # the CRC is right, the count is not: it must be checked against the file size
    data = snapshot_bytes(ENTRIES, count=count)
    with pytest.raises(CorruptSegmentError, match=message) as info:
        parse_producer_snapshot(data)
    assert info.value.position == 6
    path = tmp_path / NAME
    path.write_bytes(data)
    status, _, err = run(capsys, path)
    assert status == 1
    assert message in err and f"(file {path}, byte position 6)" in err


def test_truncated_entry(tmp_path: Path) -> None:
    data = snapshot_bytes(ENTRIES)[:-5]
    body = data[6:]
    data = data[:2] + struct.pack(">I", crc32c.crc32c(body)) + body
    with pytest.raises(CorruptSegmentError, match=r"entry count 2 needs 92 .* the file has 87"):
        parse_producer_snapshot(data)


@pytest.mark.parametrize("size", [0, 1, 9])
def test_shorter_than_header(size: int) -> None:
    with pytest.raises(CorruptSegmentError, match=f"snapshot is {size} bytes; its header"):
        parse_producer_snapshot(snapshot_bytes(ENTRIES)[:size])


def test_unknown_version() -> None:
    with pytest.raises(UnsupportedFormatError, match="snapshot version 2; only version 1"):
        parse_producer_snapshot(snapshot_bytes(ENTRIES, version=2))
