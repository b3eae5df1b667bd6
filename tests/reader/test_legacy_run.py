"""The legacy window decoder (reader/legacy.py): its columnar path returns what its per-entry
path (the reference decoder, records/legacy.py, one entry at a time) returns, rows and errors
alike, on logs of magic-0/1 messages, wrappers and v2 batches, intact or damaged, whatever the
options."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafka_segments_ds as ksd
from kafka_segments_ds.errors import KafkaSegmentsError
from kafka_segments_ds.records import legacy_kernels as LK
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_legacy_message,
)
from kafka_segments_ds.records.compression import compress

TS = 1_700_000_000_000
blobs = st.one_of(st.none(), st.binary(max_size=12))
# an entry: ("plain", magic, log-append-time, key, value) | ("wrapper", magic, codec, n, lat) |
# ("v2", n) | ("jump", delta): the next offset moves (backwards too)
entries = st.lists(
    st.one_of(
        st.tuples(st.just("plain"), st.sampled_from([0, 1]), st.booleans(), blobs, blobs),
        st.tuples(
            st.just("wrapper"),
            st.sampled_from([0, 1]),
            st.sampled_from([1, 2, 3]),
            st.integers(1, 5),
            st.booleans(),
        ),
        st.tuples(st.just("v2"), st.integers(1, 3)),
        st.tuples(st.just("jump"), st.integers(-3, 4)),
    ),
    min_size=1,
    max_size=25,
)
options = st.fixed_dictionaries(
    {},
    optional={
        "iteration": st.sampled_from(["deep", "shallow"]),
        "mode": st.sampled_from(["FAILFAST", "DROPMALFORMED"]),
        "verifyChecksums": st.booleans(),
        "includeMetadata": st.just(True),
        "startingOffsets": st.integers(0, 20).map(lambda o: f'{{"t":{{"0":{o}}}}}'),
        "endingOffsets": st.integers(20, 50).map(lambda o: f'{{"t":{{"0":{o}}}}}'),
        "readChunkBytes": st.sampled_from([4096]),
    },
)


def _log(spec: list[tuple[Any, ...]]) -> bytes:
    out, offset = b"", 0
    for entry in spec:
        if entry[0] == "plain":
            _, magic, lat, key, value = entry
            attributes = 0x08 if lat and magic == 1 else 0
            out += encode_legacy_message(
                offset=offset, magic=magic, key=key, value=value, timestamp=TS + offset,
                attributes=attributes,
            )  # fmt: skip
            offset += 1
        elif entry[0] == "wrapper":
            _, magic, codec, n, lat = entry
            # inner timestamps of their own, which LogAppendTime replaces by the wrapper's
            inner = b"".join(
                encode_legacy_message(
                    offset=offset + i if magic == 0 else i, magic=magic, key=b"k%d" % i,
                    value=b"v" * i, timestamp=TS + i,
                )
                for i in range(n)
            )  # fmt: skip
            out += encode_legacy_message(
                offset=offset + n - 1, magic=magic, key=None,
                value=compress(codec, inner, magic=magic), timestamp=TS + 99,
                attributes=codec | (0x08 if lat and magic == 1 else 0),
            )  # fmt: skip
            offset += n
        elif entry[0] == "v2":
            specs = [RecordSpec(key=None, value=b"b%d" % i, timestamp=TS) for i in range(entry[1])]
            out += encode_batch(specs, base_offset=offset)
            offset += entry[1]
        else:
            offset = max(0, offset + entry[1])
    return out


def _read(path: Path, opts: dict[str, Any]) -> pa.Table | tuple[str, str]:
    try:
        return ksd.read_table(str(path), **opts)
    except KafkaSegmentsError as err:
        return type(err).__name__, str(err)


def _per_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every legacy entry through the per-entry path (the kernels find nothing to decode)."""

    def nothing(buf: np.ndarray, positions: np.ndarray, verify: bool) -> tuple[np.ndarray, int]:
        return np.empty((LK.N_FIELDS, len(positions)), np.int64), 0

    def bad(buf: np.ndarray, verify: bool) -> tuple[np.ndarray, bool, int]:
        return np.empty((LK.N_FIELDS, 0), np.int64), True, 0

    monkeypatch.setattr(LK, "read_messages", nothing)
    monkeypatch.setattr(LK, "walk_inner", bad)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries, options, st.lists(st.tuples(st.floats(0, 0.999), st.integers(1, 255)), max_size=2))
def test_the_columnar_path_returns_what_the_per_entry_path_returns(
    spec: list[tuple[Any, ...]], opts: dict[str, Any], damage: list[tuple[float, int]]
) -> None:
    data = bytearray(_log(spec))
    for where, mask in damage if data else []:
        data[int(where * len(data))] ^= mask
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        segment = Path(tmp) / "t-0" / "00000000000000000000.log"
        segment.parent.mkdir()
        segment.write_bytes(bytes(data))
        fast = _read(segment.parent, opts)
        _per_entry(monkeypatch)
        slow = _read(segment.parent, opts)
    if isinstance(fast, pa.Table) and isinstance(slow, pa.Table):
        assert fast.equals(slow)
    else:
        assert fast == slow


def test_a_stretch_of_plain_messages_is_decoded_by_one_kernel_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys and values are those written; the kernel runs once for the run of 300 messages and
    the wrapper among them, which takes the per-entry path."""
    log = b"".join(
        encode_legacy_message(offset=o, magic=1, key=b"k%d" % o, value=b"v" * (o % 7),
                              timestamp=TS + o)
        for o in range(150)
    )  # fmt: skip
    inner = b"".join(
        encode_legacy_message(offset=i, magic=1, key=None, value=b"w%d" % i, timestamp=TS + i)
        for i in range(3)
    )
    log += encode_legacy_message(
        offset=152, magic=1, key=None, value=compress(1, inner, magic=1), timestamp=TS + 7,
        attributes=1 | 0x08,  # gzip, LogAppendTime: the wrapper's timestamp is every message's
    )  # fmt: skip
    log += b"".join(
        encode_legacy_message(offset=o, magic=0, key=None, value=b"m%d" % o)
        for o in range(153, 303)
    )
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    segment.parent.mkdir()
    segment.write_bytes(log)
    calls = []
    real = LK.read_messages

    def counted(buf: np.ndarray, positions: np.ndarray, verify: bool) -> tuple[np.ndarray, int]:
        calls.append(len(positions))
        return real(buf, positions, verify)  # type: ignore[no-any-return]

    monkeypatch.setattr(LK, "read_messages", counted)
    table = ksd.read_table(str(segment.parent), includeMetadata=True)
    assert calls == [301]
    assert table["offset"].to_pylist() == list(range(303))
    assert table["key"].to_pylist()[:150] == [b"k%d" % o for o in range(150)]
    assert table["key"].to_pylist()[150:] == [None] * 153
    assert table["value"].to_pylist()[148:156] == [
        b"v" * 1, b"v" * 2, b"w0", b"w1", b"w2", b"m153", b"m154", b"m155",
    ]  # fmt: skip
    assert table["timestampType"].to_pylist()[149:154] == [0, 1, 1, 1, -1]
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    assert ts[149:153] == [(TS + 149) * 1000, (TS + 7) * 1000, (TS + 7) * 1000, (TS + 7) * 1000]
    assert table["magic"].to_pylist()[149:154] == [1, 1, 1, 1, 0]
