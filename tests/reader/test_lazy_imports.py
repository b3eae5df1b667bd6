"""A plain read loads only what it runs: the crc32c package (the compiled kernel checksums) and
the damage policy (no damage seen) stay unimported, so a fresh process's first read_table does
not pay for them (about 25 ms of imports)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_segments_ds.records import kernels as K

READ = """
import json, sys
import kafka_segments_ds as ksd
table = ksd.read_table(sys.argv[1])
values = [v.decode() for v in table.column("value").to_pylist()]
print(json.dumps({"rows": table.num_rows, "values": values,
    "loaded": sorted(m for m in ("crc32c", "kafka_segments_ds.reader.damage",
    "kafka_segments_ds.records.resync") if m in sys.modules)}))
"""


def _read_in_fresh_process(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", READ, str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@pytest.mark.skipif(not K.COMPILED, reason="the compiled kernels are not built")
def test_a_plain_read_imports_neither_crc32c_nor_the_damage_policy(make_partition) -> None:
    part = make_partition("t-0")
    part.batch([1000, 1001])
    part.batch([1002])
    got = _read_in_fresh_process(part.close())
    assert got == {"rows": 3, "values": ["v0", "v1", "v2"], "loaded": []}


def test_damage_still_reaches_the_policy_in_a_fresh_process(make_partition) -> None:
    part = make_partition("t-0")
    part.batch([1000])
    part.batch([1001])
    path = part.close()
    log = sorted(path.glob("*.log"))[0] if path.is_dir() else path
    data = bytearray(log.read_bytes())
    data[-1] ^= 0xFF  # the second batch's last byte: its CRC-32C no longer matches
    log.write_bytes(bytes(data))
    out = subprocess.run(
        [sys.executable, "-c", READ, str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 1
    assert "ChecksumError" in out.stderr and "CRC-32C mismatch" in out.stderr
