#!/usr/bin/env bash
# The Spark tests (tests/spark: read, write, streaming, registration, Connect, local-cluster)
# again on the older supported pyspark minor releases, each in its own venv
# (.venv-spark<major><minor>): the package installed as scripts/setup.sh installs it into .venv,
# with pyspark pinned. .venv holds the newest (4.3.x). Extra args go to pytest.
#
# The releases in PYSPARK_FULL (default: the first of PYSPARK_VERSIONS, the oldest) run all of
# tests/spark, as .venv does for the newest (4.3.x); the others run the tests marked spark_matrix
# (each Spark surface once: registration, errors, Connect, local-cluster, streaming restarts,
# writes, the pushdown canary), which keeps CI under 45 minutes. On the 2-core CI machine a whole pass of tests/spark
# takes 5.5-7 minutes, the spark_matrix tests about 2.
set -euo pipefail
cd "$(dirname "$0")/.."
# the newest patch release of each minor release below the newest
PYSPARK_VERSIONS="${PYSPARK_VERSIONS:-4.0.5 4.1.4 4.2.1}"
PYSPARK_FULL="${PYSPARK_FULL:-${PYSPARK_VERSIONS%% *}}"
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
    # The kernels scripts/setup.sh compiled into this tree serve every venv of the same Python:
    # no second build (setup.py), and the check below proves they load here. The .pyc files are
    # written on every core (pip writes them one at a time: 30 s a venv, 18 s this way).
    KAFKA_SEGMENTS_DS_REUSE_INPLACE_KERNELS=1 "${PIP[@]}" install --no-compile \
        -e ".[spark,test,tiered]" "pyspark==$version"
    bash scripts/compile_venv.sh "$VENV"
    bash scripts/checkout_on_path.sh "$VENV"
    bash scripts/kernels_load.sh "$VENV"
    "$VENV/bin/python" - "$version" <<'PY'
import sys

import pyspark

if pyspark.__version__ != sys.argv[1]:
    sys.exit(f"{sys.argv[1]} wanted, pyspark {pyspark.__version__} installed")
print(f"Spark tests on pyspark {pyspark.__version__}")
PY
    select=()
    case " $PYSPARK_FULL " in
        *" $version "*) ;;
        *) select=(-m spark_matrix) ;;
    esac
    "$VENV/bin/python" -m pytest -p no:cacheprovider tests/spark "${select[@]}" "$@" || status=$?
done
exit $status
