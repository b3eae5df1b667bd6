"""The fuzz worker process: reads ``<run seed> <input number>`` lines, judges each input and
answers one JSON line (verdict, seconds, peak RSS). Run by :mod:`tests.fuzz.run`, which enforces
the per-input time bound by killing this process.

Peak RSS is measured per input: the kernel's high-water mark (VmHWM) is reset through
``/proc/self/clear_refs`` before each input and read after it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .judge import judge_index, judge_log, make_input


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # not Linux, or not allowed: the peak is then since process start
        pass


def judge(run_seed: int, number: int, workdir: Path, shapes: bool = True) -> dict[str, object]:
    spec = make_input(run_seed, number, shapes)
    if spec["target"] == "index":
        ops, complaints = judge_index(spec["seed"], spec["rng"], workdir)
        size = 0
    else:
        mutant = spec["mutant"]
        ops = mutant.ops
        size = len(mutant.data)
        complaints = judge_log(mutant, spec["options"], workdir)
    return {
        "seed": spec["seed"],
        "target": spec["target"],
        "ops": ops,
        "size": size,
        "complaints": complaints,
    }


def main() -> None:
    logging.disable(logging.CRITICAL)  # DROPMALFORMED logs every dropped entry
    # Each input rewrites its files: on a disk mounted with ``discard`` every truncation costs
    # milliseconds, a fifth of the campaign's time; a RAM-backed directory has no such cost.
    scratch = os.environ.get("KSD_FUZZ_TMP") or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    with tempfile.TemporaryDirectory(prefix="kafka-fuzz-", dir=scratch) as tmp:
        workdir = Path(tmp)
        judge(0, 0, workdir)  # warm up: load the compiled kernels before measuring
        print(json.dumps({"ready": True, "base_rss_kib": _status_kib("VmRSS")}), flush=True)
        for line in sys.stdin:
            run_seed, number = (int(x) for x in line.split())
            _reset_peak()
            base = _status_kib("VmRSS")
            start = time.perf_counter()
            try:
                verdict = judge(run_seed, number, workdir)
            except Exception:  # a bug of the fuzzer itself: report it, keep going
                verdict = {
                    "seed": "?",
                    "target": "?",
                    "ops": [],
                    "size": 0,
                    "complaints": ["fuzzer error:\n" + traceback.format_exc()],
                }
            verdict.update(
                number=number,
                seconds=time.perf_counter() - start,
                rss_base_kib=base,
                rss_peak_kib=_status_kib("VmHWM"),
            )
            print(json.dumps(verdict), flush=True)


if __name__ == "__main__":
    main()
