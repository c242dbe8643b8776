"""Transactions through Spark: reads with ``kafka.isolation.level=read_committed`` (batch and
streaming) see only committed transactional records and stop at the last stable offset; the
exactly-once streaming sink (``kafkasim.sink.exactlyOnce``) survives its query being killed
(SIGKILL of the driver's process) at chosen points and restarted: the output read with
read_committed holds every input record exactly once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from kafkasim.client.producer import Producer
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from tests.spark.conftest import ToSend, bootstrap, create_topic, produce

QUERY_TIMEOUT_S = 300


async def _transaction(
    producer: Producer, topic: str, values: Sequence[bytes], *, commit: bool | None
) -> None:
    """One transaction of ``values`` (round-robin over partitions 0-2): committed, aborted
    after being written, or (None) left open after being written."""
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.send(topic, value, partition=i % 3)
    await producer.flush()
    if commit is True:
        await producer.commit_transaction()
    elif commit is False:
        await producer.abort_transaction()


def _write_transactions(cluster: LocalCluster, topic: str, tid: str) -> None:
    """committed c*, aborted a*, plain n*, then an open transaction o* and plain m* after
    it (so both are past the last stable offset). The producer is left open: closing it
    would not end the transaction, but the test must control when it ends."""

    async def main() -> None:
        transport = GrpcTransport()
        config = {"bootstrap.servers": bootstrap(cluster), "transactional.id": tid}
        producer = Producer(config, transport=transport, clock=SystemClock())
        await producer.init_transactions()
        await _transaction(producer, topic, [b"c%d" % i for i in range(6)], commit=True)
        await _transaction(producer, topic, [b"a%d" % i for i in range(6)], commit=False)
        await producer.close()
        await transport.close()

    asyncio.run(main())
    produce(cluster, topic, [ToSend(b"n%d" % i, partition=i % 3) for i in range(3)])


class OpenTransaction:
    """A transaction of o* left open (with plain m* records written after its start, so
    both are past the last stable offset) by a producer kept alive in a thread of its own —
    closing a producer aborts its open transaction, as Kafka's does — until :meth:`end`."""

    def __init__(self, cluster: LocalCluster, topic: str, tid: str) -> None:
        self._cluster, self._topic, self._tid = cluster, topic, tid
        self._written = threading.Event()
        self._end = threading.Event()
        self._commit = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._written.wait(120) and self._error is None, self._error

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported to the test's thread
            self._error = e
            self._written.set()

    async def _main(self) -> None:
        transport = GrpcTransport()
        config = {
            "bootstrap.servers": bootstrap(self._cluster),
            "transactional.id": self._tid,
            "transaction.timeout.ms": 600_000,  # stays open for the whole test
        }
        try:
            async with Producer(config, transport=transport, clock=SystemClock()) as producer:
                await producer.init_transactions()
                await _transaction(
                    producer, self._topic, [b"o%d" % i for i in range(3)], commit=None
                )
                await asyncio.to_thread(
                    produce,
                    self._cluster,
                    self._topic,
                    [ToSend(b"m%d" % i, partition=i % 3) for i in range(3)],
                )
                self._written.set()
                await asyncio.to_thread(self._end.wait)
                if self._commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await transport.close()

    def end(self, *, commit: bool) -> None:
        self._commit = commit
        self._end.set()
        self._thread.join(120)
        assert not self._thread.is_alive() and self._error is None, self._error


def _read(
    spark: SparkSession, cluster: LocalCluster, topic: str, level: str, **options: str
) -> DataFrame:
    return (
        spark.read.format("kafkasim")
        .option("kafkasim.bootstrap.servers", bootstrap(cluster))
        .option("subscribe", topic)
        .option("kafka.isolation.level", level)
        .options(**options)
        .load()
    )


def _values(df: DataFrame) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())


COMMITTED = sorted([b"c%d" % i for i in range(6)] + [b"n%d" % i for i in range(3)])
LATER = sorted([b"o%d" % i for i in range(3)] + [b"m%d" % i for i in range(3)])


def test_a_batch_read_committed_sees_committed_records_up_to_the_lso(
    spark: SparkSession, cluster: LocalCluster
) -> None:
    create_topic(cluster, "txn-batch")
    _write_transactions(cluster, "txn-batch", "txn-batch-writer")
    pending = OpenTransaction(cluster, "txn-batch", "txn-batch-writer")
    try:
        assert _values(_read(spark, cluster, "txn-batch", "read_committed")) == COMMITTED
        uncommitted = _values(_read(spark, cluster, "txn-batch", "read_uncommitted"))
        assert len(uncommitted) == 21 and b"a0" in uncommitted and b"o0" in uncommitted
        # minPartitions cuts ranges inside transactions: the same records come back
        split = _read(spark, cluster, "txn-batch", "read_committed", minPartitions="7")
        assert _values(split) == COMMITTED
    finally:
        pending.end(commit=False)
    after = _values(_read(spark, cluster, "txn-batch", "read_committed"))
    assert after == sorted(COMMITTED + [b"m%d" % i for i in range(3)])


def test_a_stream_read_committed_sees_each_committed_record_once(
    spark: SparkSession, cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "txn-stream")
    _write_transactions(cluster, "txn-stream", "txn-stream-writer")
    checkpoint = tmp_path / "checkpoint"

    out = tmp_path / "out"

    def run() -> list[bytes]:
        source = (
            spark.readStream.format("kafkasim")
            .option("kafkasim.bootstrap.servers", bootstrap(cluster))
            .option("subscribe", "txn-stream")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "5")
            .option("kafka.isolation.level", "read_committed")
            .load()
        )
        query = (
            source.select("value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(QUERY_TIMEOUT_S)
        assert query.exception() is None
        return _values(spark.read.parquet(str(out)))

    pending = OpenTransaction(cluster, "txn-stream", "txn-stream-writer")
    try:
        assert run() == COMMITTED
    finally:
        pending.end(commit=True)
    assert run() == sorted(COMMITTED + LATER)  # each once: the restart read only o* and m*
