"""The user guide in docs/ cannot fall behind the code.

* every option name the parsers accept is on docs/options.md;
* every subcommand, flag and flag choice of ``kafka-segments`` is on docs/cli.md;
* the Python examples of the guide run on the sample log dir and print what the page says;
* ``mkdocs build --strict`` passes, and fails on a link to a missing page or anchor.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_segments_ds import fs as kfs
from kafka_segments_ds.cli import build_parser
from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.options import (
    CONSUMER_ISOLATION_LEVEL,
    KAFKA_SOURCE_ONLY_OPTIONS,
    READ_OPTIONS,
    STREAM_OPTIONS,
)
from kafka_segments_ds.writer.options import PRODUCER_SETTINGS, WRITE_OPTIONS
from kafka_segments_ds.writer.sink import SINK_OPTIONS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HAVE_MKDOCS = importlib.util.find_spec("mkdocs") is not None


def _code_names(page: str) -> set[str]:
    """Every `code span` of a docs page, lower-cased (option names are case-insensitive)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return {span.lower() for span in re.findall(r"`([^`\n]+)`", text)}


def _s3_option_names() -> list[str]:
    """The ``fs.s3.*`` names the storage layer accepts, as its error for an unknown one lists."""
    with pytest.raises(InvalidOptionError) as err:
        kfs.resolve("s3://bucket/key", {"fs.s3.no-such-option": "1"})
    known = str(err.value).split("known: ", 1)[1]
    return [name.strip() for name in known.split(",")]


def test_every_option_is_documented() -> None:
    documented = _code_names("options.md")
    accepted = [
        *READ_OPTIONS.values(),
        *STREAM_OPTIONS.values(),
        *KAFKA_SOURCE_ONLY_OPTIONS,
        CONSUMER_ISOLATION_LEVEL,
        *WRITE_OPTIONS.values(),
        *PRODUCER_SETTINGS,
        *SINK_OPTIONS.values(),
        "kafka.compression.<codec>.level",
        *_s3_option_names(),
    ]
    assert len(accepted) > 50
    missing = sorted({name for name in accepted if name.lower() not in documented})
    assert missing == [], f"options missing from docs/options.md: {missing}"


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


def test_every_cli_flag_is_documented() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^## (\S+)$", text, re.MULTILINE))
    commands = _subcommands()
    assert set(commands) == {
        "dump", "verify", "stats", "rebuild-index", "recover", "schemas", "restore", "erase",
        "compact",
    }  # fmt: skip
    assert set(commands) <= headings
    documented = _code_names("cli.md")
    missing = [
        f"{name} {flag}"
        for name, sub in commands.items()
        for action in sub._actions
        for flag in action.option_strings
        if flag.lower() not in documented
        and not any(span.startswith(flag.lower() + " ") for span in documented)
    ]
    missing += [
        f"{name} {action.option_strings[0]} choice {choice}"
        for name, sub in commands.items()
        for action in sub._actions
        for choice in action.choices or ()
        if not re.search(rf"\b{re.escape(str(choice))}\b", text)
    ]
    assert missing == [], f"flags missing from docs/cli.md: {missing}"


def _python_blocks(page: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def _skip_reason(block: str) -> str | None:
    if re.search(r"\bspark\.", block):
        return "needs a SparkSession"
    if "s3://" in block:
        return "needs a bucket"
    for module in re.findall(r"^(?:from|import) (\w+)", block, re.MULTILINE):
        if importlib.util.find_spec(module) is None:
            return f"needs {module}"
    return None


@pytest.mark.parametrize("page", ["index.md", "recipes.md"])
def test_examples_run_and_print_what_the_page_says(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of a page run in order in one namespace, in an empty directory: the page's first
    block writes demo-data (the sample ``scripts/demo.sh`` writes) with ``write_sample_log_dir``.
    ``print(...)   # text`` must print exactly ``text``."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    ran = checked = 0
    for number, block in enumerate(_python_blocks(page)):
        if _skip_reason(block):
            continue
        expected = re.findall(r"^\s*print\(.*\)\s+# (.+)$", block, re.MULTILINE)
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(block, f"{page} block {number}", "exec"), namespace)
        except ModuleNotFoundError as err:  # an optional extra of a third-party package
            if (err.name or "").startswith("kafka_segments_ds"):
                raise
            continue
        assert out.getvalue().splitlines() == expected, f"{page} block {number}"
        ran += 1
        checked += len(expected)
    assert ran >= (3 if page == "index.md" else 7)
    assert checked >= (0 if page == "index.md" else 6)


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(not HAVE_MKDOCS, reason="mkdocs is not installed (pip install '.[test]')")
def test_guide_builds_strict(tmp_path: Path) -> None:
    built = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "FORMAT" / "index.html").is_file()


@pytest.mark.skipif(not HAVE_MKDOCS, reason="mkdocs is not installed (pip install '.[test]')")
def test_guide_build_fails_on_broken_links(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with (tmp_path / "docs" / "index.md").open("a", encoding="utf-8") as page:
        page.write("\n[a](options.md#no-such-section) [b](no-such-page.md)\n")
    built = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    for reported in ("no-such-section", "no-such-page.md"):
        assert reported in built.stdout + built.stderr
