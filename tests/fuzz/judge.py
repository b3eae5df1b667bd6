"""Fuzz inputs from (run seed, input number), and the oracle that judges one read of them.

Allowed outcomes of ``read_table`` on a mutated log:

* FAILFAST: rows, or a :class:`KafkaSegmentsError`. A ``CorruptSegmentError`` must name the file
  and a byte position inside it, not before the first damaged entry. Rows returned without an
  error must equal the DROPMALFORMED rows (nothing was found wrong, so nothing was dropped).
  A log whose only damage is a truncation reads without error (end of data, as for a broker).
* DROPMALFORMED: never raises; returns, in order, every row of every intact entry, and no row
  that is not the decode of some entry (an original one, or the damaged bytes themselves).
  Offsets strictly increase. No row comes from inside a damaged entry whose size field is
  consistent (it leads to a valid entry or the end), whatever its damage, before where its own
  checksum proves it ends; with an unknown magic byte, unless a valid entry inside cannot be
  one of its inner messages.
* Both modes, from the last offset DROPMALFORMED returned: the start is not refused as past
  the end of the log (the log end offset follows the reader's rules).

An intact entry is exempt only when an earlier entry claims offsets at or above its own (offset
fields carry no checksum: when two entries disagree the earlier one is kept, as Kafka's log
recovery keeps the valid prefix), when a damaged entry before it overlaps it (its size field,
consistent with what follows, claims the intact entry's bytes), or when it is a legacy message
between a damaged compressed wrapper whose size field is itself damaged and more damage (it
cannot be told from an inner message stored verbatim). Nothing after an entry can make the
reader drop it: entries before the first damage always come back.

For index mutations: a read with offset bounds (and byte-range splits cut at index positions)
returns exactly the rows of the clean log in those bounds; indexes only speed reading up.
"""

from __future__ import annotations

import itertools
import random
import struct
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import kafka_segments_ds
from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import CorruptSegmentError, InvalidOptionError, KafkaSegmentsError
from kafka_segments_ds.options import parse_stream_options
from kafka_segments_ds.reader import read_tasks
from kafka_segments_ds.records.batches import as_array, has_valid_checksum, scan_entries
from kafka_segments_ds.records.checksums import crc32, crc32c
from kafka_segments_ds.streaming.planner import StreamPlanner

from .corpus import (
    MAX_DECOMPRESSED,
    SEED_NAMES,
    Row,
    build_seed,
    intact_rows,
    reference_or_none,
)
from .mutate import Mutant, mutate_index, mutate_log

SEGMENT = "00000000000000000000"
INDEX_SHARE = 0.15  # fraction of inputs that damage index files instead of the log


def table_rows(table: pa.Table) -> list[Row]:
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    headers = table["headers"].to_pylist()
    return [
        (o, None if t is None else t // 1000, tt, k, v, tuple((h["key"], h["value"]) for h in hs))
        for o, t, tt, k, v, hs in zip(
            table["offset"].to_pylist(),
            ts,
            table["timestampType"].to_pylist(),
            table["key"].to_pylist(),
            table["value"].to_pylist(),
            headers,
            strict=True,
        )
    ]


def make_input(run_seed: int, number: int, shapes: bool = True) -> dict[str, Any]:
    """The input ``number`` of run ``run_seed``: same numbers, same bytes, on every machine.
    ``shapes=False``: as before mutate.SHAPES existed (the inputs earlier campaigns found)."""
    rng = random.Random(f"{run_seed}:{number}")
    seed_name = rng.choice(SEED_NAMES)
    if rng.random() < INDEX_SHARE:
        return {"target": "index", "seed": seed_name, "rng": rng}
    options: dict[str, Any] = {"maxDecompressedBytes": MAX_DECOMPRESSED, "includeHeaders": True}
    if rng.random() < 0.4:
        options["readChunkBytes"] = 4096
    if rng.random() < 0.15:
        options["verifyChecksums"] = False
    return {
        "target": "log",
        "mutant": mutate_log(
            rng, seed_name, random.Random(f"{run_seed}:{number}:shapes") if shapes else None
        ),
        "options": options,
        "seed": seed_name,
    }


def _write(
    directory: Path, data: bytes, index: bytes | None = None, timeindex: bytes | None = None
) -> str:
    part = directory / "t-0"
    part.mkdir(parents=True, exist_ok=True)
    for suffix in (".index", ".timeindex"):
        (part / (SEGMENT + suffix)).unlink(missing_ok=True)
    path = part / (SEGMENT + ".log")
    path.write_bytes(data)
    if index is not None:
        (part / (SEGMENT + ".index")).write_bytes(index)
    if timeindex is not None:
        (part / (SEGMENT + ".timeindex")).write_bytes(timeindex)
    return str(path)


def _claimed_range(entry: bytes, rows: list[Row]) -> tuple[int, int]:
    """The offsets an entry's header claims: [base, base + lastOffsetDelta] for magic 2, the
    inner offsets (or the offset field) for a legacy entry."""
    (offset,) = struct.unpack_from(">q", entry, 0)
    if entry[16] == 2:
        return offset, offset + struct.unpack_from(">i", entry, 23)[0]
    return (rows[0][0], rows[-1][0]) if rows else (offset, offset)


def _looks_like_wrapper(data: bytes) -> bool:
    return len(data) >= 18 and data[16] < 2 and 1 <= data[17] & 0x07 <= 3


def _checked_extent(data: bytes) -> int | None:
    """The length of the legacy message at the start of ``data`` by its key and value lengths,
    if its CRC checks over exactly those bytes (the CRC does not cover the size field, so this
    holds when the size field is the only damage), else None."""
    if len(data) < 30 or data[16] > 1:
        return None
    at = 18 if data[16] == 0 else 26
    (key,) = struct.unpack_from(">i", data, at)
    at += 4 + max(key, 0)
    if key < -1 or len(data) < at + 4:
        return None
    (value,) = struct.unpack_from(">i", data, at)
    end = at + 4 + max(value, 0)
    if value < -1 or end > len(data):
        return None
    (stored,) = struct.unpack_from(">I", data, 12)
    return end if crc32(data[16:end]) == stored else None


def _declared_end(data: bytes, position: int, any_magic: bool = False) -> int | None:
    """Where the entry at ``position`` ends by its size field, if its framing is plausible
    (magic 0-2 -- any with ``any_magic`` --, a size no smaller than the smallest entry) and it
    ends inside the file."""
    if len(data) - position < 17 or (data[position + 16] > 2 and not any_magic):
        return None
    (size,) = struct.unpack_from(">i", data, position + 8)
    end = position + 12 + size
    if size < (49 if data[position + 16] == 2 else 14) or end > len(data):
        return None
    return end


def _holds_verbatim(data: bytes, at: int, declared: int, valid_starts: set[int]) -> bool:
    """For an entry with an unknown magic byte: whether every valid start inside it may be an
    inner message of it read as a compressed legacy wrapper (magic 0 or 1 layout), so the
    reader skips it whole; otherwise valid entries inside that chain to its end may win (its
    size field covered them)."""
    if not 1 <= data[at + 17] & 0x07 <= 3:
        return False
    starts = []
    for key_at in (18, 26):  # the key length of a magic-0 / magic-1 message
        if at + key_at + 4 > len(data):
            continue
        (key,) = struct.unpack_from(">i", data, at + key_at)
        value_at = at + key_at + 4 + max(key, 0)
        if (
            key >= -1
            and value_at + 4 <= len(data)
            and struct.unpack_from(">i", data, value_at)[0] >= 0
        ):
            starts.append(value_at + 4)
    inside = [p for p in valid_starts if at < p < declared]
    return bool(starts) and all(data[p + 16] < 2 and p >= min(starts) for p in inside)


def _proven_ends(data: bytes, at: int, declared: int, valid_starts: set[int]) -> list[int]:
    """Valid entry starts inside the damaged entry at ``at`` (declared to end at
    ``declared``) where its own checksum proves it ends: no checksum covers the size field,
    and a magic-2 CRC-32C (also assumed for an unknown magic byte) not the magic byte either."""
    inside = sorted(p for p in valid_starts if at < p < declared)
    if not inside or declared - at < 26:
        return []
    if data[at + 16] < 2:
        extent = _checked_extent(data[at:declared])
        return [p for p in inside if extent is not None and at + extent == p]
    (stored,) = struct.unpack_from(">I", data, at + 17)
    return [p for p in inside if p - at >= 61 and crc32c(data[at + 21 : p]) == stored]


def _is_subsequence(needed: list[Row], got: list[Row]) -> bool:
    it = iter(got)
    return all(any(row == g for g in it) for row in needed)


@dataclass
class _Found:
    position: int
    end: int
    rows: list[Row]
    first: int
    last: int


def _framed_candidates(data: bytes, intact: bytearray, v2_minimum: int) -> list[tuple[int, int]]:
    """(position, end) of every position in damaged bytes (``intact[at]`` is 0, before the
    last 25 bytes) whose magic byte is 0-2 and whose size field is at least 14 (at least
    ``v2_minimum`` for magic 2) and ends inside the file: computed for all positions at once,
    the same test the oracle made byte by byte."""
    n = max(len(data) - 25, 0)
    if n == 0:
        return []
    raw = np.frombuffer(data, np.uint8)
    wide = raw.astype(np.int64)
    sizes = (wide[8 : 8 + n] << 24) | (wide[9 : 9 + n] << 16) | (wide[10 : 10 + n] << 8)
    sizes |= wide[11 : 11 + n]
    sizes[sizes >= 1 << 31] -= 1 << 32
    magics = raw[16 : 16 + n]
    at = np.arange(n, dtype=np.int64)
    ends = at + 12 + sizes
    keep = (np.frombuffer(bytes(intact[:n]), np.uint8) == 0) & (magics <= 2)
    keep &= sizes >= np.where(magics == 2, v2_minimum, 14)
    keep &= ends <= len(data)
    return list(zip(at[keep].tolist(), ends[keep].tolist(), strict=True))


def _well_formed_entries(data: bytes, intact: bytearray, verify: bool) -> list[_Found]:
    """Every entry the reference decoders accept that starts in damaged bytes (``intact[at]``
    is 0): damaged entries that still decode, and entries embedded in damaged bytes."""
    found = []
    for at, end in _framed_candidates(data, intact, 14):
        entry = data[at:end]
        rows = reference_or_none(entry, verify=verify)
        if rows is not None:
            found.append(_Found(at, end, rows, *_claimed_range(entry, rows)))
    return found


def _checksum_valid_starts(data: bytes, intact: bytearray) -> set[int]:
    """Positions in damaged bytes where an entry with plausible framing and a matching
    checksum starts."""
    view = as_array(data)
    return {
        at for at, end in _framed_candidates(data, intact, 49) if has_valid_checksum(view[at:end])
    }


def judge_log(m: Mutant, options: dict[str, Any], workdir: Path) -> list[str]:
    """Run both modes on a mutated log; return the oracle's complaints (empty = pass)."""
    data = m.data
    path = _write(workdir, data)
    verify = options.get("verifyChecksums", True)
    allowed: set[Row] = set()
    for entry in m.originals:
        allowed.update(intact_rows(entry, verify) or ())
    intact: list[tuple[int, list[Row], tuple[int, int]]] = []
    starts, position = [], 0
    for piece in m.pieces:
        starts.append(position)
        position += len(piece.data)
    in_intact = bytearray(len(data))
    for piece, position in zip(m.pieces, starts, strict=True):
        if piece.intact:
            in_intact[position : position + len(piece.data)] = b"\x01" * len(piece.data)
    others = _well_formed_entries(data, in_intact, verify)
    valid_starts = {p for piece, p in zip(m.pieces, starts, strict=True) if piece.intact}
    # what the reader calls a valid entry: plausible framing and a matching checksum (checked
    # whatever verifyChecksums says), whether or not its content decodes (a hostile entry with
    # a correct CRC is still where its writer put an entry)
    valid_starts.update(_checksum_valid_starts(data, in_intact))
    first_damage = len(data)
    after_wrapper = False  # a damaged wrapper whose size field is damaged too came
    hidden: set[int] = set()
    overlapped: list[tuple[int, int]] = []  # declared extents of damaged entries
    sealed: list[tuple[int, int]] = []  # where no entry is read: inside consistent ones
    run_start = None  # where the current run of damaged pieces starts: the reader frames
    # one damaged entry from there, whatever the pieces' own boundaries
    for i, (piece, position) in enumerate(zip(m.pieces, starts, strict=True)):
        if piece.intact:
            run_start = None
            rows = list(intact_rows(piece.data, verify) or ())
            intact.append((position, rows, _claimed_range(piece.data, rows)))
            following = m.pieces[i + 1] if i + 1 < len(m.pieces) else None
            if after_wrapper and piece.data[16] < 2 and following and not following.intact:
                # between a damaged wrapper and more damage, a legacy message cannot be told
                # from one of the wrapper's inner messages stored verbatim
                hidden.add(position)
            continue
        first_damage = min(first_damage, position)
        run_start = position if run_start is None else run_start
        for at in {run_start, position}:
            declared = _declared_end(data, at, any_magic=True)
            consistent = declared is not None and (
                declared == len(data) or declared in valid_starts
            )
            if consistent:
                assert declared is not None
                overlapped.append((at, declared))
            # where the reader frames (the start of a run of damage), a consistent entry is
            # skipped whole, whatever its damage: nothing before a proven end is read. (Not
            # promised of a later piece of the run: the reader searches past the first one and
            # a wrapper with an unknown magic byte is no valid entry to stop at.)
            if consistent and at == run_start:
                assert declared is not None
                if data[at + 16] <= 2 or _holds_verbatim(data, at, declared, valid_starts):
                    proven = _proven_ends(data, at, declared, valid_starts)
                    sealed.append((at, min(proven, default=declared)))
            # The reader skips a damaged entry whose size field is consistent whole; otherwise
            # it searches, and a wrapper whose CRC proves where it ends (only its size field is
            # damaged) still holds no inner message past that end.
            after_wrapper = after_wrapper or (
                _looks_like_wrapper(data[at:])
                and not consistent
                and _checked_extent(data[at:]) is None
            )
    # A well-formed entry strictly inside a damaged entry whose size field is consistent is
    # never read (an inner message stored verbatim in a wrapper with a damaged magic byte).
    others = [o for o in others if not any(at < o.position < end for at, end in sealed)]
    for other in others:
        allowed.update(other.rows)
    # An intact entry is exempt when a well-formed entry elsewhere contradicts its offsets:
    # offset fields carry no checksum, so there is no telling which of the two lies.
    # So is one whose bytes a well-formed entry before it overlaps (the reader follows the
    # framing), and one whose offsets do not follow the intact entries before it (splices).
    required: list[Row] = []
    first_free = first_damage  # where FAILFAST may first complain
    highest = -(2**63)
    for position, rows, (first, last) in intact:
        if (
            position in hidden
            or first <= highest
            or any(start < position < end for start, end in overlapped)
            or any(o.position < position and (o.last >= first or o.end > position) for o in others)
        ):
            first_free = min(first_free, position)
        else:
            required.extend(rows)
        highest = max(highest, last)
    for _, rows, _ in intact:
        allowed.update(rows)
    complaints: list[str] = []

    def read(mode: str, extra: dict[str, str] | None = None) -> list[Row] | BaseException:
        try:
            table = kafka_segments_ds.read_table(
                str(Path(path).parent), mode=mode, **options, **(extra or {})
            )
        except Exception as err:  # judged below
            return err
        return table_rows(table)

    strict = read("FAILFAST")
    dropping = read("DROPMALFORMED")
    if isinstance(strict, BaseException):
        err = strict
        if not isinstance(err, KafkaSegmentsError):
            complaints.append("FAILFAST raised a foreign exception: " + _describe(err))
        elif isinstance(err, CorruptSegmentError):
            if err.path != path:
                complaints.append(f"FAILFAST error names path {err.path!r}, not {path!r}")
            if err.position is None or not 0 <= err.position < len(data):
                complaints.append(f"FAILFAST error position {err.position} outside the file")
            elif err.position < first_free:
                complaints.append(
                    f"FAILFAST error at {err.position}, before the first damage at "
                    f"{first_free}: {err}"
                )
        if all(op.startswith("truncate:") for op in m.ops):
            complaints.append(f"a truncated log raised instead of ending: {err}")
    if isinstance(dropping, BaseException):
        complaints.append("DROPMALFORMED raised: " + _describe(dropping))
        return complaints
    if not isinstance(strict, BaseException) and strict != dropping:
        complaints.append("FAILFAST returned rows that differ from DROPMALFORMED's")
    offsets = [r[0] for r in dropping]
    if any(a >= b for a, b in itertools.pairwise(offsets)):
        complaints.append(f"offsets do not increase: {offsets}")
    if not _is_subsequence(required, dropping):
        missing = [r[0] for r in required if r not in dropping]
        complaints.append(f"DROPMALFORMED lost rows of intact entries: offsets {missing}")
    strangers = [r for r in dropping if r not in allowed]
    if strangers:
        complaints.append(f"rows that no entry holds: {strangers[:3]}")
    if offsets and offsets[-1] > 0:
        complaints.extend(_judge_start(read, offsets[-1], strict, dropping))
    complaints.extend(_judge_stream(str(Path(path).parent), options, offsets))
    complaints.extend(_judge_split(read, len(data), dropping))
    return complaints


def _judge_split(read: Any, size: int, dropping: list[Row]) -> list[str]:
    """DROPMALFORMED split into byte ranges of about a third of the log returns exactly the
    whole read's rows: each piece starts above the last offset the reader keeps before its cut
    (a dropped entry counted there made the pieces after it drop valid batches: 616161:140956),
    also where the whole read searches after damage: a cut stands only where the entries before
    it are intact (981558216:2701, 121212:740)."""
    limit = max(64, size // 3)
    if limit >= size:
        return []
    got = read("DROPMALFORMED", {"maxBytesPerPartition": str(limit)})
    if isinstance(got, BaseException):
        return [f"DROPMALFORMED split at {limit} bytes raised: " + _describe(got)]
    if got != dropping:
        return [
            f"DROPMALFORMED split at {limit} bytes returned offsets {[r[0] for r in got]}, not "
            f"the whole read's {[r[0] for r in dropping]}"
        ]
    return []


def _judge_stream(directory: str, options: dict[str, Any], offsets: list[int]) -> list[str]:
    """A DROPMALFORMED stream from offset 0 up to its latest offset emits exactly the offsets
    the batch read returns below it, and its latest offset leaves none out (515151:39109: after
    a batch whose records do not decode, the latest offset stopped at 11 and rows 12 and 15 were
    never emitted), unless its tail walk stopped where the data may still be being written
    (with verifyChecksums=false, a last entry whose checksum fails is withheld until what follows
    it is written: ``tail.unchecked_in_progress``)."""
    stream_options, limits = parse_stream_options({**options, "mode": "DROPMALFORMED"})
    planner = StreamPlanner([directory], stream_options, limits)
    tp = ("t", 0)
    try:
        latest = planner.next_offsets({tp: 0})[tp]
        got = [
            o
            for tasks in planner.plan({tp: 0}, {tp: latest}, 1)
            for b in read_tasks(tasks, stream_options, ("offset",))
            for o in b.column(0).to_pylist()
        ]
        seg = planner.list_partitions()[tp].segments[-1]
        tail = planner._tails[tp][1]  # the walk of next_offsets (not walked again: resyncs)
    except Exception as err:  # judged here
        return ["a DROPMALFORMED stream raised: " + _describe(err)]
    below = [o for o in offsets if o < latest]
    if got != below:
        return [
            f"a DROPMALFORMED stream emitted offsets {got} up to its latest offset {latest}, "
            f"where the batch read returns {below}"
        ]
    later = [o for o in offsets if o >= latest]
    if tail.end_position < seg.size and later and options.get("verifyChecksums", True):
        # the walk stops only where the data may still be being written: a torn last entry,
        # zeros to the end of the file, a failing checksum with zeros after it to the end
        return [
            f"a DROPMALFORMED stream's walk stopped at byte {tail.end_position} of "
            f"{seg.size} (latest offset {latest}), where the batch read returns {later} after"
        ]
    if tail.end_position == seg.size and later:
        return [
            f"a DROPMALFORMED stream walked the whole log, and its latest offset {latest} "
            f"leaves out the batch read's offsets {later}"
        ]
    return []


def _judge_start(
    read: Any, start: int, strict: list[Row] | BaseException, dropping: list[Row]
) -> list[str]:
    """A read from the last offset DROPMALFORMED returned is not refused as past the end of
    the log, in either mode: the log end offset of the range check follows the reader's own
    rules (independent fuzz: a checksum-valid batch whose offsets go back became the log end,
    and a valid startingOffsets was refused). FAILFAST raises the reader's damage error, if
    any. DROPMALFORMED returns exactly the rows of the whole read from that offset on (a batch
    pruned for the start offset had its size field trusted unchecked: seed 777001:944)."""
    complaints = []
    option = {"startingOffsets": f'{{"t":{{"0":{start}}}}}'}
    got = read("DROPMALFORMED", option)
    if isinstance(got, BaseException):
        complaints.append(f"DROPMALFORMED from offset {start} raised: " + _describe(got))
    elif got != [r for r in dropping if r[0] >= start]:
        complaints.append(
            f"DROPMALFORMED from offset {start} returned offsets {[r[0] for r in got]}, not "
            "the whole read's from there"
        )
    if isinstance(strict, BaseException):
        failed = read("FAILFAST", option)
        if isinstance(failed, InvalidOptionError):
            complaints.append(f"FAILFAST from offset {start} refused: {failed}")
    return complaints


def _describe(err: BaseException) -> str:
    frames = traceback.format_exception(type(err), err, err.__traceback__)
    return f"{type(err).__module__}.{type(err).__name__}: {err}\n" + "".join(frames[-6:])


def judge_index(seed_name: str, rng: random.Random, workdir: Path) -> tuple[list[str], list[str]]:
    """Damage the indexes of a clean log; offset-bounded and split reads must not change."""
    data = b"".join(build_seed(seed_name).entries)
    table = scan_entries(data)
    index, timeindex = kidx.build_indexes(
        table.positions, table.sizes, table.last_offsets, table.max_timestamps, 0, 32
    )
    ops = []
    if rng.random() < 0.7:
        index, label = mutate_index(rng, index, 8, len(data))
        ops.append("index:" + label)
    if rng.random() < 0.5 or not ops:
        timeindex, label = mutate_index(rng, timeindex, 12, len(data))
        ops.append("timeindex:" + label)
    path = _write(workdir, data)
    clean = table_rows(kafka_segments_ds.read_table(str(Path(path).parent), includeHeaders=True))
    _write(workdir, data, index, timeindex)
    last = clean[-1][0] if clean else 0
    start = rng.randrange(last + 2)
    options: dict[str, Any] = {
        "includeHeaders": True,
        "startingOffsets": f'{{"t":{{"0":{start}}}}}',
    }
    end = None
    if rng.random() < 0.6:
        end = rng.randrange(start + 1, last + 3)
        options["endingOffsets"] = f'{{"t":{{"0":{end}}}}}'
    if rng.random() < 0.5:
        options["maxBytesPerPartition"] = rng.choice((64, 200, 1000))
    ops.append(f"read:{start}..{end}/{options.get('maxBytesPerPartition')}")
    want = [r for r in clean if r[0] >= start and (end is None or r[0] < end)]
    try:
        got = table_rows(kafka_segments_ds.read_table(str(Path(path).parent), **options))
    except Exception as err:  # judged here
        return ops, ["damaged index made the read raise: " + _describe(err)]
    if got != want:
        return ops, [
            f"damaged index changed the rows: got offsets {[r[0] for r in got]}, "
            f"want {[r[0] for r in want]}"
        ]
    return ops, []
