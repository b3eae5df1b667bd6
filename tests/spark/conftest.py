"""One SparkSession for every Spark test (local[2], UI off, Python filter pushdown on), plus
Spark in other processes: scripts run by a fresh Python, and a local Spark Connect server."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kafka-segments-ds-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.spark)


# --------------------------------------------------------------------------------------------
# Spark in other processes: a script run by a fresh Python (its own JVM, any working directory),
# and a local Spark Connect server for the whole session. Each process is its own JVM, so these
# tests cost seconds each; a Connect *client* in this process would switch pyspark to Connect
# mode for every later test (it sets SPARK_CONNECT_MODE_ENABLED), so clients run as scripts too.
# --------------------------------------------------------------------------------------------

SCRIPT_TIMEOUT_S = 600
CONNECT_START_TIMEOUT_S = 300

CONNECT_SERVER = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[2]")
    .appName("kafka-segments-ds-connect-server")
    .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
    .config("spark.connect.grpc.binding.address", "127.0.0.1")
    .config("spark.connect.grpc.binding.port", sys.argv[1])
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.pyspark.python", sys.executable)
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
print("ready", flush=True)
sys.stdin.read()  # serve until the test session closes our stdin
spark.stop()
"""


def subprocess_env() -> dict[str, str]:
    """The environment of a Spark script: workers run this interpreter, nothing else on the
    path (the package must be found as installed, from any directory)."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    env["PYSPARK_PYTHON"] = sys.executable
    return env


def run_script(source: str, *args: str, cwd: Path) -> Any:
    """Run ``source`` with this interpreter in ``cwd``; returns the JSON its last line prints."""
    script = cwd / "script.py"
    script.write_text(textwrap.dedent(source))
    done = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise AssertionError(
            f"script exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
            f"\n--- stderr\n{done.stderr[-6000:]}"
        )
    return json.loads(lines[-1])


@pytest.fixture(scope="session")
def script_env() -> dict[str, str]:
    """The environment scripts of :func:`spark_script` run with."""
    return subprocess_env()


@pytest.fixture(scope="session")
def spark_script() -> Callable[..., Any]:
    """``spark_script(source, *args, cwd=dir)``: run a Python script in a fresh process and
    return the JSON value its last stdout line holds (the script's failure fails the test)."""
    return run_script


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:<port>`` of a local Spark Connect server (local[2]) for the session.

    It runs in a directory of its own, so the data source reaches it only as installed.
    """
    pytest.importorskip("grpc", reason="the Connect client (pyspark[connect]) is in the test extra")
    home = tmp_path_factory.mktemp("connect-server")
    (home / "server.py").write_text(textwrap.dedent(CONNECT_SERVER))
    port = _free_port()
    log = (home / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, str(home / "server.py"), str(port)],
        cwd=home,
        env=subprocess_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], CONNECT_START_TIMEOUT_S)
        line = server.stdout.readline() if ready else ""
        if line.strip() != "ready":
            server.kill()
            server.wait()
            log.flush()
            raise AssertionError(
                f"the Connect server did not start:\n{(home / 'server.log').read_text()[-6000:]}"
            )
        yield f"sc://127.0.0.1:{port}"
    finally:
        if server.poll() is None:
            assert server.stdin is not None
            server.stdin.close()
            try:
                server.wait(timeout=120)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        log.close()
