"""Writer options (case-insensitive strings, as Spark passes them) -> a frozen WriteOptions.

Defaults are a broker's (``segment.bytes``, ``segment.ms``, ``index.interval.bytes``,
``segment.index.bytes``, ``num.partitions``) or a producer's (``batch.size``) where Kafka has one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafka_segments_ds.errors import InvalidOptionError
from kafka_segments_ds.layout import MAX_TOPIC_LENGTH, TOPIC_NAME
from kafka_segments_ds.options import (
    CLIENT_PREFIX,
    PASSTHROUGH_PREFIXES,
    parse_bool,
    parse_choice,
    parse_int,
    redacted_repr,
)
from kafka_segments_ds.records.compression import (
    CODEC_LABELS,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    CompressionType,
)

INT32_MAX = 2**31 - 1
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024
DEFAULT_BATCH_BYTES = 16384  # the producer's batch.size
MIN_SEGMENT_INDEX_BYTES = 24  # room for one offset entry and one time entry plus its reserve
COMPRESSION_LEVELS = {  # inclusive ranges (Kafka's compression.<codec>.level, KIP-390)
    CompressionType.GZIP: (1, 9),
    CompressionType.LZ4: (1, 17),
    CompressionType.ZSTD: (-131072, 22),
}

WRITE_OPTIONS = {
    name.lower(): name
    for name in (
        "topic",
        "numPartitions",
        "compression",
        "compressionLevel",
        "magic",
        "batchBytes",
        "batchRecords",
        "segmentBytes",
        "segmentMs",
        "indexIntervalBytes",
        "segmentIndexBytes",
        "timestampType",
        "errorIfTopicExists",
        "growPartitions",
        "allowEmptyOverwrite",
        "preserveOffsets",
    )
}


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Validated writer options."""

    topic: str | None = None
    num_partitions: int | None = None  # None: the topic's existing count, else 1
    compression: int = CompressionType.NONE
    compression_level: int | None = None
    magic: int = 2
    batch_bytes: int = DEFAULT_BATCH_BYTES
    batch_records: int = INT32_MAX
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_ms: int = DEFAULT_SEGMENT_MS
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES
    log_append_time: bool = False
    error_if_topic_exists: bool = False
    grow_partitions: bool = False  # numPartitions may exceed an existing topic's count
    allow_empty_overwrite: bool = False  # overwrite may empty an existing topic (no rows for it)
    preserve_offsets: bool = False  # rows carry their offsets and batch fields (writer/preserve)
    storage: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return redacted_repr(self)

    def storage_options(self) -> dict[str, str]:
        return dict(self.storage)


def validate_topic(topic: Any, where: str = "topic") -> str:
    """Kafka's topic rules (``[a-zA-Z0-9._-]``, at most 249 characters, not ``.``/``..``)."""
    if not isinstance(topic, str) or not topic:
        raise InvalidOptionError(f"{where} must be a non-empty string, not {topic!r}")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidOptionError(
            f"{where} {topic[:40]!r}... is {len(topic)} characters; Kafka allows {MAX_TOPIC_LENGTH}"
        )
    if topic in (".", "..") or not TOPIC_NAME.fullmatch(topic):
        raise InvalidOptionError(
            f"{where} {topic!r} is not a valid Kafka topic name: use ASCII letters, digits, "
            "'.', '_' and '-', and not '.' or '..'"
        )
    return topic


# Producer settings a job written for Spark's Kafka sink passes as ``kafka.<setting>``: these
# three decide what the log holds; the others (servers, acks, linger.ms, ...) need a broker.
# ``kafka.compression.<codec>.level`` applies to its own codec only (KIP-390).
PRODUCER_SETTINGS = {"kafka.compression.type": "compression", "kafka.batch.size": "batchbytes"}
PRODUCER_LEVEL = re.compile(r"kafka\.compression\.([a-z0-9]+)\.level")


def parse_write_options(options: Mapping[str, Any] | None = None, **kwargs: Any) -> WriteOptions:
    """Validate user options (names case-insensitive) into :class:`WriteOptions`."""
    given = [(k, v) for source in (options or {}, kwargs) for k, v in source.items()]
    codec_setting = next(  # the codec written: a level for another codec does not apply
        (
            str(v).strip().lower()
            for k, v in given
            if k.lower() in ("kafka.compression.type", "compression")
        ),
        None,
    )
    raw: dict[str, Any] = {}
    storage: list[tuple[str, str]] = []
    for key, value in given:
        lowered = key.lower()
        if lowered in PRODUCER_SETTINGS:
            key, lowered = WRITE_OPTIONS[PRODUCER_SETTINGS[lowered]], PRODUCER_SETTINGS[lowered]
        elif lowered.startswith(CLIENT_PREFIX):
            level = PRODUCER_LEVEL.fullmatch(lowered)
            if level is None or level.group(1) != codec_setting:
                continue  # a broker's setting, or another codec's level: nothing to do here
            key, lowered = WRITE_OPTIONS["compressionlevel"], "compressionlevel"
        if lowered in raw:
            raise InvalidOptionError(f"option {key} given twice")
        if lowered not in WRITE_OPTIONS:
            if lowered.startswith(PASSTHROUGH_PREFIXES):
                if lowered.startswith("fs."):
                    storage.append((lowered, str(value)))
                continue
            raise InvalidOptionError(
                f"unknown write option {key!r}; known options: {', '.join(WRITE_OPTIONS.values())}"
            )
        raw[lowered] = value
    fields: dict[str, Any] = {"storage": tuple(sorted(storage))}
    get = raw.get
    if (v := get("topic")) is not None:
        fields["topic"] = validate_topic(str(v), "option topic")
    if (v := get("numpartitions")) is not None:
        fields["num_partitions"] = _bounded("numPartitions", v, 1, INT32_MAX)
    codec = CompressionType.NONE
    if (v := get("compression")) is not None:
        labels = tuple(CODEC_LABELS[c] for c in CompressionType)
        codec = CompressionType(labels.index(parse_choice("compression", v, labels)))
    fields["compression"] = codec
    if (v := get("compressionlevel")) is not None:
        if codec not in COMPRESSION_LEVELS:
            raise InvalidOptionError(
                f"option compressionLevel applies to gzip, lz4 and zstd, not {CODEC_LABELS[codec]}"
            )
        low, high = COMPRESSION_LEVELS[codec]
        fields["compression_level"] = _bounded("compressionLevel", v, low, high)
    magic = 2
    if (v := get("magic")) is not None:
        magic = int(parse_choice("magic", v, ("0", "1", "2")))
    fields["magic"] = magic
    if magic < 2 and codec == CompressionType.ZSTD:
        raise InvalidOptionError("zstd needs magic 2 (Kafka 2.1+); use magic 2 or another codec")
    for name, field, low in (
        ("batchBytes", "batch_bytes", 1),
        ("batchRecords", "batch_records", 1),
        ("segmentBytes", "segment_bytes", 14),  # Kafka's minimum: one magic-0 record
        ("segmentMs", "segment_ms", 1),
        ("indexIntervalBytes", "index_interval_bytes", 0),
        ("segmentIndexBytes", "segment_index_bytes", MIN_SEGMENT_INDEX_BYTES),
    ):
        if (v := get(name.lower())) is not None:
            high = 2**63 - 1 if name == "segmentMs" else INT32_MAX
            if name == "batchBytes" and codec != CompressionType.NONE:
                # a larger compressed batch is more than a read decompresses by default
                high = DEFAULT_MAX_DECOMPRESSED_BYTES
            fields[field] = _bounded(name, v, low, high)
    if (v := get("timestamptype")) is not None:
        kind = parse_choice("timestampType", v, ("createtime", "logappendtime"))
        if kind == "logappendtime" and magic == 0:
            raise InvalidOptionError("magic 0 has no timestamps; LogAppendTime needs magic 1 or 2")
        fields["log_append_time"] = kind == "logappendtime"
    if (v := get("erroriftopicexists")) is not None:
        fields["error_if_topic_exists"] = parse_bool("errorIfTopicExists", v)
    if (v := get("allowemptyoverwrite")) is not None:
        fields["allow_empty_overwrite"] = parse_bool("allowEmptyOverwrite", v)
    if (v := get("growpartitions")) is not None and parse_bool("growPartitions", v):
        if fields.get("num_partitions") is None:
            raise InvalidOptionError(
                "option growPartitions=true needs numPartitions: the count to grow the topic to"
            )
        fields["grow_partitions"] = True
    if (v := get("preserveoffsets")) is not None and parse_bool("preserveOffsets", v):
        if magic != 2:
            raise InvalidOptionError(
                "preserveOffsets=true writes magic 2 batches; drop option magic"
            )
        fields["preserve_offsets"] = True
    return WriteOptions(**fields)


def _bounded(name: str, value: Any, low: int, high: int) -> int:
    number = parse_int(name, value, low)
    if number > high:
        raise InvalidOptionError(f"option {name} must be <= {high}, not {number}")
    return number
