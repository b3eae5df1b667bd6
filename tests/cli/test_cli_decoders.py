"""Decoders for __consumer_offsets, __transaction_state and __cluster_metadata records.

Every key and value here is assembled byte by byte by the small encoder below (written from the
message schemas, independently of the decoders), and a few are pinned as hex literals.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kafka_segments_ds.cli import main
from kafka_segments_ds.errors import CorruptSegmentError
from kafka_segments_ds.internal_topics import decoder_for
from kafka_segments_ds.internal_topics.cluster_metadata import decode_cluster_metadata
from kafka_segments_ds.internal_topics.consumer_offsets import decode_consumer_offsets
from kafka_segments_ds.internal_topics.transaction_state import decode_transaction_state
from kafka_segments_ds.records.builder import RecordSpec, encode_batch
from kafka_segments_ds.samples import PartitionWriter
from tests.support.protocol import (
    UUID_A,
    UUID_A_TEXT,
    UUID_B,
    UUID_B_TEXT,
    arr,
    b,
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

# -- __consumer_offsets ------------------------------------------------------------------------


def offset_key(version: int, group: str = "grp", topic: str = "orders", partition: int = 3):
    return i16(version) + s(group) + s(topic) + i32(partition)


def test_offset_commit_key_pinned_bytes() -> None:
    key = bytes.fromhex("000100016700017400000003")
    assert offset_key(1, "g", "t", 3) == key
    decoded_key, decoded_value = decode_consumer_offsets(key, None)
    assert decoded_key == {
        "type": "offset_commit",
        "version": 1,
        "data": {"group": "g", "topic": "t", "partition": 3},
    }
    assert decoded_value is None  # a tombstone: the committed offset was deleted


COMMON = {"offset": 1234, "metadata": "m€ta", "commit_timestamp": 1_700_000_000_001}


@pytest.mark.parametrize(
    ("version", "body", "data"),
    [
        (0, i64(1234) + s("m€ta") + i64(1_700_000_000_001), COMMON),
        (
            1,
            i64(1234) + s("m€ta") + i64(1_700_000_000_001) + i64(1_700_086_400_001),
            {**COMMON, "expire_timestamp": 1_700_086_400_001},
        ),
        (2, i64(1234) + s("m€ta") + i64(1_700_000_000_001), COMMON),
        (
            3,
            i64(1234) + i32(7) + s("m€ta") + i64(1_700_000_000_001),
            {
                "offset": 1234,
                "leader_epoch": 7,
                "metadata": "m€ta",
                "commit_timestamp": COMMON["commit_timestamp"],
            },
        ),
        (
            4,
            i64(1234) + i32(-1) + cs("m€ta") + i64(1_700_000_000_001) + tags(),
            {
                "offset": 1234,
                "leader_epoch": -1,
                "metadata": "m€ta",
                "commit_timestamp": COMMON["commit_timestamp"],
            },
        ),
    ],
)
@pytest.mark.parametrize("key_version", [0, 1])
def test_offset_commit_values(key_version: int, version: int, body: bytes, data: dict) -> None:
    key, value = decode_consumer_offsets(offset_key(key_version), i16(version) + body)
    assert key == {
        "type": "offset_commit",
        "version": key_version,
        "data": {"group": "grp", "topic": "orders", "partition": 3},
    }
    assert value == {"type": "offset_commit", "version": version, "data": data}


def test_offset_commit_value_v4_unknown_tag_kept() -> None:
    body = i64(5) + i32(2) + cs("") + i64(9) + tags((7, b"\x01\x02"))
    _, value = decode_consumer_offsets(offset_key(1), i16(4) + body)
    assert value is not None
    assert value["data"] == {
        "offset": 5,
        "leader_epoch": 2,
        "metadata": "",
        "commit_timestamp": 9,
        "_unknown_tagged_fields": [{"tag": 7, "data": "0102"}],
    }


SUBSCRIPTION_V1 = (
    i16(1)
    + arr([s("orders"), s("payments")])
    + b(b"\x00\x01ud")
    + arr([s("orders") + arr([i32(0), i32(2)])])
)
ASSIGNMENT_V0 = (
    i16(0) + arr([s("orders") + arr([i32(0), i32(2)]), s("payments") + arr([])]) + b(None)
)


def member(version: int, flexible: bool = False) -> bytes:
    string, nbytes = (cs, cb) if flexible else (s, b)
    out = string("member-1")
    if version >= 3:
        out += string(None) if not flexible else cs("static-1")
    out += string("client-a") + string("/10.0.0.7")
    if version >= 1:
        out += i32(300_000)
    out += i32(45_000) + nbytes(SUBSCRIPTION_V1) + nbytes(ASSIGNMENT_V0)
    return out + (tags() if flexible else b"")


MEMBER_DATA = {
    "member_id": "member-1",
    "client_id": "client-a",
    "client_host": "/10.0.0.7",
    "session_timeout": 45_000,
    "subscription": {
        "type": "subscription",
        "version": 1,
        "data": {
            "topics": ["orders", "payments"],
            "user_data": b64(b"\x00\x01ud"),
            "owned_partitions": [{"topic": "orders", "partitions": [0, 2]}],
        },
    },
    "assignment": {
        "type": "assignment",
        "version": 0,
        "data": {
            "assigned_partitions": [
                {"topic": "orders", "partitions": [0, 2]},
                {"topic": "payments", "partitions": []},
            ],
            "user_data": None,
        },
    },
}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata(version: int) -> None:
    flexible = version >= 4
    string = cs if flexible else s
    body = string("consumer") + i32(12) + string("range") + string("member-1")
    if version >= 2:
        body += i64(1_700_000_000_500)
    body += (carr if flexible else arr)([member(version, flexible)])
    body += tags() if flexible else b""
    key, value = decode_consumer_offsets(i16(2) + s("grp"), i16(version) + body)
    assert key == {"type": "group_metadata", "version": 2, "data": {"group": "grp"}}
    expected_member = dict(MEMBER_DATA)
    if version >= 1:
        expected_member["rebalance_timeout"] = 300_000
    if version >= 3:
        expected_member["group_instance_id"] = "static-1" if flexible else None
    data = {
        "protocol_type": "consumer",
        "generation": 12,
        "protocol": "range",
        "leader": "member-1",
        "members": [expected_member],
    }
    if version >= 2:
        data["current_state_timestamp"] = 1_700_000_000_500
    assert value == {"type": "group_metadata", "version": version, "data": data}


def test_group_metadata_other_protocol_and_empty_group() -> None:
    # a Connect group: member subscription/assignment bytes are not the consumer protocol
    body = s("connect") + i32(3) + s(None) + s(None) + arr([])
    _, value = decode_consumer_offsets(i16(2) + s("connect-cluster"), i16(0) + body)
    assert value is not None
    assert value["data"] == {
        "protocol_type": "connect",
        "generation": 3,
        "protocol": None,
        "leader": None,
        "members": [],
    }
    raw_member = s("w1") + s("c") + s("h") + i32(10) + b(b"\x00\x00\xff") + b(b"")
    body = s("connect") + i32(3) + s("sessioned") + s("w1") + arr([raw_member])
    _, value = decode_consumer_offsets(i16(2) + s("g"), i16(0) + body)
    assert value is not None
    assert value["data"]["members"][0]["subscription"] == b64(b"\x00\x00\xff")
    assert value["data"]["members"][0]["assignment"] == ""


def test_unknown_record_types_and_versions() -> None:
    # key version 3+ belongs to record types this package does not decode
    key = i16(3) + s("grp")
    decoded_key, decoded_value = decode_consumer_offsets(key, i16(0) + b"\x01\x02")
    assert decoded_key == {
        "type": "unknown",
        "version": 3,
        "data": None,
        "undecoded": "unknown key version 3",
        "raw": b64(key),
    }
    assert decoded_value is not None
    assert (decoded_value["version"], decoded_value["raw"]) == (0, b64(i16(0) + b"\x01\x02"))
    # a value version newer than known is shown raw, not failed
    _, value = decode_consumer_offsets(offset_key(1), i16(5) + i64(1))
    assert value == {
        "type": "offset_commit",
        "version": 5,
        "data": None,
        "undecoded": "OffsetCommitValue version 5 is not 0..4",
        "raw": b64(i16(5) + i64(1)),
    }


@pytest.mark.parametrize(
    ("key", "value", "message", "position"),
    [
        (offset_key(1)[:-2], None, "OffsetCommitKey v1: field partition needs 4 bytes, 2 left", 15),
        (b"\x00", None, "__consumer_offsets key is 1 bytes, shorter than its 2-byte version", 0),
        (i16(1) + i16(300) + b"g", None, "field group: length 300 runs past the end (1 left)", 2),
        (i16(1) + i16(-2), None, "field group: negative length -2", 2),
        (i16(2) + s(None), None, "field group is null but not nullable", 2),
        (i16(2) + i16(2) + b"\xff\xfe", None, "field group is not UTF-8", 2),
        # an array count far beyond the bytes left is refused before anything is allocated
        (
            i16(2) + s("g"),
            i16(0) + s("c") + i32(1) + s(None) + s(None) + i32(2**31 - 1),
            "field members: length 2147483647 runs past the end (0 left)",
            13,
        ),
        (
            offset_key(1),
            i16(4) + i64(1) + i32(0) + b"\xff\xff\xff\xff\xff\x01",
            "field metadata: varint longer than 5 bytes",
            14,
        ),
        (
            offset_key(1),
            i16(4) + i64(1) + i32(0) + cs("") + i64(2) + tags((1, b"")) + b"",
            None,
            None,
        ),
    ],
)
def test_damaged_records_raise(
    key: bytes, value: bytes | None, message: str | None, position: int | None
) -> None:
    if message is None:
        decode_consumer_offsets(key, value)  # the control case: this one is well formed
        return
    with pytest.raises(CorruptSegmentError) as info:
        decode_consumer_offsets(key, value)
    assert message in info.value.reason
    assert info.value.position == position


def test_trailing_bytes_reported() -> None:
    _, value = decode_consumer_offsets(offset_key(1), i16(0) + i64(1) + s("") + i64(2) + b"xyz")
    assert value is not None
    assert value["data"] == {
        "offset": 1,
        "metadata": "",
        "commit_timestamp": 2,
        "_trailing_bytes": 3,
    }


# -- __transaction_state -----------------------------------------------------------------------


TXN_PARTITIONS = [s("orders") + arr([i32(0), i32(1)]), s("payments") + arr([i32(4)])]


def test_transaction_log_v0() -> None:
    key = i16(0) + s("tx-1")
    body = (
        i64(4242)
        + i16(5)
        + i32(60_000)
        + i8(1)
        + arr(TXN_PARTITIONS)
        + i64(1_700_000_000_900)
        + i64(1_700_000_000_100)
    )
    decoded_key, value = decode_transaction_state(key, i16(0) + body)
    assert decoded_key == {
        "type": "transaction",
        "version": 0,
        "data": {"transactional_id": "tx-1"},
    }
    assert value == {
        "type": "transaction",
        "version": 0,
        "data": {
            "producer_id": 4242,
            "producer_epoch": 5,
            "transaction_timeout_ms": 60_000,
            "transaction_status": 1,
            "transaction_partitions": [
                {"topic": "orders", "partition_ids": [0, 1]},
                {"topic": "payments", "partition_ids": [4]},
            ],
            "transaction_last_update_timestamp_ms": 1_700_000_000_900,
            "transaction_start_timestamp_ms": 1_700_000_000_100,
            "transaction_state": "Ongoing",
        },
    }


@pytest.mark.parametrize(
    ("tagged", "expected"),
    [
        (
            tags(),
            {"previous_producer_id": -1, "next_producer_id": -1, "client_transaction_version": 0},
        ),
        (
            tags((0, i64(4000)), (1, i64(4243)), (2, i16(2)), (9, b"\xaa")),
            {
                "previous_producer_id": 4000,
                "next_producer_id": 4243,
                "client_transaction_version": 2,
                "_unknown_tagged_fields": [{"tag": 9, "data": "aa"}],
            },
        ),
    ],
)
def test_transaction_log_v1_flexible(tagged: bytes, expected: dict) -> None:
    body = (
        i64(4242)
        + i16(5)
        + i32(60_000)
        + i8(5)
        + uv(0)  # null partitions
        + i64(1_700_000_000_900)
        + i64(-1)
        + tagged
    )
    _, value = decode_transaction_state(i16(0) + s("tx-1"), i16(1) + body)
    assert value == {
        "type": "transaction",
        "version": 1,
        "data": {
            "producer_id": 4242,
            "producer_epoch": 5,
            "transaction_timeout_ms": 60_000,
            "transaction_status": 5,
            "transaction_partitions": None,
            "transaction_last_update_timestamp_ms": 1_700_000_000_900,
            "transaction_start_timestamp_ms": -1,
            "transaction_state": "CompleteAbort",
            **expected,
        },
    }


def test_transaction_tombstone_unknown_state_and_bad_tag() -> None:
    key, value = decode_transaction_state(i16(0) + s("gone"), None)
    assert key is not None and key["data"] == {"transactional_id": "gone"}
    assert value is None
    body = i64(1) + i16(0) + i32(1) + i8(9) + arr([]) + i64(0) + i64(0)
    _, value = decode_transaction_state(i16(0) + s("t"), i16(0) + body)
    assert value is not None and value["data"]["transaction_state"] == "Unknown(9)"
    # a known tag whose bytes do not match its type
    body = i64(1) + i16(0) + i32(1) + i8(0) + uv(1) + i64(0) + i64(0) + tags((2, i32(1)))
    with pytest.raises(CorruptSegmentError, match="tagged field client_transaction_version has 2"):
        decode_transaction_state(i16(0) + s("t"), i16(1) + body)


# -- __cluster_metadata ------------------------------------------------------------------------


def frame(api_key: int, version: int, body: bytes) -> bytes:
    return uv(1) + uv(api_key) + uv(version) + body


def metadata(api_key: int, version: int, body: bytes) -> dict:
    key, value = decode_cluster_metadata(None, frame(api_key, version, body))
    assert key is None
    assert value is not None
    return value


def test_topic_record_pinned_bytes() -> None:
    value = bytes.fromhex("010200076f72646572 73000102030405060708090a0b0c0d0e0f00")
    assert value == frame(2, 0, cs("orders") + UUID_A + tags())
    assert decode_cluster_metadata(None, value) == (
        None,
        {
            "type": "TopicRecord",
            "api_key": 2,
            "version": 0,
            "data": {"name": "orders", "topic_id": UUID_A_TEXT},
        },
    )


PARTITION_V0 = (
    i32(3)
    + UUID_A
    + carr([i32(1), i32(2), i32(3)])
    + carr([i32(1), i32(3)])
    + carr([])
    + carr([i32(4)])
    + i32(1)
)


def test_partition_record_versions() -> None:
    assert metadata(3, 0, PARTITION_V0 + i32(7) + i32(9) + tags()) == {
        "type": "PartitionRecord",
        "api_key": 3,
        "version": 0,
        "data": {
            "partition_id": 3,
            "topic_id": UUID_A_TEXT,
            "replicas": [1, 2, 3],
            "isr": [1, 3],
            "removing_replicas": [],
            "adding_replicas": [4],
            "leader": 1,
            "leader_recovery_state": 0,
            "leader_epoch": 7,
            "partition_epoch": 9,
        },
    }
    body = (
        PARTITION_V0
        + i32(7)
        + i32(9)
        + carr([UUID_A, UUID_B, UUID_A])
        + tags((0, i8(1)), (1, carr([i32(2)])), (2, uv(0)))
    )
    data = metadata(3, 2, body)["data"]
    assert data["leader_recovery_state"] == 1
    assert data["directories"] == [UUID_A_TEXT, UUID_B_TEXT, UUID_A_TEXT]
    assert data["eligible_leader_replicas"] == [2]
    assert data["last_known_elr"] is None


def test_partition_change_record() -> None:
    body = i32(0) + UUID_B + tags((0, carr([i32(2), i32(3)])), (1, i32(3)))
    assert metadata(5, 0, body)["data"] == {
        "partition_id": 0,
        "topic_id": UUID_B_TEXT,
        "isr": [2, 3],
        "leader": 3,
        "replicas": None,
        "removing_replicas": None,
        "adding_replicas": None,
        "leader_recovery_state": -1,
    }
    body = i32(0) + UUID_B + tags((6, carr([i32(1)])), (7, carr([])), (8, carr([UUID_A])))
    data = metadata(5, 2, body)["data"]
    assert (data["eligible_leader_replicas"], data["last_known_elr"]) == ([1], [])
    assert (data["directories"], data["leader"]) == ([UUID_A_TEXT], -2)


def test_register_broker_record_v3() -> None:
    endpoint = cs("PLAINTEXT") + cs("broker-1.local") + struct.pack(">H", 9092) + i16(0) + tags()
    feature = cs("metadata.version") + i16(1) + i16(21) + tags()
    body = (
        i32(1)
        + i8(0)
        + UUID_A
        + i64(77)
        + carr([endpoint])
        + carr([feature])
        + cs(None)
        + i8(1)
        + i8(0)
        + tags((0, carr([UUID_B])))
    )
    assert metadata(0, 3, body)["data"] == {
        "broker_id": 1,
        "is_migrating_zk_broker": False,
        "incarnation_id": UUID_A_TEXT,
        "broker_epoch": 77,
        "end_points": [
            {"name": "PLAINTEXT", "host": "broker-1.local", "port": 9092, "security_protocol": 0}
        ],
        "features": [
            {"name": "metadata.version", "min_supported_version": 1, "max_supported_version": 21}
        ],
        "rack": None,
        "fenced": True,
        "in_controlled_shutdown": False,
        "log_dirs": [UUID_B_TEXT],
    }
    # version 0 has neither is_migrating_zk_broker nor in_controlled_shutdown, nor log_dirs
    body = i32(2) + UUID_A + i64(5) + carr([]) + carr([]) + cs("rack-a") + i8(0) + tags()
    assert metadata(0, 0, body)["data"] == {
        "broker_id": 2,
        "incarnation_id": UUID_A_TEXT,
        "broker_epoch": 5,
        "end_points": [],
        "features": [],
        "rack": "rack-a",
        "fenced": False,
    }


@pytest.mark.parametrize(
    ("api_key", "body", "name", "data"),
    [
        (
            4,
            i8(2) + cs("orders") + cs("retention.ms") + cs("-1") + tags(),
            "ConfigRecord",
            {"resource_type": 2, "resource_name": "orders", "name": "retention.ms", "value": "-1"},
        ),
        (
            4,
            i8(4) + cs("") + cs("log.cleaner.threads") + cs(None) + tags(),
            "ConfigRecord",
            {"resource_type": 4, "resource_name": "", "name": "log.cleaner.threads", "value": None},
        ),
        (9, UUID_B + tags(), "RemoveTopicRecord", {"topic_id": UUID_B_TEXT}),
        (
            12,
            cs("metadata.version") + i16(21) + tags(),
            "FeatureLevelRecord",
            {"name": "metadata.version", "feature_level": 21},
        ),
        (
            15,
            i32(1) + i64(12) + i64(2000) + tags(),
            "ProducerIdsRecord",
            {"broker_id": 1, "broker_epoch": 12, "next_producer_id": 2000},
        ),
        (20, tags(), "NoOpRecord", {}),
    ],
)
def test_small_metadata_records(api_key: int, body: bytes, name: str, data: dict) -> None:
    assert metadata(api_key, 0, body) == {
        "type": name,
        "api_key": api_key,
        "version": 0,
        "data": data,
    }


@pytest.mark.parametrize(
    ("value", "name", "reason"),
    [
        (frame(99, 0, b"\x00"), "unknown", "record type 99 is not decoded"),
        (
            frame(2, 1, cs("x") + UUID_A + tags()),
            "TopicRecord",
            "TopicRecord version 1 is not 0..0",
        ),
        (uv(0) + uv(2) + uv(0) + cs("x") + UUID_A + tags(), "TopicRecord", "frame version 0"),
    ],
)
def test_metadata_not_decoded_is_reported(value: bytes, name: str, reason: str) -> None:
    _, decoded = decode_cluster_metadata(None, value)
    assert decoded is not None
    assert decoded["type"] == name and decoded["data"] is None
    assert reason in decoded["undecoded"]
    assert decoded["raw"] == b64(value)


def test_metadata_damage_raises() -> None:
    with pytest.raises(CorruptSegmentError, match="TopicRecord v0: field topic_id needs 16 bytes"):
        decode_cluster_metadata(None, frame(2, 0, cs("orders") + UUID_A[:5]))
    with pytest.raises(CorruptSegmentError, match="metadata record type: varint runs past the end"):
        decode_cluster_metadata(None, b"\x01\x80")


def test_decoder_choice() -> None:
    assert decoder_for("auto", "__consumer_offsets") is decode_consumer_offsets
    assert decoder_for("auto", "__transaction_state") is decode_transaction_state
    assert decoder_for("auto", "__cluster_metadata") is decode_cluster_metadata
    assert decoder_for("auto", "orders") is None
    assert decoder_for("none", "__consumer_offsets") is None
    assert decoder_for("metadata", "anything") is decode_cluster_metadata


# -- through the command line ------------------------------------------------------------------


def write_partition(directory: Path, records: list[tuple[bytes | None, bytes | None]]) -> None:
    writer = PartitionWriter(directory)
    specs = [
        RecordSpec(key=k, value=v, timestamp=1_700_000_000_000 + i)
        for i, (k, v) in enumerate(records)
    ]
    writer.append(encode_batch(specs, base_offset=0), len(specs) - 1)
    writer.roll()


def dump(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict], str]:
    status = main(["dump", *argv])
    out, err = capsys.readouterr()
    return status, [json.loads(line) for line in out.splitlines()], err


def test_dump_consumer_offsets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = tmp_path / "__consumer_offsets-7"
    commit = i16(3) + i64(42) + i32(0) + s("") + i64(1_700_000_000_000)
    write_partition(part, [(offset_key(1), commit), (offset_key(1), None)])
    status, rows, _ = dump(capsys, str(part))
    assert status == 0
    key = {
        "type": "offset_commit",
        "version": 1,
        "data": {"group": "grp", "topic": "orders", "partition": 3},
    }
    assert rows == [
        {
            "key": key,
            "value": {
                "type": "offset_commit",
                "version": 3,
                "data": {
                    "offset": 42,
                    "leader_epoch": 0,
                    "metadata": "",
                    "commit_timestamp": 1_700_000_000_000,
                },
            },
            "topic": "__consumer_offsets",
            "partition": 7,
            "offset": 0,
            "timestamp": 1_700_000_000_000,
            "timestampType": 0,
        },
        {
            "key": key,
            "value": None,
            "topic": "__consumer_offsets",
            "partition": 7,
            "offset": 1,
            "timestamp": 1_700_000_000_001,
            "timestampType": 0,
        },
    ]
    status, rows, _ = dump(capsys, str(part), "--decoder", "none", "--key", "hex")
    assert [r["key"] for r in rows] == [offset_key(1).hex()] * 2
    status = main(["dump", str(part), "--format", "table"])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0 and len(lines) == 3
    assert lines[1].split()[:2] == ["__consumer_offsets-7", "0"]
    assert '{"type":"offset_commit","version":3,"data":{"offset":42,' in lines[1]
    assert lines[2].endswith(" <null>")


def test_dump_cluster_metadata_and_forced_decoder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = tmp_path / "__cluster_metadata-0"
    write_partition(part, [(None, frame(12, 0, cs("metadata.version") + i16(21) + tags()))])
    _, rows, _ = dump(capsys, str(part))
    assert rows[0]["key"] is None
    assert rows[0]["value"] == {
        "type": "FeatureLevelRecord",
        "api_key": 12,
        "version": 0,
        "data": {"name": "metadata.version", "feature_level": 21},
    }
    # a copy of the transaction log under another name: the decoder is named explicitly
    part = tmp_path / "txn-copy-0"
    write_partition(part, [(i16(0) + s("tx"), None)])
    _, rows, _ = dump(capsys, str(part), "--decoder", "transaction")
    assert rows[0]["key"] == {
        "type": "transaction",
        "version": 0,
        "data": {"transactional_id": "tx"},
    }
    _, rows, _ = dump(capsys, str(part))
    assert rows[0]["key"] == (i16(0) + s("tx")).decode()


def test_dump_damaged_internal_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    part = tmp_path / "__transaction_state-2"
    good = i16(0) + s("tx")
    write_partition(part, [(good, None), (i16(0) + i16(9) + b"tx", None)])
    status, rows, err = dump(capsys, str(part))
    assert (status, rows) == (1, [])
    log = part / "00000000000000000000.log"
    assert err == (
        "kafka-segments: error: cannot decode a __transaction_state record: TransactionLogKey v0: "
        "field transactional_id: length 9 runs past the end (2 left) (byte 2 of 6) "
        f"(file {log}, byte position 0, offset 1)\n"
    )
    status, rows, err = dump(capsys, str(part), "--mode", "DROPMALFORMED")
    assert (status, err) == (0, "")
    assert rows[1]["decode_error"].startswith("TransactionLogKey v0: field transactional_id")
    assert rows[1]["key"] == (i16(0) + i16(9) + b"tx").decode()
    assert "decode_error" not in rows[0]


def test_auto_decoder_on_rows_of_two_topics() -> None:
    import argparse

    import pyarrow as pa

    from kafka_segments_ds.cli.dump import format_batch

    arrow_batch = pa.record_batch(
        {
            "key": pa.array([offset_key(1), b"k"], pa.binary()),
            "value": pa.array([None, b"v"], pa.binary()),
            "topic": pa.array(["__consumer_offsets", "orders"]),
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([5, 6], pa.int64()),
        }
    )
    args = argparse.Namespace(
        decoder="auto", format="jsonl", key="utf8", value="utf8", mode="FAILFAST"
    )
    text = format_batch(arrow_batch, ["key", "value", "offset"], args)
    rows = [
        json.loads(line)
        for line in (text if isinstance(text, str) else bytes(text).decode()).splitlines()
    ]
    assert rows == [
        {
            "key": {
                "type": "offset_commit",
                "version": 1,
                "data": {"group": "grp", "topic": "orders", "partition": 3},
            },
            "value": None,
            "offset": 5,
        },
        {"key": "k", "value": "v", "offset": 6},
    ]
