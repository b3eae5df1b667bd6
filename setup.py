"""Build of the compiled kernels (Cython -> C extensions); the metadata is in pyproject.toml.

``pip install .`` / ``pip install -e .`` / ``pip wheel .`` run this with Cython from
``[build-system] requires``. After editing a .pyx, run ``pip install -e .`` again (or
``python setup.py build_ext --inplace``) to rebuild.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

# -O3 lets gcc vectorise the byte loops; -g0 keeps the modules small (no debug info); no -march:
# a wheel must run on any x86-64 (the CRC kernel picks its SSE 4.2 path at run time through CPU
# detection).
COMPILE_ARGS = [] if sys.platform == "win32" else ["-O3", "-g0"]
RECORDS = "kafka_segments_ds/records"


def _extension(name: str, source: str, depends: tuple[str, ...] = ()) -> Extension:
    return Extension(
        name,
        [source],
        include_dirs=[RECORDS],
        depends=list(depends),
        extra_compile_args=COMPILE_ARGS,
    )


EXTENSIONS = [
    _extension(
        "kafka_segments_ds.records._crc",
        f"{RECORDS}/_crc.pyx",
        (f"{RECORDS}/_crc32c.h", f"{RECORDS}/_crc32c.pxd"),
    ),
    _extension(
        "kafka_segments_ds.records._kernels",
        f"{RECORDS}/_kernels.pyx",
        (f"{RECORDS}/_bytes.pxd", f"{RECORDS}/_gather.h"),
    ),
    _extension(
        "kafka_segments_ds.records._legacy", f"{RECORDS}/_legacy.pyx", (f"{RECORDS}/_bytes.pxd",)
    ),
    _extension(
        "kafka_segments_ds.records._encoder",
        f"{RECORDS}/_encoder.pyx",
        (f"{RECORDS}/_crc32c.h", f"{RECORDS}/_crc32c.pxd", f"{RECORDS}/_bytes.pxd"),
    ),
    _extension(
        "kafka_segments_ds.cli._jsonl",
        "kafka_segments_ds/cli/_jsonl.pyx",
        (f"{RECORDS}/_bytes.pxd",),
    ),
]


def _built_in_place() -> bool:
    """Whether every kernel is already compiled in this tree for this interpreter (an in-place
    build: ``pip install -e .`` or ``build_ext --inplace`` by a venv of the same Python)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return all(Path(e.name.replace(".", "/") + suffix).is_file() for e in EXTENSIONS)


# KAFKA_SEGMENTS_DS_REUSE_INPLACE_KERNELS=1: an editable install into another venv of the same
# Python reuses the kernels an earlier editable install compiled into this tree instead of
# compiling them again (scripts/spark_matrix.sh: three venvs, a minute and a half each). Only
# when all of them are here; the venv's own check (kernels.COMPILED) proves they load. Not for
# wheels: a wheel built with it would hold no kernels.
REUSE = os.environ.get("KAFKA_SEGMENTS_DS_REUSE_INPLACE_KERNELS") == "1" and _built_in_place()

setup(
    ext_modules=[]
    if REUSE
    else cythonize(
        EXTENSIONS,
        compiler_directives={"language_level": "3"},
        include_path=["."],
    )
)
