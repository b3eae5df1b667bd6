"""Aiven's tiered-storage plugin: segment manifests and chunk indexes (TIERED.md §1).

Objects of one segment, ``{prefix}{topic}-{topicId}/{partition}/{startOffset:020d}-{segmentId}``:

- ``.log``: the segment, whole or cut into chunks of ``originalChunkSize`` original bytes, each
  transformed on its own (zstd frame, then AES-256-GCM ``IV(12) ‖ ciphertext ‖ tag(16)``) and
  packed back to back;
- ``.indexes``: offset, time, producer-snapshot, leader-epoch (and transaction) index
  concatenated, each encrypted as one GCM message when encryption is on, never compressed
  (builds before 2023-10 wrote separate ``.index``/``.timeindex``/``.txnindex``/... objects);
- ``.rsm-manifest``: JSON, written last. A segment without it is incomplete.

Manifest (``version`` "1")::

    {"chunkIndex": {"type": "fixed", "originalChunkSize", "originalFileSize",
                    "transformedChunkSize", "finalTransformedChunkSize"}
                 | {"type": "variable", "originalChunkSize", "originalFileSize",
                    "transformedChunks": base64(zstd(chunk sizes, ChunkSizesBinaryCodec))},
     "segmentIndexes": {"offset": {"position", "size"}, "timestamp", "producerSnapshot",
                        "leaderEpoch", "transaction": {...} | null},      (absent: legacy)
     "compression": bool,
     "encryption": {"dataKey": "<keyPairId>:<base64 RSA-OAEP(DEK)>", "aad": base64},  optional
     "remoteLogSegmentMetadata": {"remoteLogSegmentId": {"topicIdPartition": {...}, "id"},
                                  "startOffset", "endOffset", "maxTimestampMs", "brokerId",
                                  "eventTimestampMs", "segmentLeaderEpochs": {epoch: offset}}}

Chunk-size list (``ChunkSizesBinaryCodec``, big-endian): ``count:i32``; then nothing
(count 0), ``last:i32`` (count 1), or ``base:i32, bpv:u8, (count-1) bpv-byte values (each
+ base), last:i32``.

Every number in a manifest is untrusted: geometry is checked against the object sizes the
listing reported before anything is allocated or read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from kafka_segments_ds.errors import CorruptIndexError

MANIFEST_SUFFIX = ".rsm-manifest"
INDEXES_SUFFIX = ".indexes"
# the names our reader asks for (and legacy builds' separate index objects) -> the
# segmentIndexes field holding that index
INDEX_FIELDS = {".index": "offset", ".timeindex": "timestamp", ".txnindex": "transaction"}
IV_BYTES = 12
TAG_BYTES = 16
GCM_OVERHEAD = IV_BYTES + TAG_BYTES
MAX_CHUNK_BYTES = 256 * 1024 * 1024  # a transformed chunk is decoded whole (README: 4 MiB)
MAX_CHUNKS = 1 << 22  # 4 Mi chunks: a 2 GiB segment at 512-byte chunks
MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # a manifest is a few hundred bytes (+ chunk sizes)
_I32 = struct.Struct(">i")
_BASE_BPV = struct.Struct(">iB")  # base: i32, bytes per value: u8

_STEM = re.compile(r"(?P<offset>[0-9]{20})-(?P<segment_id>[A-Za-z0-9_-]{22})")


class ManifestError(CorruptIndexError):
    """A manifest that cannot be used: not JSON, an unknown version, numbers that contradict
    each other or the objects' sizes."""


def parse_stem(name: str) -> tuple[int, str, str] | None:
    """``'00000000000000000042-<22-char id>.log'`` -> ``(42, id, '.log')``, else None."""
    stem, dot, rest = name.partition(".")
    match = _STEM.fullmatch(stem)
    if match is None or not dot:
        return None
    return int(match["offset"]), match["segment_id"], dot + rest


@dataclass(frozen=True, slots=True)
class IndexSlice:
    """Where one index sits in the (stored, possibly encrypted) ``.indexes`` object."""

    position: int
    size: int


@dataclass(frozen=True, slots=True)
class ChunkIndex:
    """Chunk geometry: original chunk ``i`` is ``[i*original_chunk_size, ...)``; its
    transformed bytes are ``[transformed_starts[i], transformed_starts[i+1])``."""

    original_chunk_size: int
    original_file_size: int
    transformed_starts: np.ndarray  # int64, n + 1 entries

    @property
    def count(self) -> int:
        return int(self.transformed_starts.shape[0]) - 1

    @property
    def transformed_size(self) -> int:
        return int(self.transformed_starts[-1])

    def original_span(self, i: int) -> tuple[int, int]:
        start = i * self.original_chunk_size
        return start, min(self.original_file_size, start + self.original_chunk_size)


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """The parts of a manifest a reader uses."""

    chunks: ChunkIndex
    compression: bool
    key_pair_id: str | None  # encryption: the RSA key pair that wrapped the data key
    wrapped_key: bytes | None
    aad: bytes | None
    indexes: dict[str, IndexSlice | None] | None  # None: legacy layout (separate objects)
    topic: str | None
    partition: int | None
    start_offset: int | None
    end_offset: int | None
    max_timestamp: int | None
    event_timestamp: int | None
    leader_epochs: tuple[tuple[int, int], ...]

    @property
    def encrypted(self) -> bool:
        return self.key_pair_id is not None

    @property
    def transformed(self) -> bool:
        """False when the ``.log`` object is byte-identical to the broker's segment."""
        return self.compression or self.encrypted

    def check_geometry(self) -> None:
        """Without compression every chunk keeps its size (+28 bytes when encrypted): a fixed
        index saying otherwise cannot be mapped to original byte positions."""
        if self.compression:
            return
        chunks = self.chunks
        overhead = GCM_OVERHEAD if self.encrypted else 0
        sizes = np.diff(chunks.transformed_starts)
        expected = np.full(chunks.count, chunks.original_chunk_size + overhead, np.int64)
        if chunks.count:
            expected[-1] = (
                chunks.original_span(chunks.count - 1)[1]
                - ((chunks.count - 1) * chunks.original_chunk_size)
                + overhead
            )
        if not np.array_equal(sizes, expected):
            bad = int(np.nonzero(sizes != expected)[0][0])
            raise ManifestError(
                f"chunk {bad} is stored as {int(sizes[bad])} bytes; without compression it must "
                f"be its original size + {overhead}, i.e. {int(expected[bad])}"
            )


def decode_chunk_sizes(data: bytes, limit: int) -> list[int]:
    """The chunk sizes of a ``ChunkSizesBinaryCodec`` block (already decompressed); at most
    ``limit`` of them."""
    if len(data) < 4:
        raise ManifestError(f"chunk-size list of {len(data)} bytes is shorter than its count")
    (count,) = _I32.unpack_from(data, 0)
    if count < 0 or count > limit:
        raise ManifestError(f"chunk-size list claims {count} chunks, at most {limit} possible")
    if count == 0:
        return _exact([], data, 4)
    if count == 1:
        if len(data) != 8:
            raise ManifestError(f"chunk-size list of 1 chunk has {len(data)} bytes, expected 8")
        return [_I32.unpack_from(data, 4)[0]]
    if len(data) < 9:
        raise ManifestError(f"chunk-size list of {count} chunks is cut short at {len(data)} bytes")
    base, bpv = _BASE_BPV.unpack_from(data, 4)
    if not 0 <= bpv <= 4:
        raise ManifestError(f"chunk-size list: {bpv} bytes per value (0 to 4 expected)")
    body = 9 + (count - 1) * bpv
    if len(data) != body + 4:
        raise ManifestError(
            f"chunk-size list of {count} chunks at {bpv} bytes each should be {body + 4} bytes, "
            f"found {len(data)}"
        )
    if bpv:
        raw = np.frombuffer(data, np.uint8, (count - 1) * bpv, 9).reshape(count - 1, bpv)
        values = np.zeros(count - 1, np.int64)
        for column in range(bpv):
            values = (values << 8) | raw[:, column].astype(np.int64)
    else:
        values = np.zeros(count - 1, np.int64)
    sizes = [int(v) + base for v in values]
    sizes.append(_I32.unpack_from(data, body)[0])
    return sizes


def _exact(sizes: list[int], data: bytes, length: int) -> list[int]:
    if len(data) != length:
        raise ManifestError(f"chunk-size list has {len(data) - length} trailing bytes")
    return sizes


def encode_chunk_sizes(sizes: list[int]) -> bytes:
    """``ChunkSizesBinaryCodec`` block for ``sizes`` (the inverse of :func:`decode_chunk_sizes`;
    used to write test buckets)."""
    if not sizes:
        return _I32.pack(0)
    if len(sizes) == 1:
        return _I32.pack(1) + _I32.pack(sizes[0])
    body = sizes[:-1]
    base = min(body)
    span = max(body) - base
    bpv = (span.bit_length() + 7) // 8
    values = b"".join((s - base).to_bytes(bpv, "big") for s in body)
    return _I32.pack(len(sizes)) + _BASE_BPV.pack(base, bpv) + values + _I32.pack(sizes[-1])


def parse_manifest(data: bytes, log_size: int | None, indexes_size: int | None) -> SegmentManifest:
    """Parse and check a manifest against the stored sizes of its ``.log`` object (``None``:
    not known, checked when the object is opened) and of its ``.indexes`` object (``None``:
    there is none). Raises :class:`ManifestError`."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest of {len(data)} bytes (at most {MAX_MANIFEST_BYTES})")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ManifestError(f"manifest is not JSON: {err}") from err
    if not isinstance(doc, dict):
        raise ManifestError("manifest is not a JSON object")
    version = doc.get("version")
    if version != "1":
        raise ManifestError(f'manifest version {version!r} is not supported (only "1")')
    compression = doc.get("compression", False)
    if not isinstance(compression, bool):
        raise ManifestError(f"manifest compression is {compression!r}, not a boolean")
    key_pair_id = wrapped = aad = None
    encryption = doc.get("encryption")
    if encryption is not None:
        key_pair_id, wrapped, aad = _encryption(encryption)
    chunks = _chunk_index(_object(doc, "chunkIndex"), log_size, compression)
    if (compression or key_pair_id is not None) and chunks.original_chunk_size > MAX_CHUNK_BYTES:
        raise ManifestError(
            f"chunks of {chunks.original_chunk_size} bytes are decoded whole; at most "
            f"{MAX_CHUNK_BYTES} are read"
        )
    indexes = None
    if "segmentIndexes" in doc:
        indexes = _segment_indexes(
            _object(doc, "segmentIndexes"), indexes_size, key_pair_id is not None
        )
    meta = doc.get("remoteLogSegmentMetadata")
    topic = partition = start = end = max_ts = event_ts = None
    epochs: tuple[tuple[int, int], ...] = ()
    if isinstance(meta, dict):
        tip = (meta.get("remoteLogSegmentId") or {}).get("topicIdPartition") or {}
        tp = tip.get("topicPartition") or {} if isinstance(tip, dict) else {}
        topic = tp.get("topic") if isinstance(tp.get("topic"), str) else None
        partition = _opt_int(tp.get("partition"), "partition")
        start = _opt_int(meta.get("startOffset"), "startOffset")
        end = _opt_int(meta.get("endOffset"), "endOffset")
        max_ts = _opt_int(meta.get("maxTimestampMs"), "maxTimestampMs")
        event_ts = _opt_int(meta.get("eventTimestampMs"), "eventTimestampMs")
        raw_epochs = meta.get("segmentLeaderEpochs") or {}
        if isinstance(raw_epochs, dict):
            try:
                epochs = tuple(sorted((int(k), int(v)) for k, v in raw_epochs.items()))
            except (TypeError, ValueError) as err:
                raise ManifestError(f"segmentLeaderEpochs is not epoch -> offset: {err}") from err
        if start is not None and end is not None and end < start - 1:
            raise ManifestError(f"endOffset {end} is before startOffset {start}")
    return SegmentManifest(
        chunks, compression, key_pair_id, wrapped, aad, indexes,
        topic, partition, start, end, max_ts, event_ts, epochs,
    )  # fmt: skip


def _object(doc: dict[str, Any], name: str) -> dict[str, Any]:
    value = doc.get(name)
    if not isinstance(value, dict):
        raise ManifestError(f"manifest field {name} is missing or not an object")
    return value


def _int(value: Any, name: str, minimum: int = 0, maximum: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ManifestError(f"manifest field {name} is {value!r}, not an integer >= {minimum}")
    return value


def _opt_int(value: Any, name: str) -> int | None:
    if value is None:
        return None
    return _int(value, name, minimum=-(2**63))


def _b64(text: Any, name: str) -> bytes:
    if not isinstance(text, str):
        raise ManifestError(f"manifest field {name} is not a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise ManifestError(f"manifest field {name} is not valid base64: {err}") from err


def _encryption(encryption: Any) -> tuple[str, bytes, bytes]:
    if not isinstance(encryption, dict):
        raise ManifestError("manifest field encryption is not an object")
    data_key = encryption.get("dataKey")
    if not isinstance(data_key, str) or ":" not in data_key:
        raise ManifestError("manifest encryption.dataKey is not '<keyPairId>:<base64>'")
    key_pair_id, _, wrapped = data_key.rpartition(":")
    return key_pair_id, _b64(wrapped, "encryption.dataKey"), _b64(encryption.get("aad"), "aad")


def _chunk_index(index: dict[str, Any], log_size: int | None, compression: bool) -> ChunkIndex:
    kind = index.get("type")
    chunk = _int(index.get("originalChunkSize"), "originalChunkSize", 1, 2**31 - 1)
    size = _int(index.get("originalFileSize"), "originalFileSize", 0, 2**31 - 1)
    count = -(-size // chunk)
    # every chunk is stored as at least one byte; the cap bounds what an unknown size allows
    if count > min(MAX_CHUNKS, 2**31 if log_size is None else log_size):
        raise ManifestError(
            f"chunk index: {count} chunks of {chunk} bytes cannot fit the {log_size}-byte object "
            f"(or exceed {MAX_CHUNKS})"
        )
    if kind == "fixed":
        transformed = _int(index.get("transformedChunkSize"), "transformedChunkSize")
        final = _int(index.get("finalTransformedChunkSize"), "finalTransformedChunkSize")
        if compression:
            raise ManifestError("a compressed segment has a fixed chunk index (variable expected)")
        total = (count - 1) * transformed + final if count else 0
        if log_size is not None and total != log_size:
            raise ManifestError(
                f"chunk index says the .log object holds {total} bytes, the object has {log_size}"
            )
        starts = np.arange(count + 1, dtype=np.int64) * transformed
        if count:
            starts[-1] = total
        return ChunkIndex(chunk, size, starts)
    if kind == "variable":
        blob = _b64(index.get("transformedChunks"), "transformedChunks")
        sizes = decode_chunk_sizes(_unzstd_sizes(blob, count), count)
        if len(sizes) != count:
            raise ManifestError(
                f"variable chunk index lists {len(sizes)} chunks, file size {size} at chunk size "
                f"{chunk} needs {count}"
            )
        if any(s <= 0 for s in sizes):
            raise ManifestError("variable chunk index lists a chunk of size <= 0")
        starts = np.zeros(count + 1, np.int64)
        np.cumsum(np.asarray(sizes, np.int64), out=starts[1:])
        if log_size is not None and int(starts[-1]) != log_size:
            raise ManifestError(
                f"chunk index says the .log object holds {int(starts[-1])} bytes, the object "
                f"has {log_size}"
            )
        return ChunkIndex(chunk, size, starts)
    raise ManifestError(f"chunk index type {kind!r} is not fixed or variable")


def _unzstd_sizes(blob: bytes, count: int) -> bytes:
    import zstandard

    limit = 13 + 4 * count  # the largest list of `count` sizes
    try:
        declared = zstandard.frame_content_size(blob)
    except zstandard.ZstdError as err:
        raise ManifestError(f"transformedChunks is not a zstd frame: {err}") from err
    if declared > limit:
        raise ManifestError(f"transformedChunks declares {declared} bytes, at most {limit}")
    try:
        return zstandard.ZstdDecompressor().decompress(blob, max_output_size=limit)
    except zstandard.ZstdError as err:
        raise ManifestError(f"transformedChunks does not decompress: {err}") from err


def _segment_indexes(
    indexes: dict[str, Any], stored_size: int | None, encrypted: bool
) -> dict[str, IndexSlice | None]:
    if stored_size is None:
        raise ManifestError("the manifest lists segmentIndexes but there is no .indexes object")
    out: dict[str, IndexSlice | None] = {}
    for name in ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction"):
        value = indexes.get(name)
        if value is None:
            out[name] = None
            continue
        if not isinstance(value, dict):
            raise ManifestError(f"segmentIndexes.{name} is not an object")
        position = _int(value.get("position"), f"segmentIndexes.{name}.position")
        size = _int(value.get("size"), f"segmentIndexes.{name}.size")
        if position + size > stored_size:
            raise ManifestError(
                f"segmentIndexes.{name} [{position}, +{size}) runs past the .indexes object's "
                f"{stored_size} bytes"
            )
        if encrypted and 0 < size < GCM_OVERHEAD:
            raise ManifestError(f"encrypted segmentIndexes.{name} of {size} bytes (< 28)")
        out[name] = IndexSlice(position, size)
    return out


def plain_size(stored: int, encrypted: bool) -> int:
    """Plaintext size of an index stored as one GCM message (or as is)."""
    return max(0, stored - GCM_OVERHEAD) if encrypted and stored else stored
