#!/usr/bin/env bash
# Quick start 2: set up and run the whole test suite (every marker). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
