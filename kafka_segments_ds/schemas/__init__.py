"""Values in Confluent's wire format, decoded with the schemas archived beside them.

* :mod:`~kafka_segments_ds.schemas.registry`: Schema Registry's state, replayed from its
  ``_schemas`` topic (or fetched from a live registry);
* :mod:`~kafka_segments_ds.schemas.avro`, :mod:`~kafka_segments_ds.schemas.protobuf`,
  :mod:`~kafka_segments_ds.schemas.jsonschema`: one schema type each: the Arrow type of a reader
  schema and the decoding of one payload;
* :mod:`~kafka_segments_ds.schemas.config`: the decoding options and the registry a read uses;
* :mod:`~kafka_segments_ds.schemas.column`: the wire format and one column of one topic decoded
  into its reader schema's Arrow type;
* :mod:`~kafka_segments_ds.schemas.decode`: the post-step that turns a batch's ``value`` / ``key``
  column of bytes into typed columns, and the read's schema (Arrow and Spark types).

This module stays light (Spark imports the package at every lookup). ``kafka_segments_ds.schemas``
is also callable, as :func:`read_schemas`: importing this package replaces the function of that
name in ``kafka_segments_ds`` with the module, which must keep working the same way.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafka_segments_ds.schemas.registry import SchemaVersion

DEFAULT_SCHEMAS_TOPIC = "_schemas"


def read_schemas(
    path: str | list[str], schemasTopic: str = DEFAULT_SCHEMAS_TOPIC, **storage: str
) -> list[SchemaVersion]:
    """Every (subject, version) of the registry whose ``schemasTopic`` is archived under
    ``path`` (a log dir), or of the live registry at ``path`` (an ``http(s)://`` URL), soft-deleted
    versions included (``deleted=True``), by subject and version. ``storage``: ``fs.*`` options."""
    from kafka_segments_ds.schemas.registry import load_registry

    return load_registry(path, schemasTopic, **storage).all_versions()


class _CallableModule(types.ModuleType):
    def __call__(
        self, path: str | list[str], schemasTopic: str = DEFAULT_SCHEMAS_TOPIC, **storage: str
    ) -> list[SchemaVersion]:
        return read_schemas(path, schemasTopic, **storage)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["DEFAULT_SCHEMAS_TOPIC", "read_schemas"]
