"""The read-ahead window: a read-ahead the helper thread has not started when its window is
asked for is called off and the window read in the foreground, with the same result."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds.reader import source as S


def _segment(make_partition) -> Path:
    part = make_partition("t-0")
    for i in range(4):
        part.batch([1000 + 2 * i, 1001 + 2 * i])
    return sorted(part.close().glob("*.log"))[0]


def _window(src: S.SegmentSource, position: int, length: int) -> tuple[bytes, list[int], int]:
    got = src.scan_window(position, length)
    return got.window.tobytes(), got.positions.tolist(), got.stop


def test_a_read_ahead_not_started_is_called_off_and_read_in_the_foreground(make_partition):
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
