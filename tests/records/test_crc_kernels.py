"""CRC-32C kernels (hardware instruction, table walk, pure Python) against the crc32c package."""

from __future__ import annotations

from collections.abc import Callable

import crc32c
import numpy as np
import pytest

from kafka_segments_ds.records import crc_kernels as C

# every path: bytes, 8-byte words, three short streams (3 x 256), three long streams (3 x 2048)
LENGTHS = (0, 1, 7, 8, 9, 15, 16, 17, 61, 767, 768, 769, 4000, 6143, 6144, 6145, 16384, 30000)
SPANS = [(s, s + n) for s in range(9) for n in LENGTHS]
BUF = np.random.default_rng(5).integers(0, 256, size=40000, dtype=np.uint8)
EXPECTED = [crc32c.crc32c(BUF[s:e].tobytes()) for s, e in SPANS]

RANGE_FUNCTIONS: dict[str, Callable[[np.ndarray, int, int], np.uint32]] = {
    "dispatched": C.crc32c_range,
    "tables": C.crc32c_tables_range,
    "pure": C.PURE_PYTHON["crc32c_range"],
}


@pytest.mark.parametrize("name", sorted(RANGE_FUNCTIONS))
def test_every_path_matches_the_crc32c_package_on_every_alignment_and_length(name: str) -> None:
    crc = RANGE_FUNCTIONS[name]
    assert [int(crc(BUF, s, e)) for s, e in SPANS] == EXPECTED


@pytest.mark.parametrize("batch_crcs", [C.batch_crcs_serial, C.PURE_PYTHON["batch_crcs_serial"]])
def test_batch_crcs(batch_crcs: Callable[..., None]) -> None:
    starts = np.array([s for s, _ in SPANS], np.int64)
    ends = np.array([e for _, e in SPANS], np.int64)
    out = np.empty(len(SPANS), np.uint32)
    batch_crcs(BUF, starts, ends, out)
    assert out.tolist() == EXPECTED
    wide = np.empty(len(SPANS), np.int64)  # the reader's dtype
    batch_crcs(BUF, starts, ends, wide)
    assert wide.tolist() == EXPECTED


@pytest.mark.parametrize("batch_crcs", [C.batch_crcs_serial, C.PURE_PYTHON["batch_crcs_serial"]])
def test_ranges_outside_the_buffer_give_minus_one(batch_crcs: Callable[..., None]) -> None:
    data = np.frombuffer(b"123456789", np.uint8)
    out = np.zeros(4, np.int64)
    batch_crcs(data, np.array([0, -1, 5, 3]), np.array([9, 4, 10, 2]), out)
    assert out.tolist() == [0xE3069283, -1, -1, -1]  # the CRC-32C check value, then refusals


@pytest.mark.parametrize("name", sorted(RANGE_FUNCTIONS))
def test_range_outside_the_buffer_raises(name: str) -> None:
    with pytest.raises(ValueError, match="outside a buffer of 9 bytes"):
        RANGE_FUNCTIONS[name](np.frombuffer(b"123456789", np.uint8), 2, 10)


def test_read_only_buffer() -> None:
    data = np.frombuffer(b"123456789", np.uint8)  # read-only, as windows over bytes are
    assert int(C.crc32c_range(data, 0, 9)) == 0xE3069283


def test_hardware_path_is_chosen_where_the_cpu_has_it() -> None:
    import platform

    if not C.COMPILED:
        assert C.HARDWARE is False
        return
    flags = ""
    try:
        with open("/proc/cpuinfo") as info:
            flags = info.read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    has_sse42 = platform.machine().lower() in ("x86_64", "amd64") and " sse4_2" in flags
    assert has_sse42 == C.HARDWARE


@pytest.mark.parametrize(
    "data",
    [b"", b"a", bytes(BUF[:4000]), bytearray(BUF[3:6148]), memoryview(BUF.tobytes())[9:30009]],
    ids=["empty", "one", "bytes", "bytearray", "memoryview"],
)
def test_checksums_crc32c_matches_the_package(data: bytes | bytearray | memoryview) -> None:
    from kafka_segments_ds.records import checksums

    assert checksums.crc32c(data) == crc32c.crc32c(bytes(data))
    assert type(checksums.crc32c(data)) is int
    # in pieces (the package does the seeded form)
    half = len(data) // 2
    assert checksums.crc32c_update(data[half:], checksums.crc32c(data[:half])) == crc32c.crc32c(
        bytes(data)
    )
