#!/usr/bin/env bash
# Quick start 2: set up and run the whole test suite (every marker) on the newest pyspark, then
# the Spark tests on the oldest supported one (scripts/spark_matrix.sh). Extra args go to pytest;
# naming tests (any argument not starting with '-') or KSD_SPARK_MATRIX=0 skips the second run.
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
    bash scripts/spark_matrix.sh "$@" || status=$?
fi
exit "$status"
