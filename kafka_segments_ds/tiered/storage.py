"""A read-only pyarrow filesystem over an Aiven bucket that serves segments as the broker wrote
them, so that planning, the reader and the CLI need no tiered-storage code of their own.

Within the partition directories it was told about, :class:`TieredHandler` answers:

- ``<stem>.log``: the object itself when neither compressed nor encrypted (byte-identical to
  the broker's segment: plain ranged reads), else a file of original bytes decoded chunk by
  chunk (:class:`~kafka_segments_ds.tiered.chunks.ChunkedLog`);
- ``<stem>.index`` / ``.timeindex`` / ``.txnindex``: a slice of ``<stem>.indexes`` (or, for
  pre-2023-10 segments, the separate object), decrypted when the segment is encrypted.

Everything else goes to the underlying filesystem. The handler pickles (Spark ships it with
each task) as the base filesystem, the partition directories and the private keys; manifests
are read again where needed and kept per process.
"""

from __future__ import annotations

import hashlib
import pickle
import posixpath
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.errors import StorageError
from kafka_segments_ds.layout import LOG_SUFFIX
from kafka_segments_ds.tiered.aiven import (
    INDEX_FIELDS,
    INDEXES_SUFFIX,
    MANIFEST_SUFFIX,
    ManifestError,
    SegmentManifest,
    parse_manifest,
    parse_stem,
    plain_size,
)
from kafka_segments_ds.tiered.chunks import ChunkDecoder, ChunkedLog, unwrap_data_key

MANIFESTS_KEPT = 4096  # parsed manifests kept per process
_CACHE: OrderedDict[tuple[bytes, str], SegmentManifest] = OrderedDict()
_KEYS: OrderedDict[tuple[bytes, str, bytes], bytes] = OrderedDict()
_CACHE_LOCK = threading.Lock()


class TieredHandler(pafs.FileSystemHandler):  # type: ignore[misc]  # pyarrow has no types
    """See the module docstring. ``aiven_dirs``: partition directories of Aiven segments;
    ``private_keys``: key-pair id -> PEM private key bytes."""

    def __init__(
        self,
        base: pafs.FileSystem,
        aiven_dirs: Iterable[str],
        private_keys: Iterable[tuple[str, bytes]] = (),
    ) -> None:
        self.base = base
        self.aiven_dirs = frozenset(aiven_dirs)
        self.private_keys = dict(private_keys)
        self._identity: bytes | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            TieredHandler,
            (self.base, tuple(sorted(self.aiven_dirs)), tuple(sorted(self.private_keys.items()))),
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TieredHandler)
            and self.base.equals(other.base)
            and self.aiven_dirs == other.aiven_dirs
            and self.private_keys == other.private_keys
        )

    __hash__ = None  # type: ignore[assignment]

    # -- manifests ---------------------------------------------------------------------------

    @property
    def identity(self) -> bytes:
        """Tells apart stores with the same paths (two S3 endpoints) in the process caches."""
        if self._identity is None:
            self._identity = pickle.dumps(self.base)
        return self._identity

    def remember(self, stem_path: str, manifest: SegmentManifest) -> None:
        """Cache a manifest discovery has read (and checked against the listing)."""
        with _CACHE_LOCK:
            _CACHE[(self.identity, stem_path)] = manifest
            _CACHE.move_to_end((self.identity, stem_path))
            while len(_CACHE) > MANIFESTS_KEPT:
                _CACHE.popitem(last=False)

    def manifest(self, stem_path: str) -> SegmentManifest:
        """The manifest of the segment at ``stem_path`` (path without suffix)."""
        key = (self.identity, stem_path)
        with _CACHE_LOCK:
            found = _CACHE.get(key)
        if found is not None:
            return found
        path = stem_path + MANIFEST_SUFFIX
        try:
            data = kfs.read_file(self.base, path).to_pybytes()
        except FileNotFoundError as err:
            raise StorageError(
                "the segment's manifest is gone (deleted since the listing?)", self._shown(path)
            ) from err
        infos = self.base.get_file_info([stem_path + INDEXES_SUFFIX])
        indexes_size = None if infos[0].type == pafs.FileType.NotFound else int(infos[0].size or 0)
        try:
            manifest = parse_manifest(data, None, indexes_size)
            manifest.check_geometry()
        except ManifestError as err:
            raise ManifestError(f"{self._shown(path)}: {err}") from err
        self.remember(stem_path, manifest)
        return manifest

    def data_key(self, stem_path: str, manifest: SegmentManifest) -> bytes:
        pem = self.private_keys.get(manifest.key_pair_id or "")
        # a data key unwrapped once is reused only by a reader holding the same private key
        key = (self.identity, stem_path, hashlib.sha256(pem).digest() if pem else b"")
        with _CACHE_LOCK:
            found = _KEYS.get(key) if pem else None
        if found is None:
            found = unwrap_data_key(
                manifest, self.private_keys, self._shown(stem_path + LOG_SUFFIX)
            )
            with _CACHE_LOCK:
                _KEYS[key] = found
                while len(_KEYS) > MANIFESTS_KEPT:
                    _KEYS.popitem(last=False)
        return found

    def decoder(self, stem_path: str, manifest: SegmentManifest) -> ChunkDecoder:
        dek = self.data_key(stem_path, manifest) if manifest.encrypted else None
        return ChunkDecoder(manifest, dek, self._shown(stem_path + LOG_SUFFIX))

    def _shown(self, path: str) -> str:
        return kfs.display_path(self.base, path)

    def _segment(self, path: str) -> tuple[str, str] | None:
        """``(stem path, suffix)`` when ``path`` is a file of an Aiven segment."""
        directory, name = posixpath.split(path)
        if directory not in self.aiven_dirs:
            return None
        parsed = parse_stem(name)
        if parsed is None:
            return None
        suffix = parsed[2]
        return path[: len(path) - len(suffix)], suffix

    # -- reading -----------------------------------------------------------------------------

    def open_input_file(self, path: str) -> pa.NativeFile:
        found = self._segment(path)
        if found is None:
            return self.base.open_input_file(path)
        stem_path, suffix = found
        if suffix == LOG_SUFFIX:
            manifest = self.manifest(stem_path)
            if not manifest.transformed:
                return self.base.open_input_file(path)
            chunked = ChunkedLog(
                self.base, path, self.decoder(stem_path, manifest), self._shown(path)
            )
            return pa.PythonFile(chunked, mode="r")
        if suffix in INDEX_FIELDS:
            return pa.BufferReader(self.read_index(stem_path, suffix))
        return self.base.open_input_file(path)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def index_size(self, stem_path: str, suffix: str) -> int | None:
        """Plaintext size of an index the segment has (None: it has none)."""
        manifest = self.manifest(stem_path)
        if manifest.indexes is None:  # legacy: separate objects
            info = self.base.get_file_info(stem_path + suffix)
            if info.type == pafs.FileType.NotFound:
                return None
            return plain_size(int(info.size or 0), manifest.encrypted)
        slot = manifest.indexes.get(INDEX_FIELDS[suffix])
        return None if slot is None else plain_size(slot.size, manifest.encrypted)

    def read_index(self, stem_path: str, suffix: str) -> pa.Buffer:
        manifest = self.manifest(stem_path)
        shown = self._shown(stem_path + INDEXES_SUFFIX)
        if manifest.indexes is None:
            path = stem_path + suffix
            stored = kfs.read_file(self.base, path)
            shown, position = self._shown(path), 0
        else:
            slot = manifest.indexes.get(INDEX_FIELDS[suffix])
            if slot is None:
                raise FileNotFoundError(f"no such file or directory: {stem_path + suffix}")
            stored = kfs.read_range(self.base, stem_path + INDEXES_SUFFIX, slot.position, slot.size)
            position = slot.position
            if stored.size != slot.size:
                raise StorageError(
                    f"the manifest places the {INDEX_FIELDS[suffix]} index at [{slot.position}, "
                    f"+{slot.size}); the object ends after {stored.size} of those bytes",
                    shown,
                    slot.position,
                )
        if not manifest.encrypted or stored.size == 0:
            return stored
        decoder = self.decoder(stem_path, manifest)
        what = f"the {INDEX_FIELDS[suffix]} index"
        return pa.py_buffer(decoder.decrypt(memoryview(stored), what, position))

    # -- metadata ----------------------------------------------------------------------------

    def get_type_name(self) -> str:
        return "kafka-tiered"

    def normalize_path(self, path: str) -> str:
        normalized: str = self.base.normalize_path(path)
        return normalized

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        out = []
        for path in paths:
            found = self._segment(path)
            if found is not None and found[1] in INDEX_FIELDS:
                size = self.index_size(*found)
                if size is None:
                    out.append(pafs.FileInfo(path, pafs.FileType.NotFound))
                else:
                    out.append(pafs.FileInfo(path, pafs.FileType.File, size=size))
            elif found is not None and found[1] == LOG_SUFFIX:
                size = self.manifest(found[0]).chunks.original_file_size
                out.append(pafs.FileInfo(path, pafs.FileType.File, size=size))
            else:
                out.append(self.base.get_file_info(path))
        return out

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.base.get_file_info(selector)  # type: ignore[no-any-return]

    # -- read only ---------------------------------------------------------------------------

    def _read_only(self, *args: object) -> Any:
        raise StorageError("a tiered-storage bucket is read through this filesystem read-only")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


def tiered_filesystem(
    base: pafs.FileSystem, aiven_dirs: Iterable[str], private_keys: Iterable[tuple[str, bytes]]
) -> tuple[pafs.PyFileSystem, TieredHandler]:
    handler = TieredHandler(base, aiven_dirs, private_keys)
    return pafs.PyFileSystem(handler), handler


def combine_filesystems(base: pafs.FileSystem, views: Iterable[pafs.FileSystem]) -> pafs.FileSystem:
    """One filesystem for a read over several paths: ``base``, or a tiered view over it that
    covers the Aiven partition directories of every tiered view in ``views``."""
    handlers = [
        v.handler
        for v in views
        if isinstance(v, pafs.PyFileSystem) and isinstance(v.handler, TieredHandler)
    ]
    if not handlers:
        return base
    if len(handlers) == 1:
        return pafs.PyFileSystem(handlers[0])
    dirs = frozenset().union(*(h.aiven_dirs for h in handlers))
    return pafs.PyFileSystem(
        TieredHandler(handlers[0].base, dirs, handlers[0].private_keys.items())
    )
