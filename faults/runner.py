"""Run a scenario on a backend: the one schedule driver of every failure run.

``run(scenario, spec, root, seed=...)`` returns the run's ``History``. The same steps on every
backend (the deterministic simulation, processes, containers):

1. Before anything starts, ``check_supported`` refuses, in one line, every fault the backend
   cannot inject (and a real Kafka client as the workload's, where the backend has no Kafka
   listeners); ``real_client.require`` refuses a client whose package is missing.
2. The cluster starts; the topics are created through the controller, each with a leader; the
   workload starts (producers, consumers, the replica sampler).
3. Each fault fires at ``at_s`` seconds after the workload started: its target is resolved
   from what the cluster shows then (``resolve``), it is applied through the backend, and it is
   undone ``duration_s`` later in the background, so that the schedule never slips behind a
   broker that takes its time to come back. Injections run in the background too, one at a
   time in schedule order: a slow one (a controlled shutdown whose requests time out) delays
   the injections after it, never a heal; the heal of a fault still being injected comes as
   soon as its injection ends. The actions are a table keyed by the names of ``ACTIONS``
   (``APPLY``): each applies its fault and returns how to undo it, if it can be.
4. ``rolling_restart`` runs in the background too, on every backend: each running broker in
   turn, lowest id first, gets a controlled shutdown, is started again and waited for until
   it serves; the next begins ``interval_s`` after the previous one began (or as soon as the
   previous serves, if that took longer). Later faults keep their times meanwhile.
5. When the producers stop, every fault still in force is healed (paused brokers resumed,
   links restored, brokers that are down started and waited for), ``settle_s`` passes, the
   final read takes every partition up to its high watermark, and the backend records every
   replica's log.

A broker's lifecycle steps (crash, shutdown, start) hold that broker's lock, so that a restart
still waiting out its old registration and a later fault on the same broker never overlap. A
broker that fails to start (its ZooKeeper unreachable at start-up, as in a ZooKeeper outage)
is down, as a Kafka broker whose start-up failed, and is started again at the next heal.

Everything random comes from the seed (or, for a run without one, the scenario's name), so a
run on the simulation replays byte for byte.

(One module, ~665 lines: the schedule loop, the per-broker lifecycle locks and the action
functions all work on one run's private state (``_Run``); split, the actions would import the
runner and the runner the actions, which the layering test forbids.)
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

from kafkasim.client.simple import MinimalClient
from kafkasim.common.errors import KafkasimError
from kafkasim.faults import link_faults
from kafkasim.faults.actions import ACTIONS
from kafkasim.faults.backend import Backend, BackendSpec, BrokerStartError, check_supported
from kafkasim.faults.history import READ_COMMITTED, FaultEvent, History, ReplicaSample
from kafkasim.faults.real_client import require
from kafkasim.faults.resolve import DEFAULT_TXN_PARTITIONS, ClusterView, resolve, view_needs
from kafkasim.faults.scenario import (
    CLIENT_KAFKASIM,
    Fault,
    Scenario,
    TargetKind,
    session_timeout_s,
)
from kafkasim.faults.workload import Workload

__all__ = ["APPLY", "RunError", "run"]

logger = logging.getLogger(__name__)

Undo = Callable[[], Awaitable[None]]
Apply = Callable[["_Run", Fault, list[int]], Awaitable[Undo | None]]


class RunError(KafkasimError):
    """A run that cannot go on (a broker that never serves again, ...)."""


def run(
    scenario: Scenario,
    spec: BackendSpec,
    root: Path,
    *,
    seed: int | None = None,
    on_event: Callable[[str], None] | None = None,
) -> History:
    """Run ``scenario`` on the backend of ``spec`` under ``root`` (its files); the history.
    ``on_event`` hears one line per phase and per fault as it happens, prefixed with the
    seconds since the run began (virtual ones in the simulation)."""
    check_supported(scenario, spec)
    require(scenario.workload.client)
    backend = spec.create(scenario, seed, root)
    state = _Run(scenario, backend, seed, on_event)
    return backend.run_loop(state.main)


@dataclass
class _Pending:
    due_s: float  # seconds since the workload started
    label: str
    undo: Undo


@dataclass(eq=False)
class _Run:
    scenario: Scenario
    backend: Backend
    seed: int | None
    on_event: Callable[[str], None] | None
    history: History = field(default_factory=History)
    down: set[int] = field(default_factory=set)
    paused: set[int] = field(default_factory=set)
    isolated: set[int] = field(default_factory=set)
    zk_isolated: set[int] = field(default_factory=set)
    _undo: list[_Pending] = field(default_factory=list)
    _background: set[asyncio.Task[None]] = field(default_factory=set)
    _serving: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    _locks: dict[int, asyncio.Lock] = field(default_factory=dict)
    _injecting: list[asyncio.Task[None]] = field(default_factory=list)
    _one_injection: asyncio.Lock = field(default_factory=asyncio.Lock)  # FIFO: schedule order
    _wake: asyncio.Future[None] | None = None  # the schedule loop's sleep, while it sleeps

    def __post_init__(self) -> None:
        s = self.scenario
        self.rng = random.Random(
            f"faults/{self.seed}" if self.seed is not None else f"chaos/{s.name}"
        )
        self.history.meta = {"scenario": s.name, "seed": self.seed, "runtime": self.spec.runtime}
        if s.workload.client != CLIENT_KAFKASIM:
            self.history.meta["client"] = s.workload.client
        self.t0 = 0.0
        self._workload_started = False

    @property
    def spec(self) -> BackendSpec:
        return self.backend.spec

    # -- the run ------------------------------------------------------------------------------

    async def main(self) -> History:
        s, backend = self.scenario, self.backend
        self.began_ms = backend.clock.monotonic_ms()
        self.start_ms = self.began_ms  # the workload's start, set when it starts
        self.event(f"starting ZooKeeper and {s.cluster.brokers} brokers ({self.spec.runtime})")
        workload: Workload | None = None
        try:
            await backend.start()
            backend.set_on_halt(self._on_halt)
            self.event(
                f"cluster up: brokers {', '.join(map(str, backend.broker_ids))} serving, "
                + backend.describe()
            )
            admin = MinimalClient(backend.transport_for("setup"), backend.bootstrap, backend.clock)
            for topic in s.cluster.topics:
                configs = {"min.insync.replicas": str(topic.min_insync_replicas), **topic.configs}
                await admin.create_topic(
                    topic.name, topic.partitions, topic.replication_factor, configs
                )
                await admin.wait_for_leaders(topic.name, topic.partitions)
            self.event("topics created: " + ", ".join(_describe_topics(s)))
            self.start_ms = backend.clock.monotonic_ms()
            self.t0 = asyncio.get_running_loop().time()
            self._workload_started = True
            workload = Workload(
                scenario=s,
                history=self.history,
                clock=backend.clock,
                transport_for=backend.transport_for,
                bootstrap=backend.bootstrap,
                start_ms=self.start_ms,
                broker_addresses=self._answering_addresses,
                kafka_bootstrap=backend.kafka_bootstrap,
            )
            workload.start()
            by = "" if s.workload.client == CLIENT_KAFKASIM else f", by {s.workload.client}"
            self.event(
                f"workload started ({len(s.workload.producers)} producers, "
                f"{len(s.workload.consumers)} consumers{_transactional(s)}{by}, "
                f"{s.workload.duration_s:g} s); "
                "times count from here, as in the history and the report"
            )
            await self._run_faults(s.workload.duration_s)
            await workload.stop_producers()
            self.event("producers stopped; healing every fault")
            await self._heal_everything()
            self.event(f"settling for {s.workload.settle_s:g} s")
            await asyncio.sleep(s.workload.settle_s)
            self.event("final read")
            await workload.final_read()
            reads = sum(1 for op in self.history.ops if op.process == "final-reader")
            self.event(f"final read done ({reads} records)")
            await workload.stop()
            workload = None
            self.event("stopping the cluster")
            for note in await backend.finish(self.history):
                self.event(note)
            records = sum(len(entries) for entries in self.history.final_logs.values())
            markers = sum(len(found) for found in self.history.final_markers.values())
            self.event(
                f"final logs read: {len(self.history.final_logs)} replicas, {records} records"
                + (f", {markers} transaction markers" if markers else "")
            )
        finally:
            if workload is not None:
                await workload.stop()
            waiting = [*self._injecting, *self._serving.values(), *self._background]
            for task in waiting:
                task.cancel()
            # Retrieved here: the run is ending on another error, if any, which matters more.
            await asyncio.gather(*waiting, return_exceptions=True)
            await backend.close()
        return self.history

    def event(self, text: str) -> None:
        """A line of the run's narration. Its time counts from the workload's start, as the
        history's and the report's do (one origin); what happens before (the cluster's start,
        the topics) is marked ``setup``."""
        logger.info("%s", text)
        if self.on_event is not None:
            if not self._workload_started:
                self.on_event(f"  setup    {text}")
                return
            elapsed_s = self.now_ms() / 1000
            self.on_event(f"{elapsed_s:7.1f} s  {text}")

    def now_ms(self) -> int:
        """Milliseconds since the workload started (the history's time)."""
        return self.backend.clock.monotonic_ms() - self.start_ms

    def _elapsed_s(self) -> float:
        return asyncio.get_running_loop().time() - self.t0

    def _in_background(self, work: Awaitable[None], name: str) -> None:
        async def step() -> None:
            await work

        task = asyncio.get_running_loop().create_task(step(), name=name)
        self._background.add(task)

    def _running(self) -> list[int]:
        return [b for b in self.backend.broker_ids if self.backend.running(b)]

    def _answering(self) -> list[int]:
        """Brokers that can answer now: running, neither paused nor cut off."""
        cut = self.paused | self.isolated
        return [b for b in self._running() if b not in cut]

    def _answering_addresses(self) -> list[str]:
        return [self.backend.address(b) for b in self._answering()]

    # -- the schedule -------------------------------------------------------------------------

    async def _run_faults(self, duration_s: float) -> None:
        """Start each fault's injection when it falls due and each heal when its window ends,
        until ``duration_s``. Injections run in the background one at a time (``_injected``),
        so that one that takes long holds back the injections after it but no heal; the loop
        wakes when an injection ends, to heal at once a fault whose window ended meanwhile."""
        pending = sorted(self.scenario.faults, key=lambda f: f.at_s)
        loop = asyncio.get_running_loop()
        while True:
            for task in [t for t in self._injecting if t.done()]:
                self._injecting.remove(task)
                task.result()  # a failed injection ends the run, as soon as it fails
            for item in [u for u in self._undo if u.due_s <= self._elapsed_s()]:
                self._undo.remove(item)
                self._in_background(self._heal(item), f"heal {item.label}")
            while pending and pending[0].at_s <= self._elapsed_s():
                fault = pending.pop(0)
                self._injecting.append(
                    loop.create_task(self._injected(fault), name=f"inject {fault.action}")
                )
            now = self._elapsed_s()
            if now >= duration_s:
                return
            upcoming = [duration_s, *(f.at_s for f in pending), *(u.due_s for u in self._undo)]
            await self._sleep(max(min(upcoming) - now, 0.01))

    async def _sleep(self, delay_s: float) -> None:
        """``asyncio.sleep(delay_s)`` (the same steps of the loop, so that the simulation's runs
        do not move), which the end of an injection cuts short."""
        loop = asyncio.get_running_loop()
        self._wake = loop.create_future()
        timer = loop.call_later(delay_s, _wake_up, self._wake)
        try:
            await self._wake
        finally:
            timer.cancel()
            self._wake = None

    async def _injected(self, fault: Fault) -> None:
        """Inject ``fault`` once every injection scheduled before it has ended (asyncio's lock
        serves its waiters in order), then wake the schedule loop."""
        try:
            async with self._one_injection:
                await self._inject(fault)
        finally:
            if self._wake is not None:
                _wake_up(self._wake)

    async def _inject(self, fault: Fault) -> None:
        targets = resolve(fault, await self._view(fault), self.rng)
        label = f"{fault.target or 'cluster'} → " + ",".join(map(str, targets))
        start = self.now_ms()
        end = None if fault.duration_s is None else start + int(fault.duration_s * 1000)
        self.history.faults.append(FaultEvent(start, fault.action, label, end))
        if not targets:
            self.event(f"{fault.action} {fault.target}: no live broker to apply it to, skipped")
            return
        until = "" if fault.duration_s is None else f" for {fault.duration_s:g} s"
        self.event(f"{fault.action} {label}{until}")
        injected_s = self._elapsed_s()
        undo = await APPLY[fault.action](self, fault, targets)
        if undo is not None and fault.duration_s is not None:
            # The window the history records (start + duration), however long applying took.
            due_s = injected_s + fault.duration_s
            self._undo.append(_Pending(due_s, f"{fault.action} {label}", undo))

    async def _heal(self, item: _Pending) -> None:
        # Said when the heal is applied (its window's end); a restarted broker then says
        # when it serves again.
        self.event("healed: " + item.label)
        await item.undo()

    async def _heal_everything(self) -> None:
        injecting, self._injecting = self._injecting, []
        for task in injecting:  # injections still under way (or queued) end first
            await task
        while self._background:  # heals and rolling restarts under way, and what they start
            done = list(self._background)
            self._background.clear()
            for outcome in await asyncio.gather(*done, return_exceptions=True):
                if isinstance(outcome, BaseException):
                    raise outcome
        for item in sorted(self._undo, key=lambda u: u.due_s):
            await self._heal(item)
        self._undo.clear()
        for broker_id in sorted(self.paused):
            await self._resume(broker_id)
        for broker_id in sorted(self.isolated):
            await self._reconnect(broker_id)
        for broker_id in sorted(self.zk_isolated):
            await self._reconnect_zk(broker_id)
        await self.backend.heal_network()
        await self.backend.refresh()
        for broker_id in self.backend.broker_ids:
            if broker_id not in self.down and not self.backend.running(broker_id):
                self.event(
                    f"broker {broker_id} had exited by itself "
                    f"({self.backend.exit_note(broker_id)}); starting it again"
                )
                self.down.add(broker_id)
        for broker_id in sorted(self.down):
            await self._start(broker_id)
        for broker_id in sorted(self._serving):
            await self._serving[broker_id]

    # -- targets ------------------------------------------------------------------------------

    async def _view(self, fault: Fault) -> ClusterView:
        kind = view_needs(fault)
        await self.backend.refresh()
        controller = -1
        replicas: tuple[ReplicaSample, ...] = ()
        if kind is TargetKind.CONTROLLER:
            controller = await self.backend.controller_id()
        elif kind in (TargetKind.LEADER, TargetKind.FOLLOWER, TargetKind.TXN_COORDINATOR):
            replicas = await self.backend.describe_replicas(self._answering())
        running = tuple(b for b in self._running() if b not in self.down)
        txn_partitions = int(
            self.scenario.cluster.broker_config.get(
                "transaction.state.log.num.partitions", DEFAULT_TXN_PARTITIONS
            )
        )
        return ClusterView(running, tuple(sorted(self.down)), controller, replicas, txn_partitions)

    # -- broker lifecycle ---------------------------------------------------------------------

    def _lock(self, broker_id: int) -> asyncio.Lock:
        return self._locks.setdefault(broker_id, asyncio.Lock())

    async def _kill(
        self, broker_id: int, sig: signal.Signals, *, lose_unflushed: bool, torn: bool = False
    ) -> None:
        """SIGKILL: a crash (``torn``: a power cut tearing the last write); SIGTERM: a
        controlled shutdown."""
        async with self._lock(broker_id):
            if broker_id in self.down or not self.backend.running(broker_id):
                return
            serving = self._serving.pop(broker_id, None)
            if serving is not None:
                _forget(serving)  # a start that went wrong no longer matters: it goes down now
            if sig == signal.SIGKILL:
                self.paused.discard(broker_id)  # dies where it stands, without running again
                if torn:
                    await self.backend.crash_torn(broker_id)
                else:
                    await self.backend.crash(broker_id, lose_unflushed=lose_unflushed)
            else:
                await self._resume(broker_id)  # a stopped process holds SIGTERM until it runs
                await self.backend.shutdown(broker_id)
            self.down.add(broker_id)

    async def _start(self, broker_id: int) -> None:
        """Start the broker if it is down; a background task waits until it serves."""
        async with self._lock(broker_id):
            if broker_id not in self.down and self.backend.running(broker_id):
                return
            try:
                await self.backend.start_broker(broker_id)
            except BrokerStartError as e:
                self.down.add(broker_id)
                self.event(f"broker {broker_id} did not start ({e}); it stays down for now")
                return
            self.down.discard(broker_id)
            self._serving[broker_id] = asyncio.get_running_loop().create_task(
                self._wait_serving(broker_id), name=f"serving-{broker_id}"
            )

    async def _wait_serving(self, broker_id: int) -> None:
        clock = self.backend.clock
        started = clock.monotonic_ms()
        limit_s = session_timeout_s(self.scenario) + self.spec.serving_grace_s
        while not await self.backend.serving_again(broker_id):
            waited_s = (clock.monotonic_ms() - started) / 1000
            if not self.backend.running(broker_id):
                raise RunError(
                    f"broker {broker_id} exited while starting "
                    f"({self.backend.exit_note(broker_id)})"
                )
            if waited_s > limit_s:
                raise RunError(
                    f"broker {broker_id} not serving {limit_s:g} s after its start "
                    f"({self.backend.exit_note(broker_id)})"
                )
            await asyncio.sleep(self.spec.serving_poll_s)
        waited_s = (clock.monotonic_ms() - started) / 1000
        self.event(f"broker {broker_id} serving again ({waited_s:.1f} s after its start)")

    def _on_halt(self, broker_id: int) -> None:
        self.event(f"broker {broker_id} halted (log dir failed)")
        self._in_background(
            self._kill(broker_id, signal.SIGKILL, lose_unflushed=False), f"halt {broker_id}"
        )

    async def _pause_one(self, broker_id: int) -> None:
        if self.backend.running(broker_id) and broker_id not in self.down | self.paused:
            await self.backend.pause(broker_id)
            self.paused.add(broker_id)

    async def _resume(self, broker_id: int) -> None:
        if broker_id in self.paused:
            self.paused.discard(broker_id)
            await self.backend.resume(broker_id)

    async def _isolate_one(self, broker_id: int) -> None:
        if broker_id not in self.isolated and self.backend.running(broker_id):
            await self.backend.isolate(broker_id)
            self.isolated.add(broker_id)

    async def _reconnect(self, broker_id: int) -> None:
        if broker_id in self.isolated:
            self.isolated.discard(broker_id)
            await self.backend.reconnect(broker_id)

    async def _isolate_zk_one(self, broker_id: int) -> None:
        if broker_id not in self.zk_isolated and self.backend.running(broker_id):
            await self.backend.isolate_zk(broker_id)
            self.zk_isolated.add(broker_id)

    async def _reconnect_zk(self, broker_id: int) -> None:
        if broker_id in self.zk_isolated:
            self.zk_isolated.discard(broker_id)
            await self.backend.reconnect_zk(broker_id)

    def _restarter(self, targets: list[int]) -> Undo:
        async def restart() -> None:
            for broker_id in targets:
                await self._start(broker_id)

        return restart

    def _each(self, step: Callable[[int], Awaitable[None]], targets: list[int]) -> Undo:
        async def undo() -> None:
            for broker_id in targets:
                await step(broker_id)

        return undo


# -- the actions ---------------------------------------------------------------------------------
# Each applies its fault to the resolved targets and returns how to undo it (or None).


async def _crash(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    lose = bool(fault.params.get("lose_unflushed", False))
    for broker_id in targets:
        await run._kill(broker_id, signal.SIGKILL, lose_unflushed=lose)
    return run._restarter(targets)


async def _torn_write(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    del fault
    for broker_id in targets:
        await run._kill(broker_id, signal.SIGKILL, lose_unflushed=False, torn=True)
    return run._restarter(targets)


async def _restart(run: _Run, fault: Fault, targets: list[int]) -> None:
    del fault  # a broker that runs is left alone (ACTIONS["restart"])
    await run._restarter(targets)()


async def _controlled_shutdown(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    del fault
    for broker_id in targets:
        await run._kill(broker_id, signal.SIGTERM, lose_unflushed=False)
    return run._restarter(targets)


async def _pause(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    del fault
    for broker_id in targets:
        await run._pause_one(broker_id)
    return run._each(run._resume, targets)


async def _isolate(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    del fault
    for broker_id in targets:
        await run._isolate_one(broker_id)
    return run._each(run._reconnect, targets)


async def _isolate_zk(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    del fault
    for broker_id in targets:
        await run._isolate_zk_one(broker_id)
    return run._each(run._reconnect_zk, targets)


async def _split(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    groups_param = fault.params.get("groups")
    if groups_param:
        groups = [[int(b) for b in group] for group in groups_param]
    else:  # the target(s) on one side, every other broker on the other
        groups = [list(targets), [b for b in run.backend.broker_ids if b not in targets]]
    await run.backend.split(groups)
    return run.backend.heal_split


async def _expire_session(run: _Run, fault: Fault, targets: list[int]) -> None:
    del fault
    for broker_id in targets:
        await run.backend.expire_session(broker_id)


async def _slow_network(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    latency = float(fault.params.get("latency_ms", 50.0))
    jitter = float(fault.params.get("jitter_ms", 0.0))
    await run.backend.slow_network(targets, latency, jitter)
    return run.backend.normal_network


async def _clock_jump(run: _Run, fault: Fault, targets: list[int]) -> None:
    await run.backend.clock_jump(targets, float(fault.params["seconds"]))


async def _disk_full(run: _Run, fault: Fault, targets: list[int]) -> Undo:
    """The targets' disks fill: their next append fails and they halt. Undo: room again, and
    the halted brokers started again (by their operator)."""
    del fault
    for broker_id in targets:
        await run.backend.fill_disk(broker_id)

    async def undo() -> None:
        for broker_id in targets:
            await run.backend.free_disk(broker_id)
            await run._start(broker_id)

    return undo


async def _rolling_restart(run: _Run, fault: Fault, targets: list[int]) -> None:
    run._in_background(_restart_in_turn(run, targets, float(fault.params["interval_s"])), "roll")


async def _restart_in_turn(run: _Run, targets: list[int], interval_s: float) -> None:
    loop = asyncio.get_running_loop()
    for broker_id in targets:
        began = loop.time()
        await run._kill(broker_id, signal.SIGTERM, lose_unflushed=False)
        run.event(f"rolling restart: broker {broker_id} shut down")
        await run._start(broker_id)
        serving = run._serving.get(broker_id)
        if serving is not None:
            await serving
        await asyncio.sleep(max(began + interval_s - loop.time(), 0.0))


APPLY: Final[Mapping[str, Apply]] = MappingProxyType(
    {
        "crash": _crash,
        "restart": _restart,
        "pause": _pause,
        "isolate": _isolate,
        "split": _split,
        "isolate_zk": _isolate_zk,
        "expire_session": _expire_session,
        "slow_network": _slow_network,
        "disk_full": _disk_full,
        "clock_jump": _clock_jump,
        "rolling_restart": _rolling_restart,
        "controlled_shutdown": _controlled_shutdown,
        "partition_one_way": link_faults.partition_one_way,
        "slow_one_way": link_faults.slow_one_way,
        "clock_drift": link_faults.clock_drift,
        "torn_write": _torn_write,
        "slow_disk": link_faults.slow_disk,
    }
)
"""How the runner applies each action of ``ACTIONS`` (every one, and no other)."""
assert set(APPLY) == set(ACTIONS), "faults.runner: an action without a way to apply it"


# -- helpers -------------------------------------------------------------------------------------


def _transactional(s: Scenario) -> str:
    """What of the workload is transactional, for the start line ("" for none)."""
    w = s.workload
    if not w.transactional:
        return ""
    producers = sum(p.transactional for p in w.producers)
    committed = sum(c.isolation == READ_COMMITTED for c in w.consumers)
    return (
        f", {len(w.transformers)} transformers; {producers} transactional producers, "
        f"{committed} read_committed consumers"
    )


def _describe_topics(s: Scenario) -> list[str]:
    return [
        f"{t.name} ({t.partitions} partitions, RF {t.replication_factor}, "
        f"min ISR {t.min_insync_replicas})"
        for t in s.cluster.topics
    ]


def _wake_up(sleeping: asyncio.Future[None]) -> None:
    if not sleeping.done():
        sleeping.set_result(None)


def _forget(task: asyncio.Task[None]) -> None:
    """Cancel a background task, or take its outcome if it has one (so that asyncio does not
    report an exception nobody retrieved)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()
