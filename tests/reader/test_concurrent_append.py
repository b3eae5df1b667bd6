"""Reading a segment while another process appends to it, as a live broker does.

The appender writes each batch in several pieces (so readers see torn batches), and maintains a
preallocated, zero-filled ``.index``/``.timeindex`` written in place as a broker's memory-mapped
indexes are. With ``preallocate`` the ``.log`` itself is zero-filled up front and written in
place (Kafka's ``preallocate=true``). Every read while this goes on must return a prefix of
the log exactly -- offsets 0..k-1 with their own values, never a torn record -- and no error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.appender import RECORDS, expected_rows, rows, start_appender

BATCHES = 120


def check_prefix(directory: Path) -> int:
    """Read the live segment (whole, and from an offset through the index); return the rows."""
    got = rows(directory)
    assert got == expected_rows(len(got))
    assert len(got) % RECORDS == 0  # whole batches only
    start = len(got) // 2
    bounded = rows(directory, startingOffsets=f'{{"live":{{"0":{start}}}}}')
    assert bounded == expected_rows(start + len(bounded))[start:]
    assert len(bounded) >= len(got) - start
    return len(got)


PREALLOCATE = pytest.mark.parametrize("preallocate", [False, True], ids=["append", "preallocated"])


@PREALLOCATE
def test_every_torn_state_reads_as_a_prefix(tmp_path: Path, preallocate: bool) -> None:
    """Lockstep: read after every piece the appender writes, so each torn state is seen."""
    directory = tmp_path / "live-0"
    directory.mkdir()
    batches = 30
    appender = start_appender(directory, batches, preallocate, lockstep=True)
    assert appender.stdin is not None and appender.stdout is not None
    seen = []
    try:
        for _ in range(batches * 4):
            appender.stdin.write("\n")
            appender.stdin.flush()
            appender.stdout.readline()
            seen.append(check_prefix(directory))
    finally:
        appender.stdin.close()
        appender.wait()
    assert appender.returncode == 0
    # after the 1st, 2nd and 3rd piece of a batch the reader sees the batches before it
    assert seen == [RECORDS * (i // 4 + (i % 4 == 3)) for i in range(batches * 4)]


@PREALLOCATE
def test_reads_during_appends_are_consistent_prefixes(tmp_path: Path, preallocate: bool) -> None:
    """Free-running: the appender does not wait for the reader."""
    directory = tmp_path / "live-0"
    directory.mkdir()
    appender = start_appender(directory, BATCHES, preallocate, lockstep=False)
    reads = 0
    try:
        while appender.poll() is None or reads == 0:
            if (directory / "00000000000000000000.log").exists():
                check_prefix(directory)
                reads += 1
    finally:
        appender.communicate()
    assert appender.returncode == 0
    assert rows(directory) == expected_rows(BATCHES * RECORDS)
