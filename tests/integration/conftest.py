"""Integration tests: a real ZooKeeper (Debian's package) and real broker processes on
loopback, talking real gRPC. Skipped with one line saying why when ZooKeeper cannot run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kafkasim.cluster.local import LocalCluster
from tests.cli_run import local_cluster as started_cluster


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with started_cluster(tmp_path, brokers=3) as cluster:
        yield cluster
