"""The read path: executes one input partition's scan tasks -> ``Iterator[pa.RecordBatch]``.

Modules, top down:

* :mod:`~kafka_segments_ds.reader.task`: the task loop (:func:`read_tasks`: an input
  partition's tasks in turn, the read-ahead running across their boundaries);
* :mod:`~kafka_segments_ds.reader.source`: ranged reads and the read-ahead window;
* :mod:`~kafka_segments_ds.reader.damage`: the damage and resync policy (FAILFAST /
  DROPMALFORMED, truncated and zero-filled tails);
* :mod:`~kafka_segments_ds.reader.window`: one window of entries -> one Arrow batch, through
  :mod:`~kafka_segments_ds.reader.v2` (the v2 batch decoder, in stages) and
  :mod:`~kafka_segments_ds.reader.legacy` (magic 0/1);
* :mod:`~kafka_segments_ds.reader.columns`: the Arrow column builders;
* :mod:`~kafka_segments_ds.reader.rows`: the values those share;
* :mod:`~kafka_segments_ds.reader.joining`: small batches joined into ``batchRows`` rows.
"""

from kafka_segments_ds.reader.joining import coalesce, join_small_batches
from kafka_segments_ds.reader.task import read_task, read_tasks

__all__ = ["coalesce", "join_small_batches", "read_task", "read_tasks"]
