#!/usr/bin/env bash
# Quick start 2: set up and run the whole test suite (every marker) on the newest pyspark, then
# the non-Spark tests again on the pure-Python kernels (the fallback when the compiled extension
# cannot load; the broker tests, the benchmark smoke runs and the long fuzz run run once, in the
# first pass), then the Spark tests on older supported pyspark releases (scripts/spark_matrix.sh).
# Before the tests, the static checks (ruff check, ruff format --check, mypy --strict as
# configured in pyproject.toml; also in .pre-commit-config.yaml): any finding fails the run.
# Extra args go to pytest; naming tests (any argument not starting with '-') skips the checks
# and runs only the first pass, as KSD_SPARK_MATRIX=0 does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
matrix="${KSD_SPARK_MATRIX:-1}"
checks=1
for arg in "$@"; do
    case "$arg" in -*) ;; *) matrix=0 checks=0 ;; esac
done
status=0
if [ "$checks" = 1 ]; then
    .venv/bin/ruff check . || status=$?  # every Python file git does not ignore
    .venv/bin/ruff format --check . || status=$?
    .venv/bin/mypy || status=$?  # the files and strict = true of [tool.mypy]
fi
.venv/bin/python -m pytest -p no:cacheprovider "$@" || status=$?
if [ "$matrix" = 1 ]; then
    # the 3000-input fuzz run once, on the compiled kernels (80 s here); the short one runs here
    KAFKA_SEGMENTS_DS_PURE_PYTHON=1 .venv/bin/python -m pytest -p no:cacheprovider \
        -m "not spark and not broker and not bench" --ignore=tests/test_packaging.py \
        --deselect tests/fuzz/test_fuzz.py::test_longer_fuzz_run "$@" || status=$?
    bash scripts/spark_matrix.sh "$@" || status=$?
fi
exit "$status"
