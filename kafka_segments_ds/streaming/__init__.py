"""The driver side of ``spark.readStream``: the archive listed at each trigger
(:mod:`.listing`), the offsets of each trigger (latest offsets, read limits, data loss) and
the scan tasks of each micro-batch (:mod:`.planner`), planned with
:mod:`kafka_segments_ds.planning` and read by the batch reader. Imports point one way: to
planning and selection, never back."""

from __future__ import annotations

from kafka_segments_ds.streaming.planner import StreamPlanner, scan_tail

__all__ = ["StreamPlanner", "scan_tail"]
