"""The columnar read path (compiled kernels in records/kernels.py driven by window.py/reader.py)
against the reference decoders (records/v2.py, records/legacy.py) on the same bytes.

Logs are random mixes of magic-2 batches (every codec, headers, null/empty keys and values,
negative timestamp deltas, LogAppendTime, compaction gaps, empty batches, transactional data and
control markers) and magic-0/1 messages and compressed wrappers. Each log is read with
``read_table`` three ways -- default windows, the smallest windows (``readChunkBytes=4096``, so
windows end between entries and some entries are larger than a window) and
``iteration=shallow`` -- and every row is compared with what the reference decoders produce when
walking the same file.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafka_segments_ds
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_control_batch,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.compression import CODEC_LABELS, compress, decompress
from kafka_segments_ds.records.legacy import decode_legacy_message, iter_inner_messages
from kafka_segments_ds.records.v2 import decode_batch_header, iter_records

TOPIC, PARTITION = "t", 0
SEGMENT = "00000000000000000000.log"
TS = 1_700_000_000_000

# --- reference rows -----------------------------------------------------------------------------


def _micros(ts: int) -> int | None:
    return None if ts == -1 else ts * 1000


def _row(
    path: str,
    position: int,
    *,
    key: bytes | None,
    value: bytes | None,
    offset: int,
    ts: int,
    ts_type: int,
    headers: list[dict[str, Any]],
    magic: int,
    codec: int,
    base: int,
    last: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    leader_epoch: int = -1,
) -> dict[str, Any]:
    return {
        "key": key,
        "value": value,
        "topic": TOPIC,
        "partition": PARTITION,
        "offset": offset,
        "timestamp": _micros(ts),
        "timestampType": ts_type,
        "headers": headers,
        "magic": magic,
        "compression": CODEC_LABELS[codec],
        "batchBaseOffset": base,
        "batchLastOffset": last,
        "producerId": producer_id,
        "producerEpoch": producer_epoch,
        "baseSequence": base_sequence,
        "isTransactional": transactional,
        "isControl": control,
        "leaderEpoch": leader_epoch,
        "segment": path,
        "position": position,
    }


def reference_rows(buf: bytes, path: str, *, deep: bool) -> list[dict[str, Any]]:
    """Walk ``buf`` entry by entry with the reference decoders and build the expected rows."""
    rows: list[dict[str, Any]] = []
    pos = 0
    while pos < len(buf):
        magic = buf[pos + 16]
        if magic == 2:
            header = decode_batch_header(buf, pos)
            end = pos + header.size_in_bytes
            section: bytes | memoryview = memoryview(buf)[pos + 61 : end]
            codec = int(header.compression)
            common: dict[str, Any] = dict(
                magic=2,
                codec=codec,
                base=header.base_offset,
                last=header.last_offset,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                transactional=header.is_transactional,
                control=header.is_control,
                leader_epoch=header.leader_epoch,
            )
            if not deep:
                rows.append(
                    _row(
                        path,
                        pos,
                        key=None,
                        value=bytes(section),
                        offset=header.last_offset,
                        ts=header.max_timestamp,
                        ts_type=header.timestamp_type,
                        headers=[],
                        **common,
                    )
                )
            else:
                if codec:
                    section = decompress(codec, section, magic=2)
                records = list(iter_records(header, section))
                if not header.is_control:  # consumers never see control records
                    rows.extend(
                        _row(
                            path,
                            pos,
                            key=r.key,
                            value=r.value,
                            offset=r.offset,
                            ts=r.timestamp,
                            ts_type=r.timestamp_type,
                            headers=[{"key": k, "value": v} for k, v in r.headers],
                            **common,
                        )
                        for r in records
                    )
            pos = end
        else:
            message = decode_legacy_message(buf, pos)
            codec = int(message.compression)
            inner = list(iter_inner_messages(message)) if codec else [message]
            common = dict(
                magic=message.magic, codec=codec, base=inner[0].offset, last=message.offset
            )
            shown = inner if deep else [message]
            rows.extend(
                _row(
                    path,
                    pos,
                    key=m.key,
                    value=m.value,
                    offset=m.offset,
                    ts=m.timestamp,
                    ts_type=m.timestamp_type,
                    headers=[],
                    **common,
                )
                for m in shown
            )
            pos += 12 + message.size
    return rows


def table_rows(table: pa.Table) -> list[dict[str, Any]]:
    i = table.schema.get_field_index("timestamp")
    table = table.set_column(i, "timestamp", table.column(i).cast(pa.int64()))
    return table.to_pylist()


def _check(log: bytes, directory: Path) -> None:
    part = directory / f"{TOPIC}-{PARTITION}"
    part.mkdir(exist_ok=True)
    path = part / SEGMENT
    path.write_bytes(log)
    p = str(path)
    deep = reference_rows(log, p, deep=True)
    shallow = reference_rows(log, p, deep=False)
    opts: dict[str, Any] = dict(includeHeaders=True, includeMetadata=True)
    assert table_rows(kafka_segments_ds.read_table(p, **opts)) == deep
    assert table_rows(kafka_segments_ds.read_table(p, readChunkBytes=4096, **opts)) == deep
    assert table_rows(kafka_segments_ds.read_table(p, iteration="shallow", **opts)) == shallow
    assert (
        table_rows(
            kafka_segments_ds.read_table(p, iteration="shallow", readChunkBytes=4096, **opts)
        )
        == shallow
    )


# --- strategies ---------------------------------------------------------------------------------

_blob = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(min_size=1, max_size=40),
    st.binary(min_size=41, max_size=400),
)
_value = st.one_of(
    _blob,
    # occasionally larger than the smallest read window
    st.integers(3000, 9000).map(lambda n: bytes(range(256)) * (n // 256)),
)
_header_key = st.text(st.characters(blacklist_categories=["Cs"]), max_size=6)
_headers = st.lists(st.tuples(_header_key, _blob), max_size=3).map(tuple)
_timestamp = st.integers(1, 4 * 10**12)


@st.composite
def v2_entry(draw: st.DrawFn, offset: int) -> tuple[bytes, int]:
    """One magic-2 batch at ``offset``; returns (bytes, next free offset)."""
    leader_epoch = draw(st.integers(-1, 2**31 - 1))
    kind = draw(st.sampled_from(["data", "data", "data", "empty", "control"]))
    producer_id = draw(st.integers(0, 2**63 - 1))
    producer_epoch = draw(st.integers(0, 2**15 - 1))
    if kind == "control":
        batch = encode_control_batch(
            offset=offset,
            commit=draw(st.booleans()),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timestamp=draw(_timestamp),
            coordinator_epoch=draw(st.integers(0, 2**31 - 1)),
            leader_epoch=leader_epoch,
        )
        return batch, offset + 1
    if kind == "empty":  # what compaction leaves to keep producer state
        lod = draw(st.integers(0, 20))
        batch = encode_batch(
            [],
            base_offset=offset,
            last_offset_delta=lod,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=draw(st.integers(0, 1000)),
            leader_epoch=leader_epoch,
        )
        return batch, offset + lod + 1
    n = draw(st.integers(1, 8))
    no_timestamps = draw(st.booleans().map(lambda b: b and draw(st.booleans())))
    base_ts = -1 if no_timestamps else draw(_timestamp)
    deltas, specs, next_delta = [], [], 0
    for i in range(n):
        next_delta += draw(st.sampled_from([0, 0, 0, 1, 5]))  # compaction gaps
        deltas.append(next_delta)
        ts = base_ts if (i == 0 or no_timestamps) else base_ts + draw(st.integers(-(10**6), 10**6))
        specs.append(
            RecordSpec(
                value=draw(_value),
                key=draw(_blob),
                timestamp=ts,
                headers=draw(_headers),
                offset_delta=next_delta,
            )
        )
        next_delta += 1
    lod = deltas[-1] + draw(st.sampled_from([0, 0, 2]))
    log_append = draw(st.booleans())
    transactional = draw(st.booleans())
    idempotent = transactional or draw(st.booleans())
    batch = encode_batch(
        specs,
        base_offset=offset,
        compression=draw(st.sampled_from([0, 1, 2, 3, 4])),
        timestamp_type=1 if log_append else 0,
        log_append_time=draw(_timestamp) if log_append else None,
        producer_id=producer_id if idempotent else -1,
        producer_epoch=producer_epoch if idempotent else -1,
        base_sequence=draw(st.integers(0, 2**31 - 1)) if idempotent else -1,
        is_transactional=transactional,
        leader_epoch=leader_epoch,
        last_offset_delta=lod,
    )
    return batch, offset + lod + 1


@st.composite
def legacy_entry(draw: st.DrawFn, offset: int) -> tuple[bytes, int]:
    """A magic-0/1 message or compressed wrapper whose first offset is ``offset``."""
    magic = draw(st.sampled_from([0, 1]))
    log_append = magic == 1 and draw(st.booleans())
    ts = draw(st.one_of(st.just(-1), _timestamp)) if magic == 1 else -1
    codec = draw(st.sampled_from([0, 0, 1, 2, 3]))
    if codec == 0:
        message = encode_legacy_message(
            offset=offset,
            magic=magic,
            key=draw(_blob),
            value=draw(_value),
            timestamp=ts,
            attributes=0x08 if log_append else 0,
        )
        return message, offset + 1
    n = draw(st.integers(1, 5))
    specs = [
        RecordSpec(
            value=draw(_value), key=draw(_blob), timestamp=draw(_timestamp) if magic == 1 else -1
        )
        for _ in range(n)
    ]
    wrapper = encode_legacy_wrapper(
        specs,
        last_offset=offset + n - 1,
        magic=magic,
        compression=codec,
        timestamp_type=1 if log_append else 0,
        log_append_time=draw(_timestamp) if log_append else None,
    )
    return wrapper, offset + n


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    offset = draw(st.integers(0, 2**40))
    parts = []
    for _ in range(draw(st.integers(1, 10))):
        offset += draw(st.sampled_from([0, 0, 0, 3]))  # gaps between entries
        entry = legacy_entry(offset) if draw(st.integers(0, 3)) == 0 else v2_entry(offset)
        data, offset = draw(entry)
        parts.append(data)
    return b"".join(parts)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(log=logs())
def test_columnar_path_matches_reference_decoders(log: bytes, tmp_path: Path) -> None:
    _check(log, tmp_path)


# --- fixed logs (the same comparison on hand-picked cases) --------------------------------------


def _fixed_log() -> bytes:
    hdrs = (("h", b"1"), ("h", None), ("", b""), ("ключ", b"\x00"))
    recs = [
        RecordSpec(value=b"v0", key=b"k0", timestamp=TS, headers=hdrs, offset_delta=0),
        RecordSpec(value=None, key=None, timestamp=TS - 9, offset_delta=3),
        RecordSpec(value=b"", key=b"", timestamp=TS + 4, offset_delta=4),
    ]
    parts = [
        encode_legacy_message(offset=0, magic=0, key=b"a", value=b"b"),
        encode_legacy_wrapper(
            [RecordSpec(b"x"), RecordSpec(None, b"y")], last_offset=2, magic=0, compression=3
        ),
        encode_legacy_message(offset=3, magic=1, key=None, value=b"c", timestamp=TS - 1),
        encode_legacy_wrapper(
            [RecordSpec(b"p", timestamp=5), RecordSpec(b"q", timestamp=6)],
            last_offset=5,
            magic=1,
            compression=1,
            timestamp_type=1,
            log_append_time=TS,
        ),
    ]
    offset = 10
    for codec in range(5):
        parts.append(encode_batch(recs, base_offset=offset, compression=codec, last_offset_delta=6))
        offset += 7
    parts.append(
        encode_batch(
            recs,
            base_offset=offset,
            timestamp_type=1,
            log_append_time=TS,
            is_transactional=True,
            producer_id=9,
            producer_epoch=1,
            base_sequence=0,
            last_offset_delta=4,
        )
    )
    parts.append(
        encode_control_batch(
            offset=offset + 5, commit=False, producer_id=9, producer_epoch=1, timestamp=TS
        )
    )
    parts.append(encode_batch([], base_offset=offset + 6, last_offset_delta=2))
    parts.append(
        encode_batch(
            [RecordSpec(value=bytes(range(256)) * 40, timestamp=TS)], base_offset=offset + 9
        )
    )  # 10 KiB: larger than a 4 KiB window
    parts.append(
        encode_legacy_message(
            offset=offset + 10, magic=1, key=b"k", value=b"z" * 5000, timestamp=TS
        )
    )
    # -1 is "no timestamp" (null); other negative times are real (before 1970)
    parts.append(
        encode_batch(
            [
                RecordSpec(b"t0", timestamp=TS),
                RecordSpec(b"t1", timestamp=-1),
                RecordSpec(b"t2", timestamp=-7),
            ],
            base_offset=offset + 11,
        )
    )
    # a header key that is not UTF-8: decoded with replacement characters, like Java
    odd = bytearray(
        encode_batch(
            [RecordSpec(b"u", timestamp=TS, headers=(("KEY!", b"v"),))], base_offset=offset + 14
        )
    )
    at = odd.index(b"KEY!")
    odd[at : at + 4] = b"\xffE\xfe!"
    struct.pack_into(">I", odd, 17, crc32c.crc32c(bytes(odd[21:])))
    parts.append(bytes(odd))
    return b"".join(parts)


def test_fixed_mixed_log(tmp_path: Path) -> None:
    log = _fixed_log()
    _check(log, tmp_path)
    # and the reference walk itself is what was written
    offsets = [r["offset"] for r in reference_rows(log, "p", deep=True)]
    assert offsets == [
        0,
        1,
        2,
        3,
        4,
        5,
        *(o for b in (10, 17, 24, 31, 38) for o in (b, b + 3, b + 4)),
        45,
        48,
        49,
        54,
        55,
        56,
        57,
        58,
        59,
    ]
    rows = {r["offset"]: r for r in reference_rows(log, "p", deep=True)}
    assert [rows[o]["timestamp"] for o in (56, 57, 58)] == [TS * 1000, None, -7000]
    assert rows[59]["headers"] == [{"key": "\ufffdE\ufffd!", "value": b"v"}]


@pytest.mark.parametrize("chunk", [4096, 4096 + 61, 5000, 1 << 20])
def test_many_small_batches_across_window_boundaries(tmp_path: Path, chunk: int) -> None:
    parts = [
        encode_batch(
            [
                RecordSpec(
                    value=bytes([i % 256]) * (i % 97),
                    key=str(i).encode(),
                    timestamp=TS + i,
                    headers=(("i", str(i).encode()),),
                )
            ],
            base_offset=i,
            compression=i % 5,
        )
        for i in range(400)
    ]
    log = b"".join(parts)
    part = tmp_path / "t-0"
    part.mkdir()
    (part / SEGMENT).write_bytes(log)
    p = str(part / SEGMENT)
    table = kafka_segments_ds.read_table(
        p, readChunkBytes=chunk, includeHeaders=True, includeMetadata=True
    )
    assert table_rows(table) == reference_rows(log, p, deep=True)
    assert table.column("offset").to_pylist() == list(range(400))


# --- malformed records: both decoders must reject the same batches -----------------------------


def _entries(log: bytes) -> list[tuple[int, int]]:
    """(start, end) of every entry of a well-formed log."""
    spans, pos = [], 0
    while pos < len(log):
        end = pos + 12 + struct.unpack_from(">i", log, pos + 8)[0]
        spans.append((pos, end))
        pos = end
    return spans


_FIXED = _fixed_log()
_V2_SPANS = [(s, e) for s, e in _entries(_FIXED) if _FIXED[s + 16] == 2 and e - s > 61]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_malformed_records_are_rejected_like_the_reference(
    data: st.DataObject, tmp_path: Path
) -> None:
    """Damage the (decompressed) records of one batch, re-encode it with a valid CRC, and read:
    the columnar path must fail exactly when the reference decoder does, else agree row by row.
    """
    start, end = data.draw(st.sampled_from(_V2_SPANS))
    codec = _FIXED[start + 22] & 0x07
    records = bytearray(decompress(codec, _FIXED[start + 61 : end], magic=2))
    for _ in range(data.draw(st.integers(1, 3))):
        records[data.draw(st.integers(0, len(records) - 1))] = data.draw(st.integers(0, 255))
    body = compress(codec, bytes(records), magic=2)
    batch = bytearray(_FIXED[start : start + 61]) + body
    struct.pack_into(">i", batch, 8, 49 + len(body))
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    log = _FIXED[:start] + bytes(batch) + _FIXED[end:]
    part = tmp_path / f"{TOPIC}-{PARTITION}"
    part.mkdir(exist_ok=True)
    path = part / SEGMENT
    path.write_bytes(log)
    try:
        expected: list[dict[str, Any]] | None = reference_rows(log, str(path), deep=True)
    except CorruptSegmentError:
        expected = None
    if expected is None:
        with pytest.raises(CorruptSegmentError) as info:
            kafka_segments_ds.read_table(str(path), includeHeaders=True)
        assert (info.value.path, info.value.position) == (str(path), start)
    else:
        table = kafka_segments_ds.read_table(str(path), includeHeaders=True, includeMetadata=True)
        assert table_rows(table) == expected
