"""Arrow column builders: a window's row arrays -> one ``pa.RecordBatch`` with the task's
columns. Buffers come from Arrow's pool and are filled in place by the gather kernels; the
fixed-width columns and the binary offsets of a window share one allocation (a :class:`_Slab`):
each allocation is a call into the pool that lets go of the GIL, which the read-ahead thread
may then hold for a while."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from kafka_segments_ds.reader.rows import TaskBounds
from kafka_segments_ds.records import kernels as K
from kafka_segments_ds.records.compression import CODEC_LABELS
from kafka_segments_ds.schema import HEADER_TYPE, TIMESTAMP_TYPE, arrow_schema

_MAX_MS = (2**63 - 1) // 1000
GATHER_LIMIT = 1 << 30  # key/value bytes per Arrow array chunk (binary offsets are int32)
# bytes a row takes in the window's slab, and bytes more a column takes (binary offsets: n + 1)
_SLAB_BYTES = {"key": (4, 4), "value": (4, 4), "offset": (8, 0), "timestamp": (8, 0)}
_SLAB_BYTES["timestampType"] = (4, 0)


class ColumnBuilder:
    """Builds the Arrow batches of one task (keeps its constant columns between windows)."""

    def __init__(self, columns: tuple[str, ...], bounds: TaskBounds) -> None:
        self.columns = columns
        self.bounds = bounds
        self.schema = arrow_schema(columns)
        self._constants: dict[str, pa.Array] = {}  # topic/partition/segment columns
        self._slab_columns = {c: _SLAB_BYTES[c] for c in columns if c in _SLAB_BYTES}

    def build(
        self,
        window: np.ndarray,
        arena: np.ndarray,
        r: dict[str, np.ndarray],
        entries: dict[str, np.ndarray],
    ) -> pa.RecordBatch:
        """The batch of rows ``r`` (their entries' fields in ``entries``)."""
        n = r["offset"].shape[0]
        b = self.bounds
        slab = _Slab(
            sum(_aligned(per_row * n + extra) for per_row, extra in self._slab_columns.values())
        )
        out = []
        for name in self.columns:
            if name == "key":
                out.append(binary_column(window, arena, r["kpos"], r["klen"], slab=slab))
            elif name == "value":
                out.append(binary_column(window, arena, r["vpos"], r["vlen"], slab=slab))
            elif name == "topic":
                out.append(self._constant("topic", b.topic, pa.string(), n))
            elif name == "partition":
                out.append(self._constant("partition", b.partition, pa.int32(), n))
            elif name == "offset":
                out.append(_fixed_width(r["offset"], pa.int64(), slab))
            elif name == "timestamp":
                out.append(timestamp_column(r["ts"], slab))
            elif name == "timestampType":
                out.append(_fixed_width(r["ts_type"], pa.int32(), slab))
            elif name == "headers":
                out.append(headers_column(window, arena, r["hpos"], r["hcount"]))
            elif name == "segment":
                out.append(self._constant("segment", b.segment, pa.string(), n))
            else:
                out.append(self._metadata(name, r["entry"], entries))
        return pa.RecordBatch.from_arrays(out, schema=self.schema)

    def _constant(self, name: str, value: object, arrow_type: pa.DataType, n: int) -> pa.Array:
        """A column holding one value: a slice of an array built once per task."""
        cached = self._constants.get(name)
        if cached is None or len(cached) < n:
            cached = _repeat(value, arrow_type, max(n, 4096))
            self._constants[name] = cached
        return cached.slice(0, n)

    def _metadata(self, name: str, ent: np.ndarray, e: dict[str, np.ndarray]) -> pa.Array:
        if name == "compression":
            return pa.DictionaryArray.from_arrays(
                _fixed_width(e["codec"][ent], pa.int32()), _strings(CODEC_LABELS)
            ).cast(pa.string())
        if name in ("isTransactional", "isControl"):
            bit = 0x10 if name == "isTransactional" else 0x20
            flags = (e["magic"][ent] == 2) & ((e["attributes"][ent] & bit) != 0)
            bits = pa.py_buffer(np.packbits(flags, bitorder="little"))
            return pa.Array.from_buffers(pa.bool_(), flags.shape[0], [None, bits])
        source, arrow_type = {
            "magic": ("magic", pa.int8()),
            "batchBaseOffset": ("base_offset", pa.int64()),
            "batchLastOffset": ("last_offset", pa.int64()),
            "producerId": ("producer_id", pa.int64()),
            "producerEpoch": ("producer_epoch", pa.int16()),
            "baseSequence": ("base_sequence", pa.int32()),
            "leaderEpoch": ("leader_epoch", pa.int32()),
            "position": ("position", pa.int64()),
        }[name]
        return _fixed_width(e[source][ent], arrow_type)


# Columns are built from buffers only: pa.array and pa.scalar import pandas on first use (when
# installed), which is 0.2-0.5 s of a fresh process's first read.


def _repeat(value: object, arrow_type: pa.DataType, n: int) -> pa.Array:
    """``value`` (a str, an int or None) ``n`` times."""
    if value is None:
        return pa.nulls(n, arrow_type)
    if isinstance(value, str):
        encoded = value.encode()
        if len(encoded) * n >= 2**31:  # past int32 offsets: Arrow's own repeat chunks it
            return pa.repeat(pa.scalar(value, arrow_type), n)
        offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(encoded))
        return pa.Array.from_buffers(
            arrow_type, n, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * n)]
        )
    return _fixed_width(np.full(n, value, np.int64), arrow_type)


def _strings(values: tuple[str, ...] | list[str]) -> pa.Array:
    """A small string array."""
    encoded = [v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(v) for v in encoded], out=offsets[1:])
    data = pa.py_buffer(b"".join(encoded))
    return pa.Array.from_buffers(pa.string(), len(encoded), [None, pa.py_buffer(offsets), data])


def _aligned(nbytes: int) -> int:
    return (nbytes + 63) & ~63  # Arrow's buffer alignment


class _Slab:
    """One buffer from Arrow's pool, handed out in 64-byte aligned pieces (a window's
    fixed-width columns and binary offsets: one allocation for all of them)."""

    def __init__(self, nbytes: int) -> None:
        self._buffer = pa.allocate_buffer(nbytes)
        self._bytes = np.frombuffer(self._buffer, np.uint8)
        self._used = 0

    def take(self, n: int, dtype: type) -> tuple[pa.Buffer, np.ndarray]:
        """A piece for ``n`` values of ``dtype`` and a numpy view of it."""
        size = n * np.dtype(dtype).itemsize
        start = self._used
        if start + size > self._bytes.shape[0]:
            raise AssertionError("slab sized too small")  # a builder bug, not data
        self._used = start + _aligned(size)
        return self._buffer.slice(start, size), self._bytes[start : start + size].view(dtype)


def _allocate(n: int, dtype: type, slab: _Slab | None = None) -> tuple[pa.Buffer, np.ndarray]:
    """An output buffer from Arrow's pool (which reuses freed memory), or a piece of ``slab``,
    and a numpy view of it."""
    if slab is not None:
        return slab.take(n, dtype)
    buf = pa.allocate_buffer(n * np.dtype(dtype).itemsize)
    return buf, np.frombuffer(buf, dtype, n)


def _fixed_width(
    values: np.ndarray, arrow_type: pa.DataType, slab: _Slab | None = None
) -> pa.Array:
    buf, view = _allocate(values.shape[0], arrow_type.to_pandas_dtype(), slab)
    np.copyto(view, values, casting="unsafe")
    return pa.Array.from_buffers(arrow_type, values.shape[0], [None, buf])


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def binary_column(
    window: np.ndarray,
    arena: np.ndarray,
    pos: np.ndarray,
    length: np.ndarray,
    arrow_type: pa.DataType | None = None,
    slab: _Slab | None = None,
) -> pa.Array:
    """Gather ``[pos, pos + length)`` slices (length -1 = null) into a binary/string array
    (its offsets in ``slab`` when given and the array is one piece)."""
    arrow_type = arrow_type or pa.binary()
    n = pos.shape[0]
    bounds = [0, n]
    if (
        window.shape[0] + arena.shape[0] > GATHER_LIMIT
        and int(np.maximum(length, 0).sum()) > GATHER_LIMIT
    ):
        # keep the int32 offsets valid: cut into pieces
        cum = np.cumsum(np.maximum(length, 0))
        bounds = [0]
        while bounds[-1] < n:
            done = int(cum[bounds[-1] - 1]) if bounds[-1] else 0
            bounds.append(
                max(int(np.searchsorted(cum, done + GATHER_LIMIT, "right")), bounds[-1] + 1)
            )
    pieces = []
    for lo, hi in itertools.pairwise(bounds):
        offsets_buf, offsets = _allocate(hi - lo + 1, np.int32, slab if len(bounds) == 2 else None)
        size = K.binary_offsets(length[lo:hi], offsets)
        data_buf, data = _allocate(size, np.uint8)
        K.use_threads(size)
        settle = K.prefault_back_half(data)
        bad = K.gather_into(window, arena, pos[lo:hi], length[lo:hi], offsets, data)
        if settle is not None:
            settle()
        if bad:
            raise AssertionError("decoded slice outside its buffer")  # a decoder bug, not data
        pieces.append(
            pa.Array.from_buffers(
                arrow_type, hi - lo, [_validity(length[lo:hi] >= 0), offsets_buf, data_buf]
            )
        )
    return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


def timestamp_column(ts_ms: np.ndarray, slab: _Slab | None = None) -> pa.Array:
    """Kafka milliseconds -> Arrow timestamp[us, UTC]; -1 (no timestamp) -> null."""
    valid = ts_ms != -1
    # a millisecond value this far out (garbage, ±292,000 years) has no microsecond form
    out_of_range = (ts_ms > _MAX_MS) | (ts_ms < -_MAX_MS)
    if out_of_range.any():
        valid &= ~out_of_range
        ts_ms = np.where(out_of_range, 0, ts_ms)
    buf, micros = _allocate(ts_ms.shape[0], np.int64, slab)
    np.multiply(ts_ms, 1000, out=micros)
    return pa.Array.from_buffers(TIMESTAMP_TYPE, ts_ms.shape[0], [_validity(valid), buf])


def headers_column(
    window: np.ndarray, arena: np.ndarray, hpos: np.ndarray, hcount: np.ndarray
) -> pa.Array:
    """list<struct<key string, value binary>> from the header sections of the rows."""
    n = hpos.shape[0]
    list_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(hcount, out=list_offsets[1:])
    total = int(list_offsets[-1])
    h_kpos = np.empty(total, np.int64)
    h_klen = np.empty(total, np.int64)
    h_vpos = np.empty(total, np.int64)
    h_vlen = np.empty(total, np.int64)
    K.decode_v2_headers(window, arena, hpos, hcount, h_kpos, h_klen, h_vpos, h_vlen)
    keys = binary_column(window, arena, h_kpos, h_klen, pa.string())
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        # Java decodes header keys with replacement characters; do the same.
        raw = binary_column(window, arena, h_kpos, h_klen)
        keys = pa.array([v.decode("utf-8", errors="replace") for v in raw.to_pylist()], pa.string())
    values = binary_column(window, arena, h_vpos, h_vlen)
    struct = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    return pa.ListArray.from_arrays(
        _fixed_width(list_offsets, pa.int32()), struct, type=HEADER_TYPE
    )
