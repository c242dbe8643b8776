"""The scenario language of failure-injection runs: one TOML file names the cluster, the workload
and the fault schedule. This module holds the value (frozen dataclasses) and target syntax;
reading, checking and writing a scenario are modules of their own beside it.

Theory of operation
-------------------
1. A scenario is a value: the frozen dataclasses below. ``parse``/``load`` build one from TOML
   and check all of it (``check``), so a scenario that loads can be run. Every mistake is a
   ``ScenarioError`` naming the file, the key path (``faults[2].action``) and what is wrong.
2. Times are seconds since the workload started. Producers send for ``workload.duration_s``;
   every fault starts (``at_s``) and heals (``at_s + duration_s``) within that time, and faults
   are listed in time order (faults at the same time fire in list order). Then ``settle_s``
   seconds pass without new faults before the consumers' final reads.
3. A target is resolved by the runner when its fault fires: ``leader:events-0`` is whoever leads
   partition 0 of ``events`` at that moment. A target that resolves to no live broker skips the
   fault, and the runner records that it did.
4. ``dump`` writes a scenario back as TOML; ``parse(dump(s), ...) == s``. A shrunk schedule is
   saved that way and replays with ``kafkasim sim run FILE --seed N``.
5. ``check`` accepts a ``[seed_faults]`` only if every action it lists can start within its
   window and heal within the run, on the 1 ms grid ``faults.schedules.randomize`` draws on.

The file, every key (defaults as shown; ``[seed_faults]`` and ``[[faults]]`` may be left out)::

    name = "leader-crash"
    description = "What happens, step by step."
    expect = "safe"                      # or "may-lose": an unsafe setting expected to lose

    [cluster]
    brokers = 3
    unclean_leader_election = false
    late_delivery = false                # the simulation: a cut holds messages (TCP) instead
                                         # of losing them (sim.network, 5); real networks do
    broker_config = { "replica.lag.time.max.ms" = 5000 }   # extra server.properties

    [[cluster.topics]]
    name = "events"
    partitions = 1
    replication_factor = 3
    min_insync_replicas = 2
    configs = { "retention.ms" = "600000" }                # extra topic configs

    [[cluster.topics]]
    name = "shipped"

    [workload]
    duration_s = 30.0
    settle_s = 20.0
    client = "kafkasim"                  # or "confluent-kafka" (librdkafka), on real brokers

    [[workload.producers]]
    name = "p1"
    topic = "events"
    acks = "all"                         # "0", "1" or "all"
    idempotent = true
    rate = 100.0                         # records per second (required)
    keyed = false
    config = { "linger.ms" = 5 }         # extra producer settings

    [[workload.producers]]               # a transactional producer (kafkasim's client only)
    name = "p2"
    topic = "events"
    rate = 100.0
    transactional = true                 # sends in transactions (KIP-98); idempotent, acks all
    transactional_id = "p2"              # default: the producer's name; two producers with
                                         # one id are two instances (the older one is fenced)
    transaction_records = 10             # records per transaction
    abort_every = 0                      # K > 0: every K-th transaction is aborted on purpose
    transaction_timeout_ms = 60000       # transaction.timeout.ms (default: the client's)
    start_s = 0.0                        # when it starts sending
    pause_at_s = 12.0                    # stall mid-transaction (a GC pause) for pause_s
    pause_s = 2.0                        # (leave both out for none)

    [[workload.consumers]]               # reads every partition from the start to the end
    name = "c1"
    topic = "events"
    isolation = "read_uncommitted"       # or "read_committed"

    [[workload.transformers]]            # consume-transform-produce, exactly once (optional)
    name = "t1"
    input = "events"                     # consumed in group `group`, read_committed
    output = "shipped"                   # produced in transactions, with the input offsets
    group = "t1"                         # default: the name
    transactional_id = "t1"              # default: the name
    abort_every = 0                      # K > 0: every K-th transaction is aborted on purpose

    [[faults]]
    at_s = 10.0
    action = "crash"
    target = "leader:events-0"
    duration_s = 10.0
    params = { lose_unflushed = false }

    [seed_faults]                        # what a sweep (``kafkasim sim sweep``) draws from
    count = 2
    actions = ["crash", "pause"]
    window_s = [2.0, 25.0]
    max_duration_s = 10.0

The actions and what a runner does for each are in ``ACTIONS``; the targets are
``broker:N`` (ids 1..brokers), ``leader:TOPIC-P``, ``follower:TOPIC-P`` (a live follower of
that partition, an in-sync one if there is one), ``txn-coordinator:ID`` (the transaction
coordinator of transactional id ID: the leader of its ``__transaction_state`` partition),
``controller``, ``random`` (a live broker) and ``all``.

Transactions (``transactional = true``; kafkasim's own client only). A transactional producer
calls ``init_transactions`` once, then sends ``transaction_records`` records per transaction
(round robin over the partitions, at ``rate``) and commits it, aborting every
``abort_every``-th instead. A send, commit or abort that fails leaves the producer aborting
its transaction (or, fenced, stopping: a zombie). ``pause_at_s``/``pause_s`` stall it in the
middle of a transaction: past ``transaction_timeout_ms`` the coordinator aborts it; with a
second instance of its transactional id started meanwhile (``start_s``), it wakes up fenced.
A consumer with ``isolation = "read_committed"`` reads below the last stable offset and drops
aborted transactions. A transformer consumes ``input`` in a consumer group (read_committed),
writes each polled batch's values (as ``<name>:<value>``) to ``output`` in one transaction
with the batch's offsets (``send_offsets_to_transaction``), and after an abort goes back to
the group's committed offsets. Every step is recorded as the checker reads it
(``faults.history``).

Errors::

    ValueError, KafkasimError
    └── ScenarioError      a scenario (file, text or value) that cannot be run
"""

from __future__ import annotations

import enum
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Final

from kafkasim.common.config import DEV_ZK_SESSION_TIMEOUT_MS
from kafkasim.common.errors import KafkasimError

__all__ = [
    "ACKS",
    "CLIENTS",
    "CLIENT_CONFLUENT",
    "CLIENT_KAFKASIM",
    "EXPECTS",
    "EXPECT_MAY_LOSE",
    "EXPECT_SAFE",
    "ClusterSpec",
    "ConsumerSpec",
    "Fault",
    "ProducerSpec",
    "RandomFaults",
    "Scenario",
    "ScenarioError",
    "Target",
    "TargetKind",
    "TopicSpec",
    "TransformerSpec",
    "WorkloadSpec",
    "describe_value",
    "key_path",
    "parse_target",
    "start_range_ms",
]

ConfigValue = str | int | bool

EXPECT_SAFE: Final = "safe"
EXPECT_MAY_LOSE: Final = "may-lose"
EXPECTS: Final = (EXPECT_SAFE, EXPECT_MAY_LOSE)
ACKS: Final = ("0", "1", "all")
# The client that drives a workload: kafkasim's own (over gRPC, every backend), or a real Kafka
# client on the brokers' Kafka listeners (processes and containers: it needs sockets).
CLIENT_KAFKASIM: Final = "kafkasim"
CLIENT_CONFLUENT: Final = "confluent-kafka"
CLIENTS: Final = (CLIENT_KAFKASIM, CLIENT_CONFLUENT)

# Limits on everything (a typo of 10x should fail at load, not after an hour of simulation).
BROKERS_MAX: Final = 32
TOPICS_MAX: Final = 64
PARTITIONS_MAX: Final = 1024
CLIENTS_MAX: Final = 64  # producers + consumers
RATE_MAX: Final = 100_000.0  # records/s per producer
RUN_S_MAX: Final = 24 * 3600.0  # duration_s, settle_s and every fault duration
FAULTS_MAX: Final = 1000
RANDOM_COUNT_MAX: Final = 100
LATENCY_MS_MAX: Final = 60_000.0
CLOCK_JUMP_S_MAX: Final = 365 * 24 * 3600.0
# The runners work in milliseconds: random schedules are drawn on that grid, shrinking halves
# a duration no further.
DURATION_S_MIN: Final = 0.001

NAME_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,100}")
_BARE_KEY_RE: Final = re.compile(r"[A-Za-z0-9_-]+")
TOPIC_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's legal topic names
_INT_RE: Final = re.compile(r"0|[1-9][0-9]*")  # canonical: str(Target) gives the text back


class ScenarioError(KafkasimError, ValueError):
    """A scenario that cannot be run: ``source`` (the file), ``path`` (the key, as
    ``faults[2].action``) and ``reason`` (what is wrong)."""

    def __init__(self, reason: str, *, source: str = "", path: str = "") -> None:
        super().__init__(": ".join(part for part in (source, path, reason) if part))
        self.reason = reason
        self.source = source
        self.path = path


def key_path(path: str, key: str | int) -> str:
    """``path`` and one more key, as errors name it: ``faults[2]``, ``cluster."a.b"``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    part = key if _BARE_KEY_RE.fullmatch(key) else json.dumps(key, ensure_ascii=False)
    return f"{path}.{part}" if path else part


def describe_value(value: object) -> str:
    """A TOML value's type (and value), for "expected X, got Y"."""
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


# -- the scenario value ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic created before the workload starts. ``configs`` are extra topic configs
    (Kafka's names and string values); treat the dict as read-only."""

    name: str
    partitions: int = 1
    replication_factor: int = 3
    min_insync_replicas: int = 2
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Brokers 1..``brokers`` and one ZooKeeper. ``broker_config`` is extra server.properties
    for every broker; the runner sets ids, listeners, log dirs and ZooKeeper itself.
    ``late_delivery``: the simulation's cut links hold unary messages and deliver them after
    the cut heals, as TCP retransmits (``sim.network``, 5); real backends deliver late by
    themselves, so it changes nothing there."""

    brokers: int = 3
    topics: tuple[TopicSpec, ...] = ()
    unclean_leader_election: bool = False
    late_delivery: bool = False
    broker_config: dict[str, ConfigValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProducerSpec:
    """A producer sending unique values at ``rate`` records/s to every partition of ``topic``
    (``keyed``: with keys, partitioned by murmur2; otherwise keyless, sticky). ``config`` is
    extra producer settings (``acks`` and ``enable.idempotence`` come from the fields)."""

    name: str
    topic: str
    acks: str = "all"
    idempotent: bool = True
    rate: float = 100.0
    keyed: bool = False
    config: dict[str, ConfigValue] = field(default_factory=dict)
    transactional: bool = False
    transactional_id: str = ""  # "": the name
    transaction_records: int = 10
    abort_every: int = 0
    transaction_timeout_ms: int | None = None
    start_s: float = 0.0
    pause_at_s: float | None = None
    pause_s: float = 0.0

    @property
    def txn_id(self) -> str:
        """The transactional.id it uses (its name unless set)."""
        return self.transactional_id or self.name


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A consumer reading every partition of ``topic`` from the beginning to the end of the run,
    at ``isolation`` ("read_uncommitted" or "read_committed")."""

    name: str
    topic: str
    isolation: str = "read_uncommitted"


@dataclass(frozen=True, slots=True)
class TransformerSpec:
    """A consume-transform-produce loop: ``input`` consumed in ``group`` (read_committed), each
    batch written to ``output`` in one transaction with its input offsets; every
    ``abort_every``-th transaction aborted on purpose (0: never)."""

    name: str
    input: str
    output: str
    group: str = ""  # "": the name
    transactional_id: str = ""  # "": the name
    abort_every: int = 0

    @property
    def group_id(self) -> str:
        return self.group or self.name

    @property
    def txn_id(self) -> str:
        return self.transactional_id or self.name


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Producers send for ``duration_s``; ``settle_s`` passes without faults before the final
    reads. ``client`` (one of ``CLIENTS``) drives the producers and consumers."""

    producers: tuple[ProducerSpec, ...]
    consumers: tuple[ConsumerSpec, ...]
    duration_s: float
    settle_s: float = 20.0
    client: str = CLIENT_KAFKASIM
    transformers: tuple[TransformerSpec, ...] = ()

    @property
    def transactional(self) -> bool:
        """Whether any client of the workload uses transactions."""
        return bool(self.transformers) or any(p.transactional for p in self.producers)


@dataclass(frozen=True, slots=True)
class Fault:
    """One scheduled fault: ``action`` (a key of ``ACTIONS``) on ``target`` (see
    ``parse_target``; "" for the actions that take none) at ``at_s``, healed after
    ``duration_s`` where the action has one. ``params`` hold the action's parameters, defaults
    filled in by ``parse``; treat the dict as read-only."""

    at_s: float
    action: str
    target: str = ""
    duration_s: float | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RandomFaults:
    """What a sweep may randomise: ``count`` faults, each an action drawn from ``actions``,
    starting within ``window_s`` (inclusive), lasting at most ``max_duration_s``."""

    count: int
    actions: tuple[str, ...]
    window_s: tuple[float, float]
    max_duration_s: float


@dataclass(frozen=True, slots=True)
class Scenario:
    """A whole failure-injection run. ``expect``: ``"safe"`` (the checker must find nothing) or
    ``"may-lose"`` (an unsafe configuration whose report is expected to show loss)."""

    name: str
    description: str
    expect: str
    cluster: ClusterSpec
    workload: WorkloadSpec
    faults: tuple[Fault, ...] = ()
    seed_faults: RandomFaults | None = None

    @property
    def run_s(self) -> float:
        """Workload plus settle time: when the final reads start."""
        return self.workload.duration_s + self.workload.settle_s

    def fault_end_s(self, fault: Fault) -> float:
        """When ``fault`` heals (its start for the instantaneous ones; a rolling restart ends
        ``brokers * interval_s`` after it began)."""
        if fault.action == "rolling_restart":
            return fault.at_s + self.cluster.brokers * float(fault.params["interval_s"])
        return fault.at_s + (fault.duration_s or 0.0)

    def topic(self, name: str) -> TopicSpec:
        for topic in self.cluster.topics:
            if topic.name == name:
                return topic
        raise KeyError(name)


# -- targets ---------------------------------------------------------------------------------


class TargetKind(enum.Enum):
    BROKER = "broker"  # broker:N
    LEADER = "leader"  # leader:TOPIC-P, the partition's leader when the fault fires
    FOLLOWER = "follower"  # follower:TOPIC-P, a live follower of it (an in-sync one if any)
    CONTROLLER = "controller"  # the active controller
    RANDOM = "random"  # a live broker, the runner's seeded choice
    ALL = "all"  # every broker
    TXN_COORDINATOR = "txn-coordinator"  # txn-coordinator:ID, the leader of ID's state partition


TARGET_SYNTAX: Final = (
    "broker:N, leader:TOPIC-P, follower:TOPIC-P, txn-coordinator:ID, controller, random or all"
)


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed target; ``str(target)`` is its text."""

    kind: TargetKind
    broker_id: int | None = None
    topic: str | None = None
    partition: int | None = None
    transactional_id: str | None = None

    def __str__(self) -> str:
        if self.kind is TargetKind.BROKER:
            return f"broker:{self.broker_id}"
        if self.kind is TargetKind.TXN_COORDINATOR:
            return f"{self.kind.value}:{self.transactional_id}"
        if self.kind in (TargetKind.LEADER, TargetKind.FOLLOWER):
            return f"{self.kind.value}:{self.topic}-{self.partition}"
        return str(self.kind.value)


def parse_target(text: str) -> Target:
    """``broker:N``, ``leader:TOPIC-P``, ``follower:TOPIC-P``, ``txn-coordinator:ID``,
    ``controller``, ``random`` or ``all``; ScenarioError otherwise. Only the syntax: whether
    broker N or the topic exists is the scenario's check."""
    kind_text, sep, arg = text.partition(":")
    try:
        kind = TargetKind(kind_text)
    except ValueError:
        raise ScenarioError(f"unknown target {text!r}: expected {TARGET_SYNTAX}") from None
    if kind is TargetKind.BROKER:
        if not _INT_RE.fullmatch(arg):
            raise ScenarioError(f"bad target {text!r}: expected broker:N with N a broker id")
        return Target(kind, broker_id=int(arg))
    if kind in (TargetKind.LEADER, TargetKind.FOLLOWER):
        topic, dash, partition = arg.rpartition("-")
        if not dash or not TOPIC_RE.fullmatch(topic) or not _INT_RE.fullmatch(partition):
            raise ScenarioError(
                f"bad target {text!r}: expected {kind.value}:TOPIC-P (a topic and a partition "
                "number, as in leader:events-0)"
            )
        return Target(kind, topic=topic, partition=int(partition))
    if kind is TargetKind.TXN_COORDINATOR:
        if not NAME_RE.fullmatch(arg):
            raise ScenarioError(
                f"bad target {text!r}: expected txn-coordinator:ID with ID a transactional id "
                "(1-100 of A-Z a-z 0-9 . _ -)"
            )
        return Target(kind, transactional_id=arg)
    if sep:
        raise ScenarioError(f"bad target {text!r}: {kind.value} takes no argument")
    return Target(kind)


# -- the actions -----------------------------------------------------------------------------


# -- where a random fault may start (checked on load, drawn by a sweep) ---------------------


def ms_at_least(seconds: float) -> int:
    """The first whole millisecond at or after ``seconds`` (exact in float, not just close)."""
    ms = math.ceil(seconds * 1000)  # the product may be off by an ulp either way
    while ms / 1000 < seconds:
        ms += 1
    while (ms - 1) / 1000 >= seconds:
        ms -= 1
    return ms


def ms_at_most(seconds: float) -> int:
    """The last whole millisecond at or before ``seconds``."""
    ms = math.floor(seconds * 1000)
    while ms / 1000 > seconds:
        ms -= 1
    while (ms + 1) / 1000 <= seconds:
        ms += 1
    return ms


def _room_ms(scenario: Scenario, action: str) -> int:
    """The least time after its start a fault of ``action`` needs within the run."""
    if action == "rolling_restart":
        return scenario.cluster.brokers  # a 1 ms interval per broker
    return 1  # starts before the end; a duration of at least 1 ms


def session_timeout_s(scenario: Scenario) -> float:
    """The brokers' ZooKeeper session timeout in ``scenario`` (its broker config or the
    scenario clusters' default, which every backend gives its brokers)."""
    raw = scenario.cluster.broker_config.get(
        "zookeeper.session.timeout.ms", DEV_ZK_SESSION_TIMEOUT_MS
    )
    return int(raw) / 1000


def start_range_ms(scenario: Scenario, spec: RandomFaults, action: str) -> tuple[int, int]:
    """Where a random fault of ``action`` may start: within the window, leaving it room."""
    run_ms = ms_at_most(scenario.workload.duration_s)
    latest = min(ms_at_most(spec.window_s[1]), run_ms - _room_ms(scenario, action))
    return ms_at_least(spec.window_s[0]), latest
