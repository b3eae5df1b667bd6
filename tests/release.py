"""Running the release tooling from tests: ``scripts/build_wheel.sh``, pip, fresh venvs and
what they installed (tests/test_packaging.py, and the ``dist`` fixture of tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

INSTALL_TIMEOUT_S = 900


def run_checked(args: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``args`` to completion (no stdin), failing with the end of its output unless it
    exits 0."""
    # the installed wheel runs its compiled kernels, whatever path the suite itself tests
    env = dict(kwargs.pop("env", os.environ))  # type: ignore[call-overload]
    env.pop("KAFKA_SEGMENTS_DS_PURE_PYTHON", None)
    kwargs["env"] = env
    done = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
        **kwargs,  # type: ignore[arg-type]
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited {done.returncode}\n--- stdout\n"
            f"{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-6000:]}"
        )
    return done
