"""The read-ahead window: a read-ahead the helper thread has not started when its window is
asked for is called off and the window read in the foreground, with the same result; and what
the helper decompresses ahead."""

from __future__ import annotations

import struct
import threading
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.reader import source as S
from kafka_segments_ds.reader import v2 as V
from kafka_segments_ds.reader.rows import Parts
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.records.compression import CompressionType, decompress
from tests.reader.test_damage import recompute_v2_crc


def _segment(make_partition) -> Path:
    part = make_partition("t-0")
    for i in range(4):
        part.batch([1000 + 2 * i, 1001 + 2 * i])
    return sorted(part.close().glob("*.log"))[0]


class _Inline:
    """A read-ahead pool that runs each job as it is submitted (and lists them)."""

    def __init__(self, submitted: list | None = None) -> None:
        self.submitted = [] if submitted is None else submitted

    def submit(self, fn, *args):
        self.submitted.append(args)
        done: Future = Future()
        done.set_result(fn(*args))
        return done


def _window(src: S.SegmentSource, position: int, length: int) -> tuple[bytes, list[int], int]:
    got = src.scan_window(position, length)
    return got.window.tobytes(), got.positions.tolist(), got.stop


def test_a_read_ahead_not_started_is_called_off_and_read_in_the_foreground(
    make_partition, monkeypatch
):
    monkeypatch.setattr(K, "MAX_THREADS", 2)  # one thread: a local file is not read ahead
    log = _segment(make_partition)
    data = log.read_bytes()
    fs = pafs.LocalFileSystem()
    with_helper = S.SegmentSource(fs, str(log), len(data))
    with_helper.prefetch(0, len(data), checksums=True)
    expected = _window(with_helper, 0, len(data))  # the helper's window
    with_helper.close()

    release = threading.Event()
    pool = S._prefetch_pool()
    blockers = [pool.submit(release.wait) for _ in range(pool._max_workers)]
    timer = threading.Timer(5.0, release.set)  # a reader that waits is let go, and fails below
    timer.start()
    try:
        src = S.SegmentSource(fs, str(log), len(data))
        src.prefetch(0, len(data), checksums=True)
        pending = src._pending[2]
        got = _window(src, 0, len(data))
        assert pending.cancelled()
        src.close()
    finally:
        timer.cancel()
        release.set()
        for b in blockers:
            b.result()
    assert got == expected
    assert got[0] == data
    assert len(got[1]) == 4 and got[2] == len(data)
    assert np.diff(got[1]).min() > 0


def test_one_thread_reads_a_local_file_without_the_helper(make_partition, monkeypatch):
    monkeypatch.setattr(K, "MAX_THREADS", 1)
    log = _segment(make_partition)
    data = log.read_bytes()
    src = S.SegmentSource(pafs.LocalFileSystem(), str(log), len(data))
    src.prefetch(0, len(data), checksums=True)
    assert src._pending is None
    got = _window(src, 0, len(data))
    src.close()
    assert got[0] == data and len(got[1]) == 4 and got[2] == len(data)


def test_a_closed_sources_window_buffer_serves_the_next_source(make_partition, monkeypatch):
    monkeypatch.setattr(S, "_SPARE_BUFFERS", [])
    log = _segment(make_partition)
    data = log.read_bytes()
    fs = pafs.LocalFileSystem()
    first = S.SegmentSource(fs, str(log), len(data))
    assert _window(first, 0, len(data))[0] == data
    first.close()
    assert [len(b) for b in S._SPARE_BUFFERS] == [len(data)]
    reused = S._SPARE_BUFFERS[0]
    second = S.SegmentSource(fs, str(log), len(data))
    got = second.scan_window(8, len(data) - 8)  # a shorter window from the same buffer
    assert S._SPARE_BUFFERS == []
    assert got.window.tobytes() == data[8:]
    assert np.shares_memory(got.window, np.frombuffer(reused, np.uint8))
    second.close()
    huge = S.SegmentSource(fs, str(log), len(data))
    huge._buffers[1] = bytearray(S.SPARE_BUFFER_MAX_BYTES + 1)
    huge.close()
    assert [len(b) for b in S._SPARE_BUFFERS] == [len(data)]  # one over the bound is let go


def _scanned_ahead(
    make_partition, name: str, codecs: list[int], max_decompressed: int | None = 1 << 20
) -> S.ScannedWindow:
    """The read-ahead's scan of a one-window segment of five-record batches, one per codec."""
    part = make_partition(name)
    for i, codec in enumerate(codecs):
        part.batch([1000 + i] * 5, compression=codec)
    return _ahead_of(sorted(part.close().glob("*.log"))[0], max_decompressed)


def _ahead_of(log: Path, max_decompressed: int | None = 1 << 20) -> S.ScannedWindow:
    """The read-ahead's scan of ``log`` as one window."""
    src = S.SegmentSource(pafs.LocalFileSystem(), str(log), log.stat().st_size)
    try:
        return src._scan(0, 0, src.size, checksums=True, max_decompressed=max_decompressed)
    finally:
        src.close()


def _records_sections(scanned: S.ScannedWindow) -> list[bytes]:
    """Each batch's records section where the read-ahead says it is: in the window (plain) or
    in the arena of decompressed records (past the window's end)."""
    ahead = scanned.decompressed
    assert ahead is not None
    window, shift = scanned.window.tobytes(), scanned.window.shape[0]
    return [
        window[a:b] if b <= shift else ahead.arena[a - shift : b - shift]
        for a, b in zip(ahead.src_start.tolist(), ahead.src_end.tolist(), strict=True)
    ]


def _expected_sections(scanned: S.ScannedWindow) -> list[bytes]:
    """Each batch's records section, decompressed here from the window."""
    window = scanned.window.tobytes()
    h = K.parse_v2_headers(scanned.window, scanned.positions)
    out = []
    for position, length, attributes in zip(
        scanned.positions.tolist(),
        h[:, K.H_LENGTH].tolist(),
        h[:, K.H_ATTRIBUTES].tolist(),
        strict=True,
    ):
        body = window[position + 61 : position + 12 + length]
        codec = attributes & 0x07
        out.append(decompress(codec, body, magic=2, max_bytes=1 << 20) if codec else body)
    return out


def test_the_helper_decompresses_ahead_and_leaves_the_record_kernel_to_the_main_thread(
    make_partition,
):
    none, lz4 = CompressionType.NONE, CompressionType.LZ4
    plain = _scanned_ahead(make_partition, "plain-0", [none] * 3)
    assert plain.decompressed is None  # nothing to decompress
    assert plain.checksums is not None and plain.checksums[0].tolist() == plain.positions.tolist()
    stored = K.parse_v2_headers(plain.window, plain.positions)[:, K.H_CRC]
    assert plain.checksums[1].tolist() == stored.tolist()

    for name, codecs in (("lz4-0", [lz4] * 3), ("mixed-0", [none, lz4, none])):
        scanned = _scanned_ahead(make_partition, name, codecs)
        ahead = scanned.decompressed
        assert ahead is not None and ahead.positions.tolist() == scanned.positions.tolist()
        in_arena = (ahead.src_start >= scanned.window.shape[0]).tolist()
        assert in_arena == [c == lz4 for c in codecs]
        assert len(ahead.arena) == sum(
            len(s) for s, c in zip(_expected_sections(scanned), codecs, strict=True) if c
        )
        assert _records_sections(scanned) == _expected_sections(scanned)

    # no bound on decompressed sizes given (a shallow read): nothing is decompressed ahead
    assert _scanned_ahead(make_partition, "unbounded-0", [lz4] * 3, None).decompressed is None


def test_what_was_decompressed_ahead_serves_only_the_batches_it_covers(make_partition):
    lz4 = CompressionType.LZ4
    scanned = _scanned_ahead(make_partition, "take-0", [lz4] * 3)
    ahead = scanned.decompressed
    assert ahead is not None
    size = scanned.window.shape[0]
    positions = scanned.positions
    h = K.parse_v2_headers(scanned.window, positions)
    # the run's first two batches (the task ends inside the window): theirs, the arena taken
    parts = Parts(size)
    taken = V._take_decompressed(ahead, positions[:2], h[:2], parts)
    assert taken is not None
    assert taken[0].tolist() == ahead.src_start[:2].tolist()
    assert taken[1].tolist() == ahead.src_end[:2].tolist()
    assert parts.arena == [ahead.arena] and parts.arena_base == size + len(ahead.arena)
    # a run that starts later (its first batch pruned): decompressed again in the foreground
    parts = Parts(size)
    assert V._take_decompressed(ahead, positions[1:], h[1:], parts) is None
    assert parts.arena == [] and parts.arena_base == size
    # an arena already holding another run's records: the addresses would not hold
    parts = Parts(size)
    parts.to_arena(b"x" * 7)
    assert V._take_decompressed(ahead, positions, h, parts) is None
    assert parts.arena == [b"x" * 7]
    # a record count its records cannot hold (7 bytes a record at least): not taken, whatever
    # the read-ahead checked, so that the foreground reports it before any row is sized by it
    lying = h.copy()
    lying[1, K.H_COUNT] = (int(ahead.src_end[1] - ahead.src_start[1]) // 7) + 1
    parts = Parts(size)
    assert V._take_decompressed(ahead, positions, lying, parts) is None
    assert parts.arena == []


def _lz4_log(make_partition, name: str, batches: int) -> tuple[Path, bytes, list[int]]:
    """A segment of ``batches`` five-record lz4 batches: its path, bytes and batch positions."""
    part = make_partition(name)
    for i in range(batches):
        part.batch([1000 + i] * 5, compression=CompressionType.LZ4)
    log = sorted(part.close().glob("*.log"))[0]
    data = log.read_bytes()
    return log, data, scan_entries(data).positions.tolist()


def _rewrite(log: Path, data: bytearray, position: int) -> None:
    recompute_v2_crc(data, position)
    log.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["count", "body", "checksum"])
def test_a_damaged_batch_is_not_decompressed_ahead(make_partition, damage: str):
    log, original, positions = _lz4_log(make_partition, f"{damage}-0", 3)
    assert _ahead_of(log).decompressed is not None
    data = bytearray(original)
    victim = positions[1]
    if damage == "count":  # a count no batch can hold, the CRC made to match
        struct.pack_into(">i", data, victim + 57, 2**31 - 1)
        _rewrite(log, data, victim)
    elif damage == "body":  # an lz4 frame that does not decompress, the CRC made to match
        data[victim + 61 : victim + 65] = b"\0\0\0\0"
        _rewrite(log, data, victim)
    else:  # a flipped byte the CRC no longer matches
        data[positions[2] - 3] ^= 0x40
        log.write_bytes(bytes(data))
    assert _ahead_of(log).decompressed is None


def test_a_count_lie_in_a_window_read_ahead_is_reported_as_in_the_foreground(
    make_partition, monkeypatch
):
    monkeypatch.setattr(K, "MAX_THREADS", 2)  # read ahead, whatever the machine
    monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline())  # and never called off
    log, original, positions = _lz4_log(make_partition, "lie-0", 200)
    assert len(original) > 3 * 4096  # the victim is in a window read ahead
    taken = []
    real = V._take_decompressed
    monkeypatch.setattr(V, "_take_decompressed", lambda *a: taken.append(real(*a)) or taken[-1])
    assert read_table(str(log), readChunkBytes=4096).num_rows == 1000
    assert any(t is not None for t in taken)  # the read-ahead's work was used
    data = bytearray(original)
    victim = positions[150]
    struct.pack_into(">i", data, victim + 57, 2**31 - 1)
    _rewrite(log, data, victim)
    (length,) = struct.unpack_from(">i", data, victim + 8)
    records = decompress(
        CompressionType.LZ4, bytes(data[victim + 61 : victim + 12 + length]), magic=2
    )
    with pytest.raises(CorruptSegmentError) as info:
        read_table(str(log), readChunkBytes=4096)
    assert info.value.reason == (
        f"record count {2**31 - 1} cannot fit in {len(records)} decompressed bytes"
    )
    assert (info.value.path, info.value.position, info.value.offset) == (str(log), victim, 750)
    kept = read_table(str(log), readChunkBytes=4096, mode="DROPMALFORMED")
    assert kept.column("offset").to_pylist() == list(range(750)) + list(range(755, 1000))


def test_a_shallow_read_decompresses_nothing_ahead(make_partition, monkeypatch):
    monkeypatch.setattr(K, "MAX_THREADS", 2)
    monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline())  # every read-ahead runs
    log, _, _ = _lz4_log(make_partition, "shallow-0", 200)
    calls = []
    real = S.decompress_ahead
    monkeypatch.setattr(S, "decompress_ahead", lambda *a: calls.append(1) or real(*a))
    shallow = read_table(str(log), readChunkBytes=4096, iteration="shallow")
    assert shallow.column("offset").to_pylist() == list(range(4, 1000, 5))
    assert calls == []
    assert read_table(str(log), readChunkBytes=4096).num_rows == 1000
    assert calls  # a deep read of the same log does


def test_the_read_ahead_decompresses_into_its_slots_reused_arena_buffers(
    make_partition, monkeypatch
):
    monkeypatch.setattr(K, "MAX_THREADS", 2)
    monkeypatch.setattr(S, "_SPARE_BUFFERS", [])
    monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline())  # every read-ahead runs
    log, data, _ = _lz4_log(make_partition, "arena-0", 400)
    calls: list[tuple[int, int, int]] = []  # (slot, the slot handed out last, buffer id)
    real = S.SegmentSource._arena

    def spy(self: S.SegmentSource, slot: int, n: int) -> np.ndarray:
        got = real(self, slot, n)
        calls.append((slot, self._current, id(self._arenas[slot])))
        assert np.shares_memory(got, np.frombuffer(self._arenas[slot], np.uint8))
        return got

    monkeypatch.setattr(S.SegmentSource, "_arena", spy)
    made: list[int] = []  # buffers allocated (window and arena buffers)
    new_buffer = S._window_buffer
    monkeypatch.setattr(S, "_window_buffer", lambda n: made.append(n) or new_buffer(n))
    table = read_table(str(log), readChunkBytes=4096)
    assert len(calls) >= len(data) // 4096 - 1 >= 10  # each window after the first
    # never into the slot of the window being decoded, and into a buffer kept from window to
    # window (a new one only when a window's records outgrow it)
    assert all(slot != current for slot, current, _ in calls)
    assert len(made) <= 6  # two window buffers, two arenas, a little growth
    assert len(S._SPARE_BUFFERS) >= 2  # the closed source's buffers serve the next one
    monkeypatch.setattr(K, "MAX_THREADS", 1)
    assert table.equals(read_table(str(log), readChunkBytes=4096))


@pytest.mark.parametrize(
    ("value", "threads"), [(None, None), ("", None), (" 0 ", None), ("3", 3), ("1", 1)]
)
def test_the_thread_count_from_the_environment(monkeypatch, value, threads):
    if value is None:
        monkeypatch.delenv("KAFKA_SEGMENTS_DS_THREADS", raising=False)
    else:
        monkeypatch.setenv("KAFKA_SEGMENTS_DS_THREADS", value)
    assert K._threads_from_environment() == threads


@pytest.mark.parametrize("value", ["x", "-2", "1.5"])
def test_a_thread_count_that_is_not_one_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("KAFKA_SEGMENTS_DS_THREADS", value)
    with pytest.raises(ValueError) as info:
        K._threads_from_environment()
    assert str(info.value).startswith(f"KAFKA_SEGMENTS_DS_THREADS={value!r}: give a number")


def test_a_spark_task_reads_with_its_cpus_unless_the_environment_says(monkeypatch):
    monkeypatch.setattr(K, "MAX_THREADS", 2)
    monkeypatch.setattr(K, "_ENV_THREADS", None)
    K.use_task_cpus(1)
    assert K.MAX_THREADS == 1
    K.use_task_cpus(4)
    assert K.MAX_THREADS == 4
    K.use_task_cpus(0)
    assert K.MAX_THREADS == 1
    monkeypatch.setattr(K, "_ENV_THREADS", 2)
    K.use_task_cpus(1)
    assert K.MAX_THREADS == 1  # unchanged: the variable was read at import (2 here)


@pytest.mark.parametrize("cpus", [None, 1, 2])
def test_the_spark_reader_reads_ahead_only_with_a_spare_cpu(make_partition, monkeypatch, cpus):
    pytest.importorskip("pyspark")
    from kafka_segments_ds import datasource as D
    from kafka_segments_ds.options import parse_read_options

    monkeypatch.setattr(K, "MAX_THREADS", 2)  # as on a 2-core machine
    monkeypatch.setattr(K, "_ENV_THREADS", None)

    class Task:
        def cpus(self) -> int:
            return cpus

    monkeypatch.setattr(
        D.TaskContext, "get", staticmethod(lambda: None if cpus is None else Task())
    )
    submitted = []
    monkeypatch.setattr(S, "_prefetch_pool", lambda: _Inline(submitted))
    log, _, _ = _lz4_log(make_partition, "task-0", 400)
    options = parse_read_options(readChunkBytes=4096, minPartitions=1)
    reader = D.KafkaSegmentsReader([str(log.parent.parent)], options, ("offset", "value"))
    (partition,) = reader.partitions()
    got = pa.Table.from_batches(list(reader.read(partition)))
    assert got.column("offset").to_pylist() == list(range(2000))
    expected = 2 if cpus is None else cpus
    assert expected == K.MAX_THREADS
    assert (len(submitted) > 10) == (cpus != 1)  # no helper thread for a one-CPU task


def test_a_wait_cut_short_leaves_the_buffers_to_the_helper_until_it_ends(
    make_partition, monkeypatch
):
    monkeypatch.setattr(K, "MAX_THREADS", 2)
    monkeypatch.setattr(S, "_SPARE_BUFFERS", [])
    log = _segment(make_partition)
    data = log.read_bytes()
    src = S.SegmentSource(pafs.LocalFileSystem(), str(log), len(data))
    inside, release = threading.Event(), threading.Event()
    scan = src._scan

    def held(*args):
        inside.set()
        release.wait(10)
        return scan(*args)

    monkeypatch.setattr(src, "_scan", held)
    src.prefetch(0, len(data), checksums=True)
    assert inside.wait(10)  # the helper reads into the other slot's buffers

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    pending = src._pending[2]
    monkeypatch.setattr(pending, "result", interrupted)  # Ctrl-C while the main thread waits
    with pytest.raises(KeyboardInterrupt):
        src.scan_window(0, len(data))
    closing = threading.Thread(target=src.close)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive()  # close() waits for the helper ...
    assert S._SPARE_BUFFERS == []  # ... before any buffer goes to the next source
    release.set()
    closing.join(10)
    assert not closing.is_alive() and pending.done()
    assert [len(b) for b in S._SPARE_BUFFERS] == [len(data)]


def test_an_arena_grown_for_one_large_window_is_not_kept_for_the_rest(monkeypatch):
    monkeypatch.setattr(S, "_SPARE_BUFFERS", [])
    src = S.SegmentSource(pafs.LocalFileSystem(), "/nonexistent", 0)
    small = src._arena(0, 1 << 20)
    assert len(src._arenas[0]) == (1 << 20) + (1 << 17) and small.shape == (1 << 20,)
    assert src._arena(0, 900_000).shape == (900_000,)  # fits: the same buffer
    assert len(src._arenas[0]) == (1 << 20) + (1 << 17)
    src._arena(0, 24 << 20)  # a window of one large batch
    assert len(src._arenas[0]) == (24 << 20) + (3 << 20)
    src._arena(0, 1 << 20)  # back to the usual: the large buffer goes
    assert len(src._arenas[0]) == (1 << 20) + (1 << 17)
    src.close()
    assert sorted(len(b) for b in S._SPARE_BUFFERS) == [(1 << 20) + (1 << 17)]
