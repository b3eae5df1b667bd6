"""The checks that run by themselves: the static checks of scripts/test.sh are the pre-commit
hooks, and CI (CI=true) runs hypothesis on its deterministic, bounded profile."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHECKS = [".venv/bin/ruff check", ".venv/bin/ruff format --check", ".venv/bin/mypy"]


def test_pre_commit_hooks_are_the_checks_of_test_sh() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert [hook["entry"] for hook in hooks] == CHECKS
    script = (ROOT / "scripts" / "test.sh").read_text()
    assert all(check in script for check in CHECKS)
    project = (ROOT / "pyproject.toml").read_text()
    assert "[tool.mypy]\n" in project and "\nstrict = true\n" in project
    # pinned in the dev extra, which scripts/setup.sh installs
    dev = project.split("\ndev = [\n", 1)[1].split("]", 1)[0]
    assert sorted(re.findall(r'"(\w+)==[0-9.]+"', dev)) == ["mypy", "ruff"]
    assert "dev]" in (ROOT / "scripts" / "setup.sh").read_text()


def _profile(**env: str) -> list[object]:
    probe = (
        "import json\n"
        "import tests.conftest\n"
        "from hypothesis import settings\n"
        "s = settings.default\n"
        "print(json.dumps([settings._current_profile, s.derandomize, s.max_examples,"
        " s.deadline is None, s.database is None]))\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    result: list[object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_ci_loads_the_deterministic_hypothesis_profile() -> None:
    assert _profile(CI="true") == ["ci", True, 100, True, True]
    assert _profile(CI="true", HYPOTHESIS_PROFILE="dev")[0] == "dev"
    assert _profile()[:4] == ["dev", False, 100, True]
