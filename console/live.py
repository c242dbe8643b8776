"""Snapshots of a running cluster, for the live console (``console.model.Snapshot``).

Where things come from, each once per poll (once a second):

* ZooKeeper (when its address is known): registered brokers (``/brokers/ids``), the controller
  (``/controller``), each partition's state (leader, ISR, leader epoch) as the controller wrote
  it. Watches on ``/brokers/ids`` and ``/controller`` wake the poller at once, so a broker's
  expiry or a controller move reaches the page without waiting for the next tick. Without
  ZooKeeper, the same from the admin client (Metadata, the controller of DescribeCluster).
* Each broker that answers: DescribeReplicas (every replica's HW, LEO and leader epoch).
* Each broker's Prometheus endpoint, when it has one: request counts and total time, bytes in
  and out.
* Consumer groups (ListGroups, DescribeGroups, OffsetFetch and ListOffsets) every
  ``GROUPS_EVERY`` polls: they cost a request to every broker and a few to each coordinator.

A ``Target`` says where the brokers are and, for a local cluster, the state of each process
(for a compose cluster, of each container: one ``docker inspect`` per poll, in a thread).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

from kafkasim import proto
from kafkasim.client.admin import AdminClient
from kafkasim.cluster.compose import ComposeBackend
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import Clock, SystemClock
from kafkasim.common.coordination import NoNodeError, WatchEvent
from kafkasim.common.errors import KafkaError
from kafkasim.common.rpc import RpcError
from kafkasim.common.rpc_grpc_client import GrpcTransport, client_transport
from kafkasim.common.types import TopicPartition
from kafkasim.console.model import (
    DOWN,
    PAUSED,
    UNKNOWN,
    UP,
    BrokerMetrics,
    BrokerState,
    GroupState,
    PartitionState,
    Snapshot,
)
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.faults.history import ReplicaSample
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = [
    "GROUPS_EVERY",
    "ComposeTarget",
    "LocalTarget",
    "Poller",
    "StaticTarget",
    "Target",
    "parse_metrics",
]

logger = logging.getLogger(__name__)

GROUPS_EVERY: Final = 5
_CALL_TIMEOUT_S: Final = 1.0
_ZK_SESSION_MS: Final = 10_000


class Target:
    """Where the brokers are: their gRPC addresses, ZooKeeper's connect string (or None) and
    what is known of each process."""

    zookeeper: str | None = None
    client_properties: Mapping[str, object] = {}

    def brokers(self) -> list[BrokerState]:
        raise NotImplementedError

    def bootstrap(self) -> list[str]:
        return [b.address for b in self.brokers()]

    async def refresh(self) -> None:
        """Learn the processes' states again, before each poll (nothing to do by default)."""


@dataclass
class LocalTarget(Target):
    """The cluster of ``kafkasim cluster up`` (its state file): processes known by pid."""

    cluster: LocalCluster
    zookeeper: str | None = None
    client_properties: Mapping[str, object] = field(default_factory=dict)

    def brokers(self) -> list[BrokerState]:
        out = []
        for b in sorted(self.cluster.brokers.values(), key=lambda b: b.broker_id):
            process = (PAUSED if b.paused else UP) if b.running else DOWN
            out.append(BrokerState(b.broker_id, b.address, b.kafka_address, b.metrics_url, process))
        return out


# A container's state (docker inspect's .State.Status) as the console shows the broker.
_CONTAINER_STATES: Final = {
    "running": UP,
    "restarting": UP,
    "paused": PAUSED,
    "created": DOWN,
    "exited": DOWN,
    "dead": DOWN,
    "removing": DOWN,
}


@dataclass
class ComposeTarget(Target):
    """A compose cluster (its state file): brokers on their published ports, each
    container's state as the backend's last ``refresh`` found it (unknown when the engine
    does not answer)."""

    backend: ComposeBackend
    zookeeper: str | None = None
    client_properties: Mapping[str, object] = field(default_factory=dict)
    engine_error: str | None = None

    def brokers(self) -> list[BrokerState]:
        cluster = self.backend.cluster
        out = []
        for b in self.backend.broker_ids:
            metrics = cluster.metrics_ports.get(b)
            kafka = cluster.kafka_ports.get(b)
            out.append(
                BrokerState(
                    b,
                    cluster.address(b),
                    None if kafka is None else f"127.0.0.1:{kafka}",
                    None if metrics is None else f"http://127.0.0.1:{metrics}/metrics",
                    UNKNOWN
                    if self.engine_error is not None
                    else _CONTAINER_STATES.get(self.backend.status(b), UNKNOWN),
                )
            )
        return out

    async def refresh(self) -> None:
        try:
            await asyncio.to_thread(self._refresh)
            self.engine_error = None
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            if self.engine_error is None:
                logger.warning("compose project %s: %s", self.backend.cluster.project, e)
            self.engine_error = str(e)

    def _refresh(self) -> None:
        try:
            self.backend.refresh()
        except RuntimeError:  # a container compose re-created has a new id: look them up again
            self.backend.cluster.forget_containers()
            self.backend.refresh()


@dataclass
class StaticTarget(Target):
    """Brokers by address (``--bootstrap``): ids learnt from the cluster's metadata."""

    addresses: list[str]
    zookeeper: str | None = None
    client_properties: Mapping[str, object] = field(default_factory=dict)
    known: dict[int, str] = field(default_factory=dict)

    def brokers(self) -> list[BrokerState]:
        return [BrokerState(i, a) for i, a in sorted(self.known.items())]

    def bootstrap(self) -> list[str]:
        return self.addresses


#: The series ``parse_metrics`` reads. A scrape asks the broker for these only (GET
#: /metrics?name[]=...): the whole exposition is ~65 KB for 3 partitions and parsing it was most
#: of the console's own CPU (7 ms a broker a second, and the broker's to render it); these few
#: are ~6 KB (issue 16: the console must not slow produce by more than 5 %).
SCRAPED_SERIES: Final = (
    "kafka_network_requestmetrics_requests_total",
    "kafka_network_requestmetrics_totaltimems_sum",
    "kafka_server_brokertopicmetrics_bytesin_total",
    "kafka_server_brokertopicmetrics_bytesout_total",
)


def scrape_url(metrics_url: str) -> str:
    """``metrics_url`` asking for ``SCRAPED_SERIES`` only."""
    query = urllib.parse.urlencode([("name[]", n) for n in SCRAPED_SERIES])
    return f"{metrics_url}{'&' if '?' in metrics_url else '?'}{query}"


def parse_metrics(text: str) -> BrokerMetrics:
    """The counters the console draws, from a broker's Prometheus exposition text."""
    produce = fetch = requests = bytes_in = bytes_out = 0
    total_ms = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "kafka_network_requestmetrics_requests_total":
                requests += int(s.value)
                kind = s.labels.get("request", "")
                if kind.lower() == "produce":
                    produce += int(s.value)
                elif kind.lower() == "fetch":
                    fetch += int(s.value)
            elif s.name == "kafka_network_requestmetrics_totaltimems_sum":
                total_ms += s.value
            elif s.name == "kafka_server_brokertopicmetrics_bytesin_total":
                bytes_in += int(s.value)
            elif s.name == "kafka_server_brokertopicmetrics_bytesout_total":
                bytes_out += int(s.value)
    return BrokerMetrics(produce, fetch, requests, total_ms, bytes_in, bytes_out)


def _names(partitions: tuple[TopicPartition, ...]) -> tuple[str, ...]:
    return tuple(f"{tp.topic}-{tp.partition}" for tp in partitions)


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=_CALL_TIMEOUT_S) as answer:
        body: bytes = answer.read()
    return body.decode()


class Poller:
    """Takes snapshots of ``target``; ``changed`` is set when a ZooKeeper watch fires.
    ``requests`` counts the requests the console sent to brokers (its own load: gRPC calls and
    metrics scrapes)."""

    def __init__(self, target: Target, clock: Clock | None = None) -> None:
        self.target = target
        self.clock = clock or SystemClock()
        self.changed = asyncio.Event()
        self.requests = 0
        self._zk: KazooCoordination | None = None
        self._transport: GrpcTransport | None = None
        self._admin: AdminClient | None = None
        self._polls = 0
        self._groups: tuple[GroupState, ...] = ()

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()
        if self._transport is not None:
            await self._transport.close()
        if self._zk is not None:
            await self._zk.close()

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(
                {
                    **self.target.client_properties,
                    "bootstrap.servers": self.target.bootstrap(),
                    "request.timeout.ms": int(_CALL_TIMEOUT_S * 1000),
                    "default.api.timeout.ms": int(_CALL_TIMEOUT_S * 2000),
                }
            )
        return self._admin

    def _wake(self, loop: asyncio.AbstractEventLoop) -> Callable[[WatchEvent], None]:
        def fired(event: WatchEvent) -> None:
            del event
            loop.call_soon_threadsafe(self.changed.set)

        return fired

    async def snapshot(self) -> Snapshot:
        """One poll of everything (see the module doc)."""
        self._polls += 1
        await self.target.refresh()
        if isinstance(self.target, StaticTarget) and not self.target.known:
            await self._learn_brokers(self.target)
        brokers = self.target.brokers()
        if self.target.zookeeper is not None:
            registered, controller, partitions = await self._from_zookeeper()
            brokers = [
                BrokerState(
                    b.broker_id,
                    b.address,
                    b.kafka_address,
                    b.metrics_url,
                    b.process,
                    b.broker_id in registered,
                )
                for b in brokers
            ]
        else:
            controller, partitions = await self._from_metadata()
        answering = [b for b in brokers if b.process in (UP, UNKNOWN) and b.registered]
        replicas = await self._replicas(answering)
        metrics = await self._metrics(answering)
        if self._polls % GROUPS_EVERY == 1:
            self._groups = await self._read_groups()
        return Snapshot(
            self.clock.time_ms(),
            tuple(brokers),
            controller,
            tuple(partitions),
            replicas,
            metrics,
            self._groups,
        )

    async def _learn_brokers(self, target: StaticTarget) -> None:
        try:
            described = await self._admin_client().describe_cluster()
        except (KafkaError, RpcError) as e:
            logger.info("describe cluster failed: %s", e)
            return
        self.requests += 1
        target.known = {n.node_id: f"{n.host}:{n.port}" for n in described.brokers}

    async def _zookeeper(self) -> KazooCoordination:
        if self._zk is None:
            assert self.target.zookeeper is not None
            zk = KazooCoordination(self.target.zookeeper, _ZK_SESSION_MS)
            await zk.start()
            self._zk = zk
        return self._zk

    async def _from_zookeeper(self) -> tuple[set[int], int, list[PartitionState]]:
        zk = await self._zookeeper()
        wake = self._wake(asyncio.get_running_loop())
        registered = {int(b) for b in await zk.get_children(zk_data.BROKER_IDS, wake)}
        try:
            data, _ = await zk.get(zk_data.CONTROLLER, wake)
            controller = zk_data.decode_controller(data)
        except NoNodeError:
            controller = -1
            await zk.exists(zk_data.CONTROLLER, wake)
        partitions: list[PartitionState] = []
        for topic in sorted(await zk.get_children(zk_data.BROKER_TOPICS)):
            try:
                data, _ = await zk.get(zk_data.topic_path(topic))
            except NoNodeError:
                continue  # deleted meanwhile
            for p, replicas in sorted(zk_data.decode_topic_assignment(data).items()):
                try:
                    state_data, stat = await zk.get(
                        zk_data.partition_state_path(TopicPartition(topic, p))
                    )
                except NoNodeError:
                    partitions.append(PartitionState(topic, p, tuple(replicas), -1, -1, ()))
                    continue
                s = zk_data.decode_partition_state(state_data, stat.version)
                partitions.append(
                    PartitionState(
                        topic, p, tuple(replicas), s.leader, s.leader_epoch, tuple(sorted(s.isr))
                    )
                )
        return registered, controller, partitions

    async def _from_metadata(self) -> tuple[int, list[PartitionState]]:
        admin = self._admin_client()
        try:
            cluster = await admin.describe_cluster()
            topics = await admin.describe_topics()
        except (KafkaError, RpcError) as e:
            logger.info("metadata failed: %s", e)
            return -1, []
        self.requests += 2
        return cluster.controller_id, [
            PartitionState(
                t.name, p.partition, p.replicas, p.leader, p.leader_epoch, tuple(sorted(p.isr))
            )
            for t in topics
            for p in t.partitions
        ]

    async def _replicas(self, brokers: list[BrokerState]) -> tuple[ReplicaSample, ...]:
        if self._transport is None:
            self._transport = client_transport(self.target.client_properties)
        transport = self._transport

        async def one(b: BrokerState) -> list[ReplicaSample]:
            self.requests += 1
            try:
                answer = await transport.call(
                    b.address,
                    proto.METHOD_DESCRIBE_REPLICAS,
                    pb.DescribeReplicasRequest(),
                    timeout_s=_CALL_TIMEOUT_S,
                )
            except RpcError as e:
                logger.info("DescribeReplicas to broker %d failed: %s", b.broker_id, e)
                return []
            assert isinstance(answer, pb.DescribeReplicasResponse)
            return [ReplicaSample.from_state(answer.monotonic_ms, r) for r in answer.replicas]

        found = await asyncio.gather(*(one(b) for b in brokers))
        return tuple(s for part in found for s in part)

    async def _metrics(self, brokers: list[BrokerState]) -> dict[int, BrokerMetrics]:
        async def one(url: str) -> BrokerMetrics | None:
            self.requests += 1  # a scrape is a request to the broker too
            try:
                return parse_metrics(await asyncio.to_thread(_scrape, url))
            except (OSError, ValueError) as e:
                logger.info("metrics from %s failed: %s", url, e)
                return None

        scraped = [b for b in brokers if b.metrics_url]
        found = await asyncio.gather(*(one(scrape_url(b.metrics_url or "")) for b in scraped))
        return {b.broker_id: m for b, m in zip(scraped, found, strict=True) if m is not None}

    async def _read_groups(self) -> tuple[GroupState, ...]:
        admin = self._admin_client()
        try:
            listed = await admin.list_groups()
            self.requests += 1
            if not listed:
                return ()
            described = await admin.describe_groups([g.group_id for g in listed])
            out = []
            for g in described:
                lag = await admin.group_lag(g.group_id)
                self.requests += 3
                out.append(
                    GroupState(
                        g.group_id,
                        g.state,
                        tuple(
                            (
                                m.member_id,
                                tuple(f"{tp.topic}-{tp.partition}" for tp in m.assignment),
                            )
                            for m in g.members
                        ),
                        tuple(
                            (tp.topic, tp.partition, x.committed, x.log_end_offset, x.lag)
                            for tp, x in sorted(lag.items())
                        ),
                    )
                )
            return tuple(out)
        except (KafkaError, RpcError) as e:
            logger.info("consumer groups failed: %s", e)
            return self._groups
