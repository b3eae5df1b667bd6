#!/usr/bin/env bash
# Quick start 2: set up and run the whole test suite (every marker) on the newest pyspark, then
# the non-Spark tests again on the pure-Python kernels (the fallback when the compiled extension
# cannot load; the broker tests run once, in the first pass), then the Spark tests on older supported pyspark releases (scripts/spark_matrix.sh).
# Extra args go to pytest; naming tests (any argument not starting with '-') or
# KSD_SPARK_MATRIX=0 runs only the first pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
matrix="${KSD_SPARK_MATRIX:-1}"
for arg in "$@"; do
    case "$arg" in -*) ;; *) matrix=0 ;; esac
done
status=0
.venv/bin/python -m pytest -p no:cacheprovider "$@" || status=$?
if [ "$matrix" = 1 ]; then
    KAFKA_SEGMENTS_DS_PURE_PYTHON=1 .venv/bin/python -m pytest -p no:cacheprovider \
        -m "not spark and not broker and not bench" --ignore=tests/test_packaging.py "$@" \
        || status=$?
    bash scripts/spark_matrix.sh "$@" || status=$?
fi
exit "$status"
