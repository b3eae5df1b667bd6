"""Both kernel paths: the compiled extensions and the pure-Python fallback.

* In this process: each compiled kernel against its pure-Python twin (``PURE_PYTHON`` of the
  kernel modules) on the same random inputs, outputs compared exactly.
* A read_table / write_table round trip and a CLI ``dump --format jsonl``, checked against the
  reference decoders (records/v2.py) and json.dumps: run here on whichever path is active.
* A child pytest with ``KAFKA_SEGMENTS_DS_PURE_PYTHON=1`` runs the fast-path, kernel, CLI,
  writer and this module's round-trip tests on the pure-Python path.
* A broken extension gives exactly one warning naming the import error, and the package works.
* ``import kafka_segments_ds`` loads no kernel module.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kafka_segments_ds as ksd
from kafka_segments_ds.cli import jsonl_kernels as J
from kafka_segments_ds.records import crc_kernels as C
from kafka_segments_ds.records import encoder as E
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records import legacy_kernels as LK
from kafka_segments_ds.records._compiled import PURE_PYTHON_ENV
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.records.v2 import decode_batch_header, iter_records
from kafka_segments_ds.writer import columns as W

ROOT = Path(__file__).resolve().parent.parent
PURE = os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")
compiled_only = pytest.mark.skipif(
    not (K.COMPILED and C.COMPILED and E.COMPILED and J.COMPILED),
    reason="compares the compiled kernels with the pure-Python ones",
)

# -- records: (key, value, headers) of random shapes ------------------------------------------

blobs = st.one_of(st.none(), st.binary(max_size=40))
records = st.lists(
    st.tuples(
        blobs,
        blobs,
        st.lists(st.tuples(st.text(max_size=6), blobs), max_size=3),
        st.integers(-(2**40), 2**40),
    ),
    min_size=1,
    max_size=30,
)


def _log(
    recs: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
) -> bytes:
    out = b""
    for i in range(0, len(recs), 7):  # batches of up to 7 records
        chunk = recs[i : i + 7]
        specs = [
            RecordSpec(key=k, value=v, headers=tuple(h), timestamp=ts) for k, v, h, ts in chunk
        ]
        out += encode_batch(specs, base_offset=i)
    return out


@compiled_only
@settings(max_examples=60)
@given(records, st.integers(0, 40))
def test_record_kernels_agree(recs: list, damage: int) -> None:  # type: ignore[type-arg]
    data = bytearray(_log(recs))
    if damage and len(data) > 61:  # a byte of some record section changed: both must agree
        at = 61 + damage * 7919 % (len(data) - 61)
        data[at] ^= 0x5A
    buf = np.frombuffer(bytes(data), np.uint8)
    results = []
    for k in (K, K.PURE_PYTHON):
        get = (lambda n, k=k: getattr(k, n)) if k is K else (lambda n, k=k: k[n])
        pos, mag, outcome, stop = get("hop_entries")(buf, 0, len(buf))
        v2 = pos[mag == 2]
        h = get("parse_v2_headers")(buf, v2)
        n = len(v2)
        counts = np.clip(h[:, K.H_COUNT], 0, 64)
        row0 = np.zeros(n, np.int64)
        np.cumsum(counts[:-1], out=row0[1:])
        total = int(counts.sum())
        rows = [np.zeros(total, np.int64) for _ in range(9)]
        status, errpos = np.zeros(n, np.int32), np.zeros(n, np.int64)
        ends = v2 + h[:, K.H_LENGTH] + 12
        get("decode_v2_records")(
            buf, np.zeros(0, np.uint8), v2 + 61, ends, counts, row0, h[:, K.H_BASE_OFFSET],
            h[:, K.H_BASE_TS], h[:, K.H_MAX_TS], ((h[:, K.H_ATTRIBUTES] & 8) != 0).astype(np.int8),
            h[:, K.H_LOD], *rows, status, errpos,
        )  # fmt: skip
        crcs = np.zeros(n, np.int64)
        (C.batch_crcs_serial if k is K else C.PURE_PYTHON["batch_crcs_serial"])(
            buf, v2 + 21, ends, crcs
        )
        length = np.where(status[np.repeat(np.arange(n), counts)] == 0, rows[6], -1)
        offsets = np.zeros(total + 1, np.int32)
        size = get("binary_offsets")(length, offsets)
        gathered = np.zeros(size, np.uint8)
        bad = get("gather_into")(buf, np.zeros(0, np.uint8), rows[5], length, offsets, gathered)
        results.append(
            (pos.tolist(), mag.tolist(), outcome, stop, h.tolist(), status.tolist(),
             errpos.tolist(), [r.tolist() for r in rows], crcs.tolist(), offsets.tolist(),
             gathered.tolist(), bad,
             get("find_entry_candidate")(buf, 1, len(buf)),
             get("entry_last_offsets")(buf, pos, mag).tolist())
        )  # fmt: skip
    assert results[0] == results[1]
    if not damage:  # intact: the rows are the reference decoder's
        assert results[0][5] == [0] * len(results[0][5])
        assert results[0][7][0] == list(range(len(recs)))


def _columns(recs: list) -> E.RecordColumns:  # type: ignore[type-arg]
    table = pa.table(
        {
            "key": pa.array([r[0] for r in recs], pa.binary()),
            "value": pa.array([r[1] for r in recs], pa.large_binary()),
            "timestamp": pa.array([abs(r[3]) for r in recs], pa.timestamp("ms")),
            "headers": pa.array(
                [[{"key": hk, "value": hv} for hk, hv in r[2]] for r in recs],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    return W.record_columns(table, 0)


@compiled_only
@settings(max_examples=60)
@given(records, st.sampled_from([0, 1, 3]), st.sampled_from([100, 400, 16384]))
def test_encoder_kernels_agree(recs: list, codec: int, batch_bytes: int) -> None:  # type: ignore[type-arg]
    columns = _columns(recs)
    batch_settings = E.BatchSettings(compression=codec, batch_bytes=batch_bytes, producer_id=7)
    compiled = E.encode_v2(columns, batch_settings, first_offset=3)
    saved = {name: getattr(E, name) for name in E.PURE_PYTHON}
    try:
        for name, function in E.PURE_PYTHON.items():
            setattr(E, name, function)
        pure = E.encode_v2(columns, batch_settings, first_offset=3)
    finally:
        for name, function in saved.items():
            setattr(E, name, function)
    assert bytes(compiled.data) == bytes(pure.data)
    assert compiled.positions.tolist() == pure.positions.tolist()
    assert compiled.last_rows.tolist() == pure.last_rows.tolist()
    if codec == 0:  # the reference decoder reads back every record
        data = bytes(compiled.data)
        got = [
            (r.key, r.value, r.offset)
            for p, s in zip(compiled.positions.tolist(), compiled.sizes.tolist(), strict=True)
            for r in iter_records(decode_batch_header(data, p), data[p + 61 : p + s])
        ]
        assert got == [(r[0], r[1], 3 + i) for i, r in enumerate(recs)]


@compiled_only
@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 63),
    st.sampled_from([0, 1, 3]),
    st.booleans(),
)
def test_streaming_gather_agrees_and_writes_only_its_slices(
    seed: int, misalign: int, jumps: int, split: bool
) -> None:
    """The compiled gather's streaming path (outputs from STREAM_MIN_BYTES up: whole lines by
    non-temporal stores, part lines plainly) against the pure-Python gather: the same bytes in
    the slices, nulls and bad slices as the contract says, and every byte outside the slices
    untouched (a part line another thread writes must not be overwritten), with the output
    starting off a line boundary, gaps in the output offsets, slices longer than the stage, one
    past the output's end, and the rows split in two calls (as between threads)."""
    from kafka_segments_ds.records import _kernels

    rng = np.random.default_rng(seed)
    n = 30_000
    src0 = rng.integers(0, 256, 3_000_000, dtype=np.uint8)
    src1 = rng.integers(0, 256, 500_000, dtype=np.uint8)
    length = rng.integers(-1, 150, n).astype(np.int64)
    in_src1 = rng.random(n) < 0.2
    pos = np.where(
        in_src1,
        rng.integers(src0.shape[0], src0.shape[0] + src1.shape[0] - 150, n),
        rng.integers(0, src0.shape[0] - 150, n),
    ).astype(np.int64)
    special = rng.choice(n - 1, 9, replace=False)
    bad_rows, long_rows, outside = special[:5], special[5:8], special[8]
    length[bad_rows] = 50
    pos[bad_rows[:3]] = src0.shape[0] - 10  # straddles the two sources: zeroed
    pos[bad_rows[3:]] = -5
    length[long_rows] = 9_000  # one slice across several flushes of the 4 KiB stage
    pos[long_rows] = rng.integers(0, src0.shape[0] - 9_000, 3)
    length[outside] = 50
    gaps = np.zeros(n, np.int64)
    gaps[rng.choice(n, jumps, replace=False)] = rng.integers(1, 200, jumps)
    offsets = (np.cumsum(np.maximum(length, 0) + gaps) - np.maximum(length, 0)).astype(np.int32)
    size = int(offsets[-1] + max(length[-1], 0)) + 100
    offsets[outside] = size - 10  # runs past the output's end: skipped
    assert size >= _kernels.STREAM_MIN_BYTES
    whole = np.full(size + 128, 0xAB, np.uint8)
    out = whole[misalign : misalign + size]
    expected = np.full(size, 0xAB, np.uint8)
    assert K.PURE_PYTHON["gather_into"](src0, src1, pos, length, offsets, expected) == 6
    cuts = [0, n // 2 + int(rng.integers(0, 100)), n] if split else [0, n]
    bad = sum(
        _kernels.gather_into(src0, src1, pos[a:b], length[a:b], offsets[a:b], out)
        for a, b in itertools.pairwise(cuts)
    )
    assert bad == 6
    assert np.array_equal(out, expected)
    assert (whole[:misalign] == 0xAB).all() and (whole[misalign + size :] == 0xAB).all()


@compiled_only
@pytest.mark.parametrize("streaming", [False, True])
def test_gather_copies_every_short_length_exactly(
    streaming: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slices of every length 0-200 (the inline copy of short ones, its overlapping tail
    pieces, and memcpy past it), ending at either source's last byte and starting at
    src1's first, on the plain and the streaming path: exactly the slices' bytes, nothing
    written before or after the output."""
    from kafka_segments_ds.records import _kernels

    monkeypatch.setattr(_kernels, "STREAM_MIN_BYTES", 1 if streaming else 1 << 62)
    rng = np.random.default_rng(7)
    src0 = rng.integers(0, 256, 5000, dtype=np.uint8)
    src1 = rng.integers(0, 256, 3000, dtype=np.uint8)
    both = np.concatenate([src0, src1])
    for m in range(201):
        pos = np.array([5000 - m, 5000, 8000 - m, 13, 5001, 0], np.int64)
        length = np.full(pos.shape[0], m, np.int64)
        offsets = np.arange(pos.shape[0], dtype=np.int32) * m
        whole = np.full(pos.shape[0] * m + 128, 0xAB, np.uint8)
        out = whole[64 : 64 + pos.shape[0] * m]
        assert _kernels.gather_into(src0, src1, pos, length, offsets, out) == 0
        assert out.tobytes() == b"".join(both[p : p + m].tobytes() for p in pos.tolist()), m
        assert (whole[:64] == 0xAB).all() and (whole[64 + out.shape[0] :] == 0xAB).all(), m


@compiled_only
@settings(max_examples=60)
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=20))
def test_murmur2_agrees(keys: list[bytes]) -> None:
    column = W.binary_column(pa.array(keys, pa.binary()))
    compiled = np.empty(len(keys), np.int32)
    pure = np.empty(len(keys), np.int32)
    W.murmur2(column.offsets, column.data, compiled)
    W.PURE_PYTHON["murmur2"](column.offsets, column.data, pure)
    assert compiled.tolist() == pure.tolist()


@compiled_only
@settings(max_examples=60)
@given(
    st.lists(st.one_of(st.none(), st.text(max_size=12)), min_size=1, max_size=12),
    st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=12),
)
def test_jsonl_kernels_agree(texts: list[str | None], ints: list[int | None]) -> None:
    strings = pa.array(texts, pa.string())
    _, offsets_buf, data_buf = strings.buffers()
    offsets = np.frombuffer(offsets_buf, np.int32, len(texts) + 1)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    valid = np.array([t is not None for t in texts])
    values = np.array([v or 0 for v in ints], np.int64)
    int_valid = np.array([v is not None for v in ints])
    outputs = []
    for k in (J, J.PURE_PYTHON):
        get = (lambda n, k=k: getattr(k, n)) if k is J else (lambda n, k=k: k[n])
        text_lengths = get("escaped_lengths")(offsets, data, valid)
        raw = get("raw_lengths")(offsets, valid, True)
        int_lengths = get("int_lengths")(values, int_valid)
        n = len(texts)
        out = np.zeros(int(text_lengths.sum() + raw.sum()) + 4 * n, np.uint8)
        cursor = np.zeros(n, np.int64)
        np.cumsum((text_lengths + raw + 4)[:-1], out=cursor[1:])
        get("write_escaped")(offsets, data, valid, text_lengths, out, cursor)
        get("write_raw")(offsets, data, valid, True, out, cursor)
        get("write_literal")(np.frombuffer(b"\n ! ", np.uint8), out, cursor)
        int_out = np.zeros(int(int_lengths.sum()), np.uint8)
        int_cursor = np.zeros(len(ints), np.int64)
        np.cumsum(int_lengths[:-1], out=int_cursor[1:])
        get("write_ints")(values, int_valid, int_out, int_cursor)
        outputs.append((out.tobytes(), int_out.tobytes(), cursor.tolist()))
    assert outputs[0] == outputs[1]
    first_text = texts[0]
    expected = json.dumps(first_text, ensure_ascii=False).encode()
    assert outputs[0][0][: len(expected)] == expected


# -- whole paths: run here, and on the pure-Python path by the child pytest -------------------


def test_write_read_round_trip_and_jsonl_dump(tmp_path: Path) -> None:
    n = 300
    table = pa.table(
        {
            "key": pa.array([None if i % 7 == 0 else f"k{i}".encode() for i in range(n)]),
            "value": pa.array([f'v"{i}\\\n\u00e9'.encode() * (i % 5) for i in range(n)]),
            "timestamp": pa.array([1_700_000_000_000 + i for i in range(n)], pa.timestamp("ms")),
            "headers": pa.array(
                [[{"key": "h", "value": bytes([i % 256])}] if i % 3 else [] for i in range(n)],
                pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
            ),
        }
    )
    root = tmp_path / "log"
    ksd.write_table(table, str(root), topic="t", numPartitions=1, compression="lz4")
    back = ksd.read_table(str(root), includeHeaders=True).sort_by("offset")
    assert back.column("offset").to_pylist() == list(range(n))
    assert back.column("key").to_pylist() == table.column("key").to_pylist()
    assert back.column("value").to_pylist() == table.column("value").to_pylist()
    assert [
        [(h["key"], h["value"]) for h in row] for row in back.column("headers").to_pylist()
    ] == [[(h["key"], h["value"]) for h in row] for row in table.column("headers").to_pylist()]
    segment = next(root.glob("t-0/*.log"))
    done = subprocess.run(
        [sys.executable, "-c", "import sys, kafka_segments_ds.cli as c; sys.exit(c.main())",
         "dump", str(segment), "--format", "jsonl", "--value", "utf8", "--limit", "40"],
        capture_output=True, check=True, env=dict(os.environ),
    )  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [row["offset"] for row in lines] == list(range(40))
    assert [row["value"] for row in lines] == [
        v.decode() for v in table.column("value").to_pylist()[:40]
    ]
    # byte for byte what json.dumps writes for the same row (the per-row reference)
    first = done.stdout.decode().splitlines()[1]
    assert first == json.dumps(json.loads(first), ensure_ascii=False)


@pytest.mark.skipif(PURE, reason="this is the child run")
def test_pure_python_path_passes_the_kernel_and_fast_path_tests() -> None:
    env = dict(os.environ, **{PURE_PYTHON_ENV: "1"})
    env.pop("HYPOTHESIS_PROFILE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         "tests/reader/test_fast_path.py", "tests/records/test_crc_kernels.py",
         "tests/records/test_varint.py", "tests/test_kernel_paths.py", "tests/cli/test_cli.py",
         "tests/writer/test_write_crosscheck.py", "tests/records/test_legacy_kernels.py",
         "tests/reader/test_legacy_run.py", "-m", "not spark"],
        cwd=ROOT, capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and " failed" not in done.stdout


def test_pure_python_path_is_what_the_environment_asks_for() -> None:
    assert K.COMPILED is C.COMPILED is E.COMPILED is J.COMPILED is LK.COMPILED
    if PURE:
        assert not K.COMPILED
        assert K.hop_entries is K.PURE_PYTHON["hop_entries"]
        assert LK.read_messages is LK.PURE_PYTHON["read_messages"]


_BROKEN = """
import sys, warnings
for name in ("_kernels", "_crc", "_encoder", "_legacy"):
    sys.modules["kafka_segments_ds.records." + name] = None  # import raises ImportError
sys.modules["kafka_segments_ds.cli._jsonl"] = None
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import kafka_segments_ds as ksd
    from kafka_segments_ds.cli import jsonl_kernels
    from kafka_segments_ds.records import crc_kernels, encoder, kernels
    from kafka_segments_ds.writer import columns
    table = ksd.read_table(sys.argv[1])
print(len(caught), kernels.COMPILED, table.num_rows)
print(caught[0].category.__name__, caught[0].message)
"""


def test_a_broken_extension_gives_one_warning_and_the_package_still_reads(
    sample_dir: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    done = subprocess.run(
        [sys.executable, "-c", _BROKEN, str(sample_dir)],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    count, compiled, rows = done.stdout.splitlines()[0].split()
    assert (count, compiled) == ("1", "False")
    assert int(rows) == ksd.read_table(str(sample_dir)).num_rows
    message = done.stdout.splitlines()[1]
    assert message.startswith("RuntimeWarning kafka_segments_ds: the compiled kernels did not load")
    assert "(ModuleNotFoundError: import of kafka_segments_ds." in message


def test_importing_the_package_loads_no_kernels() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, kafka_segments_ds; print(sorted(m for m in "
         "sys.modules if 'kernels' in m or m.split('.')[-1] in ('_crc', '_encoder', '_jsonl',"
         " '_legacy')))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"


KERNEL_PATHS = {"active": {n: getattr(K, n) for n in K.PURE_PYTHON}, "pure": K.PURE_PYTHON}


@pytest.mark.parametrize("path", sorted(KERNEL_PATHS))
def test_positions_outside_the_buffer_raise_instead_of_reading_past_it(path: str) -> None:
    kernels = KERNEL_PATHS[path]
    buf = np.frombuffer(_log([(b"k", b"v", [], 5)]), np.uint8)
    with pytest.raises(ValueError, match="outside a buffer"):
        kernels["hop_entries"](buf, 0, len(buf) + 1)
    with pytest.raises(ValueError, match="no 61-byte batch header at position 20"):
        kernels["parse_v2_headers"](buf, np.array([20], np.int64))
    with pytest.raises(ValueError, match="no entry header"):
        kernels["entry_last_offsets"](buf, np.array([len(buf) - 4]), np.array([2], np.int8))
    rows = [np.zeros(1, np.int64) for _ in range(9)]
    with pytest.raises(ValueError, match="batch 0"):  # a span past the end of the buffer
        kernels["decode_v2_records"](
            buf, np.zeros(0, np.uint8), np.array([61]), np.array([len(buf) + 9]),
            np.array([1]), np.array([0]), np.array([0]), np.array([0]), np.array([0]),
            np.array([0], np.int8), np.array([0]), *rows, np.zeros(1, np.int32),
            np.zeros(1, np.int64),
        )  # fmt: skip
    # a find that starts inside the last 17 bytes finds nothing, and reads nothing past the end
    assert kernels["find_entry_candidate"](buf, len(buf) - 5, len(buf)) == -1


@pytest.mark.parametrize("path", sorted(KERNEL_PATHS))
def test_a_last_offset_past_the_int64_range_wraps_on_both_paths(path: str) -> None:
    """A damaged baseOffset of 2**63 - 1 plus a lastOffsetDelta of 5 wraps as int64 arithmetic
    does, on both paths (the pure-Python one raised OverflowError: fuzz 981558216:541)."""
    buf = np.zeros(64, np.uint8)
    buf[0:8] = np.frombuffer((2**63 - 1).to_bytes(8, "big"), np.uint8)
    buf[16] = 2
    buf[23:27] = np.frombuffer((5).to_bytes(4, "big"), np.uint8)
    got = KERNEL_PATHS[path]["entry_last_offsets"](buf, np.array([0]), np.array([2], np.int8))
    assert got.tolist() == [-(2**63) + 4]
    # and so does the head a tail walk reads (it counted such a batch: 20261130:17811)
    from kafka_segments_ds.records.batches import decode_entry_head

    buf[8:12] = np.frombuffer((52).to_bytes(4, "big"), np.uint8)
    head = decode_entry_head(buf, 0)
    assert head is not None
    assert (head.offset, head.last_offset) == (2**63 - 1, -(2**63) + 4)


def _fresh_region(size: int) -> np.ndarray:
    """An anonymous mapping (no page mapped until touched), huge pages off (with transparent huge
    pages "always", one write would map 2 MiB)."""
    import mmap

    region = mmap.mmap(-1, size)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        region.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(region, np.uint8)


@compiled_only
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore/madvise: Linux")
def test_populate_maps_pages_and_changes_no_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefaulting maps a fresh buffer's pages and changes no byte: pages written before keep
    their bytes, the others stay zero; and prefault_back_half on the kernels' pool while the
    gather writes the same buffer (as binary_column does) leaves exactly the gathered bytes."""
    import mmap

    from kafka_segments_ds.records import _kernels

    size = 8 << 20
    page = mmap.PAGESIZE
    data = _fresh_region(size)
    written = np.arange(0, size, 3 * page)
    data[written] = 0x5A
    if _kernels.mapped(data, page) is not False:
        pytest.skip("mincore does not report this mapping's pages")
    if not _kernels.populate(data, 0, size // 4):
        pytest.skip("the kernel refuses MADV_POPULATE_WRITE (before Linux 5.14, or a sandbox)")
    assert _kernels.mapped(data, page) is True
    assert _kernels.mapped(data, size // 2 + page) is False
    assert _kernels.populate(data, 10, 20) is False  # no whole page inside
    with pytest.raises(ValueError):
        _kernels.populate(data, 0, size + 1)
    expected = np.zeros(size, np.uint8)
    expected[written] = 0x5A
    assert np.array_equal(data, expected)

    monkeypatch.setattr(K, "MAX_THREADS", 2)
    K.use_threads(0)  # this thread's next kernel calls: one thread each
    rng = np.random.default_rng(3)
    src = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    n = 60_000
    length = rng.integers(0, 200, n).astype(np.int64)
    pos = rng.integers(0, src.shape[0] - 200, n).astype(np.int64)
    offsets = np.zeros(n + 1, np.int32)
    total = K.binary_offsets(length, offsets)
    out = _fresh_region(total)
    settle = K.prefault_back_half(out)
    assert settle is not None
    assert K.gather_into(src, np.zeros(0, np.uint8), pos, length, offsets, out) == 0
    settle()  # waits for the helper, or calls it off if it has not started
    assert out.tobytes() == b"".join(
        src[p : p + m].tobytes() for p, m in zip(pos.tolist(), length.tolist(), strict=True)
    )
    assert K.prefault_back_half(out[: 1 << 19]) is None  # below PREFAULT_MIN_BYTES
    monkeypatch.setattr(K, "MAX_THREADS", 1)
    assert K.prefault_back_half(_fresh_region(size)) is None  # no thread to spare
