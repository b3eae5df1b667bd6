"""Exception hierarchy.

Every error raised on bad input derives from :class:`KafkaSegmentsError` and says where the
problem is (file, byte position, offset) and what was expected versus found.
"""

from __future__ import annotations


class KafkaSegmentsError(Exception):
    """Base class of every error this package raises on purpose."""


class CorruptSegmentError(KafkaSegmentsError):
    """A ``.log`` entry is malformed.

    ``path`` is the file (or ``None`` for an in-memory buffer), ``position`` the byte position in
    that file of the entry at fault, ``offset`` the Kafka offset of the entry when it is known.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str | None = None,
        position: int | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.path = path
        self.position = position
        self.offset = offset
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.path is not None:
            where.append(f"file {self.path}")
        if self.position is not None:
            where.append(f"byte position {self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        return f"{self.reason} ({', '.join(where)})" if where else self.reason

    def located(
        self, *, path: str | None = None, position_shift: int = 0, offset: int | None = None
    ) -> CorruptSegmentError:
        """Return a copy of this error placed in a file: decoders see buffers, readers see files."""
        position = None if self.position is None else self.position + position_shift
        return type(self)(
            self.reason,
            path=path if path is not None else self.path,
            position=position,
            offset=offset if offset is not None else self.offset,
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Spark pickles worker errors back to the driver; keep the type and the fields.
        return (_rebuild, (type(self), self.reason, self.path, self.position, self.offset))


def _rebuild(
    cls: type[CorruptSegmentError],
    reason: str,
    path: str | None,
    position: int | None,
    offset: int | None,
) -> CorruptSegmentError:
    return cls(reason, path=path, position=position, offset=offset)


class ChecksumError(CorruptSegmentError):
    """A stored CRC does not match the bytes it covers."""


class CorruptIndexError(KafkaSegmentsError):
    """An ``.index``, ``.timeindex`` or ``.txnindex`` file cannot be used."""


class UnsupportedFormatError(CorruptSegmentError):
    """A well-framed entry uses something we do not read (unknown codec id, magic > 2)."""


class MissingCodecError(KafkaSegmentsError):
    """The Python package for a compression codec is not installed."""

    def __init__(self, codec: str, package: str, purpose: str | None = None) -> None:
        self.codec, self.package, self.purpose = codec, package, purpose
        what = purpose or f"reading {codec}-compressed batches"
        super().__init__(f"{what} needs the '{package}' package: pip install {package}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.codec, self.package, self.purpose))


class InvalidOptionError(KafkaSegmentsError, ValueError):
    """A user option has an unknown name or a bad value."""


class OutputExistsError(KafkaSegmentsError):
    """The write target already holds data and the save mode forbids touching it."""


class DataLossError(KafkaSegmentsError):
    """Requested offsets are no longer in the archive (``failOnDataLoss=true``)."""


class LimitExceededError(CorruptSegmentError):
    """An entry would need more memory than the configured bound (e.g. a decompression bomb)."""


class InvalidInputError(KafkaSegmentsError, ValueError):
    """Rows or columns given to the writer that cannot become Kafka records."""


class CommitInProgressError(KafkaSegmentsError):
    """A write is being committed into (or was interrupted while committing into) a log dir."""


class StorageError(KafkaSegmentsError, OSError):
    """Reading a file failed after the filesystem's own retries, or returned fewer bytes than
    the file holds (a truncated response). Never a reason to skip data: no mode drops it."""

    def __init__(self, reason: str, path: str | None = None, position: int | None = None) -> None:
        self.reason = reason
        self.path = path
        self.position = position
        where = [f"file {path}"] if path is not None else []
        if position is not None:
            where.append(f"byte position {position}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.reason, self.path, self.position))


class NoKafkaDataError(KafkaSegmentsError):
    """A read found no Kafka data to read: a path without a log segment (an empty directory, a
    directory of other files, the parent of a log dir, a bucket of another layout) or a
    selection (``subscribe``, ``subscribePattern``, ``assign``) naming what is not there. The
    option ``allowEmpty=true`` turns it into an empty result."""


class UnsafePathError(KafkaSegmentsError):
    """A path under the input is refused: a symbolic link leading outside it, a name that is
    not valid UTF-8, or a segment name whose offset does not fit a signed 64-bit integer."""


class SchemaError(KafkaSegmentsError, ValueError):
    """A schema registry's records or a schema cannot be used (names where and why)."""


class UndecodableValueError(KafkaSegmentsError):
    """A key or value in Confluent's wire format does not decode (``mode=FAILFAST``): no magic
    byte, an unknown schema id, or bytes its schema does not read."""

    def __init__(
        self,
        reason: str,
        topic: str | None,
        partition: int | None,
        offset: int,
        schema_id: int | None,
    ) -> None:
        self.reason, self.topic, self.partition = reason, topic, partition
        self.offset, self.schema_id = offset, schema_id
        sid = "no schema id" if schema_id is None else f"schema id {schema_id}"
        super().__init__(f"{topic}-{partition} offset {offset} ({sid}): {reason}")

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (
            type(self),
            (self.reason, self.topic, self.partition, self.offset, self.schema_id),
        )
