"""The pyarrow.fs seam: path/URI resolution, glob expansion and ranged reads.

Everything here works through :class:`pyarrow.fs.FileSystem`, so local disks, S3, GCS, HDFS and
Azure behave alike. The filesystems returned by :func:`resolve` pickle (Spark ships them to
executors). Paths handed around after resolution are the filesystem's own paths: absolute POSIX
paths for the local filesystem, ``bucket/key`` for object stores.

S3 options (keys are case-insensitive; any other ``fs.s3.*`` key is an error, other keys are
ignored so the whole reader option map can be passed in):

* ``fs.s3.endpoint`` or ``endpoint_override`` -> ``endpoint_override`` (an ``http://`` or
  ``https://`` prefix is stripped and sets ``scheme`` unless ``fs.s3.scheme`` is given)
* ``fs.s3.accessKey`` -> ``access_key``; ``fs.s3.secretKey`` -> ``secret_key``;
  ``fs.s3.sessionToken`` -> ``session_token``
* ``fs.s3.region`` -> ``region``
* ``fs.s3.scheme`` -> ``scheme`` (``http`` or ``https``)
* ``fs.s3.allowAnonymous`` -> ``anonymous`` (``true`` or ``false``)
* ``fs.s3.maxAttempts`` -> ``retry_strategy=AwsStandardS3RetryStrategy(max_attempts=...)``: how
  often a request is tried in all (pyarrow's default: 3) on errors AWS deems retryable (5xx,
  throttling, dropped connections, truncated bodies); ``fs.s3.retryStrategy`` = ``standard``
  (default) or ``default`` picks AWS's "standard" or "legacy default" back-off
* ``fs.s3.connectTimeout`` / ``fs.s3.requestTimeout`` -> ``connect_timeout`` /
  ``request_timeout`` in seconds

When none of these is given, ``s3://`` URIs go through ``FileSystem.from_uri`` (which reads
credentials from the environment and may contact AWS to find the bucket's region).

Options whose name says they hold a credential (:data:`SECRET_OPTION`, as Spark's
``spark.redaction.regex``) are never shown: reprs and messages print :data:`REDACTED`.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from kafka_segments_ds.errors import InvalidOptionError, StorageError

GLOB_CHARS = frozenset("*?[")
# Option names that hold a credential: shown as REDACTED (Spark's spark.redaction.regex plus
# Azure's SAS tokens, account keys and credentials). ``privateKeys`` maps key ids to PEM file
# paths, which are not secret.
SECRET_OPTION = re.compile(
    r"secret|password|passwd|token|access[._-]?key|account[._-]?key|credential|signature"
    r"|(?:^|[._-])sas(?:$|[._-])",
    re.IGNORECASE,
)
REDACTED = "*********(redacted)"

# Option key (lower case) -> S3FileSystem keyword argument.
_S3_OPTIONS = {
    "fs.s3.endpoint": "endpoint_override",
    "endpoint_override": "endpoint_override",
    "fs.s3.accesskey": "access_key",
    "fs.s3.secretkey": "secret_key",
    "fs.s3.sessiontoken": "session_token",
    "fs.s3.region": "region",
    "fs.s3.scheme": "scheme",
    "fs.s3.allowanonymous": "anonymous",
    "fs.s3.maxattempts": "retry_strategy",
    "fs.s3.retrystrategy": "retry_strategy_kind",
    "fs.s3.connecttimeout": "connect_timeout",
    "fs.s3.requesttimeout": "request_timeout",
}
_RETRY_STRATEGIES = {
    "standard": pafs.AwsStandardS3RetryStrategy,
    "default": pafs.AwsDefaultS3RetryStrategy,
}
# Hadoop spellings of S3 that Spark users type; pyarrow knows only s3://.
_S3_ALIASES = frozenset({"s3", "s3a", "s3n"})
_URI = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
# a local file URI: file:/p (Hadoop's Path form), file:///p, file://localhost/p
_FILE_URI = re.compile(r"^file:(?://(?:localhost)?)?(?P<path>/.*)$", re.DOTALL | re.IGNORECASE)
# A trailing '?key=value&...' without '/' is a URI query (e.g. s3://b/k?region=eu-west-1);
# any other '?' is a glob character.
_QUERY = re.compile(r"\?(?P<query>[A-Za-z_][\w.-]*=[^/?]*(?:&[A-Za-z_][\w.-]*=[^/?]*)*)$")


def is_secret_option(key: str) -> bool:
    """True when option ``key`` holds a credential and must not be shown."""
    return SECRET_OPTION.search(key) is not None


def redact(options: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``(key, value)`` pairs with the value of every secret-bearing key replaced by
    :data:`REDACTED`."""
    return tuple((k, REDACTED if is_secret_option(k) else v) for k, v in options)


def scrub(text: str, options: Mapping[str, str] | None) -> str:
    """``text`` with the values of the secret-bearing ``options`` replaced by :data:`REDACTED`
    (a message built by another library may quote them)."""
    for key, value in (options or {}).items():
        if is_secret_option(key) and value and len(str(value)) >= 4:
            text = text.replace(str(value), REDACTED)
    return text


def has_glob(path: str) -> bool:
    """True when ``path`` contains a glob character (``*``, ``?`` or ``[``)."""
    return any(c in GLOB_CHARS for c in path)


def _split_glob(parts: list[str]) -> tuple[list[str], list[str]]:
    """Split path components at the first one holding a glob character."""
    for i, part in enumerate(parts):
        if has_glob(part):
            return parts[:i], parts[i:]
    return parts, []


def resolve(path: str, options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """Return ``(filesystem, path in that filesystem)`` for a local path or a URI.

    Local paths (relative, absolute, ``~``) give the local filesystem and an absolute POSIX path.
    URIs (``s3://``, ``gs://``, ``hdfs://``, ``abfs://``, ``file://``, ...) go through
    ``pyarrow.fs.FileSystem.from_uri``; for S3 the options in the module docstring apply. Glob
    characters are kept in the returned path: only the prefix before the first glob component
    is resolved.
    """
    local_uri = _FILE_URI.match(path)
    if local_uri is not None:  # percent-encoded, as URIs are
        local = posixpath.normpath(urllib.parse.unquote(local_uri["path"]))
        return pafs.LocalFileSystem(), local
    match = _URI.match(path)
    if match is None:
        local = os.path.abspath(os.path.expanduser(path))
        return pafs.LocalFileSystem(), local.replace(os.sep, "/")

    scheme = match["scheme"].lower()
    rest = match["rest"]
    query = ""
    query_match = _QUERY.search(rest)
    if query_match is not None:
        query = "?" + query_match["query"]
        rest = rest[: query_match.start()]

    # rest = authority + path; globbing the authority (bucket, host) is not supported.
    prefix_parts, glob_parts = _split_glob(rest.split("/"))
    if glob_parts and not prefix_parts:
        raise InvalidOptionError(f"glob characters are not supported in the host/bucket of {path}")
    # file:///* leaves only the empty root component: resolve the root itself.
    prefix = "/".join(prefix_parts) if prefix_parts != [""] else "/"

    if scheme in _S3_ALIASES:
        s3_kwargs = _s3_kwargs(options or {})
        if s3_kwargs:
            bucket_and_key = prefix.strip("/")
            if not bucket_and_key:
                raise InvalidOptionError(f"no bucket in {path}")
            return pafs.S3FileSystem(**s3_kwargs), _join(bucket_and_key, glob_parts)
        scheme = "s3"

    try:
        filesystem, resolved = pafs.FileSystem.from_uri(f"{scheme}://{prefix}{query}")
    except (OSError, pa.ArrowException) as err:  # a store that cannot be reached, a bad URI
        reason = scrub(str(err) or type(err).__name__, options)
        endpoint = _endpoint(None, options) if scheme == "s3" else None
        where = f" at endpoint {endpoint}" if endpoint else ""
        raise StorageError(f"cannot open the storage{where}: {reason}", path) from err
    return filesystem, _join(resolved, glob_parts)


def resolve_paths(
    paths: Sequence[str], options: Mapping[str, str] | None = None
) -> tuple[pafs.FileSystem, dict[str, str]]:
    """Resolve every path of a list (relative, ``~``, globs, URIs) with :func:`resolve`: the
    filesystem they share, and each location in it (``demo`` and ``./demo/`` are one) mapped
    to the path that first named it. Paths on different stores cannot be read as one input."""
    if not paths:
        raise InvalidOptionError("no path given")
    filesystem: pafs.FileSystem | None = None
    roots: dict[str, str] = {}
    for path in paths:
        fsys, root = resolve(path, options)
        if filesystem is None:
            filesystem = fsys
        elif not filesystem.equals(fsys):
            raise InvalidOptionError(
                f"{path} is on another storage than {paths[0]} "
                f"({fsys.type_name} vs {filesystem.type_name}, or other settings): read each "
                "storage separately"
            )
        roots.setdefault(root.rstrip("/") or "/", path)
    assert filesystem is not None
    return filesystem, roots


def unreachable(
    err: OSError, filesystem: pafs.FileSystem, path: str, options: Mapping[str, str] | None
) -> StorageError:
    """An OS error from listing ``path`` (a store that cannot be reached, a refused request) as
    :class:`StorageError` naming the URI and the endpoint, never a credential."""
    if isinstance(err, StorageError):
        return err
    reason = scrub(str(err) or type(err).__name__, options)
    endpoint = _endpoint(filesystem, options)
    where = f" at endpoint {endpoint}" if endpoint else ""
    return StorageError(f"cannot read the storage{where}: {reason}", display_path(filesystem, path))


def _endpoint(filesystem: pafs.FileSystem | None, options: Mapping[str, str] | None) -> str | None:
    """The endpoint an S3 ``filesystem`` (None: one not made yet) talks to, for messages."""
    for key, value in (options or {}).items():
        if _S3_OPTIONS.get(key.lower()) == "endpoint_override" and value:
            return str(value)
    if filesystem is not None and filesystem.type_name != "s3":
        return None
    if os.environ.get("AWS_ENDPOINT_URL"):  # the AWS SDK's own setting, which pyarrow honours
        return os.environ["AWS_ENDPOINT_URL"]
    region = getattr(filesystem, "region", None)
    if isinstance(region, str) and region:
        return f"AWS region {region}"
    return None if filesystem is not None else "AWS S3 (no fs.s3.endpoint given)"


def _join(prefix: str, parts: list[str]) -> str:
    if not parts:
        return prefix
    return posixpath.join(prefix, *parts) if prefix else "/".join(parts)


def _s3_kwargs(options: Mapping[str, str]) -> dict[str, object]:
    """Map the S3 options (module docstring) to ``S3FileSystem`` keyword arguments."""
    kwargs: dict[str, object] = {}
    for key, value in options.items():
        lowered = key.lower()
        target = _S3_OPTIONS.get(lowered)
        if target is None:
            if lowered.startswith("fs.s3."):
                known = ", ".join(sorted(k for k in _S3_OPTIONS if k.startswith("fs.s3.")))
                raise InvalidOptionError(f"unknown S3 option {key!r}; known: {known}")
            continue
        kwargs[target] = value

    if "anonymous" in kwargs:
        flag = str(kwargs["anonymous"]).strip().lower()
        if flag not in ("true", "false"):
            raise InvalidOptionError(
                f"fs.s3.allowAnonymous must be true or false, got {kwargs['anonymous']!r}"
            )
        kwargs["anonymous"] = flag == "true"
    endpoint = kwargs.get("endpoint_override")
    if isinstance(endpoint, str) and "://" in endpoint:
        endpoint_scheme, _, host = endpoint.partition("://")
        kwargs["endpoint_override"] = host.rstrip("/")
        kwargs.setdefault("scheme", endpoint_scheme.lower())
    kind = str(kwargs.pop("retry_strategy_kind", "standard")).strip().lower()
    if kind not in _RETRY_STRATEGIES:
        raise InvalidOptionError(f"fs.s3.retryStrategy must be standard or default, got {kind!r}")
    if "retry_strategy" in kwargs or kind != "standard":
        attempts = _number("fs.s3.maxAttempts", kwargs.pop("retry_strategy", 3), int, 1)
        kwargs["retry_strategy"] = _RETRY_STRATEGIES[kind](max_attempts=attempts)
    for key, option in (
        ("connect_timeout", "connectTimeout"),
        ("request_timeout", "requestTimeout"),
    ):
        if key in kwargs:
            kwargs[key] = _number(f"fs.s3.{option}", kwargs[key], float, 0)
    if "scheme" in kwargs:
        kwargs["scheme"] = str(kwargs["scheme"]).lower()
        if kwargs["scheme"] not in ("http", "https"):
            raise InvalidOptionError(
                f"fs.s3.scheme must be http or https, got {kwargs['scheme']!r}"
            )
    return kwargs


def _number(option: str, value: object, kind: type[int] | type[float], minimum: float) -> float:
    try:
        number = kind(str(value).strip())
    except ValueError as err:
        raise InvalidOptionError(f"{option} must be a number, got {value!r}") from err
    if number < minimum:
        raise InvalidOptionError(f"{option} must be >= {minimum}, got {value!r}")
    return number


def expand_glob(filesystem: pafs.FileSystem, pattern: str) -> list[str]:
    """Sorted paths matching ``pattern``, matched per path component with :func:`fnmatchcase`.

    The non-glob prefix is listed, then each level below it, one listing per matching directory
    (``**`` has no special meaning). A pattern without glob characters gives ``[pattern]`` if
    it exists, else ``[]``. As in :mod:`fnmatch`, ``*`` also matches names starting with ``.``.
    """
    return [info.path for info in glob_file_info(filesystem, pattern)]


def glob_file_info(filesystem: pafs.FileSystem, pattern: str) -> list[pafs.FileInfo]:
    """Like :func:`expand_glob` but returns the listings' ``FileInfo`` (type and size)."""
    pattern = pattern.rstrip("/") or "/"
    prefix_parts, glob_parts = _split_glob(pattern.split("/"))
    if not glob_parts:
        info = filesystem.get_file_info(pattern)
        return [] if info.type == pafs.FileType.NotFound else [info]
    prefix = "/".join(prefix_parts)
    if not prefix:
        if not pattern.startswith("/"):
            raise InvalidOptionError(f"cannot glob the first component of {pattern!r}")
        prefix = "/"

    current = [filesystem.get_file_info(prefix)]
    for depth, part in enumerate(glob_parts):
        last = depth == len(glob_parts) - 1
        matched: list[pafs.FileInfo] = []
        for directory in current:
            if directory.type != pafs.FileType.Directory:
                continue
            if has_glob(part):
                selector = pafs.FileSelector(directory.path, allow_not_found=True)
                matched.extend(
                    info
                    for info in filesystem.get_file_info(selector)
                    if (last or info.type == pafs.FileType.Directory)
                    and fnmatch.fnmatchcase(info.base_name, part)
                )
            else:
                # A literal component after a glob one: check it directly, no listing needed.
                info = filesystem.get_file_info(posixpath.join(directory.path, part))
                if info.type == pafs.FileType.Directory or (
                    last and info.type != pafs.FileType.NotFound
                ):
                    matched.append(info)
        current = matched
    return sorted(current, key=lambda info: info.path)


class RangeReader:
    """Ranged reads of one file through one handle, opened at the first read: on an object
    store opening costs a request (pyarrow's S3 open is a HEAD), each read one ranged GET.
    A read past the end is returned short. The file is read as it was at the first read (its
    size then): a file that grows in the meantime (a segment being written) gives no bytes
    past that size, so the caller's view stays whole. ``close`` releases the handle; a later
    read opens the file again."""

    def __init__(self, filesystem: pafs.FileSystem, path: str) -> None:
        self.filesystem = filesystem
        self.path = path
        self._stream: pa.NativeFile | None = None
        self._size = 0

    def __call__(self, start: int, length: int) -> pa.Buffer:
        if start < 0 or length < 0:
            raise ValueError(f"invalid range start={start} length={length} for {self.path}")
        if self._stream is None:
            self._stream = self.filesystem.open_input_file(self.path)
            self._size = self._stream.size()
        if length == 0 or start >= self._size:
            return pa.py_buffer(b"")
        # read_at returns bytes (a copy); seek + read_buffer keeps Arrow's buffer. On object
        # stores this is still a single ranged GET.
        # (asking for no more than the size at opening: a local read returns whatever the file
        # holds when it runs, which may be more if it grew since)
        self._stream.seek(start)
        expected = min(length, self._size - start)
        return _checked(self._stream.read_buffer(expected), expected, self.path, start)

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_range(filesystem: pafs.FileSystem, path: str, start: int, length: int) -> pa.Buffer:
    """Read ``length`` bytes at ``start``; a read past the end is returned short."""
    with RangeReader(filesystem, path) as read:
        return read(start, length)


def read_file(filesystem: pafs.FileSystem, path: str) -> pa.Buffer:
    """Read a whole file."""
    with filesystem.open_input_file(path) as stream:
        size = stream.size()  # a file growing while read is read as it was at opening
        return _checked(stream.read_buffer(size), size, path, 0)


def read_index_file(filesystem: pafs.FileSystem, path: str) -> pa.Buffer:
    """Read a whole ``.index`` / ``.timeindex``: a hint, so one cut short while read is read as
    far as it goes (a broker rolling its segment trims the preallocated index it is writing)."""
    with filesystem.open_input_file(path) as stream:
        buffer: pa.Buffer = stream.read_buffer(stream.size())
        return buffer


def _checked(buffer: pa.Buffer, expected: int, path: str, start: int) -> pa.Buffer:
    """``buffer`` if it holds all ``expected`` bytes; a cut-off response is an error, never a
    shorter file."""
    if buffer.size != expected:
        raise StorageError(
            f"short read: asked for {expected} bytes, got {buffer.size}", path, start
        )
    return buffer


def file_size(filesystem: pafs.FileSystem, path: str) -> int:
    """Size of a file in bytes; ``FileNotFoundError`` / ``IsADirectoryError`` otherwise."""
    info = filesystem.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"no such file or directory: {path}")
    if info.type == pafs.FileType.Directory:
        raise IsADirectoryError(f"is a directory: {path}")
    return int(info.size)


_DISPLAY_SCHEMES = {"s3": "s3", "gcs": "gs", "hdfs": "hdfs", "abfs": "abfs"}


def display_path(filesystem: pafs.FileSystem, path: str) -> str:
    """``path`` as a user would write it: plain for local files, a URI for remote stores."""
    # a tiered-storage view (kafka_segments_ds.tiered.storage) shows the store under it
    base = getattr(getattr(filesystem, "handler", None), "base", None)
    if isinstance(filesystem, pafs.PyFileSystem) and isinstance(base, pafs.FileSystem):
        filesystem = base
    scheme = _DISPLAY_SCHEMES.get(filesystem.type_name)
    return f"{scheme}://{path}" if scheme else path
