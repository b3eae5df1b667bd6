"""Reading transformed (chunked) objects: byte ranges of the original ``.log`` served from the
chunks covering them, each fetched, decrypted (AES-256-GCM) and decompressed (zstd) on demand.

The data key of an encrypted segment is RSA-OAEP-wrapped (SHA3-512 for the OAEP digest and
MGF1, BouncyCastle's ``RSA/NONE/OAEPWithSHA3-512AndMGF1Padding``, :mod:`.rsa_oaep`) with the key
pair the manifest names. AES-GCM and PEM parsing come from the ``cryptography`` package,
imported only when an encrypted segment is read (``pip install kafka-segments-ds[tiered]``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds.errors import InvalidOptionError, MissingCodecError, StorageError
from kafka_segments_ds.tiered.aiven import IV_BYTES, TAG_BYTES, SegmentManifest
from kafka_segments_ds.tiered.rsa_oaep import OaepError, oaep_decrypt

DECODED_CHUNKS_KEPT = 2  # a window boundary cuts a chunk: the next window starts in it


class MissingCryptographyError(MissingCodecError):
    """An encrypted segment is read without the ``cryptography`` package."""

    def __init__(self, segment: str) -> None:
        self.segment = segment
        super(MissingCodecError, self).__init__(
            f"{segment} is encrypted (AES-256-GCM): reading it needs the 'cryptography' "
            "package: pip install 'kafka-segments-ds[tiered]'"
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.segment,))


class MissingKeyError(InvalidOptionError):
    """No private key was given for the key pair an encrypted segment names."""


def _crypto(segment: str) -> Any:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as err:
        raise MissingCryptographyError(segment) from err
    return serialization, AESGCM


def unwrap_data_key(
    manifest: SegmentManifest, private_keys: Mapping[str, bytes], segment: str
) -> bytes:
    """The segment's AES data key, unwrapped with the PEM private key of its key pair."""
    assert manifest.key_pair_id is not None and manifest.wrapped_key is not None
    pem = private_keys.get(manifest.key_pair_id)
    if pem is None:
        known = ", ".join(sorted(private_keys)) or "none given"
        raise MissingKeyError(
            f"{segment} is encrypted with key pair {manifest.key_pair_id!r}, but no private key "
            f"was given for it (privateKeys knows: {known}); pass "
            f'privateKeys=\'{{"{manifest.key_pair_id}": "/path/to/private.pem"}}\''
        )
    serialization, _ = _crypto(segment)
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as err:
        raise InvalidOptionError(
            f"the private key for key pair {manifest.key_pair_id!r} is not an unencrypted PEM "
            f"(PKCS#8) RSA key: {err}"
        ) from err
    try:
        dek = oaep_decrypt(key, manifest.wrapped_key)
    except (OaepError, AttributeError) as err:
        raise MissingKeyError(
            f"{segment}: the private key given for key pair {manifest.key_pair_id!r} does not "
            f"unwrap the segment's data key ({err or type(err).__name__})"
        ) from err
    if len(dek) not in (16, 24, 32):
        raise StorageError(f"unwrapped data key of {len(dek)} bytes is no AES key", segment)
    return bytes(dek)


class ChunkDecoder:
    """Turns one stored chunk (or one encrypted index) into its original bytes."""

    def __init__(self, manifest: SegmentManifest, data_key: bytes | None, segment: str) -> None:
        self.manifest = manifest
        self.segment = segment
        self._aead = None
        if manifest.encrypted:
            assert data_key is not None
            self._aead = _crypto(segment)[1](data_key)

    def decrypt(self, stored: bytes | memoryview, what: str, position: int) -> bytes:
        if self._aead is None:
            return bytes(stored)
        if len(stored) < IV_BYTES + TAG_BYTES:
            raise StorageError(
                f"{what}: {len(stored)} stored bytes, shorter than IV + tag (28)",
                self.segment,
                position,
            )
        from cryptography.exceptions import InvalidTag

        try:
            plain: bytes = self._aead.decrypt(
                bytes(stored[:IV_BYTES]), bytes(stored[IV_BYTES:]), self.manifest.aad
            )
            return plain
        except InvalidTag as err:
            raise StorageError(
                f"{what} fails AES-GCM authentication (damaged, truncated or another key)",
                self.segment,
                position,
            ) from err

    def chunk(self, i: int, stored: bytes | memoryview) -> bytes:
        """Original bytes of chunk ``i`` from its stored bytes; their size is checked."""
        chunks = self.manifest.chunks
        start, end = chunks.original_span(i)
        position = int(chunks.transformed_starts[i])
        what = f"chunk {i} (original bytes {start}..{end})"
        data = self.decrypt(stored, what, position)
        if self.manifest.compression:
            data = _unzstd(data, end - start, what, self.segment, position)
        if len(data) != end - start:
            raise StorageError(
                f"{what} holds {len(data)} bytes after decoding, the chunk index says "
                f"{end - start}",
                self.segment,
                position,
            )
        return data


def _unzstd(data: bytes, expected: int, what: str, segment: str, position: int) -> bytes:
    import zstandard

    try:
        declared = zstandard.frame_content_size(data)
        if declared not in (-1, expected):
            raise StorageError(
                f"{what}: its zstd frame declares {declared} bytes, the chunk index says "
                f"{expected}",
                segment,
                position,
            )
        return zstandard.ZstdDecompressor().decompress(data, max_output_size=expected)
    except zstandard.ZstdError as err:
        raise StorageError(f"{what} does not decompress: {err}", segment, position) from err


class ChunkedLog:
    """A read-only file object of the original ``.log`` bytes of a chunked object, for
    :class:`pyarrow.PythonFile`. A read fetches the stored bytes of the chunks it needs with
    one ranged read, and keeps the last decoded chunks for reads that start inside them."""

    def __init__(
        self, filesystem: pafs.FileSystem, path: str, decoder: ChunkDecoder, shown: str
    ) -> None:
        self._filesystem = filesystem
        self._path = path
        self._decoder = decoder
        self._chunks = decoder.manifest.chunks
        self._shown = shown
        self._stream: pa.NativeFile | None = None
        self._position = 0
        self._decoded: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.closed = False

    # -- file protocol (what pyarrow.PythonFile calls) ---------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def seek(self, position: int, whence: int = 0) -> int:
        if whence == 1:
            position += self._position
        elif whence == 2:
            position += self._chunks.original_file_size
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._position = position
        return position

    def size(self) -> int:
        return self._chunks.original_file_size

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
        self._decoded.clear()
        self.closed = True

    def read(self, length: int = -1) -> bytes:
        with self._lock:
            end = self._chunks.original_file_size
            if length is None or length < 0:
                length = end - self._position
            stop = min(end, self._position + length)
            data = self._range(self._position, stop) if stop > self._position else b""
            self._position = max(self._position, stop)
            return data

    # -- chunk mapping -----------------------------------------------------------------------

    def _range(self, start: int, stop: int) -> bytes:
        size = self._chunks.original_chunk_size
        first, last = start // size, (stop - 1) // size
        self._fetch(first, last)
        parts = []
        for i in range(first, last + 1):
            chunk = self._decoded[i]
            begin = i * size
            parts.append(
                memoryview(chunk)[max(start, begin) - begin : min(stop, begin + size) - begin]
            )
        return parts[0].tobytes() if len(parts) == 1 else b"".join(parts)

    def _fetch(self, first: int, last: int) -> None:
        """Decode chunks ``first..last`` (those not kept from an earlier read)."""
        missing = [i for i in range(first, last + 1) if i not in self._decoded]
        if not missing:
            for i in range(first, last + 1):
                self._decoded.move_to_end(i)
            return
        lo, hi = missing[0], missing[-1]
        starts = self._chunks.transformed_starts
        stored = self._read_stored(int(starts[lo]), int(starts[hi + 1]))
        base = int(starts[lo])
        for i in range(lo, hi + 1):
            if i not in self._decoded:
                piece = memoryview(stored)[int(starts[i]) - base : int(starts[i + 1]) - base]
                self._decoded[i] = self._decoder.chunk(i, piece)
        for i in range(first, last + 1):  # the chunks of this read are the newest: kept
            self._decoded.move_to_end(i)
        while len(self._decoded) > max(DECODED_CHUNKS_KEPT, last - first + 1):
            self._decoded.popitem(last=False)

    def _read_stored(self, start: int, stop: int) -> pa.Buffer:
        if self._stream is None:
            self._stream = self._filesystem.open_input_file(self._path)
            actual = self._stream.size()
            if actual != self._chunks.transformed_size:
                raise StorageError(
                    f"the manifest's chunk index covers {self._chunks.transformed_size} stored "
                    f"bytes, the object has {actual}",
                    self._shown,
                )
        self._stream.seek(start)
        got = self._stream.read_buffer(stop - start)
        if got.size != stop - start:
            raise StorageError(
                f"short read: asked for {stop - start} stored bytes, got {got.size} (truncated "
                "chunk)",
                self._shown,
                start,
            )
        return got


def load_private_keys(files: Mapping[str, str] | Any) -> dict[str, bytes]:
    """Key-pair id -> PEM bytes, read from the files the ``privateKeys`` option names."""
    return {key_pair_id: _read_pem(key_pair_id, path) for key_pair_id, path in dict(files).items()}


def _read_pem(key_pair_id: str, path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as err:
        raise InvalidOptionError(
            f"privateKeys: cannot read the PEM file {path!r} of key pair {key_pair_id!r}: "
            f"{err.strerror or err}"
        ) from err
