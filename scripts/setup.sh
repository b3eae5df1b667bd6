#!/usr/bin/env bash
# Create .venv (if missing) and install the package with its test extra. Idempotent.
# The install compiles the Cython kernels (needs a C compiler); run it again after editing a
# .pyx/.pxd/.h to rebuild them in place.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
# The editable install builds in a temp dir; this leaves the extensions next to their sources,
# rebuilding only what changed (and says so if the build fails, rather than running slowly).
.venv/bin/python -m pip install --quiet --disable-pip-version-check "Cython>=3.0"
.venv/bin/python setup.py --quiet build_ext --inplace
.venv/bin/python -c "from kafka_segments_ds.records import kernels; assert kernels.COMPILED"
