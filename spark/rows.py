"""The rows of the ``kafkasim`` source: Spark's Kafka schema, and records turned into it.

The schema is exactly Spark's Kafka source schema (``key`` binary, ``value`` binary,
``topic`` string, ``partition`` int, ``offset`` long, ``timestamp`` timestamp,
``timestampType`` int, and ``headers`` array<struct<key: string, value: binary>> only with
``includeHeaders``). Every column is nullable, as in Spark.

Two ways out of a read task, chosen by the internal option ``kafkasim.read.format``:

* ``arrow`` (default): one ``pyarrow.RecordBatch`` per fetched chunk, built column by column.
  Its Arrow schema is Spark's own mapping of the schema above (``to_arrow_schema``), because
  Spark ≥ 4.2 rejects a batch whose schema is not exactly that.
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

from kafkasim.spark.cluster_io import RecordColumns

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


def to_record_batch(
    chunk: RecordColumns, topic: str, partition: int, schema: pa.Schema
) -> pa.RecordBatch:
    """One Arrow batch of ``chunk``'s records, in ``schema`` (from :func:`arrow_schema`)."""
    n = len(chunk)
    types = schema.types
    columns = [
        pa.array(chunk.keys, type=types[0]),
        pa.array(chunk.values, type=types[1]),
        pa.repeat(pa.scalar(topic, type=types[2]), n),
        pa.repeat(pa.scalar(partition, type=types[3]), n),
        pa.array(chunk.offsets, type=types[4]),
        # Milliseconds as Kafka keeps them, widened to Spark's microseconds by Arrow.
        pa.array(chunk.timestamps_ms, type=pa.timestamp("ms", tz="UTC")).cast(types[5]),
        pa.array(chunk.timestamp_types, type=types[6]),
    ]
    if chunk.headers is not None:
        columns.append(
            pa.array(
                [[{"key": k, "value": v} for k, v in hs] for hs in chunk.headers], type=types[7]
            )
        )
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def to_tuples(chunk: RecordColumns, topic: str, partition: int) -> Iterator[tuple[Any, ...]]:
    """``chunk``'s records as row tuples, in schema order."""
    utc = dt.UTC
    epoch = dt.datetime(1970, 1, 1, tzinfo=utc)
    headers = chunk.headers
    for i in range(len(chunk)):
        row: tuple[Any, ...] = (
            chunk.keys[i],
            chunk.values[i],
            topic,
            partition,
            chunk.offsets[i],
            epoch + dt.timedelta(milliseconds=chunk.timestamps_ms[i]),
            chunk.timestamp_types[i],
        )
        if headers is not None:
            row = (*row, headers[i])
        yield row
