"""The read-ahead window: a read-ahead the helper thread has not started when its window is
asked for is called off and the window read in the foreground, with the same result; and the
helper decodes ahead only the windows that hold compressed batches."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds.reader import source as S
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.compression import CompressionType


def _segment(make_partition) -> Path:
    part = make_partition("t-0")
    for i in range(4):
        part.batch([1000 + 2 * i, 1001 + 2 * i])
    return sorted(part.close().glob("*.log"))[0]


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


def _decoded_ahead(
    make_partition, name: str, codecs: list[int], max_decompressed: int | None = 1 << 20
) -> S.ScannedWindow:
    """The read-ahead's scan of a one-window segment of five-record batches, one per codec."""
    part = make_partition(name)
    for i, codec in enumerate(codecs):
        part.batch([1000 + i] * 5, compression=codec)
    log = sorted(part.close().glob("*.log"))[0]
    src = S.SegmentSource(pafs.LocalFileSystem(), str(log), log.stat().st_size)
    src.predecode = True
    src.max_decompressed = max_decompressed
    try:
        return src._scan(0, 0, src.size, checksums=True)
    finally:
        src.close()


def _values(scanned: S.ScannedWindow) -> list[bytes]:
    """Each decoded-ahead row's value, from the window or, past its end, the arena."""
    ahead = scanned.predecoded
    assert ahead is not None
    window, shift = scanned.window.tobytes(), scanned.window.shape[0]
    spans = zip(ahead.rows["vpos"].tolist(), ahead.rows["vlen"].tolist(), strict=True)
    return [
        window[p : p + n] if p < shift else ahead.arena[p - shift : p - shift + n] for p, n in spans
    ]


def test_the_helper_decodes_ahead_only_windows_with_compressed_batches(make_partition):
    # a plain window's framing and checksums keep the helper as busy as the record kernel and
    # the gathers keep the main thread: the kernel stays on the main thread
    none, lz4 = CompressionType.NONE, CompressionType.LZ4
    plain = _decoded_ahead(make_partition, "plain-0", [none] * 3)
    assert plain.predecoded is None
    assert plain.checksums is not None and plain.checksums[0].tolist() == plain.positions.tolist()
    stored = K.parse_v2_headers(plain.window, plain.positions)[:, K.H_CRC]
    assert plain.checksums[1].tolist() == stored.tolist()

    packed = _decoded_ahead(make_partition, "lz4-0", [lz4] * 3)
    assert packed.predecoded is not None and packed.predecoded.status.tolist() == [0, 0, 0]
    assert packed.predecoded.rows["offset"].tolist() == list(range(15))
    assert packed.predecoded.rows["vpos"].min() >= packed.window.shape[0]  # all in the arena
    assert _values(packed) == [b"v%d" % o for o in range(15)]

    # one compressed batch among plain ones: the whole window is decoded ahead
    mixed = _decoded_ahead(make_partition, "mixed-0", [none, lz4, none])
    ahead = mixed.predecoded
    assert ahead is not None and ahead.status.tolist() == [0, 0, 0]
    in_arena = (ahead.rows["vpos"] >= mixed.window.shape[0]).tolist()
    assert in_arena == [False] * 5 + [True] * 5 + [False] * 5
    assert _values(mixed) == [b"v%d" % o for o in range(15)]

    # no bound on decompressed sizes given: nothing is decompressed ahead
    assert _decoded_ahead(make_partition, "unbounded-0", [lz4] * 3, None).predecoded is None
