#!/usr/bin/env bash
# Quick start 1: set up, generate a sample broker-like log dir, decode it and print a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/demo.py "${1:-demo-data}"
