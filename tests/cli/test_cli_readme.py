"""Every ``kafka-segments`` example of the README's "Command line" section runs as written on
the demo data (what ``bash scripts/demo.sh`` writes to ``demo-data/``)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from kafka_segments_ds.cli import main
from kafka_segments_ds.samples import write_sample_log_dir

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_commands() -> list[list[str]]:
    text = README.read_text()
    section = text[text.index("## Command line") : text.index("## Schema")]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    lines = [line.split("  #")[0].strip() for line in block[1].splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("kafka-segments ")]


COMMANDS = readme_commands()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's log dir, written as examples/demo.py writes it."""
    root = tmp_path_factory.mktemp("readme")
    write_sample_log_dir(root / "demo-data", records_per_partition=5000)
    return root


def test_the_examples_are_found() -> None:
    assert len(COMMANDS) == 14
    assert {argv[0] for argv in COMMANDS} == {
        "dump", "verify", "stats", "rebuild-index", "recover", "erase", "compact",
    }  # fmt: skip


@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(a) for a in COMMANDS])
def test_readme_example_runs(
    demo: Path,
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(demo)
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = out.splitlines()
    assert lines
    if argv[0] == "verify":
        assert lines[-1] == (
            "verify: 65 files checked (21 .log, 44 index) in 4 partitions: 65 ok, 0 notes, "
            "0 index problems, 0 damaged, 0 unreadable; exit status 0"
        )
    if "--gaps" in argv:
        gaps = [json.loads(line)["gap"] for line in lines if line.startswith('{"gap"')]
        assert gaps == [{"topic": "orders", "partition": 0, "after": 1730, "next": 1732}]
    if argv[0] == "dump" and "--to-offset" in argv and "--format" in argv:
        assert [int(line.split()[1]) for line in lines[1:]] == list(range(1000, 1010))
    if argv[-1].endswith(".snapshot"):
        assert json.loads(lines[-1])["summary"]["entries"] == 0
