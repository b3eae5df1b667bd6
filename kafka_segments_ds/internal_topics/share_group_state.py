"""``__share_group_state``: the share coordinator's log (KIP-932 share groups).

Written by ``CoordinatorRecordSerde``: the key is an int16 record type (0 snapshot, 1 update)
followed by the key struct read at that version; the value is an int16 version followed by the
value struct (flexible), null for a tombstone. Schemas transcribed from apache/kafka
``share-coordinator/src/main/resources/common/message/Share{Snapshot,Update}{Key,Value}.json`` at
commit 1eb7644 (2024-10-25). Delivery states: 0 available, 2 acknowledged, 4 archived.
"""

from __future__ import annotations

from kafka_segments_ds.internal_topics.protocol import ArrayOf, Field, Message, Struct
from kafka_segments_ds.internal_topics.records import (
    Decoded,
    decode_versioned,
    split_version,
    unknown_type,
)

KIND_NAMES = {0: "share_snapshot", 1: "share_update"}
# the values' last field (both definitions repeat it inline)
_STATE_BATCHES = Field(
    "state_batches",
    ArrayOf(
        Struct(
            (
                Field("first_offset", "int64", versions=(0, 0)),
                Field("last_offset", "int64", versions=(0, 0)),
                Field("delivery_state", "int8", versions=(0, 0)),
                Field("delivery_count", "int16", versions=(0, 0)),
            )
        )
    ),
    versions=(0, 0),
)

SHARE_SNAPSHOT_KEY = Message(
    "ShareSnapshotKey",
    (0, 0),
    None,
    (
        Field("group_id", "string", versions=(0, 0)),
        Field("topic_id", "uuid", versions=(0, 0)),
        Field("partition", "int32", versions=(0, 0)),
    ),
)
SHARE_UPDATE_KEY = Message(
    "ShareUpdateKey",
    (1, 1),
    None,
    (
        Field("group_id", "string", versions=(1, 1)),
        Field("topic_id", "uuid", versions=(1, 1)),
        Field("partition", "int32", versions=(1, 1)),
    ),
)
SHARE_SNAPSHOT_VALUE = Message(
    "ShareSnapshotValue",
    (0, 0),
    0,
    (
        Field("snapshot_epoch", "uint16", versions=(0, 0)),
        Field("state_epoch", "int32"),
        Field("leader_epoch", "int32"),
        Field("start_offset", "int64", versions=(0, 0)),
        _STATE_BATCHES,
    ),
)
SHARE_UPDATE_VALUE = Message(
    "ShareUpdateValue",
    (0, 0),
    0,
    (
        Field("snapshot_epoch", "uint16", versions=(0, 0)),
        Field("leader_epoch", "int32"),
        Field("start_offset", "int64", versions=(0, 0)),
        _STATE_BATCHES,
    ),
)

KEYS = {0: SHARE_SNAPSHOT_KEY, 1: SHARE_UPDATE_KEY}
VALUES = {0: SHARE_SNAPSHOT_VALUE, 1: SHARE_UPDATE_VALUE}


def decode_share_group_state(key: bytes | None, value: bytes | None) -> Decoded:
    """Decode one ``__share_group_state`` record into ``{"type", "version", "data"}`` halves."""
    record_type, _ = split_version(key, "share group state key")
    if record_type not in KEYS:
        return unknown_type(key, value, record_type)
    assert key is not None  # split_version raised otherwise
    kind = KIND_NAMES[record_type]
    decoded_key = decode_versioned(kind, KEYS[record_type], key, record_type)
    if value is None:
        return decoded_key, None
    return decoded_key, decode_versioned(kind, VALUES[record_type], value)
