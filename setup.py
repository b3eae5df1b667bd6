"""Build of the compiled kernels (Cython -> C extensions); the metadata is in pyproject.toml.

``pip install .`` / ``pip install -e .`` / ``pip wheel .`` run this with Cython from
``[build-system] requires``. After editing a .pyx, run ``pip install -e .`` again (or
``python setup.py build_ext --inplace``) to rebuild.
"""

from __future__ import annotations

import sys

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

setup(
    ext_modules=cythonize(
        EXTENSIONS,
        compiler_directives={"language_level": "3"},
        include_path=["."],
    )
)
