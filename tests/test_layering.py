"""Imports point down the stack (STYLE.md): a lower layer never imports a higher one.

records -> index/tail/layout/journal/fs -> options/schema -> planning -> reader/writer ->
streaming (a stream's driver side: it plans with planning, walks tails by the reader's damage
rules) -> datasource/cli. The reader never imports the writer nor the reverse; only
``datasource`` imports pyspark; ``pyspark_kafkasegments`` (imported by Spark at every data
source lookup) loads nothing heavy. Every import statement counts, also those inside functions.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kafka_segments_ds

PACKAGE = Path(kafka_segments_ds.__file__).parent
NAME = "kafka_segments_ds"

# bottom to top; a module may import its own layer and the layers below
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "records", "reporting"),
    ("index", "tail", "layout", "journal", "fs", "producer_snapshot", "internal_topics", "tiered"),
    ("options", "schema", "scan_task", "ranges", "selection"),
    ("planning", "transactions"),
    ("reader", "writer", "schemas"),
    ("streaming",),
    ("datasource", "cli", "rewrite", "samples", "__init__", "__main__"),
)
FORBIDDEN_SIDEWAYS = {("reader", "writer"), ("writer", "reader")}


def _unit(module: str) -> str:
    """The layering unit of a dotted module name inside the package (its first component)."""
    parts = module.split(".")
    assert parts[0] == NAME
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(unit: str) -> int:
    for i, names in enumerate(LAYERS):
        if unit in names:
            return i
    raise AssertionError(f"module unit {unit!r} is in no layer: add it to LAYERS")


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found.append((".".join(parts), path))
    return found


def _imports(module: str, path: Path) -> set[str]:
    """Dotted names of everything ``path`` imports (absolute, relative resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            # `from kafka_segments_ds import fs` imports the module kafka_segments_ds.fs
            out.update(
                f"{base}.{alias.name}"
                for alias in node.names
                if (PACKAGE.parent / base.replace(".", "/") / f"{alias.name}.py").exists()
                or (PACKAGE.parent / base.replace(".", "/") / alias.name).is_dir()
            )
    return out


def _violations() -> list[str]:
    bad = []
    for module, path in _modules():
        unit = _unit(module)
        for name in sorted(_imports(module, path)):
            top = name.split(".")[0]
            if top == "pyspark" and unit != "datasource":
                bad.append(f"{module} imports {name}: only datasource may import pyspark")
            if top != NAME or name == NAME:
                continue  # `from kafka_segments_ds import X`: X is resolved above
            target = _unit(name)
            if target == unit:
                continue
            if (unit, target) in FORBIDDEN_SIDEWAYS:
                bad.append(f"{module} imports {name}: the reader and the writer are separate")
            elif _layer(target) > _layer(unit):
                bad.append(f"{module} imports {name}, a higher layer")
    return bad


def test_imports_point_down_the_stack() -> None:
    assert _violations() == []


def test_every_module_is_placed() -> None:
    units = {_unit(m) for m, _ in _modules()}
    assert all(isinstance(_layer(u), int) for u in units)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: an upward, a sideways and a pyspark import are all found."""
    source = tmp_path / "x.py"
    source.write_text(
        "from kafka_segments_ds import reader\n"
        "def f():\n"
        "    from kafka_segments_ds.writer.commit import recover\n"
        "    import pyspark.sql\n"
    )
    names = _imports("kafka_segments_ds.planning", source)
    assert {
        "kafka_segments_ds",
        "kafka_segments_ds.reader",
        "kafka_segments_ds.writer.commit",
        "pyspark.sql",
    } <= names
    assert _layer(_unit("kafka_segments_ds.reader.task")) > _layer("planning")
    assert ("reader", "writer") in FORBIDDEN_SIDEWAYS


# numpy is not listed: pyspark and pyarrow import it anyway
HEAVY = (
    "kafka_segments_ds.planning",
    "kafka_segments_ds.reader",
    "kafka_segments_ds.writer",
    "kafka_segments_ds.records.kernels",
    "kafka_segments_ds.records.crc_kernels",
    "kafka_segments_ds.records.encoder",
)


def _run_probe(probe: str) -> Any:
    """Run ``probe`` in a fresh interpreter (no pytest in its environment); the JSON value its
    last output line holds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", ["pyspark_kafkasegments", "kafka_segments_ds"])
def test_the_lookup_module_imports_nothing_heavy(module: str) -> None:
    """Spark imports ``pyspark_kafkasegments`` at every data source lookup."""
    probe = (
        "import json, os, sys\n"
        "before = dict(os.environ)\n"
        f"import {module}\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "changed = sorted(k for k in set(before) | set(os.environ)"
        " if before.get(k) != os.environ.get(k))\n"
        "print(json.dumps([heavy, changed]))\n"
    )
    heavy, changed = _run_probe(probe)
    assert heavy == []
    assert changed == []


def test_parsing_options_loads_no_tiered_storage_code() -> None:
    """``options`` sits below ``tiered``: parsing read options (a bucket layout among them)
    loads none of ``kafka_segments_ds.tiered`` nor anything above the options layer."""
    probe = (
        "import json, sys\n"
        "from kafka_segments_ds.options import parse_read_options\n"
        "layout = parse_read_options({'layout': 'aiven'}).layout\n"
        "print(json.dumps([layout, sorted(m for m in sys.modules"
        " if m.startswith('kafka_segments_ds'))]))\n"
    )
    layout, loaded = _run_probe(probe)
    assert layout == "aiven"
    assert "kafka_segments_ds.options" in loaded
    # the package's __init__ loads nothing of its own (its API imports lazily)
    modules = [m for m in loaded if m != NAME]
    above = [m for m in modules if _layer(_unit(m)) > _layer("options") or _unit(m) == "tiered"]
    assert above == []
