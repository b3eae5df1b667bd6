#!/usr/bin/env bash
# Create .venv (if missing) and install the package with its spark, test, tiered and schemas
# extras, and the dev extra (ruff and mypy, the checks scripts/test.sh runs).
# Idempotent.
# The install compiles the Cython kernels (needs a C compiler); run it again after editing a
# .pyx/.pxd/.h to rebuild them.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
# --no-compile: pip writes the .pyc files one at a time; scripts/compile_venv.sh uses every core
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile \
    -e ".[spark,test,tiered,schemas,dev]"
bash scripts/compile_venv.sh .venv
# Spark finds the data source by listing top-level modules (pkgutil.iter_modules), which the
# import hook of an editable install hides: a .pth file puts the checkout itself on sys.path (what
# setuptools' compat editable mode did; setuptools deprecates that mode).
bash scripts/checkout_on_path.sh .venv
# The editable install leaves the compiled kernels next to their sources; fail here if they do not
# load rather than let everything run on the (slow) pure-Python kernels.
bash scripts/kernels_load.sh .venv
