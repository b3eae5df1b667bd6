"""Reading Kafka tiered-storage (KIP-405) buckets directly: discovery of the layouts
(:mod:`.layouts`), Aiven manifests and chunk indexes (:mod:`.aiven`), chunk decoding
(:mod:`.chunks`) and the read-only filesystem view that serves transformed segments as plain
ones (:mod:`.storage`). See docs/TIERED.md."""

from __future__ import annotations

from kafka_segments_ds.tiered.chunks import load_private_keys
from kafka_segments_ds.tiered.layouts import (
    discover_layout,
    is_tiered_segment,
    resolve_overlaps,
)
from kafka_segments_ds.tiered.storage import combine_filesystems

__all__ = [
    "combine_filesystems",
    "discover_layout",
    "is_tiered_segment",
    "load_private_keys",
    "resolve_overlaps",
]
