"""The compose cluster (compose/docker-compose.yml) as a library, and the chaos runner's
compose backend. (One module, ~775 lines: the backend is a thin layer over the library, and
both go through the same docker CLI calls.)

``ComposeCluster`` drives one compose project: ZooKeeper and brokers 1-3 in containers, the
brokers' external listeners (gRPC and Kafka's protocol) published on 127.0.0.1 ports of our
choosing, every fault through the docker CLI on that project's containers only (found by
compose's labels, never by a name match). The compose tests (tests/compose) and
``ComposeBackend`` share it.

``ComposeBackend`` (``COMPOSE``, ``kafkasim chaos run SCENARIO --backend compose``) runs a
scenario on a compose project of its own: a project name and free 127.0.0.1 ports per run,
the scenario's broker settings (``faults.backend.broker_props``) in a generated override file
(``KAFKASIM_CFG_<KEY>`` variables, see compose/broker-entrypoint.sh) under the run's
directory, and ``down -v`` (that project's containers, networks and volumes) at the end,
whatever happened. How each fault maps onto containers:

* ``crash``: ``docker kill`` (SIGKILL); healed, or ``restart``: ``docker start`` (the broker's
  volume keeps its data).
* ``pause``: ``docker pause`` (the cgroup freezer), then ``docker unpause``.
* ``controlled_shutdown``: ``docker stop`` (SIGTERM: the broker's controlled shutdown; SIGKILL
  if it has not exited after 40 s); ``rolling_restart``: that and ``docker start``, each broker
  in turn.
* ``isolate``: ``docker network disconnect`` from the project's ``cluster`` network, where the
  other brokers and ZooKeeper are; healed by ``docker network connect`` with its
  ``broker-N`` / ``broker-N.cluster`` aliases. Clients on the published listener (the
  ``host-access`` network) still reach it, unlike the simulation's isolate, which cuts clients
  too: this is the case where an isolated leader, still written to, must stop acknowledging
  acks=all writes (its ZooKeeper session expires, the controller elects another leader, and
  the old one truncates when it returns).
* ``split``, ``isolate_zk``, ``partition_one_way``: iptables DROP rules inside the brokers'
  own network namespaces, added from the host (``cluster.container_net``; root only): clients
  still reach every broker, and a broker started again gets the rules still in force.

Refused, before any container starts (``compose_spec``): a slow network or a slow one-way link
(delaying a container's traffic needs tc netem in the host's kernel: ``netem_refusal`` probes
it), a ZooKeeper session expiry, a full disk, a clock jump or drift, a crash that loses
unflushed data or tears a write, and any scenario whose broker count is not 3 (the compose
file has brokers 1-3).

The final logs are read after every broker stopped cleanly (``docker stop``), before
``down -v``: from the brokers' volumes on this host (``docker volume inspect``'s Mountpoint,
readable as root), else copied out of the stopped containers (``docker cp``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

from kafkasim import proto
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.chaos import ChaosError, process_backend
from kafkasim.cluster.container_net import (
    LINK_FAULTS,
    ContainerLinkFaults,
    ContainerNetwork,
    delay_refusal,
    filtering_refusal,
    link_refusals,
    locate,
)
from kafkasim.cluster.netns import NetnsError
from kafkasim.common.clock import SystemClock
from kafkasim.common.config import DEV_ZK_SESSION_TIMEOUT_MS
from kafkasim.common.private_files import write_private
from kafkasim.common.rpc import RpcError
from kafkasim.common.rpc_grpc_client import GrpcTransport, client_transport
from kafkasim.controller.zk_process import free_loopback_port
from kafkasim.faults.backend import BackendSpec, broker_props
from kafkasim.faults.history import ReplicaSample
from kafkasim.faults.scenario import Scenario
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = [
    "BROKER_IDS",
    "COMPOSE_FILE",
    "IMAGES",
    "INJECTABLE",
    "NOT_INJECTABLE",
    "RUNTIME",
    "ComposeBackend",
    "ComposeCluster",
    "compose_command",
    "compose_spec",
    "compose_spec_for",
    "compose_unavailable",
    "config_environment",
    "free_broker_ports",
    "free_loopback_ports",
    "render_override",
]

logger = logging.getLogger(__name__)

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
COMPOSE_FILE: Final = REPO_ROOT / "compose" / "docker-compose.yml"
IMAGES: Final = ("kafkasim-broker:latest", "kafkasim-zookeeper:latest")
BROKER_IDS: Final = (1, 2, 3)
DATA_DIR: Final = "/var/lib/kafkasim/logs"  # log.dirs in the broker image
SERVICES: Final = tuple(f"broker-{b}" for b in BROKER_IDS)

# Bounds, not expectations: a shared two-core machine under vfs is slow to start containers.
CLUSTER_START_TIMEOUT_S: Final = 240.0
DOCKER_COMMAND_TIMEOUT_S: Final = 180.0
RPC_TIMEOUT_S: Final = 2.0
STOP_TIMEOUT_S: Final = 40  # as stop_grace_period in the compose file
_START_POLL_S: Final = 1.0

RUNTIME: Final = "the compose cluster"
_NO_DISK_LIMIT: Final = "a full disk needs a size-limited filesystem as each broker's volume"

INJECTABLE: Final = frozenset(
    {"crash", "restart", "pause", "controlled_shutdown", "rolling_restart", "isolate"}
)
"""What the compose backend injects on any host with an engine."""
NOT_INJECTABLE: Final[Mapping[str, str]] = MappingProxyType(
    {
        "expire_session": "a broker's ZooKeeper session id and password never leave its container",
        "disk_full": _NO_DISK_LIMIT,
        "clock_jump": "containers share the host kernel's clock: stepping one needs "
        "libfaketime or a time namespace",
        "clock_drift": "containers share the host kernel's clock: making one run fast or slow "
        "needs libfaketime",
        "torn_write": "tearing a write needs a power cut: after docker kill the host's page "
        "cache still holds every write",
        "slow_disk": "delaying a container's disk needs device-mapper's dm-delay under its "
        "volume, which this runner does not set up",
    }
)
"""What the compose backend never injects, with the reason (one clause); ``compose_spec``
adds the link faults and delays this host refuses."""

LOSE_UNFLUSHED_REASON: Final = (
    "losing unflushed data needs a power cut: after docker kill the host's page cache still "
    "holds every write"
)

# A broker key that survives KAFKASIM_CFG_<KEY> (upper-cased, "." as "_") both ways.
_KEY_RE: Final = re.compile(r"[a-z0-9]+(\.[a-z0-9]+)*")


# -- the docker CLI ------------------------------------------------------------------------------


def run_command(
    args: list[str], timeout_s: float = 30.0, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        stdin=subprocess.DEVNULL,
        env=None if env is None else dict(env),
    )


Runner = Callable[[list[str], float, Mapping[str, str] | None], "subprocess.CompletedProcess[str]"]
"""How docker and compose commands run (``run_command``; a test's fake records them)."""


def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "/var/run/docker.sock"


def compose_command(runner: Runner = run_command) -> str | None:
    """``docker compose`` if the plugin answers, else ``docker-compose`` if installed."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        if runner(["docker", "compose", "version"], 30.0, None).returncode == 0:
            return "docker compose"
    if shutil.which("docker-compose") is not None:
        return "docker-compose"
    return None


def compose_unavailable(
    engine_hint: str = "as root: apt-get install docker.io, then compose/engine.sh start",
    images_hint: str = "run compose/build-offline.sh as root",
) -> str | None:
    """None when a compose cluster can run here, else why not (one clause, with the
    remedy): no Docker client, no engine, no compose, images not built."""
    if shutil.which("docker") is None:
        return f"no docker client on PATH ({engine_hint})"
    try:
        engine = run_command(["docker", "version", "--format", "{{.Server.Version}}"])
    except subprocess.TimeoutExpired:
        return f"the Docker engine at {_engine_address()} does not answer"
    if engine.returncode != 0:
        return f"no Docker engine at {_engine_address()} ({engine_hint})"
    if compose_command() is None:
        return (
            "neither `docker compose` nor `docker-compose` works (apt-get install docker-compose)"
        )
    for image in IMAGES:
        if run_command(["docker", "image", "inspect", image]).returncode != 0:
            return f"image {image} is not built ({images_hint})"
    return None


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct 127.0.0.1 ports free right now (a probe: another process may take
    one before compose publishes it; ``up`` then fails, and the run with it)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_loopback_port()
        if port not in ports:
            ports.append(port)
    return ports


def port_environment(
    ports: Mapping[int, int],
    kafka_ports: Mapping[int, int],
    metrics_ports: Mapping[int, int] | None = None,
) -> dict[str, str]:
    """The variables the compose file publishes the brokers' external listeners by: gRPC
    (``ports``) and Kafka's protocol (``kafka_ports``), and their metrics endpoints
    (``metrics_ports``; None: the file's defaults)."""
    return {
        **{f"KAFKASIM_BROKER_{b}_PORT": str(port) for b, port in ports.items()},
        **{f"KAFKASIM_BROKER_{b}_KAFKA_PORT": str(port) for b, port in kafka_ports.items()},
        **{
            f"KAFKASIM_BROKER_{b}_METRICS_PORT": str(port)
            for b, port in (metrics_ports or {}).items()
        },
    }


def free_broker_ports() -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Free 127.0.0.1 ports for brokers 1-3's external listeners and metrics endpoints:
    (gRPC, Kafka's protocol, metrics). A project of its own publishes on its own ports, so
    runs side by side do not clash."""
    found = iter(free_loopback_ports(3 * len(BROKER_IDS)))
    grpc = {b: next(found) for b in BROKER_IDS}
    kafka = {b: next(found) for b in BROKER_IDS}
    return grpc, kafka, {b: next(found) for b in BROKER_IDS}


# -- the cluster ---------------------------------------------------------------------------------


@dataclass
class ComposeCluster:
    """One compose project: containers by broker id, faults through the docker CLI (each
    waits for its command; none by name match outside this project). Every compose command
    gets the brokers' host ports in its environment (``ports``: the external gRPC listeners,
    ``kafka_ports``: the external Kafka-protocol ones, ``metrics_ports``: the metrics
    endpoints, the file's defaults when empty). ``remember_containers``: look each
    broker's container up once (for a user that never has compose re-create one).
    ``client_properties``: how the host's clients reach the brokers (the TLS keys of the
    secured mode, cluster.compose_secure; none for the plaintext file). ``runner``: how the
    commands run."""

    command: str
    files: list[str]
    project: str
    ports: dict[int, int]
    kafka_ports: dict[int, int]
    metrics_ports: dict[int, int] = field(default_factory=dict)
    remember_containers: bool = False
    client_properties: dict[str, str] = field(default_factory=dict)
    runner: Runner = field(default=run_command, repr=False)
    _containers: dict[int, str] = field(default_factory=dict, repr=False)

    @property
    def bootstrap(self) -> list[str]:
        return [self.address(b) for b in sorted(self.ports)]

    def address(self, broker_id: int) -> str:
        """The broker's external listener on the host."""
        return f"127.0.0.1:{self.ports[broker_id]}"

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` for Kafka's clients on the host (the KAFKA_EXTERNAL listeners)."""
        return ",".join(f"127.0.0.1:{self.kafka_ports[b]}" for b in sorted(self.kafka_ports))

    @property
    def network(self) -> str:
        return f"{self.project}_cluster"

    def volume(self, broker_id: int) -> str:
        return f"{self.project}_broker-{broker_id}-data"

    def docker(self, *args: str, timeout_s: float = DOCKER_COMMAND_TIMEOUT_S) -> str:
        result = self.runner(["docker", *args], timeout_s, None)
        if result.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def compose(self, *args: str, timeout_s: float = DOCKER_COMMAND_TIMEOUT_S) -> str:
        files = [arg for f in self.files for arg in ("-f", f)]
        argv = [*self.command.split(), *files, "-p", self.project, *args]
        env = {
            **os.environ,
            **port_environment(self.ports, self.kafka_ports, self.metrics_ports),
        }
        result = self.runner(argv, timeout_s, env)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
        return result.stdout

    def container(self, broker_id: int) -> str:
        """The id of broker-N's container (also a stopped one), by compose's labels."""
        known = self._containers.get(broker_id)
        if known is not None:
            return known
        found = self.docker(
            "ps",
            "-a",
            "-q",
            "--no-trunc",
            "--filter",
            f"label=com.docker.compose.project={self.project}",
            "--filter",
            f"label=com.docker.compose.service=broker-{broker_id}",
        ).split()
        if len(found) != 1:
            raise RuntimeError(f"broker-{broker_id}: expected one container, found {found}")
        if self.remember_containers:
            self._containers[broker_id] = found[0]
        return found[0]

    def forget_containers(self) -> None:
        """Look each container up again on next use (compose may have re-created one)."""
        self._containers.clear()

    def kill(self, broker_id: int, sig: int = signal.SIGKILL) -> None:
        self.docker("kill", "--signal", signal.Signals(sig).name, self.container(broker_id))

    def stop(self, broker_id: int, timeout_s: int = STOP_TIMEOUT_S) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL after ``timeout_s``; returns once exited."""
        self.docker(
            "stop",
            "--time",
            str(timeout_s),
            self.container(broker_id),
            timeout_s=timeout_s + DOCKER_COMMAND_TIMEOUT_S,
        )

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

    def inspect(self, broker_id: int, template: str) -> str:
        return self.docker("inspect", "--format", template, self.container(broker_id)).strip()

    def statuses(self) -> dict[int, str]:
        """Each broker container's state (running, paused, exited, ...), in one call."""
        ids = [self.container(b) for b in sorted(self.ports)]
        out = self.docker("inspect", "--format", "{{.Id}} {{.State.Status}}", *ids)
        by_id = dict(line.split(" ", 1) for line in out.splitlines() if line.strip())
        return {b: by_id.get(self.container(b), "missing") for b in sorted(self.ports)}

    def volume_path(self, broker_id: int) -> Path:
        """Where the broker's volume is on the engine's host (this host, for a local engine)."""
        return Path(
            self.docker(
                "volume", "inspect", "--format", "{{.Mountpoint}}", self.volume(broker_id)
            ).strip()
        )

    def copy_partition(self, broker_id: int, topic: str, partition: int, dest: Path) -> Path | None:
        """Copy the broker's directory of one partition to ``dest`` (None if it has none)."""
        dest.mkdir(parents=True, exist_ok=True)
        source = f"{self.container(broker_id)}:{DATA_DIR}/{topic}-{partition}"
        result = self.runner(["docker", "cp", source, str(dest)], DOCKER_COMMAND_TIMEOUT_S, None)
        if result.returncode != 0:
            return None
        return dest / f"{topic}-{partition}"

    def copy_log_dir(self, broker_id: int, dest: Path) -> Path | None:
        """Copy the broker's whole log directory to ``dest``/logs (None if that fails)."""
        dest.mkdir(parents=True, exist_ok=True)
        source = f"{self.container(broker_id)}:{DATA_DIR}"
        result = self.runner(["docker", "cp", source, str(dest)], DOCKER_COMMAND_TIMEOUT_S, None)
        return dest / Path(DATA_DIR).name if result.returncode == 0 else None

    def logs(self, broker_id: int, since: str | None = None) -> str:
        args = ["docker", "logs", *(["--since", since] if since else []), self.container(broker_id)]
        result = self.runner(args, DOCKER_COMMAND_TIMEOUT_S, None)
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

    async def metadata(
        self, transport: GrpcTransport, broker_id: int
    ) -> pb.MetadataResponse | None:
        client = MinimalClient(
            transport, [self.address(broker_id)], SystemClock(), request_timeout_ms=2000
        )
        try:
            return await client.refresh_metadata()
        except RpcError:
            return None

    async def serving(self) -> bool:
        """Every broker answers Metadata on its external listener and names all of them."""
        transport = client_transport(self.client_properties)
        try:
            for broker_id in sorted(self.ports):
                response = await self.metadata(transport, broker_id)
                if response is None or {b.node_id for b in response.brokers} != set(self.ports):
                    return False
            return True
        finally:
            await transport.close()


# -- the scenario's broker settings --------------------------------------------------------------


def _config_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def config_environment(props: Mapping[str, object]) -> dict[str, str]:
    """``KAFKASIM_CFG_<KEY>`` variables for broker settings (compose/broker-entrypoint.sh
    turns them back into ``key=value``). ValueError for a key that would not come back."""
    env = {}
    for key, value in props.items():
        if not _KEY_RE.fullmatch(key):
            raise ValueError(f"broker setting {key!r} cannot pass as KAFKASIM_CFG_<KEY>")
        env["KAFKASIM_CFG_" + key.upper().replace(".", "_")] = _config_value(value)
    return env


def render_override(
    props: Mapping[str, object], *, scenario: str, brokers: tuple[int, ...] = BROKER_IDS
) -> str:
    """A compose file layered over compose/docker-compose.yml: ``props`` in every broker's
    environment, and no restart policy (the run decides when a broker starts again). Every
    scalar is written as a JSON string, which YAML reads as the same string."""
    env = config_environment(props)
    lines = [
        f"# Generated by kafkasim chaos for scenario {scenario}: its broker settings.",
        "services:",
    ]
    for broker_id in brokers:
        lines += [f"  broker-{broker_id}:", '    restart: "no"', "    environment:"]
        lines += [f"      {name}: {json.dumps(value)}" for name, value in sorted(env.items())]
    return "\n".join(lines) + "\n"


def chaos_broker_props(scenario: Scenario) -> dict[str, object]:
    """The scenario's settings over the same defaults a local run's brokers get."""
    return {
        "zookeeper.session.timeout.ms": DEV_ZK_SESSION_TIMEOUT_MS,
        **broker_props(scenario),
    }


# -- the chaos backend ---------------------------------------------------------------------------


class ComposeBackend(ContainerLinkFaults):
    """``cluster.chaos.ChaosBackend`` on a compose project of its own (see the module's
    docstring for what each fault is)."""

    def __init__(
        self, scenario: Scenario | None, root: Path, cluster: ComposeCluster | None = None
    ) -> None:
        self.scenario = scenario
        self.root = root
        self.override = root / "compose-override.yml"
        if cluster is None:
            command = compose_command()
            if command is None:
                raise ChaosError("neither `docker compose` nor `docker-compose` works here")
            cluster = ComposeCluster(
                command,
                [str(COMPOSE_FILE), str(self.override)],
                f"kafkasim-chaos-{os.getpid()}-{uuid.uuid4().hex[:8]}",
                *free_broker_ports(),
                remember_containers=True,  # the run starts and stops them, never re-creates one
            )
        self.cluster = cluster
        self.network = ContainerNetwork(functools.partial(locate, cluster))
        self._status: dict[int, str] = dict.fromkeys(sorted(cluster.ports), "created")
        self._started_at: dict[int, str] = {}
        self._up = False
        self._stopped = False

    @classmethod
    def over(cls, cluster: ComposeCluster, root: Path) -> ComposeBackend:
        """The same faults on a project that runs already (the console's buttons on a compose
        cluster; ``root``: its directory). Each broker's state is the engine's, as the last
        ``refresh`` found it; ``stop`` and ``close`` leave the project alone (not ours)."""
        return cls(None, root, cluster)

    @property
    def spec(self) -> BackendSpec:
        return compose_spec()

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.cluster.ports))

    def status(self, broker_id: int) -> str:
        """The broker's container state as last known (running, paused, exited, ...)."""
        return self._status.get(broker_id, "missing")

    @property
    def bootstrap(self) -> list[str]:
        return self.cluster.bootstrap

    @property
    def kafka_bootstrap(self) -> list[str]:
        # The KAFKA_EXTERNAL listeners, published to the host (where the real client runs).
        return self.cluster.kafka_bootstrap.split(",")

    def start(self) -> None:
        assert self.scenario is not None, "a backend over a running project has started already"
        self.root.mkdir(parents=True, exist_ok=True)
        # The brokers' settings may carry passwords (ssl.*.password, sasl.jaas.config).
        write_private(
            self.override,
            render_override(chaos_broker_props(self.scenario), scenario=self.scenario.name),
        )
        self._up = True  # from here on, close() takes the project down
        self.cluster.compose("up", "-d", "--no-build", timeout_s=CLUSTER_START_TIMEOUT_S)
        asyncio.run(self._wait_up())
        self._status = dict.fromkeys(BROKER_IDS, "running")

    async def _wait_up(self) -> None:
        clock = SystemClock()
        deadline = clock.monotonic_ms() + CLUSTER_START_TIMEOUT_S * 1000
        while not await self.cluster.serving():
            if clock.monotonic_ms() > deadline:
                raise ChaosError(
                    f"compose project {self.cluster.project}: the brokers did not all serve "
                    f"within {CLUSTER_START_TIMEOUT_S:g} s (logs: {self._logs_path})"
                )
            await asyncio.sleep(_START_POLL_S)

    def describe(self) -> str:
        return (
            f"compose project {self.cluster.project} (external listeners "
            f"{', '.join(self.cluster.bootstrap)}; Kafka clients {self.cluster.kafka_bootstrap})"
        )

    @property
    def _logs_path(self) -> Path:
        return self.root / "compose-logs.txt"

    def stop(self) -> None:
        if not self._up or self._stopped:
            return
        for broker_id in BROKER_IDS:
            if self._status.get(broker_id) == "paused":
                self.resume(broker_id)
        # Every broker at once, as LocalCluster.stop does: compose stops them in parallel.
        self.cluster.compose(
            "stop",
            "--timeout",
            str(STOP_TIMEOUT_S),
            *SERVICES,
            timeout_s=STOP_TIMEOUT_S + DOCKER_COMMAND_TIMEOUT_S,
        )
        self._status = dict.fromkeys(BROKER_IDS, "exited")
        self._stopped = True

    def close(self) -> None:
        """Save the project's logs to compose-logs.txt, then ``down -v`` (this project's
        containers, networks and volumes)."""
        with contextlib.suppress(NetnsError, RuntimeError, subprocess.TimeoutExpired):
            self.network.remove()  # a project not ours keeps running: no rule of ours stays
        if not self._up:
            return
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired, OSError):
            self._logs_path.write_text(self.cluster.compose("logs", "--no-color", "--timestamps"))
        for broker_id in BROKER_IDS:
            if self._status.get(broker_id) == "paused":
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self.cluster.unpause(broker_id)
        try:
            self.cluster.compose("down", "-v", "--remove-orphans", "--timeout", "20")
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            logger.error(
                "compose project %s not taken down (%s); run: %s -p %s down -v",
                self.cluster.project,
                e,
                self.cluster.command,
                self.cluster.project,
            )
            raise ChaosError(f"compose project {self.cluster.project} not taken down: {e}") from e
        self._up = False

    def running(self, broker_id: int) -> bool:
        return self._status.get(broker_id) in ("running", "paused", "restarting")

    def refresh(self) -> None:
        self._status.update(self.cluster.statuses())

    def address(self, broker_id: int) -> str:
        return self.cluster.address(broker_id)

    def kill(self, broker_id: int, sig: signal.Signals) -> None:
        if sig == signal.SIGTERM:
            self.cluster.stop(broker_id)
        else:
            self.cluster.kill(broker_id, sig)
        self._status[broker_id] = "exited"

    def start_broker(self, broker_id: int) -> None:
        self.cluster.start(broker_id)
        self.network.refresh()  # its new namespace gets the rules of the faults in force
        self._started_at[broker_id] = self.cluster.inspect(broker_id, "{{.State.StartedAt}}")
        self._status[broker_id] = "running"

    def serving_again(self, broker_id: int) -> bool:
        since = self._started_at.get(broker_id)
        marker = f"kafkasim broker {broker_id} serving on"
        if marker in self.cluster.logs(broker_id, since=since):
            return True
        status = self.cluster.inspect(broker_id, "{{.State.Status}}")
        self._status[broker_id] = status
        return False

    def exit_note(self, broker_id: int) -> str:
        try:
            code = self.cluster.inspect(broker_id, "{{.State.ExitCode}}")
        except (RuntimeError, subprocess.TimeoutExpired):
            code = "?"
        log = f"docker logs {self.cluster.container(broker_id)[:12]}"
        if self.scenario is None:  # a project of someone else's: nothing saved at the end
            return f"exit code {code}; log: {log}"
        return f"exit code {code}; log: {log}, saved to {self._logs_path} at the end"

    def pause(self, broker_id: int) -> None:
        self.cluster.pause(broker_id)
        self._status[broker_id] = "paused"

    def resume(self, broker_id: int) -> None:
        self.cluster.unpause(broker_id)
        self._status[broker_id] = "running"

    def isolate(self, broker_id: int) -> None:
        self.cluster.disconnect(broker_id)

    def reconnect(self, broker_id: int) -> None:
        self.cluster.connect(broker_id)
        self.network.refresh()  # it may come back with another address

    def fill_disk(self, broker_id: int) -> None:
        raise ChaosError(f"{RUNTIME} cannot fill broker {broker_id}'s disk: {_NO_DISK_LIMIT}")

    def free_disk(self, broker_id: int) -> None:
        raise ChaosError(f"{RUNTIME} cannot fill broker {broker_id}'s disk: {_NO_DISK_LIMIT}")

    async def controller_id(self) -> int:
        """The controller as the answering brokers' metadata names it (ZooKeeper is on the
        internal network only): the most named, -1 when none names one."""
        transport = GrpcTransport()
        named: dict[int, int] = {}
        try:
            for broker_id in BROKER_IDS:
                if self._status.get(broker_id) != "running":
                    continue
                response = await self.cluster.metadata(transport, broker_id)
                if response is not None and response.controller_id >= 0:
                    named[response.controller_id] = named.get(response.controller_id, 0) + 1
        finally:
            await transport.close()
        return max(named, key=lambda b: named[b]) if named else -1

    def log_dir(self, broker_id: int) -> Path | None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired, OSError):
            logs = self.cluster.volume_path(broker_id) / "logs"
            if logs.is_dir() and os.access(logs, os.R_OK | os.X_OK):
                return logs
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired, OSError):
            return self.cluster.copy_log_dir(broker_id, self.root / "final" / f"broker-{broker_id}")
        return None


def compose_spec_for(filtering: str | None, delay: str) -> BackendSpec:
    """The compose backend's spec: the link faults injectable when ``filtering`` is None (this
    process may filter inside the containers), else refused saying why; the delays refused
    with ``delay``."""
    refused = link_refusals(filtering, delay)
    return BackendSpec(
        name="compose",
        runtime=RUNTIME,
        injectable=INJECTABLE | (LINK_FAULTS - set(refused)),
        not_injectable=MappingProxyType({**NOT_INJECTABLE, **refused}),
        lose_unflushed=LOSE_UNFLUSHED_REASON,
        create=process_backend(ComposeBackend),
        brokers=len(BROKER_IDS),
        brokers_reason="the compose file has brokers 1, 2 and 3",
        # Containers start slowly on a loaded machine (vfs); the logs are read through the engine.
        serving_grace_s=180.0,
        serving_poll_s=1.0,
    )


@functools.cache
def compose_spec() -> BackendSpec:
    """The compose cluster (``ComposeBackend``), as far as this process may inject; built on
    first use (whether the kernel has netem is probed once, in a scratch namespace)."""
    return compose_spec_for(filtering_refusal(), delay_refusal())


def __getattr__(name: str) -> BackendSpec:
    """``COMPOSE``: ``compose_spec()``, built when first asked for (not at import: the probe
    runs commands)."""
    if name == "COMPOSE":
        return compose_spec()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
