"""Kafka's DumpLogSegments (kafka-dump-log) output parsed for the broker tests, and our
``kafka-segments`` run as a command, both giving plain dicts to compare structurally.

DumpLogSegments prints, per file, ``Dumping PATH``, then per batch one ``baseOffset: ...`` line of
``name: value`` pairs and per record (``--deep-iteration``) one ``| offset: ...`` line whose tail
is ``key: K payload: P`` (``--print-data-log``), a decoder's ``key: JSON payload: JSON``, a
control record's ``endTxnMarker: COMMIT coordinatorEpoch: 0`` or a KRaft control record's
``NAME {JSON}`` / ``NAME: {JSON}``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .kafka_broker import Broker

KAFKA_SEGMENTS = [sys.executable, "-m", "kafka_segments_ds"]
DUMP_LOG = "kafka.tools.DumpLogSegments"

# "name: value" pairs of a batch line, values without spaces
_PAIR = re.compile(r"(\w+): (\S+)")
_RECORD_HEAD = re.compile(
    r"\| offset: (?P<offset>\d+) (?P<ts_type>CreateTime|LogAppendTime|NoTimestampType): "
    r"(?P<timestamp>-?\d+) keySize: (?P<key_size>-?\d+) valueSize: (?P<value_size>-?\d+) "
    r"sequence: (?P<sequence>-?\d+) headerKeys: \[(?P<header_keys>[^\]]*)\](?P<rest>.*)$"
)
_BATCH_INTS = (
    "baseOffset",
    "lastOffset",
    "count",
    "baseSequence",
    "lastSequence",
    "producerId",
    "producerEpoch",
    "partitionLeaderEpoch",
    "position",
    "size",
    "magic",
    "crc",
)


def parse_dump_log(text: str) -> dict[str, list[dict[str, Any]]]:
    """DumpLogSegments' output: file path -> its batches, each with a ``records`` list."""
    files: dict[str, list[dict[str, Any]]] = {}
    batches: list[dict[str, Any]] = []
    for line in text.splitlines():
        if line.startswith("Dumping "):
            batches = files.setdefault(line[len("Dumping ") :], [])
        elif line.startswith("baseOffset: "):
            pairs = dict(_PAIR.findall(line))
            batch: dict[str, Any] = {k: int(pairs[k]) for k in _BATCH_INTS}
            batch["isTransactional"] = pairs["isTransactional"] == "true"
            batch["isControl"] = pairs["isControl"] == "true"
            batch["compresscodec"] = pairs["compresscodec"]
            batch["isvalid"] = pairs["isvalid"] == "true"
            stamp = re.search(r"(CreateTime|LogAppendTime|NoTimestampType): (-?\d+)", line)
            assert stamp is not None, line
            batch["timestampType"], batch["maxTimestamp"] = stamp.group(1), int(stamp.group(2))
            batch["records"] = []
            batches.append(batch)
        elif line.startswith("| offset: "):
            m = _RECORD_HEAD.match(line)
            assert m is not None, line
            record: dict[str, Any] = {
                k: int(m.group(k))
                for k in ("offset", "timestamp", "key_size", "value_size", "sequence")
            }
            record["timestampType"] = m.group("ts_type")
            keys = m.group("header_keys")
            record["header_keys"] = keys.split(",") if keys else []
            record["rest"] = m.group("rest").strip()
            batches[-1]["records"].append(record)
    return files


def split_key_payload(rest: str) -> tuple[str | None, str | None]:
    """``key: K payload: P`` (either part absent for a null) as (K, P)."""
    key = payload = None
    if rest.startswith("key: "):
        at = rest.find(" payload: ")
        key, rest = (rest[5:], "") if at < 0 else (rest[5:at], rest[at + 1 :])
    if rest.startswith("payload: "):
        payload = rest[len("payload: ") :]
    return key, payload


def dump_log(broker: Broker, *args: str, files: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """DumpLogSegments with ``args`` over ``files``, all in one JVM, parsed."""
    out = broker.run_class(DUMP_LOG, *args, "--files", ",".join(str(f) for f in files))
    return parse_dump_log(out)


def kafka_segments(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``kafka-segments ARGS`` as a user runs it (a new process), output captured."""
    done = subprocess.run(
        [*KAFKA_SEGMENTS, *map(str, args), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kafka-segments {args} exited {done.returncode}:\n{done.stderr}")
    return done


def jsonl(*args: str | Path) -> list[dict[str, Any]]:
    """``kafka-segments dump ARGS`` (JSON lines) parsed."""
    out = kafka_segments("dump", "--format", "jsonl", *args).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def camel(name: str) -> str:
    """Our decoders' snake_case field name in Kafka's JSON spelling (camelCase)."""
    head, *tail = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in tail)


def differences(kafka: Any, ours: Any, where: str = "") -> list[str]:
    """Where Kafka's decoded JSON and ours disagree, for the fields Kafka prints.

    Our decoders wrap nested messages (a consumer's subscription and assignment) as
    ``{"type", "version", "data"}``; Kafka prints their data alone. Fields only we print (tagged
    fields Kafka omits when absent, derived names) are not compared."""
    if (
        isinstance(ours, dict)
        and "data" in ours
        and not (isinstance(kafka, dict) and "data" in kafka)
    ):
        ours = ours["data"]
    if isinstance(kafka, dict):
        if not isinstance(ours, dict):
            return [f"{where}: Kafka {kafka!r}, ours {ours!r}"]
        ours_camel = {camel(k): v for k, v in ours.items()}
        found = []
        for name, value in kafka.items():
            if name not in ours_camel:
                found.append(f"{where}.{name}: Kafka prints {value!r}, ours has no such field")
            else:
                found += differences(value, ours_camel[name], f"{where}.{name}")
        return found
    if isinstance(kafka, list):
        if not isinstance(ours, list) or len(ours) != len(kafka):
            return [f"{where}: Kafka {kafka!r}, ours {ours!r}"]
        return [
            d
            for i, (a, b) in enumerate(zip(kafka, ours, strict=True))
            for d in differences(a, b, f"{where}[{i}]")
        ]
    return [] if kafka == ours else [f"{where}: Kafka {kafka!r}, ours {ours!r}"]


def parse_to_string(text: str) -> tuple[str, dict[str, str]]:
    """Java's ``Name{a=1, b=Other{...}, c={0=0}}`` (what DumpLogSegments' remote log metadata
    decoder prints) as ("Name", {"a": "1", "b": "Other{...}", "c": "{0=0}"})."""
    name, _, rest = text.partition("{")
    fields: dict[str, str] = {}
    i = 0
    while i < len(rest) and rest[i] != "}":
        eq = rest.index("=", i)
        key, i = rest[i:eq].strip(), eq + 1
        start, depth = i, 0
        while i < len(rest) and not (depth == 0 and rest[i] in ",}"):
            depth += {"{": 1, "}": -1}.get(rest[i], 0)
            i += 1
        fields[key] = rest[start:i].strip()
        if i < len(rest) and rest[i] == ",":
            i += 1
    return name, fields


# RemoteLogSegmentState and RemotePartitionDeleteState ids by name
SEGMENT_STATES = {
    "COPY_SEGMENT_STARTED": 0,
    "COPY_SEGMENT_FINISHED": 1,
    "DELETE_SEGMENT_STARTED": 2,
    "DELETE_SEGMENT_FINISHED": 3,
}
PARTITION_STATES = {
    "DELETE_PARTITION_MARKED": 0,
    "DELETE_PARTITION_STARTED": 1,
    "DELETE_PARTITION_FINISHED": 2,
}


def remote_metadata_differences(payload: str, ours: dict[str, Any], where: str) -> list[str]:
    """DumpLogSegments' ``--remote-log-metadata-decoder`` payload against our decoded value."""
    name, kafka = parse_to_string(payload)
    data = ours["data"]

    expected: dict[str, Any] = {}
    got: dict[str, Any] = {}
    if "remoteLogSegmentId" in kafka:
        _, segment = parse_to_string(kafka["remoteLogSegmentId"])
        data_tp = data["remote_log_segment_id"]["topic_id_partition"]
        expected["segment"] = (segment["topicIdPartition"], segment["id"])
        got["segment"] = (
            f"{data_tp['id']}:{data_tp['name']}-{data_tp['partition']}",
            data["remote_log_segment_id"]["id"],
        )
        expected["state"] = SEGMENT_STATES[kafka["state"]]
        got["state"] = data["remote_log_segment_state"]
    else:
        data_tp = data["topic_id_partition"]
        expected["partition"] = kafka["topicIdPartition"]
        got["partition"] = f"{data_tp['id']}:{data_tp['name']}-{data_tp['partition']}"
        expected["state"] = PARTITION_STATES[kafka["state"]]
        got["state"] = data["remote_partition_delete_state"]
    for java, ours_name in (
        ("startOffset", "start_offset"),
        ("endOffset", "end_offset"),
        ("brokerId", "broker_id"),
        ("maxTimestampMs", "max_timestamp_ms"),
        ("eventTimestampMs", "event_timestamp_ms"),
        ("segmentSizeInBytes", "segment_size_in_bytes"),
    ):
        if java in kafka:
            expected[java], got[java] = int(kafka[java]), data[ours_name]
    if "segmentLeaderEpochs" in kafka:
        pairs = [p.split("=") for p in kafka["segmentLeaderEpochs"].strip("{}").split(", ") if p]
        expected["epochs"] = [(int(e), int(o)) for e, o in pairs]
        got["epochs"] = [(e["leader_epoch"], e["offset"]) for e in data["segment_leader_epochs"]]
    if "txnIdxEmpty" in kafka:
        expected["txnIdxEmpty"] = kafka["txnIdxEmpty"] == "true"
        got["txnIdxEmpty"] = data["txn_index_empty"]
    if kafka.get("customMetadata") == "Optional.empty":
        expected["customMetadata"], got["customMetadata"] = None, data["custom_metadata"]
    return [
        f"{where} {name} {key}: Kafka {expected[key]!r}, ours {got[key]!r}"
        for key in expected
        if expected[key] != got[key]
    ]


def logs(log_dir: Path, *dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (log_dir / d).glob("*.log"))


def internal_files(log_dir: Path, topic: str) -> list[Path]:
    return logs(log_dir, f"{topic}-0")


def compare_internal_topic(
    broker: Broker,
    log_dir: Path,
    topic: str,
    kafka_flag: str,
    decoder: str,
    compare: Callable[[str, dict[str, Any] | None, str], list[str]] | None = None,
) -> dict[tuple[str, int], dict[str, Any]]:
    """``dump --decoder`` on ``topic``'s partition 0 under ``log_dir`` against DumpLogSegments'
    ``kafka_flag``, record by record and field by field (``compare``: Kafka's record text, our
    row, where; default: Kafka's JSON rendering); our rows by (segment, offset)."""
    compare = compare or compare_decoded
    files = internal_files(log_dir, topic)
    kafka = dump_log(broker, "--deep-iteration", kafka_flag, files=files)
    ours = {
        (r["segment"], r["offset"]): r
        for r in jsonl("--decoder", decoder, "--include-metadata", log_dir / f"{topic}-0")
    }
    found: list[str] = []
    compared = 0
    for path, batches in kafka.items():
        for batch in batches:
            for record in batch["records"]:
                row = ours.get((path, record["offset"]))
                if batch["isControl"]:
                    assert row is None  # dump yields data records only (see the deep test)
                    continue
                found += compare(record["rest"], row, f"{topic}@{record['offset']}")
                compared += 1
    assert compared == len(ours)
    assert [f for f in found if not unknown_record_type(f, ours)] == []
    return ours


def unknown_record_type(difference: str, ours: dict[Any, dict[str, Any]]) -> bool:
    """A difference from a record our metadata decoder leaves undecoded ("type": "unknown")."""
    return any(
        f"@{offset} " in difference and row["value"]["type"] == "unknown"
        for (_, offset), row in ours.items()
        if isinstance(row["value"], dict)
    )


def compare_decoded(rest: str, row: dict[str, Any] | None, where: str) -> list[str]:
    """Kafka's ``key: {...} payload: {...}`` (or ``payload:`` alone) against our row."""
    if row is None:
        return [f"{where}: Kafka prints a record, ours has none"]
    kafka_key, kafka_value = split_key_payload(rest)
    found = []
    if kafka_key is not None:
        key = json.loads(kafka_key)
        if int(key["type"]) != row["key"]["version"]:
            found.append(f"{where} key type {key['type']} vs version {row['key']['version']}")
        found += differences(key["data"], row["key"]["data"], f"{where} key")
    if kafka_value is None or kafka_value == "<DELETE>":
        return found + (
            [] if row["value"] is None else [f"{where}: Kafka null value, ours {row['value']}"]
        )
    value = json.loads(kafka_value)
    ours = row["value"]
    if "type" in value and isinstance(value["type"], str) and not value["type"].isdigit():
        # __cluster_metadata: FEATURE_LEVEL_RECORD for our FeatureLevelRecord
        name = "".join("_" + c if c.isupper() else c for c in ours["type"]).lstrip("_").upper()
        if name != value["type"]:
            found.append(f"{where} type {value['type']} vs {ours['type']}")
    if int(value["version"]) != ours["version"]:
        found.append(f"{where} value version {value['version']} vs {ours['version']}")
    return found + differences(value["data"], ours["data"], f"{where} value")
