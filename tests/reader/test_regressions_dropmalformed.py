"""DROPMALFORMED keeps every intact entry: the fuzzer's regressions (issue 16), the phantom
row inside a damaged compressed wrapper (issue 12), and an independent campaign's two causes
(issue 23: a wrapper with an unknown magic byte read inside; a batch whose offsets go back
taken as the log end).

Expected rows come from kafka-python (an independent decoder) reading the intact entries on
their own (tests marked ``crosscheck``); offsets and entry positions are pinned as literals.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa
import pytest
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

import kafka_segments_ds
from kafka_segments_ds.errors import (
    CorruptSegmentError,
    InvalidOptionError,
    LimitExceededError,
    UnsupportedFormatError,
)
from kafka_segments_ds.records.builder import RecordSpec, encode_batch, encode_legacy_wrapper
from kafka_segments_ds.records.legacy import LOG_ENTRY
from kafka_segments_ds.schema import TIMESTAMP_TYPE

CASES = Path(__file__).resolve().parents[1] / "data" / "regressions" / "dropmalformed"
SEGMENT = "00000000000000000000"
COLUMNS = ["offset", "timestamp", "timestampType", "key", "value", "position"]
SNAPPY, LZ4 = 2, 3
T0 = 1_700_000_000_000

# case: (extra read options, positions of the intact entries returned, the offsets returned)
REGRESSIONS: dict[int, tuple[dict[str, Any], list[int], list[int]]] = {
    1: ({}, [161, 313, 515], list(range(1, 9))),
    2: ({"startingOffsets": '{"fz":{"0":0}}'}, [189, 585, 1012, 1259, 1703], list(range(1, 20))),
    3: ({"verifyChecksums": "false"}, [186, 582, 1009, 1256, 1700], list(range(1, 20))),
    4: ({}, [163, 315, 517], list(range(1, 9))),
    5: ({"verifyChecksums": "false"}, [189, 585, 1012, 1259, 1703], list(range(1, 20))),
    6: ({}, [157, 309, 511], list(range(1, 9))),
    7: ({}, [160, 312, 514], list(range(1, 9))),
    8: ({}, [0], list(range(0, 5))),
    9: ({"startingOffsets": '{"fz":{"0":4}}'}, [516], list(range(4, 9))),
    10: ({}, [189, 585, 1012, 1259, 1703], list(range(1, 20))),
}


def _rows(table: pa.Table) -> list[tuple]:
    stamps = table.column("timestamp").cast(TIMESTAMP_TYPE).cast(pa.timestamp("ms", "UTC"))
    table = table.set_column(1, "timestamp", stamps.cast(pa.int64()))
    return list(zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True))


def oracle_rows(log: bytes, positions: list[int], start_offset: int = 0) -> list[tuple]:
    """What kafka-python reads from the entries at ``positions``, each on its own."""
    out = []
    for position in positions:
        _, size = LOG_ENTRY.unpack_from(log, position)
        entry = log[position : position + 12 + size]
        batch = LegacyRecordBatch(entry, entry[16])
        assert batch.validate_crc()
        for record in batch:
            if record.offset >= start_offset:
                stamp = None if record.timestamp in (None, -1) else record.timestamp  # magic 0
                kind = -1 if record.timestamp_type is None else record.timestamp_type
                out.append((record.offset, stamp, kind, record.key, record.value, position))
    return out


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="kafka_segments_ds")


@pytest.mark.crosscheck
@pytest.mark.parametrize("case", sorted(REGRESSIONS))
def test_dropmalformed_returns_exactly_the_intact_entries(tmp_path: Path, case: int) -> None:
    options, positions, offsets = REGRESSIONS[case]
    partition = tmp_path / "fz-0"
    shutil.copytree(CASES / f"case{case}", partition)
    got = kafka_segments_ds.read_table(
        tmp_path,
        columns=COLUMNS,
        iteration="deep",
        mode="DROPMALFORMED",
        includeMetadata="true",
        **options,
    )
    assert got.column("offset").to_pylist() == offsets
    log = (partition / f"{SEGMENT}.log").read_bytes()
    assert _rows(got) == oracle_rows(log, positions, offsets[0])


# -- issue 12: no resynchronisation inside an entry whose size field is consistent -----------


def kafka_python_wrapper(codec: int, first: int, sizes: list[int], rng: random.Random) -> bytes:
    """A magic-1 wrapper built by kafka-python, stored as a broker stores it (the wrapper
    offset set to its last offset). A large incompressible value first makes the compressor
    give up looking for matches, so the last inner message is kept verbatim."""
    builder = LegacyRecordBatchBuilder(1, codec, 1 << 20)
    for i, size in enumerate(sizes):
        stamp = 1_700_000_000_000 + first + i
        builder.append(i, stamp, b"key-%d" % (first + i), rng.randbytes(size))
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, first + len(sizes) - 1)
    return bytes(data)


@pytest.mark.crosscheck
@pytest.mark.parametrize("codec", [SNAPPY, LZ4], ids=["snappy", "lz4"])
@pytest.mark.parametrize("followed", [True, False], ids=["followed", "at-the-end"])
def test_no_row_from_inside_a_damaged_wrapper(tmp_path: Path, codec: int, followed: bool) -> None:
    rng = random.Random(f"phantom {codec}")
    damaged = bytearray(kafka_python_wrapper(codec, 0, [20000, 50], rng))
    damaged[13] ^= 0xFF  # the stored CRC: the size field still lands on what follows
    intact = kafka_python_wrapper(codec, 2, [30, 40], rng)
    log = bytes(damaged) + (intact if followed else b"")
    partition = tmp_path / "t-0"
    partition.mkdir()
    (partition / f"{SEGMENT}.log").write_bytes(log)
    got = kafka_segments_ds.read_table(
        tmp_path, columns=COLUMNS, mode="DROPMALFORMED", includeMetadata="true"
    )
    assert _rows(got) == (oracle_rows(log, [len(damaged)]) if followed else [])
    assert got.column("offset").to_pylist() == ([2, 3] if followed else [])


# -- a v2 batch that contradicts itself never moves the ordering on ---------------------------


def _batch(base: int, n: int, *, deltas: list[int] | None = None, lod: int | None = None) -> bytes:
    specs = [
        RecordSpec(b"v%d" % (base + i), key=b"k", timestamp=T0 + i, offset_delta=d)
        for i, d in enumerate(deltas or [None] * n)
    ]
    return encode_batch(specs, base_offset=base, last_offset_delta=lod)


def _with_count(batch: bytes, count: int) -> bytes:
    """``batch`` with its recordCount field changed and its CRC-32C recomputed."""
    out = bytearray(batch)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.mark.parametrize(
    ("deltas", "count", "message"),
    [
        ([0, 5, 5], None, "record offset delta not increasing or beyond lastOffsetDelta"),
        ([0, 1, 101], None, "record offset delta not increasing or beyond lastOffsetDelta"),
        ([0, 1, 2], 2, "bytes left over after the declared record count"),
        ([0, 1, 2], 4, "varint runs past the end of its record"),
    ],
)
def test_self_contradicting_batch_is_dropped_whole(
    tmp_path: Path, deltas: list[int], count: int | None, message: str
) -> None:
    # the bad batch claims offsets 2..102 in its header; its records disagree with it
    good, bad, after = _batch(0, 2), _batch(2, 3, deltas=deltas, lod=100), _batch(3, 2)
    if count is not None:
        bad = _with_count(bad, count)
    path = _write_log(tmp_path, good + bad + after)
    with pytest.raises(CorruptSegmentError, match=message) as info:
        kafka_segments_ds.read_table(path)
    assert (info.value.position, info.value.offset) == (len(good), 2)
    got = kafka_segments_ds.read_table(path, mode="DROPMALFORMED")
    assert got.column("offset").to_pylist() == [0, 1, 3, 4]


# -- size bounds: every entry, wherever it sits in a read window ------------------------------


def _write_log(tmp_path: Path, data: bytes) -> str:
    partition = tmp_path / "t-0"
    partition.mkdir(exist_ok=True)
    path = partition / f"{SEGMENT}.log"
    path.write_bytes(data)
    return str(path)


def _big_and_small(tmp_path: Path) -> tuple[str, list[int], list[int], list[int]]:
    """Small batches with 9.4 KB batches between them: (path, positions of the big ones,
    offsets of the small ones, record count of each big one)."""
    entries, big, small, positions, offset = [], [], [], [], 0
    for i in range(12):
        if i % 3 == 1:
            specs = [RecordSpec(bytes(940) + b"%d" % j, timestamp=T0) for j in range(10)]
            positions.append(sum(map(len, entries)))
            big.append(len(specs))
        else:
            specs = [RecordSpec(b"small-%d" % j, timestamp=T0) for j in range(2)]
            small.extend(range(offset, offset + len(specs)))
        entries.append(encode_batch(specs, base_offset=offset))
        offset += len(specs)
    return _write_log(tmp_path, b"".join(entries)), positions, small, big


@pytest.mark.parametrize("chunk", [4096, 20_000, 1 << 20])
def test_max_batch_bytes_holds_for_every_batch(
    tmp_path: Path, chunk: int, caplog: pytest.LogCaptureFixture
) -> None:
    path, positions, small, big = _big_and_small(tmp_path)
    with pytest.raises(LimitExceededError) as info:
        kafka_segments_ds.read_table(path, maxBatchBytes=5000, readChunkBytes=chunk)
    err = info.value
    assert (err.position, err.offset) == (positions[0], 2)
    assert re.search(r"entry of 9\d{3} bytes exceeds maxBatchBytes 5000", str(err))
    caplog.set_level(logging.WARNING, logger="kafka_segments_ds")
    got = kafka_segments_ds.read_table(
        path, maxBatchBytes=5000, readChunkBytes=chunk, mode="DROPMALFORMED"
    )
    assert got.column("offset").to_pylist() == small
    summaries = [r.getMessage() for r in caplog.records if "DROPMALFORMED" in r.getMessage()]
    assert summaries == [
        f"{path}: DROPMALFORMED dropped {len(positions)} malformed entries ({len(positions)} "
        f"batches, 0 legacy messages) holding {sum(big)} records, and skipped 0 bytes that "
        "frame no entry"
    ]


# -- a size field grown over whole entries: the entry's own CRC proves where it ends ---------


@pytest.mark.crosscheck
@pytest.mark.parametrize("kind", ["v2", "legacy-wrapper"])
@pytest.mark.parametrize("content_damaged", [False, True], ids=["size-only", "size-and-content"])
def test_grown_size_field_is_proven_by_the_entrys_own_checksum(
    tmp_path: Path, kind: str, content_damaged: bool
) -> None:
    if kind == "v2":
        entries = [_batch(0, 2), _batch(2, 3), _batch(5, 1), _batch(6, 2)]
    else:
        rng = random.Random("grown")
        entries = [kafka_python_wrapper(SNAPPY, first, [40, 50], rng) for first in (0, 2, 4, 6)]
    grown = bytearray(entries[0])
    struct.pack_into(">i", grown, 8, len(entries[0]) - 12 + len(entries[1]))  # covers entry 1
    if content_damaged:
        grown[-2] ^= 0x41
    path = _write_log(tmp_path, bytes(grown) + b"".join(entries[1:]))
    with pytest.raises(CorruptSegmentError) as info:
        kafka_segments_ds.read_table(path)
    assert info.value.position == 0
    got = kafka_segments_ds.read_table(path, mode="DROPMALFORMED")
    # Entry 0 (its size field is damaged) is dropped. Entry 1 lies inside its declared
    # extent: entry 0's CRC over its true extent proves it an entry of its own; when entry 0's
    # content is damaged too nothing can (RELIABILITY R3b) and it is skipped with entry 0.
    first_kept = 5 if kind == "v2" else 4
    want = list(range(first_kept if content_damaged else 2, 8))
    assert got.column("offset").to_pylist() == want


# -- issue 23 point 5: an independent fuzz campaign ------------------------------------------
# ../shared/regressions/independent-fuzz/README.md: the expected results come from an
# independent decoder walking the same bytes entry by entry.

INDEPENDENT = Path(__file__).resolve().parents[2].parent / "shared" / "regressions"
INDEPENDENT = INDEPENDENT / "independent-fuzz"


def independent(tmp_path: Path, name: str) -> Path:
    """The campaign's partition directory ``name``, copied to ``tmp_path/fz-0``."""
    source = INDEPENDENT / name
    if not source.is_dir():
        pytest.skip(f"{source} is absent (../shared is not next to the repository)")
    shutil.copytree(source, tmp_path / "fz-0")
    return tmp_path / "fz-0"


def _offsets(path: Path, **options: Any) -> list[int]:
    table = kafka_segments_ds.read_table(path, columns=["offset"], **options)
    return table.column("offset").to_pylist()


@pytest.mark.parametrize("iteration", ["deep", "shallow"])
@pytest.mark.parametrize("verify", ["true", "false"])
def test_independent_phantom_after_bad_magic(tmp_path: Path, iteration: str, verify: str) -> None:
    """The entry at byte 0 has magic byte 19 and a consistent size field: skipped whole (no
    row with offset 2679629219935289345 from inside its compressed payload), and the intact
    entries at 2363 and 2515 (offsets 2 and 3) are read."""
    partition = independent(tmp_path, "phantom-after-bad-magic")
    got = _offsets(partition, mode="DROPMALFORMED", iteration=iteration, verifyChecksums=verify)
    assert got == [2, 3]


def test_independent_phantom_after_bad_magic_b(tmp_path: Path) -> None:
    partition = independent(tmp_path, "phantom-after-bad-magic-b")
    got = _offsets(partition, mode="DROPMALFORMED", iteration="deep")
    assert got == [*range(322977, 322982), *range(322984, 322993)]


@pytest.mark.parametrize(
    ("name", "position", "offset", "magic"),
    [("phantom-after-bad-magic", 0, 1, 19), ("phantom-after-bad-magic-b", 417, 322983, 184)],
)
def test_independent_bad_magic_failfast(
    tmp_path: Path, name: str, position: int, offset: int, magic: int
) -> None:
    partition = independent(tmp_path, name)
    with pytest.raises(UnsupportedFormatError, match=f"unknown magic byte {magic}") as info:
        kafka_segments_ds.read_table(partition)
    log = next(partition.glob("*.log"))
    assert (info.value.path, info.value.position, info.value.offset) == (
        str(log),
        position,
        offset,
    )


@pytest.mark.parametrize(
    ("name", "start", "last", "position"),
    [
        ("log-end-after-backwards-batch-a", 10, 23, 3708),
        ("log-end-after-backwards-batch-b", 7, 10, 1059),
    ],
)
def test_independent_log_end_after_backwards_batch(
    tmp_path: Path, name: str, start: int, last: int, position: int
) -> None:
    """The log ends with a checksum-valid batch whose offsets go back: the reader drops it, so
    it is not the log end offset either; a valid startingOffsets is read, not refused."""
    partition = independent(tmp_path, name)
    assert _offsets(partition, mode="DROPMALFORMED") == list(range(last + 1))
    starting = f'{{"fz":{{"0":{start}}}}}'
    got = _offsets(partition, mode="DROPMALFORMED", startingOffsets=starting)
    assert got == list(range(start, last + 1))
    with pytest.raises(CorruptSegmentError, match="offsets not increasing") as info:
        kafka_segments_ds.read_table(partition, mode="FAILFAST", startingOffsets=starting)
    log = partition / f"{SEGMENT}.log"
    assert (info.value.path, info.value.position, info.value.offset) == (str(log), position, 0)
    # past the end the reader's log end: refused, naming the end by the reader's rules
    past = f'{{"fz":{{"0":{last + 2}}}}}'
    with pytest.raises(InvalidOptionError, match=f"after the ending offset {last + 1} "):
        kafka_segments_ds.read_table(partition, mode="DROPMALFORMED", startingOffsets=past)


# -- the same shapes built here, so they run without ../shared --------------------------------


def _unknown_magic(entry: bytes, magic: int) -> bytes:
    out = bytearray(entry)
    out[16] = magic
    return bytes(out)


def _project_wrapper(codec: int, last: int, sizes: list[int], rng: random.Random) -> bytes:
    """A magic-0 wrapper by the project's builder: absolute inner offsets up to ``last``; the
    large incompressible value first keeps the last inner message verbatim."""
    specs = [
        RecordSpec(rng.randbytes(size), key=b"key-%d" % i, timestamp=T0 + i)
        for i, size in enumerate(sizes)
    ]
    return encode_legacy_wrapper(specs, last_offset=last, magic=0, compression=codec)


@pytest.mark.crosscheck
@pytest.mark.parametrize("codec", [SNAPPY, LZ4], ids=["snappy", "lz4"])
@pytest.mark.parametrize("magic", [3, 19, 100, 161, 255])
@pytest.mark.parametrize("inner", ["relative", "absolute-huge"])
def test_no_row_from_inside_a_wrapper_with_an_unknown_magic_byte(
    tmp_path: Path, codec: int, magic: int, inner: str
) -> None:
    """A wrapper whose magic byte is damaged, its size field consistent: skipped whole. Read
    inside, its verbatim inner message gave an invented row (offset 1 of a magic-1 wrapper's
    relative offsets at 10..11; a huge offset of a magic-0 one, after which the intact entry
    at 12..13 was dropped as "offsets not increasing")."""
    rng = random.Random(f"bad magic {codec} {inner}")
    if inner == "relative":
        wrapper = kafka_python_wrapper(codec, 10, [20000, 50], rng)
    else:
        wrapper = _project_wrapper(codec, 2**62, [20000, 50], rng)
    damaged = _unknown_magic(wrapper, magic)
    intact = kafka_python_wrapper(codec, 12, [30, 40], rng)
    log = damaged + intact
    path = _write_log(tmp_path, log)
    for iteration, verify in itertools.product(("deep", "shallow"), ("true", "false")):
        got = kafka_segments_ds.read_table(
            tmp_path,
            columns=COLUMNS,
            mode="DROPMALFORMED",
            includeMetadata="true",
            iteration=iteration,
            verifyChecksums=verify,
        )
        want = [12, 13] if iteration == "deep" else [13]
        assert got.column("offset").to_pylist() == want, (iteration, verify)
        if iteration == "deep":
            assert _rows(got) == oracle_rows(log, [len(damaged)])
    with pytest.raises(UnsupportedFormatError, match=f"unknown magic byte {magic} ") as info:
        kafka_segments_ds.read_table(tmp_path)
    offset = 10 + 1 if inner == "relative" else 2**62
    assert (info.value.path, info.value.position, info.value.offset) == (path, 0, offset)
