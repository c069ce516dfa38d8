"""The Spark schema and the loader's rules follow ``superpeer.trace``, the one place the trace
record is defined: a field added, renamed, reordered or retyped there must show here."""

from __future__ import annotations

from dataclasses import fields

from pyspark.sql.types import DoubleType, LongType, StringType

from analytics.definitions import bucket_seconds
from analytics.load import EVENTS
from analytics.schema import INVALID_COLUMN, PARQUET_SCHEMA, RAW_SCHEMA, TRACE_SCHEMA
from superpeer import trace

SPARK_TYPE = {"float": DoubleType(), "str": StringType(), "int": LongType()}


def test_trace_schema_has_the_record_fields_in_order() -> None:
    assert tuple(TRACE_SCHEMA.fieldNames()) == trace.FIELDS


def test_trace_schema_types_follow_the_record_annotations() -> None:
    for field in fields(trace.TraceRecord):
        base = str(field.type).removesuffix(" | None")
        assert TRACE_SCHEMA[field.name].dataType == SPARK_TYPE[base], field.name


def test_events_are_the_records_events() -> None:
    assert EVENTS == trace.EVENTS


def test_raw_and_parquet_schemas_extend_the_trace_schema() -> None:
    assert RAW_SCHEMA.fieldNames() == [*trace.FIELDS, INVALID_COLUMN]
    assert PARQUET_SCHEMA.fieldNames() == [*trace.FIELDS, INVALID_COLUMN, "date"]


def test_bucket_size_is_the_smallest_round_size_giving_at_most_60_buckets() -> None:
    assert bucket_seconds(0.0) == 0.001
    assert bucket_seconds(0.06) == 0.001
    assert bucket_seconds(0.0601) == 0.002
    assert bucket_seconds(3.234) == 0.1
    assert bucket_seconds(3600.0) == 60.0
    assert bucket_seconds(86400.0) == 1800.0
    assert bucket_seconds(1e12) == 31536000.0
