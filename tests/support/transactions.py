"""A partition of interleaved transactions (committed, aborted, left open) spanning segments."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_interleaved(make_partition: Callable[..., Any]) -> tuple[Path, list[int], set[tuple]]:
    """Five producers with transactions spanning several segments, aborted and committed at
    random, plus plain batches. Returns the directory, the offsets a read_committed consumer
    sees, and the aborted spans (producerId, first offset, marker offset)."""
    rng = random.Random(23)
    part = make_partition("tx-0", segment_bytes=700, index_interval_bytes=100)
    visible: list[int] = []
    aborted: set[tuple[int, int, int]] = set()
    open_txns: dict[int, list[int]] = {}
    for _ in range(220):
        pid = rng.randrange(1, 6)
        action = rng.random()
        if action < 0.25:
            visible += part.batch([1000] * rng.randrange(1, 3))
        elif action < 0.7 or pid not in open_txns:
            offsets = part.batch([1000] * rng.randrange(1, 4), producer_id=pid, transactional=True)
            open_txns.setdefault(pid, []).extend(offsets)
        else:
            data = open_txns.pop(pid)
            commit = rng.random() < 0.5
            marker = part.marker(pid, commit=commit)
            if commit:
                visible += data
            else:
                part.writer.record_abort(pid, data[0], marker)
                aborted.add((pid, data[0], marker))
    for pid, data in sorted(open_txns.items()):
        marker = part.marker(pid, commit=False)
        part.writer.record_abort(pid, data[0], marker)
        aborted.add((pid, data[0], marker))
    return part.close(), sorted(visible), aborted
