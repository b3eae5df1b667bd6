"""Spark's auto-registration hook: ``spark.read.format("kafkasegments")`` with no setup call.

Spark imports every top-level ``pyspark_*`` module of the worker Python at each data source
lookup, so this module imports only pyspark's ``DataSource``; the package itself (planning,
decoders, numpy) is imported when a query uses the source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

try:
    from pyspark.sql.datasource import DataSource
except ImportError as err:  # no pyspark, or one without Python data sources (3.x)
    raise ModuleNotFoundError(
        "the kafkasegments Spark data source needs pyspark 4.0 or later: "
        "pip install 'kafka-segments-ds[spark]' (or use the pyspark 4.0+ your platform provides)",
        name="pyspark",
    ) from err

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

    from kafka_segments_ds.datasource import KafkaSegmentsDataSource

__all__ = ["DefaultSource"]


class DefaultSource(DataSource):
    """The ``kafkasegments`` source; see ``kafka_segments_ds.datasource.KafkaSegmentsDataSource``
    for the options."""

    @classmethod
    def name(cls) -> str:
        return "kafkasegments"

    def _source(self) -> KafkaSegmentsDataSource:
        from kafka_segments_ds.datasource import KafkaSegmentsDataSource

        return KafkaSegmentsDataSource(self.options)

    def schema(self) -> str | StructType:
        return self._source().schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        return self._source().reader(schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return self._source().writer(schema, overwrite)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return self._source().streamReader(schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return self._source().streamWriter(schema, overwrite)
