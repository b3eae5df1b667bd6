"""``kafka-segments``: dump, verify, stats, rebuild-index, recover, schemas, restore, erase and
compact for Kafka log segments.

Every command streams through :func:`kafka_segments_ds.iter_batches` (bounded memory) or reads
one segment at a time. Exit status, the same for every command (``--help`` shows it): 0 ok,
1 damaged log data, 2 usage error / no Kafka data at a path / a file that cannot be read, 3 only
index files are wrong (``rebuild-index`` fixes them), 130 interrupted.

One module per command (``dump``, ``verify``, ``stats``, ``rebuild_index``, ``recover``,
``schemas``, ``restore``; ``rewrite`` holds ``erase`` and ``compact``), each with
``NAME``/``SUMMARY``/``DESCRIPTION``, ``add_arguments(parser)`` and ``run(args) -> int``
(``OWN_PATHS``: it declares its positional arguments itself); ``common`` holds what they share.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from kafka_segments_ds.cli.common import (
    EXIT_DAMAGED,
    EXIT_INDEX,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_STATUS_HELP,
    EXIT_UNUSABLE,
    PROG,
    PipeClosed,
    key_value,
    storage_error,
    write_lines,
)
from kafka_segments_ds.errors import CorruptIndexError, CorruptSegmentError, KafkaSegmentsError

__all__ = ["PipeClosed", "build_parser", "main", "write_lines"]

# command name -> its module (and the object in it, where one module holds several); a run
# imports just the module of its command (dump alone brings 0.2 s of imports)
COMMANDS = {
    "dump": ("dump", None),
    "verify": ("verify", None),
    "stats": ("stats", None),
    "rebuild-index": ("rebuild_index", None),
    "recover": ("recover", None),
    "schemas": ("schemas", None),
    "restore": ("restore", None),
    "erase": ("rewrite", "erase"),
    "compact": ("rewrite", "compact"),
}


def _command(name: str) -> Any:
    """The module (or object) behind the command ``name``."""
    module, attribute = COMMANDS[name]
    found = importlib.import_module(f"kafka_segments_ds.cli.{module}")
    return found if attribute is None else getattr(found, attribute)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command, or just the command ``only`` (what a run of
    it needs; any other word gets the whole parser, for its help or its error)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(__doc__ or "").splitlines()[0],
        epilog=EXIT_STATUS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help="reader option, e.g. fs.s3.region=eu-west-1",
    )
    common.add_argument("--quiet", action="store_true", help="no progress bar")
    for name in [only] if only in COMMANDS else COMMANDS:
        command = _command(name)
        assert name == command.NAME
        sub = commands.add_parser(
            command.NAME,
            parents=[common],
            help=command.SUMMARY,
            description=_fill(command.DESCRIPTION),
            epilog=EXIT_STATUS_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if not getattr(command, "OWN_PATHS", False):
            sub.add_argument(
                "paths",
                nargs="*" if name == "dump" else "+",
                metavar="PATH",
                help="log dir, partition dir, .log file, glob or URI"
                + (" (or an index, .snapshot or .checkpoint file)" if name == "dump" else ""),
            )
        command.add_arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def _fill(text: str) -> str:
    """Paragraphs of a description wrapped for the terminal (the help keeps its line breaks)."""
    return "\n\n".join(
        textwrap.fill(" ".join(p.split()), 92, break_on_hyphens=False) for p in text.split("\n\n")
    )


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # not a real file descriptor (e.g. captured in tests)


def main(argv: list[str] | None = None) -> int:
    """Run the ``kafka-segments`` command line; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    # the command is the first word (the top level takes no option with a value); a help
    # option before it asks for the whole command line's help
    first = next((i for i, word in enumerate(argv) if not word.startswith("-")), None)
    only = None if first is None or {"-h", "--help"} & set(argv[:first]) else argv[first]
    args = build_parser(only).parse_args(argv)
    args.option = dict(args.option)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except PipeClosed:
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as err:
        if not isinstance(err, KafkaSegmentsError):
            err = storage_error(err, getattr(err, "filename", None) or "")
        return _fail(err, EXIT_UNUSABLE)
    except CorruptIndexError as err:
        return _fail(err, EXIT_INDEX)
    except CorruptSegmentError as err:
        return _fail(err, EXIT_DAMAGED)
    except KafkaSegmentsError as err:
        return _fail(err, EXIT_UNUSABLE)


def _fail(err: BaseException, status: int) -> int:
    message = str(err).splitlines()[0] if str(err) else type(err).__name__
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status
