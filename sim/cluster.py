"""A whole kafkasim cluster in one process: brokers (each hosting a controller), a simulated
ZooKeeper and a simulated network, on the virtual-time loop.

The same ``node.Broker`` and ``controller.Controller`` code runs here as in real processes;
only the ports differ (SimNetwork for Rpc, SimZooKeeper for Coordination, the loop's virtual
clock). Faults are methods: ``crash`` (kill -9: no controlled shutdown, no flush; the
ZooKeeper session expires later), ``stop`` (controlled shutdown), ``start``/``restart``,
network ``isolate``/``heal``/``partition``, ZooKeeper ``expire_session``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kafkasim.client.simple import MinimalClient
from kafkasim.common.config import DEV_ZK_SESSION_TIMEOUT_MS
from kafkasim.common.coordination import Coordination
from kafkasim.common.security import ANONYMOUS
from kafkasim.node.broker import Broker, MarkerSenderFactory, controller_factory
from kafkasim.node.config import BrokerConfig
from kafkasim.node.rules import KAFKA_RULES, ReplicationRules
from kafkasim.node.txn_marker_sender import rpc_marker_sender
from kafkasim.node.zk_security import zk_security_for
from kafkasim.sim.clocks import DriftingClock
from kafkasim.sim.disk import SimDisk
from kafkasim.sim.loop import VirtualClock
from kafkasim.sim.network import SimNetwork, SimTransport
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

logger = logging.getLogger(__name__)

BROKER_PORT = 9092


def broker_node(broker_id: int) -> str:
    return f"broker-{broker_id}"


def broker_address(broker_id: int) -> str:
    return f"{broker_node(broker_id)}:{BROKER_PORT}"


class SimCluster:
    def __init__(
        self,
        root: Path,
        *,
        brokers: int = 3,
        seed: int = 0,
        broker_props: Mapping[str, object] | None = None,
        zk_session_timeout_ms: int = DEV_ZK_SESSION_TIMEOUT_MS,
        rules: ReplicationRules = KAFKA_RULES,
        marker_sender_factory: MarkerSenderFactory = rpc_marker_sender,
    ) -> None:
        self.root = root
        # How brokers write transaction markers (by default over the simulated network).
        self.marker_sender_factory = marker_sender_factory
        # The replication rules every broker runs by (``node.rules``; tests reproduce bugs).
        self.rules = rules
        self.broker_ids = list(range(1, brokers + 1))
        self.seed = seed
        self.loop = asyncio.get_running_loop()
        self.rng = random.Random(seed)
        self.clock = VirtualClock(self.loop)
        # Each broker's own view of ``clock`` (``drift_clock``); rate 1 unless drifted.
        self.broker_clocks: dict[int, DriftingClock] = {}
        # Each slowed broker's disk (``slow_disk``); kept across its restarts (the machine's).
        self.disks: dict[int, SimDisk] = {}
        self.network = SimNetwork(self.loop, random.Random(f"net/{seed}"))
        self.zk_server = SimZooKeeperServer()
        self.zk_session_timeout_ms = zk_session_timeout_ms
        self.broker_props = dict(broker_props or {})
        self.brokers: dict[int, Broker] = {}
        self._zk_clients: dict[int, list[SimZooKeeperClient]] = {}
        self._clients: list[SimTransport] = []
        # Who hears that a broker halted itself (a failure run tracks its crashed brokers);
        # None: the cluster crashes it.
        self.on_halt: Callable[[int], None] | None = None
        self._halts: set[asyncio.Task[None]] = set()

    # -- brokers ----------------------------------------------------------------------------

    def _config(self, broker_id: int) -> BrokerConfig:
        props: dict[str, object] = {
            "broker.id": broker_id,
            "listeners": f"PLAINTEXT://{broker_address(broker_id)}",
            "log.dirs": str(self.root / f"broker-{broker_id}"),
            "zookeeper.connect": "sim",
            "zookeeper.session.timeout.ms": self.zk_session_timeout_ms,
            "replica.lag.time.max.ms": 10_000,
            "replica.fetch.wait.max.ms": 500,
            "replica.fetch.backoff.ms": 200,
            "controlled.shutdown.retry.backoff.ms": 500,
            "auto.leader.rebalance.enable": False,
            # As Kafka's single-node setups do: __consumer_offsets fits the cluster.
            "offsets.topic.replication.factor": min(3, len(self.broker_ids)),
        }
        # A string value may name the broker as "{broker_id}" (per-broker listeners).
        for key, value in self.broker_props.items():
            props[key] = (
                value.replace("{broker_id}", str(broker_id)) if isinstance(value, str) else value
            )
        return BrokerConfig.from_props(props)

    def _coordination_factory(self, broker_id: int) -> Coordination:
        clients = self._zk_clients.setdefault(broker_id, [])
        client = SimZooKeeperClient(
            self.zk_server,
            self.zk_session_timeout_ms,
            f"broker-{broker_id}/{len(clients)}",
            seed=self.seed,
            security=zk_security_for(self._config(broker_id)),
        )
        clients.append(client)
        return client

    async def start(self) -> None:
        for broker_id in self.broker_ids:
            await self.start_broker(broker_id)

    async def start_broker(self, broker_id: int) -> Broker:
        self.network.heal(broker_node(broker_id))
        broker = Broker(
            self._config(broker_id),
            transport=SimTransport(
                self.network, broker_node(broker_id), f"User:{broker_node(broker_id)}"
            ),
            coordination_factory=lambda: self._coordination_factory(broker_id),
            clock=self.broker_clock(broker_id),
            controller_factory=controller_factory(
                lambda b: random.Random(f"controller/{self.seed}/{b}")
            ),
            rng=random.Random(f"broker/{self.seed}/{broker_id}"),
            halt=lambda _reason: self._halt(broker_id),
            rules=self.rules,
            marker_sender_factory=self.marker_sender_factory,
        )
        broker.disk.delay = self.disks.get(broker_id)
        self.brokers[broker_id] = broker
        await broker.start()
        return broker

    def slow_disk(self, broker_id: int, disk: SimDisk | None) -> None:
        """Broker ``broker_id``'s disk takes ``disk``'s latencies from now on (None: its
        normal speed again), across its restarts too."""
        if disk is None:
            self.disks.pop(broker_id, None)
        else:
            self.disks[broker_id] = disk
        broker = self.brokers.get(broker_id)
        if broker is not None:
            broker.disk.delay = disk

    def broker_clock(self, broker_id: int) -> DriftingClock:
        """The clock broker ``broker_id`` reads (the same one across its restarts: the
        machine's clock, not the process's)."""
        clock = self.broker_clocks.get(broker_id)
        if clock is None:
            clock = self.broker_clocks[broker_id] = DriftingClock(self.clock)
        return clock

    def _halt(self, broker_id: int) -> None:
        """A broker halts itself (a failed log dir): the process is gone, as after kill -9
        (the page cache survives a process exit: nothing unflushed is lost)."""
        if self.on_halt is not None:
            self.on_halt(broker_id)
        elif broker_id in self.brokers:
            task = self.loop.create_task(self.crash(broker_id), name=f"halt-{broker_id}")
            self._halts.add(task)
            task.add_done_callback(self._halts.discard)

    def log_dirs(self, broker_id: int) -> list[Path]:
        return self._config(broker_id).log_dirs

    async def crash(self, broker_id: int) -> None:
        """kill -9: the process is gone; its ZooKeeper session expires on its own later."""
        broker = self.brokers.pop(broker_id)
        zk = broker.zk
        if isinstance(zk, SimZooKeeperClient):
            zk.disconnect()
        self.network.crash(broker_node(broker_id))
        await broker.crash()

    async def stop_broker(self, broker_id: int) -> None:
        """Controlled shutdown, then a clean stop."""
        broker = self.brokers.pop(broker_id)
        await broker.shutdown()

    async def restart(self, broker_id: int) -> Broker:
        if broker_id in self.brokers:
            await self.crash(broker_id)
        return await self.start_broker(broker_id)

    async def stop(self) -> None:
        for broker_id in list(self.brokers):
            await self.crash(broker_id)
        for transport in self._clients:
            await transport.close()

    # -- clients and views ------------------------------------------------------------------

    def client(
        self, name: str = "client", *, principal: str = ANONYMOUS, **kwargs: Any
    ) -> MinimalClient:
        """A client on its own node; ``principal``: who it authenticates as (brokers are
        ``User:broker-<id>``)."""
        transport = SimTransport(self.network, name, principal)
        self._clients.append(transport)
        return MinimalClient(
            transport, [broker_address(b) for b in self.broker_ids], self.clock, **kwargs
        )

    def controller_id(self) -> int:
        for broker_id, broker in self.brokers.items():
            if broker.controller is not None and broker.controller.is_active:
                return broker_id
        return -1

    async def wait_for(
        self,
        predicate: Any,
        *,
        timeout_s: float = 60.0,
        step_s: float = 0.1,
        what: str = "condition",
    ) -> None:
        """Advance virtual time until ``predicate()`` holds (a bounded wait)."""
        deadline = self.loop.time() + timeout_s
        while not predicate():
            if self.loop.time() > deadline:
                raise TimeoutError(f"timed out after {timeout_s} s (virtual) waiting for {what}")
            await asyncio.sleep(step_s)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
