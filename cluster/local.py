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
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafkasim.common.errors import KafkasimError
from kafkasim.controller.zk_process import ZooKeeperProcess, free_loopback_port

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
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

    def __post_init__(self) -> None:
        self.log_path = self.data_dir / "broker.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def kafka_address(self) -> str:
        """Where Kafka's own clients connect (``bootstrap.servers``)."""
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class LocalCluster:
    def __init__(
        self,
        root: Path,
        *,
        brokers: int = 3,
        broker_props: dict[str, object] | None = None,
        zookeeper: ZooKeeperProcess | None = None,
        detached: bool = False,
    ) -> None:
        self.root = root
        self.detached = detached
        self.root.mkdir(parents=True, exist_ok=True)
        self._own_zookeeper = zookeeper is None
        self.zookeeper = zookeeper or ZooKeeperProcess(root / "zookeeper", detached=detached)
        self.broker_props = dict(broker_props or {})
        self.brokers: dict[int, BrokerProcess] = {}
        for broker_id in range(1, brokers + 1):
            data_dir = root / f"broker-{broker_id}"
            data_dir.mkdir(parents=True, exist_ok=True)
            self.brokers[broker_id] = BrokerProcess(
                broker_id, free_loopback_port(), data_dir, data_dir / "server.properties"
            )

    @property
    def bootstrap(self) -> list[str]:
        return [b.address for b in self.brokers.values()]

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` for Kafka's own clients (kcat, librdkafka, Java, ...)."""
        return ",".join(b.kafka_address for b in self.brokers.values())

    def _write_config(self, broker: BrokerProcess) -> None:
        props: dict[str, object] = {
            "broker.id": broker.broker_id,
            # gRPC (kafkasim's own clients, replication) and Kafka's protocol side by side.
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
            f"KAFKA://127.0.0.1:{broker.kafka_port}",
            "log.dirs": str(broker.data_dir / "logs"),
            "zookeeper.connect": self.zookeeper.connect_string,
            "zookeeper.session.timeout.ms": 6000,
            # As Kafka's shipped server.properties for a development cluster: the offsets
            # and transaction state topics fit the cluster, and a new group does not wait 3 s
            # for more members.
            "offsets.topic.replication.factor": min(3, len(self.brokers)),
            "transaction.state.log.replication.factor": min(3, len(self.brokers)),
            "transaction.state.log.min.isr": min(2, len(self.brokers)),
            "group.initial.rebalance.delay.ms": 0,
        }
        props.update(self.broker_props)
        lines = [f"{k}={v}" for k, v in props.items()]
        broker.config_path.write_text("\n".join(lines) + "\n")

    def start(self, *, wait: bool = True) -> None:
        """Start ZooKeeper (if ours) and every broker; with ``wait``, until all serve."""
        try:
            if self._own_zookeeper and not self.zookeeper.running:
                self.zookeeper.start()
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
        ours = found is not None and found.group(1) in (broker.address, broker.kafka_address)
        if not ours or broker.restarts >= _PORT_RETRIES_MAX:
            return False
        logger.warning("broker %d: %s; retrying on new ports", broker_id, error)
        broker.restarts += 1
        broker.port = free_loopback_port()
        broker.kafka_port = free_loopback_port()
        self.start_broker(broker_id)
        return True

    def start_broker(self, broker_id: int) -> BrokerProcess:
        broker = self.brokers[broker_id]
        if broker.running:
            return broker
        self._write_config(broker)
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        log = open(broker.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        broker.log_start = log.tell()
        try:
            broker.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kafkasim.cli",
                    "-v",
                    "broker",
                    "--config",
                    str(broker.config_path),
                ],
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
        broker = self.brokers[broker_id]
        if broker.process is not None and broker.running:
            os.kill(broker.process.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                try:
                    broker.process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.kill(broker.process.pid, signal.SIGKILL)
                    broker.process.wait(timeout=10)

    def pause(self, broker_id: int) -> None:
        self.kill(broker_id, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self.kill(broker_id, signal.SIGCONT)

    def stop(self) -> None:
        """Stop every broker (controlled shutdown, SIGKILL if it hangs), then ZooKeeper."""
        for broker in self.brokers.values():
            if broker.process is not None and broker.running:
                os.kill(broker.process.pid, signal.SIGCONT)
                os.kill(broker.process.pid, signal.SIGTERM)
        for broker in self.brokers.values():
            if broker.process is not None:
                try:
                    broker.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    broker.process.kill()
                    broker.process.wait(timeout=10)
        if self._own_zookeeper:
            self.zookeeper.stop()
