"""Drive the fuzzer: inputs go to a worker process that is killed when one overruns its time.

Long run (reports inputs, inputs/minute, failures, peak memory)::

    .venv/bin/python -m tests.fuzz.run --minutes 30 [--seed N] [--jobs N] [--save DIR]

``--jobs N`` judges inputs on N worker processes at once (one per core).

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
# The bound counts the worker's CPU seconds, so a loaded machine (CI beside other jobs) does
# not turn a slow input into a "hang"; a worker blocked without using CPU is a hang after this
# many times the bound in wall-clock seconds.
BLOCKED_FACTOR = 10
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
    jobs: int = 1

    @property
    def per_minute(self) -> float:
        return 60 * self.inputs / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        lines = [
            f"inputs: {self.inputs} in {self.seconds:.0f} s ({self.per_minute:.0f}/minute, "
            f"{self.jobs} worker processes)",
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
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout
        self.number = 0  # the input it judges
        self.started = 0.0  # when it was given that input
        self.cpu_started: float | None = None  # its CPU seconds then
        with selectors.DefaultSelector() as selector:
            selector.register(self.stdout, selectors.EVENT_READ)
            ready = self.receive() if selector.select(120.0) else None  # imports, kernels
        if ready is None or not ready.get("ready"):
            self.close()
            raise RuntimeError(f"fuzz worker did not start: {ready}")

    def cpu_seconds(self) -> float | None:
        """The worker's CPU time so far (user + system), or None where /proc cannot tell."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def overran(self, timeout: float, now: float) -> bool:
        """Whether the input it judges has taken more than ``timeout`` CPU seconds (or, with
        no CPU time to read, wall seconds), or ``BLOCKED_FACTOR`` times that in wall seconds."""
        if now - self.started > BLOCKED_FACTOR * timeout:
            return True
        used = self.cpu_seconds()
        if used is None or self.cpu_started is None:
            return now - self.started > timeout
        return used - self.cpu_started > timeout

    def send(self, run_seed: int, number: int) -> None:
        assert self.proc.stdin is not None
        self.number, self.started = number, time.monotonic()
        self.cpu_started = self.cpu_seconds()
        self.proc.stdin.write(f"{run_seed} {number}\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, object] | None:
        """The answer waiting on its output (None: the worker died)."""
        line = self.stdout.readline()
        return json.loads(line) if line else None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _record(report: Report, run_seed: int, number: int, verdict: dict[str, object]) -> None:
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


def fuzz(
    run_seed: int,
    *,
    count: int | None = None,
    minutes: float | None = None,
    start: int = 1,
    timeout: float = INPUT_SECONDS,
    progress: bool = False,
    jobs: int = 1,
) -> Report:
    """Judge inputs ``start, start + 1, ...`` of run ``run_seed`` until ``count`` inputs or
    ``minutes`` have passed, on ``jobs`` worker processes (each input on one of them; a
    worker that overruns ``timeout`` on an input, or dies, is replaced)."""
    report = Report(jobs=jobs)
    began = time.monotonic()
    deadline = None if minutes is None else began + 60 * minutes
    number = start
    last_note = began
    shown = 0  # failures printed with the progress lines
    selector = selectors.DefaultSelector()
    busy: dict[int, _Worker] = {}  # by output file descriptor

    def give(worker: _Worker) -> None:
        nonlocal number
        given = number - start
        if (count is None or given < count) and (deadline is None or time.monotonic() < deadline):
            worker.send(run_seed, number)
            number += 1
            busy[worker.stdout.fileno()] = worker
            selector.register(worker.stdout, selectors.EVENT_READ)
        else:
            worker.close()

    def retire(worker: _Worker, problem: str | None) -> None:
        del busy[worker.stdout.fileno()]
        selector.unregister(worker.stdout)
        if problem is not None:
            report.failures.append({"seed": run_seed, "number": worker.number, "problem": problem})
            report.inputs += 1
            worker.close()

    try:
        for _ in range(max(1, jobs)):
            give(_Worker())
        while busy:
            now = time.monotonic()
            wait = min(1.0, min(w.started + timeout for w in busy.values()) - now)
            for key, _ in selector.select(max(wait, 0.0)):
                worker = busy[key.fd]
                verdict = worker.receive()
                if verdict is None:
                    retire(worker, "died")
                    give(_Worker())
                    continue
                retire(worker, None)
                _record(report, run_seed, worker.number, verdict)
                report.inputs += 1
                give(worker)
            now = time.monotonic()
            for worker in [w for w in busy.values() if w.overran(timeout, now)]:
                retire(worker, "hang")
                give(_Worker())
            if progress and now - last_note > 60:
                last_note = now
                print(f"... {report.inputs} inputs, {len(report.failures)} failures", flush=True)
                for failure in report.failures[shown:]:
                    print(f"failure {failure['seed']}:{failure['number']}", flush=True)
                shown = len(report.failures)
    finally:
        for worker in busy.values():
            worker.close()
        selector.close()
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
    parser.add_argument("--jobs", type=int, default=1, help="worker processes in parallel")
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
        jobs=args.jobs,
    )
    print(report.summary())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
