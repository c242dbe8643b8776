"""The compose cluster (compose/docker-compose.yml) under pytest-docker: ZooKeeper and three
brokers in containers, the brokers' external listeners published on free 127.0.0.1 ports.

pytest-docker's fixtures are set here: ``docker_compose_command`` (``docker compose`` when the
plugin works, else the standalone ``docker-compose``), ``docker_compose_file`` (the project's
file and tests/compose/docker-compose.test.yml, which lowers the failure-detection times),
``docker_compose_project_name`` (one per pytest process: parallel runs do not meet),
``docker_setup`` (``up -d`` of images built by compose/build-offline.sh; never a build here)
and ``docker_cleanup`` (``down -v``: containers, networks and volumes of this project only).

``compose_unavailable()`` says in one line why the tests cannot run here (no Docker client,
no engine, no compose, images not built); the test module skips itself with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_docker.plugin import Services

import proto
from client.minimal import MinimalClient
from common.clock import SystemClock
from common.rpc import RpcError
from node.rpc_grpc import GrpcTransport
from proto import kafkasim_pb2 as pb
from sim.history import ReplicaSample

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"
TEST_COMPOSE_FILE = Path(__file__).resolve().parent / "docker-compose.test.yml"
IMAGES = ("kafkasim-broker:latest", "kafkasim-zookeeper:latest")
BROKER_IDS = (1, 2, 3)
DATA_DIR = "/var/lib/kafkasim/logs"  # log.dirs in the broker image

# Bounds, not expectations: a shared two-core machine under vfs is slow to start containers.
CLUSTER_START_TIMEOUT_S = 240.0
DOCKER_COMMAND_TIMEOUT_S = 180.0
RPC_TIMEOUT_S = 2.0

_HINT = "run ./dev test as root on Debian to install and start one"


def _run(args: list[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "/var/run/docker.sock"


def compose_command() -> str | None:
    """``docker compose`` if the plugin answers, else ``docker-compose`` if installed."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        if _run(["docker", "compose", "version"]).returncode == 0:
            return "docker compose"
    if shutil.which("docker-compose") is not None:
        return "docker-compose"
    return None


def compose_unavailable() -> str | None:
    """None when the compose tests can run here, else why not (one line, with the remedy)."""
    prefix = "compose tests skipped: "
    told = os.environ.get("KAFKASIM_COMPOSE_SKIP")
    if told:  # ./dev test's set-up could not start an engine or build the images
        return prefix + told
    if shutil.which("docker") is None:
        return prefix + f"no docker client on PATH ({_HINT})"
    try:
        engine = _run(["docker", "version", "--format", "{{.Server.Version}}"])
    except subprocess.TimeoutExpired:
        return prefix + f"the Docker engine at {_engine_address()} does not answer"
    if engine.returncode != 0:
        return prefix + f"no Docker engine at {_engine_address()} ({_HINT})"
    if compose_command() is None:
        return (
            prefix
            + "neither `docker compose` nor `docker-compose` works (apt-get install docker-compose)"
        )
    for image in IMAGES:
        if _run(["docker", "image", "inspect", image]).returncode != 0:
            return prefix + f"image {image} is not built (run compose/build-offline.sh as root)"
    return None


def _free_loopback_ports(count: int) -> list[int]:
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


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
def broker_ports() -> Iterator[dict[int, int]]:
    """Host ports of the brokers' external listeners, in the environment every compose
    command of the session reads (the file interpolates them)."""
    ports = dict(zip(BROKER_IDS, _free_loopback_ports(len(BROKER_IDS)), strict=True))
    names = {f"KAFKASIM_BROKER_{b}_PORT": str(port) for b, port in ports.items()}
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


# -- the cluster ---------------------------------------------------------------------------------


@dataclass
class ComposeCluster:
    """The running compose project: containers by broker id, faults through the docker CLI
    (each waits for its command; none by name match outside this project)."""

    command: str
    files: list[str]
    project: str
    ports: dict[int, int]

    @property
    def bootstrap(self) -> list[str]:
        return [self.address(b) for b in sorted(self.ports)]

    def address(self, broker_id: int) -> str:
        """The broker's external listener on the host."""
        return f"127.0.0.1:{self.ports[broker_id]}"

    @property
    def network(self) -> str:
        return f"{self.project}_cluster"

    def docker(self, *args: str, timeout_s: float = DOCKER_COMMAND_TIMEOUT_S) -> str:
        result = _run(["docker", *args], timeout_s)
        if result.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def compose(self, *args: str, timeout_s: float = DOCKER_COMMAND_TIMEOUT_S) -> str:
        files = [arg for f in self.files for arg in ("-f", f)]
        argv = [*self.command.split(), *files, "-p", self.project, *args]
        result = _run(argv, timeout_s)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
        return result.stdout

    def container(self, broker_id: int) -> str:
        """The id of broker-N's container (also a stopped one), by compose's labels."""
        found = self.docker(
            "ps",
            "-a",
            "-q",
            "--filter",
            f"label=com.docker.compose.project={self.project}",
            "--filter",
            f"label=com.docker.compose.service=broker-{broker_id}",
        ).split()
        if len(found) != 1:
            raise RuntimeError(f"broker-{broker_id}: expected one container, found {found}")
        return found[0]

    def kill(self, broker_id: int) -> None:
        self.docker("kill", self.container(broker_id))

    def start(self, broker_id: int) -> None:
        self.docker("start", self.container(broker_id))

    def pause(self, broker_id: int) -> None:
        self.docker("pause", self.container(broker_id))

    def unpause(self, broker_id: int) -> None:
        self.docker("unpause", self.container(broker_id))

    def disconnect(self, broker_id: int) -> None:
        """Cut the broker off the cluster network (ZooKeeper and the other brokers); its
        external listener stays reachable from the host through the other network."""
        self.docker("network", "disconnect", self.network, self.container(broker_id))

    def connect(self, broker_id: int) -> None:
        # The aliases are what the others resolve broker-N by (its advertised internal
        # listener is broker-N.cluster); a reconnect does not restore them by itself.
        self.docker(
            "network",
            "connect",
            "--alias",
            f"broker-{broker_id}",
            "--alias",
            f"broker-{broker_id}.cluster",
            self.network,
            self.container(broker_id),
        )

    def copy_partition(self, broker_id: int, topic: str, partition: int, dest: Path) -> Path | None:
        """Copy the broker's directory of one partition to ``dest`` (None if it has none)."""
        dest.mkdir(parents=True, exist_ok=True)
        source = f"{self.container(broker_id)}:{DATA_DIR}/{topic}-{partition}"
        result = _run(["docker", "cp", source, str(dest)], DOCKER_COMMAND_TIMEOUT_S)
        if result.returncode != 0:
            return None
        return dest / f"{topic}-{partition}"

    def logs(self, broker_id: int) -> str:
        result = _run(["docker", "logs", self.container(broker_id)], DOCKER_COMMAND_TIMEOUT_S)
        return result.stdout + result.stderr

    async def describe(self, transport: GrpcTransport, broker_id: int) -> list[pb.ReplicaState]:
        """The broker's replicas as it reports them ([] when it does not answer)."""
        try:
            response = await transport.call(
                self.address(broker_id),
                proto.METHOD_DESCRIBE_REPLICAS,
                pb.DescribeReplicasRequest(),
                timeout_s=RPC_TIMEOUT_S,
            )
        except RpcError:
            return []
        assert isinstance(response, pb.DescribeReplicasResponse)
        return list(response.replicas)

    async def samples(
        self, transport: GrpcTransport, topic: str, brokers: tuple[int, ...] = BROKER_IDS
    ) -> list[ReplicaSample]:
        found: list[ReplicaSample] = []
        for broker_id in brokers:
            found.extend(
                ReplicaSample.from_state(0, r)
                for r in await self.describe(transport, broker_id)
                if r.topic == topic
            )
        return found

    async def serving(self) -> bool:
        """Every broker answers Metadata on its external listener and names all three."""
        transport = GrpcTransport()
        try:
            for broker_id in sorted(self.ports):
                client = MinimalClient(
                    transport, [self.address(broker_id)], SystemClock(), request_timeout_ms=2000
                )
                try:
                    response = await client.refresh_metadata()
                except RpcError:
                    return False
                if {b.node_id for b in response.brokers} != set(self.ports):
                    return False
            return True
        finally:
            await transport.close()


@pytest.fixture(scope="session")
def compose_project(
    broker_ports: dict[int, int],
    docker_compose_command: str,
    docker_compose_file: list[str],
    docker_compose_project_name: str,
) -> ComposeCluster:
    return ComposeCluster(
        docker_compose_command, docker_compose_file, docker_compose_project_name, broker_ports
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
