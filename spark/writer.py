"""Writes: ``df.write.format("kafkasim")`` and ``df.writeStream.format("kafkasim")``.

Columns, as Spark's Kafka sink takes them: ``value`` (required; binary or string, may be
null), ``key`` (binary or string), ``topic`` (string; required unless the ``topic`` option is
set, which then wins), ``partition`` (int; else the producer's partitioner picks one from the
key, as Kafka's does), ``headers`` (array<struct<key: string, value: binary>>). Other columns
are ignored. The columns are checked on the driver (:func:`check_columns`) before any task runs.

Each write task sends its rows with kafkasim's idempotent producer (``acks=all``,
``enable.idempotence=true``) and returns only when every record is acknowledged; a record
that fails fails the task.

Delivery guarantee — at-least-once, as Spark's Kafka sink. The idempotent producer removes
duplicates from its own retries within a task, but the log has no transactions: a task that
Spark runs again (a retried task, a speculative copy, or a micro-batch re-run after a
restart from the checkpoint) writes its rows again, and records written by the tasks of a
failed job stay written (``abort`` cannot take them back). Consumers that need exactly-once
results deduplicate, e.g. on a key carried in the records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)
from typing_extensions import override

from kafkasim.client.producer import Producer, RecordMetadata
from kafkasim.common.clock import SystemClock
from kafkasim.spark import cluster_io
from kafkasim.spark.errors import user_facing
from kafkasim.spark.options import SinkOptions, SparkOptionError, sink_producer_config
from kafkasim.spark.rows import HEADER_TYPE

logger = logging.getLogger(__name__)

# A write task flushes the producer every this many records, so that a large task never
# holds more than that many unacknowledged records in memory (the producer never blocks).
FLUSH_EVERY_RECORDS: Final = 20_000


class SinkColumnError(SparkOptionError):
    """The DataFrame to write lacks a column the sink needs, or has one of a wrong type."""


def check_columns(schema: StructType, options: SinkOptions) -> None:
    """Spark's Kafka sink rules for the written DataFrame's columns."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}

    def expect(name: str, allowed: Sequence[DataType], required: bool = False) -> None:
        found = fields.get(name)
        if found is None:
            if required:
                raise SinkColumnError(
                    f"Required attribute '{name}' not found in the DataFrame written to kafkasim"
                )
            return
        if not any(found == a for a in allowed):
            names = " or ".join(a.simpleString() for a in allowed)
            raise SinkColumnError(
                f"{name} attribute type must be {names}, got {found.simpleString()}"
            )

    expect("value", (StringType(), BinaryType()), required=True)
    expect("key", (StringType(), BinaryType()))
    expect("partition", (IntegerType(),))
    expect("headers", (ArrayType(HEADER_TYPE, True), ArrayType(HEADER_TYPE, False)))
    if options.topic is None:
        if "topic" not in fields:
            raise SinkColumnError(
                "topic option required when no 'topic' attribute is present. Use the 'topic' "
                "option for setting a topic."
            )
        expect("topic", (StringType(),))


@dataclass(frozen=True)
class WriteResult(WriterCommitMessage):
    """What one write task did."""

    records: int
    topics: tuple[str, ...]


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"expected bytes or str, got {type(value).__name__}")


async def _produce(
    conn: cluster_io.ClusterConnection, options: SinkOptions, rows: Iterable[Row]
) -> WriteResult:
    config = sink_producer_config(options.bootstrap_servers, dict(options.producer_config))
    failures: list[BaseException] = []
    topics: set[str] = set()

    def on_completion(_meta: RecordMetadata | None, error: BaseException | None) -> None:
        if error is not None:
            failures.append(error)

    count = 0
    async with Producer(config, transport=conn.transport, clock=SystemClock()) as producer:
        for row in rows:
            fields = row.asDict(recursive=False)
            topic = options.topic or fields.get("topic")
            if not topic:
                raise SinkColumnError(f"a row has no topic to be written to: {row!r}")
            headers = fields.get("headers") or ()
            producer.send(
                topic,
                _bytes(fields["value"]),
                key=_bytes(fields.get("key")),
                headers=[(h["key"], _bytes(h["value"])) for h in headers],
                partition=fields.get("partition"),
                callback=on_completion,
            )
            topics.add(topic)
            count += 1
            if count % FLUSH_EVERY_RECORDS == 0:
                await producer.flush()
            if failures:
                break
        await producer.flush()
    if failures:
        raise failures[0]
    return WriteResult(count, tuple(sorted(topics)))


def write_rows(options: SinkOptions, rows: Iterator[Row]) -> WriteResult:
    with cluster_io.ClusterConnection(options.bootstrap_servers) as conn:
        return conn.run(_produce(conn, options, rows))


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, WriteResult)]
    return sum(m.records for m in done), len(messages) - len(done)


class KafkasimWriter(DataSourceWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    @override
    @user_facing
    def write(self, iterator: Iterator[Row]) -> WriteResult:
        return write_rows(self.options, iterator)

    @override
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        records, _ = _summary(messages)
        logger.info("kafkasim write committed: %d records", records)

    @override
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        records, failed = _summary(messages)
        logger.warning(
            "kafkasim write aborted (%d tasks failed); %d records written by the tasks that "
            "succeeded stay in the log",
            failed,
            records,
        )


class KafkasimStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    @override
    @user_facing
    def write(self, iterator: Iterator[Row]) -> WriteResult:
        return write_rows(self.options, iterator)

    @override
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records, _ = _summary(messages)
        logger.info("kafkasim micro-batch %d committed: %d records", batchId, records)

    @override
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records, failed = _summary(messages)
        logger.warning(
            "kafkasim micro-batch %d aborted (%d tasks failed); %d records already written "
            "stay in the log and the batch will be written again when it is retried",
            batchId,
            failed,
            records,
        )
