"""A controller test bench: SimZooKeeper, brokers that only register, and a recording
transport standing in for the brokers' request handlers.

Everything runs on the virtual-time loop (``run``), so a scenario is deterministic and waits
cost no real time. A "broker" here is a ZooKeeper session holding ``/brokers/ids/<id>`` and
running a :class:`~controller.controller.Controller` (as every Kafka broker does); killing it
expires the session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf.message import Message

from kafkasim.common.clock import ManualClock
from kafkasim.common.coordination import Op, SetOp, Stat
from kafkasim.common.rpc import (
    BidiStream,
    RpcError,
    RpcServer,
    RpcStatus,
    StreamHandler,
    UnaryHandler,
)
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.controller import Controller, ControllerConfig, NewTopic
from kafkasim.proto import (
    METHOD_LEADER_AND_ISR,
    METHOD_STOP_REPLICA,
    METHOD_UPDATE_METADATA,
    METHODS,
)
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

T = TypeVar("T")

SESSION_TIMEOUT_MS = 6_000
TIME_LIMIT_S = 3_600.0
QUIET_CONFIG = ControllerConfig(auto_leader_rebalance_enable=False)


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run ``scenario`` on a fresh virtual-time loop (deterministic, no real waiting)."""

    async def main() -> T:
        return await scenario()

    return run_simulation(main(), time_limit_s=TIME_LIMIT_S)


def address(broker_id: int) -> str:
    return f"broker{broker_id}:9092"


@dataclass(frozen=True)
class Call:
    target: str
    method: str
    request: Any  # the protobuf request


class RecordingTransport:
    """The client side of the Rpc port, in memory: records every call and answers success
    (StopReplica with a NONE entry per partition). ``down`` targets fail with UNAVAILABLE."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.attempts: list[Call] = []
        self.down: set[str] = set()
        self.fail_next: dict[str, int] = {}

    async def call(self, target: str, method: str, request: Message, *, timeout_s: float) -> Any:
        attempt = Call(target, method, request)
        self.attempts.append(attempt)
        if target in self.down:
            raise RpcError(RpcStatus.UNAVAILABLE, f"{target} is down")
        if self.fail_next.get(target, 0) > 0:
            self.fail_next[target] -= 1
            raise RpcError(RpcStatus.UNAVAILABLE, f"{target} dropped the call")
        self.calls.append(attempt)
        response = METHODS[method].response_cls()
        if method == METHOD_STOP_REPLICA:
            assert isinstance(request, pb.StopReplicaRequest)
            assert isinstance(response, pb.StopReplicaResponse)
            for p in request.partitions:
                response.partition_errors.add(topic=p.topic, partition=p.partition)
        return response

    def server(
        self,
        address: str,
        unary: Mapping[str, UnaryHandler],
        streams: Mapping[str, StreamHandler],
    ) -> RpcServer:
        raise NotImplementedError("the controller only calls")

    def open_stream(self, target: str, method: str) -> BidiStream:
        raise NotImplementedError("the controller only calls")

    async def close(self) -> None:
        return None

    def requests(self, method: str, broker_id: int | None = None) -> list[Any]:
        return [
            c.request
            for c in self.calls
            if c.method == method and (broker_id is None or c.target == address(broker_id))
        ]

    def leader_and_isr(self, broker_id: int | None = None) -> list[pb.LeaderAndIsrRequest]:
        return self.requests(METHOD_LEADER_AND_ISR, broker_id)

    def update_metadata(self, broker_id: int | None = None) -> list[pb.UpdateMetadataRequest]:
        return self.requests(METHOD_UPDATE_METADATA, broker_id)

    def stop_replica(self, broker_id: int | None = None) -> list[pb.StopReplicaRequest]:
        return self.requests(METHOD_STOP_REPLICA, broker_id)

    def clear(self) -> None:
        self.calls.clear()
        self.attempts.clear()


class RacingCoordination:
    """Delegates to a client, but just before the first fenced write of ``path`` lets
    ``race`` write it first (a leader's ISR change racing the controller)."""

    def __init__(
        self, inner: SimZooKeeperClient, path: str, race: Callable[[], Awaitable[None]]
    ) -> None:
        self._inner = inner
        self._path = path
        self._race: Callable[[], Awaitable[None]] | None = race
        self.raced = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def session_id(self) -> int:
        return self._inner.session_id

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        race = self._race
        if race is not None and any(isinstance(op, SetOp) and op.path == self._path for op in ops):
            self._race = None
            await race()
            self.raced = True
        return await self._inner.multi(ops)


@dataclass
class Broker:
    broker_id: int
    session: SimZooKeeperClient
    transport: RecordingTransport
    controller: Controller


@dataclass
class Cluster:
    """Brokers on one SimZooKeeper; ``admin`` is a raw session for the test's own writes."""

    config: ControllerConfig = QUIET_CONFIG
    server: SimZooKeeperServer = field(default_factory=SimZooKeeperServer)
    brokers: dict[int, Broker] = field(default_factory=dict)
    retired: list[Broker] = field(default_factory=list)
    admin: SimZooKeeperClient | None = None
    clock: ManualClock = field(default_factory=ManualClock)

    async def start_admin(self) -> SimZooKeeperClient:
        if self.admin is None:
            self.admin = SimZooKeeperClient(self.server, SESSION_TIMEOUT_MS, "admin")
            await self.admin.start()
        return self.admin

    async def start_broker(
        self,
        broker_id: int,
        *,
        wrap: Callable[[SimZooKeeperClient], Any] | None = None,
        config: ControllerConfig | None = None,
    ) -> Broker:
        """Open a session, register the broker, start its controller; then settle."""
        old = self.brokers.pop(broker_id, None)
        if old is not None:
            self.retired.append(old)
        session = SimZooKeeperClient(self.server, SESSION_TIMEOUT_MS, f"broker-{broker_id}")
        await session.start()
        await session.create(
            zk_data.broker_path(broker_id),
            zk_data.encode_broker(
                zk_data.BrokerInfo(broker_id, f"broker{broker_id}", 9092), self.clock.time_ms()
            ),
            ephemeral=True,
            makepath=True,
        )
        transport = RecordingTransport()
        coordination = wrap(session) if wrap is not None else session
        controller = Controller(
            broker_id, coordination, transport, self.clock, config=config or self.config
        )
        await controller.start()
        broker = Broker(broker_id, session, transport, controller)
        self.brokers[broker_id] = broker
        await self.settle()
        return broker

    async def start(self, *broker_ids: int) -> None:
        await self.start_admin()
        for b in broker_ids:
            await self.start_broker(b)

    def kill(self, broker_id: int) -> None:
        """The broker's ZooKeeper session expires: its registration (and /controller) go."""
        self.server.expire_session(self.brokers[broker_id].session.session_id)

    def active(self) -> Controller:
        active = [b.controller for b in self.brokers.values() if b.controller.is_active]
        assert len(active) == 1, f"expected one active controller, got {len(active)}"
        return active[0]

    def transport_of_active(self) -> RecordingTransport:
        controller = self.active()
        return self.brokers[controller.broker_id].transport

    async def settle(self) -> None:
        """Let watches fire and every controller finish its events and requests."""
        for _ in range(3):
            await asyncio.sleep(1.0)
            for broker in list(self.brokers.values()):
                await broker.controller.wait_idle()

    async def create_topic(
        self, name: str, assignment: Mapping[int, Sequence[int]], configs: Mapping[str, str] = {}
    ) -> None:
        results = await self.active().create_topics(
            [NewTopic(name, assignments=assignment, configs=dict(configs))]
        )
        assert results[0].ok, results
        await self.settle()

    async def state(self, tp: TopicPartition) -> zk_data.LeaderAndIsr:
        admin = await self.start_admin()
        data, stat = await admin.get(zk_data.partition_state_path(tp))
        return zk_data.decode_partition_state(data, stat.version)

    async def write_isr(self, tp: TopicPartition, isr: Sequence[int], *, notify: bool) -> None:
        """What a leader does when it shrinks or expands the ISR (version-checked)."""
        admin = await self.start_admin()
        current = await self.state(tp)
        await admin.set(
            zk_data.partition_state_path(tp),
            zk_data.encode_partition_state(current.with_(isr=tuple(isr))),
            current.zk_version,
        )
        if notify:
            await admin.create(
                f"{zk_data.ISR_CHANGE_NOTIFICATION}/{zk_data.ISR_CHANGE_PREFIX}",
                zk_data.encode_isr_change([tp]),
                sequence=True,
                makepath=True,
            )

    async def stop(self) -> None:
        for broker in [*self.brokers.values(), *self.retired]:
            await broker.controller.stop()
            await broker.session.close()
        if self.admin is not None:
            await self.admin.close()


def in_cluster(
    scenario: Callable[[Cluster], Awaitable[T]], config: ControllerConfig = QUIET_CONFIG
) -> T:
    """Run ``scenario`` against a fresh cluster and tear it down cleanly afterwards."""

    async def main() -> T:
        cluster = Cluster(config=config)
        try:
            return await scenario(cluster)
        finally:
            await cluster.stop()

    return run(main)
