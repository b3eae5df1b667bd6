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
    build: ``pip install -e .`` or ``build_ext --inplace`` by a venv of the same Python), and
    newer than each of its sources."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for extension in EXTENSIONS:
        built = Path(extension.name.replace(".", "/") + suffix)
        sources = [Path(f) for f in (*extension.sources, *extension.depends)]
        if not built.is_file() or any(
            f.stat().st_mtime > built.stat().st_mtime for f in sources if f.is_file()
        ):
            return False
    return True


# KAFKA_SEGMENTS_DS_REUSE_INPLACE_KERNELS=1: an editable install into another venv of the same
# Python reuses the kernels an earlier editable install compiled into this tree instead of
# translating and compiling them again (scripts/spark_matrix.sh: three venvs). Only when all of
# them are here and newer than their sources, and never for a command that builds binaries
# (a wheel would hold no kernels); the venv's own check (each kernel module's COMPILED) proves
# they load. pip runs this file for the build's requirements and metadata, then for
# editable_wheel.
REUSE = (
    os.environ.get("KAFKA_SEGMENTS_DS_REUSE_INPLACE_KERNELS") == "1"
    and not {"bdist_wheel", "bdist", "build", "build_ext", "install"} & set(sys.argv)
    and _built_in_place()
)

setup(
    ext_modules=[]
    if REUSE
    else cythonize(
        EXTENSIONS,
        compiler_directives={"language_level": "3"},
        include_path=["."],
    )
)
