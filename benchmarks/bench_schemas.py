"""Avro decoding on read (valueFormat=avro) against fastavro's own reader loop, same bytes.

``--records`` values of a 10-field Avro record in Confluent's wire format are written to a log
dir beside a ``_schemas`` topic holding their schema. Timed, best of ``--repeat``:

* fastavro loop: ``schemaless_reader`` over each value's payload into a list of dicts (what a
  hand-written consumer loop does, without building any column);
* decode step: our post-step on the same values as one Arrow binary column, to an Arrow struct
  column (wire-format checks, writer schema by id, fastavro, the Arrow conversion);
* read_table: the whole read with ``valueFormat=avro`` next to the raw read.

Reports records/s and the ratio decode step / fastavro loop (goal >= 0.8). Times are this
process's CPU time (``time.process_time``), steadier than wall time on a shared machine.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import fastavro
import pyarrow as pa

from kafka_segments_ds import read_table, write_table
from kafka_segments_ds.options import parse_read_options
from kafka_segments_ds.schemas.decode import TaskDecoder, bind_registry

SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "kind", "type": "string"},
        {"name": "count", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "active", "type": "boolean"},
        {"name": "ts", "type": "long"},
        {"name": "country", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def values(n: int) -> list[bytes]:
    parsed = fastavro.parse_schema(SCHEMA)
    out = []
    for i in range(n):
        record = {
            "id": i,
            "user": f"user-{i % 1000}",
            "kind": ("view", "click", "buy")[i % 3],
            "count": i % 97,
            "price": i * 0.25,
            "ratio": (i % 10) / 10,
            "active": i % 2 == 0,
            "ts": 1_700_000_000_000 + i,
            "country": ("NO", "DE", "FR", "IT")[i % 4],
            "note": None if i % 5 else f"note {i}",
        }
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record)
        out.append(struct.pack(">bI", 0, 1) + buf.getvalue())
    return out


def write_archive(root: Path, data: list[bytes]) -> None:
    key = b'{"keytype":"SCHEMA","subject":"events-value","version":1,"magic":1}'
    import json

    value = json.dumps(
        {"subject": "events-value", "version": 1, "id": 1, "schema": json.dumps(SCHEMA),
         "deleted": False}
    ).encode()  # fmt: skip
    write_table(pa.table({"key": pa.array([key]), "value": pa.array([value])}), root,
                topic="_schemas")  # fmt: skip
    write_table(pa.table({"value": pa.array(data, pa.binary())}), root, topic="events")


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """CPU seconds of ``repeat`` calls after one warm-up call (CPU time: the figure a busy
    machine disturbs least)."""
    fn()
    times = []
    for _ in range(repeat):
        started = time.process_time()
        fn()
        times.append(time.process_time() - started)
    return times


def rate(label: str, n: int, times: list[float]) -> float:
    """Prints records/s of the median time with the spread (min-max); returns the median."""
    mid = statistics.median(times)
    print(
        f"{label:<36}{n / mid:12,.0f} records/s  (median {mid:.3f} s, min {min(times):.3f}, "
        f"max {max(times):.3f}, {len(times)} runs)"
    )
    return mid


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", help="directory for the log dir (default: a temporary one)")
    args = parser.parse_args(argv[1:])
    data = values(args.records)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.data or tmp) / "bench-schemas"
        write_archive(root, data)
        parsed = fastavro.parse_schema(SCHEMA)
        reader = fastavro.schemaless_reader

        def fastavro_loop() -> object:
            return [reader(io.BytesIO(v[5:]), parsed, None) for v in data]

        opts = bind_registry(parse_read_options({"valueFormat": "avro"}), str(root))
        column = pa.array(data, pa.binary())
        offsets = list(range(len(data)))

        def decode_step() -> object:
            post = TaskDecoder(opts, "events", 0, "bench")
            return post._decode_column(post.decoders["value"], column, offsets)

        def read_decoded() -> object:
            return read_table(root, ["value"], subscribe="events", valueFormat="avro")

        def read_raw() -> object:
            return read_table(root, ["value"], subscribe="events")

        assert decode_step().to_pylist()[:50] == fastavro_loop()[:50]
        load = os.getloadavg()
        print(f"{args.records} records of a 10-field Avro record; load {load[0]:.2f}")
        n = args.records
        loop_s = rate("fastavro loop (schemaless_reader)", n, timed(fastavro_loop, args.repeat))
        step_s = rate("decode step (to an Arrow struct)", n, timed(decode_step, args.repeat))
        decoded_s = rate("read_table valueFormat=avro", n, timed(read_decoded, args.repeat))
        rate("read_table raw", n, timed(read_raw, args.repeat))
        print(f"ratio decode step / fastavro loop   {loop_s / step_s:12.2f} x   (goal >= 0.8)")
        print(f"ratio read_table avro / fastavro    {loop_s / decoded_s:12.2f} x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
