"""A cluster of real processes on loopback: Debian's ZooKeeper and N ``kafkasim broker``
processes, each with its own free port and data directory.

Used by the integration tests and by ``kafkasim cluster up``. Processes are stopped by their
own pid (SIGTERM for a controlled shutdown, SIGKILL for a crash, SIGSTOP/SIGCONT to pause),
never by name. Everything it starts, ``stop()`` stops.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkasim.cluster.certs import broker_dns_names, broker_name, load_or_create_ca
from kafkasim.common.config import DEV_ZK_SESSION_TIMEOUT_MS
from kafkasim.common.errors import KafkasimError
from kafkasim.common.private_files import write_private
from kafkasim.common.zk_acl import OPEN_ACL_UNSAFE, jaas_client_text
from kafkasim.controller.zk_kazoo import secure_root
from kafkasim.controller.zk_process import ZooKeeperProcess, free_loopback_port
from kafkasim.node.zk_security import zk_security_from_props

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
# The brokers' ZooKeeper credentials when zookeeper.set.acl=true and none were given.
ZOOKEEPER_JAAS_FILE = "zookeeper-client.jaas"
ROOT_ZNODE = "/"
# How a broker says it could not bind a listener (node.rpc_grpc, node.kafka_server).
_BIND_FAILURE = re.compile(r"Socket server failed to bind to (\S+?):? ")
# How ``kafkasim broker`` reports an error it exits on (cli.main); else a traceback's last line.
_CLI_ERROR_PREFIX = "kafkasim broker: error: "
# Start-ups a broker may retry on new ports after losing its probed "free" port to another
# process between the probe and its bind.
_PORT_RETRIES_MAX = 3


class BrokerStartError(KafkasimError):
    """A broker process exited during start-up; the message is one line with its own error."""


def broker_error(output: str) -> str:
    """The error a broker process exited on, from its output: the line ``kafkasim broker``
    prints for an error it exits on, else the last line of a traceback, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(_CLI_ERROR_PREFIX):
            return line.removeprefix(_CLI_ERROR_PREFIX)
    if any(line.startswith("Traceback (most recent call last)") for line in lines):
        return lines[-1]
    return lines[-1] if lines else "no output"


SIGNAL_SETTLE_S = 5.0
# Broker keys that lay the listeners out: given any, a cluster adds no replication listener.
_LISTENER_LAYOUT = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "listener.security.protocol.map",
        "listener.wire.protocol.map",
        "inter.broker.listener.name",
        "replica.fetch.listener.name",
    }
)
# The client certificate kafkasim's tools use on a TLS cluster (User:CN=admin,OU=kafkasim).
CLIENT_CERT = "admin"


@dataclass
class BrokerProcess:
    broker_id: int
    port: int
    data_dir: Path
    config_path: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    log_path: Path = field(init=False)
    # Where this start's output begins in broker.log (the file is appended to across starts).
    log_start: int = 0
    # The Kafka-protocol listener's port (the KAFKA listener; the gRPC one is ``port``).
    kafka_port: int = field(default_factory=free_loopback_port)
    # GET /metrics (Prometheus) on 127.0.0.1; None: the broker serves no metrics.
    metrics_port: int | None = field(default_factory=free_loopback_port)
    # A broker process this object did not start (a cluster attached from its state file):
    # known by pid only, and told from a reused pid by its command line.
    adopted_pid: int | None = None
    # The address its listeners bind and advertise (its network namespace's, ``cluster.netns``).
    host: str = "127.0.0.1"
    # Its replication listener's port (followers fetch over it, ``node.rpc_framed``); None:
    # followers fetch over gRPC on the inter-broker listener.
    replication_port: int | None = None

    def __post_init__(self) -> None:
        self.log_path = self.data_dir / "broker.log"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def kafka_address(self) -> str:
        """Where Kafka's own clients connect (``bootstrap.servers``)."""
        return f"{self.host}:{self.kafka_port}"

    @property
    def replication_address(self) -> str | None:
        """Where followers fetch from this broker (None: over gRPC, at ``address``)."""
        return None if self.replication_port is None else f"{self.host}:{self.replication_port}"

    @property
    def metrics_url(self) -> str | None:
        """Where Prometheus scrapes the broker (None: it serves no metrics)."""
        if self.metrics_port is None:
            return None
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def pid(self) -> int | None:
        return self.adopted_pid if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        """Alive (paused too)."""
        if self.process is not None:
            return self.process.poll() is None
        return self.adopted_pid is not None and process_alive(
            self.adopted_pid, str(self.config_path)
        )

    @property
    def paused(self) -> bool:
        """Stopped by SIGSTOP (``pause``) and not yet continued."""
        return self.pid is not None and self.running and process_state(self.pid) in ("T", "t")

    def wait_exited(self, timeout_s: float) -> bool:
        """Until the process is gone (True) or ``timeout_s`` passed (False)."""
        if self.process is not None:
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout_s
        while self.running:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True


def process_alive(pid: int, marker: str) -> bool:
    """The pid runs and is ours: its command line names ``marker`` (pids get reused). A
    zombie (exited, not yet reaped by its parent) has an empty command line: not alive."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return marker in cmdline


def process_state(pid: int) -> str:
    """The process's state letter in /proc (R, S, D, T stopped, Z zombie; "" when gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # pid (comm) state ...: comm may hold spaces and parentheses, so split after the last ')'.
    return stat.rpartition(")")[2].split()[0]


class LocalCluster:
    def __init__(
        self,
        root: Path,
        *,
        brokers: int = 3,
        broker_props: dict[str, object] | None = None,
        zookeeper: ZooKeeperProcess | None = None,
        detached: bool = False,
        tls: bool = False,
        zookeeper_host: str = "127.0.0.1",
        framed_replication: bool | None = None,
    ) -> None:
        self.root = root
        self.detached = detached
        # Followers fetch over each broker's replication listener (REPLICATION, framed TCP or
        # TLS: node.rpc_framed) instead of gRPC on the inter-broker listener: a third of
        # gRPC's CPU per fetch, RF=3 acks=all a quarter to two fifths faster (issue 19). By
        # default unless broker_props lay the listeners out themselves (then as they say).
        if framed_replication is None:
            framed_replication = not (_LISTENER_LAYOUT & set(broker_props or {}))
        self.framed_replication = framed_replication
        # TLS on every listener, inter-broker traffic included, with client certificates
        # required (mutual TLS): a throw-away CA and certificates under <root>/certs.
        self.tls = tls
        self.root.mkdir(parents=True, exist_ok=True)
        self._own_zookeeper = zookeeper is None
        self.zookeeper = zookeeper or ZooKeeperProcess(
            root / "zookeeper", detached=detached, host=zookeeper_host
        )
        self.broker_props = dict(broker_props or {})
        self._make_zookeeper_credentials()
        # metrics.port is per broker here: 0 (or unset) a free port each, -1 none, and a
        # fixed one P is broker N's P + N - 1 (one port for all would let one broker bind).
        self.metrics_base = _metrics_base(self.broker_props.pop("metrics.port", 0))
        self.brokers: dict[int, BrokerProcess] = {}
        # Every port handed out here: the kernel may hand the same free port to two probes in
        # a row, and two listeners of one broker on one port is a config error, not a race.
        self._ports_taken: set[int] = set()
        for broker_id in range(1, brokers + 1):
            data_dir = root / f"broker-{broker_id}"
            data_dir.mkdir(parents=True, exist_ok=True)
            self.brokers[broker_id] = BrokerProcess(
                broker_id,
                self._fresh_port(),
                data_dir,
                data_dir / "server.properties",
                kafka_port=self._fresh_port(),
                metrics_port=self._metrics_port(broker_id),
                replication_port=self._fresh_port() if framed_replication else None,
            )

    def _make_zookeeper_credentials(self) -> None:
        """``zookeeper.set.acl=true`` without credentials: make the brokers' ZooKeeper
        identity — a JAAS file (0600) with user ``kafka`` and a random password — and point
        every broker at it (ZooKeeper needs nothing for the digest scheme)."""
        secure = str(self.broker_props.get("zookeeper.set.acl", "false")).lower() == "true"
        if not secure or self.broker_props.get("zookeeper.jaas.config.file"):
            return
        jaas = self.root / ZOOKEEPER_JAAS_FILE
        if not jaas.exists():
            write_private(jaas, jaas_client_text("kafka", secrets.token_urlsafe(24)))
        self.broker_props["zookeeper.jaas.config.file"] = str(jaas.resolve())

    def _fresh_port(self) -> int:
        """A free loopback port this cluster has not handed out before."""
        while True:
            port = free_loopback_port()
            if port not in self._ports_taken:
                self._ports_taken.add(port)
                return port

    def _metrics_port(self, broker_id: int) -> int | None:
        if self.metrics_base < 0:
            return None
        return self.metrics_base + broker_id - 1 if self.metrics_base else self._fresh_port()

    def state(self) -> dict[str, object]:
        """What ``attach`` needs to manage the running cluster from another process (the
        ``cluster.json`` of ``kafkasim cluster up``)."""
        return {
            "dir": str(self.root),
            "zookeeper": {
                "pid": self.zookeeper.pid,
                "connect": self.zookeeper.connect_string,
                "log": str(self.zookeeper.log_path),
            },
            "overrides": {k: str(v) for k, v in self.broker_props.items()},
            "tls": self.tls,
            "framed_replication": self.framed_replication,
            "client_properties": self.client_properties(),
            "metrics_base": self.metrics_base,
            "brokers": [
                {
                    "id": b.broker_id,
                    "pid": b.pid,
                    "address": b.address,
                    "kafka_address": b.kafka_address,
                    "replication_address": b.replication_address,
                    "metrics": b.metrics_url,
                    "data": str(b.data_dir),
                    "log": str(b.log_path),
                }
                for b in self.brokers.values()
            ],
        }

    @classmethod
    def attach(cls, state: Mapping[str, Any]) -> LocalCluster:
        """The cluster ``state()`` describes, its processes adopted by pid: brokers can be
        stopped, killed, paused, resumed and started again (on the same ports and data) as
        in a cluster this process started. ZooKeeper is not ours to stop."""
        root = Path(state["dir"])
        _, _, zk_port = state["zookeeper"]["connect"].rpartition(":")
        zookeeper = ZooKeeperProcess(root / "zookeeper", int(zk_port))
        props: dict[str, object] = dict(state.get("overrides", {}))
        cluster = cls(
            root,
            brokers=0,
            broker_props=props,
            zookeeper=zookeeper,
            detached=True,
            tls=bool(state.get("tls", False)),
            framed_replication=bool(state.get("framed_replication", False)),
        )
        cluster.metrics_base = int(state.get("metrics_base", -1))
        for b in state["brokers"]:
            data_dir = Path(b["data"])
            metrics = b.get("metrics")
            cluster.brokers[b["id"]] = BrokerProcess(
                b["id"],
                _port_of(b["address"]),
                data_dir,
                data_dir / "server.properties",
                kafka_port=_port_of(b["kafka_address"]),
                metrics_port=None if metrics is None else _port_of(metrics.split("/")[2]),
                adopted_pid=b["pid"],
                replication_port=None
                if b.get("replication_address") is None
                else _port_of(b["replication_address"]),
            )
        for broker in cluster.brokers.values():
            cluster._ports_taken.update(
                p
                for p in (
                    broker.port,
                    broker.kafka_port,
                    broker.metrics_port,
                    broker.replication_port,
                )
                if p is not None
            )
        return cluster

    @property
    def bootstrap(self) -> list[str]:
        return [b.address for b in self.brokers.values()]

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` for Kafka's own clients (kcat, librdkafka, Java, ...)."""
        return ",".join(b.kafka_address for b in self.brokers.values())

    @property
    def certs_dir(self) -> Path:
        """Where a TLS cluster's CA and certificates are (cluster.certs)."""
        return self.root / "certs"

    def client_properties(self, client: str = CLIENT_CERT) -> dict[str, str]:
        """Kafka's client properties for kafkasim's clients and tools to reach this cluster:
        nothing for a plaintext one; TLS with ``client``'s certificate for a TLS one (made
        on first use; principal ``User:CN=<client>,OU=kafkasim``)."""
        if not self.tls:
            return {}
        ca = load_or_create_ca(self.certs_dir)
        keystore = self.certs_dir / f"{client}.keystore.pem"
        if not keystore.exists():
            ca.issue(client)
        return {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca.certificate_path),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
        }

    def _tls_props(self, broker: BrokerProcess) -> dict[str, object]:
        ca = load_or_create_ca(self.certs_dir)
        name = broker_name(broker.broker_id)
        keystore = self.certs_dir / f"{name}.keystore.pem"
        if not keystore.exists():
            ca.issue(name, dns=broker_dns_names(broker.broker_id), ips=("127.0.0.1",))
        return {
            "listeners": f"SSL://127.0.0.1:{broker.port},KAFKA://127.0.0.1:{broker.kafka_port}",
            "listener.security.protocol.map": "SSL:SSL,KAFKA:SSL",
            "inter.broker.listener.name": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(ca.certificate_path),
            "ssl.client.auth": "required",
        }

    def _write_config(self, broker: BrokerProcess) -> None:
        props: dict[str, object] = {
            "broker.id": broker.broker_id,
            # gRPC (kafkasim's own clients, replication) and Kafka's protocol side by side.
            "listeners": f"PLAINTEXT://{broker.address},KAFKA://{broker.kafka_address}",
            "log.dirs": str(broker.data_dir / "logs"),
            "zookeeper.connect": self.zookeeper.connect_string,
            "zookeeper.session.timeout.ms": DEV_ZK_SESSION_TIMEOUT_MS,
            # As Kafka's shipped server.properties for a development cluster: the offsets
            # and transaction state topics fit the cluster, and a new group does not wait 3 s
            # for more members.
            "offsets.topic.replication.factor": min(3, len(self.brokers)),
            "transaction.state.log.replication.factor": min(3, len(self.brokers)),
            "transaction.state.log.min.isr": min(2, len(self.brokers)),
            "group.initial.rebalance.delay.ms": 0,
            "metrics.port": -1 if broker.metrics_port is None else broker.metrics_port,
        }
        if self.tls:
            props.update(self._tls_props(broker))
        if broker.replication_address is not None:
            # A third listener for followers' fetches, of the inter-broker listener's security.
            inter = "SSL" if self.tls else "PLAINTEXT"
            props["listeners"] = f"{props['listeners']},REPLICATION://{broker.replication_address}"
            props["listener.security.protocol.map"] = (
                f"{inter}:{inter},KAFKA:{inter},REPLICATION:{inter}"
            )
            props["listener.wire.protocol.map"] = "REPLICATION:replication"
            props["replica.fetch.listener.name"] = "REPLICATION"
        props.update(self.broker_props)
        lines = [f"{k}={v}" for k, v in props.items()]
        # Overrides may carry passwords (ssl.*.password, sasl.jaas.config): owner only.
        write_private(broker.config_path, "\n".join(lines) + "\n")

    def start(self, *, wait: bool = True) -> None:
        """Start ZooKeeper (if ours) and every broker; with ``wait``, until all serve."""
        try:
            if self._own_zookeeper and not self.zookeeper.running:
                self.zookeeper.start()
                if self.broker_props.get("zookeeper.jaas.config.file"):
                    security = zk_security_from_props(self.broker_props)
                    if security.acls is not None and security.acls(ROOT_ZNODE) != OPEN_ACL_UNSAFE:
                        secure_root(self.zookeeper.connect_string, security)
            for broker_id in self.brokers:
                self.start_broker(broker_id)
            if wait:
                for broker_id in self.brokers:
                    self.wait_serving(broker_id)
        except BaseException:
            # Whatever did start must not outlive a failed start-up.
            self.stop()
            raise

    def _output_of_this_start(self, broker: BrokerProcess) -> str:
        if not broker.log_path.exists():
            return ""
        return broker.log_path.read_bytes()[broker.log_start :].decode(errors="replace")

    def _retry_on_new_port(self, broker_id: int, error: str) -> bool:
        """A broker that could not bind an address we chose may have lost that "free" port to
        another process between our probe and its bind: start it again on new ports (True if
        we did). Any other exit (a bad config, a port the user chose) is not retried."""
        broker = self.brokers[broker_id]
        found = _BIND_FAILURE.search(error)
        ours = found is not None and found.group(1) in (
            broker.address,
            broker.kafka_address,
            broker.replication_address,
        )
        if not ours or broker.restarts >= _PORT_RETRIES_MAX:
            return False
        logger.warning("broker %d: %s; retrying on new ports", broker_id, error)
        broker.restarts += 1
        broker.port = self._fresh_port()
        broker.kafka_port = self._fresh_port()
        if broker.replication_port is not None:
            broker.replication_port = self._fresh_port()
        if self.metrics_base == 0:
            broker.metrics_port = self._fresh_port()
        self.start_broker(broker_id)
        return True

    def start_broker(self, broker_id: int) -> BrokerProcess:
        broker = self.brokers[broker_id]
        if broker.running:
            return broker
        self._write_config(broker)
        broker.adopted_pid = None
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        log = open(broker.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        broker.log_start = log.tell()
        try:
            broker.process = subprocess.Popen(
                self.broker_argv(broker),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=REPO_ROOT,
                start_new_session=self.detached,
            )
        finally:
            log.close()
        logger.info(
            "started broker %d (pid %d) on %s", broker_id, broker.process.pid, broker.address
        )
        return broker

    def broker_argv(self, broker: BrokerProcess) -> list[str]:
        """The command line that runs ``broker`` (a subclass may run it elsewhere, e.g. in a
        network namespace: the command must exec the broker, keeping its pid)."""
        return [
            sys.executable,
            "-m",
            "kafkasim.cli",
            "-v",
            "broker",
            "--config",
            str(broker.config_path),
        ]

    def wait_serving(self, broker_id: int, timeout_s: float = 60.0) -> None:
        """Until the broker prints that it serves (it has registered in ZooKeeper)."""
        broker = self.brokers[broker_id]
        deadline = time.monotonic() + timeout_s
        marker = f"kafkasim broker {broker_id} serving on".encode()
        while time.monotonic() < deadline:
            # Only this start's lines: an earlier start's "serving on" must not count.
            if (
                broker.log_path.exists()
                and marker in broker.log_path.read_bytes()[broker.log_start :]
            ):
                return
            if not broker.running:
                # Only this start's output: an earlier start's error must not count.
                error = broker_error(self._output_of_this_start(broker))
                if self._retry_on_new_port(broker_id, error):
                    continue
                status = broker.process.returncode if broker.process else None
                raise BrokerStartError(
                    f"broker {broker_id} exited during start-up (status {status}): {error} "
                    f"(log: {broker.log_path})"
                )
            time.sleep(0.05)
        raise TimeoutError(
            f"broker {broker_id} not serving after {timeout_s} s; log: {broker.log_path}"
        )

    def kill(self, broker_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to a running broker; for SIGKILL and SIGTERM, until it exited (SIGKILL
        after 60 s of a controlled shutdown); for SIGSTOP and SIGCONT, until it is paused or
        runs again."""
        broker = self.brokers[broker_id]
        pid = broker.pid
        if pid is None or not broker.running:
            return
        if sig == signal.SIGTERM:
            os.kill(pid, signal.SIGCONT)  # a paused broker cannot shut down
        os.kill(pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM) and not broker.wait_exited(60):
            os.kill(pid, signal.SIGKILL)
            broker.wait_exited(10)
        elif sig in (signal.SIGSTOP, signal.SIGCONT):
            # A signal is delivered asynchronously: until /proc shows the new state (bounded),
            # so that what follows (a status, the next fault) sees it.
            deadline = time.monotonic() + SIGNAL_SETTLE_S
            while broker.paused != (sig == signal.SIGSTOP) and time.monotonic() < deadline:
                time.sleep(0.01)

    def pause(self, broker_id: int) -> None:
        self.kill(broker_id, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self.kill(broker_id, signal.SIGCONT)

    def stop(self) -> None:
        """Stop every broker (controlled shutdown, SIGKILL if it hangs), then ZooKeeper."""
        for broker in self.brokers.values():
            if broker.pid is not None and broker.running:
                os.kill(broker.pid, signal.SIGCONT)
                os.kill(broker.pid, signal.SIGTERM)
        for broker in self.brokers.values():
            pid = broker.pid
            if pid is not None and not broker.wait_exited(30):
                os.kill(pid, signal.SIGKILL)
                broker.wait_exited(10)
        if self._own_zookeeper:
            self.zookeeper.stop()


def _metrics_base(value: object) -> int:
    try:
        port = int(str(value))
    except ValueError:
        raise ValueError(f"metrics.port must be an integer, got {value!r}") from None
    if not -1 <= port < 65536:
        raise ValueError(f"metrics.port must be -1..65535, got {port}")
    return port


def _port_of(address: str) -> int:
    return int(address.rpartition(":")[2])
