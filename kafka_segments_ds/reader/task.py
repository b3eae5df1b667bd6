"""The task loop: execute ScanTasks in turn, window by window, into Arrow record batches.

The range is read in windows of ``readChunkBytes`` aligned to entry boundaries, so memory stays
bounded whatever the segment size. Each window is framed (on the read-ahead thread when it was
read ahead), decoded by the :class:`~kafka_segments_ds.reader.window.WindowDecoder`, and the
first bad entry in it, if any, goes to the :class:`~kafka_segments_ds.reader.damage.DamagePolicy`,
which raises or says where to go on.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import CommitInProgressError, DataLossError, LimitExceededError
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.reader.rows import Fault, TaskBounds
from kafka_segments_ds.reader.source import ScannedWindow, SegmentSource
from kafka_segments_ds.reader.window import WindowDecoder
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.scan_task import HOST, ScanTask

if TYPE_CHECKING:
    from kafka_segments_ds.reader.damage import DamagePolicy

# Local windows smaller than this are read in the foreground: a thread switch (the GIL) costs
# more than reading them. Remote ones are always read ahead (a request's latency).
READ_AHEAD_MIN_BYTES = 1 << 20

log = logging.getLogger(__name__)


def read_task(
    task: ScanTask,
    options: ReadOptions,
    columns: tuple[str, ...],
    filesystem: pafs.FileSystem | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decode ``task`` into Arrow record batches with exactly ``columns``."""
    return read_tasks((task,), options, columns, filesystem)


def read_tasks(
    tasks: Sequence[ScanTask],
    options: ReadOptions,
    columns: tuple[str, ...],
    filesystem: pafs.FileSystem | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decode ``tasks`` in turn (an input partition) into Arrow record batches.

    The read-ahead does not stop at a task's end: while the last window of one task is
    decoded, the next task's segment is opened and its first window read (and framed,
    checksummed and, when it holds compressed batches in a deep read, decompressed) on the
    read-ahead thread.
    """
    return _read_tasks(tasks, options, columns, filesystem, 0)


# a task whose segment the log cleaner replaced is read from the replacement: at most this many
# times over (each needs a new replacement while it is read)
MAX_REHOMES = 8


def _read_tasks(
    tasks: Sequence[ScanTask],
    options: ReadOptions,
    columns: tuple[str, ...],
    filesystem: pafs.FileSystem | None,
    depth: int,
) -> Iterator[pa.RecordBatch]:
    """:func:`read_tasks`, ``depth`` replacements deep."""
    ahead: _Opened | None = None  # the next task's source, opened ahead
    try:
        for i, task in enumerate(tasks):
            current = ahead if ahead is not None else _open(task, options, filesystem)
            ahead = None
            following = tasks[i + 1] if i + 1 < len(tasks) else None

            def read_ahead(following: ScanTask | None = following) -> None:
                nonlocal ahead
                if following is None or ahead is not None:
                    return
                ahead = _open(following, options, filesystem)
                if ahead.source.is_local and following.end - following.start_position < (
                    READ_AHEAD_MIN_BYTES
                ):
                    return  # a small local read: handing it to a thread costs more than it saves
                ahead.source.prefetch(
                    following.start_position, options.read_chunk_bytes, options.verify_checksums
                )

            try:
                moved = _checked(task, current, depth, options)
                if moved is None:
                    yield from _read_one(task, options, columns, current, read_ahead)
            finally:
                current.source.close()
            if moved is not None:  # its offsets are elsewhere now (the log cleaner)
                yield from _read_tasks(moved, options, columns, filesystem, depth + 1)
    finally:
        if ahead is not None:
            ahead.source.close()


def _read_one(
    task: ScanTask,
    options: ReadOptions,
    columns: tuple[str, ...],
    current: _Opened,
    read_ahead: Callable[[], None],
) -> Iterator[pa.RecordBatch]:
    try:
        if task.file_id is not None and task.planned_on == HOST and _next_segment_gone(task):
            # the segment after it was merged into this one by the log cleaner (listed both,
            # in the middle of the replacement): its offsets bound the read
            ends = [n for n in (task.end_offset, task.next_base_offset) if n is not None]
            task = replace(task, end_offset=min(ends), next_base_offset=None)
        if options.decode:  # keys / values in Confluent's wire format: a post-step
            yield from _decoded(task, options, columns, current, read_ahead)
            return
        reader = _TaskReader(task, options, columns, current.source, current.shown)
        yield from reader.run(read_ahead)
    except FileNotFoundError as err:
        segment_gone(task, options, current.shown, err)


def _checked(
    task: ScanTask, current: _Opened, depth: int, options: ReadOptions
) -> list[ScanTask] | None:
    """The tasks reading ``task``'s offsets where they are now when its local segment was
    replaced (another file under its name) or removed since planning, on the host that
    planned it; None to read it as planned (or, when it is gone and no segment holds its
    offsets, to let the read report the loss)."""
    if task.file_id is None or task.planned_on != HOST:
        return None
    try:
        opened = current.source.file_id()
    except FileNotFoundError:
        opened = None
    if opened == task.file_id[:2]:
        return None
    if depth >= MAX_REHOMES:
        raise DataLossError(
            f"{current.shown} was replaced {depth} times while it was read; read again"
        )
    moved: list[ScanTask] | None = None
    for attempt in range(2):
        try:
            moved = rehomed(task, current.shown)
            break
        except OSError as err:  # a file it looked at went meanwhile (the cleaner again)
            if attempt:
                segment_gone(task, options, current.shown, err)
                return []
    if moved is None and opened is not None:
        # another file under its name that does not hold its offsets (a truncation, a
        # replacement): read at the planned positions it would give other records
        segment_gone(
            task,
            options,
            current.shown,
            FileNotFoundError(errno.ENOENT, "replaced since planning", task.segment.path),
        )
        return []
    return moved


def _decoded(
    task: ScanTask,
    options: ReadOptions,
    columns: tuple[str, ...],
    current: _Opened,
    read_ahead: Callable[[], None],
) -> Iterator[pa.RecordBatch]:
    from kafka_segments_ds.schemas.decode import TaskDecoder, wants_decoding

    if not wants_decoding(options):
        yield from _TaskReader(task, options, columns, current.source, current.shown).run(
            read_ahead
        )
        return
    post = TaskDecoder(options, task.topic, task.partition, current.shown)
    reader = _TaskReader(task, options, post.input_columns(columns), current.source, current.shown)
    yield from post.apply(reader.run(read_ahead), columns)


def _merged_away(task: ScanTask, bases: list[int]) -> bool:
    """Whether the log cleaner merged ``task``'s segment into an earlier one (a group into its
    first: what it kept of the task's offsets is there, what it did not was compacted away):
    the segment before it went or was replaced too since planning, and one after it (``bases``
    of the segments there now) is still there. Not so for retention, which takes the oldest
    first, nor for a truncation, which removes every segment after the one it cuts."""
    if task.previous is None or task.next_base_offset is None:
        return False
    if not any(b >= task.next_base_offset for b in bases):
        return False
    path, dev, ino = task.previous
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return (st.st_dev, st.st_ino) != (dev, ino)


def _next_segment_gone(task: ScanTask) -> bool:
    """Whether the segment after ``task``'s in the listing is no longer there (nor its
    ``.swap``): the log cleaner merged it into this one, whose offsets now reach past it."""
    if task.next_base_offset is None or task.next_path is None:
        return False
    swap = task.next_path + ".swap" if task.next_path.endswith(".log") else None
    return not (os.path.exists(task.next_path) or (swap is not None and os.path.exists(swap)))


def rehomed(task: ScanTask, shown: str) -> list[ScanTask] | None:
    """The tasks reading ``task``'s offsets from where they are now, when its local segment
    file was replaced or removed since planning: the segment of the same name, or the one an
    earlier segment's base offset names, that the log cleaner wrote them into (it merges a
    group of segments into the first one's name); None when no segment is there to hold
    them (retention removed it: data loss)."""
    from kafka_segments_ds.journal import pending_commits
    from kafka_segments_ds.layout import PartitionLog, SegmentRef, parse_segment_file_name
    from kafka_segments_ds.planning import segment_tasks

    seg = task.segment
    directory = os.path.dirname(seg.path)
    log_dir = os.path.dirname(directory)
    if pending_commits(pafs.LocalFileSystem(), log_dir):
        what = "replaced" if os.path.exists(seg.path) else "removed"
        raise CommitInProgressError(
            f"segment {shown} was {what} by a kafkasegments write committing into {log_dir} "
            "while it was read; read again when the commit is done"
        )
    try:
        names = os.listdir(directory)
        replaced = task.file_id is not None and os.stat(directory).st_ino != task.file_id[2]
    except OSError:
        return None
    if replaced:
        raise DataLossError(
            f"{task.topic}-{task.partition}: the partition directory {directory} was replaced "
            f"after the read was planned (a kafkasegments overwrite, or the topic deleted and "
            f"created again): {shown} is no longer the segment planned; read again"
        )
    # base offset -> the file holding it (a cleaned segment is named .log.swap for a moment,
    # while the one it replaces goes); names of any width, as listings take them
    logs: dict[int, str] = {}
    for name in sorted(names, key=lambda n: n.endswith(".swap")):
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed[1] in (".log", ".log.swap"):
            logs.setdefault(parsed[0], name)
    bases = list(logs)
    below = [b for b in bases if b <= seg.base_offset]
    if not below:
        return None
    base = max(below)
    path = os.path.join(directory, logs[base])
    index_path = os.path.join(directory, logs[base].split(".", 1)[0] + ".index")
    st = os.stat(path)  # (gone meanwhile: the caller looks again)
    index_size = os.stat(index_path).st_size if os.path.exists(index_path) else 0
    size = st.st_size
    home = SegmentRef(
        path=path,
        base_offset=base,
        size=size,
        index_path=index_path if index_size else None,
        timeindex_path=None,
        txnindex_path=None,
        index_size=index_size,
    )
    filesystem = pafs.LocalFileSystem()
    if base != seg.base_offset and not _merged_away(task, bases):
        from kafka_segments_ds.tail import segment_tail

        if segment_tail(filesystem, home).next_offset <= seg.base_offset:
            return None  # an earlier segment that does not reach its offsets: they are gone
    start = seg.base_offset if task.start_offset is None else task.start_offset
    if task.after_offset is not None:
        start = max(start, task.after_offset + 1)
    ends = [n for n in (task.end_offset, task.next_base_offset, task.span_end) if n is not None]
    end = min(ends) if ends else None
    log.warning(
        "%s was replaced or removed since the read was planned (the log cleaner); offsets "
        "from %d%s read from %s as it is now",
        shown,
        start,
        "" if end is None else f" to {end - 1}",
        path,
    )
    if end is not None and end <= start:
        return []
    part = PartitionLog(task.topic, task.partition, directory, (home,))
    planned = segment_tasks(filesystem, part, start, end, task.aborted, task.min_max_timestamp)
    return [replace(t, include_control=task.include_control) for t in planned]


def segment_gone(task: ScanTask, options: ReadOptions, shown: str, err: OSError) -> None:
    """The segment of ``task`` was removed after planning (retention or compaction deleted
    it, a leader change truncated it away): data loss, as Spark's Kafka source has it. Raises
    :class:`DataLossError` naming the partition, file and offsets (``failOnDataLoss``, the
    default); else logs a warning and the task reads nothing more."""
    seg = task.segment
    first = seg.base_offset if task.start_offset is None else task.start_offset
    ends = [n for n in (task.end_offset, task.next_base_offset) if n is not None]
    stop = min(ends) if ends else None
    offsets = f"offsets {first} to {stop - 1}" if stop is not None else f"offsets from {first}"
    where = f"{task.topic}-{task.partition}: " if task.topic is not None else ""
    what = (
        f"{where}segment {shown} ({offsets}) was removed after the read was planned "
        "(retention, compaction or truncation, or a kafkasegments write replacing the log dir's "
        "data)"
    )
    _refuse_a_commit_meanwhile(seg.path, shown, err)
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{what}. Some data may have been missed: set failOnDataLoss=false to skip what is gone"
        ) from err
    log.warning("%s; skipped, some data may have been missed (failOnDataLoss=false)", what)


def _refuse_a_commit_meanwhile(path: str, shown: str, err: OSError) -> None:
    """A segment on local disk gone while a kafkasegments write commits into its log dir (its
    journal there): CommitInProgressError, whatever ``failOnDataLoss`` says (the read would
    hold part of the commit)."""
    from kafka_segments_ds.journal import pending_commits

    log_dir = os.path.dirname(os.path.dirname(path))
    if os.path.isabs(path) and pending_commits(pafs.LocalFileSystem(), log_dir):
        raise CommitInProgressError(
            f"segment {shown} was removed by a kafkasegments write committing into "
            f"{log_dir} while it was read; read again when the commit is done"
        ) from err


@dataclass(frozen=True, slots=True)
class _Opened:
    source: SegmentSource
    shown: str  # the segment's path in messages and the `segment` column


def _open(task: ScanTask, options: ReadOptions, filesystem: pafs.FileSystem | None) -> _Opened:
    if filesystem is None:
        filesystem = task.filesystem
    if filesystem is None:
        filesystem, _ = kfs.resolve(task.segment.path, options.storage_options())
    shown = kfs.display_path(filesystem, task.segment.path)
    source = SegmentSource(filesystem, task.segment.path, task.segment.size, shown)
    # a shallow read decompresses nothing
    source.max_decompressed = options.max_decompressed_bytes if options.deep else None
    return _Opened(source, shown)


class _TaskReader:
    def __init__(
        self,
        task: ScanTask,
        options: ReadOptions,
        columns: tuple[str, ...],
        source: SegmentSource,
        shown: str,
    ) -> None:
        self.task = task
        self.options = options
        self.source = source
        self.file_end = source.size
        self.range_end = (
            source.size if task.end_position is None else min(task.end_position, source.size)
        )
        self.decoder = WindowDecoder(
            options,
            TaskBounds(
                task.topic,
                task.partition,
                shown,
                task.start_offset,
                task.end_offset,
                task.min_max_timestamp,
                task.aborted,
                task.segment.base_offset,
                task.next_base_offset,
                task.include_control,
            ),
            columns,
        )
        if task.after_offset is not None:  # a byte-range piece: the order rule carries over
            state = self.decoder.state
            state.last_offset = max(state.last_offset, task.after_offset)
        self.shown = shown
        self._damage: DamagePolicy | None = None

    @property
    def damage(self) -> DamagePolicy:
        """The damage policy, made (and its module imported) at the first damage seen."""
        if self._damage is None:
            from kafka_segments_ds.reader.damage import DamagePolicy

            self._damage = DamagePolicy(
                self.options,
                self.source.read,
                shown=self.shown,
                file_end=self.file_end,
                range_end=self.range_end,
                last_offset=lambda: self.decoder.last_offset,
                next_base_offset=self.task.next_base_offset,
            )
        return self._damage

    # -- window loop -------------------------------------------------------------------------

    def run(self, read_ahead: Callable[[], None] | None = None) -> Iterator[pa.RecordBatch]:
        """The task's batches. ``read_ahead`` is called once the read-ahead thread has no more
        windows of this task to read (to start on the next task's)."""
        try:
            yield from self._windows(read_ahead)
        finally:
            if self._damage is not None:
                self._damage.log_summary()

    def _windows(self, read_ahead: Callable[[], None] | None) -> Iterator[pa.RecordBatch]:
        pos = self.task.start_position
        want = self.options.read_chunk_bytes
        while pos < self.range_end:
            scanned = self.source.scan_window(pos, want)
            window, positions, magics = scanned.window, scanned.positions, scanned.magics
            outcome, stop = scanned.outcome, scanned.stop
            # fewer bytes than the listing said are there: the file shrank since (a local
            # read gets all it asks for, a remote one is checked): its whole entries are read,
            # then the loss is reported (reading on would ask for the same bytes forever)
            shrunk = (
                window.shape[0] < min(want, self.file_end - pos) and pos + stop < self.range_end
            )
            # entries must start inside the task's range (positions increase: the last one says)
            reaches_end = positions.shape[0] > 0 and pos + int(positions[-1]) >= self.range_end
            if reaches_end:
                keep = positions + pos < self.range_end
                positions, magics = positions[keep], magics[keep]
            oversize = self._first_oversize(positions, stop)
            if oversize is not None:
                positions, magics = positions[:oversize], magics[:oversize]
            next_pos = pos + stop
            if (
                (outcome == K.FRAMING_END or (outcome == K.FRAMING_PARTIAL and stop > 0))
                and not reaches_end
                and next_pos < self.range_end
            ):
                # the usual next window
                self.source.prefetch(
                    next_pos, self.options.read_chunk_bytes, self.options.verify_checksums
                )
            elif read_ahead is not None and (reaches_end or next_pos >= self.range_end):
                read_ahead()  # this window ends the task: on to the next task's first one
            fault = None
            if positions.shape[0]:
                batch, fault = self.decoder.decode(
                    window, pos, positions, magics, scanned.checksums, scanned.decompressed
                )
                if batch is not None and batch.num_rows:
                    yield batch
            if shrunk and fault is None:
                self._shrunk(pos + stop)
                break
            # after a fault the reader resumes elsewhere than the window read ahead: until a
            # window decodes whole again, the read-ahead does not decompress for nobody
            self.source.decompress_ahead = fault is None
            step = self._next_window(scanned, pos, oversize, reaches_end, fault)
            if step is None:
                break
            pos, want = step

    def _next_window(
        self,
        scanned: ScannedWindow,
        pos: int,
        oversize: int | None,
        reaches_end: bool,
        fault: Fault | None,
    ) -> tuple[int, int] | None:
        """Where the window after ``scanned`` (read at ``pos``) starts and how much of it to
        read, or None: the task's range ends here. Damage goes to the policy, which raises
        (FAILFAST) or says where reading resumes (None: nothing more)."""
        window, outcome, stop = scanned.window, scanned.outcome, scanned.stop
        chunk = self.options.read_chunk_bytes
        next_pos = pos + stop
        resume: int | None
        if fault is not None:  # raises in FAILFAST mode
            rel = fault.position - pos
            size = _be_int(window, rel + 8, rel + 12) if rel + 12 <= window.shape[0] else 0
            seen = window[rel : rel + 12 + max(size, 0)].tobytes()
            resume = self.damage.fail(fault.error, fault.position, fault.offset, seen)
        elif oversize is not None and not self.decoder.reached_end:
            # the same bound, the same way, wherever the entry sits in the window
            p = int(scanned.positions[oversize])
            resume = self._too_large(pos + p, _be_int(window, p + 8, p + 12) + 12)
        elif reaches_end or self.decoder.reached_end or next_pos >= self.range_end:
            return None
        elif outcome == K.FRAMING_END:
            return next_pos, chunk
        elif outcome == K.FRAMING_PARTIAL:
            # the cut entry's prefix is (nearly always) in the window already: no request
            header = (
                window[stop : stop + 12]
                if window.shape[0] >= stop + 12
                else self.source.read(next_pos, 12)
            )
            size = _be_int(header, 8, 12) if (header.shape[0] >= 12) else -1
            entry_len = 12 + size
            if header.shape[0] >= 12 and size >= 14 and next_pos + entry_len <= self.file_end:
                if entry_len <= self.options.max_batch_bytes:
                    return next_pos, max(chunk, entry_len)
                resume = self._too_large(next_pos, entry_len)
            else:
                resume = self.damage.past_eof(next_pos)
        else:
            resume = self.damage.bad_framing(next_pos, outcome, window[stop : stop + 17].tobytes())
        return None if resume is None else (resume, chunk)

    def _shrunk(self, position: int) -> None:
        """The segment ends before the entry at ``position`` now, which the listing said was
        there (a broker truncating its log after a leader change): what was past it is gone.
        DataLossError naming the file, its sizes, the byte position and the offsets, or
        (failOnDataLoss=false) a warning; the log's last segment cut after whole entries is
        read to its end."""
        task = self.task
        first = max(self.decoder.last_offset + 1, task.segment.base_offset)
        where = f"{task.topic}-{task.partition}: " if task.topic is not None else ""
        size = self.source.current_size()
        last = task.next_base_offset is None and task.next_path is None  # (as listed)
        if size is not None and position >= size and last:
            # the log's last segment ends after whole entries: a broker trims the zeros of a
            # preallocated segment when it rolls it or shuts down, and truncates it only above
            # the high watermark (records no consumer could read yet)
            log.info(
                "%ssegment %s ends at byte %d now, %d when the read was planned (trimmed): "
                "read to its end",
                where,
                self.shown,
                size,
                self.file_end,
            )
            return
        holds = "fewer bytes" if size is None else f"{size} bytes"
        what = (
            f"{where}segment {self.shown} holds {holds} now, {self.file_end} when the read "
            "was planned: it was truncated since (a leader change truncating the log); "
            f"offsets from {first}, at byte position {position} on, are gone"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{what}. Some data may have been missed: set failOnDataLoss=false to go on"
            )
        log.warning("%s; some data may have been missed (failOnDataLoss=false)", what)

    def _first_oversize(self, positions: np.ndarray, stop: int) -> int | None:
        """Index of the first framed entry longer than maxBatchBytes, if any."""
        if not positions.shape[0] or stop <= self.options.max_batch_bytes:
            return None  # (no entry is longer than the window's framed bytes)
        lengths = np.diff(positions, append=stop)
        over = np.flatnonzero(lengths > self.options.max_batch_bytes)
        return int(over[0]) if over.shape[0] else None

    def _too_large(self, position: int, length: int) -> int | None:
        """Report an entry over maxBatchBytes (FAILFAST raises; else where to go on)."""
        offset = _be_int(self.source.read(position, 8), 0, 8)
        return self.damage.fail(
            LimitExceededError(
                f"entry of {length} bytes exceeds maxBatchBytes {self.options.max_batch_bytes}"
            ),
            position,
            offset,
        )


def _be_int(buf: np.ndarray, start: int, stop: int) -> int:
    """The signed big-endian integer in ``buf[start:stop]``."""
    return int.from_bytes(buf[start:stop].tobytes(), "big", signed=True)
