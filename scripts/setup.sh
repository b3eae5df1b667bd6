#!/usr/bin/env bash
# Create .venv (if missing) and install the package with its test extra. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
# compat mode puts the checkout itself on sys.path (a .pth entry): Spark finds the data source by
# listing top-level modules (pkgutil.iter_modules), which an import-hook editable install hides.
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]" \
    --config-settings editable_mode=compat
