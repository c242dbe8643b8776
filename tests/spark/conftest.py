"""The PySpark data source against real processes: a real ZooKeeper and three brokers on
loopback (``cluster.local.LocalCluster``) and a real Spark in local mode (``local[2]``).

Spark starts slowly (a JVM), so each test module shares one SparkSession and one cluster; each
test uses topics of its own. The tests need the ``spark`` extra (pyspark, pyarrow, pandas) and
Java; without them this directory is not collected, and without ZooKeeper its tests are skipped,
each with one line saying why.

Spark's Python workers are separate processes started by the JVM: they run this interpreter
(``PYSPARK_PYTHON``) with the repository on their path (``spark.executorEnv.PYTHONPATH``), as
an installed ``kafkasim[spark]`` would be found on a real cluster.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kafkasim.client.admin import AdminClient
from kafkasim.client.producer import Producer
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import REPO_ROOT, LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.controller.zk_process import zookeeper_available
from tests.cli_run import TEST_BROKER_PROPS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

if importlib.util.find_spec("pyspark") is None or importlib.util.find_spec("pyarrow") is None:
    # Only the pure option checks could run without Spark, and they import it too.
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    local = LocalCluster(
        Path(tmp_path_factory.mktemp("spark-cluster")),
        brokers=3,
        broker_props=dict(TEST_BROKER_PROPS),
    )
    try:
        local.start()
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    from pyspark.sql import SparkSession

    from kafkasim.spark import KafkasimDataSource

    previous = os.environ.get("PYSPARK_PYTHON")
    # The JVM starts Python workers with PYSPARK_PYTHON (default: whatever python3 is on the
    # PATH, which lacks this venv's packages); it reads the variable when the session starts.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kafkasim-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.executorEnv.PYTHONPATH", str(REPO_ROOT))
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.streaming.stopTimeout", "60s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(KafkasimDataSource)
    try:
        yield session
    finally:
        session.stop()
        if previous is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = previous


@dataclass(frozen=True)
class Produced:
    """A record as produced and acknowledged: where it landed and what it holds."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class ToSend:
    value: bytes
    key: bytes | None = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def bootstrap(cluster: LocalCluster) -> str:
    return ",".join(cluster.bootstrap)


def create_topic(cluster: LocalCluster, topic: str, partitions: int = 3) -> None:
    async def main() -> None:
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            await client.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})
            await client.wait_for_leaders(topic, partitions)
        finally:
            await transport.close()

    asyncio.run(main())


def produce(cluster: LocalCluster, topic: str, records: Sequence[ToSend]) -> list[Produced]:
    """Send ``records`` in order with the idempotent producer; what was acknowledged."""

    async def main() -> list[Produced]:
        transport = GrpcTransport()
        try:
            config = {"bootstrap.servers": bootstrap(cluster), "linger.ms": 5}
            async with Producer(config, transport=transport, clock=SystemClock()) as producer:
                futures = [
                    producer.send(
                        topic,
                        r.value,
                        key=r.key,
                        headers=r.headers,
                        partition=r.partition,
                        timestamp=r.timestamp_ms,
                    )
                    for r in records
                ]
                done = [await f for f in futures]
        finally:
            await transport.close()
        return [
            Produced(topic, m.partition, m.offset, m.timestamp, r.key, r.value, r.headers)
            for r, m in zip(records, done, strict=True)
        ]

    return asyncio.run(main())


def admin_call(cluster: LocalCluster, what: str, *args: object) -> object:
    """One AdminClient coroutine by name (describe_topics, delete_records, ...)."""

    async def main() -> object:
        transport = GrpcTransport()
        try:
            admin = AdminClient(cluster.bootstrap, transport=transport, clock=SystemClock())
            return await getattr(admin, what)(*args)
        finally:
            await transport.close()

    return asyncio.run(main())


def leader_of(cluster: LocalCluster, tp: TopicPartition) -> int:
    (description,) = admin_call(cluster, "describe_topics", [tp.topic])  # type: ignore[misc]
    return int(description.partitions[tp.partition].leader)
