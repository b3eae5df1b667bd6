"""``kafka-segments recover``: finish interrupted writes into a log dir, remove abandoned ones."""

from __future__ import annotations

import argparse
import sys

import pyarrow.fs as pafs

from kafka_segments_ds.cli.common import write_lines
from kafka_segments_ds.errors import StorageError
from kafka_segments_ds.fs import display_path, resolve
from kafka_segments_ds.writer.commit import recover

NAME = "recover"
SUMMARY = "finish interrupted kafkasegments writes"
DESCRIPTION = (
    "Finish the commits of writes (df.write.format('kafkasegments') / write_table) that were "
    "interrupted after their commit was decided, and remove the staging of writes that died "
    "before it. Run it only when no write job is running against PATH."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="only say what would be done")


def run(args: argparse.Namespace) -> int:
    for path in args.paths:
        filesystem, root = resolve(path, args.option)
        kind = filesystem.get_file_info(root).type
        if kind == pafs.FileType.NotFound:
            raise StorageError("no such directory", path)
        if kind != pafs.FileType.Directory:
            raise StorageError("not a directory (recover takes the log dir written to)", path)
        lines = recover(path, dry_run=args.dry_run, **args.option)
        shown = display_path(filesystem, root)
        write_lines(
            [f"{shown}: {line}" for line in lines] or [f"{shown}: nothing to do"], sys.stdout
        )
    return 0
