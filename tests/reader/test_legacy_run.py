"""The legacy window decoder (reader/legacy.py): its columnar path returns what its per-entry
path (the reference decoder, records/legacy.py, one entry at a time) returns, rows and errors
alike, on logs of magic-0/1 messages, wrappers and v2 batches, intact or damaged, whatever the
options."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import KafkaSegmentsError
from kafka_segments_ds.reader import legacy as LG
from kafka_segments_ds.reader import source as S
from kafka_segments_ds.reader import wrappers as L
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records import legacy_kernels as LK
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_legacy_message,
)
from kafka_segments_ds.records.compression import compress
from kafka_segments_ds.records.legacy import decode_legacy_message, iter_inner_messages
from tests.reader.test_read_ahead import _Inline

TS = 1_700_000_000_000
blobs = st.one_of(st.none(), st.binary(max_size=12))
# wrappers as brokers write them, and as the reference decoder refuses or takes them
VARIANTS = ["ok", "ok", "ok", "producer0", "contradict", "inner0", "trailing", "null", "empty"]
# an entry: ("plain", magic, log-append-time, key, value) |
# ("wrapper", magic, codec, n, log-append-time, variant) | ("v2", n) |
# ("jump", delta): the next offset moves (backwards too) | ("segment", delta): a new segment
# starts, its base offset the next offset + delta
plain = st.tuples(st.just("plain"), st.sampled_from([0, 1]), st.booleans(), blobs, blobs)


def wrappers(most: int, variants: list[str]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(
        st.just("wrapper"),
        st.sampled_from([0, 1]),
        st.sampled_from([1, 2, 3]),
        st.integers(1, most),
        st.booleans(),
        st.sampled_from(variants),
    )


entries = st.lists(
    st.one_of(
        plain,
        wrappers(5, VARIANTS),
        st.tuples(st.just("v2"), st.integers(1, 3)),
        st.tuples(st.just("jump"), st.integers(-3, 4)),
        st.tuples(st.just("segment"), st.sampled_from([-2, 0, 0, 1])),
    ),
    min_size=1,
    max_size=25,
)
options = st.fixed_dictionaries(
    {},
    optional={
        "iteration": st.sampled_from(["deep", "shallow"]),
        "mode": st.sampled_from(["FAILFAST", "DROPMALFORMED"]),
        "verifyChecksums": st.booleans(),
        "includeMetadata": st.just(True),
        "startingOffsets": st.integers(0, 20).map(lambda o: f'{{"t":{{"0":{o}}}}}'),
        "endingOffsets": st.integers(20, 50).map(lambda o: f'{{"t":{{"0":{o}}}}}'),
        "readChunkBytes": st.sampled_from([4096]),
        "maxDecompressedBytes": st.sampled_from([1024]),  # the least allowed
    },
)


def _wrapper(offset: int, magic: int, codec: int, n: int, lat: bool, variant: str) -> bytes:
    """A wrapper of ``n`` messages from ``offset``; inner timestamps of their own, which
    LogAppendTime replaces by the wrapper's."""
    inner_magic = 0 if variant == "inner0" else magic
    relative = [offset + i if magic == 0 else i for i in range(n)]
    if variant == "contradict":
        relative = relative[::-1] if n > 1 else [-1]
    inner = b"".join(
        encode_legacy_message(
            offset=o, magic=inner_magic, key=b"k%d" % i, value=b"v" * (i * 60), timestamp=TS + i
        )
        for i, o in enumerate(relative)
    )
    if variant == "trailing":
        inner += bytes(range(20))
    value = (
        None
        if variant == "null"
        else compress(codec, b"" if variant == "empty" else inner, magic=magic)
    )
    return encode_legacy_message(
        offset=0 if variant == "producer0" and magic == 1 else offset + n - 1, magic=magic,
        key=None, value=value, timestamp=TS + 99,
        attributes=codec | (0x08 if lat and magic == 1 else 0),
    )  # fmt: skip


def _log(spec: list[tuple[Any, ...]]) -> list[tuple[int, bytes]]:
    """Segments: (base offset, bytes)."""
    segments, out, offset, base = [], b"", 0, 0
    for entry in spec:
        if entry[0] == "plain":
            _, magic, lat, key, value = entry
            attributes = 0x08 if lat and magic == 1 else 0
            out += encode_legacy_message(
                offset=offset, magic=magic, key=key, value=value, timestamp=TS + offset,
                attributes=attributes,
            )  # fmt: skip
            offset += 1
        elif entry[0] == "wrapper":
            out += _wrapper(offset, *entry[1:])
            offset += entry[3]
        elif entry[0] == "v2":
            specs = [RecordSpec(key=None, value=b"b%d" % i, timestamp=TS) for i in range(entry[1])]
            out += encode_batch(specs, base_offset=offset)
            offset += entry[1]
        elif entry[0] == "jump":
            offset = max(0, offset + entry[1])
        elif out:
            segments.append((base, out))
            out, base = b"", max(base + 1, offset + entry[1])
    return [*segments, (base, out)]


def _read(path: Path, opts: dict[str, Any]) -> pa.Table | tuple[str, str]:
    try:
        return ksd.read_table(str(path), **opts)
    except KafkaSegmentsError as err:
        return type(err).__name__, str(err)


def _per_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every legacy entry through the per-entry path (the kernels find nothing to decode)."""

    def nothing(buf: np.ndarray, positions: np.ndarray, verify: bool) -> tuple[np.ndarray, int]:
        return np.empty((LK.N_FIELDS, len(positions)), np.int64), 0

    def bad(buf: np.ndarray, verify: bool) -> tuple[np.ndarray, bool, int]:
        return np.empty((LK.N_FIELDS, 0), np.int64), True, 0

    monkeypatch.setattr(LK, "read_messages", nothing)
    monkeypatch.setattr(LK, "walk_inner", bad)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries, options, st.lists(st.tuples(st.floats(0, 0.999), st.integers(1, 255)), max_size=2))
def test_the_columnar_path_returns_what_the_per_entry_path_returns(
    spec: list[tuple[Any, ...]], opts: dict[str, Any], damage: list[tuple[float, int]]
) -> None:
    segments = _log(spec)
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        partition = Path(tmp) / "t-0"
        partition.mkdir()
        for base, data in segments:
            damaged = bytearray(data)
            for where, mask in damage if damaged else []:
                damaged[int(where * len(damaged))] ^= mask
            (partition / f"{base:020d}.log").write_bytes(bytes(damaged))
        monkeypatch.setattr(K, "MAX_THREADS", 2)  # windows read (and decompressed) ahead ...
        monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline())  # ... every time
        fast = _read(partition, opts)
        _per_entry(monkeypatch)
        slow = _read(partition, opts)
    if isinstance(fast, pa.Table) and isinstance(slow, pa.Table):
        assert fast.equals(slow)
    else:
        assert fast == slow


def test_a_stretch_of_plain_messages_is_decoded_by_one_kernel_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys and values are those written; the kernel runs once for the run of 300 messages and
    the LogAppendTime wrapper among them (read deep: the wrapper path), and the per-entry path
    takes none of them."""
    log = b"".join(
        encode_legacy_message(offset=o, magic=1, key=b"k%d" % o, value=b"v" * (o % 7),
                              timestamp=TS + o)
        for o in range(150)
    )  # fmt: skip
    inner = b"".join(
        encode_legacy_message(offset=i, magic=1, key=None, value=b"w%d" % i, timestamp=TS + i)
        for i in range(3)
    )
    log += encode_legacy_message(
        offset=152, magic=1, key=None, value=compress(1, inner, magic=1), timestamp=TS + 7,
        attributes=1 | 0x08,  # gzip, LogAppendTime: the wrapper's timestamp is every message's
    )  # fmt: skip
    log += b"".join(
        encode_legacy_message(offset=o, magic=0, key=None, value=b"m%d" % o)
        for o in range(153, 303)
    )
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    segment.write_bytes(log)
    calls = []
    real = LK.read_messages

    def counted(buf: np.ndarray, positions: np.ndarray, verify: bool) -> tuple[np.ndarray, int]:
        calls.append(len(positions))
        return real(buf, positions, verify)  # type: ignore[no-any-return]

    monkeypatch.setattr(LK, "read_messages", counted)
    one_by_one: list[int] = []
    real_one = LG._one_entry
    monkeypatch.setattr(LG, "_one_entry", lambda *a: one_by_one.append(1) or real_one(*a))
    table = ksd.read_table(str(segment.parent), includeMetadata=True)
    assert calls == [301]
    assert one_by_one == []
    assert table["offset"].to_pylist() == list(range(303))
    assert table["key"].to_pylist()[:150] == [b"k%d" % o for o in range(150)]
    assert table["key"].to_pylist()[150:] == [None] * 153
    assert table["value"].to_pylist()[148:156] == [
        b"v" * 1, b"v" * 2, b"w0", b"w1", b"w2", b"m153", b"m154", b"m155",
    ]  # fmt: skip
    assert table["timestampType"].to_pylist()[149:154] == [0, 1, 1, 1, -1]
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    assert ts[149:153] == [(TS + 149) * 1000, (TS + 7) * 1000, (TS + 7) * 1000, (TS + 7) * 1000]
    assert table["magic"].to_pylist()[149:154] == [1, 1, 1, 1, 0]


@pytest.mark.parametrize("codec", [1, 2, 3])
def test_the_read_ahead_decompresses_the_wrappers_of_the_next_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codec: int
) -> None:
    """Windows of wrappers read ahead: their payloads come from the helper's arena (the
    foreground decompresses only the first window's), and the rows are a one-thread read's."""
    log = b""
    for w in range(40):  # 40 wrappers of 5 incompressible messages: ~20 windows of 4 KiB
        inner = b"".join(
            encode_legacy_message(
                offset=i, magic=1, key=b"k%d" % (5 * w + i),
                value=random.Random(5 * w + i).randbytes(300), timestamp=TS,
            )
            for i in range(5)
        )  # fmt: skip
        log += encode_legacy_message(
            offset=5 * w + 4, magic=1, key=None, value=compress(codec, inner, magic=1),
            timestamp=TS, attributes=codec,
        )  # fmt: skip
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    segment.write_bytes(log)
    monkeypatch.setattr(K, "MAX_THREADS", 1)
    alone = ksd.read_table(str(segment.parent), readChunkBytes=4096, includeMetadata=True)
    assert alone["offset"].to_pylist() == list(range(200))
    assert alone["value"].to_pylist()[7] == random.Random(7).randbytes(300)
    monkeypatch.setattr(K, "MAX_THREADS", 2)
    monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline())
    ahead: list[int] = []  # wrappers decompressed ahead, by window read ahead
    calls = {"helper": 0, "foreground": 0}
    where = ["foreground"]
    real_ahead, real_decompress = S.decompress_wrappers_ahead, L.decompress

    def spy(*args: Any) -> Any:
        where[0] = "helper"
        got = real_ahead(*args)
        where[0] = "foreground"
        ahead.append(0 if got is None else got.positions.shape[0])
        return got

    def counted(*args: Any, **kwargs: Any) -> bytes:
        calls[where[0]] += 1
        return real_decompress(*args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(S, "decompress_wrappers_ahead", spy)
    monkeypatch.setattr(L, "decompress", counted)
    table = ksd.read_table(str(segment.parent), readChunkBytes=4096, includeMetadata=True)
    assert table.equals(alone)
    assert len(ahead) >= 15 and sum(ahead) == calls["helper"] >= 35
    assert calls["foreground"] == 40 - sum(ahead)  # the first window's, read in the foreground


def test_wrappers_are_decompressed_once_however_many_faults_a_window_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 wrappers in one window, every 10th going back in offsets (DROPMALFORMED drops it and
    reads on after it): each is decompressed once, the dropped ones too (the per-entry path
    judges them as the wrapper path walked them); not once more for every fault before it."""
    log, offset = b"", 0
    for w in range(300):
        back = w % 10 == 9
        log += _wrapper(offset - 5 if back else offset, 1, 1, 3, False, "ok")
        offset += 0 if back else 3
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    segment.write_bytes(log)
    monkeypatch.setattr(K, "MAX_THREADS", 1)
    calls = []
    real = L.decompress
    monkeypatch.setattr(L, "decompress", lambda *a, **k: calls.append(1) or real(*a, **k))
    table = ksd.read_table(str(segment.parent), mode="DROPMALFORMED", readChunkBytes=1 << 20)
    assert table["offset"].to_pylist() == list(range(270 * 3))
    assert len(calls) == 300


def _faulty_log(path: Path, wrappers: int) -> Path:
    """Gzip wrappers of 3 incompressible messages, every 10th going back in offsets."""
    log, offset = b"", 0
    for w in range(wrappers):
        back = w % 10 == 9
        inner = b"".join(
            encode_legacy_message(
                offset=i, magic=1, key=None, value=random.Random(w * 3 + i).randbytes(200),
                timestamp=TS,
            )
            for i in range(3)
        )  # fmt: skip
        log += encode_legacy_message(
            offset=offset - 5 + 2 if back else offset + 2, magic=1, key=None,
            value=compress(1, inner, magic=1), timestamp=TS, attributes=1,
        )  # fmt: skip
        offset += 0 if back else 3
    segment = path / "t-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    segment.write_bytes(log)
    return segment


def test_after_a_fault_the_read_ahead_does_not_decompress_until_a_window_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A damaged log read ahead: the reader resumes after each fault elsewhere than the window
    read ahead, so the read-ahead that follows a fault only reads; the wrappers are
    decompressed hardly more often than with one thread."""
    segment = _faulty_log(tmp_path, 300)
    calls: dict[int, int] = {}
    real = L.decompress

    def counted(*args: Any, **kwargs: Any) -> bytes:
        calls[threads] = calls.get(threads, 0) + 1
        return real(*args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(L, "decompress", counted)
    monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline())
    tables = []
    for threads in (1, 2):
        monkeypatch.setattr(K, "MAX_THREADS", threads)
        tables.append(
            ksd.read_table(str(segment.parent), mode="DROPMALFORMED", readChunkBytes=8192)
        )
    assert tables[0].equals(tables[1])
    assert tables[0]["offset"].to_pylist() == list(range(270 * 3))
    assert calls[1] == 300
    assert calls[2] <= 300 + 300 // 10 * 2  # (at most a window's worth after each fault)


def test_a_read_ahead_the_reader_does_not_take_is_called_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    segment = _faulty_log(tmp_path, 40)
    src = S.SegmentSource(pafs.LocalFileSystem(), str(segment), segment.stat().st_size)
    src.max_decompressed = 1 << 20
    monkeypatch.setattr(K, "MAX_THREADS", 2)
    monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline())
    asked: list[Any] = []
    real = src._scan
    monkeypatch.setattr(src, "_scan", lambda *a: asked.append(a[4]) or real(*a))
    try:
        second = src.scan_window(0, 4096).stop  # where the first window's entries end
        src.prefetch(second, 4096, True)
        assert asked[-1]() is False
        taken = src.scan_window(second, 4096)  # the window read ahead, its wrappers ...
        assert taken.decompressed is not None and asked[-1]() is False  # ... decompressed
        third = second + taken.stop
        src.prefetch(third, 4096, True)
        src.scan_window(100, 4096)  # not the window read ahead: the helper is told to stop
        assert asked[-1]() is True
    finally:
        src.close()


def test_the_read_ahead_stops_decompressing_when_called_off(tmp_path: Path) -> None:
    data = np.frombuffer(_faulty_log(tmp_path, 12).read_bytes(), np.uint8)
    positions, magics, _, _ = K.hop_entries(data, 0, data.shape[0])
    calls: list[int] = []

    def called_off() -> bool:
        calls.append(1)
        return len(calls) > 3

    arena = lambda n: np.empty(n, np.uint8)  # noqa: E731
    assert L.decompress_wrappers_ahead(data, positions, magics, True, 1 << 20, arena) is not None
    got = L.decompress_wrappers_ahead(data, positions, magics, True, 1 << 20, arena, called_off)
    assert got is None and len(calls) == 4  # asked before each wrapper, stopped at the 4th


intact = st.lists(
    st.one_of(
        plain,
        wrappers(40, ["ok", "ok", "inner0"]),  # a few rows (added row by row) or many (arrays)
        st.tuples(st.just("jump"), st.integers(1, 3)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(intact, st.sampled_from(["deep", "shallow"]), st.sampled_from([1, 2]))
def test_an_intact_log_reads_as_the_reference_decoder_decodes_it(
    spec: list[tuple[Any, ...]], iteration: str, threads: int
) -> None:
    """Rows against the reference decoder alone (records/legacy.py), message by message: what
    the per-entry path shares with the columnar one (the row builders) is checked too."""
    [(_, data)] = _log(spec)
    expected, pos = [], 0
    while pos < len(data):
        message = decode_legacy_message(data, pos)
        deep = iteration == "deep" and message.compression != 0
        for m in iter_inner_messages(message) if deep else [message]:
            stamp = None if m.timestamp == -1 else m.timestamp * 1000
            expected.append((m.offset, stamp, m.timestamp_type, m.key, m.value))
        pos += 12 + message.size
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        segment = Path(tmp) / "t-0" / "00000000000000000000.log"
        segment.parent.mkdir()
        segment.write_bytes(data)
        monkeypatch.setattr(K, "MAX_THREADS", threads)
        monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline())
        table = ksd.read_table(str(segment.parent), iteration=iteration, readChunkBytes=4096)
    stamps = table["timestamp"].cast(pa.int64()).to_pylist()
    got = zip(
        table["offset"].to_pylist(), stamps, table["timestampType"].to_pylist(),
        table["key"].to_pylist(), table["value"].to_pylist(), strict=True,
    )  # fmt: skip
    assert list(got) == expected
