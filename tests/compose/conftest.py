"""The compose cluster (compose/docker-compose.yml) under pytest-docker: ZooKeeper and three
brokers in containers, the brokers' external listeners published on free 127.0.0.1 ports.

pytest-docker's fixtures are set here: ``docker_compose_command`` (``docker compose`` when the
plugin works, else the standalone ``docker-compose``), ``docker_compose_file`` (the project's
file and tests/compose/docker-compose.test.yml, which lowers the failure-detection times),
``docker_compose_project_name`` (one per pytest process: parallel runs do not meet),
``docker_setup`` (``up -d`` of images built by compose/build-offline.sh; never a build here)
and ``docker_cleanup`` (``down -v``: containers, networks and volumes of this project only).

``compose_unavailable()`` says in one line why the tests cannot run here (no Docker client,
no engine, no compose, images not built); every test module skips itself with it.

The cluster itself (``ComposeCluster``: containers by compose label, faults through the docker
CLI) and compose-command detection live in ``cluster.compose``, shared with the chaos runner's
compose backend; they are re-exported here for the tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_docker.plugin import Services

from kafkasim.cluster import compose
from kafkasim.cluster.compose import (
    BROKER_IDS,
    CLUSTER_START_TIMEOUT_S,
    COMPOSE_FILE,
    ComposeCluster,
    compose_command,
    free_broker_ports,
    port_environment,
)
from tests.integration.test_framed_replication import established_to

__all__ = ["BROKER_IDS", "COMPOSE_FILE", "ComposeCluster", "compose_unavailable"]

TEST_COMPOSE_FILE = Path(__file__).resolve().parent / "docker-compose.test.yml"
REPLICATION_PORT = 9096  # the brokers' REPLICATION listener in their containers


def replication_connections(cluster: ComposeCluster) -> int:
    """Followers' fetch streams the brokers accepted on their REPLICATION listeners: TCP
    connections established to that port, from each broker container's /proc/net/tcp."""
    return sum(
        established_to(
            REPLICATION_PORT, cluster.compose("exec", "-T", f"broker-{b}", "cat", "/proc/net/tcp")
        )
        for b in BROKER_IDS
    )


_HINT = "run ./dev test as root on Debian to install and start one"


def compose_unavailable() -> str | None:
    """None when the compose tests can run here, else why not (one line, with the remedy)."""
    prefix = "compose tests skipped: "
    told = os.environ.get("KAFKASIM_COMPOSE_SKIP")
    if told:  # ./dev test's set-up could not start an engine or build the images
        return prefix + told
    reason = compose.compose_unavailable(
        engine_hint=_HINT, images_hint="run compose/build-offline.sh as root"
    )
    return None if reason is None else prefix + reason


# -- pytest-docker's fixtures --------------------------------------------------------------------


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    command = compose_command()
    assert command is not None  # compose_unavailable() said so before any test ran
    return command


@pytest.fixture(scope="session")
def docker_compose_file() -> list[str]:
    return [str(COMPOSE_FILE), str(TEST_COMPOSE_FILE)]


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"kafkasim-test-{os.getpid()}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    return ["up -d --no-build"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    return ["down -v --remove-orphans --timeout 20"]


@pytest.fixture(scope="session")
def broker_ports() -> Iterator[tuple[dict[int, int], dict[int, int], dict[int, int]]]:
    """Host ports of the brokers' external listeners (gRPC, Kafka's protocol) and metrics, in the
    environment every compose command of the session reads (the file interpolates them)."""
    ports = free_broker_ports()
    names = port_environment(*ports)
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield ports
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def compose_project(
    broker_ports: tuple[dict[int, int], dict[int, int], dict[int, int]],
    docker_compose_command: str,
    docker_compose_file: list[str],
    docker_compose_project_name: str,
) -> ComposeCluster:
    return ComposeCluster(
        docker_compose_command, docker_compose_file, docker_compose_project_name, *broker_ports
    )


@pytest.fixture(scope="session")
def compose_down_guard(compose_project: ComposeCluster) -> Iterator[None]:
    """``down -v`` once more at the end, for the case pytest-docker does not clean up: an
    ``up`` that fails half-way raises before its clean-up is armed."""
    yield
    with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
        compose_project.compose("down", "-v", "--remove-orphans", "--timeout", "20")


@pytest.fixture(scope="session")
def compose_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    compose_project: ComposeCluster,
    compose_down_guard: None,
    docker_services: Services,
) -> Iterator[ComposeCluster]:
    """The running cluster, once every broker serves; its logs are saved at the end to
    compose-logs.txt in pytest's base temporary directory."""
    del compose_down_guard  # requested for its teardown, before docker_services
    docker_services.wait_until_responsive(
        check=lambda: asyncio.run(compose_project.serving()),
        timeout=CLUSTER_START_TIMEOUT_S,
        pause=1.0,
    )
    try:
        yield compose_project
    finally:
        logs = tmp_path_factory.getbasetemp() / "compose-logs.txt"
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            logs.write_text(compose_project.compose("logs", "--no-color", "--timestamps"))
