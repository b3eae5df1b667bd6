"""Schemas of the KRaft control records that ``.checkpoint`` snapshots and the metadata log
hold besides transaction markers, keyed by control record type (``ControlRecordType``).

Transcribed from apache/kafka ``clients/src/main/resources/common/message/`` ``LeaderChange
Message.json``, ``SnapshotHeaderRecord.json``, ``SnapshotFooterRecord.json``, ``KRaftVersion
Record.json`` and ``VotersRecord.json`` at commit 1eb7644 (2024-10-25). Unlike metadata records,
a control record's value has no frame: the message starts with its own int16 ``version`` field.
"""

from __future__ import annotations

from kafka_segments_ds.internal_topics.protocol import ArrayOf, Field, Message, Struct

LEADER_CHANGE_MESSAGE = Message(
    "LeaderChangeMessage",
    (0, 1),
    0,
    (
        Field("version", "int16"),
        Field("leader_id", "int32"),
        Field(
            "voters",
            ArrayOf(
                Struct(
                    (
                        Field("voter_id", "int32"),
                        Field("voter_directory_id", "uuid", versions=(1, None)),
                    )
                )
            ),
        ),
        Field(
            "granting_voters",
            ArrayOf(
                Struct(
                    (
                        Field("voter_id", "int32"),
                        Field("voter_directory_id", "uuid", versions=(1, None)),
                    )
                )
            ),
        ),
    ),
)
SNAPSHOT_HEADER_RECORD = Message(
    "SnapshotHeaderRecord",
    (0, 0),
    0,
    (
        Field("version", "int16"),
        Field("last_contained_log_timestamp", "int64"),
    ),
)
SNAPSHOT_FOOTER_RECORD = Message(
    "SnapshotFooterRecord",
    (0, 0),
    0,
    (Field("version", "int16"),),
)
KRAFT_VERSION_RECORD = Message(
    "KRaftVersionRecord",
    (0, 0),
    0,
    (
        Field("version", "int16"),
        Field("kraft_version", "int16"),
    ),
)
VOTERS_RECORD = Message(
    "VotersRecord",
    (0, 0),
    0,
    (
        Field("version", "int16"),
        Field(
            "voters",
            ArrayOf(
                Struct(
                    (
                        Field("voter_id", "int32"),
                        Field("voter_directory_id", "uuid"),
                        Field(
                            "endpoints",
                            ArrayOf(
                                Struct(
                                    (
                                        Field("name", "string"),
                                        Field("host", "string"),
                                        Field("port", "uint16"),
                                    )
                                )
                            ),
                        ),
                        Field(
                            "kraft_version_feature",
                            Struct(
                                (
                                    Field("min_supported_version", "int16"),
                                    Field("max_supported_version", "int16"),
                                )
                            ),
                        ),
                    )
                )
            ),
        ),
    ),
)

# ControlRecordType id -> schema (0 ABORT and 1 COMMIT are transaction markers, not here)
CONTROL_SCHEMAS: dict[int, Message] = {
    2: LEADER_CHANGE_MESSAGE,
    3: SNAPSHOT_HEADER_RECORD,
    4: SNAPSHOT_FOOTER_RECORD,
    5: KRAFT_VERSION_RECORD,
    6: VOTERS_RECORD,
}
