"""``__cluster_metadata``: the KRaft metadata log.

Each record has a null key and a value framed by ``AbstractApiMessageSerde``: unsigned varint
frame version (1), unsigned varint ``apiKey`` (the record type), unsigned varint version, then
the record in the flexible encoding. The schemas of the common record types are below
(apache/kafka ``metadata/src/main/resources/common/metadata/*.json``); every other type is
reported by name (or as unknown) with its bytes, never as an error.
"""

from __future__ import annotations

from kafka_segments_ds.internal_topics.protocol import (
    ArrayOf,
    Field,
    Message,
    Struct,
    decode_message,
    decode_uvarint,
)
from kafka_segments_ds.internal_topics.records import Decoded, raw_text

FRAME_VERSION = 1
_INT32S = ArrayOf("int32")
_UUIDS = ArrayOf("uuid")
_ALWAYS_NULLABLE = (0, None)


def _record(name: str, last_version: int, *fields: Field) -> Message:
    return Message(name, (0, last_version), 0, fields)


SCHEMAS: dict[int, Message] = {
    0: _record(
        "RegisterBrokerRecord",
        3,
        Field("broker_id", "int32"),
        Field("is_migrating_zk_broker", "bool", versions=(2, None)),
        Field("incarnation_id", "uuid"),
        Field("broker_epoch", "int64"),
        Field(
            "end_points",
            ArrayOf(
                Struct(
                    (
                        Field("name", "string"),
                        Field("host", "string"),
                        Field("port", "uint16"),
                        Field("security_protocol", "int16"),
                    )
                )
            ),
        ),
        Field(
            "features",
            ArrayOf(
                Struct(
                    (
                        Field("name", "string"),
                        Field("min_supported_version", "int16"),
                        Field("max_supported_version", "int16"),
                    )
                )
            ),
        ),
        Field("rack", "string", nullable=_ALWAYS_NULLABLE),
        Field("fenced", "bool"),
        Field("in_controlled_shutdown", "bool", versions=(1, None)),
        Field("log_dirs", _UUIDS, versions=(3, None), tag=0, default=()),
    ),
    2: _record("TopicRecord", 0, Field("name", "string"), Field("topic_id", "uuid")),
    3: _record(
        "PartitionRecord",
        2,
        Field("partition_id", "int32"),
        Field("topic_id", "uuid"),
        Field("replicas", _INT32S),
        Field("isr", _INT32S),
        Field("removing_replicas", _INT32S),
        Field("adding_replicas", _INT32S),
        Field("leader", "int32"),
        Field("leader_recovery_state", "int8", tag=0, default=0),
        Field("leader_epoch", "int32"),
        Field("partition_epoch", "int32"),
        Field("directories", _UUIDS, versions=(1, None)),
        Field("eligible_leader_replicas", _INT32S, versions=(2, None), nullable=(2, None), tag=1),
        Field("last_known_elr", _INT32S, versions=(2, None), nullable=(2, None), tag=2),
    ),
    4: _record(
        "ConfigRecord",
        0,
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Field("name", "string"),
        Field("value", "string", nullable=_ALWAYS_NULLABLE),
    ),
    5: _record(
        "PartitionChangeRecord",
        2,
        Field("partition_id", "int32"),
        Field("topic_id", "uuid"),
        Field("isr", _INT32S, nullable=_ALWAYS_NULLABLE, tag=0),
        Field("leader", "int32", tag=1, default=-2),
        Field("replicas", _INT32S, nullable=_ALWAYS_NULLABLE, tag=2),
        Field("removing_replicas", _INT32S, nullable=_ALWAYS_NULLABLE, tag=3),
        Field("adding_replicas", _INT32S, nullable=_ALWAYS_NULLABLE, tag=4),
        Field("leader_recovery_state", "int8", tag=5, default=-1),
        Field("directories", _UUIDS, versions=(1, None), nullable=(1, None), tag=8),
        Field("eligible_leader_replicas", _INT32S, versions=(2, None), nullable=(2, None), tag=6),
        Field("last_known_elr", _INT32S, versions=(2, None), nullable=(2, None), tag=7),
    ),
    9: _record("RemoveTopicRecord", 0, Field("topic_id", "uuid")),
    12: _record("FeatureLevelRecord", 0, Field("name", "string"), Field("feature_level", "int16")),
    15: _record(
        "ProducerIdsRecord",
        0,
        Field("broker_id", "int32"),
        Field("broker_epoch", "int64"),
        Field("next_producer_id", "int64"),
    ),
    20: _record("NoOpRecord", 0),
}
# Record types known by name only (MetadataRecordType); their bytes are shown, not decoded.
NAMES_ONLY: dict[int, str] = {
    1: "UnregisterBrokerRecord",
    7: "FenceBrokerRecord",
    8: "UnfenceBrokerRecord",
    10: "DelegationTokenRecord",
    11: "UserScramCredentialRecord",
    14: "ClientQuotaRecord",
    17: "BrokerRegistrationChangeRecord",
    18: "AccessControlEntryRecord",
    19: "RemoveAccessControlEntryRecord",
    21: "ZkMigrationStateRecord",
    22: "RemoveUserScramCredentialRecord",
    23: "BeginTransactionRecord",
    24: "EndTransactionRecord",
    25: "AbortTransactionRecord",
    26: "RemoveDelegationTokenRecord",
    27: "RegisterControllerRecord",
}


def decode_cluster_metadata(key: bytes | None, value: bytes | None) -> Decoded:
    """Decode one metadata record; the key (always null in Kafka) is passed through as raw."""
    decoded_key = None if key is None else {"type": "unknown", "raw": raw_text(key)}
    if value is None:
        return decoded_key, None
    frame, pos = decode_uvarint(value, 0, "metadata record frame version")
    api_key, pos = decode_uvarint(value, pos, "metadata record type")
    version, pos = decode_uvarint(value, pos, "metadata record version")
    schema = SCHEMAS.get(api_key)
    name = schema.name if schema is not None else NAMES_ONLY.get(api_key, "unknown")
    out = {"type": name, "api_key": api_key, "version": version, "data": None}
    if frame != FRAME_VERSION:
        reason = f"frame version {frame} (only {FRAME_VERSION} is known)"
    elif schema is None:
        reason = f"record type {api_key} is not decoded by this version of kafka-segments"
    elif not schema.is_valid_version(version):
        reason = f"{name} version {version} is not {schema.valid[0]}..{schema.valid[1]}"
    else:
        out["data"] = decode_message(schema, version, value, pos)
        return decoded_key, out
    out.update(undecoded=reason, raw=raw_text(value))
    return decoded_key, out
