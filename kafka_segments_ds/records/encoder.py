"""Columnar magic-2 batch encoder: Arrow-style columns in, complete record batches out.

The writer's hot path. Records are never Python objects: key, value and header columns arrive as
(offsets, data, validity) numpy arrays and numba kernels (1) size every record and cut batches at
``batch_bytes`` / ``batch_records`` the way a producer fills ``batch.size``, (2) write the record
regions, (3) write the 61-byte headers. Python only compresses and checksums once per batch.

The readable reference for the bytes produced is :func:`kafka_segments_ds.records.builder.
encode_batch` (one :class:`RecordSpec` at a time); tests check the two agree byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from kafka_segments_ds.records.compression import CompressionType, compress
from kafka_segments_ds.records.crc_kernels import crc32c_range
from kafka_segments_ds.records.kernels import _copy_bytes, use_threads
from kafka_segments_ds.records.v2 import CRC_START, TIMESTAMP_TYPE_MASK

V2_HEADER_SIZE = 61
BATCH_LENGTH_BASE = V2_HEADER_SIZE - 12  # batchLength counts from partitionLeaderEpoch on


@dataclass(frozen=True)
class BinaryColumn:
    """A nullable binary column as numpy arrays: row i is ``data[offsets[i]:offsets[i + 1]]``."""

    offsets: np.ndarray  # int32 or int64, n + 1 (need not start at 0)
    data: np.ndarray  # uint8
    valid: np.ndarray  # uint8, n; 0 = null

    @classmethod
    def empty(cls, rows: int) -> BinaryColumn:
        """An all-null column of ``rows`` rows."""
        return cls(np.zeros(rows + 1, np.int64), np.zeros(0, np.uint8), np.zeros(rows, np.uint8))


@dataclass(frozen=True)
class RecordColumns:
    """Everything the encoder needs for ``rows`` records, in log order."""

    timestamps: np.ndarray  # int64 ms, n
    keys: BinaryColumn
    values: BinaryColumn
    header_rows: np.ndarray  # int64, n + 1: record i has headers header_rows[i]:header_rows[i+1]
    header_keys: BinaryColumn  # UTF-8 key per header (never null)
    header_values: BinaryColumn

    @property
    def rows(self) -> int:
        return len(self.timestamps)


@dataclass(frozen=True)
class BatchSettings:
    """Batch-level fields and limits, the same for every batch of one encode call."""

    compression: int = CompressionType.NONE
    level: int | None = None
    batch_bytes: int = 16384  # the producer's batch.size
    batch_records: int = 2**31 - 1
    log_append_time: int | None = None  # set: timestampType LogAppendTime with this time
    leader_epoch: int = 0
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1


@dataclass(frozen=True)
class EncodedBatches:
    """Encoded batches laid end to end, and per batch what the segment writer needs."""

    data: bytes | bytearray | memoryview
    positions: np.ndarray  # int64 byte position of each batch in ``data``
    sizes: np.ndarray  # int64 total size of each batch
    first_rows: np.ndarray  # int64 row of each batch's first record (= base offset - first)
    last_rows: np.ndarray  # int64 row of each batch's last record
    max_timestamps: np.ndarray  # int64


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@intrinsic
def _leading_zeros(typingctx, value):  # type: ignore[no-untyped-def]
    """Count of leading zero bits of a uint64 (LLVM ctlz: one instruction on current CPUs)."""
    sig = types.uint64(types.uint64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i64, [i64, ir.IntType(1)]), "llvm.ctlz.i64"
        )
        return builder.call(function, [args[0], ir.Constant(ir.IntType(1), 0)])

    return sig, codegen


@njit(cache=True, inline="always")
def _varint_size(zigzagged: np.uint64) -> int:
    """Bytes of an unsigned varint, without a branch per byte: 1 + (bit length - 1) // 7."""
    bits = np.uint64(64) - _leading_zeros(zigzagged | np.uint64(1))  # type: ignore[call-arg]
    return 1 + int(bits - np.uint64(1)) // 7


@njit(cache=True, inline="always")
def _zigzag(value: np.int64) -> np.uint64:
    return np.uint64((value << np.int64(1)) ^ (value >> np.int64(63)))


@njit(cache=True, inline="always")
def _blob_size(offsets: np.ndarray, valid: np.ndarray, i: int) -> int:
    if valid[i] == 0:
        return 1  # varint -1
    length = offsets[i + 1] - offsets[i]
    return _varint_size(_zigzag(np.int64(length))) + length


@njit(cache=True, inline="always")
def _body_size(
    i: int,
    offset_delta: int,
    timestamp_delta: np.int64,
    key_off: np.ndarray,
    key_valid: np.ndarray,
    val_off: np.ndarray,
    val_valid: np.ndarray,
    header_rows: np.ndarray,
    hk_off: np.ndarray,
    hv_off: np.ndarray,
    hv_valid: np.ndarray,
) -> int:
    size = (
        1 + _varint_size(_zigzag(timestamp_delta)) + _varint_size(_zigzag(np.int64(offset_delta)))
    )
    size += _blob_size(key_off, key_valid, i) + _blob_size(val_off, val_valid, i)
    first = header_rows[i]
    last = header_rows[i + 1]
    size += _varint_size(_zigzag(np.int64(last - first)))
    for h in range(first, last):
        key_length = hk_off[h + 1] - hk_off[h]
        size += _varint_size(_zigzag(np.int64(key_length))) + key_length
        size += _blob_size(hv_off, hv_valid, h)
    return size


@njit(cache=True)
def plan_batches(
    timestamps: np.ndarray,
    key_off: np.ndarray,
    key_valid: np.ndarray,
    val_off: np.ndarray,
    val_valid: np.ndarray,
    header_rows: np.ndarray,
    hk_off: np.ndarray,
    hv_off: np.ndarray,
    hv_valid: np.ndarray,
    batch_bytes: int,
    batch_records: int,
    body_sizes: np.ndarray,
    batch_starts: np.ndarray,
    region_sizes: np.ndarray,
) -> int:
    """Cut rows into batches; fill each record's body size and each batch's first row.

    A batch takes records while its size stays within ``batch_bytes`` and its count within
    ``batch_records``; a record that alone exceeds ``batch_bytes`` gets a batch of its own (as a
    producer does). ``batch_starts[count]`` is set to the row count. Returns the batch count.
    """
    rows = timestamps.shape[0]
    batches = 0
    count = 0
    region = 0
    base_ts = np.int64(0)
    i = 0
    while i < rows:
        if count == 0:
            base_ts = timestamps[i]
            batch_starts[batches] = i
        body = _body_size(
            i, count, timestamps[i] - base_ts, key_off, key_valid, val_off, val_valid,
            header_rows, hk_off, hv_off, hv_valid,
        )  # fmt: skip
        total = _varint_size(_zigzag(np.int64(body))) + body
        if count > 0 and (V2_HEADER_SIZE + region + total > batch_bytes or count >= batch_records):
            region_sizes[batches] = region  # close the batch; row i starts the next one
            batches += 1
            count = 0
            region = 0
            continue
        body_sizes[i] = body
        region += total
        count += 1
        i += 1
    if count > 0:
        region_sizes[batches] = region
        batches += 1
    batch_starts[batches] = rows
    return batches


@njit(cache=True, inline="always")
def _put_varint(out: np.ndarray, pos: int, zigzagged: np.uint64) -> int:
    while zigzagged >= 0x80:
        out[pos] = np.uint8((zigzagged & np.uint64(0x7F)) | np.uint64(0x80))
        zigzagged >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(zigzagged)
    return pos + 1


@njit(cache=True, inline="always")
def _put_blob(
    out: np.ndarray, pos: int, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, i: int
) -> int:
    if valid[i] == 0:
        out[pos] = 1  # zigzag(-1)
        return pos + 1
    start = offsets[i]
    length = offsets[i + 1] - start
    pos = _put_varint(out, pos, _zigzag(np.int64(length)))
    _copy_bytes(out, pos, data, start, length)  # type: ignore[call-arg]
    return pos + length


@njit(cache=True, parallel=True, nogil=True)
def encode_records(
    batches: int,
    batch_starts: np.ndarray,
    region_positions: np.ndarray,
    body_sizes: np.ndarray,
    timestamps: np.ndarray,
    key_off: np.ndarray,
    key_data: np.ndarray,
    key_valid: np.ndarray,
    val_off: np.ndarray,
    val_data: np.ndarray,
    val_valid: np.ndarray,
    header_rows: np.ndarray,
    hk_off: np.ndarray,
    hk_data: np.ndarray,
    hv_off: np.ndarray,
    hv_data: np.ndarray,
    hv_valid: np.ndarray,
    out: np.ndarray,
    header: tuple,  # type: ignore[type-arg]
) -> None:
    """Write batch b's records at ``region_positions[b]`` (sizes from :func:`plan_batches`).

    With a non-empty ``header`` (the arguments of :func:`_write_header` after the position)
    the records follow their header in place: write the header and the CRC too, while the
    batch is still in cache.
    """
    plain = len(header[0]) > 0
    for b in prange(batches):
        pos = region_positions[b]
        first = batch_starts[b]
        base_ts = timestamps[first]
        for i in range(first, batch_starts[b + 1]):
            pos = _put_varint(out, pos, _zigzag(np.int64(body_sizes[i])))
            out[pos] = 0  # record attributes
            pos = _put_varint(out, pos + 1, _zigzag(timestamps[i] - base_ts))
            pos = _put_varint(out, pos, _zigzag(np.int64(i - first)))
            pos = _put_blob(out, pos, key_off, key_data, key_valid, i)
            pos = _put_blob(out, pos, val_off, val_data, val_valid, i)
            h0 = header_rows[i]
            h1 = header_rows[i + 1]
            pos = _put_varint(out, pos, _zigzag(np.int64(h1 - h0)))
            for h in range(h0, h1):
                pos = _put_key(out, pos, hk_off, hk_data, h)
                pos = _put_blob(out, pos, hv_off, hv_data, hv_valid, h)
        if plain:
            start = region_positions[b] - V2_HEADER_SIZE
            _write_header(
                out, start, b, header[0], header[1], header[2], header[3], header[4],
                header[5], header[6], header[7], header[8], header[9], header[10],
            )  # fmt: skip
            _put_be(out, start + 17, np.int64(crc32c_range(out, start + CRC_START, pos)), 4)


@njit(cache=True, inline="always")
def _put_key(out: np.ndarray, pos: int, offsets: np.ndarray, data: np.ndarray, h: int) -> int:
    start = offsets[h]
    length = offsets[h + 1] - start
    pos = _put_varint(out, pos, _zigzag(np.int64(length)))
    _copy_bytes(out, pos, data, start, length)  # type: ignore[call-arg]
    return pos + length


@njit(cache=True, inline="always")
def _put_be(out: np.ndarray, pos: int, value: np.int64, width: int) -> None:
    for j in range(width):
        out[pos + width - 1 - j] = np.uint8((value >> np.int64(8 * j)) & np.int64(0xFF))


@njit(cache=True, inline="always")
def _write_header(
    out: np.ndarray,
    p: int,
    b: int,
    base_offsets: np.ndarray,
    region_lengths: np.ndarray,
    attributes: int,
    last_offset_deltas: np.ndarray,
    base_timestamps: np.ndarray,
    max_timestamps: np.ndarray,
    record_counts: np.ndarray,
    leader_epoch: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> None:
    """Write batch b's 61-byte header at ``p``, except the CRC (FORMAT.md §4.1)."""
    _put_be(out, p, base_offsets[b], 8)
    _put_be(out, p + 8, np.int64(BATCH_LENGTH_BASE + region_lengths[b]), 4)
    _put_be(out, p + 12, np.int64(leader_epoch), 4)
    out[p + 16] = 2
    _put_be(out, p + 21, np.int64(attributes), 2)
    _put_be(out, p + 23, last_offset_deltas[b], 4)
    _put_be(out, p + 27, base_timestamps[b], 8)
    _put_be(out, p + 35, max_timestamps[b], 8)
    _put_be(out, p + 43, np.int64(producer_id), 8)
    _put_be(out, p + 51, np.int64(producer_epoch), 2)
    _put_be(out, p + 53, np.int64(base_sequence), 4)
    _put_be(out, p + 57, record_counts[b], 4)


@njit(cache=True, parallel=True, nogil=True)
def write_headers(out: np.ndarray, positions: np.ndarray, sizes: np.ndarray, header: tuple) -> None:  # type: ignore[type-arg]
    """Write every batch's header at ``positions`` and its CRC-32C over the complete batch."""
    for b in prange(positions.shape[0]):
        p = positions[b]
        _write_header(
            out, p, b, header[0], header[1], header[2], header[3], header[4], header[5],
            header[6], header[7], header[8], header[9], header[10],
        )  # fmt: skip
        _put_be(out, p + 17, np.int64(crc32c_range(out, p + CRC_START, p + sizes[b])), 4)


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def _buffer(size: int, reuse: list[np.ndarray] | None) -> np.ndarray:
    """``size`` bytes from the caller's reusable buffer (grown as needed), else a new array."""
    if reuse is None:
        return np.empty(size, np.uint8)
    if not reuse or len(reuse[0]) < size:
        reuse[:] = [np.empty(max(size, 2 * len(reuse[0]) if reuse else size), np.uint8)]
    return reuse[0][:size]


def encode_v2(
    columns: RecordColumns,
    settings: BatchSettings,
    first_offset: int = 0,
    buffers: tuple[list[np.ndarray], list[np.ndarray]] | None = None,
) -> EncodedBatches:
    """Encode all rows of ``columns`` into magic-2 batches, offsets from ``first_offset``.

    Returns every batch, the last one possibly smaller than ``batch_bytes`` (the caller decides
    whether to keep it or carry its rows over to the next call). ``buffers``: two holders of
    reusable arrays (scratch, output) that spare a writer fresh memory (page faults) on every
    call; the result's ``data`` then stays valid only until the next call with them.
    """
    scratch_reuse, out_reuse = buffers if buffers is not None else (None, None)
    rows = columns.rows
    empty = np.zeros(0, np.int64)
    if rows == 0:
        return EncodedBatches(b"", empty, empty, empty, empty, empty)
    keys, values = columns.keys, columns.values
    hk, hv = columns.header_keys, columns.header_values
    body_sizes = np.empty(rows, np.int64)
    batch_starts = np.empty(rows + 1, np.int64)
    region_sizes = np.empty(rows, np.int64)
    count = plan_batches(
        columns.timestamps,
        keys.offsets,
        keys.valid,
        values.offsets,
        values.valid,
        columns.header_rows,
        hk.offsets,
        hv.offsets,
        hv.valid,
        settings.batch_bytes,
        settings.batch_records,
        body_sizes,
        batch_starts,
        region_sizes,
    )
    batch_starts = batch_starts[: count + 1]
    region_sizes = region_sizes[:count]
    firsts = batch_starts[:-1]
    lasts = batch_starts[1:] - 1
    counts = lasts - firsts + 1
    base_ts = columns.timestamps[firsts]
    max_ts = np.maximum.reduceat(columns.timestamps, firsts)
    attributes = int(settings.compression)
    if settings.log_append_time is not None:
        attributes |= TIMESTAMP_TYPE_MASK
        max_ts = np.full(count, settings.log_append_time, np.int64)
    compressed = settings.compression != CompressionType.NONE
    base_offsets = firsts + first_offset
    header_fields = (
        attributes, counts - 1, base_ts, max_ts, counts, settings.leader_epoch,
        settings.producer_id, settings.producer_epoch, settings.base_sequence,
    )  # fmt: skip
    # Uncompressed: records go straight behind their header, which the same kernel writes and
    # checksums. Compressed: records into a scratch buffer of regions, each compressed after.
    if compressed:
        region_positions = np.concatenate(([0], np.cumsum(region_sizes)[:-1])).astype(np.int64)
        scratch = _buffer(int(region_sizes.sum()), scratch_reuse)
        header = (empty, empty, *header_fields)
    else:
        sizes = region_sizes + V2_HEADER_SIZE
        positions = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        region_positions = positions + V2_HEADER_SIZE
        scratch = _buffer(int(sizes.sum()), out_reuse)
        header = (base_offsets, region_sizes, *header_fields)
    use_threads(len(scratch))
    encode_records(
        count, batch_starts, region_positions, body_sizes, columns.timestamps,
        keys.offsets, keys.data, keys.valid, values.offsets, values.data, values.valid,
        columns.header_rows, hk.offsets, hk.data, hv.offsets, hv.data, hv.valid, scratch, header,
    )  # fmt: skip
    if not compressed:
        return EncodedBatches(scratch.data, positions, sizes, firsts, lasts, max_ts)

    view = scratch.data
    payloads = [
        compress(settings.compression, view[start : start + length], level=settings.level)
        for start, length in zip(region_positions.tolist(), region_sizes.tolist(), strict=True)
    ]
    payload_sizes = np.fromiter((len(p) for p in payloads), np.int64, count)
    sizes = payload_sizes + V2_HEADER_SIZE
    positions = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    out = _buffer(int(sizes.sum()), out_reuse)
    view = out.data
    for p, payload in zip(positions.tolist(), payloads, strict=True):
        view[p + V2_HEADER_SIZE : p + V2_HEADER_SIZE + len(payload)] = payload
    write_headers(out, positions, sizes, (base_offsets, payload_sizes, *header_fields))
    return EncodedBatches(out.data, positions, sizes, firsts, lasts, max_ts)
