"""Schemas of the KRaft metadata records (``__cluster_metadata``), keyed by ``apiKey``.

Transcribed field by field from Kafka's own message definitions, apache/kafka
``metadata/src/main/resources/common/metadata/*.json`` at commit 1eb7644 (2024-10-25): every
``validVersions``, ``flexibleVersions`` (all ``0+``), field ``versions``, ``nullableVersions``,
``taggedVersions``/``tag`` and tagged-field default. Field names are Kafka's in snake_case.
``tests/test_cli_decoders.py`` pins the versions, so a change here is a deliberate one.
"""

from __future__ import annotations

from kafka_segments_ds.internal_topics.protocol import ArrayOf, Field, Message, Struct

SCHEMAS: dict[int, Message] = {
    0: Message(
        "RegisterBrokerRecord",
        (0, 3),
        0,
        (
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
            Field("rack", "string", nullable=(0, None)),
            Field("fenced", "bool"),
            Field("in_controlled_shutdown", "bool", versions=(1, None)),
            Field("log_dirs", ArrayOf("uuid"), versions=(3, None), tag=0, default=()),
        ),
    ),
    1: Message(
        "UnregisterBrokerRecord",
        (0, 0),
        0,
        (
            Field("broker_id", "int32"),
            Field("broker_epoch", "int64"),
        ),
    ),
    2: Message(
        "TopicRecord",
        (0, 0),
        0,
        (
            Field("name", "string"),
            Field("topic_id", "uuid"),
        ),
    ),
    3: Message(
        "PartitionRecord",
        (0, 2),
        0,
        (
            Field("partition_id", "int32"),
            Field("topic_id", "uuid"),
            Field("replicas", ArrayOf("int32")),
            Field("isr", ArrayOf("int32")),
            Field("removing_replicas", ArrayOf("int32")),
            Field("adding_replicas", ArrayOf("int32")),
            Field("leader", "int32"),
            Field("leader_recovery_state", "int8", tag=0, default=0),
            Field("leader_epoch", "int32"),
            Field("partition_epoch", "int32"),
            Field("directories", ArrayOf("uuid"), versions=(1, None)),
            Field(
                "eligible_leader_replicas",
                ArrayOf("int32"),
                versions=(2, None),
                nullable=(2, None),
                tag=1,
            ),
            Field(
                "last_known_elr",
                ArrayOf("int32"),
                versions=(2, None),
                nullable=(2, None),
                tag=2,
            ),
        ),
    ),
    4: Message(
        "ConfigRecord",
        (0, 0),
        0,
        (
            Field("resource_type", "int8"),
            Field("resource_name", "string"),
            Field("name", "string"),
            Field("value", "string", nullable=(0, None)),
        ),
    ),
    5: Message(
        "PartitionChangeRecord",
        (0, 2),
        0,
        (
            Field("partition_id", "int32"),
            Field("topic_id", "uuid"),
            Field("isr", ArrayOf("int32"), nullable=(0, None), tag=0),
            Field("leader", "int32", tag=1, default=-2),
            Field("replicas", ArrayOf("int32"), nullable=(0, None), tag=2),
            Field("removing_replicas", ArrayOf("int32"), nullable=(0, None), tag=3),
            Field("adding_replicas", ArrayOf("int32"), nullable=(0, None), tag=4),
            Field("leader_recovery_state", "int8", tag=5, default=-1),
            Field("directories", ArrayOf("uuid"), versions=(1, None), nullable=(1, None), tag=8),
            Field(
                "eligible_leader_replicas",
                ArrayOf("int32"),
                versions=(2, None),
                nullable=(2, None),
                tag=6,
            ),
            Field(
                "last_known_elr",
                ArrayOf("int32"),
                versions=(2, None),
                nullable=(2, None),
                tag=7,
            ),
        ),
    ),
    7: Message(
        "FenceBrokerRecord",
        (0, 0),
        0,
        (
            Field("id", "int32"),
            Field("epoch", "int64"),
        ),
    ),
    8: Message(
        "UnfenceBrokerRecord",
        (0, 0),
        0,
        (
            Field("id", "int32"),
            Field("epoch", "int64"),
        ),
    ),
    9: Message(
        "RemoveTopicRecord",
        (0, 0),
        0,
        (Field("topic_id", "uuid"),),
    ),
    10: Message(
        "DelegationTokenRecord",
        (0, 0),
        0,
        (
            Field("owner", "string"),
            Field("requester", "string"),
            Field("renewers", ArrayOf("string")),
            Field("issue_timestamp", "int64"),
            Field("max_timestamp", "int64"),
            Field("expiration_timestamp", "int64"),
            Field("token_id", "string"),
        ),
    ),
    11: Message(
        "UserScramCredentialRecord",
        (0, 0),
        0,
        (
            Field("name", "string"),
            Field("mechanism", "int8"),
            Field("salt", "bytes"),
            Field("stored_key", "bytes"),
            Field("server_key", "bytes"),
            Field("iterations", "int32"),
        ),
    ),
    12: Message(
        "FeatureLevelRecord",
        (0, 0),
        0,
        (
            Field("name", "string"),
            Field("feature_level", "int16"),
        ),
    ),
    14: Message(
        "ClientQuotaRecord",
        (0, 0),
        0,
        (
            Field(
                "entity",
                ArrayOf(
                    Struct(
                        (
                            Field("entity_type", "string"),
                            Field("entity_name", "string", nullable=(0, None)),
                        )
                    )
                ),
            ),
            Field("key", "string"),
            Field("value", "float64"),
            Field("remove", "bool"),
        ),
    ),
    15: Message(
        "ProducerIdsRecord",
        (0, 0),
        0,
        (
            Field("broker_id", "int32"),
            Field("broker_epoch", "int64"),
            Field("next_producer_id", "int64"),
        ),
    ),
    17: Message(
        "BrokerRegistrationChangeRecord",
        (0, 2),
        0,
        (
            Field("broker_id", "int32"),
            Field("broker_epoch", "int64"),
            Field("fenced", "int8", tag=0, default=0),
            Field("in_controlled_shutdown", "int8", versions=(1, None), tag=1, default=0),
            Field("log_dirs", ArrayOf("uuid"), versions=(2, None), tag=2, default=()),
        ),
    ),
    18: Message(
        "AccessControlEntryRecord",
        (0, 0),
        0,
        (
            Field("id", "uuid"),
            Field("resource_type", "int8"),
            Field("resource_name", "string"),
            Field("pattern_type", "int8"),
            Field("principal", "string"),
            Field("host", "string"),
            Field("operation", "int8"),
            Field("permission_type", "int8"),
        ),
    ),
    19: Message(
        "RemoveAccessControlEntryRecord",
        (0, 0),
        0,
        (Field("id", "uuid"),),
    ),
    20: Message(
        "NoOpRecord",
        (0, 0),
        0,
        (),
    ),
    21: Message(
        "ZkMigrationStateRecord",
        (0, 0),
        0,
        (Field("zk_migration_state", "int8"),),
    ),
    22: Message(
        "RemoveUserScramCredentialRecord",
        (0, 0),
        0,
        (
            Field("name", "string"),
            Field("mechanism", "int8"),
        ),
    ),
    23: Message(
        "BeginTransactionRecord",
        (0, 0),
        0,
        (Field("name", "string", nullable=(0, None), tag=0),),
    ),
    24: Message(
        "EndTransactionRecord",
        (0, 0),
        0,
        (),
    ),
    25: Message(
        "AbortTransactionRecord",
        (0, 0),
        0,
        (Field("reason", "string", nullable=(0, None), tag=0),),
    ),
    26: Message(
        "RemoveDelegationTokenRecord",
        (0, 0),
        0,
        (Field("token_id", "string"),),
    ),
    27: Message(
        "RegisterControllerRecord",
        (0, 0),
        0,
        (
            Field("controller_id", "int32"),
            Field("incarnation_id", "uuid"),
            Field("zk_migration_ready", "bool"),
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
        ),
    ),
    # Kafka 4.0+: the controller clears eligible leader replicas (ELR) of one topic ("" for all)
    28: Message(
        "ClearElrRecord",
        (0, 0),
        0,
        (Field("topic_name", "string"),),
    ),
}
