"""Reading a segment while another process appends to it, as a live broker does.

The appender writes each batch in several pieces (so readers see torn batches), and maintains a
preallocated, zero-filled ``.index``/``.timeindex`` written in place as a broker's memory-mapped
indexes are. With ``preallocate`` the ``.log`` itself is zero-filled up front and written in
place (Kafka's ``preallocate=true``). Every read while this goes on must return a prefix of
the log exactly -- offsets 0..k-1 with their own values, never a torn record -- and no error.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import kafka_segments_ds

BATCHES = 120
RECORDS = 3
INDEX_SLOTS = 4096

APPENDER = r"""
import os, struct, sys, time
from kafka_segments_ds.records.builder import RecordSpec, encode_batch

directory, batches, records = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
preallocate, lockstep = sys.argv[4] == "1", sys.argv[5] == "1"
stem = os.path.join(directory, "00000000000000000000")
index = os.open(stem + ".index", os.O_RDWR | os.O_CREAT)
timeindex = os.open(stem + ".timeindex", os.O_RDWR | os.O_CREAT)
os.ftruncate(index, 8 * 4096)
os.ftruncate(timeindex, 12 * 4096)
log = os.open(stem + ".log", os.O_RDWR | os.O_CREAT | (0 if preallocate else os.O_APPEND))
if preallocate:
    os.ftruncate(log, 1 << 20)
position = slot = 0
for i in range(batches):
    base = i * records
    specs = [RecordSpec(value=b"value-%d" % o * (1 + o % 7), key=b"k%d" % o, timestamp=1000 + o)
             for o in range(base, base + records)]
    batch = encode_batch(specs, base_offset=base, compression=i % 5)
    half = len(batch) // 2 + 30
    pieces = (batch[:13], batch[13:61], batch[61:half], batch[half:])
    at = position
    for piece in pieces:
        if lockstep:  # one piece per line from the reader, acknowledged when written
            sys.stdin.readline()
        if preallocate:
            os.pwrite(log, piece, at)
        else:
            os.write(log, piece)
        at += len(piece)
        if lockstep:
            print(at, flush=True)
        else:
            time.sleep(0.001)
    if i % 3 == 2:  # an index entry every few batches, written in place like a memory map
        last = base + records - 1
        os.pwrite(index, struct.pack(">i", last), 8 * slot)
        os.pwrite(index, struct.pack(">i", position), 8 * slot + 4)
        os.pwrite(timeindex, struct.pack(">qi", 1000 + last, last), 12 * slot)
        slot += 1
    position = at
"""


def expected_rows(count: int) -> list[tuple[int, bytes]]:
    return [(o, b"value-%d" % o * (1 + o % 7)) for o in range(count)]


def rows(directory: Path, **options: object) -> list[tuple[int, bytes]]:
    table = kafka_segments_ds.read_table(str(directory), columns=["offset", "value"], **options)
    return list(zip(table["offset"].to_pylist(), table["value"].to_pylist(), strict=True))


def start_appender(
    directory: Path, batches: int, preallocate: bool, lockstep: bool
) -> subprocess.Popen[str]:
    args = [str(directory), str(batches), str(RECORDS), str(int(preallocate)), str(int(lockstep))]
    return subprocess.Popen(
        [sys.executable, "-c", APPENDER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def check_prefix(directory: Path) -> int:
    """Read the live segment (whole, and from an offset through the index); return the rows."""
    got = rows(directory)
    assert got == expected_rows(len(got))
    assert len(got) % RECORDS == 0  # whole batches only
    start = len(got) // 2
    bounded = rows(directory, startingOffsets=f'{{"live":{{"0":{start}}}}}')
    assert bounded == expected_rows(start + len(bounded))[start:]
    assert len(bounded) >= len(got) - start
    return len(got)


PREALLOCATE = pytest.mark.parametrize("preallocate", [False, True], ids=["append", "preallocated"])


@PREALLOCATE
def test_every_torn_state_reads_as_a_prefix(tmp_path: Path, preallocate: bool) -> None:
    """Lockstep: read after every piece the appender writes, so each torn state is seen."""
    directory = tmp_path / "live-0"
    directory.mkdir()
    batches = 30
    appender = start_appender(directory, batches, preallocate, lockstep=True)
    assert appender.stdin is not None and appender.stdout is not None
    seen = []
    try:
        for _ in range(batches * 4):
            appender.stdin.write("\n")
            appender.stdin.flush()
            appender.stdout.readline()
            seen.append(check_prefix(directory))
    finally:
        appender.stdin.close()
        appender.wait()
    assert appender.returncode == 0
    # after the 1st, 2nd and 3rd piece of a batch the reader sees the batches before it
    assert seen == [RECORDS * (i // 4 + (i % 4 == 3)) for i in range(batches * 4)]


@PREALLOCATE
def test_reads_during_appends_are_consistent_prefixes(tmp_path: Path, preallocate: bool) -> None:
    """Free-running: the appender does not wait for the reader."""
    directory = tmp_path / "live-0"
    directory.mkdir()
    appender = start_appender(directory, BATCHES, preallocate, lockstep=False)
    reads = 0
    try:
        while appender.poll() is None or reads == 0:
            if (directory / "00000000000000000000.log").exists():
                check_prefix(directory)
                reads += 1
    finally:
        appender.communicate()
    assert appender.returncode == 0
    assert rows(directory) == expected_rows(BATCHES * RECORDS)
