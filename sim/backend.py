"""The deterministic simulation as a failure-run backend: the real brokers, controller and
clients on the virtual-time loop, with SimNetwork and SimZooKeeper (``SIM``, ``SimBackend``).

How the faults map onto the simulation:

* ``crash``: the broker stops at once (no controlled shutdown, no flush); with
  ``lose_unflushed`` every byte not yet fsynced is lost, as on a power cut.
* ``pause``: the broker's network and ZooKeeper connection go silent for the duration. A paused
  process's own timers keep running here (a real SIGSTOP stops them too); what others see —
  no answers, no heartbeats, a session that may expire — is the same.
* ``isolate``: cut from every other node, ZooKeeper included. ``isolate_zk``: from ZooKeeper
  only. ``split``: brokers in separate groups cannot reach each other (clients and ZooKeeper
  reach all). ``expire_session``: the broker's ZooKeeper session expires now. What crosses a
  cut is lost, or with the scenario's ``cluster.late_delivery`` held and delivered after the
  heal, as TCP retransmits it (``sim.network``, 5).
* ``slow_network``: latency (and jitter) on every message of the simulation, not only the
  target's, for the duration.
* ``clock_jump``: the wall clock (``time_ms``) of the whole simulation jumps; durations
  (``monotonic_ms``) do not. ``clock_drift``: the target's own wall clock (``sim.clocks``)
  runs fast or slow; its monotonic clock and the loop's timers keep the simulation's time.
* ``partition_one_way`` / ``slow_one_way``: one direction of the chosen broker links is cut
  (``SimNetwork.one_way``) or slowed (``SimNetwork.slow_link``); a split healing keeps the
  one-way cuts in force and the reverse. A restarted broker comes back with every link
  (``SimCluster.start_broker`` heals its node), as after ``isolate``.
* ``torn_write``: the broker leaves the network, each of its logs' last unflushed batch is
  cut at a random byte (``storage.disk_faults.tear_last_batch``, drawn on a stream of its
  own), and it is killed as by ``crash``.
* ``disk_full``: every append under the broker's log dirs fails with ENOSPC
  (``storage.disk_faults``); the append answers KAFKA_STORAGE_ERROR, the dir goes offline and
  the broker halts (as Kafka does when its log dirs have failed); the runner hears of it at
  once and counts the broker as crashed.
* ``slow_disk``: the broker's log writes and fsyncs wait their latency in virtual time, one
  at a time (``sim.disk.SimDisk`` through the broker's ``node.disk_delay`` port), at the
  leader's produce and the follower's fetcher; kept across the broker's restarts until healed.
* A broker whose start-up fails (its ZooKeeper unreachable) is stopped again, as a Kafka
  broker whose start-up failed exits.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import random
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, TypeVar

from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkasimError
from kafkasim.common.rpc import ClientTransport
from kafkasim.faults.actions import ACTIONS
from kafkasim.faults.backend import BackendSpec, BrokerStartError, broker_props
from kafkasim.faults.final_logs import ChunkMemo, split_chunks
from kafkasim.faults.history import History, ReplicaSample
from kafkasim.faults.scenario import Scenario, session_timeout_s
from kafkasim.node.rules import KAFKA_RULES, ReplicationRules
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address, broker_node
from kafkasim.sim.disk import SimDisk
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.network import SimTransport
from kafkasim.sim.zookeeper import SimZooKeeperClient
from kafkasim.storage import disk_faults
from kafkasim.storage.log_read import read_chunks

__all__ = ["SIM", "SimBackend", "sim_backend"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

BASE_LATENCY_MS: Final = (1.0, 2.0)  # base, jitter: a message takes 1-3 ms
TIME_LIMIT_S: Final = 7200.0  # virtual seconds: a run that goes on longer is stuck


class SimBackend:
    """``faults.backend.Backend`` on a ``SimCluster``, created when the run's loop starts."""

    def __init__(
        self,
        scenario: Scenario,
        seed: int | None,
        root: Path,
        *,
        rules: ReplicationRules = KAFKA_RULES,
    ) -> None:
        self.scenario = scenario
        self.rules = rules
        self.seed = 1 if seed is None else seed
        self.root = root
        self._cluster: SimCluster | None = None
        self._paused: set[int] = set()
        self._on_halt: Callable[[int], None] | None = None
        # One-way faults in force (how many cover each directed link) and the links a split
        # cut, so that healing one never heals the other; slowed links.
        self._one_way_cuts: dict[tuple[str, str], int] = {}
        self._split_cuts: set[tuple[str, str]] = set()
        self._slow_links: set[tuple[str, str]] = set()
        # Where a torn write cuts its batch: a stream of its own, so that other draws stay.
        self._tear_rng = random.Random(f"torn/{self.seed}")

    @property
    def spec(self) -> BackendSpec:
        return SIM if self.rules == KAFKA_RULES else sim_backend(self.rules)

    @property
    def cluster(self) -> SimCluster:
        if self._cluster is None:
            self._cluster = SimCluster(
                self.root,
                brokers=self.scenario.cluster.brokers,
                seed=self.seed,
                broker_props=broker_props(self.scenario),
                # The simulated ZooKeeper needs the session timeout the brokers ask for.
                zk_session_timeout_ms=round(session_timeout_s(self.scenario) * 1000),
                rules=self.rules,
            )
        return self._cluster

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(self.cluster.broker_ids)

    @property
    def bootstrap(self) -> list[str]:
        return [broker_address(b) for b in self.cluster.broker_ids]

    @property
    def kafka_bootstrap(self) -> list[str]:
        return []  # no sockets (SIM.real_clients)

    @property
    def clock(self) -> Clock:
        return self.cluster.clock

    def run_loop(self, main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        return run_simulation(main(), time_limit_s=TIME_LIMIT_S)

    async def start(self) -> None:
        cluster = self.cluster
        # Every message takes BASE_LATENCY_MS plus a seeded jitter: without it, a follower's
        # long-poll would copy every append at the same virtual instant, and the windows in
        # which replicas differ (where replication bugs live) would never open.
        cluster.network.set_latency(*BASE_LATENCY_MS)
        # A cut holds what crosses it, as TCP does, when the scenario asks (sim.network, 5).
        cluster.network.late_delivery = self.scenario.cluster.late_delivery
        cluster.on_halt = self._halted
        await cluster.start()
        await cluster.wait_for(lambda: cluster.controller_id() > 0, what="a controller")

    def describe(self) -> str:
        return f"simulation seed {self.seed}"

    def transport_for(self, name: str) -> ClientTransport:
        return SimTransport(self.cluster.network, name)

    def address(self, broker_id: int) -> str:
        return broker_address(broker_id)

    def running(self, broker_id: int) -> bool:
        return broker_id in self.cluster.brokers

    async def refresh(self) -> None:
        pass  # the cluster's own table is always current

    def set_on_halt(self, callback: Callable[[int], None]) -> None:
        self._on_halt = callback

    def _halted(self, broker_id: int) -> None:
        if self._on_halt is not None:
            self._on_halt(broker_id)

    def _zk_of(self, broker_id: int) -> SimZooKeeperClient | None:
        broker = self.cluster.brokers.get(broker_id)
        zk = broker.zk if broker is not None else None
        return zk if isinstance(zk, SimZooKeeperClient) else None

    async def crash(self, broker_id: int, *, lose_unflushed: bool) -> None:
        broker = self.cluster.brokers.pop(broker_id, None)
        if broker is None:
            return
        self._paused.discard(broker_id)
        zk = broker.zk
        if isinstance(zk, SimZooKeeperClient):
            zk.disconnect()
        self.cluster.network.crash(broker_node(broker_id))
        await broker.crash(drop_unflushed=lose_unflushed)

    async def shutdown(self, broker_id: int) -> None:
        if broker_id in self.cluster.brokers:
            await self.cluster.stop_broker(broker_id)

    async def start_broker(self, broker_id: int) -> None:
        try:
            await self.cluster.start_broker(broker_id)
        except KafkasimError as e:
            # Kafka's start-up failure: the process shuts down and exits.
            logger.info("broker %d: start-up failed (%s); stopping it", broker_id, e)
            await self.crash(broker_id, lose_unflushed=False)
            raise BrokerStartError(f"broker {broker_id}: start-up failed: {e}") from e

    async def serving_again(self, broker_id: int) -> bool:
        return broker_id in self.cluster.brokers  # start_broker returns once it serves

    def exit_note(self, broker_id: int) -> str:
        return f"simulated broker {broker_id}"

    async def pause(self, broker_id: int) -> None:
        # What the others see of a paused broker: see the module doc.
        self._paused.add(broker_id)
        await self.isolate(broker_id)

    async def resume(self, broker_id: int) -> None:
        if broker_id in self._paused:
            self._paused.discard(broker_id)
            await self.reconnect(broker_id)

    async def isolate(self, broker_id: int) -> None:
        self.cluster.network.isolate(broker_node(broker_id))
        await self.isolate_zk(broker_id)

    async def reconnect(self, broker_id: int) -> None:
        self.cluster.network.heal(broker_node(broker_id))
        await self.reconnect_zk(broker_id)

    async def isolate_zk(self, broker_id: int) -> None:
        zk = self._zk_of(broker_id)
        if zk is not None:
            zk.disconnect()

    async def reconnect_zk(self, broker_id: int) -> None:
        zk = self._zk_of(broker_id)
        if zk is not None:
            zk.reconnect()

    async def split(self, groups: list[list[int]]) -> None:
        sides = [{broker_node(b) for b in group} for group in groups]
        for side in sides:
            for src in sorted(side):
                for other in sides:
                    if other is side:
                        continue
                    for dst in sorted(other):
                        self._split_cuts.add((src, dst))
                        self.cluster.network.one_way(src, dst)

    async def heal_split(self) -> None:
        self.cluster.network.heal_all()
        self._split_cuts.clear()
        for pair in self._one_way_cuts:  # one-way faults still in force stay
            self.cluster.network.one_way(*pair)

    async def expire_session(self, broker_id: int) -> None:
        zk = self._zk_of(broker_id)
        if zk is not None:
            self.cluster.zk_server.expire_session(zk.session_id)

    async def slow_network(
        self, broker_ids: list[int], latency_ms: float, jitter_ms: float
    ) -> None:
        del broker_ids  # every link: see the module doc
        self.cluster.network.set_latency(latency_ms, jitter_ms)

    async def normal_network(self) -> None:
        self.cluster.network.set_latency(*BASE_LATENCY_MS)

    async def clock_jump(self, broker_ids: list[int], seconds: float) -> None:
        del broker_ids  # one clock for the whole simulation
        self.cluster.clock.jump_ms(int(seconds * 1000))

    async def cut_one_way(self, src: int, dst: int) -> None:
        pair = (broker_node(src), broker_node(dst))
        self._one_way_cuts[pair] = self._one_way_cuts.get(pair, 0) + 1
        self.cluster.network.one_way(*pair)

    async def heal_one_way(self, src: int, dst: int) -> None:
        pair = (broker_node(src), broker_node(dst))
        left = self._one_way_cuts.get(pair, 0) - 1
        if left > 0:
            self._one_way_cuts[pair] = left
            return
        self._one_way_cuts.pop(pair, None)
        if pair not in self._split_cuts:  # a split still in force keeps the link cut
            self.cluster.network.heal_one_way(*pair)

    async def slow_link(self, src: int, dst: int, latency_ms: float, jitter_ms: float) -> None:
        # SimNetwork draws ±jitter around its base: latency..latency+jitter, as documented.
        pair = (broker_node(src), broker_node(dst))
        self._slow_links.add(pair)
        self.cluster.network.slow_link(*pair, latency_ms + jitter_ms / 2, jitter_ms / 2)

    async def normal_link(self, src: int, dst: int) -> None:
        pair = (broker_node(src), broker_node(dst))
        self._slow_links.discard(pair)
        self.cluster.network.slow_link(*pair, 0.0)

    async def clock_drift(self, broker_id: int, rate: float) -> None:
        self.cluster.broker_clock(broker_id).set_rate(rate)

    async def crash_torn(self, broker_id: int) -> None:
        broker = self.cluster.brokers.get(broker_id)
        if broker is None:
            return
        # Gone from the network and ZooKeeper first, so that nothing appends after the tear.
        self.cluster.network.crash(broker_node(broker_id))
        zk = broker.zk
        if isinstance(zk, SimZooKeeperClient):
            zk.disconnect()
        for tp in sorted(broker.log_manager.logs):
            disk_faults.tear_last_batch(broker.log_manager.logs[tp], self._tear_rng)
        await self.crash(broker_id, lose_unflushed=False)

    async def fill_disk(self, broker_id: int) -> None:
        disk_faults.fill(self.cluster.log_dirs(broker_id))

    async def free_disk(self, broker_id: int) -> None:
        disk_faults.free(self.cluster.log_dirs(broker_id))

    async def slow_disk(self, broker_id: int, write_ms: float, fsync_ms: float) -> None:
        self.cluster.slow_disk(broker_id, SimDisk(write_ms, fsync_ms))

    async def normal_disk(self, broker_id: int) -> None:
        self.cluster.slow_disk(broker_id, None)

    async def heal_network(self) -> None:
        self.cluster.network.heal_all()
        self._one_way_cuts.clear()
        self._split_cuts.clear()
        for pair in sorted(self._slow_links):
            self.cluster.network.slow_link(*pair, 0.0)
        self._slow_links.clear()
        self.cluster.network.set_latency(*BASE_LATENCY_MS)
        self._paused.clear()
        for broker_id in sorted(self.cluster.brokers):
            await self.reconnect_zk(broker_id)

    async def controller_id(self) -> int:
        return self.cluster.controller_id()

    async def describe_replicas(self, broker_ids: list[int]) -> tuple[ReplicaSample, ...]:
        """Each broker's own answer to DescribeReplicas, taken in process (no virtual time
        passes, no message is drawn on the network's random stream)."""
        found: list[ReplicaSample] = []
        for broker_id in broker_ids:
            broker = self.cluster.brokers.get(broker_id)
            if broker is None:
                continue
            response = broker.apis.describe_replicas(pb.DescribeReplicasRequest())
            # Sampled now on the run's (the host's) monotonic clock, as the sampler does.
            now_ms = self.cluster.clock.monotonic_ms()
            found.extend(ReplicaSample.from_state(now_ms, r) for r in response.replicas)
        return tuple(found)

    async def finish(self, history: History) -> list[str]:
        """Every live replica's log as it is in memory (data records apart from transaction
        markers); the leaders' high watermarks."""
        topics = {t.name for t in self.scenario.cluster.topics}
        memo: ChunkMemo = {}  # the replicas of a partition mostly hold the same bytes
        for broker_id in sorted(self.cluster.brokers):
            rm = self.cluster.brokers[broker_id].replica_manager
            for tp in sorted(rm.partitions):
                if tp.topic not in topics:
                    continue
                partition = rm.partitions[tp]
                entries: list[tuple[int, str]] = []
                markers: list[tuple[int, str]] = []
                log = partition.log
                chunks = read_chunks(log.read, log.log_start_offset, log.log_end_offset, 1 << 20)
                split_chunks(chunks, entries, markers, memo)
                history.final_logs[(tp.topic, tp.partition, broker_id)] = entries
                if markers:
                    history.final_markers[(tp.topic, tp.partition, broker_id)] = markers
                if partition.is_leader:
                    history.final_hw[(tp.topic, tp.partition)] = log.high_watermark
        return []

    async def close(self) -> None:
        if self._cluster is None:
            return
        cluster = self._cluster
        disk_faults.free(d for b in cluster.broker_ids for d in cluster.log_dirs(b))
        await cluster.stop()


REAL_CLIENTS_REASON: Final = (
    "the simulation has no sockets: its brokers answer only its in-process transport, on "
    "virtual time, which a real Kafka client cannot reach (run it on --backend local)"
)

SIM: Final = BackendSpec(
    name="sim",
    runtime="simulation",
    injectable=frozenset(ACTIONS),
    not_injectable=MappingProxyType({}),
    lose_unflushed="",
    create=SimBackend,
    real_clients=REAL_CLIENTS_REASON,
)
"""The deterministic simulation: every action, a crash that loses unflushed data too."""


def sim_backend(rules: ReplicationRules) -> BackendSpec:
    """The simulation whose brokers run by ``rules`` (``node.rules``: switches that reproduce
    known Kafka bugs, for the tests that show a failure search catches them)."""
    if rules == KAFKA_RULES:
        return SIM
    return dataclasses.replace(SIM, create=functools.partial(SimBackend, rules=rules))
