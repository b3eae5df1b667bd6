#!/usr/bin/env bash
# Put this checkout on the sys.path of the venv given ($1): a .pth file in its site-packages.
# Spark looks up Python data sources by listing top-level modules (pkgutil.iter_modules over
# sys.path); an editable install (pip install -e .) imports the package through a hook that
# listing does not see. The file stays if the package is uninstalled: delete it by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
printf '%s\n' "$PWD" > "$site/kafka_segments_ds_checkout.pth"
"$1/bin/python" - <<'PY'
import pkgutil
import sys

if "pyspark_kafkasegments" not in {m.name for m in pkgutil.iter_modules()}:
    sys.exit("pyspark_kafkasegments is not listed by pkgutil.iter_modules(): Spark would not find it")
PY
