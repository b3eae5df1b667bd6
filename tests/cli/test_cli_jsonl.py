"""The column-at-a-time JSON-lines writer gives exactly what ``json.dumps`` gives per row."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from kafka_segments_ds import read_table
from kafka_segments_ds.cli.jsonl import jsonl_bytes
from kafka_segments_ds.samples import write_sample_log_dir
from kafka_segments_ds.schema import HEADER_TYPE, TIMESTAMP_TYPE

ENCODINGS = ("utf8", "hex", "base64", "json")
TRICKY = [
    b"plain",
    b"",
    None,
    b'quote " and backslash \\ and both \\"',
    b"tab\tnewline\ncr\rnul\x00bell\x07",
    b"\xff\xfe not utf-8 \xc3",
    "unicode é ✓ \u2028 😀".encode(),
    b'{"a": [1, 2.5, null], "b": "x"}',
    b"\x7f del",
]


def jsonl_text(arrow_batch: pa.RecordBatch, key: str, value: str) -> str:
    return bytes(jsonl_bytes(arrow_batch, key, value)).decode()


def reference(row: dict, key: str, value: str) -> str:
    """What the per-row path writes (the rendering rules of ``render_bytes``)."""

    def render(data: bytes | None, encoding: str) -> object:
        if data is None:
            return None
        if encoding == "hex":
            return data.hex()
        if encoding == "base64":
            return base64.b64encode(data).decode()
        if encoding == "json":
            try:
                return json.loads(data)
            except ValueError:
                pass
        return data.decode("utf-8", "replace")

    out = dict(row)
    for name, encoding in (("key", key), ("value", value)):
        if name in row:
            out[name] = render(row[name], encoding)
    if out.get("headers") is not None:
        out["headers"] = [
            {"key": h["key"], "value": render(h["value"], value)} for h in out["headers"]
        ]
    if out.get("timestamp") is not None:
        out["timestamp"] = round(out["timestamp"].timestamp() * 1000)
    return json.dumps(out, ensure_ascii=False) + "\n"


def tricky_batch() -> pa.RecordBatch:
    n = len(TRICKY)
    stamps = [datetime(2024, 1, 2, 3, 4, 5, 6000 * i, tzinfo=timezone.utc) for i in range(n)]
    stamps[2] = None
    headers = [[{"key": 'h"1', "value": v}, {"key": "h2", "value": None}] for v in TRICKY]
    headers[1] = []
    headers[4] = None
    return pa.record_batch(
        {
            "key": pa.array(list(reversed(TRICKY)), pa.binary()),
            "value": pa.array(TRICKY, pa.binary()),
            "topic": pa.array(["t\\x", None, *["t"] * (n - 2)], pa.string()),
            "partition": pa.array(range(n), pa.int32()),
            "offset": pa.array([2**62 + i for i in range(n)], pa.int64()),
            "timestamp": pa.array(stamps, TIMESTAMP_TYPE),
            "timestampType": pa.array([0, 1, -1, *[0] * (n - 3)], pa.int32()),
            "headers": pa.array(headers, HEADER_TYPE),
            "magic": pa.array([2] * n, pa.int8()),
            "isControl": pa.array([True, False, None, *[False] * (n - 3)], pa.bool_()),
        }
    )


@pytest.mark.parametrize("key", ENCODINGS)
@pytest.mark.parametrize("value", ENCODINGS)
def test_tricky_values(key: str, value: str) -> None:
    arrow_batch = tricky_batch()
    expected = "".join(reference(row, key, value) for row in arrow_batch.to_pylist())
    assert jsonl_text(arrow_batch, key, value) == expected


def test_bulk_escaping_without_control_characters() -> None:
    # no control characters and valid UTF-8: quotes and backslashes are escaped in bulk
    values = [TRICKY[0], TRICKY[1], None, TRICKY[3], TRICKY[6], TRICKY[7], TRICKY[8]]
    arrow_batch = pa.record_batch({"value": pa.array(values, pa.binary())})
    expected = "".join(reference(row, "utf8", "utf8") for row in arrow_batch.to_pylist())
    assert "\\\\" in expected and '\\"' in expected and "\u2028" in expected
    assert jsonl_text(arrow_batch, "utf8", "utf8") == expected


def test_slices_and_nulls_only() -> None:
    arrow_batch = tricky_batch()
    for start, length in ((1, 3), (2, 1), (5, 4), (0, 0)):
        part = arrow_batch.slice(start, length)
        expected = "".join(reference(row, "hex", "utf8") for row in part.to_pylist())
        assert jsonl_text(part, "hex", "utf8") == expected
    nulls = pa.record_batch({"key": pa.array([None, None], pa.binary())})
    assert jsonl_text(nulls, "hex", "utf8") == '{"key": null}\n{"key": null}\n'


def test_sample_log_dir(tmp_path: Path) -> None:
    root = write_sample_log_dir(tmp_path, records_per_partition=120, segment_bytes=8 * 1024)
    table = read_table(root, includeHeaders=True, includeMetadata=True)
    assert table.num_rows > 400
    for arrow_batch in table.to_batches():
        expected = "".join(reference(row, "utf8", "base64") for row in arrow_batch.to_pylist())
        assert jsonl_text(arrow_batch, "utf8", "base64") == expected


def test_integer_edges() -> None:
    values = [0, -1, 9, 10, -10, 99, 2**63 - 1, -(2**63), None, 1_700_000_000_123]
    arrow_batch = pa.record_batch({"offset": pa.array(values, pa.int64())})
    expected = "".join(json.dumps({"offset": v}) + "\n" for v in values)
    assert jsonl_text(arrow_batch, "utf8", "utf8") == expected


def test_timestamps_before_1970_and_narrow_integers() -> None:
    # microseconds to milliseconds truncates toward zero, as Arrow's integer division does
    micros = [-1_500_000, -1_500, -1, 0, 999, -(2**63) + 1, 2**63 - 1, None]
    arrow_batch = pa.record_batch(
        {
            "timestamp": pa.array(micros, TIMESTAMP_TYPE),
            "magic": pa.array([-128, 127, 0, 1, 2, None, -1, 5], pa.int8()),
            "count": pa.array([0, 2**32 - 1, 7, None, 1, 2, 3, 4], pa.uint32()),
        }
    ).slice(1)
    millis = [None if m is None else (-1 if m < 0 else 1) * (abs(m) // 1000) for m in micros]
    magics, counts = (arrow_batch.column(c).to_pylist() for c in ("magic", "count"))
    expected = "".join(
        json.dumps({"timestamp": t, "magic": g, "count": c}) + "\n"
        for t, g, c in zip(millis[1:], magics, counts, strict=True)
    )
    assert jsonl_text(arrow_batch, "utf8", "utf8") == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["dump"],
        ["dump", "--shallow"],
        ["dump", "--include-metadata", "--include-headers"],
        ["dump", "--value", "base64", "--key", "hex"],
        ["verify"],
    ],
)
def test_cli_does_not_import_pandas(tmp_path: Path, argv: list[str]) -> None:
    """pyarrow imports pandas on the first ``pa.scalar``, ``pa.array`` over Python objects or
    ``to_numpy``: 0.25 s of a run of the command line."""
    root = write_sample_log_dir(tmp_path, records_per_partition=50)
    code = (
        "import sys, io, contextlib\nfrom kafka_segments_ds.cli import main\n"
        "out = io.StringIO()\nwith contextlib.redirect_stdout(out):\n"
        f"    status = main({[*argv, str(root), '--quiet']!r})\n"
        "print(status, len(out.getvalue().splitlines()), 'pandas' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    status, lines, pandas = done.stderr.split()[-3:]
    assert (status, pandas) == ("0", "False")
    if argv == ["dump"] or "--include-metadata" in argv or "--value" in argv:
        assert int(lines) == len(read_table(root))
    else:
        assert int(lines) > 0


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        (b'{"a": [1, 2.5, "x"]}', {"a": [1, 2.5, "x"]}),
        (b'\x00\x00\x00\x00\x07{"a": 1}', {"a": 1}),  # Confluent's wire format
        # JSON that JSON output could not hold again: the text, as utf8 renders it
        (b'{"name": "\\ud83d"}', '{"name": "\\ud83d"}'),  # a lone surrogate
        (b"NaN", "NaN"),
        (b"[1, Infinity]", "[1, Infinity]"),
        (b"-Infinity", "-Infinity"),
        (b"1e999", "1e999"),  # valid JSON, but a float beyond any double
        (b"[" * 100_000 + b"]" * 100_000, "[" * 100_000 + "]" * 100_000),
        (b"null", "null"),
    ],
)
def test_json_rendering_writes_json_back(value: bytes, rendered: object) -> None:
    from kafka_segments_ds.cli.common import render_bytes

    got = render_bytes(value, "json")
    assert got == rendered
    line = json.dumps({"value": got}, ensure_ascii=False, allow_nan=False).encode("utf-8")
    assert json.loads(line) == {"value": rendered}
    batch = pa.record_batch({"value": pa.array([value], pa.binary())})
    assert json.loads(bytes(jsonl_bytes(batch, "utf8", "json"))) == {"value": rendered}
