"""Fixtures of the broker tests: one real Apache Kafka broker for the whole test session
(kafka_broker.py, scripts/kafka.sh), and the shared SparkSession of tests/spark.

Every test here carries the ``broker`` marker. Without Java or Maven the tests skip, naming what
to install; under CI (``CI=true``) they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .kafka_broker import Broker

NEEDS = "Java 17+ (java, javac) and Maven (mvn): apt-get install openjdk-17-jdk-headless maven"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.broker)


def _tools_present() -> None:
    missing = [t for t in ("java", "javac", "mvn") if shutil.which(t) is None]
    if missing:
        reason = f"broker tests need {NEEDS} ({', '.join(missing)} missing)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def broker_tools() -> None:
    """Java and Maven are present (else a skip naming what to install; under CI a failure),
    for tests that start brokers of their own (the benchmarks' smoke runs)."""
    _tools_present()


@pytest.fixture(scope="session")
def broker_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    _tools_present()
    node = Broker(tmp_path_factory.mktemp("kafka-broker"))
    node.start()
    try:
        yield node
    finally:
        node.close()


@pytest.fixture(scope="module")
def legacy_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A Kafka 3.9 broker in ZooKeeper mode writing message format 0.10.2 (magic 1), for the
    module that asks for it."""
    _tools_present()
    node = Broker(tmp_path_factory.mktemp("kafka-legacy-broker"), legacy=True)
    try:
        node.start()
        yield node
    finally:
        node.close()


@pytest.fixture
def broker(broker_session: Broker) -> Broker:
    """The session's one broker, running (started again if an earlier test left it stopped).
    A test may stop, kill or start it again; topics are the test's own (unique names)."""
    if not broker_session.running:
        broker_session.start()
    return broker_session


def _spark_conftest() -> object:
    """tests/spark/conftest.py as a module of its own, for its session-wide ``spark`` fixture
    (a SparkSession is one per process: getOrCreate hands both fixtures the same session)."""
    path = Path(__file__).resolve().parents[1] / "spark" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_broker_tests_spark_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


spark = _spark_conftest().spark  # type: ignore[attr-defined]
