"""``kafka-segments``: dump, verify, stats, rebuild-index and recover for Kafka log segments.

Every command streams through :func:`kafka_segments_ds.iter_batches` (bounded memory) or reads
one segment at a time. Exit status: 0 ok, 1 ``verify``/``rebuild-index`` found errors, 2 bad
input (missing path, corrupt data in ``dump``/``stats``, bad option), 130 interrupted.

One module per command (``dump``, ``verify``, ``stats``, ``rebuild_index``, ``recover``), each with
``NAME``/``SUMMARY``/``DESCRIPTION``, ``add_arguments(parser)`` and ``run(args) -> int``;
``common`` holds what they share.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from kafka_segments_ds.cli import dump, rebuild_index, recover, stats, verify
from kafka_segments_ds.cli.common import PROG, PipeClosed, key_value, write_lines
from kafka_segments_ds.errors import KafkaSegmentsError

__all__ = ["PipeClosed", "build_parser", "main", "write_lines"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "paths", nargs="+", metavar="PATH", help="log dir, partition dir, .log file, glob or URI"
    )
    common.add_argument(
        "--option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="reader option, e.g. fs.s3.region=eu-west-1",
    )
    common.add_argument("--quiet", action="store_true", help="no progress bar")
    for command in (dump, verify, stats, rebuild_index, recover):
        sub = commands.add_parser(
            command.NAME,
            parents=[common],
            help=command.SUMMARY,
            description=command.DESCRIPTION,
        )
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file descriptor (e.g. captured in tests)


def main(argv: list[str] | None = None) -> int:
    """Run the ``kafka-segments`` command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    args.option = dict(args.option)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except PipeClosed:
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (KafkaSegmentsError, OSError) as err:  # FileNotFoundError is an OSError
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
