"""``kafka-segments erase`` and ``compact``: what they print, the keys they take, refusals."""

from __future__ import annotations

import base64
from pathlib import Path

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table, write_table
from kafka_segments_ds.cli import main

KEYS = [b"a", b"b", b"\xff\x00", b"a", None, b"c", b"b"]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """Topic t, partition 0: the keys above at offsets 10, 11, 12, 13, 14, 15, 17."""
    offsets = [10, 11, 12, 13, 14, 15, 17]
    write_table(
        pa.table(
            {
                "key": pa.array(KEYS, pa.binary()),
                "value": [b"v%d" % o for o in offsets],
                "offset": pa.array(offsets, pa.int64()),
            }
        ),
        tmp_path / "src",
        topic="t",
        preserveOffsets="true",
    )
    return tmp_path / "src"


def offsets(path: Path) -> list[int]:
    return read_table(path, ["offset"])["offset"].to_pylist()


def test_erase_keys_given_three_ways(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "keys").write_bytes(b"c\n\nnone-such\n")
    status = main(
        [
            "erase",
            str(source),
            str(tmp_path / "out"),
            "--key",
            "a",
            "--key-base64",
            base64.b64encode(b"\xff\x00").decode(),
            "--keys-file",
            str(tmp_path / "keys"),
            "--write-option",
            "segmentBytes=100",
        ]
    )
    assert status == 0
    assert capsys.readouterr().out == "t-0: 7 records, 4 erased, 3 kept, offsets 11..17\n"
    assert offsets(tmp_path / "out") == [11, 14, 17]
    # segmentBytes taken: a segment per batch; the first keeps its base offset 10
    assert sorted(p.name for p in (tmp_path / "out" / "t-0").glob("*.log")) == [
        f"{10:020d}.log",
        f"{17:020d}.log",
    ]


def test_compact(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compact", str(source), str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out == (
        "t-0: 7 records, 3 removed (1 without a key), 4 kept, offsets 12..17\n"
    )
    assert offsets(tmp_path / "out") == [12, 13, 15, 17]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "erase needs the keys to remove: --key, --key-base64 or --keys-file"),
        (["--key-base64", "!!"], "--key-base64 '!!': not base64"),
        (["--keys-file", "/no/such/file"], "cannot read the keys file"),
        (["--key", "a", "--option", "isolationLevel=read_uncommitted"], "option isolationLevel"),
        (["--key", "a", "--write-option", "topic=x"], "write option topic"),
    ],
)
def test_erase_refusals(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["erase", str(source), str(tmp_path / "out"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
