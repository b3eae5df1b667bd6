"""index.rebuild_indexes: .index/.timeindex from a .log, as a broker's recovery writes them."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow.fs as pafs
import pytest

from kafka_segments_ds import index as kidx
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.records.batches import EntryTable
from kafka_segments_ds.records.builder import (
    RecordSpec,
    encode_batch,
    encode_legacy_message,
    encode_legacy_wrapper,
)
from kafka_segments_ds.records.compression import CompressionType

BASE = 1000


def _log() -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """Entries of ~300 bytes (magic 0, 1 and 2) with (position, size, last offset, max ts)."""
    entries = []
    offset = BASE
    ts = 5_000
    for i in range(12):
        if i < 3:
            blob = encode_legacy_message(offset=offset, magic=0, key=None, value=b"x" * 280)
            last, max_ts = offset, -1
        elif i < 6:
            specs = [RecordSpec(value=b"y" * 90, timestamp=ts + k) for k in range(3)]
            blob = encode_legacy_wrapper(
                specs, last_offset=offset + 2, magic=1, compression=CompressionType.GZIP
            )
            last, max_ts = offset + 2, ts + 2
        else:
            # CreateTime timestamps that go down once: the running max must not
            stamps = [ts + 10, ts - 50, ts + 3]
            specs = [RecordSpec(value=b"z" * 80, timestamp=t) for t in stamps]
            blob = encode_batch(specs, base_offset=offset)
            last, max_ts = offset + 2, ts + 10
        entries.append((blob, last, max_ts))
        offset = last + 1
        ts += 100
    data = b""
    facts = []
    for blob, last, max_ts in entries:
        facts.append((len(data), len(blob), last, max_ts))
        data += blob
    return data, facts


def _expected(facts: list[tuple[int, int, int, int]], interval: int) -> tuple[bytes, bytes]:
    offset_entries = []
    time_entries = []
    last_entry = 0
    max_ts, max_ts_offset = -1, BASE
    last_time = -1
    for position, size, last, batch_max in facts:
        if batch_max > max_ts:
            max_ts, max_ts_offset = batch_max, last
        if position - last_entry > interval:
            offset_entries.append(struct.pack(">ii", last - BASE, position))
            if max_ts > last_time:
                time_entries.append(struct.pack(">qi", max_ts, max_ts_offset - BASE))
                last_time = max_ts
            last_entry = position
        del size
    if max_ts > last_time:
        time_entries.append(struct.pack(">qi", max_ts, max_ts_offset - BASE))
    return b"".join(offset_entries), b"".join(time_entries)


@pytest.mark.parametrize("interval", [0, 500, 1000, 4096, 10**6])
def test_rebuild_matches_the_broker_rules(interval: int) -> None:
    data, facts = _log()
    offset_index, time_index = kidx.rebuild_indexes(data, BASE, interval)
    assert (offset_index, time_index) == _expected(facts, interval)
    if interval == 0:
        # every entry after the first is indexed; the first (position 0) never is
        assert len(offset_index) == 8 * (len(facts) - 1)
    parsed = kidx.parse_offset_index(offset_index, BASE, len(data))
    positions = {f[0] for f in facts}
    assert set(parsed.positions.tolist()) <= positions


def test_rebuild_refuses_a_log_it_cannot_frame() -> None:
    data, _ = _log()
    with pytest.raises(CorruptSegmentError, match="byte position"):
        kidx.rebuild_indexes(data[:-5], BASE)


def test_valid_prefix_stops_where_a_brokers_recovery_truncates(tmp_path: Path) -> None:
    from kafka_segments_ds.cli.log_scan import scan_log
    from kafka_segments_ds.cli.rebuild_index import valid_prefix as of_scan
    from kafka_segments_ds.layout import SegmentRef

    def valid_prefix(log: bytes) -> tuple[EntryTable, int, str | None]:
        """The command's answer for ``log``, walked in windows smaller than most entries."""
        path = tmp_path / f"{len(log):020d}.log"
        path.write_bytes(log)
        segment = SegmentRef(str(path), BASE, len(log), None, None, None)
        return of_scan(scan_log(pafs.LocalFileSystem(), segment, str(path), 97, checksums=True))

    data, facts = _log()
    table, end, why = valid_prefix(data)
    assert (len(table.positions), end, why) == (12, len(data), None)
    # a CRC error in entry 7: recovery keeps entries 0..6
    position = facts[7][0]
    damaged = bytearray(data)
    damaged[position + 70] ^= 0x01
    table, end, why = valid_prefix(bytes(damaged))
    assert (len(table.positions), end) == (7, position)
    assert why == f"the entry at byte position {position} fails its CRC"
    assert table.last_offsets.tolist() == [f[2] for f in facts[:7]]
    # a cut-off tail; a zero-filled (preallocated) tail
    table, end, why = valid_prefix(data[:-10])
    assert (len(table.positions), end) == (11, facts[11][0])
    assert why == f"no whole entry at byte position {facts[11][0]}"
    table, end, why = valid_prefix(data + bytes(100))
    assert (len(table.positions), end, why) == (12, len(data), "zero-filled tail")


def test_rebuild_reads_the_log_as_it_is_now_not_as_listed(tmp_path: Path) -> None:
    """A .log that grew after the partition was listed (an entry straddling the listed size) is
    judged as it is now: nothing to cut, every entry indexed."""
    from kafka_segments_ds.cli.common import EXIT_OK
    from kafka_segments_ds.cli.rebuild_index import rebuild_segment
    from kafka_segments_ds.layout import SegmentRef

    data, facts = _log()
    path = tmp_path / f"{BASE:020d}.log"
    path.write_bytes(data)
    listed = facts[5][0] + 20  # inside entry 5
    segment = SegmentRef(str(path), BASE, listed, None, None, None)
    lines, status = rebuild_segment(pafs.LocalFileSystem(), segment, 0, True, True)
    offset_index, time_index = _expected(facts, 0)  # every entry's, as the whole file has them
    name = tmp_path / f"{BASE:020d}"
    assert status == EXIT_OK
    assert lines == [
        f"would write {name}.index: missing -> {len(offset_index) // 8} entries",
        f"would write {name}.timeindex: missing -> {len(time_index) // 12} entries",
    ]
    assert len(offset_index) // 8 == len(facts) - 1
    assert path.read_bytes() == data


@pytest.mark.parametrize("window", [97, 4 << 20])
def test_the_scan_finds_every_entry_failing_its_checksum(tmp_path: Path, window: int) -> None:
    """Magic 0, 1 (wrappers) and 2 entries, damaged in their bodies or their stored CRCs: the
    scan lists exactly the entries ``has_valid_checksum`` fails, whatever the window."""
    from kafka_segments_ds.cli.log_scan import scan_log
    from kafka_segments_ds.layout import SegmentRef
    from kafka_segments_ds.records.batches import has_valid_checksum

    data, facts = _log()
    damaged = bytearray(data)
    for entry, at in ((0, 200), (2, 12), (4, 15), (5, 40), (7, 17), (9, 100), (11, 20)):
        damaged[facts[entry][0] + at] ^= 0x10  # body bytes, or a byte of the stored CRC
    path = tmp_path / f"{BASE:020d}.log"
    path.write_bytes(bytes(damaged))
    segment = SegmentRef(str(path), BASE, len(damaged), None, None, None)
    scan = scan_log(pafs.LocalFileSystem(), segment, str(path), window, checksums=True)
    whole = np.frombuffer(bytes(damaged), np.uint8)
    expected = [p for p, size, _, _ in facts if not has_valid_checksum(whole[p : p + size])]
    assert len(expected) == 7
    assert scan.bad_checksums == expected
    clean = scan_log(pafs.LocalFileSystem(), segment, str(path), window, checksums=False)
    assert clean.bad_checksums is None
