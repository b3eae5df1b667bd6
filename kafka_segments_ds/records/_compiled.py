"""Loads the compiled kernels (Cython extensions), or says once why the pure-Python ones run.

``KAFKA_SEGMENTS_DS_PURE_PYTHON=1`` forces the pure-Python kernels (tests run both paths).
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

PURE_PYTHON_ENV = "KAFKA_SEGMENTS_DS_PURE_PYTHON"
_warned = False


def pure_python_forced() -> bool:
    """True when the environment asks for the pure-Python kernels."""
    return os.environ.get(PURE_PYTHON_ENV, "").strip() not in ("", "0")


def load(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None (pure-Python fallback) with one warning per process
    naming the import error."""
    global _warned
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(name)
    except ImportError as err:
        if not _warned:
            _warned = True
            warnings.warn(
                f"kafka_segments_ds: the compiled kernels did not load ({type(err).__name__}: "
                f"{err}); using the pure-Python kernels, which are correct but 100x slower. "
                "Reinstall the package where a C compiler is available (pip install --force-"
                "reinstall --no-binary kafka-segments-ds kafka-segments-ds) to build them.",
                RuntimeWarning,
                stacklevel=3,
            )
        return None
