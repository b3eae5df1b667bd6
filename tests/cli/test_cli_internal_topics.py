"""DumpLogSegments parity: __remote_log_metadata, __share_group_state, KRaft .checkpoint
snapshots, and every KRaft metadata record type with the versions Kafka defines.

Bytes are built field by field from Kafka's JSON message definitions (flexible encoding: compact
strings/arrays, a tagged-field section closing every struct), never copied from Kafka's tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kafka_segments_ds.cli import main
from kafka_segments_ds.internal_topics import decoder_for
from kafka_segments_ds.internal_topics.cluster_metadata import decode_cluster_metadata
from kafka_segments_ds.internal_topics.control_schemas import CONTROL_SCHEMAS
from kafka_segments_ds.internal_topics.kraft_snapshot import decode_control_record
from kafka_segments_ds.internal_topics.metadata_schemas import SCHEMAS
from kafka_segments_ds.internal_topics.remote_log_metadata import decode_remote_log_metadata
from kafka_segments_ds.internal_topics.share_group_state import decode_share_group_state
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.samples import PartitionWriter
from tests.support.protocol import (
    UUID_A,
    UUID_A_TEXT,
    UUID_B,
    UUID_B_TEXT,
    b64,
    carr,
    cb,
    cs,
    i8,
    i16,
    i32,
    i64,
    s,
    tags,
    uv,
)

T0 = 1_700_000_000_000

# apache/kafka metadata/src/main/resources/common/metadata/*.json at 1eb7644 (2024-10-25):
# apiKey -> (name, validVersions)
KAFKA_METADATA_RECORDS = {
    0: ("RegisterBrokerRecord", (0, 3)),
    1: ("UnregisterBrokerRecord", (0, 0)),
    2: ("TopicRecord", (0, 0)),
    3: ("PartitionRecord", (0, 2)),
    4: ("ConfigRecord", (0, 0)),
    5: ("PartitionChangeRecord", (0, 2)),
    7: ("FenceBrokerRecord", (0, 0)),
    8: ("UnfenceBrokerRecord", (0, 0)),
    9: ("RemoveTopicRecord", (0, 0)),
    10: ("DelegationTokenRecord", (0, 0)),
    11: ("UserScramCredentialRecord", (0, 0)),
    12: ("FeatureLevelRecord", (0, 0)),
    14: ("ClientQuotaRecord", (0, 0)),
    15: ("ProducerIdsRecord", (0, 0)),
    17: ("BrokerRegistrationChangeRecord", (0, 2)),
    18: ("AccessControlEntryRecord", (0, 0)),
    19: ("RemoveAccessControlEntryRecord", (0, 0)),
    20: ("NoOpRecord", (0, 0)),
    21: ("ZkMigrationStateRecord", (0, 0)),
    22: ("RemoveUserScramCredentialRecord", (0, 0)),
    23: ("BeginTransactionRecord", (0, 0)),
    24: ("EndTransactionRecord", (0, 0)),
    25: ("AbortTransactionRecord", (0, 0)),
    26: ("RemoveDelegationTokenRecord", (0, 0)),
    27: ("RegisterControllerRecord", (0, 0)),
    # ClearElrRecord.json (apiKey 28, Kafka 4.0+; a 4.1 broker writes it: tests/broker)
    28: ("ClearElrRecord", (0, 0)),
}


def frame(api_key: int, version: int, body: bytes) -> bytes:
    return uv(1) + uv(api_key) + uv(version) + body


def test_every_metadata_record_type_with_kafkas_versions() -> None:
    assert {k: (m.name, m.valid) for k, m in SCHEMAS.items()} == KAFKA_METADATA_RECORDS
    assert all(m.flexible_from == 0 for m in SCHEMAS.values())
    assert {k: (m.name, m.valid) for k, m in CONTROL_SCHEMAS.items()} == {
        2: ("LeaderChangeMessage", (0, 1)),
        3: ("SnapshotHeaderRecord", (0, 0)),
        4: ("SnapshotFooterRecord", (0, 0)),
        5: ("KRaftVersionRecord", (0, 0)),
        6: ("VotersRecord", (0, 0)),
    }


@pytest.mark.parametrize(
    ("api_key", "version", "body", "name", "data"),
    [
        (7, 0, i32(1) + i64(2) + tags(), "FenceBrokerRecord", {"id": 1, "epoch": 2}),
        (
            17,
            2,
            i32(4) + i64(9) + tags((0, i8(1)), (1, i8(0)), (2, carr([UUID_A]))),
            "BrokerRegistrationChangeRecord",
            {
                "broker_id": 4,
                "broker_epoch": 9,
                "fenced": 1,
                "in_controlled_shutdown": 0,
                "log_dirs": [UUID_A_TEXT],
            },
        ),
        (
            21,
            0,
            i8(3) + tags(),
            "ZkMigrationStateRecord",
            {"zk_migration_state": 3},
        ),
        (
            14,
            0,
            carr([cs("user") + cs("alice") + tags()])
            + cs("producer_byte_rate")
            + b"\x40\x59"
            + bytes(6)
            + i8(0)
            + tags(),
            "ClientQuotaRecord",
            {
                "entity": [{"entity_type": "user", "entity_name": "alice"}],
                "key": "producer_byte_rate",
                "value": 100.0,
                "remove": False,
            },
        ),
    ],
)
def test_metadata_records_formerly_shown_raw(
    api_key: int, version: int, body: bytes, name: str, data: dict
) -> None:
    _, decoded = decode_cluster_metadata(None, frame(api_key, version, body))
    assert decoded == {"type": name, "api_key": api_key, "version": version, "data": data}


# -- __remote_log_metadata ---------------------------------------------------------------------


def topic_id_partition(name: str, partition: int) -> bytes:
    return cs(name) + UUID_A + i32(partition) + tags()


SEGMENT_ID = topic_id_partition("orders", 3) + UUID_B + tags()
SEGMENT_ID_DATA = {
    "topic_id_partition": {"name": "orders", "id": UUID_A_TEXT, "partition": 3},
    "id": UUID_B_TEXT,
}


@pytest.mark.parametrize(
    ("version", "tagged", "expected_tags"),
    [
        # as a Kafka 4.1 broker writes it: TxnIndexEmpty (tag 0) set
        (0, tags((0, b"\x01")), {"txn_index_empty": True}),
        (0, tags(), {"txn_index_empty": False}),
        # version 1 adds BrokerLeaderEpoch (tag 1)
        (1, tags((0, b"\x00"), (1, i32(5))), {"txn_index_empty": False, "broker_leader_epoch": 5}),
    ],
)
def test_remote_log_segment_metadata_record(
    version: int, tagged: bytes, expected_tags: dict[str, object]
) -> None:
    body = (
        SEGMENT_ID
        + i64(100)  # start offset
        + i64(199)  # end offset
        + i32(2)  # broker id
        + i64(T0 + 5)  # max timestamp
        + i64(T0 + 9)  # event timestamp
        + carr([i32(7) + i64(100) + tags(), i32(8) + i64(150) + tags()])
        + i32(4096)  # segment size
        + cb(b"\x01\x02")  # custom metadata
        + i8(1)  # COPY_SEGMENT_FINISHED
        + tagged
    )
    key, value = decode_remote_log_metadata(None, frame(0, version, body))
    assert key is None
    assert value == {
        "type": "RemoteLogSegmentMetadataRecord",
        "api_key": 0,
        "version": version,
        "data": {
            "remote_log_segment_id": SEGMENT_ID_DATA,
            "start_offset": 100,
            "end_offset": 199,
            "broker_id": 2,
            "max_timestamp_ms": T0 + 5,
            "event_timestamp_ms": T0 + 9,
            "segment_leader_epochs": [
                {"leader_epoch": 7, "offset": 100},
                {"leader_epoch": 8, "offset": 150},
            ],
            "segment_size_in_bytes": 4096,
            "custom_metadata": b64(b"\x01\x02"),
            "remote_log_segment_state": 1,
            **expected_tags,
        },
    }


@pytest.mark.parametrize(
    ("api_key", "body", "name", "data"),
    [
        (
            1,
            SEGMENT_ID + i32(2) + i64(T0) + uv(0) + i8(3) + tags(),
            "RemoteLogSegmentMetadataUpdateRecord",
            {
                "remote_log_segment_id": SEGMENT_ID_DATA,
                "broker_id": 2,
                "event_timestamp_ms": T0,
                "custom_metadata": None,
                "remote_log_segment_state": 3,
            },
        ),
        (
            2,
            topic_id_partition("orders", 3) + i32(2) + i64(T0) + i8(2) + tags(),
            "RemotePartitionDeleteMetadataRecord",
            {
                "topic_id_partition": {"name": "orders", "id": UUID_A_TEXT, "partition": 3},
                "broker_id": 2,
                "event_timestamp_ms": T0,
                "remote_partition_delete_state": 2,
            },
        ),
        (
            3,
            UUID_B
            + i64(0)
            + i64(9)
            + i32(1)
            + i64(T0)
            + i64(T0 + 1)
            + carr([])
            + i32(10)
            + uv(0)
            + i8(0)
            + tags(),
            "RemoteLogSegmentMetadataSnapshotRecord",
            {
                "segment_id": UUID_B_TEXT,
                "start_offset": 0,
                "end_offset": 9,
                "broker_id": 1,
                "max_timestamp_ms": T0,
                "event_timestamp_ms": T0 + 1,
                "segment_leader_epochs": [],
                "segment_size_in_bytes": 10,
                "custom_metadata": None,
                "remote_log_segment_state": 0,
                "txn_index_empty": False,  # tag 0 absent: its default
            },
        ),
    ],
)
def test_other_remote_log_metadata_records(
    api_key: int, body: bytes, name: str, data: dict
) -> None:
    _, value = decode_remote_log_metadata(None, frame(api_key, 0, body))
    assert value == {"type": name, "api_key": api_key, "version": 0, "data": data}


def test_remote_log_metadata_unknown_type_is_shown_raw() -> None:
    raw = frame(9, 0, b"\x00")
    _, value = decode_remote_log_metadata(None, raw)
    assert value == {
        "type": "unknown",
        "api_key": 9,
        "version": 0,
        "data": None,
        "undecoded": "record type 9 is not decoded by this version of kafka-segments",
        "raw": b64(raw),
    }


# -- __share_group_state -----------------------------------------------------------------------


def share_key(record_type: int) -> bytes:
    return i16(record_type) + s("grp") + UUID_A + i32(5)


STATE_BATCH = i64(10) + i64(19) + i8(2) + i16(1) + tags()
STATE_BATCH_DATA = {"first_offset": 10, "last_offset": 19, "delivery_state": 2, "delivery_count": 1}
KEY_DATA = {"group_id": "grp", "topic_id": UUID_A_TEXT, "partition": 5}


def test_share_snapshot_and_update() -> None:
    snapshot_value = i16(0) + i16(3) + i32(4) + i32(6) + i64(10) + carr([STATE_BATCH]) + tags()
    key, value = decode_share_group_state(share_key(0), snapshot_value)
    assert key == {"type": "share_snapshot", "version": 0, "data": KEY_DATA}
    assert value == {
        "type": "share_snapshot",
        "version": 0,
        "data": {
            "snapshot_epoch": 3,
            "state_epoch": 4,
            "leader_epoch": 6,
            "start_offset": 10,
            "state_batches": [STATE_BATCH_DATA],
        },
    }
    update_value = i16(0) + i16(3) + i32(6) + i64(-1) + carr([STATE_BATCH]) + tags()
    key, value = decode_share_group_state(share_key(1), update_value)
    assert key == {"type": "share_update", "version": 1, "data": KEY_DATA}
    assert value == {
        "type": "share_update",
        "version": 0,
        "data": {
            "snapshot_epoch": 3,
            "leader_epoch": 6,
            "start_offset": -1,
            "state_batches": [STATE_BATCH_DATA],
        },
    }
    key, value = decode_share_group_state(share_key(0), None)  # a tombstone
    assert value is None and key is not None and key["data"] == KEY_DATA


def test_dump_picks_the_new_decoders_by_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert decoder_for("auto", "__share_group_state") is decode_share_group_state
    assert decoder_for("auto", "__remote_log_metadata") is decode_remote_log_metadata
    part = tmp_path / "__share_group_state-0"
    writer = PartitionWriter(part)
    writer.append(
        encode_batch([RecordSpec(key=share_key(0), value=None, timestamp=T0)], base_offset=0), 0
    )
    writer.roll()
    assert main(["dump", str(part)]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["key"] == {"type": "share_snapshot", "version": 0, "data": KEY_DATA}
    assert row["value"] is None


# -- KRaft .checkpoint snapshots ---------------------------------------------------------------

HEADER = encode_batch(
    [RecordSpec(key=i16(0) + i16(3), value=i16(0) + i64(T0) + tags(), timestamp=T0)],
    base_offset=0,
    is_control=True,
)
VOTERS = encode_batch(
    [
        RecordSpec(key=i16(0) + i16(5), value=i16(0) + i16(1) + tags(), timestamp=T0),
        RecordSpec(
            key=i16(0) + i16(6),
            value=i16(0)
            + carr(
                [
                    i32(1)
                    + UUID_B
                    + carr([cs("CONTROLLER") + cs("h1") + b"\x23\x8d" + tags()])
                    + i16(0)
                    + i16(1)
                    + tags()
                    + tags()
                ]
            )
            + tags(),
            timestamp=T0,
        ),
    ],
    base_offset=1,
    is_control=True,
)
METADATA = encode_batch(
    [
        RecordSpec(
            key=None, value=frame(12, 0, cs("metadata.version") + i16(21) + tags()), timestamp=T0
        ),
        RecordSpec(key=None, value=frame(2, 0, cs("orders") + UUID_A + tags()), timestamp=T0),
    ],
    base_offset=3,
)
FOOTER = encode_batch(
    [RecordSpec(key=i16(0) + i16(4), value=i16(0) + tags(), timestamp=T0)],
    base_offset=5,
    is_control=True,
)
NAME = "00000000000000000006-0000000002.checkpoint"


def test_dump_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / NAME
    path.write_bytes(HEADER + VOTERS + METADATA + FOOTER)
    status = main(["dump", str(path)])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    assert [(r.get("offset"), r.get("key") and r["key"].get("type")) for r in rows] == [
        (0, "SNAPSHOT_HEADER"),
        (1, "KRAFT_VERSION"),
        (2, "KRAFT_VOTERS"),
        (3, None),
        (4, None),
        (5, "SNAPSHOT_FOOTER"),
        (None, None),
    ]
    assert rows[0]["value"] == {
        "type": "SnapshotHeaderRecord",
        "version": 0,
        "data": {"version": 0, "last_contained_log_timestamp": T0},
    }
    assert rows[1]["value"]["data"] == {"version": 0, "kraft_version": 1}
    assert rows[2]["value"]["data"] == {
        "version": 0,
        "voters": [
            {
                "voter_id": 1,
                "voter_directory_id": UUID_B_TEXT,
                "endpoints": [{"name": "CONTROLLER", "host": "h1", "port": 9101}],
                "kraft_version_feature": {"min_supported_version": 0, "max_supported_version": 1},
            }
        ],
    }
    assert rows[3]["value"]["data"] == {"name": "metadata.version", "feature_level": 21}
    assert rows[4]["value"]["data"] == {"name": "orders", "topic_id": UUID_A_TEXT}
    assert rows[5]["value"]["data"] == {"version": 0}
    assert rows[6] == {
        "summary": {
            "file": str(path),
            "end_offset": 6,
            "epoch": 2,
            "batches": 4,
            "records": 6,
            "metadata_records": 2,
            "problem": None,
        }
    }


def test_checkpoint_without_footer_and_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / NAME
    path.write_bytes(HEADER + METADATA)
    assert main(["dump", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])["summary"]
    assert summary["problem"] == "the last record is not a SNAPSHOT_FOOTER (an unfinished snapshot)"
    data = bytearray(HEADER + METADATA + FOOTER)
    data[len(HEADER) + 70] ^= 0x01
    path.write_bytes(bytes(data))
    assert main(["dump", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == (
        "kafka-segments: error: snapshot batch fails its CRC-32C "
        f"(file {path}, byte position {len(HEADER)})\n"
    )


def test_leader_change_control_record() -> None:
    voter = i32(3) + tags()
    value = i16(0) + i32(3) + carr([voter]) + carr([voter]) + tags()
    key, decoded = decode_control_record(i16(0) + i16(2), value)
    assert key == {"type": "LEADER_CHANGE", "control_type": 2, "version": 0}
    assert decoded == {
        "type": "LeaderChangeMessage",
        "version": 0,
        "data": {
            "version": 0,
            "leader_id": 3,
            "voters": [{"voter_id": 3}],
            "granting_voters": [{"voter_id": 3}],
        },
    }
