"""Interop tests: Kafka's own clients (confluent-kafka/librdkafka, kafka-python, aiokafka, kcat)
against a real local cluster's Kafka listeners. One 3-broker cluster per test module; skipped
with one line saying why when ZooKeeper cannot run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafkasim.cluster.local import LocalCluster
from tests.cli_run import local_cluster


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A started 3-broker ``LocalCluster``; ``kafka_cluster.kafka_bootstrap`` is what Kafka's
    clients take as ``bootstrap.servers``."""
    with local_cluster(tmp_path_factory.mktemp("interop"), brokers=3) as cluster:
        yield cluster
