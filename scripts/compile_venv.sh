#!/usr/bin/env bash
# Write the .pyc files of everything installed in the venv given ($1), on every core: what pip
# does after an install, one file at a time, unless told --no-compile. Without them each process
# compiles what it imports (pyspark, pandas, pyarrow: seconds a process) when the environment
# sets PYTHONDONTWRITEBYTECODE. A file that does not compile (a package's Python 2 test data)
# is skipped, as pip skips it.
set -euo pipefail
site="$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
"$1/bin/python" -m compileall -q -j 0 "$site" > /dev/null 2>&1 || true
