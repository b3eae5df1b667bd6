"""Decoders for the records of Kafka's internal topics, as DumpLogSegments' decoders do.

``decoder_for(name, topic)`` returns a function ``(key, value) -> (decoded key, decoded value)``
(JSON-ready dicts, ``None`` for a null half) or ``None`` when the records should be shown raw:

* ``offsets``: ``__consumer_offsets`` (offset commits, group metadata) - :mod:`.consumer_offsets`
* ``transaction``: ``__transaction_state`` - :mod:`.transaction_state`
* ``metadata``: ``__cluster_metadata`` (KRaft) - :mod:`.cluster_metadata`; its ``.checkpoint``
  snapshots - :mod:`.kraft_snapshot`
* ``share``: ``__share_group_state`` - :mod:`.share_group_state`
* ``remote``: ``__remote_log_metadata`` (tiered storage) - :mod:`.remote_log_metadata`
* ``auto``: the one matching the topic name, else none; ``none``: never decode.

Pure functions over bytes: no files, no Arrow.
"""

from __future__ import annotations

from collections.abc import Callable

from kafka_segments_ds.internal_topics.cluster_metadata import decode_cluster_metadata
from kafka_segments_ds.internal_topics.consumer_offsets import decode_consumer_offsets
from kafka_segments_ds.internal_topics.records import Decoded
from kafka_segments_ds.internal_topics.remote_log_metadata import decode_remote_log_metadata
from kafka_segments_ds.internal_topics.share_group_state import decode_share_group_state
from kafka_segments_ds.internal_topics.transaction_state import decode_transaction_state

Decoder = Callable[[bytes | None, bytes | None], Decoded]

DECODERS: dict[str, Decoder] = {
    "offsets": decode_consumer_offsets,
    "transaction": decode_transaction_state,
    "metadata": decode_cluster_metadata,
    "share": decode_share_group_state,
    "remote": decode_remote_log_metadata,
}
TOPICS: dict[str, str] = {
    "__consumer_offsets": "offsets",
    "__transaction_state": "transaction",
    "__cluster_metadata": "metadata",
    "__share_group_state": "share",
    "__remote_log_metadata": "remote",
}
CHOICES = ("auto", "none", *DECODERS)


def decoder_for(name: str, topic: str | None) -> Decoder | None:
    """The decoder called ``name`` (one of :data:`CHOICES`) for records of ``topic``."""
    if name == "none":
        return None
    if name == "auto":
        name = TOPICS.get(topic or "", "none")
        return DECODERS.get(name)
    return DECODERS[name]


__all__ = ["CHOICES", "DECODERS", "Decoded", "Decoder", "decoder_for"]
