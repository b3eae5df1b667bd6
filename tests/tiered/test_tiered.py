"""Aiven manifests, the chunk-size codec, overlap resolution and RSA-OAEP (SHA3-512): pure
functions over bytes, with Aiven's own test vectors where it has them."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import zstandard

from kafka_segments_ds.layout import SegmentRef
from kafka_segments_ds.tiered.aiven import (
    ManifestError,
    decode_chunk_sizes,
    encode_chunk_sizes,
    parse_manifest,
    parse_stem,
)
from kafka_segments_ds.tiered.layouts import Candidate, resolve_overlaps
from kafka_segments_ds.tiered.rsa_oaep import OaepError, oaep_decrypt, oaep_encrypt

# ChunkIndexSerializationTest.java (Aiven): transformedChunks for the sizes [10, 20, 30]
ATTACHED_VECTOR = "KLUv/SAPeQAAAAAAAwAAAAoBAAoAAAAe"

# SegmentManifestV1SerdeTest.java (Aiven): the exact JSON its serializer writes
METADATA_JSON = (
    '{"remoteLogSegmentId":{"topicIdPartition":{"topicId":"lZ6vvmajTWKDBUTV6SQAtQ",'
    '"topicPartition":{"topic":"topic1","partition":42}},"id":"adh9f8BMS4anaUnD8KWfWg"},'
    '"startOffset":0,"endOffset":1000,"maxTimestampMs":1000000000,"brokerId":2,'
    '"eventTimestampMs":2000000000,"segmentLeaderEpochs":{"0":100,"1":200,"2":300}}'
)
INDEXES_JSON = (
    '{"offset":{"position":0,"size":1},"timestamp":{"position":1,"size":1},'
    '"producerSnapshot":{"position":2,"size":1},"leaderEpoch":{"position":3,"size":1},'
    '"transaction":{"position":4,"size":1}}'
)
FIXED_INDEX_JSON = (
    '{"type":"fixed","originalChunkSize":100,"originalFileSize":1000,'
    '"transformedChunkSize":110,"finalTransformedChunkSize":110}'
)
WITHOUT_ENCRYPTION_JSON = (
    '{"version":"1","chunkIndex":'
    + FIXED_INDEX_JSON
    + ',"segmentIndexes":'
    + INDEXES_JSON
    + ',"compression":false,"remoteLogSegmentMetadata":'
    + METADATA_JSON
    + "}"
)
WITHOUT_TXN_INDEX_JSON = WITHOUT_ENCRYPTION_JSON.replace(
    '"transaction":{"position":4,"size":1}', '"transaction":null'
)

# Made by us with pycryptodome 3.x (PKCS1_OAEP, hashAlgo=SHA3_512, MGF1 over SHA3_512, empty
# label), an implementation independent of ours: a 2048-bit PKCS#8 key and the OAEP encryption
# of the 32 bytes 00 01 .. 1f.
PYCRYPTODOME_KEY = b"""-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC5pgodXs9zcI3c
Zdige+nZ6ukm2q4+iqzqPB/4z2sfKQpSBJrDSavQGsriQ8B9JIIWiGKPSEmp8Jg8
3KqAxwX8EeNmAsTwz6cqQioXkdRUx485g7hili+dnDw/vgr0IR8N9uWDXU1ZQWSx
paNXLBwvigQpZck8q1apBNYOYEC+5/xGmNmuAN2/2WG0WmVx50Hcnz2lEHEmP9At
M9MC3mQw6WJYwXt8tOnwIQX2aWWkX26Jn79XYCMpKVMIOgKjd05F7JKq0uUyhOdN
lm78BzX4PqcmmgeuBd4JEfeIcLNQR/tifvhF4U/6RChtsD8AqczItVhmgv1cKPv9
x8F7NITTAgMBAAECggEAHtB+kU1xZZnjEhgdktW+hRtGw9o8Xckq1l5QeD4Fa9Cm
E+MLxSpvSEWKM3BHfP4YUaElqt62y2xR+Jgv/NwMFEDr27zN76Kn/o2o6uybr87H
6SYB7us60BBkt7fVnZv5yZmXkuxjsFL4Ybw6lneN3h4sfqqUcmuGINvao9w6IvWa
MxKYqKdBdFWa3N4lj2UgruOoAdkMRfj9bZuOmeKh93tnrg86P6OfWifSjx9wGI1n
s4Pn6rmntEz9jUxtFMDtEwa73gpJvrA6puplJYD1uz7mV8bMGAjHNldGyN399OHg
y2idiGW0raPwrLSuikPlud8gbbtcO22fM/ea7zKiIQKBgQDS7hB2Zly5NNykqHgb
xd12ou16HkTgdlI2YHi2/kuk+W4p4bM6mCTHErmsKtYsXcUWFTNtoEa8to/Nd/8J
9kBYo/EbgPKSPwC8+DjcJlIAK3upiVPe9Xs5QZQ49HE28aGwhhNdeaupObCFnTZm
HpzWFhu7a/7Q1vV6TIhMqGPRywKBgQDhURPO2MCRp6xpxd7vmH0zktULFK3ExFNf
8JK4e7gTLrHKn0bqXMbCGW8lq1V9VeldqFkI7x6dVFGnNbhZp6kaKIFyD+QwSV4y
ixeJJCq1ZRqv49kzbsQth/BHurdb626qkOQTRD/jA5YTeovAJnn43kIzqx5SG9IP
5JRYSB4YGQKBgD8Jir33xYpMNAy5lHuoXJFSC+rNFQSIF/XMSwdVZEH/kV7O5wOB
6Kvd+sNrYeqMc5Qv7di7Z6iKXtunGv9dKsnS5QG1PclbLttKy6NviF4ooKKAOiKN
9q+b27JRy2wCNrJMv4jWDelbJlgoLdPDHlgU72DJ27OKKn7MVIekY4CVAoGAKBnV
/Kp3G3VMKkcdNmddYSBw6lfz1WFbtWeLtWnPiRp2aimO5Yc9mK4OKhYkUPpJXnHn
5r8oI7guECRvewVsA0vSPgq2AiIMsdIvjijxsPcdmNBkh9Le93uKODnzCFkOiSzg
as1q0WyB+VWGKdyvOKvV/HwoGVT6PfngrRWoxYECgYEAkXRV6p/1R/au6EZvmcww
5wxP61MVkyakJeKSq3NWiWRdlM8LBsDWgqtVQyvW08LBNLlUvOMNnxgHUhdAuIwb
uO4ykpo7EglS5uzheEqsUnmFFqphCOCuj/Avsvx6M5J5mLac3tY6N4uwXyccfYQA
/7eVSXOIWTFT3M/HIxTQc/0=
-----END PRIVATE KEY-----
"""
PYCRYPTODOME_WRAPPED = (
    "nWnYqbPi+mEm0AOyDuY2mTiqMZ/HLo2izgoa3Pqaii07PGm1N4mBkHfGzPVS2AmLn1PxAswssdp2F4s3HHSRs8gF"
    "cZQRXG/XDQzQ14XHrxWd1Fx2WGjCtR+bmYnCT69GKsrvn7mF2SDEoQao5r1BzBBgKXT8kE/vY/ej58jt+VTxtEIU"
    "cICIJIO8uLH5qckOmiVOiRv/ScSwf5B2V0xMa+qINuuIHkCb/FP3jI1XwZrRqmxLuQUNEWdKYS7aqthjSfITzgAo"
    "sRSf3+ySNXcobsHdAPWNNySlmYjageVcKxISfaB1/4OwWyJx+cC60IHkYUJ4eoMbo95ZCKGabGjiyg=="
)


# -- chunk sizes ---------------------------------------------------------------------------------


def test_aiven_chunk_size_vector_decodes_to_10_20_30() -> None:
    block = zstandard.ZstdDecompressor().decompress(base64.b64decode(ATTACHED_VECTOR))
    assert block == bytes.fromhex("000000030000000a01000a0000001e")
    assert decode_chunk_sizes(block, 3) == [10, 20, 30]
    assert encode_chunk_sizes([10, 20, 30]) == block


@pytest.mark.parametrize(
    ("block", "sizes"),
    [
        (bytes.fromhex("00000000"), []),
        (bytes.fromhex("0000000100000007"), [7]),
        (bytes.fromhex("00000002000000640000000005"), [100, 5]),  # 0 bytes per value
        (bytes.fromhex("0000000300400000020000010000000011"), [4194304, 4194560, 17]),
    ],
)
def test_chunk_size_codec_table(block: bytes, sizes: list[int]) -> None:
    assert decode_chunk_sizes(block, 10) == sizes
    assert decode_chunk_sizes(encode_chunk_sizes(sizes), 10) == sizes


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (b"\x00\x00", "shorter than its count"),
        (bytes.fromhex("7fffffff"), "claims 2147483647 chunks, at most 10"),
        (bytes.fromhex("ffffffff"), "claims -1 chunks"),
        (bytes.fromhex("00000001"), "expected 8"),
        (bytes.fromhex("000000030000000005" + "00" * 14), "5 bytes per value"),
        (bytes.fromhex("0000000300000000010001"), "should be 15 bytes, found 11"),
        (bytes.fromhex("0000000000"), "1 trailing bytes"),
    ],
)
def test_bad_chunk_size_lists_are_refused(block: bytes, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        decode_chunk_sizes(block, 10)


# -- manifests -----------------------------------------------------------------------------------


def test_aiven_manifest_example_parses() -> None:
    manifest = parse_manifest(WITHOUT_ENCRYPTION_JSON.encode(), 1100, 5)
    assert manifest.chunks.count == 10
    assert manifest.chunks.transformed_starts.tolist() == list(range(0, 1101, 110))
    assert manifest.chunks.original_span(9) == (900, 1000)
    assert manifest.indexes is not None
    assert {k: (v.position, v.size) for k, v in manifest.indexes.items() if v} == {
        "offset": (0, 1),
        "timestamp": (1, 1),
        "producerSnapshot": (2, 1),
        "leaderEpoch": (3, 1),
        "transaction": (4, 1),
    }
    assert (manifest.topic, manifest.partition) == ("topic1", 42)
    assert (manifest.start_offset, manifest.end_offset) == (0, 1000)
    assert (manifest.max_timestamp, manifest.event_timestamp) == (1000000000, 2000000000)
    assert manifest.leader_epochs == ((0, 100), (1, 200), (2, 300))
    assert not manifest.compression and not manifest.encrypted and manifest.key_pair_id is None
    # 110-byte stored chunks of 100-byte originals without compression or encryption cannot
    # be the original bytes: a reader refuses to map them
    with pytest.raises(ManifestError, match=r"chunk 0 is stored as 110 bytes.*i\.e\. 100"):
        manifest.check_geometry()


def test_aiven_manifest_example_without_transaction_index() -> None:
    manifest = parse_manifest(WITHOUT_TXN_INDEX_JSON.encode(), 1100, 4)
    assert manifest.indexes is not None and manifest.indexes["transaction"] is None


def _manifest(**changes: object) -> bytes:
    doc = json.loads(WITHOUT_ENCRYPTION_JSON)
    doc.update(changes)
    return json.dumps(doc).encode()


def _huge_chunks() -> bytes:
    index = {
        "type": "fixed",
        "originalChunkSize": 2**30,
        "originalFileSize": 10,
        "transformedChunkSize": 2**30 + 28,
        "finalTransformedChunkSize": 38,
    }
    return _manifest(chunkIndex=index, encryption={"dataKey": "k:AAAA", "aad": "AAAA"})


@pytest.mark.parametrize(
    ("data", "log_size", "indexes_size", "message"),
    [
        (b"{not json", 1100, 5, "not JSON"),
        (_manifest(version="2"), 1100, 5, "version '2' is not supported"),
        (WITHOUT_ENCRYPTION_JSON.encode(), 1099, 5, "holds 1100 bytes, the object has 1099"),
        (WITHOUT_ENCRYPTION_JSON.encode(), 1100, 4, r"transaction \[4, \+1\) runs past"),
        (WITHOUT_ENCRYPTION_JSON.encode(), 1100, None, "no .indexes object"),
        (
            _manifest(
                chunkIndex={
                    "type": "fixed",
                    "originalChunkSize": 1,
                    "originalFileSize": 2**31 - 1,
                    "transformedChunkSize": 1,
                    "finalTransformedChunkSize": 1,
                }
            ),
            1100,
            5,
            "cannot fit",
        ),
        (_manifest(chunkIndex={"type": "sparse"}), 1100, 5, "originalChunkSize is None"),
        (_manifest(compression="yes"), 1100, 5, "not a boolean"),
        (_manifest(encryption={"dataKey": "no-colon", "aad": ""}), 1100, 5, "keyPairId"),
        (_manifest(compression=True), 1100, 5, "compressed segment has a fixed chunk index"),
        (_huge_chunks(), 38, 5, "chunks of 1073741824 bytes are decoded whole; at most 268435456"),
    ],
)
def test_bad_manifests_are_refused(
    data: bytes, log_size: int, indexes_size: int | None, message: str
) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(data, log_size, indexes_size)


def test_variable_chunk_index_from_the_vector() -> None:
    index = {
        "type": "variable",
        "originalChunkSize": 100,
        "originalFileSize": 250,
        "transformedChunks": ATTACHED_VECTOR,
    }
    manifest = parse_manifest(_manifest(chunkIndex=index, compression=True), 60, 5)
    assert manifest.chunks.transformed_starts.tolist() == [0, 10, 30, 60]
    assert [manifest.chunks.original_span(i) for i in range(3)] == [
        (0, 100),
        (100, 200),
        (200, 250),
    ]
    with pytest.raises(ManifestError, match="lists 3 chunks, file size 350 at chunk size 100"):
        parse_manifest(
            _manifest(chunkIndex={**index, "originalFileSize": 350}, compression=True), 60, 5
        )
    with pytest.raises(ManifestError, match="holds 60 bytes, the object has 61"):
        parse_manifest(_manifest(chunkIndex=index, compression=True), 61, 5)


def test_segment_names() -> None:
    assert parse_stem("00000000000000000042-adh9f8BMS4anaUnD8KWfWg.rsm-manifest") == (
        42, "adh9f8BMS4anaUnD8KWfWg", ".rsm-manifest",
    )  # fmt: skip
    assert parse_stem("00000000000000000042.log") is None
    assert parse_stem("0000000000000000042-adh9f8BMS4anaUnD8KWfWg.log") is None  # 19 digits


# -- overlaps ------------------------------------------------------------------------------------


def _seg(base: int, last: int | None, size: int = 100, name: str = "", event: int = 0) -> Candidate:
    ref = SegmentRef(f"p/{base}{name}.log", base, size, None, None, None, last_offset=last)
    return Candidate(ref, event)


def _spans(refs: tuple[SegmentRef, ...]) -> list[tuple[str, int | None, int | None]]:
    return [(r.path, r.read_from, r.read_until) for r in refs]


def test_overlaps_with_manifest_end_offsets() -> None:
    refs = resolve_overlaps(
        [
            _seg(0, 99),
            _seg(50, 149),  # a retried copy after a leader change: 50..99 already read
            _seg(100, 140, name="b"),  # wholly inside what is read: dropped
            _seg(150, 199),
            _seg(150, 180, name="short"),  # same start, reaches less far: dropped
            _seg(200, 249, name="old", event=1),
            _seg(200, 249, name="new", event=2),  # same range: the most recent copy wins
        ]
    )
    assert _spans(refs) == [
        ("p/0.log", None, None),
        ("p/50.log", 100, None),
        ("p/150.log", None, None),
        ("p/200new.log", None, None),
    ]


def test_overlaps_without_end_offsets_cut_at_the_next_start() -> None:
    refs = resolve_overlaps(
        [
            _seg(0, None),
            _seg(40, None, size=50),
            _seg(40, None, size=80, name="big"),
            _seg(90, None),
        ]
    )
    assert _spans(refs) == [
        ("p/0.log", None, 40),
        ("p/40big.log", None, 90),
        ("p/90.log", None, None),
    ]


# -- RSA-OAEP with SHA3-512 ----------------------------------------------------------------------


def _private_key():  # type: ignore[no-untyped-def]
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    return serialization.load_pem_private_key(PYCRYPTODOME_KEY, password=None)


def test_oaep_decrypts_what_pycryptodome_encrypted() -> None:
    key = _private_key()
    assert oaep_decrypt(key, base64.b64decode(PYCRYPTODOME_WRAPPED)) == bytes(range(32))


def test_oaep_round_trip_and_tampering() -> None:
    key = _private_key()
    wrapped = oaep_encrypt(key.public_key(), b"k" * 32, bytes(range(64)))
    assert oaep_decrypt(key, wrapped) == b"k" * 32
    damaged = bytearray(wrapped)
    damaged[100] ^= 1
    with pytest.raises(OaepError, match="padding does not check out"):
        oaep_decrypt(key, bytes(damaged))
    with pytest.raises(OaepError, match="wrapped key of 255 bytes for a 256-byte RSA modulus"):
        oaep_decrypt(key, wrapped[1:])
    assert np.frombuffer(wrapped, np.uint8).shape == (256,)
