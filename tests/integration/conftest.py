"""Integration tests: a real ZooKeeper (Debian's package) and real broker processes on
loopback, talking real gRPC. Skipped with one line saying why when ZooKeeper cannot run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkasim.cluster.local import LocalCluster
from kafkasim.controller.zk_process import zookeeper_available


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    cluster = LocalCluster(tmp_path, brokers=3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
