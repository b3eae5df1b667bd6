"""Write tiered-storage buckets from a broker partition directory, the way each plugin stores
segments (for tests, benchmarks and demos; this package never writes to real buckets).

``upload_aiven`` follows Aiven's ``KafkaRemoteStorageManager``: ``.log`` (whole, or chunked:
each chunk a zstd frame if compressed, then ``IV ‖ AES-GCM ciphertext ‖ tag`` if encrypted),
``.indexes`` (offset, time, producer-snapshot, leader-epoch, transaction index; each encrypted on
its own, never compressed) and ``.rsm-manifest`` last. The other layouts are raw copies.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from kafka_segments_ds.layout import SEGMENT_NAME_DIGITS, parse_segment_file_name
from kafka_segments_ds.producer_snapshot import encode_producer_snapshot
from kafka_segments_ds.records.batches import scan_entries
from kafka_segments_ds.tiered.aiven import encode_chunk_sizes
from kafka_segments_ds.tiered.rsa_oaep import oaep_encrypt


def kafka_uuid(rng: random.Random) -> str:
    """A Kafka ``Uuid.toString()``: 22 characters of URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")


@dataclass(frozen=True)
class Encryption:
    """Encrypt with a fresh data key per segment, wrapped with ``public_pem`` (X.509 PEM)."""

    key_pair_id: str
    public_pem: bytes


@dataclass(frozen=True)
class LocalSegment:
    base_offset: int
    log: bytes
    index: bytes
    timeindex: bytes
    txnindex: bytes | None


def iter_segments(partition_dir: str | os.PathLike[str]) -> Iterator[LocalSegment]:
    """The segments of a broker partition directory, in offset order."""
    directory = Path(partition_dir)
    bases = sorted(
        parsed[0]
        for p in directory.iterdir()
        if (parsed := parse_segment_file_name(p.name)) is not None and parsed[1] == ".log"
    )
    for base in bases:
        stem = directory / f"{base:0{SEGMENT_NAME_DIGITS}d}"
        txn = stem.with_suffix(".txnindex")
        yield LocalSegment(
            base,
            stem.with_suffix(".log").read_bytes(),
            _read(stem.with_suffix(".index")),
            _read(stem.with_suffix(".timeindex")),
            txn.read_bytes() if txn.exists() else None,
        )


def _read(path: Path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def _write(filesystem: pafs.FileSystem, path: str, data: bytes) -> None:
    if isinstance(filesystem, pafs.LocalFileSystem):  # object stores have no directories
        filesystem.create_dir(posixpath.dirname(path), recursive=True)
    with filesystem.open_output_stream(path) as out:
        out.write(data)


def _last_offset(log: bytes, base: int) -> int:
    table = scan_entries(log)
    return int(table.last_offsets[-1]) if len(table.last_offsets) else base - 1


def _max_timestamp(log: bytes) -> int:
    table = scan_entries(log)
    return int(table.max_timestamps.max()) if len(table.max_timestamps) else -1


class _Sealer:
    def __init__(self, encryption: Encryption | None, rng: random.Random) -> None:
        self.encryption = encryption
        self.rng = rng
        self.manifest: dict[str, str] | None = None
        if encryption is None:
            return
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        dek, aad = rng.randbytes(32), rng.randbytes(32)
        public = serialization.load_pem_public_key(encryption.public_pem)
        wrapped = oaep_encrypt(public, dek, rng.randbytes(64))
        self._aead = AESGCM(dek)
        self._aad = aad
        self.manifest = {
            "dataKey": f"{encryption.key_pair_id}:{base64.b64encode(wrapped).decode()}",
            "aad": base64.b64encode(aad).decode(),
        }

    def seal(self, data: bytes) -> bytes:
        if self.encryption is None:
            return data
        iv = self.rng.randbytes(12)
        return iv + self._aead.encrypt(iv, data, self._aad)


def upload_aiven(
    partition_dir: str | os.PathLike[str],
    filesystem: pafs.FileSystem,
    prefix: str,
    topic: str,
    partition: int,
    *,
    topic_id: str | None = None,
    chunk_size: int = 4 * 1024 * 1024,
    compression: bool = False,
    encryption: Encryption | None = None,
    legacy: bool = False,
    seed: int = 1,
    skip_manifest: tuple[int, ...] = (),
) -> list[str]:
    """Upload every segment of ``partition_dir`` under ``prefix`` (glued on as is, like
    ``rsm.config.key.prefix``); returns the segment stems written. ``legacy`` writes separate
    index objects and a manifest without ``segmentIndexes`` (builds before 2023-10);
    ``skip_manifest`` names base offsets whose upload stops before the manifest."""
    import zstandard

    rng = random.Random(seed)
    topic_id = topic_id or kafka_uuid(rng)
    directory = f"{prefix}{topic}-{topic_id}/{partition}"
    stems = []
    compressor = zstandard.ZstdCompressor(write_content_size=True)
    segments = list(iter_segments(partition_dir))
    for i, seg in enumerate(segments):
        segment_id = kafka_uuid(rng)
        stem = f"{directory}/{seg.base_offset:020d}-{segment_id}"
        sealer = _Sealer(encryption, rng)
        originals = [seg.log[p : p + chunk_size] for p in range(0, len(seg.log), chunk_size)]
        stored = []
        for chunk in originals:
            data = compressor.compress(chunk) if compression else chunk
            stored.append(sealer.seal(data))
        _write(filesystem, stem + ".log", b"".join(stored))
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        snapshot = encode_producer_snapshot([])
        epochs = f"0\n1\n0 {segments[0].base_offset}\n".encode()
        parts = [
            ("offset", seg.index),
            ("timestamp", seg.timeindex),
            ("producerSnapshot", snapshot),
            ("leaderEpoch", epochs),
        ]
        if seg.txnindex is not None:
            parts.append(("transaction", seg.txnindex))
        sealed = [(name, sealer.seal(data) if data else data) for name, data in parts]
        segment_indexes: dict[str, object] = {}
        if legacy:
            suffixes = {
                "offset": ".index",
                "timestamp": ".timeindex",
                "producerSnapshot": ".snapshot",
                "leaderEpoch": ".leader-epoch-checkpoint",
                "transaction": ".txnindex",
            }
            for name, data in sealed:
                _write(filesystem, stem + suffixes[name], data)
        else:
            position = 0
            for name, data in sealed:
                segment_indexes[name] = {"position": position, "size": len(data)}
                position += len(data)
            segment_indexes.setdefault("transaction", None)
            _write(filesystem, stem + ".indexes", b"".join(data for _, data in sealed))
        if compression:
            sizes = encode_chunk_sizes([len(c) for c in stored])
            chunk_index: dict[str, object] = {
                "type": "variable",
                "originalChunkSize": chunk_size,
                "originalFileSize": len(seg.log),
                "transformedChunks": base64.b64encode(compressor.compress(sizes)).decode(),
            }
        else:
            chunk_index = {
                "type": "fixed",
                "originalChunkSize": chunk_size,
                "originalFileSize": len(seg.log),
                "transformedChunkSize": chunk_size + (28 if encryption else 0),
                "finalTransformedChunkSize": len(stored[-1]) if stored else 0,
            }
        manifest: dict[str, object] = {"version": "1", "chunkIndex": chunk_index}
        if not legacy:
            manifest["segmentIndexes"] = segment_indexes
        manifest["compression"] = compression
        if sealer.manifest is not None:
            manifest["encryption"] = sealer.manifest
        end = _last_offset(seg.log, seg.base_offset)
        if next_base is not None:
            end = next_base - 1
        manifest["remoteLogSegmentMetadata"] = {
            "remoteLogSegmentId": {
                "topicIdPartition": {
                    "topicId": topic_id,
                    "topicPartition": {"topic": topic, "partition": partition},
                },
                "id": segment_id,
            },
            "startOffset": seg.base_offset,
            "endOffset": end,
            "maxTimestampMs": _max_timestamp(seg.log),
            "brokerId": 1,
            "eventTimestampMs": 1_700_000_000_000 + i,
            "segmentLeaderEpochs": {"0": seg.base_offset},
        }
        if seg.base_offset not in skip_manifest:
            _write(filesystem, stem + ".rsm-manifest", json.dumps(manifest).encode())
        stems.append(stem)
    return stems


def upload_local_tiered(
    partition_dir: str | os.PathLike[str],
    filesystem: pafs.FileSystem,
    root: str,
    topic: str,
    partition: int,
    *,
    seed: int = 1,
) -> list[str]:
    """Kafka's LocalTieredStorage: ``<root>/kafka-tiered-storage/<topic>-<partition>-<topicId>/
    <offset:020d>-<segmentId>.{log,index,timeindex,txnindex,snapshot,leader_epoch_checkpoint}``."""
    rng = random.Random(seed)
    directory = f"{root}/kafka-tiered-storage/{topic}-{partition}-{kafka_uuid(rng)}"
    stems = []
    for seg in iter_segments(partition_dir):
        stem = f"{directory}/{seg.base_offset:020d}-{kafka_uuid(rng)}"
        _write(filesystem, stem + ".log", seg.log)
        _write(filesystem, stem + ".index", seg.index)
        _write(filesystem, stem + ".timeindex", seg.timeindex)
        if seg.txnindex is not None:
            _write(filesystem, stem + ".txnindex", seg.txnindex)
        _write(filesystem, stem + ".snapshot", encode_producer_snapshot([]))
        _write(filesystem, stem + ".leader_epoch_checkpoint", b"0\n1\n0 0\n")
        stems.append(stem)
    return stems


def upload_pinterest(
    partition_dir: str | os.PathLike[str],
    filesystem: pafs.FileSystem,
    prefix: str,
    cluster: str,
    topic: str,
    partition: int,
    *,
    hash_bits: str = "",
) -> str:
    """pinterest/tiered-storage: ``<prefix>/[<bits>/]<cluster>/<topic>-<partition>/
    <offset:020d>.{log,index,timeindex}``, plus ``offset.wm`` and ``_metadata``."""
    bits = f"{hash_bits}/" if hash_bits else ""
    directory = f"{prefix}/{bits}{cluster}/{topic}-{partition}"
    last = -1
    for seg in iter_segments(partition_dir):
        stem = f"{directory}/{seg.base_offset:020d}"
        _write(filesystem, stem + ".log", seg.log)
        _write(filesystem, stem + ".index", seg.index)
        _write(filesystem, stem + ".timeindex", seg.timeindex)
        last = _last_offset(seg.log, seg.base_offset)
    _write(filesystem, f"{directory}/offset.wm", str(last).encode())
    _write(filesystem, f"{directory}/_metadata", b'{"version": 1}')
    return directory


def upload_linkedin_azure(
    partition_dir: str | os.PathLike[str],
    filesystem: pafs.FileSystem,
    root: str,
    topic_id: uuid.UUID,
    partition: int,
    *,
    container_prefix: str = "",
    seed: int = 1,
) -> str:
    """linkedin/kafka-remote-storage-azure: container ``[prefix-]<topic id UUID>``, blobs
    ``<partition>.<segment id UUID>.{SEGMENT,OFFSET,TIMESTAMP,TRANSACTION,...}``."""
    rng = random.Random(seed)
    container = f"{root}/{container_prefix + '-' if container_prefix else ''}{topic_id}"
    for seg in iter_segments(partition_dir):
        blob = f"{container}/{partition}.{uuid.UUID(bytes=rng.randbytes(16))}"
        _write(filesystem, blob + ".SEGMENT", seg.log)
        _write(filesystem, blob + ".OFFSET", seg.index)
        _write(filesystem, blob + ".TIMESTAMP", seg.timeindex)
        if seg.txnindex is not None:
            _write(filesystem, blob + ".TRANSACTION", seg.txnindex)
        _write(filesystem, blob + ".PRODUCER_SNAPSHOT", encode_producer_snapshot([]))
        _write(filesystem, blob + ".LEADER_EPOCH", b"0\n1\n0 0\n")
    return container
