"""Run a scenario in the deterministic simulation: the real brokers, controller and clients on
the virtual-time loop, with SimNetwork and SimZooKeeper, faults injected on schedule.

``run(scenario, seed, root)`` returns the run's :class:`~sim.history.History` (every client
operation, replica samples, fault windows, each replica's final log). Everything random comes
from ``seed``, so the same scenario and seed give the same history, byte for byte
(``History.lines``), in any process.

A run: start the cluster, create the topics, start the workload (``sim.workload``), inject
each fault at its time (and undo it after its duration), stop the producers at the end of the
workload, heal everything (restart crashed brokers, reconnect, undo network faults), wait
``settle_s`` for replication to catch up, read every partition back, snapshot every replica's
log, stop.

How faults map onto the simulation (``FAULTS``):

* ``crash``: the broker stops at once (no controlled shutdown, no flush); with
  ``lose_unflushed`` every byte not yet fsynced is lost, as on a power cut.
* ``restart``: a crashed (or stopped) broker starts again on its data.
* ``pause``: the broker's network and ZooKeeper connection go silent for the duration. A paused
  process's own timers keep running here (a real SIGSTOP stops them too); what others see —
  no answers, no heartbeats, a session that may expire — is the same.
* ``isolate``: cut from every other node, ZooKeeper included. ``isolate_zk``: from ZooKeeper
  only. ``split``: brokers in separate groups cannot reach each other (clients and ZooKeeper
  reach all). ``expire_session``: the broker's ZooKeeper session expires now.
* ``slow_network``: latency (and jitter) on every message for the duration.
* ``clock_jump``: the wall clock (``time_ms``) of the whole simulation jumps; durations
  (``monotonic_ms``) do not.
* ``rolling_restart``: a controlled shutdown and restart of each broker in turn.
* ``disk_full``: every append under the broker's log dirs fails with ENOSPC
  (``storage.disk_faults``); the append answers KAFKA_STORAGE_ERROR, the dir goes offline and
  the broker halts (as Kafka does when its log dirs have failed); the controller moves
  leadership. When the duration ends the disk has room again and the broker is restarted.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafkasim.common.errors import KafkasimError
from kafkasim.common.types import TopicPartition
from kafkasim.faults.history import FaultEvent, History
from kafkasim.faults.scenario import Fault, Scenario
from kafkasim.faults.workload import Workload
from kafkasim.sim.cluster import SimCluster, broker_address, broker_node
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.network import SimTransport
from kafkasim.sim.zookeeper import SimZooKeeperClient
from kafkasim.storage import disk_faults

logger = logging.getLogger(__name__)

SUPPORTED = frozenset(
    {
        "crash",
        "restart",
        "pause",
        "isolate",
        "isolate_zk",
        "split",
        "expire_session",
        "slow_network",
        "clock_jump",
        "rolling_restart",
        "controlled_shutdown",
        "disk_full",
    }
)


BASE_LATENCY_MS = (1.0, 2.0)  # base, jitter: a message takes 1-3 ms


class UnsupportedFaultError(KafkasimError):
    """A fault this runtime cannot inject; named before the run starts."""


def check_supported(scenario: Scenario, supported: frozenset[str] = SUPPORTED) -> None:
    missing = sorted({f.action for f in scenario.faults} - supported)
    if missing:
        raise UnsupportedFaultError(
            f"scenario {scenario.name}: the simulation cannot inject {', '.join(missing)}"
        )


def run(
    scenario: Scenario,
    seed: int,
    root: Path,
    *,
    time_limit_s: float = 7200.0,
    on_event: Callable[[str], None] | None = None,
) -> History:
    """Run ``scenario`` with ``seed`` on a fresh virtual-time loop; the history.
    ``on_event`` hears one line per phase and per fault, as they happen (virtual seconds)."""
    check_supported(scenario)
    state = _Run(scenario, seed, root, on_event=on_event)
    return run_simulation(state.main(), time_limit_s=time_limit_s)


@dataclass
class _Run:
    scenario: Scenario
    seed: int
    root: Path
    on_event: Callable[[str], None] | None = None
    history: History = field(default_factory=History)
    crashed: set[int] = field(default_factory=set)
    _undo: list[tuple[float, Callable[[], Awaitable[None]], str]] = field(default_factory=list)
    _healing: set[asyncio.Task[None]] = field(default_factory=set)
    _locks: dict[int, asyncio.Lock] = field(default_factory=dict)

    async def main(self) -> History:
        s = self.scenario
        props: dict[str, object] = {
            "unclean.leader.election.enable": s.cluster.unclean_leader_election,
            "group.initial.rebalance.delay.ms": 0,
            "auto.create.topics.enable": False,
            **s.cluster.broker_config,
        }
        self.cluster = SimCluster(
            self.root,
            brokers=s.cluster.brokers,
            seed=self.seed,
            broker_props=props,
            # The simulated ZooKeeper needs the session timeout the brokers ask for.
            zk_session_timeout_ms=int(
                s.cluster.broker_config.get("zookeeper.session.timeout.ms", 6000)
            ),
        )
        self.rng = random.Random(f"faults/{self.seed}")
        cluster = self.cluster
        self.history.meta = {"scenario": s.name, "seed": self.seed, "runtime": "simulation"}
        # Every message takes BASE_LATENCY_MS plus a seeded jitter: without it, a follower's
        # long-poll would copy every append at the same virtual instant, and the windows in
        # which replicas differ (where replication bugs live) would never open.
        cluster.network.set_latency(*BASE_LATENCY_MS)
        # A broker that halts itself (a full disk) is down like a crashed one.
        cluster.on_halt = self._on_halt
        await cluster.start()
        try:
            await cluster.wait_for(lambda: cluster.controller_id() > 0, what="a controller")
            admin = cluster.client("setup")
            for topic in s.cluster.topics:
                configs = {"min.insync.replicas": str(topic.min_insync_replicas), **topic.configs}
                await admin.create_topic(
                    topic.name, topic.partitions, topic.replication_factor, configs
                )
                await admin.wait_for_leaders(topic.name, topic.partitions)
            start_ms = cluster.clock.monotonic_ms()
            self.start_ms = start_ms
            self.t0 = asyncio.get_running_loop().time()
            workload = Workload(
                scenario=s,
                history=self.history,
                clock=cluster.clock,
                transport_for=lambda name: SimTransport(cluster.network, name),
                bootstrap=[broker_address(b) for b in cluster.broker_ids],
                start_ms=start_ms,
                broker_addresses=lambda: [broker_address(b) for b in sorted(cluster.brokers)],
            )
            workload.start()
            self._event(f"workload started ({len(s.workload.producers)} producers)")
            await self._run_faults(s.workload.duration_s)
            await workload.stop_producers()
            self._event("producers stopped; healing every fault")
            await self._heal_everything()
            self._event(f"settling for {s.workload.settle_s:g} s")
            await asyncio.sleep(s.workload.settle_s)
            await workload.final_read()
            self._event("final read done")
            await workload.stop()
            self._snapshot_logs()
        finally:
            disk_faults.free(d for b in cluster.broker_ids for d in cluster.log_dirs(b))
            await cluster.stop()
        return self.history

    def now_ms(self) -> int:
        return self.cluster.clock.monotonic_ms() - self.start_ms

    def _event(self, text: str) -> None:
        if self.on_event is not None:
            self.on_event(f"{self.now_ms() / 1000:7.1f} s  {text}")

    # -- the schedule -----------------------------------------------------------------------

    async def _run_faults(self, duration_s: float) -> None:
        loop = asyncio.get_running_loop()
        pending = sorted(self.scenario.faults, key=lambda f: f.at_s)
        while True:
            now = loop.time() - self.t0
            due_undo = [u for u in self._undo if u[0] <= now]
            for item in due_undo:
                # In the background: a restarting broker may wait out its old session's
                # registration, and the schedule must not slip behind it.
                self._undo.remove(item)
                task = loop.create_task(self._heal(item[1], item[2]))
                self._healing.add(task)
            while pending and pending[0].at_s <= now:
                await self._inject(pending.pop(0))
            now = loop.time() - self.t0
            if now >= duration_s:
                return
            upcoming = [duration_s, *(f.at_s for f in pending), *(u[0] for u in self._undo)]
            await asyncio.sleep(max(min(upcoming) - now, 0.01))

    async def _inject(self, fault: Fault) -> None:
        targets = self._resolve(fault)
        label = f"{fault.target or 'cluster'} → " + ",".join(map(str, targets))
        logger.info("fault at %.1f s: %s %s", fault.at_s, fault.action, label)
        until = "" if fault.duration_s is None else f" for {fault.duration_s:g} s"
        self._event(f"{fault.action} {label}{until}")
        start = self.now_ms()
        end = None if fault.duration_s is None else start + int(fault.duration_s * 1000)
        self.history.faults.append(FaultEvent(start, fault.action, label, end))
        if fault.action == "rolling_restart":
            # It takes interval_s per broker: in the background, so later faults keep time.
            task = asyncio.get_running_loop().create_task(self._rolling_restart(fault, targets))
            self._healing.add(task)
            return
        undo = await getattr(self, f"_{fault.action}")(fault, targets)
        if undo is not None and fault.duration_s is not None:
            now = asyncio.get_running_loop().time() - self.t0
            self._undo.append((now + fault.duration_s, undo, f"{fault.action} {label}"))

    async def _heal(self, undo: Callable[[], Awaitable[None]], label: str) -> None:
        await undo()
        self._event("healed: " + label)

    async def _heal_everything(self) -> None:
        if self._healing:
            await asyncio.wait(self._healing)
            self._healing.clear()
        for _, undo, _label in sorted(self._undo, key=lambda u: u[0]):
            await undo()
        self._undo.clear()
        self.cluster.network.heal_all()
        self.cluster.network.set_latency(*BASE_LATENCY_MS)
        for broker_id in sorted(self.cluster.brokers):
            zk = self.cluster.brokers[broker_id].zk
            if isinstance(zk, SimZooKeeperClient):
                zk.reconnect()
        for broker_id in sorted(self.crashed):
            await self._start(broker_id)

    # -- targets ----------------------------------------------------------------------------

    def _resolve(self, fault: Fault) -> list[int]:
        """Broker ids the fault applies to, resolved now (the leader at fault time)."""
        target = fault.target or ""
        live = sorted(self.cluster.brokers)
        if fault.action == "restart" and target in ("", "all"):
            return sorted(self.crashed)
        if target in ("", "all"):
            return live
        if target == "controller":
            controller = self.cluster.controller_id()
            return [controller] if controller > 0 else []
        if target == "random":
            return [self.rng.choice(live)] if live else []
        kind, _, rest = target.partition(":")
        if kind == "broker":
            return [int(rest)]
        if kind in ("leader", "follower"):
            topic, _, number = rest.rpartition("-")
            tp = TopicPartition(topic, int(number))
            leaders = [
                b
                for b in live
                if (p := self.cluster.brokers[b].replica_manager.partitions.get(tp)) is not None
                and p.is_leader
            ]
            if kind == "leader":
                return leaders[:1]
            followers = [
                b
                for b in live
                if b not in leaders and tp in self.cluster.brokers[b].replica_manager.partitions
            ]
            return [self.rng.choice(followers)] if followers else []
        raise UnsupportedFaultError(f"unknown target {target!r}")

    # -- the faults -------------------------------------------------------------------------
    # Each applies the fault and returns how to undo it (or None).

    # Broker lifecycle steps hold that broker's lock, so a restart still waiting out its old
    # registration and a later fault on the same broker never overlap.

    def _lock(self, broker_id: int) -> asyncio.Lock:
        return self._locks.setdefault(broker_id, asyncio.Lock())

    async def _start(self, broker_id: int) -> None:
        async with self._lock(broker_id):
            if broker_id in self.crashed:
                self.crashed.discard(broker_id)
                await self.cluster.start_broker(broker_id)

    async def _crash_one(self, broker_id: int, *, lose_unflushed: bool) -> None:
        async with self._lock(broker_id):
            broker = self.cluster.brokers.pop(broker_id, None)
            if broker is None:
                return
            zk = broker.zk
            if isinstance(zk, SimZooKeeperClient):
                zk.disconnect()
            self.cluster.network.crash(broker_node(broker_id))
            await broker.crash(drop_unflushed=lose_unflushed)
            self.crashed.add(broker_id)

    async def _stop_controlled(self, broker_id: int) -> None:
        async with self._lock(broker_id):
            if broker_id in self.cluster.brokers:
                await self.cluster.stop_broker(broker_id)
                self.crashed.add(broker_id)

    def _on_halt(self, broker_id: int) -> None:
        self._event(f"broker {broker_id} halted (log dir failed)")
        task = asyncio.get_running_loop().create_task(
            self._crash_one(broker_id, lose_unflushed=False)
        )
        self._healing.add(task)

    async def _disk_full(self, fault: Fault, targets: list[int]) -> Callable[[], Awaitable[None]]:
        """The targets' disks fill: their next append fails and they halt. Undo: room again,
        and the halted brokers restarted (by their operator)."""
        del fault
        dirs = [d for broker_id in targets for d in self.cluster.log_dirs(broker_id)]
        disk_faults.fill(dirs)

        async def undo() -> None:
            disk_faults.free(dirs)
            for broker_id in targets:
                await self._start(broker_id)

        return undo

    def _restarter(self, targets: list[int]) -> Callable[[], Awaitable[None]]:
        async def restart() -> None:
            for broker_id in targets:
                await self._start(broker_id)

        return restart

    async def _crash(self, fault: Fault, targets: list[int]) -> Callable[[], Awaitable[None]]:
        lose = bool(fault.params.get("lose_unflushed", False))
        for broker_id in targets:
            await self._crash_one(broker_id, lose_unflushed=lose)
        return self._restarter(targets)

    async def _restart(self, fault: Fault, targets: list[int]) -> None:
        """Start brokers that are down (a running one is left alone, as the scenario language
        says and the real-process runner does)."""
        del fault
        for broker_id in targets:
            await self._start(broker_id)

    async def _controlled_shutdown(
        self, fault: Fault, targets: list[int]
    ) -> Callable[[], Awaitable[None]]:
        del fault
        for broker_id in targets:
            await self._stop_controlled(broker_id)
        return self._restarter(targets)

    async def _rolling_restart(self, fault: Fault, targets: list[int]) -> None:
        interval_s = float(fault.params.get("interval_s", 10.0))
        for broker_id in targets:
            await self._stop_controlled(broker_id)
            await self._start(broker_id)
            await asyncio.sleep(interval_s)

    def _zk_of(self, broker_id: int) -> SimZooKeeperClient | None:
        broker = self.cluster.brokers.get(broker_id)
        zk = broker.zk if broker is not None else None
        return zk if isinstance(zk, SimZooKeeperClient) else None

    async def _isolate(self, fault: Fault, targets: list[int]) -> Callable[[], Awaitable[None]]:
        del fault
        for broker_id in targets:
            self.cluster.network.isolate(broker_node(broker_id))
            zk = self._zk_of(broker_id)
            if zk is not None:
                zk.disconnect()

        async def heal() -> None:
            for broker_id in targets:
                self.cluster.network.heal(broker_node(broker_id))
                zk = self._zk_of(broker_id)
                if zk is not None:
                    zk.reconnect()

        return heal

    _pause = _isolate  # see the module doc: what the others see of a paused broker

    async def _isolate_zk(self, fault: Fault, targets: list[int]) -> Callable[[], Awaitable[None]]:
        del fault
        for broker_id in targets:
            zk = self._zk_of(broker_id)
            if zk is not None:
                zk.disconnect()

        async def heal() -> None:
            for broker_id in targets:
                zk = self._zk_of(broker_id)
                if zk is not None:
                    zk.reconnect()

        return heal

    async def _split(self, fault: Fault, targets: list[int]) -> Callable[[], Awaitable[None]]:
        groups_param = fault.params.get("groups")
        if groups_param:
            groups = [{broker_node(int(b)) for b in group} for group in groups_param]
        else:  # the target(s) on one side, every other broker on the other
            rest = [b for b in self.cluster.broker_ids if b not in targets]
            groups = [{broker_node(b) for b in targets}, {broker_node(b) for b in rest}]
        # Clients and ZooKeeper are not part of the split: they reach everyone.
        for broker_group in groups:
            others = [g for g in groups if g is not broker_group]
            for src in sorted(broker_group):
                for other in others:
                    for dst in sorted(other):
                        self.cluster.network.one_way(src, dst)

        async def heal() -> None:
            self.cluster.network.heal_all()

        return heal

    async def _expire_session(self, fault: Fault, targets: list[int]) -> None:
        del fault
        for broker_id in targets:
            zk = self._zk_of(broker_id)
            if zk is not None:
                self.cluster.zk_server.expire_session(zk.session_id)

    async def _slow_network(
        self, fault: Fault, targets: list[int]
    ) -> Callable[[], Awaitable[None]]:
        del targets
        latency = float(fault.params.get("latency_ms", 50.0))
        jitter = float(fault.params.get("jitter_ms", 0.0))
        self.cluster.network.set_latency(latency, jitter)

        async def heal() -> None:
            self.cluster.network.set_latency(*BASE_LATENCY_MS)

        return heal

    async def _clock_jump(self, fault: Fault, targets: list[int]) -> None:
        del targets
        self.cluster.clock.jump_ms(int(float(fault.params.get("seconds", 60)) * 1000))

    # -- the end ----------------------------------------------------------------------------

    def _snapshot_logs(self) -> None:
        topics = {t.name for t in self.scenario.cluster.topics}
        for broker_id in sorted(self.cluster.brokers):
            rm = self.cluster.brokers[broker_id].replica_manager
            for tp in sorted(rm.partitions):
                if tp.topic not in topics:
                    continue
                partition = rm.partitions[tp]
                log = partition.log
                entries = [
                    (record.offset, (record.value or b"").decode(errors="replace"))
                    for _, records in log.batches()
                    for record in records
                ]
                self.history.final_logs[(tp.topic, tp.partition, broker_id)] = entries
                if partition.is_leader:
                    self.history.final_hw[(tp.topic, tp.partition)] = log.high_watermark
