"""Transactions through Spark: reads with ``kafka.isolation.level=read_committed`` (batch and
streaming) see only committed transactional records and stop at the last stable offset; the
exactly-once streaming sink (``kafkasim.sink.exactlyOnce``) survives its query being killed
(SIGKILL of the driver's process) at chosen points and restarted: the output read with
read_committed holds every input record exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Row, SparkSession

from kafkasim.client.producer import Producer
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import REPO_ROOT, LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import ProducerFencedError
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.spark.options import SinkOptions, parse_sink_options
from kafkasim.spark.writer import TaskIdentity, write_rows_exactly_once
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


# -- the exactly-once sink -------------------------------------------------------------------


def _sink_options(cluster: LocalCluster, topic: str) -> SinkOptions:
    return parse_sink_options(
        {
            "kafkasim.bootstrap.servers": bootstrap(cluster),
            "topic": topic,
            "kafkasim.sink.exactlyOnce": "true",
            "kafkasim.transactional.id.prefix": f"{topic}-query",
        }
    )


def _committed_values(cluster: LocalCluster, topic: str, partitions: int = 3) -> list[bytes]:
    return sorted(v or b"" for v in _log_values(cluster, topic, partitions, read_committed=True))


def _log_values(
    cluster: LocalCluster, topic: str, partitions: int, *, read_committed: bool
) -> list[bytes | None]:
    async def main() -> list[bytes | None]:
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            out: list[bytes | None] = []
            for p in range(partitions):
                records = await client.read_all(
                    TopicPartition(topic, p), read_committed=read_committed
                )
                out.extend(r.value for r in records)
            return out
        finally:
            await transport.close()

    return asyncio.run(main())


def test_a_task_re_running_a_committed_micro_batch_writes_nothing(cluster: LocalCluster) -> None:
    """The task-level protocol without Spark: batch 0 of partition 0 written, its re-run
    skipped, batch 1 written; a zombie holding the task's transactional id is fenced."""
    create_topic(cluster, "eos-task")
    options = _sink_options(cluster, "eos-task")
    task = TaskIdentity("q", 0, 0)
    first = write_rows_exactly_once(
        options, iter([Row(value=b"b0-%d" % i) for i in range(4)]), task
    )
    assert (first.records, first.skipped) == (4, False)
    again = write_rows_exactly_once(
        options, iter([Row(value=b"b0-%d" % i) for i in range(4)]), task
    )
    assert (again.records, again.skipped) == (0, True)

    async def zombie_then_batch_1() -> None:
        transport = GrpcTransport()
        config = {"bootstrap.servers": bootstrap(cluster), "transactional.id": "eos-task-query-0"}
        try:
            async with Producer(config, transport=transport, clock=SystemClock()) as zombie:
                await zombie.init_transactions()
                zombie.begin_transaction()
                zombie.send("eos-task", b"zombie", partition=0)
                await zombie.flush()
                next_task = TaskIdentity("q", 1, 0)
                rows = iter([Row(value=b"b1-0")])
                await asyncio.to_thread(write_rows_exactly_once, options, rows, next_task)
                with pytest.raises(ProducerFencedError):
                    await zombie.commit_transaction()
        finally:
            await transport.close()

    asyncio.run(zombie_then_batch_1())
    assert _committed_values(cluster, "eos-task") == sorted(
        [b"b0-%d" % i for i in range(4)] + [b"b1-0"]
    )


def test_a_batch_write_refuses_exactly_once(spark: SparkSession, cluster: LocalCluster) -> None:
    writer = (
        spark.createDataFrame([("v",)], "value string")
        .write.format("kafkasim")
        .mode("append")
        .option("kafkasim.bootstrap.servers", bootstrap(cluster))
        .option("topic", "t")
        .option("kafkasim.sink.exactlyOnce", "true")
    )
    with pytest.raises(PySparkException, match="applies to streaming writes only"):
        writer.save()


def _run_driver(
    cluster: LocalCluster, tmp_path: Path, run: int, block: str
) -> subprocess.Popen[bytes]:
    marker = tmp_path / f"marker-{run}"
    command = [
        sys.executable,
        str(Path(__file__).with_name("eos_driver.py")),
        "--bootstrap",
        bootstrap(cluster),
        "--input",
        "eos-in",
        "--output",
        "eos-out",
        "--checkpoint",
        str(tmp_path / "checkpoint"),
        "--local-dir",
        str(tmp_path / "spark-local"),
        "--marker",
        str(marker),
    ]
    if block:
        command += ["--block", block]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with (tmp_path / f"driver-{run}.log").open("wb") as log:  # the child keeps its own fd
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _kill_at_marker(process: subprocess.Popen[bytes], marker: Path) -> None:
    """Wait for the query to reach its blocking point, then SIGKILL its process group (the
    driver and Spark's JVM) and the blocked Python worker."""
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while not marker.exists():
        assert process.poll() is None, f"the query exited ({process.returncode}) before blocking"
        assert time.monotonic() < deadline, "the query never reached its blocking point"
        time.sleep(0.5)
    time.sleep(0.5)  # the marker's pid is written
    worker = int(marker.read_text() or 0)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(60)
    if worker:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGKILL)


def test_an_exactly_once_query_killed_and_restarted_writes_every_record_once(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """240 records copied in micro-batches of 40 (batches 0-5, 3 tasks each). The query is
    SIGKILLed in the middle of a task of batch 1 (rows of an open transaction in the log),
    after every task of batch 2 committed but before Spark's commit log, in a task of
    batch 3, and before the commit log of batch 4; then it runs to the end. The output read
    with read_committed holds every input record exactly once."""
    create_topic(cluster, "eos-in")
    create_topic(cluster, "eos-out")
    produce(cluster, "eos-in", [ToSend(b"e%03d" % i, partition=i % 3) for i in range(240)])
    for run, block in enumerate(["write:1:1", "commit:2", "write:3:0", "commit:4"]):
        process = _run_driver(cluster, tmp_path, run, block)
        try:
            _kill_at_marker(process, tmp_path / f"marker-{run}")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(60)
    last = _run_driver(cluster, tmp_path, 9, "")
    try:
        assert last.wait(QUERY_TIMEOUT_S) == 0, (tmp_path / "driver-9.log").read_text()
    finally:
        if last.poll() is None:
            os.killpg(last.pid, signal.SIGKILL)
            last.wait(60)
    assert _committed_values(cluster, "eos-out") == [b"e%03d" % i for i in range(240)]
    # The kills did leave rows behind (aborted transactions, and whole batches committed
    # before a kill that Spark ran again): read_uncommitted sees more than the input.
    everything = _log_values(cluster, "eos-out", 3, read_committed=False)
    assert len([v for v in everything if v]) > 240
