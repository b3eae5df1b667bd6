"""The damage policy: what reading does at an entry that does not decode.

Decoders always raise (or report a :class:`~kafka_segments_ds.reader.rows.Fault`); this is the
one place deciding what follows. FAILFAST re-raises with the file, position and offset.
DROPMALFORMED logs the bad entry and goes on where the forensics of
:mod:`kafka_segments_ds.records.resync` find the next entry whose framing and checksum are valid
and whose offsets can follow the last good one. Either way some endings are not damage: a
zero-filled (preallocated) tail, a truncated last entry of a copy taken while a broker
appended, a torn write into a preallocated segment, or an entry that was rewritten while it was
read.

What a read met is also reported as :class:`DamageEvent` values: each policy keeps its own
(the one summary line of a task is counted from them, :class:`DamageCounts`), and
:func:`collect_damage` hands them to a caller (the CLI's ``stats`` counts damaged entries so).
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from kafka_segments_ds.errors import CorruptSegmentError, UnsupportedFormatError
from kafka_segments_ds.options import ReadOptions
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.resync import Read, Resync, be_int
from kafka_segments_ds.reporting import damage_is_quiet

__all__ = [
    "DamageCounts",
    "DamageEvent",
    "DamageKind",
    "DamagePolicy",
    "be_int",
    "collect_damage",
]

log = logging.getLogger(__name__)
MAX_REREADS = 8  # entries read again because their bytes changed, per task
DETAILED_DROPS = 10  # dropped entries logged one by one (WARNING) per task; then INFO
MAX_FRAMED_DROPS = 10_000  # entries counted one by one in the bytes one drop passes over
SUMMARY = "damage_summary"  # set on the log record of a task's summary line (LogRecord attribute)


class DamageKind(enum.Enum):
    """What a read met at a byte position."""

    BATCH = "batch"  # a magic-2 batch dropped whole (DROPMALFORMED)
    MESSAGE = "legacy message"  # a legacy message dropped whole (a wrapper: one)
    UNFRAMED = "unframed bytes"  # a bad entry whose size field frames nothing in the file
    TRUNCATED = "truncated entry"  # a last entry cut by the end of the file: end of the data
    ZERO_TAIL = "zero-filled tail"  # zeros from here: end of the data
    TORN_WRITE = "torn write"  # an entry cut by a write into a zero-filled file: end of data
    REREAD = "entry read again"  # its bytes changed since they were read

    @property
    def is_drop(self) -> bool:
        return self in (DamageKind.BATCH, DamageKind.MESSAGE, DamageKind.UNFRAMED)


@dataclass(frozen=True, slots=True)
class DamageEvent:
    """One thing a read met: ``kind`` at byte ``position`` of ``path`` (as shown in messages).
    A drop also tells the records the entry held by its headers (None: a wrapper whose payload
    does not expand) and the bytes skipped after it that frame no entry."""

    kind: DamageKind
    path: str
    position: int
    records: int | None = 0
    skipped_bytes: int = 0


@dataclass(frozen=True, slots=True)
class DamageCounts:
    """What DROPMALFORMED dropped, counted from a read's events."""

    entries: int = 0  # dropped entries (batches + legacy messages)
    batches: int = 0
    messages: int = 0  # legacy messages, compressed wrappers included
    records: int = 0  # by the entries' headers (a wrapper: its inner messages)
    uncounted: int = 0  # wrappers whose payload does not expand: records unknown
    skipped_bytes: int = 0  # bytes between entries that frame no entry

    @classmethod
    def of(cls, events: Iterable[DamageEvent]) -> DamageCounts:
        drops = [e for e in events if e.kind.is_drop]
        entries = [e for e in drops if e.kind is not DamageKind.UNFRAMED]
        return cls(
            entries=len(entries),
            batches=sum(e.kind is DamageKind.BATCH for e in entries),
            messages=sum(e.kind is DamageKind.MESSAGE for e in entries),
            records=sum(e.records or 0 for e in entries),
            uncounted=sum(e.records is None for e in entries),
            skipped_bytes=sum(e.skipped_bytes for e in drops),
        )

    def describe(self) -> str:
        unknown = (
            f" (and {self.uncounted} compressed wrappers whose records cannot be counted)"
            if self.uncounted
            else ""
        )
        return (
            f"dropped {self.entries} malformed entries ({self.batches} batches, "
            f"{self.messages} legacy messages) holding {self.records} records{unknown}, and "
            f"skipped {self.skipped_bytes} bytes that frame no entry"
        )


_SINKS: ContextVar[tuple[list[DamageEvent], ...]] = ContextVar("damage_sinks", default=())


@contextlib.contextmanager
def collect_damage() -> Iterator[list[DamageEvent]]:
    """The events of every read made (iterated) inside the block, in order."""
    events: list[DamageEvent] = []
    token = _SINKS.set((*_SINKS.get(), events))
    try:
        yield events
    finally:
        _SINKS.reset(token)


class _Quiet(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not damage_is_quiet()


for _name in ("reader.damage", "records.resync"):  # the loggers of the damage the reader meets
    logging.getLogger(f"kafka_segments_ds.{_name}").addFilter(_Quiet())


class DamagePolicy:
    """Decides, for one read of a segment, where reading goes on after a bad entry (or
    raises). ``read``/``file_end``: the segment's bytes and size; ``shown``: its path in
    messages; entries starting before ``range_end`` belong to the read; ``last_offset()``: the
    last offset of the last good entry, as decoded; ``next_base_offset``: offsets stay below."""

    def __init__(
        self,
        options: ReadOptions,
        read: Read,
        *,
        shown: str,
        file_end: int,
        range_end: int,
        last_offset: Callable[[], int],
        next_base_offset: int | None = None,
    ) -> None:
        self.options = options
        self.read = read
        self.shown = shown
        self.file_end = file_end
        self.range_end = range_end
        self.rereads = 0
        self.events: list[DamageEvent] = []
        self.forensics = Resync(
            read,
            path=shown,
            file_end=file_end,
            range_end=range_end,
            last_offset=last_offset,
            next_base_offset=next_base_offset,
            read_chunk_bytes=options.read_chunk_bytes,
            max_batch_bytes=options.max_batch_bytes,
            max_decompressed_bytes=options.max_decompressed_bytes,
        )

    def _report(self, event: DamageEvent) -> None:
        self.events.append(event)
        for sink in () if damage_is_quiet() else _SINKS.get():
            sink.append(event)

    def fail(
        self,
        err: CorruptSegmentError,
        position: int,
        offset: int | None = None,
        seen: bytes | None = None,
    ) -> int | None:
        """FAILFAST: raise, naming file, entry position and offset. DROPMALFORMED: log, and
        return where the next valid entry starts (None: nothing valid follows). Either way a
        torn last write of a segment being written in place is the end of the data (``seen``:
        the entry's bytes as they were decoded)."""
        if self._is_torn_write(position, err):
            return None
        if self._changed_since_read(position, seen):
            return position  # decode it again as it is now
        reason = err.reason
        if err.position is not None:  # decoders report positions inside the entry's payload
            reason = f"{reason} (at byte {err.position} inside the entry)"
        located = type(err)(
            reason,
            path=self.shown,
            position=position,
            offset=offset if offset is not None else err.offset,
        )
        if not self.options.drop_malformed:
            raise located from err
        dropped = sum(e.kind.is_drop for e in self.events) + 1
        level = logging.WARNING if dropped <= DETAILED_DROPS else logging.INFO
        log.log(level, "dropping malformed entry: %s", located)
        resume = self.forensics.resume_after(position)
        for event in self._drop(position, resume):
            self._report(event)
        return resume

    def _drop(self, position: int, resume: int | None) -> list[DamageEvent]:
        """The events of dropping the entry at ``position`` when reading resumes at ``resume``:
        it, each entry framed after it that reading passes over (no valid entry was found
        there: each is damaged too, 90 legacy messages whose checksums all fail are 90
        entries), and the bytes left that frame no entry."""
        held = self.forensics.held(position)
        stop = self.range_end if resume is None else resume
        if held is None or stop < position:  # bytes that frame no entry: counted as skipped
            # bytes (none when they lie inside a valid batch before them)
            return [
                DamageEvent(DamageKind.UNFRAMED, self.shown, position, 0, max(stop - position, 0))
            ]
        events: list[DamageEvent] = []
        at, entry = position, held
        while True:
            kind = DamageKind.BATCH if entry.magic == 2 else DamageKind.MESSAGE
            following = None
            if entry.end < stop and len(events) < MAX_FRAMED_DROPS:  # then: skipped bytes
                following = self.forensics.held(entry.end)
            if following is None or following.end > stop:
                events.append(
                    DamageEvent(kind, self.shown, at, entry.records, max(stop - entry.end, 0))
                )
                return events
            events.append(DamageEvent(kind, self.shown, at, entry.records, 0))
            at, entry = entry.end, following

    def log_summary(self) -> None:
        """One line for the read: what DROPMALFORMED dropped in all."""
        count = DamageCounts.of(self.events)
        if count.entries or count.skipped_bytes:
            log.warning("%s: DROPMALFORMED %s", self.shown, count.describe(), extra={SUMMARY: True})

    def _is_torn_write(self, position: int, err: CorruptSegmentError) -> bool:
        """Whether the bad entry at ``position`` is one a broker was still writing.

        With ``preallocate=true`` a broker writes into a zero-filled file, so a copy (or a read)
        taken meanwhile ends in a partly written entry and zeros: as for a truncated tail, that
        is the end of the data, not damage (see :meth:`Resync.is_torn_write`).
        """
        if not self.forensics.is_torn_write(position):
            return False
        log.info(
            "%s: entry at byte %d torn by a write into a zero-filled segment: end of data (%s)",
            self.shown,
            position,
            err,
        )
        self._report(DamageEvent(DamageKind.TORN_WRITE, self.shown, position))
        return True

    def _changed_since_read(self, position: int, seen: bytes | None) -> bool:
        """Whether the bad entry at ``position`` reads differently now and is valid: it was
        being written in place while read (preallocated segment), or the first read came back
        wrong (pyarrow pads a short S3 response to the length asked). A few per task."""
        if seen is None or self.rereads >= MAX_REREADS:
            return False
        if self.read(position, len(seen)).tobytes() == seen:
            return False
        if not self.forensics.entry_is_valid(position):
            return False
        self.rereads += 1
        self.forensics.forget()
        log.warning(
            "%s: entry at byte %d changed since it was read; reading it again", self.shown, position
        )
        self._report(DamageEvent(DamageKind.REREAD, self.shown, position))
        return True

    def past_eof(self, position: int, quiet: bool = False) -> int | None:
        """An entry at ``position`` runs past the end of the file.

        That is the end of the data, as for a broker (a copy taken while the broker was
        appending, or a truncated copy), unless a valid entry whose offsets follow on starts
        later: then this entry's size field is damaged. An entry that may be an inner message
        of this one (a truncated wrapper storing it verbatim) proves damage only when valid
        entries follow it exactly to the end of the file or include a magic-2 batch -- from
        it, or from a later candidate past where its chain breaks. ``quiet``: the end of the
        data is not logged (a stream's look at an active segment: an append in progress).
        """
        candidate = self.forensics.proof_of_damage(position, quiet)
        if candidate is not None:
            err = CorruptSegmentError(
                "entry size runs past the end of the file, but valid entries follow "
                f"from byte {candidate} (damaged size field)"
                if candidate > position
                else f"entry inside the valid batch at byte {candidate} (the entry before it "
                "overlaps that batch)"
            )
            return self.fail(err, position, self.forensics.offset_field(position))
        if quiet:
            return None
        if self.forensics.is_zero(position, self.file_end):
            log.info("%s: zero-filled tail from byte %d", self.shown, position)
            self._report(DamageEvent(DamageKind.ZERO_TAIL, self.shown, position))
        else:
            log.warning(
                "%s: truncated entry at byte %d: %d bytes at the end of the file ignored",
                self.shown,
                position,
                self.file_end - position,
            )
            self._report(DamageEvent(DamageKind.TRUNCATED, self.shown, position))
        return None

    def bad_framing(self, position: int, outcome: int, seen: bytes) -> int | None:
        """The framing broke at ``position`` (``outcome``: the framing kernel's): the end of
        the data at a zero-filled tail, else damage."""
        if self.forensics.is_zero(position, self.file_end):
            log.info("%s: zero-filled (preallocated) tail from byte %d", self.shown, position)
            self._report(DamageEvent(DamageKind.ZERO_TAIL, self.shown, position))
            return None
        head = self.read(position, 17)
        if head.shape[0] < 17:
            return None
        size = be_int(head, 8, 12)
        offset = be_int(head, 0, 8)
        magic = int(head[16])
        if outcome == K.FRAMING_SHORT_BATCH:
            reason = f"batch length {size} below the minimum 49"
            err: CorruptSegmentError = CorruptSegmentError(reason)
        elif magic > 2:
            err = UnsupportedFormatError(f"unknown magic byte {magic} (size field {size})")
        else:
            err = CorruptSegmentError(f"entry size {size} below the minimum 14")
        return self.fail(err, position, offset, seen)
