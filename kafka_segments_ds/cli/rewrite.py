"""``kafka-segments erase`` and ``compact``: a new log dir without some records, offsets kept
(:mod:`kafka_segments_ds.rewrite`)."""

from __future__ import annotations

import argparse
import base64
import binascii
import sys
from dataclasses import dataclass
from pathlib import Path

from kafka_segments_ds import rewrite
from kafka_segments_ds.cli.common import key_value, write_lines
from kafka_segments_ds.errors import InvalidOptionError, StorageError

TRANSACTIONS = (
    " Aborted records and transaction markers are not written (their offsets stay gaps); "
    "records of committed transactions are written as non-transactional batches."
)


def add_write_option(parser: argparse.ArgumentParser, target: str) -> None:
    parser.add_argument(
        "--write-option",
        action="append",
        type=key_value,
        default=[],
        metavar="KEY=VALUE",
        help=f"writer option for {target}, e.g. segmentBytes=1073741824",
    )


@dataclass(frozen=True)
class Command:
    """One subcommand, in the shape the dispatcher takes (as the command modules are)."""

    NAME: str
    SUMMARY: str
    DESCRIPTION: str
    OWN_PATHS = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("src", metavar="SRC", help="log dir, bucket or URI to read")
        parser.add_argument("dst", metavar="DST", help="new log dir to write (topics not in it)")
        add_write_option(parser, "DST")
        if self.NAME == "erase":
            parser.add_argument(
                "--key", action="append", default=[], metavar="KEY", help="erase this key (UTF-8)"
            )
            parser.add_argument(
                "--key-base64",
                action="append",
                default=[],
                metavar="B64",
                help="erase this key, given as base64 (binary keys)",
            )
            parser.add_argument(
                "--keys-file",
                metavar="FILE",
                help="erase the keys in FILE, one a line (UTF-8, line ends removed)",
            )
        else:
            parser.add_argument(
                "--exact",
                action="store_true",
                help="group the keys themselves, not their 16-byte digests (no digest "
                "collision; every distinct key of a partition in memory)",
            )

    def run(self, args: argparse.Namespace) -> int:
        common = {"options": args.option, "write_options": dict(args.write_option)}
        if self.NAME == "erase":
            summaries = rewrite.erase(args.src, args.dst, keys=_keys(args), **common)
        else:
            summaries = rewrite.compact(args.src, args.dst, exact=args.exact, **common)
        write_lines([_line(s, self.NAME) for s in summaries] or ["nothing rewritten"], sys.stdout)
        return 0


erase = Command(
    "erase",
    "copy a log dir without the records of some keys, offsets kept",
    "Write SRC into the new log dir DST without the records whose key is given (--key, "
    "--key-base64, --keys-file); every other record keeps its offset, timestamp, headers and "
    "producer fields, and each batch its base and last offset. Choose partitions with --option "
    "subscribe=TOPIC or assign=JSON. Check DST, then swap it in for SRC while nothing reads or "
    "writes them." + TRANSACTIONS,
)
compact = Command(
    "compact",
    "copy a log dir keeping the last record of each key, offsets kept",
    "Write SRC into the new log dir DST keeping only the last record of each key per partition, "
    "as Kafka's log cleaner does (tombstones kept as the last record of their key; records "
    "without a key removed), every kept record at its offset. The whole log is compacted, its "
    "last segment too. Choose partitions with --option subscribe=TOPIC or assign=JSON."
    + TRANSACTIONS,
)


def _keys(args: argparse.Namespace) -> list[bytes]:
    keys = [k.encode() for k in args.key]
    keys += [_base64(text) for text in args.key_base64]
    if args.keys_file is not None:
        try:
            lines = Path(args.keys_file).read_bytes().splitlines()
        except OSError as err:
            raise StorageError(
                f"cannot read the keys file ({err.strerror})", args.keys_file
            ) from err
        keys += [line for line in lines if line]
    if not keys:
        raise InvalidOptionError(
            "erase needs the keys to remove: --key, --key-base64 or --keys-file"
        )
    return keys


def _base64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as err:
        raise InvalidOptionError(f"--key-base64 {text!r}: not base64 ({err})") from err


def _line(summary: rewrite.PartitionSummary, verb: str) -> str:
    name = f"{summary.topic}-{summary.partition}"
    removed = f"{summary.removed} removed" if verb == "compact" else f"{summary.removed} erased"
    null_keys = f" ({summary.null_keys} without a key)" if verb == "compact" else ""
    kept = summary.records - summary.removed
    span = (
        f", offsets {summary.first_offset}..{summary.last_offset}"
        if summary.first_offset >= 0
        else ""
    )
    padded = f"; an empty batch up to its end offset {summary.end_offset}" if summary.padded else ""
    return f"{name}: {summary.records} records, {removed}{null_keys}, {kept} kept{span}{padded}"
