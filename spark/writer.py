"""Writes: ``df.write.format("kafkasim")`` and ``df.writeStream.format("kafkasim")``.

Columns, as Spark's Kafka sink takes them: ``value`` (required; binary or string, may be
null), ``key`` (binary or string), ``topic`` (string; required unless the ``topic`` option is
set, which then wins), ``partition`` (int; else the producer's partitioner picks one from the
key, as Kafka's does), ``headers`` (array<struct<key: string, value: binary>>). Other columns
are ignored. The columns are checked on the driver (:func:`check_columns`) before any task runs.

Each write task sends its rows with kafkasim's idempotent producer (``acks=all``,
``enable.idempotence=true``) and returns only when every record is acknowledged; a record
that fails fails the task.

Delivery guarantee, by default at-least-once, as Spark's Kafka sink. The idempotent producer
removes duplicates from its own retries within a task, but a task that Spark runs again (a
retried task, a speculative copy, or a micro-batch re-run after a restart from the
checkpoint) writes its rows again, and records written by the tasks of a failed job stay
written (``abort`` cannot take them back). Consumers that need exactly-once results
deduplicate, e.g. on a key carried in the records.

Exactly-once streaming writes (``kafkasim.sink.exactlyOnce=true``, for read_committed
readers). The commit protocol, per micro-batch ``b`` of query ``q`` and write task of Spark
partition ``p`` (the task reads ``q`` and ``b`` from the local properties Spark's streaming
engine sets for its jobs, ``sql.streaming.queryId`` and ``streaming.sql.batchId``):

1. The task's transactional id is ``<prefix>-<p>``, with ``prefix`` the option
   ``kafkasim.transactional.id.prefix`` or ``kafkasim-spark-<q>`` (the query id survives
   restarts: it is in the checkpoint). ``init_transactions`` fences every earlier holder of
   the id — an earlier attempt of this task, a speculative copy, a zombie of a previous
   driver — and aborts the transaction it left open.
2. The task reads the group ``<prefix>-<p>``'s committed offset of partition 0 of the
   output topic with ``require_stable`` (after step 1 no transaction of the id is pending):
   the offset is the next micro-batch the task has to write (last written batch + 1). When
   it is past ``b``, batch ``b`` of this partition is already in the log, committed: the
   task writes nothing (it drains its rows) and succeeds.
3. Otherwise it writes its rows in one transaction, adds the offset ``b + 1`` for that group
   (``send_offsets_to_transaction``, TxnOffsetCommit) and commits: the rows and the batch id
   become visible together or not at all. Any failure aborts the transaction (and a crash
   leaves it to step 1 of the next attempt, or to the transaction timeout).
4. The driver's ``commit(messages, b)`` only logs; Spark then writes its commit log.

So whatever is killed and re-run — a task before or after its commit, the driver before or
after ``commit``, a whole query before its commit log — each (b, p) is committed once, and a
read_committed consumer sees every row once. Assumptions: a re-run micro-batch gives every
task partition the same rows (Spark's deterministic re-execution of the same offsets; the
same plan and number of shuffle partitions, which Spark pins in the checkpoint; no
nondeterministic expressions deciding the rows); one query per prefix; the group's offset is
kept (Kafka expires the offsets of an empty group after ``offsets.retention.minutes``, 7 days:
a query stopped longer than that in the middle of a micro-batch could write that batch's
committed tasks again). Chosen over a two-phase variant (tasks prepare, the driver's
``commit`` ends every transaction with EndTxn): the re-run test of step 2 is needed there
too, and the driver phase would add open transactions spanning the whole batch (bounded by
``transaction.timeout.ms``), EndTxn from another client than the producer and fencing of
the driver's commit by a retried task, for one gain only — a batch that fails for good
leaves none of its tasks' rows visible; here a task's rows are atomic, a batch's are not
until it is re-run (a restarted query re-runs it, and then it is complete, once).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from pyspark import TaskContext
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

from kafkasim.client.admin import AdminClient
from kafkasim.client.producer import Producer, RecordMetadata
from kafkasim.client.transaction_types import ConsumerGroupMetadata, OffsetAndMetadata
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import KafkasimError
from kafkasim.common.types import TopicPartition
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
    """What one write task did; ``skipped``: an exactly-once task found its micro-batch
    already committed and wrote nothing."""

    records: int
    topics: tuple[str, ...]
    skipped: bool = False


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"expected bytes or str, got {type(value).__name__}")


async def send_rows(
    producer: Producer, options: SinkOptions, rows: Iterable[Row]
) -> tuple[int, tuple[str, ...]]:
    """Send every row with ``producer`` and wait for every acknowledgement (flushing every
    FLUSH_EVERY_RECORDS); the first record that failed is raised. The number of records
    and the topics written."""
    failures: list[BaseException] = []
    topics: set[str] = set()

    def on_completion(_meta: RecordMetadata | None, error: BaseException | None) -> None:
        if error is not None:
            failures.append(error)

    count = 0
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
    return count, tuple(sorted(topics))


async def _produce(
    conn: cluster_io.ClusterConnection, options: SinkOptions, rows: Iterable[Row]
) -> WriteResult:
    config = sink_producer_config(options.bootstrap_servers, dict(options.producer_config))
    async with Producer(config, transport=conn.transport, clock=SystemClock()) as producer:
        count, topics = await send_rows(producer, options, rows)
    return WriteResult(count, topics)


def write_rows(options: SinkOptions, rows: Iterator[Row]) -> WriteResult:
    with cluster_io.ClusterConnection(options.bootstrap_servers) as conn:
        return conn.run(_produce(conn, options, rows))


# -- exactly-once streaming writes (see the module doc) ------------------------------------

QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"


class ExactlyOnceError(KafkasimError):
    """An exactly-once write cannot run: the task is not part of a streaming micro-batch."""


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Which micro-batch of which query a write task writes, as which Spark partition."""

    query_id: str
    batch_id: int
    partition_id: int


def current_task() -> TaskIdentity:
    """The running Spark task's identity, from its TaskContext (see the module doc)."""
    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
    if context is None or query_id is None or batch_id is None:
        raise ExactlyOnceError(
            "kafkasim.sink.exactlyOnce: the write task is not part of a streaming micro-batch "
            f"(no '{QUERY_ID_PROPERTY}' / '{BATCH_ID_PROPERTY}' in its Spark local properties)"
        )
    return TaskIdentity(query_id, int(batch_id), context.partitionId())


def transactional_id(options: SinkOptions, task: TaskIdentity) -> str:
    prefix = options.transactional_id_prefix or f"kafkasim-spark-{task.query_id}"
    return f"{prefix}-{task.partition_id}"


async def committed_batches(
    conn: cluster_io.ClusterConnection, admin: AdminClient, group: str, tp: TopicPartition
) -> int:
    """The group's stable committed offset of ``tp`` (the next micro-batch to write), 0 when
    it has none; a pending transactional commit is waited out (UNSTABLE_OFFSET_COMMIT is
    retriable, under the connection's retry policy)."""
    async for attempt in conn.client.retrying():
        with attempt:
            offsets = await admin.list_group_offsets(group, require_stable=True)
            return offsets.get(tp, 0)
    raise AssertionError("unreachable")  # pragma: no cover


async def produce_exactly_once(
    conn: cluster_io.ClusterConnection,
    options: SinkOptions,
    task: TaskIdentity,
    rows: Iterable[Row],
) -> WriteResult:
    """Steps 1-3 of the module doc for one task."""
    assert options.topic is not None  # parse_sink_options requires it
    tid = transactional_id(options, task)
    marker = TopicPartition(options.topic, 0)
    config = {
        **sink_producer_config(options.bootstrap_servers, dict(options.producer_config)),
        "transactional.id": tid,
    }
    admin = AdminClient(options.bootstrap_servers, transport=conn.transport, clock=SystemClock())
    async with Producer(config, transport=conn.transport, clock=SystemClock()) as producer:
        await producer.init_transactions()
        next_batch = await committed_batches(conn, admin, tid, marker)
        if next_batch > task.batch_id:
            logger.info(
                "%s: micro-batch %d is already written (next: %d); skipping its rows",
                tid,
                task.batch_id,
                next_batch,
            )
            for _ in rows:
                pass
            return WriteResult(0, (), skipped=True)
        producer.begin_transaction()
        try:
            count, topics = await send_rows(producer, options, rows)
            await producer.send_offsets_to_transaction(
                {marker: OffsetAndMetadata(task.batch_id + 1, f"batch {task.batch_id}")},
                ConsumerGroupMetadata(tid),
            )
            await producer.commit_transaction()
        except BaseException:
            with contextlib.suppress(Exception):  # fenced, or the cluster is gone
                await producer.abort_transaction()
            raise
    return WriteResult(count, topics)


def write_rows_exactly_once(
    options: SinkOptions, rows: Iterator[Row], task: TaskIdentity | None = None
) -> WriteResult:
    task = task or current_task()
    with cluster_io.ClusterConnection(options.bootstrap_servers) as conn:
        return conn.run(produce_exactly_once(conn, options, task, rows))


def _summary(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, WriteResult)]
    return sum(m.records for m in done), len(messages) - len(done)


def _skipped(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(1 for m in messages if isinstance(m, WriteResult) and m.skipped)


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
        if self.options.exactly_once:
            return write_rows_exactly_once(self.options, iterator)
        return write_rows(self.options, iterator)

    @override
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records, _ = _summary(messages)
        logger.info(
            "kafkasim micro-batch %d committed: %d records (%d tasks found it already written)",
            batchId,
            records,
            _skipped(messages),
        )

    @override
    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records, failed = _summary(messages)
        if self.options.exactly_once:
            logger.warning(
                "kafkasim micro-batch %d aborted (%d tasks failed); the %d records of the "
                "tasks that committed are written once: a re-run of the batch skips them",
                batchId,
                failed,
                records,
            )
            return
        logger.warning(
            "kafkasim micro-batch %d aborted (%d tasks failed); %d records already written "
            "stay in the log and the batch will be written again when it is retried",
            batchId,
            failed,
            records,
        )
