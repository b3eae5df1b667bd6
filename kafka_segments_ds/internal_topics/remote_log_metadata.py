"""``__remote_log_metadata``: tiered storage's segment metadata topic (KIP-405).

Keys are not used (null or opaque bytes, shown raw); each value is framed as in the metadata log
(``RemoteLogMetadataSerde`` over ``AbstractApiMessageSerde``): uvarint frame version (1),
uvarint api key, uvarint version, then the flexible-version record:

* 0 ``RemoteLogSegmentMetadataRecord``: a segment copied to remote storage (id, offsets,
  leader epochs, size, state);
* 1 ``RemoteLogSegmentMetadataUpdateRecord``: a segment's state change;
* 2 ``RemotePartitionDeleteMetadataRecord``: a partition's deletion state;
* 3 ``RemoteLogSegmentMetadataSnapshotRecord``: a segment as stored in a metadata snapshot.

Schemas transcribed from apache/kafka ``storage/src/main/resources/message/*.json`` at commit
1eb7644 (2024-10-25); the segment records' tagged fields (``TxnIndexEmpty``, tag 0, and from
version 1 ``BrokerLeaderEpoch``, tag 1) as of 1acb523. State ids (``RemoteLogSegmentState``):
0 COPY_SEGMENT_STARTED, 1 COPY_SEGMENT_FINISHED, 2 DELETE_SEGMENT_STARTED,
3 DELETE_SEGMENT_FINISHED;
(``RemotePartitionDeleteState``): 0 DELETE_PARTITION_MARKED, 1 DELETE_PARTITION_STARTED,
2 DELETE_PARTITION_FINISHED.
"""

from __future__ import annotations

from kafka_segments_ds.internal_topics.cluster_metadata import decode_framed
from kafka_segments_ds.internal_topics.protocol import ArrayOf, Field, Message, Struct
from kafka_segments_ds.internal_topics.records import Decoded, raw_text

# Structs that several records share (the JSON definitions repeat them inline)
_TOPIC_ID_PARTITION = Struct(
    (Field("name", "string"), Field("id", "uuid"), Field("partition", "int32"))
)
_SEGMENT_ID = Struct((Field("topic_id_partition", _TOPIC_ID_PARTITION), Field("id", "uuid")))
_LEADER_EPOCHS = ArrayOf(Struct((Field("leader_epoch", "int32"), Field("offset", "int64"))))
# tagged fields of a segment's record and its snapshot record (Kafka 3.9+: a 4.1 broker writes
# tag 0): whether its transaction index is empty; from version 1, the uploading leader's epoch
_SEGMENT_TAGS = (
    Field("txn_index_empty", "bool", tag=0, default=False),
    Field("broker_leader_epoch", "int32", versions=(1, None), tag=1, default=0),
)

SCHEMAS: dict[int, Message] = {
    0: Message(
        "RemoteLogSegmentMetadataRecord",
        (0, 1),
        0,
        (
            Field("remote_log_segment_id", _SEGMENT_ID),
            Field("start_offset", "int64"),
            Field("end_offset", "int64"),
            Field("broker_id", "int32"),
            Field("max_timestamp_ms", "int64"),
            Field("event_timestamp_ms", "int64"),
            Field("segment_leader_epochs", _LEADER_EPOCHS),
            Field("segment_size_in_bytes", "int32"),
            Field("custom_metadata", "bytes", nullable=(0, None)),
            Field("remote_log_segment_state", "int8"),
            *_SEGMENT_TAGS,
        ),
    ),
    1: Message(
        "RemoteLogSegmentMetadataUpdateRecord",
        (0, 0),
        0,
        (
            Field("remote_log_segment_id", _SEGMENT_ID),
            Field("broker_id", "int32"),
            Field("event_timestamp_ms", "int64"),
            Field("custom_metadata", "bytes", nullable=(0, None)),
            Field("remote_log_segment_state", "int8"),
        ),
    ),
    2: Message(
        "RemotePartitionDeleteMetadataRecord",
        (0, 0),
        0,
        (
            Field("topic_id_partition", _TOPIC_ID_PARTITION),
            Field("broker_id", "int32"),
            Field("event_timestamp_ms", "int64"),
            Field("remote_partition_delete_state", "int8"),
        ),
    ),
    3: Message(
        "RemoteLogSegmentMetadataSnapshotRecord",
        (0, 1),
        0,
        (
            Field("segment_id", "uuid"),
            Field("start_offset", "int64"),
            Field("end_offset", "int64"),
            Field("broker_id", "int32"),
            Field("max_timestamp_ms", "int64"),
            Field("event_timestamp_ms", "int64"),
            Field("segment_leader_epochs", _LEADER_EPOCHS),
            Field("segment_size_in_bytes", "int32"),
            Field("custom_metadata", "bytes", nullable=(0, None)),
            Field("remote_log_segment_state", "int8"),
            *_SEGMENT_TAGS,
        ),
    ),
}


def decode_remote_log_metadata(key: bytes | None, value: bytes | None) -> Decoded:
    """Decode one ``__remote_log_metadata`` record (the key is passed through as raw)."""
    decoded_key = None if key is None else {"type": "unknown", "raw": raw_text(key)}
    if value is None:
        return decoded_key, None
    return decoded_key, decode_framed(value, SCHEMAS, "remote log metadata record")
