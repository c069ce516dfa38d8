"""The trace record as an explicit Spark schema, and the rule that makes a trace line valid.

``superpeer.trace`` defines the record; the schema is made from its fields (names and order, and
types from their annotations: ``float`` a double, ``str`` a string, ``int`` a long), so a field
added there is read here too (``deploy/spark-submit.sh`` ships ``superpeer/trace.py`` beside this
package). Spark never infers the schema: inference reads the data twice and guesses types from
whatever lines it samples, so one odd line could change the type of a column for the whole run.

A line is *valid* when it parses as a JSON object whose fields have the schema's types and

- ``ts`` is a finite number of seconds in ``[0, MAX_TS)`` (from the epoch up to the year 9999, the
  range Spark's dates and timestamps can hold; ``analytics.definitions``),
- ``node``, ``event`` and ``kind`` are present, and ``event`` is one of ``superpeer.trace.EVENTS``.

Blank lines (nothing but whitespace) are skipped, as a JSON-lines reader does. Every other line that
is not valid is *invalid*: counted, kept with its original text, reported, and left out of the
figures. As in Spark's JSON reader, a JSON value of another type in a string field is kept as its
JSON text (``"node": 5`` reads as ``"5"``), unknown fields are ignored, and a missing or null
``bytes`` counts as 0.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Final, get_args, get_type_hints

from pyspark.sql.types import (
    DataType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from superpeer.trace import TraceRecord

_SPARK_TYPES: Final[dict[type, DataType]] = {
    float: DoubleType(),
    str: StringType(),
    int: LongType(),
}


def _spark_type(annotation: object) -> DataType:
    """The Spark type of a record field annotated ``T`` or ``T | None``."""
    (base,) = [t for t in get_args(annotation) or (annotation,) if t is not type(None)]
    return _SPARK_TYPES[base]


_HINTS: Final = get_type_hints(TraceRecord)
TRACE_SCHEMA: Final = StructType(
    [StructField(f.name, _spark_type(_HINTS[f.name])) for f in fields(TraceRecord)]
)
"""One trace line: the fields of ``superpeer.trace.TraceRecord``, in the same order."""

INVALID_COLUMN: Final = "_corrupt_record"
"""The original text of an invalid line; null on valid lines. Named as Spark names the column in
which its PERMISSIVE JSON parsing keeps lines it could not parse."""

RAW_SCHEMA: Final = StructType([*TRACE_SCHEMA.fields, StructField(INVALID_COLUMN, StringType())])
"""What ``analytics.load.read_traces`` returns: every non-blank line, valid or not."""

DATE_COLUMN: Final = "date"
"""The UTC date of ``ts``: with ``node``, the partition columns of the Parquet copy."""

PARQUET_SCHEMA: Final = StructType([*RAW_SCHEMA.fields, StructField(DATE_COLUMN, DateType())])
"""The Parquet copy's columns. Given on read, so Spark does not infer the partition columns' types
from directory names (a super-peer named ``42`` would otherwise come back as a number)."""
