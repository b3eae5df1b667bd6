"""A short, deterministic fuzz run in the normal suite (the long run: ``python -m tests.fuzz.run``).

Each input is judged in a worker process (see judge.py for the oracle) that is killed if one
input takes longer than INPUT_SECONDS; its resident memory may grow by at most
RSS_GROWTH_BOUND_KIB during any input, bombs included (maxDecompressedBytes is 1 MiB there).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from .corpus import SEED_NAMES, build_seed, reference_rows
from .judge import make_input
from .mutate import OPERATORS, SHAPES
from .run import RSS_GROWTH_BOUND_KIB, fuzz
from .worker import judge

RUN_SEED = 20260601
INPUTS = 400


def test_seeds_cover_every_magic_and_codec() -> None:
    kinds = set()
    for name in SEED_NAMES:
        for entry in build_seed(name).entries:
            codec = entry[22] & 0x07 if entry[16] == 2 else entry[17] & 0x07
            kinds.add((entry[16], codec))
            reference_rows(entry)  # every seed entry is valid
    assert kinds == {(m, c) for m in (0, 1) for c in range(4)} | {(2, c) for c in range(5)}


def test_inputs_are_reproducible() -> None:
    a, b = make_input(RUN_SEED, 17), make_input(RUN_SEED, 17)
    assert a["target"] == b["target"] == "log"
    assert a["mutant"].data == b["mutant"].data
    assert a["mutant"].ops == b["mutant"].ops


def test_short_fuzz_run() -> None:
    report = fuzz(RUN_SEED, count=INPUTS)
    assert report.failures == [], report.summary()
    assert report.inputs == INPUTS
    assert report.max_rss_growth_kib <= RSS_GROWTH_BOUND_KIB
    # the run exercised every operator and both targets
    assert set(report.ops) >= set(OPERATORS) | set(SHAPES) | {"index", "timeindex"}
    assert set(report.targets) == {"log", "index"}


@pytest.mark.slow
def test_longer_fuzz_run() -> None:
    report = fuzz(random.Random(RUN_SEED).randrange(2**31), count=3000)
    assert report.failures == [], report.summary()


# Every input the long campaigns found failing (run seed:input number), judged again here: each
# was fixed (tests/fuzz/test_regressions.py has the smallest log showing each reader bug). The
# numbers name these inputs only while mutate.py draws its random numbers the same way; these
# were found before mutate.SHAPES existed, so they are judged without them.
CAMPAIGN_FAILURES = [
    "1611:21048",
    "1612:6057",
    "1612:9963",
    "1612:30926",
    "1612:47569",
    "1614:65756",
    "2006:47229",
    "2007:82360",
    "2009:26187",
    "2010:84675",
    "3003:42070",
    "4001:36924",
    "4005:13750",
]


@pytest.mark.parametrize("case", CAMPAIGN_FAILURES)
def test_campaign_failures_stay_fixed(case: str, tmp_path: Path) -> None:
    run_seed, number = (int(x) for x in case.split(":"))
    verdict = judge(run_seed, number, tmp_path, shapes=False)
    assert verdict["complaints"] == []


# Found by the campaigns of issue 23 (with mutate.SHAPES): a checksum-valid entry dropped for its
# offsets was searched inside (test_regressions.py::test_no_entry_starts_inside_a_valid_batch_*,
# ::test_valid_wrapper_dropped_for_its_offsets_is_skipped_to_its_end).
SHAPE_CAMPAIGN_FAILURES = ["2305:174", "2305:4238", "2306:24812"]


@pytest.mark.parametrize("case", SHAPE_CAMPAIGN_FAILURES)
def test_shape_campaign_failures_stay_fixed(case: str, tmp_path: Path) -> None:
    run_seed, number = (int(x) for x in case.split(":"))
    verdict = judge(run_seed, number, tmp_path)
    assert verdict["ops"][-1].split(":")[0] in SHAPES  # type: ignore[index]
    assert verdict["complaints"] == []


# Found by the campaigns of issue 23 after the above: a search that passed a valid entry went on
# inside a consistent entry with an unknown magic byte (2307:22073); a batch pruned for the start
# offset had its damaged size field trusted (777001:944); a search met a bad-magic wrapper whose
# size field is consistent and took a message stored verbatim in it (777001:164).
# (tests/reader/test_damage_search.py pins each.)
# With the rows of a read from an offset judged: a checksum-valid batch before the start whose
# records do not decode was pruned undecoded and moved the order check on (99:774, 99:7815).
# A 20-minute run then found a search rejecting an intact wrapper as "enclosed" by size and
# offset fields of a damaged batch's header (424242:19849, 424242:99648).
# Then: a search passing a valid entry met, at its end, a bad-magic wrapper whose size field
# leads to an intact entry but past the chain of its verbatim inner messages, and took them
# (515151:44564, :48828, :88992); intact entries after an entry running past the end of the
# file were not proof of damage when a consistent damaged entry ended the file (515151:122538,
# 424242:102607); a batch whose records do not decode moved the log end back (515151:39109).
# A batch cut 3 bytes short whose CRC still held over its stated extent (the 3 bytes of the
# next batch equal what was cut) sent reading 3 bytes into that batch, which was lost
# (616161:140956).
LATER_CAMPAIGN_FAILURES = [
    "2307:22073",
    "777001:944",
    "777001:164",
    "99:774",
    "99:7815",
    "424242:19849",
    "424242:99648",
    "515151:44564",
    "515151:48828",
    "515151:88992",
    "515151:122538",
    "515151:39109",
    "424242:102607",
    "616161:140956",
    "20261126:5886",
    "20261126:107090",
    "20261128:1108",
    "20261128:503",
    "981558216:72",
    "981558216:605",
    "981558216:541",
    # the stream's latest offset and the log end short of the batch read past damage
    "20261129:11784",
    "20261129:28968",
    "20261129:100598",
    "20261129:127916",
    "20261129:144694",
    "20261128:40813",
    # the stricter stream check: a damaged active segment read to its end (the walk's stop
    # changed the reader's resynchronisation), and a batch a lying batch overlapped
    "20261201:5871",
    "20261201:11197",
    "20261201:15964",
    "20261201:16564",
    "20261201:13494",
    # a baseOffset of 2**63 - 1 (the walk did not wrap its last offset), and a walk stopped at
    # damage after a batch whose lastOffsetDelta lies (the reader's floor is its records')
    "20261130:17811",
    "20261130:59536",
    "20261130:53067",
    # a batch whose checksum fails ending the file in nonzero bytes was taken for one being
    # written: its size field was damaged and its checksum proved where it ended
    "20261203:8681",
    # a header-only v2 batch claiming records (unchecked) counted by the walk; a magic-1
    # wrapper with offset field 0 (its inner numbering 0..n-1) pruned and walked by that field
    "20261203:79682",
    "20261203:178157",
    # a resynchronisation candidate whose offset field took the last byte of a valid batch
    # that overlaps the damage: invented offsets 8646911284551352329.. (the batch is now
    # skipped whole), and intact batches dropped after offset 72057594037927939
    "20261205:10579",
    "20261203:114249",
    # the same, through a damaged entry whose size field led inside a valid batch
    "20261205:118899",
]


@pytest.mark.parametrize("case", LATER_CAMPAIGN_FAILURES)
def test_later_campaign_failures_stay_fixed(case: str, tmp_path: Path) -> None:
    run_seed, number = (int(x) for x in case.split(":"))
    verdict = judge(run_seed, number, tmp_path)
    assert verdict["complaints"] == []


def _one_partition(case: str, tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """The damaged .log of fuzz input ``case`` as the one segment of partition t-0; its
    read options."""
    made = make_input(*(int(x) for x in case.split(":")))
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(made["mutant"].data)
    return directory, made["options"]


@pytest.mark.parametrize(
    ("case", "rows", "log_end"),
    [
        # magic 0, a gzip-members bomb, a v2 batch whose count and lastOffsetDelta lie
        ("20261129:11784", [0, 1, 5, 6, 7], None),
        # zstd, a nested wrapper, a record-count lie and a backwards batch, unchecked
        ("20261129:28968", [0, 1, 2, 8, 9], None),
        # magic 0, a wrapper whose inner offsets contradict it, a v2 bomb, later wrappers
        ("20261128:40813", [0, 1, 2, 3, 4, 8, 9, 10], 11),
        # a bomb wrapper the walk counted raised its floor: a later damaged size field was
        # taken for an entry being appended, and the stream stopped there
        ("20261130:73", [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12], None),
        # a zero-filled run inside the log (the walk took it for a preallocated tail)
        ("777:121", [0, 1, 2, 3, 4, 8, 9, 10], None),
    ],
)
def test_latest_offset_and_log_end_follow_the_reader_past_damage(
    case: str, rows: list[int], log_end: int | None, tmp_path: Path
) -> None:
    """Where the tail walk goes on past damage, the reader itself says what it returns after
    it: the walk's rules stopped the stream's latest offset at 2, 3, 5, 4 and 5 in these inputs
    (the stream waited where the batch read returned later rows), and the log end of 40813 at
    5 (a startingOffsets of 10 was refused). The log end is None where the walk stops at damage
    (no range check; the read names the damage or passes it)."""
    import pyarrow.fs as pafs

    from kafka_segments_ds import read_table
    from kafka_segments_ds.layout import discover
    from kafka_segments_ds.options import parse_stream_options
    from kafka_segments_ds.ranges import log_end_offset
    from kafka_segments_ds.reader import read_task, read_tasks
    from kafka_segments_ds.streaming.planner import StreamPlanner

    directory, options = _one_partition(case, tmp_path)
    got = read_table(str(directory), mode="DROPMALFORMED", **options)
    assert got.column("offset").to_pylist() == rows
    stream, limits = parse_stream_options({**options, "mode": "DROPMALFORMED"})
    planner = StreamPlanner([str(tmp_path)], stream, limits)
    latest = planner.next_offsets({("t", 0): 0})[("t", 0)]
    assert latest == rows[-1] + 1
    tasks = planner.plan({("t", 0): 0}, {("t", 0): latest}, 1)
    streamed = [
        o for t in tasks for b in read_tasks(t, stream, ("offset",)) for o in b[0].to_pylist()
    ]
    assert streamed == rows
    seg = discover(str(tmp_path), pafs.LocalFileSystem())[0].segments[-1]
    assert log_end_offset(pafs.LocalFileSystem(), seg, stream, read_task) == log_end
    again = read_table(
        str(directory),
        mode="DROPMALFORMED",
        startingOffsets=f'{{"t":{{"0":{rows[-1]}}}}}',
        **options,
    )
    assert again.column("offset").to_pylist() == [rows[-1]]


def test_a_shallow_stream_reads_a_damaged_segment_to_its_end(tmp_path: Path) -> None:
    """iteration=shallow: the walk went on past damage, so the stream reads the segment to its
    listed end, as the deep one does (20261201:16564: cut where the walk stopped, the read's
    resynchronisation left offset 2 out, and the stream never emitted it)."""
    from kafka_segments_ds import read_table
    from kafka_segments_ds.options import parse_stream_options
    from kafka_segments_ds.reader import read_tasks
    from kafka_segments_ds.streaming.planner import StreamPlanner

    directory, options = _one_partition("20261201:16564", tmp_path)
    shallow = {**options, "mode": "DROPMALFORMED", "iteration": "shallow"}
    assert read_table(str(directory), **shallow).column("offset").to_pylist() == [2]
    stream, limits = parse_stream_options(shallow)
    planner = StreamPlanner([str(tmp_path)], stream, limits)
    assert planner.next_offsets({("t", 0): 0}) == {("t", 0): 3}
    tasks = planner.plan({("t", 0): 0}, {("t", 0): 3}, 1)
    assert [
        o for t in tasks for b in read_tasks(t, stream, ("offset",)) for o in b[0].to_pylist()
    ] == [2]


def test_a_slow_input_on_a_loaded_machine_is_no_hang() -> None:
    """An input overruns the per-input bound by the worker's CPU seconds: waiting for a core
    (CI beside other jobs) is not a hang; spinning is, and so is blocking for
    BLOCKED_FACTOR times the bound."""
    from .run import BLOCKED_FACTOR, _Worker

    worker = _Worker()
    try:
        used = worker.cpu_seconds()
        assert used is not None and used > 0  # it has imported the reader
        worker.started, worker.cpu_started = 1000.0, used
        assert not worker.overran(1.0, 1000.0 + BLOCKED_FACTOR - 1)  # waited, used no CPU
        assert worker.overran(1.0, 1000.0 + BLOCKED_FACTOR + 1)  # blocked
        worker.cpu_started = used - 2.0
        assert worker.overran(1.0, 1000.5)  # spent 2 CPU seconds on it
    finally:
        worker.close()
