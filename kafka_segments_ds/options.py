"""User options (case-insensitive strings, as Spark passes them) -> a frozen ReadOptions.

Names and meanings follow Spark's Kafka source wherever it has the same option.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.fs import redact
from kafka_segments_ds.layout import LAYOUTS
from kafka_segments_ds.records.compression import DEFAULT_MAX_DECOMPRESSED_BYTES

EARLIEST = -2
LATEST = -1
log = logging.getLogger(__name__)

DEFAULT_READ_CHUNK_BYTES = 4 * 1024 * 1024
DEFAULT_BATCH_ROWS = 32_768  # small segments' batches are joined into batches of this many rows
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024  # as spark.sql.files.maxPartitionBytes
DEFAULT_OPEN_COST_BYTES = 4 * 1024 * 1024  # as spark.sql.files.openCostInBytes

# decoding keys and values in Confluent's wire format (kafka_segments_ds.schemas)
DECODE_OPTIONS = (
    "valueFormat",
    "keyFormat",
    "schemaRegistry",
    "schemasTopic",
    "valueSchemaSubject",
    "valueSchemaVersion",
    "keySchemaSubject",
    "keySchemaVersion",
    "valueSchemaMessage",
    "keySchemaMessage",
    "includeRawValue",
    "includeRawKey",
)
# option name (lower case) -> canonical spelling, for messages
READ_OPTIONS = {
    name.lower(): name
    for name in (
        "iteration",
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "isolationLevel",
        "includeHeaders",
        "includeMetadata",
        "mode",
        "verifyChecksums",
        "failOnDataLoss",
        "maxDecompressedBytes",
        "maxBatchBytes",
        "readChunkBytes",
        "batchRows",
        "maxBytesPerPartition",
        "minPartitions",
        "openCostInBytes",
        "layout",
        "privateKeys",
        "allowEmpty",
        "pushFilters",
        *DECODE_OPTIONS,
    )
}
# passed through to storage / Spark and not ours to validate
PASSTHROUGH_PREFIXES = ("fs.", "path", "paths")

# Options of Spark's Kafka source that only steer its consumer or its streams: a job moved from
# a broker to an archive keeps them, and a batch read ignores them as Spark's does. Consumer
# settings (``kafka.*``) mean nothing without a broker, except the isolation level.
KAFKA_SOURCE_ONLY_OPTIONS = frozenset(
    name.lower()
    for name in (
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "groupIdPrefix",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "maxRecordsPerPartition",
    )
)
CLIENT_PREFIX = "kafka."
CONSUMER_ISOLATION_LEVEL = "kafka.isolation.level"


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Validated read options. Offsets maps use EARLIEST (-2) / LATEST (-1) like Spark's JSON."""

    iteration: str = "deep"
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[tuple[str, int], ...] | None = None
    starting_offsets: tuple[tuple[str, int, int], ...] | None = None  # None = earliest
    ending_offsets: tuple[tuple[str, int, int], ...] | None = None  # None = latest
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_offsets_by_timestamp: tuple[tuple[str, int, int], ...] | None = None
    ending_offsets_by_timestamp: tuple[tuple[str, int, int], ...] | None = None
    starting_by_timestamp_strategy: str = "error"
    read_committed: bool = False
    include_headers: bool = False
    include_metadata: bool = False
    mode: str = "FAILFAST"
    verify_checksums: bool = True
    fail_on_data_loss: bool = True
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    max_batch_bytes: int = 2**31 - 1
    read_chunk_bytes: int = DEFAULT_READ_CHUNK_BYTES
    batch_rows: int = DEFAULT_BATCH_ROWS  # rows of a batch joined from small ones
    # packing scan tasks into input partitions (planning.pack_tasks)
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    min_partitions: int | None = None  # None: the engine's parallelism (read_table: no split)
    open_cost_bytes: int = DEFAULT_OPEN_COST_BYTES  # what opening a segment weighs, in bytes
    storage: tuple[tuple[str, str], ...] = ()
    # tiered storage (kafka_segments_ds.tiered): the bucket layout, and key-pair id -> PEM file
    # of the RSA private key that unwraps encrypted segments' data keys
    layout: str = "auto"
    private_keys: tuple[tuple[str, str], ...] = ()
    # no Kafka data under a path, or a selection matching nothing, reads as 0 rows, not an error
    allow_empty: bool = False
    # Spark's pushed filters prune the scan: true | false | auto (on a Spark that plans each
    # query afresh: kafka_segments_ds.datasource.FIXED_PUSHDOWN_SPARK)
    push_filters: str = "auto"
    # decoding values / keys in Confluent's wire format: (lower-cased option name, value) pairs,
    # validated by kafka_segments_ds.schemas.config (which sits above this layer)
    decode: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return redacted_repr(self)

    @property
    def deep(self) -> bool:
        return self.iteration == "deep"

    @property
    def drop_malformed(self) -> bool:
        return self.mode == "DROPMALFORMED"

    def storage_options(self) -> dict[str, str]:
        return dict(self.storage)


def redacted_repr(options: Any) -> str:
    """A dataclass's repr with the values of secret-bearing storage options redacted
    (``fs.s3.secretKey``, ``fs.s3.accessKey``, tokens, passwords: ``fs.SECRET_OPTION``)."""
    shown = []
    for field in fields(options):
        value = getattr(options, field.name)
        if field.name == "storage":
            value = redact(value)
        shown.append(f"{field.name}={value!r}")
    return f"{type(options).__name__}({', '.join(shown)})"


def parse_bool(name: str, value: Any) -> bool:
    """Option ``name`` as a boolean (true/1/yes, false/0/no, any case)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"option {name} must be true or false, not {value!r}")


def parse_int(name: str, value: Any, minimum: int | None = None) -> int:
    """Option ``name`` as an integer, at least ``minimum`` when given."""
    try:
        number = int(str(value).strip())
    except ValueError as err:
        raise InvalidOptionError(f"option {name} must be an integer, not {value!r}") from err
    if minimum is not None and number < minimum:
        raise InvalidOptionError(f"option {name} must be >= {minimum}, not {number}")
    return number


def parse_choice(name: str, value: Any, choices: tuple[str, ...], upper: bool = False) -> str:
    """Option ``name`` as one of ``choices`` (compared in lower case, or upper with ``upper``)."""
    text = str(value).strip()
    text = text.upper() if upper else text.lower()
    if text not in choices:
        raise InvalidOptionError(
            f"option {name} must be one of {', '.join(choices)}, not {value!r}"
        )
    return text


def _json(name: str, value: Any) -> Any:
    if isinstance(value, (dict, list)):
        return value
    try:
        return json.loads(str(value))
    except json.JSONDecodeError as err:
        raise InvalidOptionError(f"option {name} is not valid JSON: {err}") from err


def _partition_map(
    name: str, value: Any, *, allow: tuple[int, ...], what: str
) -> tuple[tuple[str, int, int], ...]:
    """Parse ``{"topic": {"0": 23, "1": -2}}`` into sorted (topic, partition, number) triples."""
    data = _json(name, value)
    if not isinstance(data, dict):
        raise InvalidOptionError(
            f'option {name} must be a JSON object like {{"topic":{{"0":{what}}}}}'
        )
    out = []
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise InvalidOptionError(f"option {name}: value for topic {topic!r} must be an object")
        for part, number in parts.items():
            p = parse_int(f"{name} partition of {topic}", part, minimum=0)
            if isinstance(number, bool) or not isinstance(number, int):
                raise InvalidOptionError(f"option {name}: {topic}-{p} must map to an integer")
            if number < 0 and number not in allow:
                raise InvalidOptionError(
                    f"option {name}: {topic}-{p} = {number} is not allowed here"
                )
            out.append((str(topic), p, number))
    return tuple(sorted(out))


def _offsets(name: str, value: Any, *, starting: bool) -> tuple[tuple[str, int, int], ...] | None:
    text = value.strip().lower() if isinstance(value, str) else None
    if text == "earliest":
        if not starting:
            raise InvalidOptionError("endingOffsets cannot be 'earliest' in a batch query")
        return None
    if text == "latest":
        if starting:
            raise InvalidOptionError("startingOffsets cannot be 'latest' in a batch query")
        return None
    allow = (EARLIEST,) if starting else (LATEST,)
    return _partition_map(name, value, allow=allow, what="23")


def parse_read_options(options: Mapping[str, Any] | None = None, **kwargs: Any) -> ReadOptions:
    """Validate user options (names case-insensitive) into :class:`ReadOptions`."""
    raw: dict[str, Any] = {}
    for source in (options or {}, kwargs):
        for key, value in source.items():
            lowered = key.lower()
            if lowered in raw:
                raise InvalidOptionError(f"option {key} given twice")
            raw[lowered] = value
    storage: list[tuple[str, str]] = []
    if CONSUMER_ISOLATION_LEVEL in raw:  # the consumer setting Spark's Kafka source passes on
        level = raw.pop(CONSUMER_ISOLATION_LEVEL)
        if "isolationlevel" in raw and str(raw["isolationlevel"]) != str(level):
            raise InvalidOptionError(
                f"isolationLevel={raw['isolationlevel']!r} and "
                f"kafka.isolation.level={level!r} disagree"
            )
        raw["isolationlevel"] = level
    ignored = sorted(
        key for key in raw if key.startswith(CLIENT_PREFIX) or key in KAFKA_SOURCE_ONLY_OPTIONS
    )
    if ignored:
        log.info("options that only a broker or a stream uses are ignored: %s", ", ".join(ignored))
        for key in ignored:
            del raw[key]
    for key in list(raw):
        if key not in READ_OPTIONS:
            if key.startswith(PASSTHROUGH_PREFIXES):
                storage.append((key, str(raw.pop(key))))
                continue
            raise InvalidOptionError(
                f"unknown option {key!r}; known options: {', '.join(READ_OPTIONS.values())}"
            )
    fields: dict[str, Any] = {"storage": tuple(sorted(storage))}
    decode = {n.lower() for n in DECODE_OPTIONS}
    fields["decode"] = tuple(sorted((k, str(v)) for k, v in raw.items() if k in decode))
    get = raw.get
    if (v := get("iteration")) is not None:
        fields["iteration"] = parse_choice("iteration", v, ("deep", "shallow"))
    selectors = [k for k in ("subscribe", "subscribepattern", "assign") if k in raw]
    if len(selectors) > 1:
        raise InvalidOptionError(
            "only one of subscribe, subscribePattern and assign may be given, "
            f"found {', '.join(READ_OPTIONS[k] for k in selectors)}"
        )
    if (v := get("subscribe")) is not None:
        names = v if isinstance(v, (list, tuple)) else str(v).split(",")
        topics = tuple(str(t).strip() for t in names if str(t).strip())
        if not topics:
            raise InvalidOptionError("option subscribe names no topic")
        fields["subscribe"] = topics
    if (v := get("subscribepattern")) is not None:
        try:
            re.compile(str(v))
        except re.error as err:
            raise InvalidOptionError(
                f"option subscribePattern is not a valid regex: {err}"
            ) from err
        fields["subscribe_pattern"] = str(v)
    if (v := get("assign")) is not None:
        data = _json("assign", v)
        if not isinstance(data, dict) or not all(isinstance(p, list) for p in data.values()):
            raise InvalidOptionError('option assign must look like {"topic":[0,1]}')
        fields["assign"] = tuple(
            sorted(
                (str(t), parse_int("assign partition", p, 0)) for t, ps in data.items() for p in ps
            )
        )
    if (v := get("startingoffsets")) is not None:
        fields["starting_offsets"] = _offsets("startingOffsets", v, starting=True)
    if (v := get("endingoffsets")) is not None:
        fields["ending_offsets"] = _offsets("endingOffsets", v, starting=False)
    if (v := get("startingtimestamp")) is not None:
        fields["starting_timestamp"] = parse_int("startingTimestamp", v, 0)
    if (v := get("endingtimestamp")) is not None:
        fields["ending_timestamp"] = parse_int("endingTimestamp", v, 0)
    if (v := get("startingoffsetsbytimestamp")) is not None:
        fields["starting_offsets_by_timestamp"] = _partition_map(
            "startingOffsetsByTimestamp", v, allow=(EARLIEST, LATEST), what="1700000000000"
        )
    if (v := get("endingoffsetsbytimestamp")) is not None:
        fields["ending_offsets_by_timestamp"] = _partition_map(
            "endingOffsetsByTimestamp", v, allow=(EARLIEST, LATEST), what="1700000000000"
        )
    if (v := get("startingoffsetsbytimestampstrategy")) is not None:
        fields["starting_by_timestamp_strategy"] = parse_choice(
            "startingOffsetsByTimestampStrategy", v, ("error", "latest")
        )
    if (v := get("isolationlevel")) is not None:
        level = parse_choice("isolationLevel", v, ("read_uncommitted", "read_committed"))
        fields["read_committed"] = level == "read_committed"
    for key, attr in (
        ("includeheaders", "include_headers"),
        ("includemetadata", "include_metadata"),
        ("verifychecksums", "verify_checksums"),
        ("failondataloss", "fail_on_data_loss"),
        ("allowempty", "allow_empty"),
    ):
        if (v := get(key)) is not None:
            fields[attr] = parse_bool(READ_OPTIONS[key], v)
    if (v := get("pushfilters")) is not None:
        fields["push_filters"] = parse_choice("pushFilters", v, ("true", "false", "auto"))
    if (v := get("layout")) is not None:
        fields["layout"] = parse_choice("layout", v, LAYOUTS)
    if (v := get("privatekeys")) is not None:
        keys = _json("privateKeys", v)
        if not isinstance(keys, dict) or not all(
            isinstance(k, str) and isinstance(f, str) and k and f for k, f in keys.items()
        ):
            raise InvalidOptionError(
                'option privateKeys must map key-pair ids to PEM files: {"key-1": "/keys/1.pem"}'
            )
        fields["private_keys"] = tuple(sorted(keys.items()))
    if (v := get("mode")) is not None:
        fields["mode"] = parse_choice("mode", v, ("FAILFAST", "DROPMALFORMED"), upper=True)
    for key, attr, minimum in (
        ("maxdecompressedbytes", "max_decompressed_bytes", 1024),
        ("maxbatchbytes", "max_batch_bytes", 61),
        ("readchunkbytes", "read_chunk_bytes", 4096),
        ("batchrows", "batch_rows", 1),
        ("maxbytesperpartition", "max_bytes_per_partition", 1),
        ("minpartitions", "min_partitions", 1),
        ("opencostinbytes", "open_cost_bytes", 0),
    ):
        if (v := get(key)) is not None:
            fields[attr] = parse_int(READ_OPTIONS[key], v, minimum)
    starts = [
        k
        for k in ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp")
        if k in raw
    ]
    ends = [k for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp") if k in raw]
    for group in (starts, ends):
        if len(group) > 1:
            raise InvalidOptionError(
                f"options {', '.join(READ_OPTIONS[k] for k in group)} are exclusive; give one"
            )
    _check_ranges(fields)
    return ReadOptions(**fields)


def begin_after_end_message(start: int, end: int, topic: str | None, partition: int | None) -> str:
    """Spark's Kafka source's words for a range whose start is after its end."""
    return (
        f"Beginning offset {start} is after the ending offset {end} for topic {topic} "
        f"partition {partition}."
    )


def _check_ranges(fields: Mapping[str, Any]) -> None:
    """Refuse ranges that end before they begin (an equal start and end is an empty range)."""
    starts = {(t, p): n for t, p, n in fields.get("starting_offsets") or () if n >= 0}
    for topic, partition, end in fields.get("ending_offsets") or ():
        start = starts.get((topic, partition))
        if start is not None and end >= 0 and start > end:
            raise InvalidOptionError(
                begin_after_end_message(start, end, topic, partition)
                + " startingOffsets must not exceed endingOffsets (ending is exclusive)."
            )
    start_ts, end_ts = fields.get("starting_timestamp"), fields.get("ending_timestamp")
    if start_ts is not None and end_ts is not None and start_ts > end_ts:
        raise InvalidOptionError(
            f"Beginning timestamp {start_ts} is after the ending timestamp {end_ts}: "
            "startingTimestamp must not exceed endingTimestamp."
        )
    starts_ts = {
        (t, p): n for t, p, n in fields.get("starting_offsets_by_timestamp") or () if n >= 0
    }
    for topic, partition, end in fields.get("ending_offsets_by_timestamp") or ():
        start = starts_ts.get((topic, partition))
        if start is not None and end >= 0 and start > end:
            raise InvalidOptionError(
                f"Beginning timestamp {start} is after the ending timestamp {end} for topic "
                f"{topic} partition {partition}: startingOffsetsByTimestamp must not exceed "
                "endingOffsetsByTimestamp."
            )


# --------------------------------------------------------------------------------------------
# Streaming (spark.readStream): the batch options above, plus Spark's Kafka source's stream
# options. Kept in one block of their own.
# --------------------------------------------------------------------------------------------

STREAM_OPTIONS = {
    name.lower(): name
    for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
}
BATCH_ONLY_OPTIONS = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's Kafka source: 15m
# Spark's time strings (JavaUtils.timeStringAsMs): a number and a unit, milliseconds if none
_DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?")
_DURATION_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "min": 60_000}
_DURATION_MS |= {"h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """What a stream adds to :class:`ReadOptions`: where it starts and the per-trigger limits.

    ``starting_offsets``: ``None`` for the newest offsets (``latest``, the default), ``()`` for
    ``earliest``, else (topic, partition, offset) triples where -2 is earliest and -1 latest,
    naming every partition the query starts with (as Spark's Kafka source asks); a partition
    added later starts at its earliest offset. ``startingTimestamp`` and
    ``startingOffsetsByTimestamp`` stay in the ReadOptions (they mean the same in a batch).
    """

    starting_offsets: tuple[tuple[str, int, int], ...] | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS


def parse_duration_ms(name: str, value: Any) -> int:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"500"`` (milliseconds) -> milliseconds."""
    match = _DURATION.fullmatch(str(value).strip().lower())
    if match is None:
        raise InvalidOptionError(
            f"option {name} must be a duration like 500ms, 30s, 15m, 1h, not {value!r}"
        )
    return int(int(match.group(1)) * _DURATION_MS[match.group(2)])


def parse_stream_options(
    options: Mapping[str, Any] | None = None, **kwargs: Any
) -> tuple[ReadOptions, StreamOptions]:
    """Validate the options of a streaming read: the batch reader's, except the ending ones,
    with ``startingOffsets`` also ``latest`` (the default, as in Spark) and the trigger
    limits."""
    raw: dict[str, Any] = {}
    for source in (options or {}, kwargs):
        for key, value in source.items():
            if key.lower() in {k.lower() for k in raw}:
                raise InvalidOptionError(f"option {key} given twice")
            raw[key] = value
    lowered = {key.lower(): key for key in raw}
    for name in BATCH_ONLY_OPTIONS:
        if name in lowered:
            raise InvalidOptionError(
                f"option {READ_OPTIONS[name]} is for batch queries; a streaming query reads on "
                "as the archive grows (use spark.read for a bounded range)"
            )
    fields: dict[str, Any] = {}
    for name, attr in (
        ("maxoffsetspertrigger", "max_offsets_per_trigger"),
        ("minoffsetspertrigger", "min_offsets_per_trigger"),
    ):
        if name in lowered:
            fields[attr] = parse_int(STREAM_OPTIONS[name], raw.pop(lowered[name]), 1)
    if "maxtriggerdelay" in lowered:
        fields["max_trigger_delay_ms"] = parse_duration_ms(
            "maxTriggerDelay", raw.pop(lowered["maxtriggerdelay"])
        )
    if "startingoffsets" in lowered:
        value = raw.pop(lowered["startingoffsets"])
        text = value.strip().lower() if isinstance(value, str) else None
        if text == "earliest":
            fields["starting_offsets"] = ()
        elif text != "latest":
            fields["starting_offsets"] = _partition_map(
                "startingOffsets", value, allow=(EARLIEST, LATEST), what="23"
            )
        if "startingtimestamp" in lowered or "startingoffsetsbytimestamp" in lowered:
            raise InvalidOptionError(
                "options startingOffsets, startingTimestamp and startingOffsetsByTimestamp are "
                "exclusive; give one"
            )
    return parse_read_options(raw), StreamOptions(**fields)
