"""``__consumer_offsets``: the group coordinator's offset-commit and group-metadata records.

Key = int16 key version + struct; value = int16 value version + struct (null = tombstone: the
offset or the group was deleted). Key versions 0 and 1 are ``OffsetCommitKey`` (group, topic,
partition) and their values ``OffsetCommitValue``; key version 2 is ``GroupMetadataKey`` (group)
with ``GroupMetadataValue`` values. Later key versions (the KIP-848 consumer-group records and
others) are reported as unknown. Schemas: apache/kafka ``group-coordinator/src/main/resources/
common/message/{OffsetCommit,GroupMetadata}{Key,Value}.json`` and, for the members'
subscription and assignment of ``protocol_type == "consumer"`` groups,
``clients/src/main/resources/common/message/ConsumerProtocol{Subscription,Assignment}.json``.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

from kafka_segments_ds.internal_topics.protocol import ArrayOf, Field, Message, Struct
from kafka_segments_ds.internal_topics.records import (
    Decoded,
    decode_versioned,
    split_version,
    unknown_type,
)

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2

OFFSET_COMMIT_KEY = Message(
    "OffsetCommitKey",
    (0, 1),
    None,
    (Field("group", "string"), Field("topic", "string"), Field("partition", "int32")),
)
GROUP_METADATA_KEY = Message("GroupMetadataKey", (2, 2), None, (Field("group", "string"),))

OFFSET_COMMIT_VALUE = Message(
    "OffsetCommitValue",
    (0, 4),
    4,
    (
        Field("offset", "int64"),
        Field("leader_epoch", "int32", versions=(3, None)),
        Field("metadata", "string"),
        Field("commit_timestamp", "int64"),
        Field("expire_timestamp", "int64", versions=(1, 1)),
    ),
)

_MEMBER = Struct(
    (
        Field("member_id", "string"),
        Field("group_instance_id", "string", versions=(3, None), nullable=(3, None)),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("rebalance_timeout", "int32", versions=(1, None)),
        Field("session_timeout", "int32"),
        Field("subscription", "bytes"),
        Field("assignment", "bytes"),
    )
)
GROUP_METADATA_VALUE = Message(
    "GroupMetadataValue",
    (0, 4),
    4,
    (
        Field("protocol_type", "string"),
        Field("generation", "int32"),
        Field("protocol", "string", nullable=(0, None)),
        Field("leader", "string", nullable=(0, None)),
        Field("current_state_timestamp", "int64", versions=(2, None)),
        Field("members", ArrayOf(_MEMBER)),
    ),
)

_TOPIC_PARTITIONS = ArrayOf(
    Struct((Field("topic", "string"), Field("partitions", ArrayOf("int32"))))
)
CONSUMER_SUBSCRIPTION = Message(
    "ConsumerProtocolSubscription",
    (0, 3),
    None,
    (
        Field("topics", ArrayOf("string")),
        Field("user_data", "bytes", nullable=(0, None)),
        Field("owned_partitions", _TOPIC_PARTITIONS, versions=(1, None)),
        Field("generation_id", "int32", versions=(2, None)),
        Field("rack_id", "string", versions=(3, None), nullable=(3, None)),
    ),
)
CONSUMER_ASSIGNMENT = Message(
    "ConsumerProtocolAssignment",
    (0, 3),
    None,
    (
        Field("assigned_partitions", _TOPIC_PARTITIONS),
        Field("user_data", "bytes", nullable=(0, None)),
    ),
)
CONSUMER_PROTOCOL_TYPE = "consumer"


def decode_consumer_offsets(key: bytes | None, value: bytes | None) -> Decoded:
    """Decode one ``__consumer_offsets`` record into ``(key, value)`` JSON-ready objects."""
    key_version, _ = split_version(key, "__consumer_offsets key")
    if key_version in OFFSET_COMMIT_KEY_VERSIONS:
        kind, key_schema, value_schema = "offset_commit", OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE
    elif key_version == GROUP_METADATA_KEY_VERSION:
        kind, key_schema, value_schema = "group_metadata", GROUP_METADATA_KEY, GROUP_METADATA_VALUE
    else:
        return unknown_type(key, value, key_version)
    assert key is not None
    decoded_key = decode_versioned(kind, key_schema, key, key_version)
    decoded_value = decode_versioned(kind, value_schema, value) if value is not None else None
    if kind == "group_metadata" and decoded_value is not None and decoded_value["data"]:
        _decode_members(decoded_value["data"])
    return decoded_key, decoded_value


def _decode_members(group: dict[str, Any]) -> None:
    """For consumer groups, replace subscription/assignment bytes by their decoded form."""
    if group.get("protocol_type") != CONSUMER_PROTOCOL_TYPE:
        return
    for member in group["members"]:
        for name, schema in (
            ("subscription", CONSUMER_SUBSCRIPTION),
            ("assignment", CONSUMER_ASSIGNMENT),
        ):
            raw = base64.b64decode(member[name])
            if len(raw) < 2:
                continue  # an empty assignment (member not yet assigned) stays as it is
            (version,) = struct.unpack_from(">h", raw)
            # The consumer protocol is forward compatible: newer versions only append fields,
            # so Kafka reads them with its newest known schema; so do we.
            newest = schema.valid[1]
            read_as = newest if version > newest else None
            member[name] = decode_versioned(name, schema, raw, version, read_as=read_as)
