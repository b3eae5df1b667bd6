"""The broker tests' harness: a real Apache Kafka broker run by scripts/kafka.sh (a pinned Kafka
fetched with Maven, one KRaft node on loopback), its Java client (tests/broker/java/BrokerTool.java)
and the rows both sides are compared as. conftest.py makes one ``Broker`` per test session; the
tests import ``table_rows`` and ``Row`` from here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = REPO / "scripts" / "kafka.sh"
TOOL_TIMEOUT_S = 300
TOOL_END = "\0END "  # ends each command's output from ``BrokerTool serve``

# (topic, partition, offset, key, value, headers, timestamp in ms, timestampType)
Row = tuple[
    str, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int, int
]


class Broker:
    """One broker whose files live in ``home`` (``home/data`` is its log dir)."""

    def __init__(self, home: Path, *, legacy: bool = False) -> None:
        self.home = home
        self.legacy = legacy  # Kafka 3.9 in ZooKeeper mode, message format 0.10.2 (start-legacy)
        self.bootstrap = ""
        self._client: subprocess.Popen[str] | None = None

    @property
    def log_dir(self) -> Path:
        return self.home / "data"

    @property
    def tiered_dir(self) -> Path:
        """The bucket Kafka's LocalTieredStorage writes (topics with remote.storage.enable)."""
        return self.home / "tiered" / "kafka-tiered-storage"

    @property
    def running(self) -> bool:
        """A broker (or a legacy broker's ZooKeeper) started from here has not been stopped."""
        return any((self.home / name).exists() for name in ("broker.pid", "zookeeper.pid"))

    def _script(self, *args: str, timeout: float = TOOL_TIMEOUT_S) -> str:
        done = subprocess.run(
            ["bash", str(KAFKA_SH), *args],
            env={**os.environ, "KSD_KAFKA_OWNER_PID": str(os.getpid())},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"scripts/kafka.sh {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stderr[-4000:]}"
            )
        return done.stdout

    def start(self) -> None:
        """Start it (formatting its log dir on the first start) and wait until it serves."""
        command = "start-legacy" if self.legacy else "start"
        self.bootstrap = self._script(command, str(self.home)).strip().splitlines()[-1]

    def stop(self) -> None:
        """A clean shutdown (SIGTERM): logs flushed, indexes trimmed, clean-shutdown marker."""
        self._script("stop", str(self.home))

    def kill(self) -> None:
        """SIGKILL: the next start recovers the log dir."""
        self._script("stop", str(self.home), "--kill")

    def run_class(self, java_class: str, *args: str) -> str:
        """Run a class on the cached classpath (Kafka's tools, e.g.
        ``kafka.tools.DumpLogSegments``); returns its standard output."""
        return self._script("run", java_class, *args)

    def tool(self, command: str, *args: str) -> str:
        """A BrokerTool command (tests/broker/java) against this broker; its standard output.
        The commands run in one long-lived JVM (``BrokerTool serve``)."""
        if self._client is None or self._client.poll() is not None:
            self._client = subprocess.Popen(
                ["bash", str(KAFKA_SH), "run", "BrokerTool", "serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="utf-8",
            )
        assert self._client.stdin is not None and self._client.stdout is not None
        line = "\t".join((command, "--bootstrap", self.bootstrap, *args))
        self._client.stdin.write(line + "\n")
        self._client.stdin.flush()
        out: list[str] = []
        for reply in self._client.stdout:
            if reply.startswith(TOOL_END):
                if reply.split()[-1] != "0":
                    raise RuntimeError(f"BrokerTool {command} {' '.join(args)}:\n{''.join(out)}")
                return "".join(out)
            out.append(reply)
        raise RuntimeError(f"BrokerTool serve exited {self._client.wait()} during {command}")

    def close(self) -> None:
        """End the client JVM and stop the broker."""
        if self._client is not None:
            assert self._client.stdin is not None
            self._client.stdin.close()
            self._client.wait(timeout=60)
            self._client = None
        if self.running:
            self.stop()

    def create_topic(self, topic: str, partitions: int = 1, **configs: Any) -> None:
        """``configs`` by Kafka's names with ``_`` for ``.``: ``cleanup_policy="compact"``."""
        args = ["--topic", topic, "--partitions", str(partitions)]
        for name, value in configs.items():
            args += ["--config", f"{name.replace('_', '.')}={value}"]
        self.tool("create-topic", *args)

    def produce(self, topic: str, count: int, **options: Any) -> dict[str, int]:
        """BrokerTool produce: options by its flag names with ``_`` for ``-``
        (``compression="zstd"``, ``null_key_every=7``, ``idempotent=True``)."""
        args = ["--topic", topic, "--count", str(count)]
        for name, value in options.items():
            flag = "--" + name.replace("_", "-")
            if value is True:
                args.append(flag)
            elif value is not False and value is not None:  # 0 is a value (0 == False)
                args += [flag, str(value)]
        return json.loads(self.tool("produce", *args).strip().splitlines()[-1])

    def consume(
        self,
        topic: str,
        isolation: str = "read_uncommitted",
        *,
        group: str | None = None,
        from_committed: bool = False,
    ) -> list[Row]:
        """Every record of ``topic`` a consumer fetches, in (partition, offset) order: from the
        beginning, or from ``group``'s committed offsets (``from_committed``); with ``group``,
        the positions reached are committed."""
        args = ["--topic", topic, "--isolation", isolation]
        if group is not None:
            args += ["--group", group] + (["--from-committed"] if from_committed else [])
        out = self.tool("consume", *args)
        rows = [_consumer_row(json.loads(line)) for line in out.splitlines() if line.strip()]
        return sorted(rows, key=lambda r: (r[1], r[2]))

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Set ``group``'s committed offsets of ``topic`` (partition -> offset)."""
        args = ["--group", group, "--topic", topic]
        for partition, offset in sorted(offsets.items()):
            args += ["--offset", f"{partition}={offset}"]
        self.tool("commit", *args)

    def snapshot(self, dest: Path, *topics: str) -> Path:
        """A copy of the log dir (of the partition dirs of ``topics`` only, when given), taken
        while it may be running; files that vanish while the copy runs, as segments the cleaner
        or retention drop, are left out."""

        def copy(src: str, dst: str) -> None:
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(src, dst)

        if not topics:
            shutil.copytree(self.log_dir, dest, copy_function=copy)
            return dest
        dest.mkdir(parents=True)
        for topic in topics:
            for part in self.log_dir.glob(f"{topic}-*"):
                if part.name.rpartition("-")[0] == topic and part.name.rpartition("-")[2].isdigit():
                    shutil.copytree(part, dest / part.name, copy_function=copy)
        return dest


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def _consumer_row(r: dict[str, Any]) -> Row:
    headers = tuple((k, _b64(v)) for k, v in r["headers"])
    return (
        r["topic"],
        r["partition"],
        r["offset"],
        _b64(r["key"]),
        _b64(r["value"]),
        headers,
        r["timestamp"],
        r["timestampType"],
    )


def table_rows(table: pa.Table) -> list[Row]:
    """read_table's (or a Spark DataFrame's Arrow) rows in the consumer's shape: timestamps as
    epoch milliseconds (-1 where magic 0 stores none, as the consumer says), headers as
    (key, value) pairs, ordered by (partition, offset)."""
    ms = pc.divide(table.column("timestamp").cast(pa.int64()), 1000).fill_null(-1).to_pylist()
    rows = [
        (
            topic,
            partition,
            offset,
            key,
            value,
            tuple((h["key"], h["value"]) for h in headers or ()),
            stamp,
            ts_type,
        )
        for topic, partition, offset, key, value, headers, stamp, ts_type in zip(
            table.column("topic").to_pylist(),
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("headers").to_pylist(),
            ms,
            table.column("timestampType").to_pylist(),
            strict=True,
        )
    ]
    return sorted(rows, key=lambda r: (r[1], r[2]))


WAIT_S = 120  # for the cleaner and the retention check; both run every second or less here


def wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker did not {what} within {WAIT_S} s")
        time.sleep(0.2)


def cleaner_checkpoint(log_dir: Path, topic: str) -> int:
    """The offset up to which the log cleaner has cleaned ``topic``-0 (-1: not yet)."""
    path = log_dir / "cleaner-offset-checkpoint"
    try:
        lines = path.read_text().splitlines()[2:]
    except FileNotFoundError:
        return -1
    for line in lines:
        name, partition, offset = line.split()
        if name == topic and partition == "0":
            return int(offset)
    return -1
