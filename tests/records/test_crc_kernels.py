"""The numba CRC-32C (hardware instruction and table walk) against the crc32c package."""

from __future__ import annotations

import crc32c
import numpy as np
from numba import njit

from kafka_segments_ds.records import crc_kernels as C


@njit(cache=True)
def _tables(buf: np.ndarray, start: int, end: int) -> int:
    return C._crc_tables(buf, start, end, C._TABLES)


def test_both_paths_match_the_crc32c_package_on_every_alignment_and_length() -> None:
    rng = np.random.default_rng(5)
    buf = rng.integers(0, 256, size=40000, dtype=np.uint8)
    # every path: bytes, 8-byte words, three short streams, three long streams
    spans = [
        (s, s + n)
        for s in range(0, 9)
        for n in (
            0,
            1,
            7,
            8,
            9,
            15,
            16,
            17,
            61,
            767,
            768,
            769,
            4000,
            6143,
            6144,
            6145,
            16384,
            30000,
        )
    ]
    starts = np.array([s for s, _ in spans], np.int64)
    ends = np.array([e for _, e in spans], np.int64)
    out = np.empty(len(spans), np.uint32)
    C.batch_crcs(buf, starts, ends, out)
    expected = [crc32c.crc32c(buf[s:e].tobytes()) for s, e in spans]
    assert out.tolist() == expected
    assert [int(_tables(buf, s, e)) for s, e in spans] == expected


def test_known_value() -> None:
    data = np.frombuffer(b"123456789", np.uint8)
    out = np.empty(1, np.uint32)
    C.batch_crcs(data, np.array([0]), np.array([9]), out)
    assert int(out[0]) == 0xE3069283  # the CRC-32C check value
