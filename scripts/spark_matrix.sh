#!/usr/bin/env bash
# The Spark tests (tests/spark: read, write, registration, Connect, local-cluster) again on the
# oldest supported pyspark, in .venv-spark41: the package installed as scripts/setup.sh installs
# it into .venv, with pyspark pinned. .venv holds the newest release. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# the oldest release pyproject.toml's pyspark range admits
PYSPARK_OLDEST="${PYSPARK_OLDEST:-4.1.0}"
VENV=.venv-spark41
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --quiet --disable-pip-version-check)
"${PIP[@]}" install --upgrade pip
"${PIP[@]}" install -e ".[test]" "pyspark==$PYSPARK_OLDEST" --config-settings editable_mode=compat
"$VENV/bin/python" - "$PYSPARK_OLDEST" <<'PY'
import sys

import pyspark

if pyspark.__version__ != sys.argv[1]:
    sys.exit(f"{sys.argv[1]} wanted, pyspark {pyspark.__version__} installed")
print(f"Spark tests on pyspark {pyspark.__version__}")
PY
exec "$VENV/bin/python" -m pytest -p no:cacheprovider tests/spark "$@"
