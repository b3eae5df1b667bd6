"""A process that appends to a segment as a live broker does: each batch written in several
pieces (so readers see torn batches), with a preallocated, zero-filled ``.index``/``.timeindex``
written in place as a broker's memory-mapped indexes are; with ``preallocate`` the ``.log`` itself
is zero-filled up front and written in place (Kafka's ``preallocate=true``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kafka_segments_ds

RECORDS = 3


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
