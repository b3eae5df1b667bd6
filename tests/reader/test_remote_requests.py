"""How many S3 requests a read makes, per object: counted at the loopback proxy of
test_remote_faults (moto behind it), never timed.

pyarrow's ``open_input_file`` on S3 costs one HEAD (it cannot be given the size the listing
already holds), then one ranged GET per ``read_at``. What is pinned here:

- a full read opens each ``.log`` once: 1 HEAD and 1 GET of exactly the whole object; no
  ``.index``/``.timeindex``/``.txnindex`` is touched;
- a read from an offset in the middle of a segment: the driver reads that segment's ``.index``
  and checks the entry at the index position through one open (1 HEAD, then 27 header bytes
  and the whole entry for its checksum: 2 GETs); the executor then reads exactly
  ``[position, size)``
  once. The entry checked on the driver is read again by the executor (it is the first entry
  of its window); the last segment's ``.index`` is read twice (``log_end_offset`` for the
  startingOffsets range check, then the task plan), and ``log_end_offset`` checks the entry
  at its last position, then reads from there to the end once (tail.py's walk).
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kafka_segments_ds as ksd
from kafka_segments_ds import index as kidx
from kafka_segments_ds.fs import RangeReader, resolve
from kafka_segments_ds.records.batches import ENTRY_HEAD_BYTES, scan_entries
from tests.support.s3proxy import Proxy, Request, start_proxy, upload_sample

BUCKET = "counted"
PREFIX = f"/{BUCKET}/logs/"


@pytest.fixture(scope="module")
def counted(
    moto_s3,
    tmp_path_factory: pytest.TempPathFactory,  # type: ignore[no-untyped-def]
) -> Iterator[tuple[dict[str, str], Proxy, Path]]:
    """(reader options pointing at the counting proxy, the proxy, the local copy)."""
    with moto_s3(BUCKET) as (direct, moto_host, moto_port):
        root = upload_sample(direct, BUCKET, tmp_path_factory.mktemp("counted"))
        proxy, options = start_proxy(moto_host, moto_port)
        try:
            yield options, proxy, root
        finally:
            proxy.shutdown()


def _read(counted: tuple[dict[str, str], Proxy, Path], **extra: Any) -> list[Request]:
    options, proxy, _ = counted
    proxy.requests.clear()
    ksd.read_table(f"s3://{BUCKET}/logs", **options, **extra)
    return list(proxy.requests)


def _objects(requests: list[Request]) -> dict[str, list[tuple[str, str | None]]]:
    """Requests per object key (relative to the log dir), in order: (method, Range)."""
    out: dict[str, list[tuple[str, str | None]]] = {}
    for r in requests:
        if r.key.startswith(PREFIX):
            out.setdefault(r.key[len(PREFIX) :], []).append((r.method, r.range))
    return out


def _listing(requests: list[Request]) -> list[tuple[str, str]]:
    return [(r.method, r.query) for r in requests if not r.key.startswith(PREFIX)]


def _logs(root: Path) -> dict[str, int]:
    """The live ``.log`` files (not those of a partition directory marked for deletion)."""
    return {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*.log"))
        if not p.parent.name.endswith("-delete")
    }


def _span(first: int, last_exclusive: int) -> str:
    return f"bytes={first}-{last_exclusive - 1}"


# The root is looked up (HEAD, then a one-key listing: is it a "directory"?) and listed twice:
# once one level deep (partition directories), once recursively (the segment files).
LISTING = [
    ("HEAD", ""),
    ("GET", "delimiter=%2F&list-type=2&max-keys=1&prefix=logs%2F"),
    ("GET", "delimiter=%2F&list-type=2&max-keys=1000&prefix=logs%2F"),
    ("HEAD", ""),
    ("GET", "delimiter=%2F&list-type=2&max-keys=1&prefix=logs%2F"),
    ("GET", "list-type=2&max-keys=1000&prefix=logs%2F"),
]


def test_full_read_opens_each_log_once_and_reads_it_once(
    counted: tuple[dict[str, str], Proxy, Path],
) -> None:
    requests = _read(counted)
    logs = _logs(counted[2])
    per_partition = Counter(os.path.dirname(k) for k in logs)
    assert per_partition == {"legacy.events-0": 2, "metrics-v1-0": 2, "orders-0": 2, "orders-1": 1}
    assert any(p.parent.name.endswith("-delete") for p in counted[2].rglob("*.log"))
    assert _objects(requests) == {
        key: [("HEAD", None), ("GET", _span(0, size))] for key, size in logs.items()
    }
    assert _listing(requests) == LISTING
    assert len(requests) == 2 * len(logs) + len(LISTING)


def _index_position(root: Path, segment: str, target: int) -> tuple[int, int]:
    """(the .index position for ``target``, the length of the entry there), from the local copy."""
    log = root / segment
    base = int(log.stem)
    data = log.with_suffix(".index").read_bytes()
    position = kidx.lookup_offset(
        kidx.parse_offset_index(memoryview(data), base, log.stat().st_size), target
    ).position
    with log.open("rb") as f:
        f.seek(position + 8)
        length = 12 + int.from_bytes(f.read(4), "big")
    return position, length


def test_mid_segment_start_reads_only_the_needed_part_of_the_log(
    counted: tuple[dict[str, str], Proxy, Path],
) -> None:
    root = counted[2]
    requests = _read(counted, subscribe="orders", startingOffsets='{"orders":{"0":100,"1":150}}')
    logs = {k: v for k, v in _logs(root).items() if k.startswith(("orders-0/", "orders-1/"))}
    # orders-0: the start falls in the first of two segments; orders-1 has one segment
    assert sorted(logs) == [
        "orders-0/00000000000000000000.log",
        "orders-0/00000000000000000204.log",
        "orders-1/00000000000000000000.log",
    ]
    seen = _objects(requests)
    assert sorted(seen) == sorted(
        [*logs, "orders-0/00000000000000000000.index", "orders-1/00000000000000000000.index"]
    )
    whole_index = {
        k: [("HEAD", None), ("GET", _span(0, (root / k).stat().st_size))]
        for k in seen
        if k.endswith(".index")
    }
    assert (
        seen["orders-0/00000000000000000000.index"]
        == whole_index["orders-0/00000000000000000000.index"]
    )
    # read twice: log_end_offset (startingOffsets range check) and the task plan
    assert (
        seen["orders-1/00000000000000000000.index"]
        == 2 * whole_index["orders-1/00000000000000000000.index"]
    )

    for key, target in (
        ("orders-0/00000000000000000000.log", 100),
        ("orders-1/00000000000000000000.log", 150),
    ):
        position, length = _index_position(root, key, target)
        assert position > 0
        check = [  # one open: the entry's head, then the whole entry for its checksum
            ("HEAD", None),
            ("GET", _span(position, position + ENTRY_HEAD_BYTES)),
            ("GET", _span(position, position + length)),
        ]
        executor = [("HEAD", None), ("GET", _span(position, logs[key]))]
        got = seen[key]
        if key.startswith("orders-1"):
            # the last segment: log_end_offset first checks the entry at the last .index
            # position (its head, then whole for its checksum), then walks from there to the
            # end in one window (one open)
            walk, got = got[:4], got[4:]
            assert walk[0] == ("HEAD", None)
            last = int(
                kidx.parse_offset_index(
                    memoryview((root / key).with_suffix(".index").read_bytes()), 0, logs[key]
                ).positions[-1]
            )
            second = next(e for e in scan_entries((root / key).read_bytes()).positions if e > last)
            assert walk[1:] == [
                ("GET", _span(last, last + ENTRY_HEAD_BYTES)),
                ("GET", _span(last, int(second))),  # the first entry, whole
                ("GET", _span(last, logs[key])),  # the walk's window
            ]
        assert got == check + executor, key
    # the segment after the start is read whole, once
    assert seen["orders-0/00000000000000000204.log"] == [
        ("HEAD", None),
        ("GET", _span(0, logs["orders-0/00000000000000000204.log"])),
    ]
    assert _listing(requests) == LISTING


def test_range_reader_opens_once_until_closed(
    counted: tuple[dict[str, str], Proxy, Path],
) -> None:
    options, proxy, root = counted
    filesystem, path = resolve(f"s3://{BUCKET}/logs/orders-0/00000000000000000000.log", options)
    size = (root / "orders-0/00000000000000000000.log").stat().st_size
    proxy.requests.clear()
    with RangeReader(filesystem, path) as read:
        assert bytes(read(0, 12)) == (root / "orders-0/00000000000000000000.log").read_bytes()[:12]
        assert read(size - 5, 100).size == 5  # past the end: short, no error
        assert read(size, 10).size == 0  # at the end: no request
    assert bytes(read(1, 2)) == (root / "orders-0/00000000000000000000.log").read_bytes()[1:3]
    read.close()
    with pytest.raises(ValueError, match="invalid range"):
        read(-1, 2)
    key = "orders-0/00000000000000000000.log"
    assert _objects(proxy.requests) == {
        key: [
            ("HEAD", None),
            ("GET", "bytes=0-11"),
            ("GET", _span(size - 5, size)),
            ("HEAD", None),  # reopened after close
            ("GET", "bytes=1-2"),
        ]
    }


def _windows(data: bytes, chunk: int) -> list[str]:
    """The ranges a reader with ``readChunkBytes=chunk`` asks for: each window starts at the
    entry the previous one cut (read again, whole), and grows to hold an entry over ``chunk``."""
    starts = [0]
    while starts[-1] < len(data):
        p = starts[-1]
        starts.append(p + 12 + int.from_bytes(data[p + 8 : p + 12], "big"))
    assert starts[-1] == len(data)
    after = dict(itertools.pairwise(starts))  # entry start -> its end
    spans, pos, want = [], 0, chunk
    while pos < len(data):
        end = min(pos + want, len(data))
        spans.append(_span(pos, end))
        cut = [s for s in starts[:-1] if s >= pos and after[s] > end]
        if not cut:
            break
        pos = cut[0]
        want = max(chunk, after[pos] - pos)
    return spans


def test_windows_smaller_than_a_segment_share_one_open(
    counted: tuple[dict[str, str], Proxy, Path],
) -> None:
    """readChunkBytes below the segment size: one HEAD per .log, one GET per window, no other
    request (the cut entry's length is taken from the window, not asked for again)."""
    root = counted[2]
    requests = _read(counted, readChunkBytes="4096")
    logs = _logs(root)
    expected = {
        key: [("HEAD", None)] + [("GET", s) for s in _windows((root / key).read_bytes(), 4096)]
        for key in logs
    }
    assert _objects(requests) == expected
    # windows overlap by the entry each one cuts: that entry's head is read twice
    gets = sum(len(v) - 1 for v in expected.values())
    assert gets > len(logs)
