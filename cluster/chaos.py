"""Run a scenario against real processes: a ``LocalCluster`` (Debian's ZooKeeper and N
``kafkasim broker`` processes on loopback), the same workload, fault schedule and history as
the deterministic simulation (``sim.runner``), so that one checker judges both.

Theory of operation
-------------------
1. Before anything starts, ``check_supported`` names every fault of the scenario that cannot be
   injected into processes on one loopback interface, and why (``NOT_INJECTABLE``): the run is
   refused with ``sim.runner.UnsupportedFaultError``, one line.
2. Set-up: ZooKeeper and the brokers (``broker_props``: the scenario's cluster settings), the
   topics created through the controller (``MinimalClient`` over gRPC), a leader for every
   partition. Then ``sim.workload.Workload`` runs unchanged, on ``GrpcTransport`` and the
   wall clock (``SystemClock``).
3. Faults fire on the wall clock with the simulation's schedule: each at ``at_s`` seconds after
   the workload started, undone ``duration_s`` later; when the producers stop, every fault
   still in force is healed (paused brokers resumed, stopped ones started and waited for),
   ``settle_s`` passes, and the final read takes every partition up to its high watermark.
4. A target is resolved when its fault fires (``resolve``, pure) from what the live brokers
   report over gRPC (DescribeReplicas: who leads, the ISR, the assigned replicas) and from
   ZooKeeper (``/controller``); ``random`` draws from a ``random.Random`` seeded by the
   scenario's name. A target that resolves to no live broker skips the fault; the history
   records that it did (a fault window naming no broker).
5. The end: the whole cluster stops cleanly (SIGTERM, a controlled shutdown each), then every
   broker's partition directories of the scenario's topics are read from disk — segments in
   base-offset order, every batch's CRC checked — into ``history.final_logs``;
   ``history.final_hw`` is the high watermark of the last leader sample (the HW checkpoint
   files when there is none).

How faults map onto processes (``INJECTABLE``): ``crash`` is SIGKILL, ``restart`` starts a
broker that is down (one that runs is left alone), ``pause`` is SIGSTOP then SIGCONT,
``controlled_shutdown`` is SIGTERM (the broker's controlled shutdown) and a wait for the exit,
``rolling_restart`` does that and a start for each broker in turn, ``interval_s`` apart.

A restarted broker serves only once its previous ZooKeeper registration is gone (up to
``zookeeper.session.timeout.ms`` after a kill -9), so the run waits for it in the background;
the schedule does not slip behind it.

Everything started here is stopped here, by pid (``LocalCluster.stop`` in a ``finally``).

Backends
--------
``_Run`` reaches the cluster only through ``ChaosBackend`` (start/stop, addresses, kill with a
signal, start, pause/resume, isolate/reconnect, "serving again", the controller, each broker's
log directory on the host). What a backend can inject is known before anything starts, from
its ``BackendSpec`` (``LOCAL`` here: ``LocalBackend`` over ``LocalCluster``; ``COMPOSE`` in
``cluster.compose``: the containers of compose/docker-compose.yml). ``run(..., spec=...)``
picks one; ``check_supported(scenario, spec)`` refuses, in one line naming the spec's runtime,
every fault it cannot inject and a cluster it cannot run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final, Protocol

from kafkasim import proto
from kafkasim.client.minimal import MinimalClient
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.coordination import NoNodeError
from kafkasim.common.errors import KafkaError, KafkasimError
from kafkasim.common.rpc import RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.node.rpc_grpc import GrpcTransport
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.faults.history import FaultEvent, History, ReplicaSample
from kafkasim.faults.runner import UnsupportedFaultError
from kafkasim.faults.scenario import ACTIONS, Fault, Scenario, TargetKind, parse_target
from kafkasim.faults.workload import Workload
from kafkasim.storage import file_names
from kafkasim.storage.checkpoints import REPLICATION_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from kafkasim.storage.records.batch import decode_batch, iter_batches

__all__ = [
    "INJECTABLE",
    "LOCAL",
    "NOT_INJECTABLE",
    "RUNTIME",
    "BackendSpec",
    "ChaosBackend",
    "ChaosError",
    "ClusterView",
    "LocalBackend",
    "UnsupportedFaultError",
    "broker_props",
    "check_supported",
    "read_replica_log",
    "resolve",
    "run",
    "unsupported_faults",
]

logger = logging.getLogger(__name__)

RUNTIME: Final = "local processes"

INJECTABLE: Final = frozenset(
    {"crash", "restart", "pause", "controlled_shutdown", "rolling_restart"}
)

_NO_NETNS: Final = (
    "processes on one loopback interface share one network: cutting links needs network "
    "namespaces or iptables, which this runner does not set up"
)
NOT_INJECTABLE: Final[Mapping[str, str]] = MappingProxyType(
    {
        "isolate": _NO_NETNS,
        "split": _NO_NETNS,
        "isolate_zk": _NO_NETNS,
        "slow_network": "delaying loopback traffic needs tc netem (root), which this runner "
        "does not use",
        "expire_session": "a broker's ZooKeeper session id and password never leave its process",
        "disk_full": "a full disk needs a size-limited filesystem mounted under each log dir",
        "clock_jump": "stepping one process's wall clock needs libfaketime or a time namespace",
    }
)
"""Every action this runner cannot inject, with the reason (one clause)."""

LOSE_UNFLUSHED_REASON: Final = (
    "losing unflushed data needs a power cut: after kill -9 the page cache still holds every write"
)

# A restarted broker may wait out its old ZooKeeper registration (up to the session timeout)
# before it serves; beyond that, this much longer means it is not coming back.
_SERVING_GRACE_S: Final = 60.0
_SERVING_POLL_S: Final = 0.1
_DESCRIBE_TIMEOUT_S: Final = 2.0
ZK_SESSION_TIMEOUT_MS_DEFAULT: Final = 6000  # LocalCluster's default for the brokers


class ChaosError(KafkasimError):
    """A real run that cannot go on (a directory in the way, a broker that never serves)."""


# -- backends -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """What a backend is and can do, known before anything starts. ``name``: its
    ``--backend`` value; ``runtime``: what it runs on, in messages and the history's meta;
    ``injectable`` / ``not_injectable``: every action of ``sim.scenario.ACTIONS`` on one side,
    the refused ones with a reason (one clause); ``lose_unflushed``: why a crash that loses
    unflushed data is refused; ``brokers``: the only broker count it runs (None: any);
    ``serving_grace_s``: how much longer than the ZooKeeper session timeout a started broker
    may take to serve; ``create``: the backend for a scenario under a run directory."""

    name: str
    runtime: str
    injectable: frozenset[str]
    not_injectable: Mapping[str, str]
    lose_unflushed: str
    create: Callable[[Scenario, Path], ChaosBackend]
    brokers: int | None = None
    brokers_reason: str = ""
    serving_grace_s: float = _SERVING_GRACE_S
    serving_poll_s: float = _SERVING_POLL_S

    def __post_init__(self) -> None:
        if self.injectable | set(self.not_injectable) != set(ACTIONS) or (
            self.injectable & set(self.not_injectable)
        ):
            raise ValueError(f"backend {self.name}: every action injectable or refused, once")


class ChaosBackend(Protocol):
    """What ``_Run`` needs from a cluster. Blocking methods are called from a worker thread
    (``asyncio.to_thread``) while the workload runs, except the cheap ones (``running``,
    ``address``, ``bootstrap``, ``broker_ids``)."""

    @property
    def spec(self) -> BackendSpec: ...

    @property
    def broker_ids(self) -> tuple[int, ...]: ...

    @property
    def bootstrap(self) -> list[str]: ...

    def start(self) -> None:
        """Start ZooKeeper and every broker, until all serve."""

    def describe(self) -> str:
        """Where the cluster is, for the "cluster up" line."""

    def stop(self) -> None:
        """Stop every broker cleanly (a controlled shutdown each) and ZooKeeper; their data
        stays readable through ``log_dir``. Idempotent."""

    def close(self) -> None:
        """Release everything the backend started (after ``stop``, or on an error)."""

    def running(self, broker_id: int) -> bool:
        """Alive (paused too), as the backend last knew it (cheap: no engine call)."""

    def refresh(self) -> None:
        """Learn again which brokers run (one may have exited by itself)."""

    def address(self, broker_id: int) -> str:
        """The broker's listener as clients of the run reach it."""

    def kill(self, broker_id: int, sig: signal.Signals) -> None:
        """SIGKILL: a crash; SIGTERM: a controlled shutdown. Returns once it exited."""

    def start_broker(self, broker_id: int) -> None:
        """Start a broker that is down."""

    def serving_again(self, broker_id: int) -> bool:
        """Whether the broker serves since its last ``start_broker``."""

    def exit_note(self, broker_id: int) -> str:
        """Its exit status and where its log is, for messages."""

    def pause(self, broker_id: int) -> None: ...

    def resume(self, broker_id: int) -> None: ...

    def isolate(self, broker_id: int) -> None:
        """Cut the broker off its peers and ZooKeeper (where ``isolate`` is injectable)."""

    def reconnect(self, broker_id: int) -> None:
        """Undo ``isolate``."""

    async def controller_id(self) -> int:
        """The active controller (-1: none right now)."""

    def log_dir(self, broker_id: int) -> Path | None:
        """The broker's log directory on this host, after ``stop`` (None: unreadable)."""


class LocalBackend:
    """``LocalCluster``: ZooKeeper and broker processes on loopback, faults by signal."""

    def __init__(self, scenario: Scenario, root: Path) -> None:
        self.scenario = scenario
        self.root = root
        self._cluster: LocalCluster | None = None
        self._marks: dict[int, int] = {}

    @property
    def spec(self) -> BackendSpec:
        return LOCAL

    @property
    def cluster(self) -> LocalCluster:
        if self._cluster is None:
            self._cluster = LocalCluster(
                self.root,
                brokers=self.scenario.cluster.brokers,
                broker_props=broker_props(self.scenario),
            )
        return self._cluster

    @property
    def broker_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self.cluster.brokers))

    @property
    def bootstrap(self) -> list[str]:
        return self.cluster.bootstrap

    def start(self) -> None:
        self.cluster.start()

    def describe(self) -> str:
        return f"ZooKeeper at {self.cluster.zookeeper.connect_string}"

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.stop()

    def close(self) -> None:
        self.stop()

    def running(self, broker_id: int) -> bool:
        return self.cluster.brokers[broker_id].running

    def refresh(self) -> None:
        pass  # running() asks the process itself

    def address(self, broker_id: int) -> str:
        return self.cluster.brokers[broker_id].address

    def kill(self, broker_id: int, sig: signal.Signals) -> None:
        self.cluster.kill(broker_id, sig)

    def start_broker(self, broker_id: int) -> None:
        broker = self.cluster.brokers[broker_id]
        self._marks[broker_id] = _serving_marks(broker.log_path, broker_id)
        self.cluster.start_broker(broker_id)

    def serving_again(self, broker_id: int) -> bool:
        broker = self.cluster.brokers[broker_id]
        return _serving_marks(broker.log_path, broker_id) > self._marks.get(broker_id, 0)

    def exit_note(self, broker_id: int) -> str:
        broker = self.cluster.brokers[broker_id]
        status = broker.process.returncode if broker.process is not None else None
        return f"status {status}; log: {broker.log_path}"

    def pause(self, broker_id: int) -> None:
        self.cluster.pause(broker_id)

    def resume(self, broker_id: int) -> None:
        self.cluster.resume(broker_id)

    def isolate(self, broker_id: int) -> None:
        raise ChaosError(f"{RUNTIME} cannot isolate broker {broker_id}: {_NO_NETNS}")

    def reconnect(self, broker_id: int) -> None:
        raise ChaosError(f"{RUNTIME} cannot isolate broker {broker_id}: {_NO_NETNS}")

    async def controller_id(self) -> int:
        zk = KazooCoordination(self.cluster.zookeeper.connect_string, 6000)
        await zk.start()
        try:
            data, _ = await zk.get(zk_data.CONTROLLER)
            return zk_data.decode_controller(data)
        except NoNodeError:
            return -1
        finally:
            await zk.close()

    def log_dir(self, broker_id: int) -> Path:
        return self.cluster.brokers[broker_id].data_dir / "logs"


LOCAL: Final = BackendSpec(
    name="local",
    runtime=RUNTIME,
    injectable=INJECTABLE,
    not_injectable=NOT_INJECTABLE,
    lose_unflushed=LOSE_UNFLUSHED_REASON,
    create=LocalBackend,
)
"""Local processes (``LocalBackend``): the default."""


# -- what can be injected ----------------------------------------------------------------------


def unsupported_faults(scenario: Scenario, spec: BackendSpec = LOCAL) -> list[str]:
    """One clause per kind of fault of ``scenario`` the backend of ``spec`` cannot inject:
    what (with the indexes in ``faults``) and why. Empty when every fault can be injected."""
    where: dict[str, list[int]] = {}
    reasons: dict[str, str] = {}
    for i, fault in enumerate(scenario.faults):
        if fault.action in spec.not_injectable:
            what = fault.action
            reasons[what] = spec.not_injectable[fault.action]
        elif fault.action == "crash" and fault.params.get("lose_unflushed", False):
            what = "crash with lose_unflushed"
            reasons[what] = spec.lose_unflushed
        elif fault.action in spec.injectable:
            continue
        else:  # a scenario that loaded names only known actions; guard a hand-made value
            what = fault.action
            reasons[what] = "not an action this runner knows"
        where.setdefault(what, []).append(i)
    clauses = []
    for what, indexes in where.items():
        listed = ", ".join(f"faults[{i}]" for i in indexes)
        clauses.append(f"{what} ({listed}): {reasons[what]}")
    return clauses


def check_supported(scenario: Scenario, spec: BackendSpec = LOCAL) -> None:
    """UnsupportedFaultError, one line naming ``spec``'s runtime, every fault it cannot inject
    and why (and the broker count, for a backend that runs only one)."""
    parts = []
    if spec.brokers is not None and scenario.cluster.brokers != spec.brokers:
        parts.append(f"run cluster.brokers = {scenario.cluster.brokers}: {spec.brokers_reason}")
    clauses = unsupported_faults(scenario, spec)
    if clauses:
        parts.append("inject " + "; ".join(clauses))
    if parts:
        raise UnsupportedFaultError(
            f"scenario {scenario.name}: {spec.runtime} cannot " + "; ".join(parts)
        )


def broker_props(scenario: Scenario) -> dict[str, object]:
    """The server.properties every broker of the run gets on top of LocalCluster's own
    (ids, listeners, log dirs, ZooKeeper): the same settings as the simulation's brokers."""
    return {
        "unclean.leader.election.enable": scenario.cluster.unclean_leader_election,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": False,
        **scenario.cluster.broker_config,
    }


def _session_timeout_s(scenario: Scenario) -> float:
    raw = scenario.cluster.broker_config.get(
        "zookeeper.session.timeout.ms", ZK_SESSION_TIMEOUT_MS_DEFAULT
    )
    return int(raw) / 1000


# -- targets ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What resolving a target needs, gathered when its fault fires. ``running``: brokers
    whose process is alive (paused ones too); ``down``: crashed or shut down; ``controller``:
    the id in ``/controller`` (-1: none); ``replicas``: what the brokers that answered report
    of their replicas (a paused broker does not answer)."""

    running: tuple[int, ...]
    down: tuple[int, ...] = ()
    controller: int = -1
    replicas: tuple[ReplicaSample, ...] = ()


def resolve(fault: Fault, view: ClusterView, rng: random.Random) -> list[int]:
    """The broker ids ``fault`` applies to now; [] skips it. Pure (``rng`` aside).

    ``leader:T-P`` is the leader named by the report with the highest leader epoch (a deposed
    leader that has not heard yet reports a lower one); ``follower:T-P`` one of the live
    assigned replicas other than that leader, an in-sync one if any."""
    target = fault.target
    running = sorted(view.running)
    if fault.action == "restart" and target in ("", "all"):
        return sorted(view.down)
    if target in ("", "all"):
        return running
    parsed = parse_target(target)
    if parsed.kind is TargetKind.BROKER:
        assert parsed.broker_id is not None
        return [parsed.broker_id]
    if parsed.kind is TargetKind.CONTROLLER:
        return [view.controller] if view.controller in running else []
    if parsed.kind is TargetKind.RANDOM:
        return [rng.choice(running)] if running else []
    states = [
        r
        for r in view.replicas
        if (r.topic, r.partition) == (parsed.topic, parsed.partition) and r.broker in running
    ]
    # Highest epoch first; at one epoch the leader's own report (it knows the ISR best).
    states.sort(key=lambda r: (r.leader_epoch, r.is_leader and r.leader == r.broker), reverse=True)
    best = states[0] if states else None
    leader = best.leader if best is not None and best.leader >= 0 else None
    if parsed.kind is TargetKind.LEADER:
        return [leader] if leader is not None and leader in running else []
    assigned = set(best.replicas) if best is not None else set()
    hosting = assigned | {r.broker for r in states}
    followers = sorted(b for b in hosting if b in running and b != leader)
    in_sync = [b for b in followers if best is not None and b in best.isr]
    pool = in_sync or followers
    return [rng.choice(pool)] if pool else []


# -- final logs ---------------------------------------------------------------------------------


def read_replica_log(partition_dir: Path) -> tuple[list[tuple[int, str]], str | None]:
    """Every record of one replica's log on disk, ``(offset, value as text)``, segments in
    base-offset order, each batch's CRC checked. Reading stops at the first batch that does
    not check; the second item then says where and why (None when the whole log is sound).
    A zero-filled tail (a preallocated segment) ends a segment quietly."""
    entries: list[tuple[int, str]] = []
    segments = sorted(
        (file_names.offset_from_file_name(p.name), p)
        for p in partition_dir.glob("*" + file_names.LOG_SUFFIX)
    )
    for _, path in segments:
        data = path.read_bytes()
        position = 0  # the end of the last batch read whole
        try:
            for start, header in iter_batches(data):
                _, records = decode_batch(data, start, verify_crc=True)
                entries.extend(
                    (r.offset, (r.value or b"").decode(errors="replace")) for r in records
                )
                position = start + header.size_in_bytes
        except KafkaError as e:
            if not any(data[position:]):
                continue
            return entries, f"{path}: {e}"
    return entries, None


# -- the run ------------------------------------------------------------------------------------


def run(
    scenario: Scenario,
    root: Path,
    *,
    on_event: Callable[[str], None] | None = None,
    spec: BackendSpec = LOCAL,
) -> History:
    """Run ``scenario`` on ``spec``'s backend (default: local processes) under ``root`` (a
    new or empty directory, left in place: broker logs, data, ZooKeeper, the compose
    override); the history. ``on_event`` hears one line per phase and per fault as it
    happens, prefixed with the wall seconds since the run began."""
    check_supported(scenario, spec)
    if root.exists() and any(root.iterdir()):
        raise ChaosError(f"{root} is not empty: a real run needs a new or empty directory")
    return _Run(scenario, root, on_event, spec).run()


@dataclass
class _Undo:
    due_s: float  # seconds since the workload started
    label: str
    undo: Callable[[], Awaitable[None]]


@dataclass
class _Run:
    scenario: Scenario
    root: Path
    on_event: Callable[[str], None] | None
    spec: BackendSpec = LOCAL
    history: History = field(default_factory=History)
    clock: SystemClock = field(default_factory=SystemClock)
    paused: set[int] = field(default_factory=set)
    down: set[int] = field(default_factory=set)
    isolated: set[int] = field(default_factory=set)
    _undo: list[_Undo] = field(default_factory=list)
    _serving: dict[int, asyncio.Task[None]] = field(default_factory=dict)
    _transports: list[GrpcTransport] = field(default_factory=list)
    _lookup: GrpcTransport | None = None  # DescribeReplicas when a target is resolved

    def __post_init__(self) -> None:
        self.began_ms = self.clock.monotonic_ms()
        self.start_ms = self.began_ms  # the workload's start, set when it starts
        self.rng = random.Random(f"chaos/{self.scenario.name}")
        self.history.meta = {
            "scenario": self.scenario.name,
            "seed": None,
            "runtime": self.spec.runtime,
        }

    def event(self, text: str) -> None:
        logger.info("%s", text)
        if self.on_event is not None:
            elapsed_s = (self.clock.monotonic_ms() - self.began_ms) / 1000
            self.on_event(f"{elapsed_s:7.1f} s  {text}")

    def now_ms(self) -> int:
        """Milliseconds since the workload started (the history's time)."""
        return self.clock.monotonic_ms() - self.start_ms

    def run(self) -> History:
        s = self.scenario
        self.event(
            f"starting ZooKeeper and {s.cluster.brokers} brokers ({self.spec.runtime}) "
            f"under {self.root}"
        )
        self.backend = self.spec.create(s, self.root)
        try:
            self.backend.start()
            self.event(
                f"cluster up: brokers {', '.join(map(str, self.backend.broker_ids))} serving, "
                + self.backend.describe()
            )
            asyncio.run(self.main())
            self.event("stopping the cluster (a controlled shutdown of every broker)")
            self.backend.stop()
            self._read_final_logs()
        finally:
            self.backend.close()
        return self.history

    async def main(self) -> None:
        s = self.scenario
        workload: Workload | None = None
        try:
            admin = MinimalClient(self.transport_for("setup"), self.backend.bootstrap, self.clock)
            for topic in s.cluster.topics:
                configs = {"min.insync.replicas": str(topic.min_insync_replicas), **topic.configs}
                await admin.create_topic(
                    topic.name, topic.partitions, topic.replication_factor, configs
                )
                await admin.wait_for_leaders(topic.name, topic.partitions)
            self.event("topics created: " + ", ".join(_describe_topics(s)))
            self.start_ms = self.clock.monotonic_ms()
            self.t0 = asyncio.get_running_loop().time()
            workload = Workload(
                scenario=s,
                history=self.history,
                clock=self.clock,
                transport_for=self.transport_for,
                bootstrap=self.backend.bootstrap,
                start_ms=self.start_ms,
                broker_addresses=self._answering_addresses,
            )
            workload.start()
            self.event(
                f"workload started ({len(s.workload.producers)} producers, "
                f"{len(s.workload.consumers)} consumers, {s.workload.duration_s:g} s)"
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
        finally:
            if workload is not None:
                await workload.stop()
            waiting = list(self._serving.values())
            for task in waiting:
                task.cancel()
            # Retrieved here: the run is ending on another error, if any, which matters more.
            await asyncio.gather(*waiting, return_exceptions=True)
            for transport in self._transports:
                await transport.close()

    def transport_for(self, name: str) -> GrpcTransport:
        """A transport of its own for each client (closed at the end of the run)."""
        del name  # one channel set per client, as separate client processes would have
        transport = GrpcTransport()
        self._transports.append(transport)
        return transport

    def _running(self) -> list[int]:
        return [b for b in self.backend.broker_ids if self.backend.running(b)]

    def _answering_addresses(self) -> list[str]:
        """Brokers that can answer now: running and not paused (a stopped one only times
        out)."""
        return [self.backend.address(b) for b in self._running() if b not in self.paused]

    # -- the schedule -------------------------------------------------------------------------

    async def _run_faults(self, duration_s: float) -> None:
        loop = asyncio.get_running_loop()
        pending = sorted(self.scenario.faults, key=lambda f: f.at_s)

        def elapsed_s() -> float:
            return loop.time() - self.t0

        while True:
            for item in [u for u in self._undo if u.due_s <= elapsed_s()]:
                self._undo.remove(item)
                await item.undo()
                self.event("healed: " + item.label)
            # Time is read again after every injection: a rolling restart alone lasts
            # brokers * interval_s, and what fell due meanwhile fires right after it.
            while pending and pending[0].at_s <= elapsed_s():
                await self._inject(pending.pop(0))
            now = elapsed_s()
            if now >= duration_s:
                return
            upcoming = [duration_s, *(f.at_s for f in pending), *(u.due_s for u in self._undo)]
            await asyncio.sleep(max(min(upcoming) - now, 0.01))

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
        undo = await getattr(self, f"_{fault.action}")(fault, targets)
        if undo is not None and fault.duration_s is not None:
            now = asyncio.get_running_loop().time() - self.t0
            self._undo.append(_Undo(now + fault.duration_s, f"{fault.action} {label}", undo))

    async def _heal_everything(self) -> None:
        for item in sorted(self._undo, key=lambda u: u.due_s):
            await item.undo()
            self.event("healed: " + item.label)
        self._undo.clear()
        for broker_id in sorted(self.paused):
            await self._resume(broker_id)
        for broker_id in sorted(self.isolated):
            await self._reconnect(broker_id)
        await asyncio.to_thread(self.backend.refresh)
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
        kind = parse_target(fault.target).kind if fault.target else TargetKind.ALL
        controller = -1
        replicas: tuple[ReplicaSample, ...] = ()
        await asyncio.to_thread(self.backend.refresh)
        if kind is TargetKind.CONTROLLER:
            controller = await self.backend.controller_id()
        elif kind in (TargetKind.LEADER, TargetKind.FOLLOWER):
            replicas = await self._describe_replicas()
        return ClusterView(tuple(self._running()), tuple(sorted(self.down)), controller, replicas)

    async def _describe_replicas(self) -> tuple[ReplicaSample, ...]:
        if self._lookup is None:
            self._lookup = self.transport_for("faults")
        transport = self._lookup
        found: list[ReplicaSample] = []
        for address in self._answering_addresses():
            try:
                response = await transport.call(
                    address,
                    proto.METHOD_DESCRIBE_REPLICAS,
                    pb.DescribeReplicasRequest(),
                    timeout_s=_DESCRIBE_TIMEOUT_S,
                )
            except RpcError as e:
                logger.info("DescribeReplicas to %s failed: %s", address, e)
                continue
            assert isinstance(response, pb.DescribeReplicasResponse)
            found.extend(
                ReplicaSample.from_state(response.monotonic_ms - self.start_ms, r)
                for r in response.replicas
            )
        return tuple(found)

    # -- broker lifecycle ---------------------------------------------------------------------
    # Blocking waits for an exit run in a thread: the workload shares this event loop.

    async def _kill(self, broker_id: int, sig: signal.Signals) -> None:
        if not self.backend.running(broker_id):
            return
        serving = self._serving.pop(broker_id, None)
        if serving is not None:
            _forget(serving)  # a start that went wrong no longer matters: it goes down now
        if sig == signal.SIGKILL:
            self.paused.discard(broker_id)  # dies where it stands, without running again
        else:
            await self._resume(broker_id)  # a stopped process holds SIGTERM until it runs
        await asyncio.to_thread(self.backend.kill, broker_id, sig)
        self.down.add(broker_id)

    async def _start(self, broker_id: int) -> None:
        """Start the broker again; a background task waits until it serves."""
        if self.backend.running(broker_id):
            return
        await asyncio.to_thread(self.backend.start_broker, broker_id)
        self.down.discard(broker_id)
        self._serving[broker_id] = asyncio.get_running_loop().create_task(
            self._wait_serving(broker_id), name=f"chaos-serving-{broker_id}"
        )

    async def _wait_serving(self, broker_id: int) -> None:
        started = self.clock.monotonic_ms()
        limit_s = _session_timeout_s(self.scenario) + self.spec.serving_grace_s
        while not await asyncio.to_thread(self.backend.serving_again, broker_id):
            waited_s = (self.clock.monotonic_ms() - started) / 1000
            if not self.backend.running(broker_id):
                raise ChaosError(
                    f"broker {broker_id} exited while starting "
                    f"({self.backend.exit_note(broker_id)})"
                )
            if waited_s > limit_s:
                raise ChaosError(
                    f"broker {broker_id} not serving {limit_s:g} s after its start "
                    f"({self.backend.exit_note(broker_id)})"
                )
            await asyncio.sleep(self.spec.serving_poll_s)
        waited_s = (self.clock.monotonic_ms() - started) / 1000
        self.event(f"broker {broker_id} serving again ({waited_s:.1f} s after its start)")

    async def _pause_one(self, broker_id: int) -> None:
        if self.backend.running(broker_id) and broker_id not in self.paused:
            await asyncio.to_thread(self.backend.pause, broker_id)
            self.paused.add(broker_id)

    async def _resume(self, broker_id: int) -> None:
        if broker_id in self.paused:
            self.paused.discard(broker_id)
            await asyncio.to_thread(self.backend.resume, broker_id)

    async def _reconnect(self, broker_id: int) -> None:
        if broker_id in self.isolated:
            self.isolated.discard(broker_id)
            await asyncio.to_thread(self.backend.reconnect, broker_id)

    def _restarter(self, targets: list[int]) -> Callable[[], Awaitable[None]]:
        async def restart() -> None:
            for broker_id in targets:
                if broker_id in self.down:
                    await self._start(broker_id)

        return restart

    # -- the faults ---------------------------------------------------------------------------
    # Each applies the fault and returns how to undo it (or None).

    async def _crash(self, fault: Fault, targets: list[int]) -> Callable[[], Awaitable[None]]:
        del fault  # lose_unflushed was refused by check_supported
        for broker_id in targets:
            await self._kill(broker_id, signal.SIGKILL)
        return self._restarter(targets)

    async def _restart(self, fault: Fault, targets: list[int]) -> None:
        del fault
        for broker_id in targets:
            await self._start(broker_id)  # one that runs is left alone (ACTIONS["restart"])

    async def _pause(self, fault: Fault, targets: list[int]) -> Callable[[], Awaitable[None]]:
        del fault
        for broker_id in targets:
            await self._pause_one(broker_id)

        async def resume() -> None:
            for broker_id in targets:
                await self._resume(broker_id)

        return resume

    async def _isolate(self, fault: Fault, targets: list[int]) -> Callable[[], Awaitable[None]]:
        del fault
        for broker_id in targets:
            if self.backend.running(broker_id) and broker_id not in self.isolated:
                await asyncio.to_thread(self.backend.isolate, broker_id)
                self.isolated.add(broker_id)

        async def reconnect() -> None:
            for broker_id in targets:
                await self._reconnect(broker_id)

        return reconnect

    async def _controlled_shutdown(
        self, fault: Fault, targets: list[int]
    ) -> Callable[[], Awaitable[None]]:
        del fault
        for broker_id in targets:
            await self._kill(broker_id, signal.SIGTERM)
        return self._restarter(targets)

    async def _rolling_restart(self, fault: Fault, targets: list[int]) -> None:
        loop = asyncio.get_running_loop()
        interval_s = float(fault.params["interval_s"])
        for broker_id in targets:
            began = loop.time()
            await self._kill(broker_id, signal.SIGTERM)
            self.event(f"rolling restart: broker {broker_id} shut down")
            await self._start(broker_id)
            serving = self._serving.get(broker_id)
            if serving is not None:
                await serving
            # Each next broker interval_s after the previous one began (ACTIONS).
            await asyncio.sleep(max(began + interval_s - loop.time(), 0.0))

    # -- the end ------------------------------------------------------------------------------

    def _read_final_logs(self) -> None:
        topics = self.scenario.cluster.topics
        checkpointed: dict[tuple[str, int], int] = {}
        for broker_id in self.backend.broker_ids:
            log_dir = self.backend.log_dir(broker_id)
            if log_dir is None:
                self.event(f"broker {broker_id}: its log directory cannot be read, left out")
                continue
            for topic in topics:
                for p in range(topic.partitions):
                    partition_dir = log_dir / f"{topic.name}-{p}"
                    if not partition_dir.is_dir():
                        continue
                    entries, problem = read_replica_log(partition_dir)
                    if problem is not None:
                        self.event(
                            f"broker {broker_id}: corrupt batch, log read up to it: {problem}"
                        )
                    self.history.final_logs[(topic.name, p, broker_id)] = entries
            checkpoint = log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE
            if checkpoint.is_file():
                with contextlib.suppress(KafkaError, OSError):
                    for tp, hw in OffsetCheckpointFile(checkpoint).read().items():
                        # A follower's HW never exceeds its leader's: the highest is the
                        # last leader's.
                        key = (tp.topic, tp.partition)
                        checkpointed[key] = max(hw, checkpointed.get(key, -1))
        leaders = _last_leader_hw(self.history.samples)
        for topic in topics:
            for p in range(topic.partitions):
                key = (topic.name, p)
                final_hw = leaders.get(TopicPartition(topic.name, p), checkpointed.get(key))
                if final_hw is not None:
                    self.history.final_hw[key] = final_hw
        records = sum(len(entries) for entries in self.history.final_logs.values())
        self.event(f"final logs read: {len(self.history.final_logs)} replicas, {records} records")


def _describe_topics(s: Scenario) -> list[str]:
    return [
        f"{t.name} ({t.partitions} partitions, RF {t.replication_factor}, "
        f"min ISR {t.min_insync_replicas})"
        for t in s.cluster.topics
    ]


def _forget(task: asyncio.Task[None]) -> None:
    """Cancel a background task, or take its outcome if it has one (so that asyncio does not
    report an exception nobody retrieved)."""
    if not task.done():
        task.cancel()
    elif not task.cancelled():
        task.exception()


def _serving_marks(log_path: Path, broker_id: int) -> int:
    """How often the broker's log says it serves: once per start that got that far (the
    log is appended to across restarts)."""
    if not log_path.exists():
        return 0
    return log_path.read_bytes().count(f"kafkasim broker {broker_id} serving on".encode())


def _last_leader_hw(samples: list[ReplicaSample]) -> dict[TopicPartition, int]:
    """Per partition, the HW of the latest sample taken on its leader."""
    latest: dict[TopicPartition, ReplicaSample] = {}
    for sample in samples:
        if not sample.is_leader:
            continue
        tp = TopicPartition(sample.topic, sample.partition)
        known = latest.get(tp)
        if known is None or sample.time_ms >= known.time_ms:
            latest[tp] = sample
    return {tp: sample.high_watermark for tp, sample in latest.items()}


# Every action is either injectable or refused with a reason: a new action must pick a side.
assert INJECTABLE | set(NOT_INJECTABLE) == set(ACTIONS), "cluster.chaos: an action unaccounted for"
