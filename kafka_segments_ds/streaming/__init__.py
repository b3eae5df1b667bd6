"""The driver side of ``spark.readStream``: the offsets of each trigger (listing, latest
offsets, read limits, data loss) and the scan tasks of each micro-batch, planned with
:mod:`kafka_segments_ds.planning` and read by the batch reader."""

from __future__ import annotations

from kafka_segments_ds.streaming.planner import StreamPlanner, scan_tail

__all__ = ["StreamPlanner", "scan_tail"]
