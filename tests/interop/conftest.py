"""Interop tests: real Kafka clients (librdkafka through confluent-kafka, kafka-python, kcat)
against a real ZooKeeper and real broker processes on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafkasim.cluster.local import LocalCluster
from kafkasim.controller.zk_process import zookeeper_available


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A started 3-broker cluster shared by one test module."""
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    cluster = LocalCluster(tmp_path_factory.mktemp("kafka_cluster"), brokers=3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
