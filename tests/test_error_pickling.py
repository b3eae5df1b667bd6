"""Spark pickles an executor's exception back to the driver: every error this package raises on
purpose keeps its type, message and fields through pickle."""

from __future__ import annotations

import pickle

import pytest

from kafka_segments_ds.errors import (
    ChecksumError,
    CorruptIndexError,
    CorruptSegmentError,
    InvalidOptionError,
    KafkaSegmentsError,
    LimitExceededError,
    MissingCodecError,
    NoKafkaDataError,
    StorageError,
)
from kafka_segments_ds.tiered.aiven import ManifestError
from kafka_segments_ds.tiered.chunks import MissingCryptographyError, MissingKeyError


@pytest.mark.parametrize(
    "error",
    [
        CorruptSegmentError("bad", path="/a/0.log", position=12, offset=7),
        ChecksumError("crc", path="/a/0.log", position=0, offset=None),
        LimitExceededError("big", path="s3://b/0.log", position=5, offset=3),
        CorruptIndexError("index"),
        MissingCodecError("lz4", "lz4"),
        MissingCryptographyError("s3://b/t-x/0/000-y.log"),
        MissingKeyError("no key for key pair 'kp'"),
        InvalidOptionError("opt"),
        StorageError("gone", "s3://b/0.log", 10),
        NoKafkaDataError("/a: no Kafka log segments"),
        ManifestError("manifest"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_survive_pickling(error: KafkaSegmentsError) -> None:
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is type(error)
    assert str(clone) == str(error)
    assert vars(clone) == vars(error)
