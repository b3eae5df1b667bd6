"""Drive the fuzzer: inputs go to a worker process that is killed when one overruns its time.

Long run (reports inputs/minute, failures, peak memory)::

    .venv/bin/python -m tests.fuzz.run --minutes 30 [--seed N] [--save DIR]

A failure prints the run seed and input number; ``--replay SEED:NUMBER`` judges that one input
in this process (with a traceback) and ``--save`` writes the damaged log there.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

INPUT_SECONDS = 30.0  # per-input bound: a read of a few KiB that takes longer is a hang
RSS_GROWTH_BOUND_KIB = 192 * 1024  # per input, over the worker's resident size before it


@dataclass
class Report:
    inputs: int = 0
    seconds: float = 0.0
    failures: list[dict[str, object]] = field(default_factory=list)
    ops: Counter[str] = field(default_factory=Counter)
    targets: Counter[str] = field(default_factory=Counter)
    max_rss_peak_kib: int = 0
    max_rss_growth_kib: int = 0
    slowest: float = 0.0

    @property
    def per_minute(self) -> float:
        return 60 * self.inputs / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        lines = [
            f"inputs: {self.inputs} in {self.seconds:.0f} s ({self.per_minute:.0f}/minute)",
            f"failures: {len(self.failures)}",
            f"peak RSS: {self.max_rss_peak_kib / 1024:.0f} MiB; largest growth during one "
            f"input: {self.max_rss_growth_kib / 1024:.1f} MiB (bound "
            f"{RSS_GROWTH_BOUND_KIB / 1024:.0f} MiB); slowest input {self.slowest:.2f} s",
            "targets: " + ", ".join(f"{k} {v}" for k, v in sorted(self.targets.items())),
            "operators: " + ", ".join(f"{k} {v}" for k, v in sorted(self.ops.items())),
        ]
        lines.extend(json.dumps(failure, default=str)[:2000] for failure in self.failures[:20])
        return "\n".join(lines)


class _Worker:
    def __init__(self) -> None:
        package = __package__ or "tests.fuzz"
        root = Path(__file__).resolve().parents[len(package.split("."))]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
        env.setdefault("KAFKA_SEGMENTS_DS_THREADS", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"{package}.worker"],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        ready = self._answer(120.0)  # imports and kernel loading
        if ready is None or not ready.get("ready"):
            raise RuntimeError(f"fuzz worker did not start: {ready}")

    def _answer(self, timeout: float) -> dict[str, object] | None:
        if not self.selector.select(timeout):
            return None
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def ask(self, run_seed: int, number: int, timeout: float) -> dict[str, object] | None:
        """The verdict, or None when the worker hung or died on this input."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{run_seed} {number}\n")
        self.proc.stdin.flush()
        return self._answer(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.selector.close()


def fuzz(
    run_seed: int,
    *,
    count: int | None = None,
    minutes: float | None = None,
    start: int = 1,
    timeout: float = INPUT_SECONDS,
    progress: bool = False,
) -> Report:
    """Judge inputs ``start, start + 1, ...`` of run ``run_seed`` until ``count`` inputs or
    ``minutes`` have passed."""
    report = Report()
    began = time.monotonic()
    deadline = None if minutes is None else began + 60 * minutes
    worker = _Worker()
    number = start
    last_note = began
    try:
        while (count is None or report.inputs < count) and (
            deadline is None or time.monotonic() < deadline
        ):
            verdict = worker.ask(run_seed, number, timeout)
            if verdict is None:
                died = worker.proc.poll() is not None
                report.failures.append(
                    {"seed": run_seed, "number": number, "problem": "died" if died else "hang"}
                )
                worker.close()
                worker = _Worker()
            else:
                report.targets[str(verdict["target"])] += 1
                for op in verdict["ops"]:  # type: ignore[attr-defined]
                    report.ops[str(op).split(":")[0]] += 1
                peak, base = int(verdict["rss_peak_kib"]), int(verdict["rss_base_kib"])  # type: ignore[call-overload]
                report.max_rss_peak_kib = max(report.max_rss_peak_kib, peak)
                report.max_rss_growth_kib = max(report.max_rss_growth_kib, peak - base)
                report.slowest = max(report.slowest, float(verdict["seconds"]))  # type: ignore[arg-type]
                problems = list(verdict["complaints"])  # type: ignore[call-overload]
                if peak - base > RSS_GROWTH_BOUND_KIB:
                    problems.append(f"memory: RSS grew {(peak - base) // 1024} MiB")
                if problems:
                    report.failures.append(
                        {
                            "seed": run_seed,
                            "number": number,
                            "ops": verdict["ops"],
                            "from": verdict["seed"],
                            "problems": problems,
                        }
                    )
            report.inputs += 1
            number += 1
            if progress and time.monotonic() - last_note > 60:
                last_note = time.monotonic()
                report.seconds = last_note - began
                print(f"... {report.inputs} inputs, {len(report.failures)} failures", flush=True)
    finally:
        worker.close()
        report.seconds = time.monotonic() - began
    return report


def replay(run_seed: int, number: int, save: Path | None) -> None:
    import tempfile

    from .judge import make_input
    from .worker import judge

    spec = make_input(run_seed, number)
    if save is not None and spec["target"] == "log":
        save.mkdir(parents=True, exist_ok=True)
        target = save / f"fuzz-{run_seed}-{number}.log"
        target.write_bytes(spec["mutant"].data)
        print(f"wrote {target}")
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(judge(run_seed, number, Path(tmp)), indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--start", type=int, default=1, help="first input number")
    parser.add_argument("--timeout", type=float, default=INPUT_SECONDS)
    parser.add_argument("--replay", help="SEED:NUMBER of one input to judge in this process")
    parser.add_argument("--save", type=Path, help="write replayed inputs here")
    args = parser.parse_args(argv)
    if args.replay:
        seed, number = (int(x) for x in args.replay.split(":"))
        replay(seed, number, args.save)
        return 0
    if args.minutes is None and args.count is None:
        args.minutes = 1.0
    print(f"run seed {args.seed}", flush=True)
    report = fuzz(
        args.seed,
        count=args.count,
        minutes=args.minutes,
        start=args.start,
        timeout=args.timeout,
        progress=True,
    )
    print(report.summary())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
