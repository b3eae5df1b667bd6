#!/usr/bin/env bash
# Fail unless every compiled kernel module loads in the venv given ($1): a module that cannot
# load its extension falls back to the (slow) pure-Python kernels with a RuntimeWarning, an error
# here.
set -euo pipefail
"$1/bin/python" -W error::RuntimeWarning - <<'PY'
from kafka_segments_ds.cli import jsonl_kernels
from kafka_segments_ds.records import crc_kernels, encoder, kernels, legacy_kernels

modules = (crc_kernels, encoder, kernels, legacy_kernels, jsonl_kernels)
missing = [m.__name__ for m in modules if not m.COMPILED]
if missing:
    raise SystemExit(f"compiled kernels not loaded: {', '.join(missing)}")
PY
