"""The rows of the ``kafkasim`` source: Spark's Kafka schema, and records turned into it.

The schema is exactly Spark's Kafka source schema (``key`` binary, ``value`` binary,
``topic`` string, ``partition`` int, ``offset`` long, ``timestamp`` timestamp,
``timestampType`` int, and ``headers`` array<struct<key: string, value: binary>> only with
``includeHeaders``). Every column is nullable, as in Spark.

Two ways out of a read task, chosen by the internal option ``kafkasim.read.format``:

* ``arrow`` (default): one ``pyarrow.RecordBatch`` per fetched chunk, decoded straight into
  Arrow columns (:mod:`spark.arrow_decode`). Its Arrow schema is Spark's own mapping of the
  schema above (``to_arrow_schema``), because Spark ≥ 4.2 rejects a batch whose schema is not
  exactly that.
* ``tuples``: one tuple per record, which Spark's worker converts to Arrow row by row (kept
  to measure what the Arrow path saves: ``bench/spark_bench.py``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafkasim.client.record_columns import RecordColumns

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (``headers`` last, only when asked for)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    return to_arrow_schema(kafka_schema(include_headers), timezone="UTC")


def to_tuples(chunk: RecordColumns, include_headers: bool) -> Iterator[tuple[Any, ...]]:
    """``chunk``'s records as row tuples, in schema order."""
    utc = dt.UTC
    epoch = dt.datetime(1970, 1, 1, tzinfo=utc)
    topic, partition, headers = chunk.topic, chunk.partition, chunk.headers
    for i in range(len(chunk)):
        row: tuple[Any, ...] = (
            chunk.keys[i],
            chunk.values[i],
            topic,
            partition,
            chunk.offsets[i],
            epoch + dt.timedelta(milliseconds=chunk.timestamps[i]),
            chunk.timestamp_types[i],
        )
        if include_headers:
            row = (*row, list(headers[i]))
        yield row
