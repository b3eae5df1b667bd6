"""``__transaction_state``: the transaction coordinator's log, one record per transactional id.

Key = int16 version (0) + ``TransactionLogKey`` (transactional id); value = int16 version +
``TransactionLogValue`` (version 1 is flexible and adds three tagged fields), null when the
transactional id expired. Schemas: apache/kafka ``transaction-coordinator/src/main/resources/
common/message/TransactionLog{Key,Value}.json``; state ids: ``TransactionState`` (core).
"""

from __future__ import annotations

from kafka_segments_ds.internal_topics.protocol import ArrayOf, Field, Message, Struct
from kafka_segments_ds.internal_topics.records import (
    Decoded,
    decode_versioned,
    split_version,
    unknown_type,
)

KEY_VERSION = 0
KIND = "transaction"
TRANSACTION_LOG_KEY = Message(
    "TransactionLogKey", (0, 0), None, (Field("transactional_id", "string"),)
)
TRANSACTION_LOG_VALUE = Message(
    "TransactionLogValue",
    (0, 1),
    1,
    (
        Field("producer_id", "int64"),
        Field("previous_producer_id", "int64", versions=(1, None), tag=0, default=-1),
        Field("next_producer_id", "int64", versions=(1, None), tag=1, default=-1),
        Field("producer_epoch", "int16"),
        Field("transaction_timeout_ms", "int32"),
        Field("transaction_status", "int8"),
        Field(
            "transaction_partitions",
            ArrayOf(Struct((Field("topic", "string"), Field("partition_ids", ArrayOf("int32"))))),
            nullable=(0, None),
        ),
        Field("transaction_last_update_timestamp_ms", "int64"),
        Field("transaction_start_timestamp_ms", "int64"),
        Field("client_transaction_version", "int16", versions=(1, None), tag=2, default=0),
    ),
)
# TransactionState ids as stored in transaction_status.
TRANSACTION_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "Dead",
    "PrepareEpochFence",
)


def decode_transaction_state(key: bytes | None, value: bytes | None) -> Decoded:
    """Decode one ``__transaction_state`` record into ``(key, value)`` JSON-ready objects."""
    key_version, _ = split_version(key, "__transaction_state key")
    if key_version != KEY_VERSION:
        return unknown_type(key, value, key_version)
    assert key is not None
    decoded_key = decode_versioned(KIND, TRANSACTION_LOG_KEY, key, key_version)
    if value is None:
        return decoded_key, None
    decoded_value = decode_versioned(KIND, TRANSACTION_LOG_VALUE, value)
    data = decoded_value["data"]
    if data is not None:
        status = data["transaction_status"]
        known = 0 <= status < len(TRANSACTION_STATES)
        data["transaction_state"] = TRANSACTION_STATES[status] if known else f"Unknown({status})"
    return decoded_key, decoded_value
