"""Whether reads report the damage they meet (its log lines, and the events
:func:`~kafka_segments_ds.reader.damage.collect_damage` gathers).

A tail walk that met damage reports it, then asks the reader what it returns past it
(:func:`~kafka_segments_ds.ranges.reader_next_offset`): that second read is quiet, so each
damaged entry is reported once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_QUIET: ContextVar[bool] = ContextVar("damage_quiet", default=False)


def damage_is_quiet() -> bool:
    """Whether the read being made is inside :func:`quiet_damage`."""
    return _QUIET.get()


@contextlib.contextmanager
def quiet_damage() -> Iterator[None]:
    """Reads made (iterated) inside the block neither log damage nor report its events."""
    token = _QUIET.set(True)
    try:
        yield
    finally:
        _QUIET.reset(token)


__all__ = ["damage_is_quiet", "quiet_damage"]
