"""Structure-aware mutations of seed logs and their index files.

A mutated log is a list of :class:`Piece`: whole original entries left untouched (``intact``)
and damaged bytes. The oracle needs exactly that: every intact entry must come back under
DROPMALFORMED, and nothing may come back that is not the decode of some entry.

Operators (chosen at random, one to three per input):

* ``flip``      bits of one byte of one entry
* ``field``     a header field of one entry (every magic) set to a boundary value, CRC optionally
                recomputed so the lie reaches the structural checks
* ``record``    a varint of a magic-2 record (length, deltas, key/value/header lengths, header
                count) set to a lie or an overlong encoding; records re-compressed, CRC recomputed
* ``inner``     a byte or length of a message inside a legacy wrapper; re-compressed, CRCs fixed
* ``inneroffset`` the offset field of any inner message of a legacy wrapper set to a lie (inner
                and wrapper CRCs recomputed, sometimes the wrapper offset moved along): the
                wrapper then contradicts itself (issue 16's nine regressions)
* ``hostile``   an entry built to hurt: decompression bombs in every codec and magic, wrappers
                nested in wrappers, magic-2 batches inside wrappers, empty/null wrappers, count
                and lastOffsetDelta lies
* ``truncate``  the log cut at any byte
* ``garbage``   random bytes, zeros or 0xff inserted between entries
* ``splice``    a prefix of this log joined to a suffix of another seed (offsets above it)
* ``collide``   the same with the other seed's offsets colliding with the prefix's (issue 16's
                tenth regression: the prefix must be kept)
* ``drop`` / ``duplicate`` / ``swap``   whole entries removed, repeated, reordered

Two shapes of an independent campaign (``../shared/regressions/independent-fuzz``), drawn by
:func:`add_shape` from a random stream of their own, so the inputs above keep their numbers:

* ``badmagic``  an unknown magic byte in an entry whose size field stays consistent, often a
                legacy wrapper holding its inner messages verbatim (incompressible values):
                nothing inside it may be read, nothing after it lost
* ``backwards`` a checksum-valid v2 batch whose offsets go back (at the end of the log most
                often): the reader drops it, so it must not become the log end offset

Index mutations (``mutate_index``) damage ``.index`` / ``.timeindex`` bytes of a clean log.
"""

from __future__ import annotations

import functools
import random
import struct
import zlib
from dataclasses import dataclass, field

import cramjam
import zstandard

from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.compression import LZ4_MAGIC, compress, decompress
from kafka_segments_ds.records.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)

from .corpus import (
    GZIP,
    LZ4,
    NONE,
    SEED_NAMES,
    SNAPPY,
    TS,
    ZSTD,
    build_seed,
    fix_legacy_crc,
    fix_v2_crc,
    legacy_wrapper,
    rebuild_v2,
    v2,
    v2_records,
)

SPLICE_BASE = 10_000  # offsets of the second log in a splice
BOMB_BYTES = 8 << 20  # what every bomb expands to: 8x the fuzz runs' maxDecompressedBytes

_V2_FIELDS = (  # name, entry offset, width, covered by the CRC
    ("baseOffset", 0, 8, False),
    ("batchLength", 8, 4, False),
    ("leaderEpoch", 12, 4, False),
    ("magic", 16, 1, False),
    ("crc", 17, 4, False),
    ("attributes", 21, 2, True),
    ("lastOffsetDelta", 23, 4, True),
    ("baseTimestamp", 27, 8, True),
    ("maxTimestamp", 35, 8, True),
    ("producerId", 43, 8, True),
    ("producerEpoch", 51, 2, True),
    ("baseSequence", 53, 4, True),
    ("recordCount", 57, 4, True),
)
OFFSET_FIELDS = frozenset({"baseOffset", "offset"})


@dataclass
class Piece:
    data: bytes
    intact: bool
    source: bytes | None = None  # the original entry a damaged piece came from
    offset_lie: bool = False  # an offset field (covered by no checksum) was changed


@dataclass
class Mutant:
    pieces: list[Piece]
    ops: list[str] = field(default_factory=list)
    originals: list[bytes] = field(default_factory=list)  # every entry of the seeds used

    @property
    def data(self) -> bytes:
        return b"".join(p.data for p in self.pieces)


def _entries(m: Mutant) -> list[int]:
    return [i for i, p in enumerate(m.pieces) if p.intact]


def _damage(m: Mutant, i: int, data: bytes, *, offset_lie: bool = False) -> None:
    old = m.pieces[i]
    m.pieces[i] = Piece(
        data,
        False,
        old.source if old.source is not None else old.data,
        offset_lie or old.offset_lie,
    )


def _interesting(rng: random.Random, old: int, width: int) -> int:
    bits = 8 * width
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    value = rng.choice(
        [
            0,
            1,
            -1,
            lo,
            hi,
            old + 1,
            old - 1,
            old + rng.randint(2, 300),
            old - rng.randint(2, 300),
            old ^ (1 << rng.randrange(bits)),
            rng.randint(lo, hi),
            old * 2,
            13,
            14,
            48,
            49,
            61,
        ]
    )
    return (value - lo) % (1 << bits) + lo  # wrap into the field's range


def _put(data: bytes, at: int, width: int, value: int) -> bytes:
    out = bytearray(data)
    out[at : at + width] = value.to_bytes(width, "big", signed=True)
    return bytes(out)


# --- log operators ----------------------------------------------------------------------------


def op_flip(rng: random.Random, m: Mutant) -> str:
    if not m.pieces:
        return "flip:none"
    i = rng.randrange(len(m.pieces))
    data = bytearray(m.pieces[i].data)
    if not data:
        return "flip:none"
    at = rng.randrange(len(data))
    data[at] ^= rng.randrange(1, 256)
    _damage(m, i, bytes(data), offset_lie=at < 8)
    return f"flip:{i}@{at}"


def _legacy_fields(entry: bytes) -> list[tuple[str, int, int, bool]]:
    magic = entry[16]
    key_at = 26 if magic == 1 else 18
    fields = [
        ("offset", 0, 8, False),
        ("size", 8, 4, False),
        ("crc", 12, 4, False),
        ("magic", 16, 1, True),
        ("attributes", 17, 1, True),
        ("keyLength", key_at, 4, True),
    ]
    if magic == 1:
        fields.append(("timestamp", 18, 8, True))
    key_len = struct.unpack_from(">i", entry, key_at)[0]
    value_at = key_at + 4 + max(key_len, 0)
    if value_at + 4 <= len(entry):
        fields.append(("valueLength", value_at, 4, True))
    return fields


def op_field(rng: random.Random, m: Mutant) -> str:
    intact = _entries(m)
    if not intact:
        return "field:none"
    i = rng.choice(intact)
    entry = m.pieces[i].data
    fields = _V2_FIELDS if entry[16] == 2 else _legacy_fields(entry)
    name, at, width, covered = rng.choice(fields)
    old = int.from_bytes(entry[at : at + width], "big", signed=True)
    new = _interesting(rng, old, width)
    data = _put(entry, at, width, new)
    fix = covered and rng.random() < 0.6
    if fix:
        data = fix_v2_crc(data) if entry[16] == 2 else fix_legacy_crc(data)
    _damage(m, i, data, offset_lie=name in OFFSET_FIELDS)
    return f"field:{i}.{name}={new}{'+crc' if fix else ''}"


def _tokens(records: bytes, count: int) -> list[list[object]]:
    """The records section as tokens [kind, value]: 'v' varint, 'l' varlong, 'b' raw bytes."""
    out: list[list[object]] = []
    pos = 0

    def take(kind: str) -> int:
        nonlocal pos
        value, pos = (decode_varlong if kind == "l" else decode_varint)(records, pos)
        out.append([kind, value])
        return value

    def raw(n: int) -> None:
        nonlocal pos
        out.append(["b", records[pos : pos + n]])
        pos += n

    for _ in range(count):
        take("v")
        raw(1)
        take("l")
        take("v")
        for _ in range(2):
            n = take("v")
            raw(max(n, 0))
        for _ in range(take("v")):
            raw(take("v"))
            raw(max(take("v"), 0))
    if pos < len(records):
        out.append(["b", records[pos:]])
    return out


def _render(tokens: list[list[object]]) -> bytes:
    parts = []
    for kind, value in tokens:
        if kind == "b" or kind == "raw":
            parts.append(value)
        elif kind == "l":
            parts.append(encode_varlong(value))  # type: ignore[arg-type]
        else:
            parts.append(encode_varint(value))  # type: ignore[arg-type]
    return b"".join(parts)  # type: ignore[arg-type]


def op_record(rng: random.Random, m: Mutant) -> str:
    batches = [i for i in _entries(m) if m.pieces[i].data[16] == 2]
    if not batches:
        return "record:none"
    i = rng.choice(batches)
    batch = m.pieces[i].data
    count = struct.unpack_from(">i", batch, 57)[0]
    tokens = _tokens(v2_records(batch), count)
    numeric = [t for t in tokens if t[0] in ("v", "l")]
    what = rng.random()
    if what < 0.1 or not numeric:
        records = _render(tokens) + bytes(rng.randrange(1, 9))  # trailing bytes
        label = "trailing"
    elif what < 0.2:
        records = _render(tokens)
        cut = rng.randrange(len(records) + 1)
        records = records[:cut]
        label = f"cut@{cut}"
    elif what < 0.35:
        t = rng.choice(numeric)
        k = rng.randrange(5, 12)
        t[:] = ["raw", b"\xff" * k + b"\x01"]  # overlong: more than 5 (10) bytes
        records = _render(tokens)
        label = f"overlong{k}"
    else:
        t = rng.choice(numeric)
        old = int(t[1])  # type: ignore[call-overload]
        width = 8 if t[0] == "l" else 4
        t[1] = _interesting(rng, old, width)
        records = _render(tokens)
        label = f"{t[0]}:{old}->{t[1]}"
    raw_snappy = (batch[22] & 0x07) == SNAPPY and batch[61:69] != b"\x82SNAPPY\x00"
    _damage(m, i, rebuild_v2(batch, records, raw_snappy=raw_snappy))
    return f"record:{i}.{label}"


def op_inner(rng: random.Random, m: Mutant) -> str:
    wrappers = [i for i in _entries(m) if m.pieces[i].data[16] < 2 and m.pieces[i].data[17] & 0x07]
    if not wrappers:
        return "inner:none"
    i = rng.choice(wrappers)
    entry = m.pieces[i].data
    magic, codec = entry[16], entry[17] & 0x07
    value_at = (26 if magic == 1 else 18) + 4 + 4  # key is null in wrappers
    payload = decompress(codec, entry[value_at:], magic=magic)
    inner = bytearray(payload)
    what = rng.random()
    if what < 0.4:
        at = rng.randrange(len(inner))
        inner[at] ^= rng.randrange(1, 256)
        label = f"flip@{at}"
    elif what < 0.7:
        # a length or size field of the first inner message, CRC fixed
        first = bytes(inner[: 12 + struct.unpack_from(">i", inner, 8)[0]])
        name, at, width, _ = rng.choice(_legacy_fields(first))
        new = _interesting(rng, int.from_bytes(first[at : at + width], "big", signed=True), width)
        changed = _put(first, at, width, new)
        if name != "size" and rng.random() < 0.7:
            changed = fix_legacy_crc(changed)
        inner[: len(first)] = changed
        label = f"{name}={new}"
    elif what < 0.85:
        cut = rng.randrange(len(inner))
        del inner[cut:]
        label = f"cut@{cut}"
    else:
        inner += bytes(rng.randrange(1, 30))
        label = "trailing"
    offset = struct.unpack_from(">q", entry, 0)[0]
    ts = struct.unpack_from(">q", entry, 18)[0] if magic == 1 else -1
    new_entry = encode_legacy_message(
        offset=offset,
        magic=magic,
        key=None,
        value=compress(codec, bytes(inner), magic=magic),
        timestamp=ts,
        attributes=entry[17],
    )
    _damage(m, i, new_entry)
    return f"inner:{i}.{label}"


def _inner_messages(payload: bytes) -> list[tuple[int, int]]:
    """(position, length) of the inner messages of a decompressed wrapper payload."""
    out, pos = [], 0
    while pos + 12 <= len(payload):
        size = struct.unpack_from(">i", payload, pos + 8)[0]
        if size < 14 or pos + 12 + size > len(payload):
            break
        out.append((pos, 12 + size))
        pos += 12 + size
    return out


def op_inneroffset(rng: random.Random, m: Mutant) -> str:
    wrappers = [i for i in _entries(m) if m.pieces[i].data[16] < 2 and m.pieces[i].data[17] & 0x07]
    if not wrappers:
        return "inneroffset:none"
    i = rng.choice(wrappers)
    entry = m.pieces[i].data
    magic, codec = entry[16], entry[17] & 0x07
    value_at = (26 if magic == 1 else 18) + 4 + 4  # key is null in wrappers
    inner = bytearray(decompress(codec, entry[value_at:], magic=magic))
    messages = _inner_messages(bytes(inner))
    k = rng.randrange(len(messages))
    at, length = messages[k]
    old = struct.unpack_from(">q", inner, at)[0]
    neighbours = [struct.unpack_from(">q", inner, p)[0] for p, _ in messages]
    wrapper_offset = struct.unpack_from(">q", entry, 0)[0]
    new = rng.choice(
        [
            _interesting(rng, old, 8),
            2**32 - 1,
            2**31,
            2**32 - 2,
            rng.choice(neighbours),  # a repeat: not strictly increasing
            wrapper_offset + rng.randrange(1, 5),  # past the wrapper's own offset
            old - 1,
            old + 1,
        ]
    )
    struct.pack_into(">q", inner, at, new)
    inner[at : at + length] = fix_legacy_crc(bytes(inner[at : at + length]))
    moved = magic == 0 and k == len(messages) - 1 and rng.random() < 0.3
    offset = new if moved else wrapper_offset  # magic 0: the wrapper follows its last inner
    ts = struct.unpack_from(">q", entry, 18)[0] if magic == 1 else -1
    new_entry = encode_legacy_message(
        offset=offset,
        magic=magic,
        key=None,
        value=compress(codec, bytes(inner), magic=magic),
        timestamp=ts,
        attributes=entry[17],
    )
    _damage(m, i, new_entry, offset_lie=moved)
    return f"inneroffset:{i}.{k}={new}{'+wrapper' if moved else ''}"


# --- hostile entries --------------------------------------------------------------------------


@functools.cache
def _zeros_compressed(codec: int, magic: int) -> bytes:
    return compress(codec, bytes(BOMB_BYTES), magic=magic)


def _zstd_declared(size: int) -> bytes:
    """A zstd frame header declaring ``size`` bytes of content, then one tiny RLE block."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + size.to_bytes(8, "little")
    return header + bytes([0x03, 0x00, 0x00]) + b"\x00"  # last RLE block of length 0


def _lz4_declared(size: int) -> bytes:
    from kafka_segments_ds.records.compression import lz4_header_checksum

    descriptor = bytes([0x68, 0x40]) + size.to_bytes(8, "little")
    return LZ4_MAGIC + descriptor + bytes([lz4_header_checksum(descriptor)]) + bytes(4)


def _bomb_payload(rng: random.Random, codec: int, magic: int) -> tuple[bytes, str]:
    kind = rng.randrange(3)
    if codec == GZIP and kind == 1:
        member = zlib.compress(bytes(600 * 1024), 9, wbits=31)
        return member * 16, "gzip-members"
    if codec == SNAPPY and kind == 1:
        return b"\xff\xff\xff\xff\x0f\x00", "snappy-raw-declared"
    if codec == SNAPPY and kind == 2:
        block = bytes(cramjam.snappy.compress_raw(bytes(64 * 1024)))
        head = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
        return head + (struct.pack(">i", len(block)) + block) * 160, "snappy-xerial-blocks"
    if codec == LZ4 and kind == 1:
        return _lz4_declared(1 << 40), "lz4-declared"
    if codec == ZSTD and kind == 1:
        return _zstd_declared(1 << 40), "zstd-declared"
    if codec == ZSTD and kind == 2:
        stream = zstandard.ZstdCompressor().compressobj()
        return stream.compress(bytes(BOMB_BYTES)) + stream.flush(), "zstd-streamed"
    return _zeros_compressed(codec, magic), "zeros"


def _hostile(rng: random.Random, offset: int) -> tuple[bytes, str]:
    kind = rng.randrange(8)
    if kind <= 2:  # decompression bomb
        magic = rng.choice((0, 1, 2, 2))
        codec = rng.choice((GZIP, SNAPPY, LZ4) if magic < 2 else (GZIP, SNAPPY, LZ4, ZSTD))
        payload, label = _bomb_payload(rng, codec, magic)
        if magic == 2:
            count = rng.choice((1, 1000, 2**31 - 1))
            batch = rebuild_v2(v2(offset, 1), b"", codec=NONE)
            out = bytearray(batch[:61] + payload)
            struct.pack_into(">i", out, 8, 49 + len(payload))
            out[22] = codec
            struct.pack_into(">i", out, 23, max(count - 1, 0))
            struct.pack_into(">i", out, 57, count)
            return fix_v2_crc(bytes(out)), f"bomb:v2.{codec}.{label}.count{count}"
        wrapper = encode_legacy_message(
            offset=offset, magic=magic, key=None, value=payload, timestamp=TS, attributes=codec
        )
        return wrapper, f"bomb:m{magic}.{codec}.{label}"
    if kind == 3:  # wrappers nested in wrappers
        magic = rng.choice((0, 1))
        depth = rng.randrange(2, 40)
        inner = encode_legacy_message(offset=0, magic=magic, key=b"k", value=b"v", timestamp=TS)
        for _ in range(depth):
            inner = legacy_wrapper(
                inner, last_offset=0, magic=magic, codec=rng.choice((GZIP, SNAPPY, LZ4))
            )
        return legacy_wrapper(
            inner, last_offset=offset, magic=magic, codec=GZIP
        ), f"nested:m{magic}x{depth}"
    if kind == 4:  # a magic-2 batch (or garbage) inside a legacy wrapper
        magic = rng.choice((0, 1))
        inner = rng.choice((v2(0, 2), b"", bytes(40), b"\x00" * 11 + b"\x05" + b"abcde"))
        return legacy_wrapper(
            inner, last_offset=offset, magic=magic, codec=rng.choice((GZIP, SNAPPY, LZ4))
        ), f"wrapped-odd:m{magic}.{len(inner)}"
    if kind == 5:  # null-valued wrapper, or zstd in a legacy wrapper
        magic = rng.choice((0, 1))
        codec = rng.choice((GZIP, ZSTD, 5, 6, 7))
        value = None if codec == GZIP else b"\x28\xb5\x2f\xfd" + bytes(8)
        return encode_legacy_message(
            offset=offset, magic=magic, key=None, value=value, timestamp=TS, attributes=codec
        ), f"bad-wrapper:m{magic}.{codec}"
    if kind == 6:  # magic-1 wrapper whose offset is below its last relative offset
        specs_inner = b"".join(
            encode_legacy_message(offset=r, magic=1, key=None, value=b"x", timestamp=TS)
            for r in (0, 5, 900)
        )
        return legacy_wrapper(
            specs_inner, last_offset=rng.choice((1, 3)), magic=1, codec=GZIP
        ), "rel-offset-lie"
    batch = rebuild_v2(
        v2(offset, 3, rng.choice((NONE, GZIP, LZ4, ZSTD))),
        v2_records(v2(offset, 3)),
        count=rng.choice((0, 2, 4, 2**31 - 1, -1)),
        lod=rng.choice((0, 1, -1, 2**31 - 1)),
    )
    return batch, "v2-count-lod-lie"


def op_hostile(rng: random.Random, m: Mutant) -> str:
    at = rng.randrange(len(m.pieces) + 1)
    offset = 10 * at + rng.randrange(3)
    data, label = _hostile(rng, offset)
    if at < len(m.pieces) and rng.random() < 0.5:
        _damage(m, at, data)
        return f"hostile:replace{at}.{label}"
    m.pieces.insert(at, Piece(data, False))
    return f"hostile:insert{at}.{label}"


# --- whole-log operators ----------------------------------------------------------------------


def _cut(pieces: list[Piece], at: int, keep_head: bool) -> list[Piece]:
    """The pieces before (keep_head) or after byte ``at``; a piece cut in two is damaged."""
    out: list[Piece] = []
    pos = 0
    for p in pieces:
        start, end = pos, pos + len(p.data)
        pos = end
        if keep_head:
            if end <= at:
                out.append(p)
            elif start < at:
                out.append(Piece(p.data[: at - start], False, p.source or p.data, p.offset_lie))
        else:
            if start >= at:
                out.append(p)
            elif end > at:
                out.append(Piece(p.data[at - start :], False, p.source or p.data, p.offset_lie))
    return out


def op_truncate(rng: random.Random, m: Mutant) -> str:
    size = len(m.data)
    at = rng.randrange(size) if size else 0
    m.pieces = _cut(m.pieces, at, keep_head=True)
    return f"truncate:{at}"


def op_garbage(rng: random.Random, m: Mutant) -> str:
    at = rng.randrange(len(m.pieces) + 1)
    n = rng.choice((1, 5, 16, 17, 30, 61, 200))
    blob = rng.choice((bytes(n), b"\xff" * n, rng.randbytes(n), b"\x02" * n))
    m.pieces.insert(at, Piece(blob, False))
    return f"garbage:{at}x{n}"


def op_splice(rng: random.Random, m: Mutant) -> str:
    splices = sum(op.startswith("splice") for op in m.ops)
    other = build_seed(rng.choice(SEED_NAMES), base=SPLICE_BASE * (splices + 1))
    m.originals.extend(other.entries)
    tail = [Piece(e, True) for e in other.entries]
    head_at = rng.randrange(len(m.data) + 1)
    tail_at = rng.randrange(sum(len(e) for e in other.entries))
    m.pieces = _cut(m.pieces, head_at, keep_head=True) + _cut(tail, tail_at, keep_head=False)
    return f"splice:{other.name}@{head_at}/{tail_at}"


def op_collide(rng: random.Random, m: Mutant) -> str:
    """A prefix of this log joined to the end of another log whose offsets collide with it,
    as when segment files of two logs are mixed up."""
    head_at = rng.randrange(len(m.data) + 1)
    head = _cut(m.pieces, head_at, keep_head=True)
    last = max((o for p in head if p.intact for o in _claimed_offsets(p.data)), default=0)
    base = rng.choice((0, max(last - rng.randrange(1, 4), 0), last, rng.randrange(last + 1)))
    other = build_seed(rng.choice(SEED_NAMES), base=base)
    m.originals.extend(other.entries)
    tail = [Piece(e, True) for e in other.entries]
    tail_at = rng.randrange(sum(len(e) for e in other.entries))
    m.pieces = head + _cut(tail, tail_at, keep_head=False)
    return f"collide:{other.name}+{base}@{head_at}/{tail_at}"


def _claimed_offsets(entry: bytes) -> tuple[int, ...]:
    """The last offset an entry's header claims (what a reader orders entries by)."""
    (offset,) = struct.unpack_from(">q", entry, 0)
    if entry[16] == 2:
        return (offset + struct.unpack_from(">i", entry, 23)[0],)
    return (offset,)


def op_drop(rng: random.Random, m: Mutant) -> str:
    if not m.pieces:
        return "drop:none"
    i = rng.randrange(len(m.pieces))
    del m.pieces[i]
    return f"drop:{i}"


def op_duplicate(rng: random.Random, m: Mutant) -> str:
    if not m.pieces:
        return "duplicate:none"
    i = rng.randrange(len(m.pieces))
    p = m.pieces[i]
    m.pieces.insert(i + 1, Piece(p.data, False, p.source or p.data, p.offset_lie))
    return f"duplicate:{i}"


def op_swap(rng: random.Random, m: Mutant) -> str:
    if len(m.pieces) < 2:
        return "swap:none"
    i = rng.randrange(len(m.pieces) - 1)
    a, b = m.pieces[i], m.pieces[i + 1]
    # out of order: which one gets dropped is not defined, so neither is required
    m.pieces[i : i + 2] = [
        Piece(b.data, False, b.source or b.data, True),
        Piece(a.data, False, a.source or a.data, True),
    ]
    return f"swap:{i}"


OPERATORS = {
    "flip": (op_flip, 5),
    "field": (op_field, 5),
    "record": (op_record, 4),
    "inner": (op_inner, 2),
    "inneroffset": (op_inneroffset, 2),
    "hostile": (op_hostile, 3),
    "truncate": (op_truncate, 2),
    "garbage": (op_garbage, 2),
    "splice": (op_splice, 2),
    "collide": (op_collide, 1),
    "drop": (op_drop, 1),
    "duplicate": (op_duplicate, 1),
    "swap": (op_swap, 1),
}


def op_badmagic(rng: random.Random, m: Mutant) -> str:
    """An unknown magic byte in one entry, its size field left as it is (consistent)."""
    verbatim, target = "", None
    if rng.random() < 0.5:
        # a wrapper whose payload stores its inner messages verbatim: a large incompressible
        # value first makes the compressor give up on matches
        magic, codec = rng.choice((0, 1)), rng.choice((GZIP, SNAPPY, LZ4))
        last = rng.choice((2, 500, 2**62 + rng.randrange(1000)))
        specs = [
            RecordSpec(value=rng.randbytes(size), key=b"k%d" % j, timestamp=TS + j)
            for j, size in enumerate((rng.choice((300, 5000, 20000)), rng.randrange(10, 80)))
        ]
        wrapper = encode_legacy_wrapper(specs, last_offset=last, magic=magic, compression=codec)
        m.originals.append(wrapper)
        target = rng.randrange(len(m.pieces) + 1)
        m.pieces.insert(target, Piece(wrapper, True))
        verbatim = f"+wrapper{magic}.{codec}@{last}"
    intact = _entries(m)
    if not intact:
        return "badmagic:none"
    wrappers = [i for i in intact if m.pieces[i].data[16] < 2 and m.pieces[i].data[17] & 0x07]
    if target is None:
        target = rng.choice(wrappers if wrappers and rng.random() < 0.7 else intact)
    i = target
    value = rng.choice((3, 19, 100, 161, 255, rng.randrange(3, 256)))
    data = bytearray(m.pieces[i].data)
    data[16] = value
    _damage(m, i, bytes(data))
    return f"badmagic:{i}={value}{verbatim}"


def op_backwards(rng: random.Random, m: Mutant) -> str:
    """A checksum-valid v2 batch whose offsets go back, inserted after an entry."""
    at = len(m.pieces) if rng.random() < 0.6 else rng.randrange(len(m.pieces) + 1)
    before = [o for p in m.pieces[:at] if p.intact for o in _claimed_offsets(p.data)]
    highest = max(before, default=0)
    near = max(highest - rng.randrange(1, 4), 0)
    base = rng.choice((0, highest, near, rng.randrange(highest + 1)))
    batch = v2(base, rng.randrange(1, 5), rng.choice((NONE, NONE, GZIP, ZSTD)))
    m.originals.append(batch)
    m.pieces.insert(at, Piece(batch, True))
    return f"backwards:{at}@{base}"


SHAPES = {"badmagic": op_badmagic, "backwards": op_backwards}
SHAPE_SHARE = 0.25  # of log inputs get one of the SHAPES after their other operators


def mutate_log(rng: random.Random, seed_name: str, shapes: random.Random | None = None) -> Mutant:
    """Mutate seed ``seed_name``; ``shapes`` (a random stream of its own, so the inputs
    without a shape keep their numbers) adds one of :data:`SHAPES` to some inputs."""
    seed = build_seed(seed_name)
    m = Mutant([Piece(e, True) for e in seed.entries], originals=list(seed.entries))
    names = list(OPERATORS)
    weights = [OPERATORS[n][1] for n in names]
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        name = rng.choices(names, weights)[0]
        m.ops.append(OPERATORS[name][0](rng, m))
    if shapes is not None and shapes.random() < SHAPE_SHARE:
        m.ops.append(add_shape(shapes, m))
    return m


def add_shape(rng: random.Random, m: Mutant) -> str:
    """Apply one of :data:`SHAPES` (chosen evenly) to ``m``."""
    return SHAPES[rng.choice(sorted(SHAPES))](rng, m)


# --- index files ------------------------------------------------------------------------------


def mutate_index(
    rng: random.Random, data: bytes, entry_size: int, log_size: int
) -> tuple[bytes, str]:
    """Damage an ``.index`` (entry_size 8) or ``.timeindex`` (12) file."""
    out = bytearray(data)
    n = len(out) // entry_size
    kind = rng.randrange(7)
    if kind == 0 and out:
        at = rng.randrange(len(out))
        out[at] ^= rng.randrange(1, 256)
        return bytes(out), f"flip@{at}"
    if kind == 1:
        cut = rng.randrange(len(out) + 1)
        return bytes(out[:cut]), f"cut@{cut}"
    if kind == 2:
        extra = rng.choice((entry_size, 10 * entry_size, 1 << 20))
        return bytes(out) + bytes(extra), f"zero-tail{extra}"
    if kind == 3 and n:
        i = rng.randrange(n)
        # an entry pointing anywhere: mid-batch, past the end, negative
        value = rng.choice(
            (rng.randrange(max(log_size, 1)), log_size, log_size + 100, -1, 2**31 - 1)
        )
        at = i * entry_size + entry_size - 4 if entry_size == 8 else i * entry_size
        width = 4 if entry_size == 8 else 8
        out[at : at + width] = value.to_bytes(width, "big", signed=True)
        return bytes(out), f"field{i}={value}"
    if kind == 4 and n:
        i = rng.randrange(n)
        rel_at = i * entry_size if entry_size == 8 else i * entry_size + 8
        value = rng.choice((0, 1, rng.randrange(100), 2**31 - 1, -5))
        out[rel_at : rel_at + 4] = value.to_bytes(4, "big", signed=True)
        return bytes(out), f"offset{i}={value}"
    if kind == 5 and n >= 2:
        i = rng.randrange(n - 1)
        a = out[i * entry_size : (i + 1) * entry_size]
        out[i * entry_size : (i + 1) * entry_size] = out[
            (i + 1) * entry_size : (i + 2) * entry_size
        ]
        out[(i + 1) * entry_size : (i + 2) * entry_size] = a
        return bytes(out), f"swap{i}"
    return rng.randbytes(rng.choice((entry_size, 5 * entry_size, 7))), "random"
