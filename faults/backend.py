"""What a runtime must offer for a failure run, and what it can inject.

A backend is a cluster the runner can start, reach, break and mend: the deterministic
simulation, processes on this machine, or containers. ``BackendSpec`` says what a backend is and
which actions of ``ACTIONS`` it can inject (every action on exactly one side, the refused ones
with a reason), known before anything starts; ``Backend`` is the seam the runner drives, one
coroutine per step. Steps that a runtime cannot take are refused up front by
``check_supported``, so a backend never sees an action its spec refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkasimError
from kafkasim.common.rpc import ClientTransport
from kafkasim.faults.actions import ACTIONS
from kafkasim.faults.history import History, ReplicaSample
from kafkasim.faults.scenario import CLIENT_KAFKASIM, Scenario

__all__ = [
    "Backend",
    "BackendSpec",
    "BrokerStartError",
    "UnsupportedFaultError",
    "broker_props",
    "check_supported",
    "unsupported_faults",
]

_T = TypeVar("_T")

# A restarted broker may wait out its old ZooKeeper registration (up to the session timeout)
# before it serves; beyond that, this much longer means it is not coming back.
SERVING_GRACE_S = 60.0
SERVING_POLL_S = 0.1


class BrokerStartError(KafkasimError):
    """A broker's start-up failed and it is down again, as a Kafka broker whose start-up
    failed exits (raised by ``Backend.start_broker``)."""


class UnsupportedFaultError(KafkasimError):
    """A fault a backend cannot inject; named before the run starts."""


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """What a backend is and can do, known before anything starts. ``name``: its
    ``--backend`` value; ``runtime``: what it runs on, in messages and the history's meta;
    ``injectable`` / ``not_injectable``: every action of ``ACTIONS`` on one side, the refused
    ones with a reason (one clause); ``lose_unflushed``: why a crash that loses unflushed data
    is refused ("" when it is not); ``real_clients``: why a real Kafka client cannot drive its
    workload ("" when one can: its brokers have Kafka listeners the run's host reaches);
    ``brokers``: the only broker count it runs (None: any);
    ``serving_grace_s``: how much longer than the ZooKeeper session timeout a started broker
    may take to serve; ``create``: the backend for a scenario, a seed and a run directory."""

    name: str
    runtime: str
    injectable: frozenset[str]
    not_injectable: Mapping[str, str]
    lose_unflushed: str
    create: Callable[[Scenario, int | None, Path], Backend]
    real_clients: str = ""
    brokers: int | None = None
    brokers_reason: str = ""
    serving_grace_s: float = SERVING_GRACE_S
    serving_poll_s: float = SERVING_POLL_S

    def __post_init__(self) -> None:
        if self.injectable | set(self.not_injectable) != set(ACTIONS) or (
            self.injectable & set(self.not_injectable)
        ):
            raise ValueError(f"backend {self.name}: every action injectable or refused, once")


class Backend(Protocol):
    """The cluster a run drives. ``run_loop`` runs the run's coroutine on the backend's event
    loop (virtual time in the simulation); every other coroutine is awaited on it. Broker
    steps are only asked of brokers in the state they need (the runner keeps track): ``crash``
    and ``shutdown`` of a running broker, ``start_broker`` of one that is down, ``resume`` of a
    paused one."""

    @property
    def spec(self) -> BackendSpec: ...

    @property
    def broker_ids(self) -> tuple[int, ...]:
        """Every broker of the cluster, down ones too."""

    @property
    def bootstrap(self) -> list[str]: ...

    @property
    def kafka_bootstrap(self) -> list[str]:
        """The brokers' Kafka listeners (``host:port``) for Kafka's own clients; empty when
        there are none (``spec.real_clients`` says why)."""

    @property
    def clock(self) -> Clock:
        """The run's clock (the history's times)."""

    def run_loop(self, main: Callable[[], Coroutine[Any, Any, _T]]) -> _T: ...

    async def start(self) -> None:
        """ZooKeeper and every broker, until all serve."""

    def describe(self) -> str:
        """Where the cluster is, for the "cluster up" line."""

    def transport_for(self, name: str) -> ClientTransport:
        """A transport of its own for one client of the run."""

    def address(self, broker_id: int) -> str: ...

    def running(self, broker_id: int) -> bool:
        """Alive (paused too), as the backend last knew it (cheap)."""

    async def refresh(self) -> None:
        """Learn again which brokers run (one may have exited by itself)."""

    def set_on_halt(self, callback: Callable[[int], None]) -> None:
        """Who hears that a broker stopped by itself (a failed log dir), where the backend
        can tell at once."""

    async def crash(self, broker_id: int, *, lose_unflushed: bool) -> None:
        """kill -9 (a paused broker dies where it stands); returns once it is gone."""

    async def shutdown(self, broker_id: int) -> None:
        """A controlled shutdown and a clean stop; returns once it exited."""

    async def start_broker(self, broker_id: int) -> None:
        """Start a broker that is down. An error: it did not come up (it is down again)."""

    async def serving_again(self, broker_id: int) -> bool:
        """Whether the broker serves since its last ``start_broker``."""

    def exit_note(self, broker_id: int) -> str:
        """Its exit status and where its log is, for messages."""

    async def pause(self, broker_id: int) -> None: ...

    async def resume(self, broker_id: int) -> None: ...

    async def isolate(self, broker_id: int) -> None:
        """Cut the broker off everyone (peers, ZooKeeper, clients)."""

    async def reconnect(self, broker_id: int) -> None: ...

    async def isolate_zk(self, broker_id: int) -> None: ...

    async def reconnect_zk(self, broker_id: int) -> None: ...

    async def split(self, groups: list[list[int]]) -> None:
        """Brokers in different groups cannot reach each other."""

    async def heal_split(self) -> None: ...

    async def expire_session(self, broker_id: int) -> None: ...

    async def slow_network(
        self, broker_ids: list[int], latency_ms: float, jitter_ms: float
    ) -> None:
        """Delay the brokers' messages (a backend may slow every link: it says so)."""

    async def normal_network(self) -> None: ...

    async def clock_jump(self, broker_ids: list[int], seconds: float) -> None: ...

    async def cut_one_way(self, src: int, dst: int) -> None:
        """Everything broker ``src`` sends broker ``dst`` is lost; ``dst`` to ``src`` flows."""

    async def heal_one_way(self, src: int, dst: int) -> None: ...

    async def slow_link(self, src: int, dst: int, latency_ms: float, jitter_ms: float) -> None:
        """Each message from broker ``src`` to broker ``dst`` takes ``latency_ms`` plus a
        uniform 0..``jitter_ms`` more; the other direction is not slowed."""

    async def normal_link(self, src: int, dst: int) -> None: ...

    async def clock_drift(self, broker_id: int, rate: float) -> None:
        """The broker's clock runs ``rate`` times as fast from now on (1: normal again)."""

    async def crash_torn(self, broker_id: int) -> None:
        """kill -9 as a power cut tears the last write: each log's last batch, when not
        fsynced, is cut at a random byte; returns once the broker is gone."""

    async def fill_disk(self, broker_id: int) -> None:
        """Every append under the broker's log dirs fails (no space) from now on."""

    async def free_disk(self, broker_id: int) -> None: ...

    async def slow_disk(self, broker_id: int, write_ms: float, fsync_ms: float) -> None:
        """Each log write on the broker takes ``write_ms`` and each fsync ``fsync_ms``, one at
        a time, blocking whoever appends, until ``normal_disk``."""

    async def normal_disk(self, broker_id: int) -> None: ...

    async def heal_network(self) -> None:
        """At the end of the schedule: every link and ZooKeeper connection as at the start."""

    async def controller_id(self) -> int:
        """The active controller (-1: none right now)."""

    async def describe_replicas(self, broker_ids: list[int]) -> tuple[ReplicaSample, ...]:
        """What these brokers report of their replicas now (a broker that does not answer
        is left out); times relative to ``clock`` as given by the broker."""

    async def finish(self, history: History) -> list[str]:
        """Stop the cluster, and record every replica's log of the scenario's topics and each
        partition's final high watermark in ``history``; notes on what could not be read."""

    async def close(self) -> None:
        """Release everything the backend started (after ``finish``, or on an error)."""


def unsupported_faults(scenario: Scenario, spec: BackendSpec) -> list[str]:
    """One clause per kind of fault of ``scenario`` the backend of ``spec`` cannot inject:
    what (with the indexes in ``faults``) and why. Empty when every fault can be injected."""
    where: dict[str, list[int]] = {}
    reasons: dict[str, str] = {}
    for i, fault in enumerate(scenario.faults):
        if fault.action in spec.not_injectable:
            what = fault.action
            reasons[what] = spec.not_injectable[fault.action]
        elif (
            fault.action == "crash"
            and fault.params.get("lose_unflushed", False)
            and spec.lose_unflushed
        ):
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


def check_supported(scenario: Scenario, spec: BackendSpec) -> None:
    """UnsupportedFaultError, one line naming ``spec``'s runtime, every fault it cannot inject
    and why (and the broker count, for a backend that runs only one; and the workload's
    client, for a backend a real Kafka client cannot reach)."""
    parts = []
    if spec.brokers is not None and scenario.cluster.brokers != spec.brokers:
        parts.append(f"run cluster.brokers = {scenario.cluster.brokers}: {spec.brokers_reason}")
    client = scenario.workload.client
    if client != CLIENT_KAFKASIM and spec.real_clients:
        parts.append(f"drive the workload with {client}: {spec.real_clients}")
    clauses = unsupported_faults(scenario, spec)
    if clauses:
        parts.append("inject " + "; ".join(clauses))
    if parts:
        raise UnsupportedFaultError(
            f"scenario {scenario.name}: {spec.runtime} cannot " + "; ".join(parts)
        )


def broker_props(scenario: Scenario) -> dict[str, object]:
    """The server.properties every broker of a run gets on top of the backend's own (ids,
    listeners, log dirs, ZooKeeper)."""
    return {
        "unclean.leader.election.enable": scenario.cluster.unclean_leader_election,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": False,
        **scenario.cluster.broker_config,
    }
