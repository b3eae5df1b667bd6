"""``python -m kafka_segments_ds``: the ``kafka-segments`` command line."""

from __future__ import annotations

import sys

from kafka_segments_ds.cli import main

if __name__ == "__main__":
    sys.exit(main())
