#!/usr/bin/env bash
# The Spark tests (tests/spark: read, write, registration, Connect, local-cluster) again on
# older supported pyspark releases, each in its own venv: the package installed as
# scripts/setup.sh installs it into .venv, with pyspark pinned. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# the oldest release pyproject.toml's pyspark range admits, and the middle minor release
# (.venv holds the newest): each in its own venv, .venv-spark<major><minor>
PYSPARK_VERSIONS="${PYSPARK_VERSIONS:-4.1.0 4.2.1}"
PYTHON="${PYTHON:-python3}"
status=0
for version in $PYSPARK_VERSIONS; do
    minor="${version%.*}"
    VENV=".venv-spark${minor//./}"
    if [ ! -x "$VENV/bin/python" ]; then
        "$PYTHON" -m venv "$VENV"
    fi
    PIP=("$VENV/bin/python" -m pip --quiet --disable-pip-version-check)
    "${PIP[@]}" install --upgrade pip
    "${PIP[@]}" install -e ".[test,tiered]" "pyspark==$version" --config-settings editable_mode=compat
    "$VENV/bin/python" - "$version" <<'PY'
import sys

import pyspark

if pyspark.__version__ != sys.argv[1]:
    sys.exit(f"{sys.argv[1]} wanted, pyspark {pyspark.__version__} installed")
print(f"Spark tests on pyspark {pyspark.__version__}")
PY
    "$VENV/bin/python" -m pytest -p no:cacheprovider tests/spark "$@" || status=$?
done
exit $status
