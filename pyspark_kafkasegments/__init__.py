"""Spark's auto-registration hook: ``spark.read.format("kafkasegments")`` with no setup call."""

from kafka_segments_ds.datasource import KafkaSegmentsDataSource as DefaultSource

__all__ = ["DefaultSource"]
