"""Helpers (no tests) for the tiered-storage tests: partition dirs made of record batches built by
kafka-python and aiokafka (the oracles), and RSA key pairs as Aiven's plugin reads them (PEM:
X.509 public key, PKCS#8 private key)."""

from __future__ import annotations

import random
from pathlib import Path

from kafka_segments_ds.layout import parse_partition_dir_name
from kafka_segments_ds.samples import PartitionWriter

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
START_TS = 1_700_000_000_000


def _patch_offset(data: bytes | bytearray, base: int) -> bytes:
    """Builders write base offset 0; a broker assigns the real one (the CRC does not cover it)."""
    return base.to_bytes(8, "big") + bytes(data[8:])


def write_oracle_partition(
    directory: Path,
    *,
    batches: int = 60,
    records: int = 12,
    segment_bytes: int = 6000,
    codecs: tuple[int, ...] = (0, GZIP, LZ4, ZSTD, SNAPPY),
    builder: str = "kafka-python",
    seed: int = 5,
    first_offset: int = 0,
) -> Path:
    """A partition dir of magic-2 batches built by kafka-python's or aiokafka's
    DefaultRecordBatchBuilder, several segments with .index/.timeindex."""
    if builder == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatchBuilder
    else:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder
    rng = random.Random(seed)
    writer = PartitionWriter(directory, segment_bytes=segment_bytes, next_offset=first_offset)
    offset, ts = first_offset, START_TS
    for b in range(batches):
        codec = codecs[b % len(codecs)]
        batch = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 24)
        for i in range(records):
            value = b"v%d-" % (offset + i) + bytes(rng.choice(b"abcdefgh") for _ in range(40))
            key = None if i % 5 == 0 else b"k%d" % (offset + i)
            headers = [("h", b"%d" % i)] if i % 3 == 0 else []
            batch.append(i, ts + 7 * i, key, value, headers)
        writer.append(_patch_offset(batch.build(), offset), offset + records - 1)
        offset += records
        ts += 7 * records
    writer.roll()
    return directory


def write_oracle_log_dir(root: Path) -> Path:
    """``events-0`` (kafka-python, every codec), ``events-1`` (aiokafka), ``clicks.v2-3``."""
    write_oracle_partition(root / "events-0")
    write_oracle_partition(root / "events-1", builder="aiokafka", seed=6, codecs=(0, LZ4))
    write_oracle_partition(root / "clicks.v2-3", batches=25, records=30, codecs=(0,), seed=7)
    return root


def rsa_key_pair(directory: Path, name: str = "key") -> tuple[bytes, Path]:
    """(public PEM, path of the private PEM file)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path = directory / f"{name}.pem"
    path.write_bytes(private)
    return public, path


def partitions_of(root: Path) -> list[tuple[Path, str, int]]:
    """(dir, topic, partition) of each partition dir of a log dir."""
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        parsed = parse_partition_dir_name(d.name)  # not -delete/-future directories
        if parsed is not None:
            out.append((d, *parsed))
    return out
