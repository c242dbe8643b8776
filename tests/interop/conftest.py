"""Interop tests: real Kafka clients (librdkafka through confluent-kafka, kafka-python,
aiokafka, kcat) against a real ZooKeeper and three real broker processes, over the brokers' Kafka
listeners. Skipped with one line saying why when ZooKeeper cannot run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafkasim.cluster.local import LocalCluster
from kafkasim.controller.zk_process import zookeeper_available


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One 3-broker cluster per test module (``.kafka_bootstrap`` for Kafka's clients)."""
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    cluster = LocalCluster(tmp_path_factory.mktemp("kafka-cluster"), brokers=3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
