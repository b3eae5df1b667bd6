"""The release artefacts: the wheel and sdist ``scripts/build_wheel.sh`` makes, what they hold,
and the wheel installed as users install it: with no pyspark (the Arrow API and the CLI), and
beside a pyspark a platform installed first (left untouched).

The wheel is built once per session (the ``dist`` fixture of tests/conftest.py: ``python -m
build`` + ``auditwheel repair``, a minute or more: the kernels compile) unless ``KSD_DIST`` names
a directory it was built into. The venvs install from pip's cache with no compiler:
``CC=/bin/false`` and binary packages only, so nothing can be built.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tarfile
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from tests.release import run_checked

ROOT = Path(__file__).resolve().parent.parent


def _no_build_env() -> dict[str, str]:
    """An environment in which no C extension can be compiled (a machine with no compiler)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(CC="/bin/false", CXX="/bin/false", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _venv(path: Path) -> Path:
    run_checked([sys.executable, "-m", "venv", path])
    return path / "bin" / "python"


def _pip_install(python: Path, *args: str | Path, binary_only: bool = True) -> str:
    """pip install, binary packages only by default (a source package would need a build)."""
    only = ["--only-binary", ":all:"] if binary_only else []
    return run_checked([python, "-m", "pip", "install", *only, *args], env=_no_build_env()).stdout


@pytest.mark.slow
def test_wheel_is_manylinux_and_holds_the_package_only(wheel: Path) -> None:
    assert re.fullmatch(
        r"kafka_segments_ds-0\.1\.0-cp(\d+)-cp\1-manylinux\w+_x86_64(\.manylinux\w+_x86_64)*\.whl",
        wheel.name,
    ), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {
        "kafka_segments_ds",
        "pyspark_kafkasegments",
        "kafka_segments_ds-0.1.0.dist-info",
    }, tops
    assert "kafka_segments_ds/py.typed" in names
    assert not [n for n in names if n.endswith(".c")]  # Cython's generated C
    assert not [n for n in names if "tests/" in n or "/test_" in n or "conftest" in n]
    compiled = sorted(n.rsplit("/", 1)[1].split(".")[0] for n in names if n.endswith(".so"))
    assert compiled == ["_crc", "_encoder", "_jsonl", "_kernels", "_legacy"]
    # auditwheel grafted no library: the kernels need nothing beyond the C library
    assert not [n for n in names if ".libs/" in n]


@pytest.mark.slow
def test_wheel_metadata_makes_pyspark_an_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read("kafka_segments_ds-0.1.0.dist-info/METADATA").decode()
    requires = [
        line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Requires-Dist: ")
    ]
    spark = [r for r in requires if r.startswith("pyspark")]
    assert 'pyspark>=4.0; extra == "spark"' in spark
    # every other mention of pyspark belongs to an extra (no upper bound, none in the base)
    assert all("extra ==" in r for r in spark), spark
    assert not [r for r in spark if "<" in r.split(";")[0]], spark
    assert "Provides-Extra: spark" in text.splitlines()


@pytest.mark.slow
def test_sdist_holds_the_kernel_sources_not_generated_c(dist: Path) -> None:
    sdists = list(dist.glob("*.tar.gz"))
    assert [s.name for s in sdists] == ["kafka_segments_ds-0.1.0.tar.gz"]
    with tarfile.open(sdists[0]) as archive:
        names = [n.split("/", 1)[1] for n in archive.getnames() if "/" in n]
    for source in (
        "setup.py",
        "pyproject.toml",
        "kafka_segments_ds/py.typed",
        "kafka_segments_ds/records/_kernels.pyx",
        "kafka_segments_ds/records/_crc32c.h",
        "kafka_segments_ds/cli/_jsonl.pyx",
    ):
        assert source in names, source
    assert not [n for n in names if n.endswith((".c", ".so"))]


@pytest.fixture(scope="session")
def base_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and its base dependencies only (no pyspark), no compiler."""
    python = _venv(tmp_path_factory.mktemp("base-venv") / "venv")
    _pip_install(python, wheel)
    return python


BASE_SCRIPT = """
import json, subprocess, sys
import kafka_segments_ds as ksd
from kafka_segments_ds.records import kernels
from kafka_segments_ds.samples import write_sample_log_dir

log_dir = write_sample_log_dir(sys.argv[1], records_per_partition=20)
table = ksd.read_table(log_dir, subscribe="orders")
ksd.write_table(table.select(["key", "value"]), sys.argv[2], topic="copy")
copied = ksd.read_table(sys.argv[2])
errors = {}
try:
    ksd.register(None)
except ImportError as err:
    errors["register"] = [type(err).__name__, str(err)]
try:
    import pyspark_kafkasegments
except ImportError as err:
    errors["auto"] = [type(err).__name__, str(err)]
print(json.dumps({
    "rows": table.num_rows,
    "copied": copied.column("value").to_pylist() == table.column("value").to_pylist(),
    "compiled": kernels.COMPILED,
    "errors": errors,
    "spark_loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j")),
}))
"""

NO_PYSPARK = (
    "the kafkasegments Spark data source needs pyspark 4.0 or later, which is not installed: "
    "pip install 'kafka-segments-ds[spark]' (or use the pyspark 4.0+ your platform provides)"
)


@pytest.mark.slow
def test_base_install_reads_writes_and_runs_the_cli_without_pyspark(
    base_venv: Path, tmp_path: Path
) -> None:
    listing = run_checked([base_venv, "-m", "pip", "list", "--format", "json"]).stdout
    installed = {p["name"].lower() for p in json.loads(listing)}
    assert "kafka-segments-ds" in installed
    assert not installed & {"pyspark", "py4j", "pandas", "cython"}, installed
    out = run_checked(
        [base_venv, "-c", BASE_SCRIPT, tmp_path / "logs", tmp_path / "copy"], cwd=tmp_path
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {
        "rows": 40,
        "copied": True,
        "compiled": True,
        "errors": {
            "register": ["ModuleNotFoundError", NO_PYSPARK],
            "auto": [
                "ModuleNotFoundError",
                "the kafkasegments Spark data source needs pyspark 4.0 or later: pip install "
                "'kafka-segments-ds[spark]' (or use the pyspark 4.0+ your platform provides)",
            ],
        },
        "spark_loaded": [],
    }
    cli = base_venv.parent / "kafka-segments"
    stats = run_checked([cli, "stats", tmp_path / "logs"], cwd=tmp_path).stdout
    assert "orders" in stats
    dump = run_checked(
        [cli, "dump", tmp_path / "logs" / "orders-0", "--format", "jsonl"], cwd=tmp_path
    ).stdout.splitlines()
    assert [json.loads(line)["offset"] for line in dump] == list(range(20))


def _record(python: Path, name: str) -> dict[str, tuple[int, int]]:
    """Every file of an installed distribution (its RECORD) with size and mtime."""
    out = run_checked(
        [
            python,
            "-c",
            "import json, os, sys\n"
            "from importlib import metadata\n"
            "d = metadata.distribution(sys.argv[1])\n"
            "files = {}\n"
            "for f in d.files:\n"
            "    s = os.stat(f.locate())\n"
            "    files[str(f)] = [s.st_size, s.st_mtime_ns]\n"
            "print(json.dumps({'version': d.version, 'files': files}))",
            name,
        ]
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def platform_pyspark() -> str:
    """The pyspark release to install as the platform's: the one this suite runs on (in pip's
    cache already)."""
    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        pytest.skip("pyspark is not installed here (it is in the test extra)")


@pytest.mark.slow
def test_install_beside_the_platform_pyspark_leaves_it_untouched(
    wheel: Path, tmp_path: Path, platform_pyspark: str
) -> None:
    """pyspark installed first, as Databricks / EMR / Dataproc images carry it; then the
    package, and then its [spark] extra: pip keeps that pyspark (same version, same files)."""
    python = _venv(tmp_path / "venv")
    # PyPI has pyspark as an sdist only (pure Python: its wheel is in pip's cache)
    _pip_install(python, "--no-deps", f"pyspark=={platform_pyspark}", binary_only=False)
    before = _record(python, "pyspark")
    assert before["version"] == platform_pyspark
    for requirement in (str(wheel), f"{wheel}[spark]"):
        log = _pip_install(python, requirement)
        assert _record(python, "pyspark") == before, requirement  # not rewritten
        assert "pyspark" not in log.split("Successfully installed", 1)[-1], log
    out = run_checked([python, "-c", "import pyspark_kafkasegments, kafka_segments_ds.datasource"])
    assert out.returncode == 0


SPARKLESS_USE = """
import json, sys, tempfile
import kafka_segments_ds as ksd
from kafka_segments_ds.cli import main
from kafka_segments_ds.samples import write_sample_log_dir

log_dir = write_sample_log_dir(tempfile.mkdtemp(), records_per_partition=20)
table = ksd.read_table(log_dir)
list(ksd.iter_batches(log_dir))
ksd.write_table(table.select(["key", "value"]), f"{log_dir}/copy", topic="copy")
for command in (["stats", str(log_dir)], ["verify", str(log_dir)], ["dump", str(log_dir)]):
    try:
        main([*command, "--quiet"])
    except SystemExit as exit:
        assert not exit.code, exit.code
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j"))))
"""


def test_arrow_api_and_cli_never_import_pyspark(tmp_path: Path) -> None:
    """With pyspark installed (as here), reads, writes and the CLI still load none of it: only
    the Spark entry points do (``python -X importtime`` showed it; this keeps it so)."""
    out = run_checked([sys.executable, "-c", SPARKLESS_USE], cwd=tmp_path)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
