"""The commit-in-progress contract shared by readers and the writer.

A kafkasegments write stages its files in ``<log dir>/.kafkasegments-staging-<job id>`` and,
once its segments are laid out there, writes a journal ``_COMMIT.json`` into that directory:
from then on the commit is decided and moves files into the log dir. While a journal exists
(a commit running, or interrupted and waiting for ``recover``), readers refuse the log dir, so
they see it before or after a commit, never in between (:mod:`kafka_segments_ds.writer.commit`
writes and applies journals; this module only says where they are).
"""

from __future__ import annotations

import os
import posixpath

import pyarrow.fs as pafs

from kafka_segments_ds.errors import CommitInProgressError, UnsafePathError
from kafka_segments_ds.fs import display_path
from kafka_segments_ds.layout import parse_partition_dir_name

STAGING_PREFIX = ".kafkasegments-staging-"
JOURNAL = "_COMMIT.json"


def list_dir(filesystem: pafs.FileSystem, root: str) -> list[pafs.FileInfo]:
    """The entries of directory ``root`` (none when it does not exist)."""
    try:
        entries: list[pafs.FileInfo] = filesystem.get_file_info(
            pafs.FileSelector(root, allow_not_found=True)
        )
        for entry in entries:
            entry.path  # noqa: B018 - pyarrow decodes names lazily: fail here, clearly
        return entries
    except UnicodeDecodeError as err:
        raise UnsafePathError(f"a file name under {root} is not valid UTF-8: {err}") from err


def pending_commits(filesystem: pafs.FileSystem, root: str) -> list[str]:
    """Journals of commits in progress (or interrupted) in the log dir ``root``."""
    if isinstance(filesystem, pafs.LocalFileSystem):
        # names only: a log dir of many partitions is not stat'ed entry by entry
        try:
            names = [e.name for e in os.scandir(root) if e.name.startswith(STAGING_PREFIX)]
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(
            f"{root}/{name}/{JOURNAL}"
            for name in names
            if os.path.isfile(f"{root}/{name}/{JOURNAL}")
        )
    found = []
    for entry in list_dir(filesystem, root):
        if entry.type == pafs.FileType.Directory and entry.base_name.startswith(STAGING_PREFIX):
            journal = f"{entry.path}/{JOURNAL}"
            if filesystem.get_file_info(journal).type == pafs.FileType.File:
                found.append(journal)
    return sorted(found)


def writes_under_way(root: str) -> bool:
    """Whether a kafkasegments write has a staging directory in the local log dir ``root`` (from
    the job's start to the end of its commit)."""
    try:
        return any(e.name.startswith(STAGING_PREFIX) for e in os.scandir(root))
    except OSError:
        return False


def refuse_pending(filesystem: pafs.FileSystem, root: str) -> None:
    """Raise :class:`CommitInProgressError` while a commit into the log dir ``root`` is pending."""
    journals = pending_commits(filesystem, root)
    if journals:
        raise CommitInProgressError(
            f"a kafkasegments write is committing into {display_path(filesystem, root)} "
            f"(journal {display_path(filesystem, journals[0])}); retry when it is done, or, if "
            "no job is running, finish it with kafka_segments_ds.recover(path) or kafka-segments "
            "recover PATH"
        )


def check_readable(filesystem: pafs.FileSystem, path: str) -> None:
    """Refuse to read ``path`` (a log dir or a partition dir in one) during a commit."""
    path = path.rstrip("/") or "/"
    if filesystem.get_file_info(path).type != pafs.FileType.Directory:
        return
    refuse_pending(filesystem, path)
    if parse_partition_dir_name(posixpath.basename(path)) is not None:
        refuse_pending(filesystem, posixpath.dirname(path))
