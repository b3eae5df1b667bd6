"""Ranged reads of one ``.log`` file, with a read-ahead window.

``SegmentSource.scan_window`` hands out windows from two reused buffers: one is being decoded
while the next is read ahead into the other on a helper thread, which also frames it (the
entry walk), checksums it and, for a window of magic-2 batches, some compressed, whose headers
(and checksums, when verified) are sound, decompresses those (all of which release the GIL).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
import pyarrow.fs as pafs

from kafka_segments_ds.errors import StorageError
from kafka_segments_ds.reader.v2 import Decompressed, batch_checksums, decompress_ahead
from kafka_segments_ds.reader.wrappers import decompress_wrappers_ahead
from kafka_segments_ds.records import kernels as K

log = logging.getLogger(__name__)
SHORT_READ_ATTEMPTS = 2
_PREFETCH_POOL: ThreadPoolExecutor | None = None
# Window and arena buffers of closed sources, for the next ones: a fresh 4 MiB buffer is zeroed
# and faulted in page by page, a few per cent of a whole read of a local segment. A source has
# two window buffers and, reading compressed batches ahead, two arenas. Kept: six, none over
# 8 MiB (a window widened for one large entry is let go): at most 48 MiB stay with an idle
# process.
_SPARE_BUFFERS: list[bytearray] = []
_SPARE_LOCK = threading.Lock()
os.register_at_fork(after_in_child=_SPARE_LOCK._at_fork_reinit)  # type: ignore[attr-defined]
SPARE_BUFFERS_KEPT = 6
SPARE_BUFFER_MAX_BYTES = 8 << 20


def _window_buffer(length: int) -> bytearray:
    """A buffer of at least ``length`` bytes: a spare one if one is that large, else new."""
    with _SPARE_LOCK:
        for i, buffer in enumerate(_SPARE_BUFFERS):
            if len(buffer) >= length:
                return _SPARE_BUFFERS.pop(i)
    return bytearray(length)


def _keep_spare(buffer: bytearray) -> None:
    with _SPARE_LOCK:
        if 0 < len(buffer) <= SPARE_BUFFER_MAX_BYTES and len(_SPARE_BUFFERS) < SPARE_BUFFERS_KEPT:
            _SPARE_BUFFERS.append(buffer)


@dataclass(frozen=True, slots=True, eq=False)
class ScannedWindow:
    """A window with its entry framing (and, when read ahead, its batches' CRC-32C and its
    compressed batches decompressed)."""

    window: np.ndarray
    positions: np.ndarray
    magics: np.ndarray
    outcome: int
    stop: int
    checksums: tuple[np.ndarray, np.ndarray] | None  # (v2 batch positions, computed CRC-32C)
    decompressed: Decompressed | None = None  # its compressed batches, decompressed ahead


def frame_window(
    window: np.ndarray,
    checksums: bool,
    max_decompressed: int | None = None,
    arena_buffer: Callable[[int], np.ndarray] | None = None,
    called_off: Callable[[], bool] | None = None,
) -> ScannedWindow:
    """Frame ``window``; on the read-ahead thread also checksum it and, given
    ``max_decompressed``, decompress its compressed batches (or legacy wrappers) into
    ``arena_buffer`` (see ``v2.decompress_ahead`` and ``wrappers.decompress_wrappers_ahead``; all
    of which release the GIL while the main thread works), unless ``called_off()`` says to
    stop."""
    positions, magics, outcome, stop = K.hop_entries(window, 0, window.shape[0])
    sums = None
    if checksums:
        v2 = positions[magics == 2]
        if v2.shape[0]:
            ends = v2 + K.parse_v2_headers(window, v2)[:, K.H_LENGTH] + 12
            sums = (v2, batch_checksums(window, v2, ends))
    ahead = None
    if max_decompressed is not None and arena_buffer is not None:
        ahead = (
            decompress_ahead(
                window, positions, magics, sums, max_decompressed, arena_buffer, called_off
            )
            if (magics == 2).all()
            else decompress_wrappers_ahead(
                window, positions, magics, checksums, max_decompressed, arena_buffer, called_off
            )
        )
    return ScannedWindow(window, positions, magics, int(outcome), int(stop), sums, ahead)


def _prefetch_pool() -> ThreadPoolExecutor:
    global _PREFETCH_POOL
    if _PREFETCH_POOL is None:
        _PREFETCH_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kafka-segments-read")
    return _PREFETCH_POOL


class SegmentSource:
    """Ranged reads of one file.

    ``scan_window`` hands out windows from two reused buffers: one is being decoded while the
    next window is read ahead into the other (``prefetch``, on a helper thread; the read
    releases the GIL). A window is fully copied out before the next ``scan_window`` call.
    ``read`` returns independent bytes. Local files use ``os.pread`` rather than a memory
    map: a map turns a concurrent truncation of the file into a SIGBUS.
    """

    def __init__(
        self, filesystem: pafs.FileSystem, path: str, size: int, shown: str | None = None
    ) -> None:
        self.path = path
        self.shown = path if shown is None else shown  # the path in messages
        self.size = size
        self._filesystem = filesystem
        self._fd: int | None = None
        self._file = None
        self._opened = False  # opened on first use: the read-ahead thread may do it
        self._open_lock = threading.Lock()
        self.is_local = isinstance(filesystem, pafs.LocalFileSystem)
        self._buffers = [bytearray(0), bytearray(0)]
        self._arenas = [bytearray(0), bytearray(0)]  # each slot's window, decompressed ahead
        self.max_decompressed: int | None = None  # given: decompress ahead within this bound
        self.decompress_ahead = True  # False: the next read-ahead reads and frames only
        self._current = 0  # the buffer of the window handed out last
        # a read-ahead in flight: its window, its future, and the event that calls it off
        self._pending: tuple[int, int, Future[ScannedWindow], threading.Event] | None = None

    def _clip(self, position: int, length: int) -> int:
        return max(0, min(length, self.size - position))

    def _open(self) -> None:
        if self._opened:
            return
        with self._open_lock:  # (the read-ahead thread and file_id may both open it)
            if self._opened:
                return
            if self.is_local:
                self._fd = os.open(self.path, os.O_RDONLY)
            else:
                self._file = self._filesystem.open_input_file(self.path)
            self._opened = True

    def file_id(self) -> tuple[int, int] | None:
        """(st_dev, st_ino) of the local file opened (opening it now if need be; None for a
        remote one)."""
        self._open()
        if self._fd is None:
            return None
        st = os.fstat(self._fd)
        return st.st_dev, st.st_ino

    def current_size(self) -> int | None:
        """The size of the local file opened, now (None for a remote one)."""
        self._open()
        return None if self._fd is None else os.fstat(self._fd).st_size

    def read(self, position: int, length: int) -> np.ndarray:
        length = self._clip(position, length)
        self._open()
        if self._fd is not None:
            return np.frombuffer(os.pread(self._fd, length, position), np.uint8)
        return np.frombuffer(self._read_remote(position, length), np.uint8)

    def _read_remote(self, position: int, length: int) -> bytes:
        """A ranged read from an object store, checked for length: the listing said how big
        the object is, so a shorter answer is a cut-off response, never the end of the data.
        It is tried again once (pyarrow retries only failed requests, not short ones)."""
        assert self._file is not None
        got = b""
        for _ in range(SHORT_READ_ATTEMPTS):
            try:
                got = self._file.read_at(length, position)
            except OSError as err:
                raise StorageError(
                    f"reading {length} bytes failed: {err}", self.shown, position
                ) from err
            if len(got) == length:
                return got
            log.warning(
                "%s: asked for %d bytes at byte %d, got %d; reading again",
                self.shown,
                length,
                position,
                len(got),
            )
        raise StorageError(
            f"short read: asked for {length} bytes, got {len(got)} "
            f"({SHORT_READ_ATTEMPTS} attempts)",
            self.shown,
            position,
        )

    def _fill(self, slot: int, position: int, length: int) -> np.ndarray:
        self._open()
        if self._fd is None:
            return self.read(position, length)
        if len(self._buffers[slot]) < length:
            _keep_spare(self._buffers[slot])
            self._buffers[slot] = _window_buffer(length)
        buffer = self._buffers[slot]
        view = memoryview(buffer)[:length]
        got = 0
        while got < length:  # pread may return short; 0 means the file shrank
            n = os.preadv(self._fd, [view[got:]], position + got)
            if n == 0:
                break
            got += n
        return np.frombuffer(buffer, np.uint8, got)

    def fill(self, position: int, length: int) -> np.ndarray:
        """Up to ``length`` bytes at ``position`` (clipped to the size) in a reused buffer,
        valid until the next call: a walk over the whole file that keeps no window (fewer
        bytes than asked only if a local file shrank since it was listed)."""
        return self._fill(self._current, position, self._clip(position, length))

    def prefetch(self, position: int, length: int, checksums: bool) -> None:
        """Start reading (and framing, and checksumming) the window ``scan_window(position,
        length)`` will most likely ask for, on a helper thread: the kernels and crc32c release
        the GIL, so this overlaps with decoding the current window."""
        if self.is_local and K.MAX_THREADS < 2:
            # one thread (KAFKA_SEGMENTS_DS_THREADS=1, or one CPU): no helper thread. Reading a
            # local window ahead takes 15-20% off the wall time of a plain read for ~7% more
            # CPU time, on a second core; a remote read still reads ahead (it waits on the
            # network, not a core)
            return
        self._settle()
        length = self._clip(position, length)
        if length:
            called_off = threading.Event()
            bound = self.max_decompressed if self.decompress_ahead else None
            future = _prefetch_pool().submit(
                self._scan, 1 - self._current, position, length, checksums, called_off.is_set,
                bound,
            )  # fmt: skip
            self._pending = (position, length, future, called_off)

    def _scan(
        self,
        slot: int,
        position: int,
        length: int,
        checksums: bool,
        called_off: Callable[[], bool] | None = None,
        max_decompressed: int | None = None,
    ) -> ScannedWindow:
        return frame_window(
            self._fill(slot, position, length),
            checksums,
            max_decompressed,
            lambda n: self._arena(slot, n),
            called_off,
        )

    def _arena(self, slot: int, n: int) -> np.ndarray:
        """``n`` bytes of the slot's arena buffer, reused from window to window as the window
        buffers are (its contents are copied out before the slot is read into again)."""
        size = len(self._arenas[slot])
        if size < n or size > max(SPARE_BUFFER_MAX_BYTES, 4 * n):  # (one that grew for a
            # window of a large batch is not kept for the rest of the segment)
            _keep_spare(self._arenas[slot])
            self._arenas[slot] = _window_buffer(n + (n >> 3))
        return np.frombuffer(self._arenas[slot], np.uint8, n)

    def _settle(self) -> ScannedWindow | None:
        """Wait for a read-ahead in flight (its buffer must be quiet); return its window. One
        the helper thread has not started yet is called off (None: the caller reads the window
        itself): on a host whose other cores are busy, waiting for the thread to be scheduled
        costs more than the read."""
        if self._pending is None:
            return None
        future = self._pending[2]
        if future.cancel():
            self._pending = None
            return None
        try:
            return future.result()
        except OSError:
            return None  # read again in the foreground, where the error is reported
        finally:
            if future.done():  # (a wait cut short by KeyboardInterrupt leaves it to close())
                self._pending = None

    def scan_window(self, position: int, length: int) -> ScannedWindow:
        """The window at ``position`` (the read-ahead one if it matches), framed."""
        length = self._clip(position, length)
        pending = self._pending
        if pending is not None and pending[:2] != (position, length):
            # not the window read ahead (damage moved the reader): the helper stops
            # decompressing it, for nobody (after every fault of a damaged log, a window)
            pending[3].set()
        ahead = self._settle()
        self._current = 1 - self._current
        if pending is not None and ahead is not None and pending[:2] == (position, length):
            return ahead
        return frame_window(self._fill(self._current, position, length), checksums=False)

    def close(self) -> None:
        """Release the file; the window buffers go to the next source (every window handed
        out has been copied out by now). A read-ahead still running is waited for first: its
        buffers and file are the helper's until it ends (if that wait is cut short, nothing is
        released)."""
        pending, self._pending = self._pending, None
        if pending is not None and not pending[2].cancel():
            pending[3].set()
            wait([pending[2]])
        for buffer in (*self._buffers, *self._arenas):
            _keep_spare(buffer)
        self._buffers = [bytearray(0), bytearray(0)]
        self._arenas = [bytearray(0), bytearray(0)]
        if self._fd is not None:
            os.close(self._fd)
        if self._file is not None:
            self._file.close()
