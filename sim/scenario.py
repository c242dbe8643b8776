"""The scenario language of failure-injection runs: one TOML file names the cluster, the workload
and the fault schedule. Here too: the shipped catalog. Random fault schedules for sweeps and
shrinking a failing schedule to a minimal one are in ``sim.schedules``.

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
   window and heal within the run, on the 1 ms grid ``sim.schedules.randomize`` draws on.

The file, every key (defaults as shown; ``[seed_faults]`` and ``[[faults]]`` may be left out)::

    name = "leader-crash"
    description = "What happens, step by step."
    expect = "safe"                      # or "may-lose": an unsafe setting expected to lose

    [cluster]
    brokers = 3
    unclean_leader_election = false
    broker_config = { "replica.lag.time.max.ms" = 5000 }   # extra server.properties

    [[cluster.topics]]
    name = "events"
    partitions = 1
    replication_factor = 3
    min_insync_replicas = 2
    configs = { "retention.ms" = "600000" }                # extra topic configs

    [workload]
    duration_s = 30.0
    settle_s = 20.0

    [[workload.producers]]
    name = "p1"
    topic = "events"
    acks = "all"                         # "0", "1" or "all"
    idempotent = true
    rate = 100.0                         # records per second (required)
    keyed = false
    config = { "linger.ms" = 5 }         # extra producer settings

    [[workload.consumers]]               # reads every partition from the start to the end
    name = "c1"
    topic = "events"

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
that partition, an in-sync one if there is one), ``controller``, ``random`` (a live broker) and
``all``.

Errors::

    ValueError, KafkasimError
    └── ScenarioError      a scenario (file, text or value) that cannot be run
"""

from __future__ import annotations

import enum
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, NoReturn

from kafkasim.client.producer_config import PRODUCER_CONFIG
from kafkasim.common.config import ConfigKey
from kafkasim.common.errors import InvalidConfigError, KafkasimError
from kafkasim.node.config import BROKER_CONFIG_DEF
from kafkasim.storage.config import LOG_CONFIG_DEF

__all__ = [
    "ACKS",
    "ACTIONS",
    "CATALOG_DIR",
    "EXPECTS",
    "EXPECT_MAY_LOSE",
    "EXPECT_SAFE",
    "ActionSpec",
    "ClusterSpec",
    "ConsumerSpec",
    "Fault",
    "ParamSpec",
    "ProducerSpec",
    "RandomFaults",
    "Scenario",
    "ScenarioError",
    "Target",
    "TargetKind",
    "TopicSpec",
    "WorkloadSpec",
    "catalog",
    "check",
    "dump",
    "find",
    "load",
    "parse",
    "parse_target",
]

ConfigValue = str | int | bool

EXPECT_SAFE: Final = "safe"
EXPECT_MAY_LOSE: Final = "may-lose"
EXPECTS: Final = (EXPECT_SAFE, EXPECT_MAY_LOSE)
ACKS: Final = ("0", "1", "all")

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
_EPSILON_S: Final = 1e-9  # float sums (at_s + duration_s) compared against the run's end

_NAME_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,100}")
_TOPIC_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's legal topic names
_INT_RE: Final = re.compile(r"0|[1-9][0-9]*")  # canonical: str(Target) gives the text back
_BARE_KEY_RE: Final = re.compile(r"[A-Za-z0-9_-]+")


class ScenarioError(KafkasimError, ValueError):
    """A scenario that cannot be run: ``source`` (the file), ``path`` (the key, as
    ``faults[2].action``) and ``reason`` (what is wrong)."""

    def __init__(self, reason: str, *, source: str = "", path: str = "") -> None:
        super().__init__(": ".join(part for part in (source, path, reason) if part))
        self.reason = reason
        self.source = source
        self.path = path


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
    for every broker; the runner sets ids, listeners, log dirs and ZooKeeper itself."""

    brokers: int = 3
    topics: tuple[TopicSpec, ...] = ()
    unclean_leader_election: bool = False
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


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A consumer reading every partition of ``topic`` from the beginning to the end of the run."""

    name: str
    topic: str


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Producers send for ``duration_s``; ``settle_s`` passes without faults before the final
    reads."""

    producers: tuple[ProducerSpec, ...]
    consumers: tuple[ConsumerSpec, ...]
    duration_s: float
    settle_s: float = 20.0


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


TARGET_SYNTAX: Final = "broker:N, leader:TOPIC-P, follower:TOPIC-P, controller, random or all"


@dataclass(frozen=True, slots=True)
class Target:
    """A parsed target; ``str(target)`` is its text."""

    kind: TargetKind
    broker_id: int | None = None
    topic: str | None = None
    partition: int | None = None

    def __str__(self) -> str:
        if self.kind is TargetKind.BROKER:
            return f"broker:{self.broker_id}"
        if self.kind in (TargetKind.LEADER, TargetKind.FOLLOWER):
            return f"{self.kind.value}:{self.topic}-{self.partition}"
        return str(self.kind.value)


def parse_target(text: str) -> Target:
    """``broker:N``, ``leader:TOPIC-P``, ``follower:TOPIC-P``, ``controller``, ``random`` or
    ``all``; ScenarioError otherwise. Only the syntax: whether broker N or the topic exists is
    the scenario's check."""
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
        if not dash or not _TOPIC_RE.fullmatch(topic) or not _INT_RE.fullmatch(partition):
            raise ScenarioError(
                f"bad target {text!r}: expected {kind.value}:TOPIC-P (a topic and a partition "
                "number, as in leader:events-0)"
            )
        return Target(kind, topic=topic, partition=int(partition))
    if sep:
        raise ScenarioError(f"bad target {text!r}: {kind.value} takes no argument")
    return Target(kind)


# -- the actions -----------------------------------------------------------------------------


class Duration(enum.Enum):
    REQUIRED = "required"
    OPTIONAL = "optional"  # given: the broker comes back after it
    NONE = "none"


class ParamKind(enum.Enum):
    BOOL = "bool"
    NUMBER = "number"  # stored as float
    GROUPS = "groups"  # list of lists of broker ids


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One parameter of an action: numbers lie in [low, high], and are not 0 if ``nonzero``."""

    name: str
    kind: ParamKind
    doc: str
    required: bool = False
    default: bool | float | None = None
    low: float | None = None
    high: float | None = None
    nonzero: bool = False


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """What an action is, which targets it takes (``no_target``: "" is valid too), whether it
    has a duration, and its parameters."""

    name: str
    doc: str
    targets: frozenset[TargetKind]
    duration: Duration
    params: tuple[ParamSpec, ...] = ()
    no_target: bool = False


_BROKER_LIKE: Final = frozenset(
    {
        TargetKind.BROKER,
        TargetKind.LEADER,
        TargetKind.FOLLOWER,
        TargetKind.CONTROLLER,
        TargetKind.RANDOM,
    }
)
_ANY: Final = _BROKER_LIKE | {TargetKind.ALL}
_POSITIVE: Final = 1e-9  # "low" for the numbers that must be > 0


_ACTION_LIST: Final = (
    ActionSpec(
        "crash",
        "Kill the broker at once (kill -9): no controlled shutdown, no flush; its "
        "ZooKeeper session expires after zookeeper.session.timeout.ms. "
        "lose_unflushed = true also drops every byte not yet fsynced, as a machine "
        "losing power would (the page cache is gone; a write may be torn). With "
        "duration_s the broker is started again after it, otherwise it stays down "
        "until a restart.",
        _ANY,
        Duration.OPTIONAL,
        (
            ParamSpec(
                "lose_unflushed",
                ParamKind.BOOL,
                "Also lose what was not fsynced (power loss).",
                default=False,
            ),
        ),
    ),
    ActionSpec(
        "restart",
        "Start a broker that is down (crashed or shut down); one that runs is left "
        "alone. all: every broker that is down.",
        frozenset({TargetKind.BROKER, TargetKind.ALL}),
        Duration.NONE,
    ),
    ActionSpec(
        "pause",
        "Freeze the broker's process (SIGSTOP) for duration_s, then resume it (SIGCONT).",
        _BROKER_LIKE,
        Duration.REQUIRED,
    ),
    ActionSpec(
        "isolate",
        "Cut the broker off from everyone (other brokers, ZooKeeper, clients) for "
        "duration_s, then heal.",
        _BROKER_LIKE,
        Duration.REQUIRED,
    ),
    ActionSpec(
        "split",
        "Split the brokers into sides that cannot reach each other for duration_s: "
        "params.groups puts every broker id in exactly one group, or (no groups) the "
        "target is one side and every other broker the other. ZooKeeper and clients "
        "reach every side.",
        _BROKER_LIKE,
        Duration.REQUIRED,
        (
            ParamSpec(
                "groups",
                ParamKind.GROUPS,
                "Lists of broker ids, one list per side (instead of a target).",
            ),
        ),
        no_target=True,
    ),
    ActionSpec(
        "isolate_zk",
        "Cut the broker off from ZooKeeper only for duration_s (all: a ZooKeeper outage).",
        _ANY,
        Duration.REQUIRED,
    ),
    ActionSpec(
        "expire_session",
        "Expire the broker's ZooKeeper session: its ephemeral registration (and the "
        "controller znode, if it holds it) goes; it registers again with a new session.",
        _ANY,
        Duration.NONE,
    ),
    ActionSpec(
        "slow_network",
        "Delay every message to and from the broker by latency_ms plus a uniform "
        "0..jitter_ms for duration_s (all: every link).",
        _ANY,
        Duration.REQUIRED,
        (
            ParamSpec(
                "latency_ms",
                ParamKind.NUMBER,
                "Added one-way delay.",
                required=True,
                low=_POSITIVE,
                high=LATENCY_MS_MAX,
            ),
            ParamSpec(
                "jitter_ms",
                ParamKind.NUMBER,
                "Up to this much more, uniformly.",
                default=0.0,
                low=0.0,
                high=LATENCY_MS_MAX,
            ),
        ),
    ),
    ActionSpec(
        "disk_full",
        "Every append under the broker's log directories fails (no space) for duration_s: "
        "the broker answers KAFKA_STORAGE_ERROR and halts; when the disk has room again it "
        "is restarted.",
        _ANY,
        Duration.REQUIRED,
    ),
    ActionSpec(
        "clock_jump",
        "Step the broker's wall clock (not its monotonic clock) by seconds; negative "
        "steps go back.",
        _ANY,
        Duration.NONE,
        (
            ParamSpec(
                "seconds",
                ParamKind.NUMBER,
                "The step.",
                required=True,
                low=-CLOCK_JUMP_S_MAX,
                high=CLOCK_JUMP_S_MAX,
                nonzero=True,
            ),
        ),
    ),
    ActionSpec(
        "rolling_restart",
        "Restart every broker in turn, lowest id first, each with a controlled "
        "shutdown; each next one interval_s after the previous began, so it spans "
        "brokers * interval_s.",
        frozenset(),
        Duration.NONE,
        (
            ParamSpec(
                "interval_s",
                ParamKind.NUMBER,
                "Time between two brokers' restarts.",
                required=True,
                low=_POSITIVE,
                high=RUN_S_MAX,
            ),
        ),
        no_target=True,
    ),
    ActionSpec(
        "controlled_shutdown",
        "Controlled shutdown: leadership moves away, then a clean stop (flush, "
        "checkpoints). With duration_s the broker is started again after it, "
        "otherwise it stays down until a restart.",
        _BROKER_LIKE,
        Duration.OPTIONAL,
    ),
)
ACTIONS: Final[Mapping[str, ActionSpec]] = MappingProxyType({a.name: a for a in _ACTION_LIST})
"""Every fault action by name, in the order of the docs."""


# -- reading TOML ----------------------------------------------------------------------------


def load(path: str | Path) -> Scenario:
    """Read and check a scenario file (the only IO of this module, with ``catalog``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(f"cannot read: {e.strerror or e}", source=str(path)) from None
    except UnicodeDecodeError as e:
        raise ScenarioError(f"not UTF-8 text: {e}", source=str(path)) from None
    return parse(text, source=str(path))


def parse(text: str, *, source: str) -> Scenario:
    """A scenario from TOML text; ``source`` names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"not valid TOML: {e}", source=source) from None
    scenario = _Reader(source).scenario(raw)
    check(scenario, source=source)
    return scenario


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    part = key if _BARE_KEY_RE.fullmatch(key) else _toml_str(key)
    return f"{path}.{part}" if path else part


def _describe(value: object) -> str:
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


class _Reader:
    """Shapes and types of the TOML document, with the key path of every value. Values are
    judged afterwards by ``check``, on the dataclasses."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, reason: str) -> NoReturn:
        raise ScenarioError(reason, source=self.source, path=path)

    def table(
        self, value: object, path: str, required: Sequence[str], optional: Sequence[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a table, got {_describe(value)}")
        known = (*required, *optional)
        for key in value:
            if key not in known:
                self.fail(_join(path, key), f"unknown key (expected one of: {', '.join(known)})")
        for key in required:
            if key not in value:
                self.fail(_join(path, key), "missing (required)")
        return value

    def tables(self, value: object, path: str) -> list[object]:
        if not isinstance(value, list):
            self.fail(path, f"expected an array of tables, got {_describe(value)}")
        return value

    def string(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {_describe(value)}")
        return value

    def integer(self, value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {_describe(value)}")
        return value

    def number(self, value: object, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, f"expected a number, got {_describe(value)}")
        if not math.isfinite(value):
            self.fail(path, f"expected a finite number, got {value!r}")
        return float(value)

    def boolean(self, value: object, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {_describe(value)}")
        return value

    def config(self, value: object, path: str) -> dict[str, ConfigValue]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a table, got {_describe(value)}")
        out: dict[str, ConfigValue] = {}
        for key, item in value.items():
            if not isinstance(item, (str, int, bool)):
                self.fail(
                    _join(path, key),
                    f"expected a string, integer or boolean, got {_describe(item)}",
                )
            out[key] = item
        return out

    def topic_configs(self, value: object, path: str) -> dict[str, str]:
        # Topic configs are strings (as Kafka's AlterConfigs carries them); numbers and
        # booleans are accepted in the file for convenience and written as text.
        return {
            key: str(item).lower() if isinstance(item, bool) else str(item)
            for key, item in self.config(value, path).items()
        }

    # -- sections -----------------------------------------------------------------------------

    def scenario(self, raw: dict[str, Any]) -> Scenario:
        t = self.table(
            raw,
            "",
            ("name", "expect", "cluster", "workload"),
            ("description", "faults", "seed_faults"),
        )
        faults = self.tables(t.get("faults", []), "faults")
        return Scenario(
            name=self.string(t["name"], "name"),
            description=self.string(t.get("description", ""), "description"),
            expect=self.string(t["expect"], "expect"),
            cluster=self.cluster(t["cluster"], "cluster"),
            workload=self.workload(t["workload"], "workload"),
            faults=tuple(self.fault(f, _join("faults", i)) for i, f in enumerate(faults)),
            seed_faults=(
                self.seed_faults(t["seed_faults"], "seed_faults") if "seed_faults" in t else None
            ),
        )

    def cluster(self, value: object, path: str) -> ClusterSpec:
        t = self.table(
            value, path, ("topics",), ("brokers", "unclean_leader_election", "broker_config")
        )
        topics = self.tables(t["topics"], _join(path, "topics"))
        return ClusterSpec(
            brokers=self.integer(t.get("brokers", 3), _join(path, "brokers")),
            topics=tuple(
                self.topic(item, _join(_join(path, "topics"), i)) for i, item in enumerate(topics)
            ),
            unclean_leader_election=self.boolean(
                t.get("unclean_leader_election", False), _join(path, "unclean_leader_election")
            ),
            broker_config=self.config(t.get("broker_config", {}), _join(path, "broker_config")),
        )

    def topic(self, value: object, path: str) -> TopicSpec:
        t = self.table(
            value,
            path,
            ("name",),
            ("partitions", "replication_factor", "min_insync_replicas", "configs"),
        )
        return TopicSpec(
            name=self.string(t["name"], _join(path, "name")),
            partitions=self.integer(t.get("partitions", 1), _join(path, "partitions")),
            replication_factor=self.integer(
                t.get("replication_factor", 3), _join(path, "replication_factor")
            ),
            min_insync_replicas=self.integer(
                t.get("min_insync_replicas", 2), _join(path, "min_insync_replicas")
            ),
            configs=self.topic_configs(t.get("configs", {}), _join(path, "configs")),
        )

    def workload(self, value: object, path: str) -> WorkloadSpec:
        t = self.table(value, path, ("producers", "duration_s"), ("consumers", "settle_s"))
        producers = self.tables(t["producers"], _join(path, "producers"))
        consumers = self.tables(t.get("consumers", []), _join(path, "consumers"))
        return WorkloadSpec(
            producers=tuple(
                self.producer(p, _join(_join(path, "producers"), i))
                for i, p in enumerate(producers)
            ),
            consumers=tuple(
                self.consumer(c, _join(_join(path, "consumers"), i))
                for i, c in enumerate(consumers)
            ),
            duration_s=self.number(t["duration_s"], _join(path, "duration_s")),
            settle_s=self.number(t.get("settle_s", 20.0), _join(path, "settle_s")),
        )

    def producer(self, value: object, path: str) -> ProducerSpec:
        t = self.table(
            value, path, ("name", "topic", "rate"), ("acks", "idempotent", "keyed", "config")
        )
        return ProducerSpec(
            name=self.string(t["name"], _join(path, "name")),
            topic=self.string(t["topic"], _join(path, "topic")),
            acks=self.string(t.get("acks", "all"), _join(path, "acks")),
            idempotent=self.boolean(t.get("idempotent", True), _join(path, "idempotent")),
            rate=self.number(t["rate"], _join(path, "rate")),
            keyed=self.boolean(t.get("keyed", False), _join(path, "keyed")),
            config=self.config(t.get("config", {}), _join(path, "config")),
        )

    def consumer(self, value: object, path: str) -> ConsumerSpec:
        t = self.table(value, path, ("name", "topic"))
        return ConsumerSpec(
            name=self.string(t["name"], _join(path, "name")),
            topic=self.string(t["topic"], _join(path, "topic")),
        )

    def fault(self, value: object, path: str) -> Fault:
        t = self.table(value, path, ("at_s", "action"), ("target", "duration_s", "params"))
        action = self.string(t["action"], _join(path, "action"))
        spec = ACTIONS.get(action)
        if spec is None:
            self.fail(
                _join(path, "action"),
                f"unknown action {action!r} (expected one of: {', '.join(ACTIONS)})",
            )
        duration = t.get("duration_s")
        return Fault(
            at_s=self.number(t["at_s"], _join(path, "at_s")),
            action=action,
            target=self.string(t.get("target", ""), _join(path, "target")),
            duration_s=None
            if duration is None
            else self.number(duration, _join(path, "duration_s")),
            params=self.params(spec, t.get("params", {}), _join(path, "params")),
        )

    def params(self, spec: ActionSpec, value: object, path: str) -> dict[str, Any]:
        names = [p.name for p in spec.params]
        if not names and isinstance(value, dict) and value:
            key = next(iter(value))
            self.fail(_join(path, key), f"unknown key: {spec.name} takes no params")
        t = self.table(value, path, (), names)
        out: dict[str, Any] = {}
        for p in spec.params:
            where = _join(path, p.name)
            if p.name not in t:
                if p.default is not None:
                    out[p.name] = p.default
                continue
            item = t[p.name]
            if p.kind is ParamKind.BOOL:
                out[p.name] = self.boolean(item, where)
            elif p.kind is ParamKind.NUMBER:
                out[p.name] = self.number(item, where)
            else:
                out[p.name] = self.groups(item, where)
        return out

    def groups(self, value: object, path: str) -> list[list[int]]:
        if not isinstance(value, list):
            self.fail(path, f"expected an array of arrays of broker ids, got {_describe(value)}")
        out: list[list[int]] = []
        for i, group in enumerate(value):
            if not isinstance(group, list):
                self.fail(
                    _join(path, i), f"expected an array of broker ids, got {_describe(group)}"
                )
            out.append([self.integer(b, _join(_join(path, i), j)) for j, b in enumerate(group)])
        return out

    def seed_faults(self, value: object, path: str) -> RandomFaults:
        t = self.table(value, path, ("count", "actions", "window_s", "max_duration_s"))
        actions = t["actions"]
        if not isinstance(actions, list):
            self.fail(_join(path, "actions"), f"expected an array, got {_describe(actions)}")
        window = t["window_s"]
        if not isinstance(window, list) or len(window) != 2:
            self.fail(
                _join(path, "window_s"),
                f"expected [start, end] in seconds, got {_describe(window)}"
                + (f" of {len(window)}" if isinstance(window, list) else ""),
            )
        return RandomFaults(
            count=self.integer(t["count"], _join(path, "count")),
            actions=tuple(
                self.string(a, _join(_join(path, "actions"), i)) for i, a in enumerate(actions)
            ),
            window_s=(
                self.number(window[0], _join(_join(path, "window_s"), 0)),
                self.number(window[1], _join(_join(path, "window_s"), 1)),
            ),
            max_duration_s=self.number(t["max_duration_s"], _join(path, "max_duration_s")),
        )


# -- checking --------------------------------------------------------------------------------

# Keys the runners set themselves, or that a field of the scenario sets.
_RUNNER_BROKER_KEYS: Final = {
    "broker.id": "the runner numbers the brokers 1..brokers",
    "listeners": "the runner chooses the addresses",
    "advertised.listeners": "the runner chooses the addresses",
    "log.dir": "the runner chooses the log directories",
    "log.dirs": "the runner chooses the log directories",
    "zookeeper.connect": "the runner starts ZooKeeper",
    "unclean.leader.election.enable": "set cluster.unclean_leader_election instead",
    "min.insync.replicas": "set min_insync_replicas on each topic instead",
}
_FIELD_TOPIC_KEYS: Final = {
    "min.insync.replicas": "set the topic's min_insync_replicas instead",
    "unclean.leader.election.enable": "set cluster.unclean_leader_election instead",
}
_FIELD_PRODUCER_KEYS: Final = {
    "bootstrap.servers": "the runner points the producer at the cluster",
    "acks": "set the producer's acks instead",
    "enable.idempotence": "set the producer's idempotent instead",
}


def check(scenario: Scenario, *, source: str = "") -> None:
    """Everything ``parse`` checks beyond the file's shape, on a value (one built in code, or
    drawn by ``randomize``); ScenarioError naming the key path of the first problem."""
    _Checker(scenario, source or scenario.name).run()


class _Checker:
    def __init__(self, scenario: Scenario, source: str) -> None:
        self.s = scenario
        self.source = source
        self.topics: dict[str, TopicSpec] = {}

    def fail(self, path: str, reason: str) -> NoReturn:
        raise ScenarioError(reason, source=self.source, path=path)

    def run(self) -> None:
        s = self.s
        self.name(s.name, "name")
        if s.expect not in EXPECTS:
            self.fail(
                "expect", f"expected one of {', '.join(map(repr, EXPECTS))}, got {s.expect!r}"
            )
        self.cluster()
        self.workload()
        self.faults()
        if s.seed_faults is not None:
            self.seed_faults(s.seed_faults)

    def name(self, name: str, path: str) -> None:
        if not _NAME_RE.fullmatch(name):
            self.fail(path, f"{name!r} is not a name: use 1-100 of A-Z a-z 0-9 . _ -")

    def number(self, value: float, path: str, low: float, high: float, what: str = "") -> None:
        if not low <= value <= high:
            self.fail(path, f"{value!r} is out of range: {what or 'expected'} {low:g}..{high:g}")

    def config(
        self,
        config: Mapping[str, object],
        path: str,
        keys: Mapping[str, ConfigKey],
        kind: str,
        reserved: Mapping[str, str],
    ) -> None:
        for key, value in config.items():
            where = _join(path, key)
            if key in reserved:
                self.fail(where, f"not allowed here: {reserved[key]}")
            declared = keys.get(key)
            if declared is None:
                self.fail(where, f"unknown {kind} key")
            try:
                declared.parse(value)
            except InvalidConfigError as e:
                self.fail(where, e.message)

    def cluster(self) -> None:
        c = self.s.cluster
        self.number(c.brokers, "cluster.brokers", 1, BROKERS_MAX, "brokers")
        self.config(
            c.broker_config,
            "cluster.broker_config",
            BROKER_CONFIG_DEF.keys,
            "broker configuration",
            _RUNNER_BROKER_KEYS,
        )
        if not c.topics:
            self.fail("cluster.topics", "at least one topic is needed")
        if len(c.topics) > TOPICS_MAX:
            self.fail("cluster.topics", f"{len(c.topics)} topics: at most {TOPICS_MAX}")
        for i, t in enumerate(c.topics):
            path = f"cluster.topics[{i}]"
            if not _TOPIC_RE.fullmatch(t.name) or t.name.startswith("__"):
                self.fail(
                    f"{path}.name",
                    f"{t.name!r} is not a topic name: 1-249 of A-Z a-z 0-9 . _ -, "
                    "not starting with __ (internal topics)",
                )
            if t.name in self.topics:
                self.fail(f"{path}.name", f"topic {t.name!r} is declared twice")
            self.topics[t.name] = t
            self.number(t.partitions, f"{path}.partitions", 1, PARTITIONS_MAX, "partitions")
            if not 1 <= t.replication_factor <= c.brokers:
                self.fail(
                    f"{path}.replication_factor",
                    f"{t.replication_factor} is not between 1 and the cluster's "
                    f"{c.brokers} brokers",
                )
            if not 1 <= t.min_insync_replicas <= t.replication_factor:
                self.fail(
                    f"{path}.min_insync_replicas",
                    f"{t.min_insync_replicas} is not between 1 and the topic's "
                    f"replication_factor {t.replication_factor}",
                )
            self.config(
                t.configs,
                f"{path}.configs",
                LOG_CONFIG_DEF.keys,
                "topic configuration",
                _FIELD_TOPIC_KEYS,
            )

    def workload(self) -> None:
        w = self.s.workload
        if not 0 < w.duration_s <= RUN_S_MAX:
            self.fail("workload.duration_s", f"{w.duration_s!r} is not in (0, {RUN_S_MAX:g}]")
        self.number(w.settle_s, "workload.settle_s", 0.0, RUN_S_MAX, "seconds")
        if not w.producers:
            self.fail("workload.producers", "at least one producer is needed")
        if len(w.producers) + len(w.consumers) > CLIENTS_MAX:
            self.fail("workload", f"more than {CLIENTS_MAX} producers and consumers")
        names: set[str] = set()
        clients: list[tuple[str, ProducerSpec | ConsumerSpec]] = [
            *((f"workload.producers[{i}]", p) for i, p in enumerate(w.producers)),
            *((f"workload.consumers[{i}]", c) for i, c in enumerate(w.consumers)),
        ]
        for path, client in clients:
            self.name(client.name, f"{path}.name")
            if client.name in names:
                self.fail(f"{path}.name", f"{client.name!r} names two clients")
            names.add(client.name)
            if client.topic not in self.topics:
                self.fail(
                    f"{path}.topic",
                    f"topic {client.topic!r} is not declared in cluster.topics "
                    f"(declared: {', '.join(self.topics)})",
                )
            if isinstance(client, ProducerSpec):
                self.producer(client, path)

    def producer(self, p: ProducerSpec, path: str) -> None:
        if p.acks not in ACKS:
            self.fail(
                f"{path}.acks", f"expected one of {', '.join(map(repr, ACKS))}, got {p.acks!r}"
            )
        if p.idempotent and p.acks != "all":
            self.fail(
                f"{path}.idempotent",
                f'an idempotent producer needs acks = "all" (got {p.acks!r}; Kafka refuses '
                "enable.idempotence=true otherwise): set idempotent = false",
            )
        if not 0 < p.rate <= RATE_MAX:
            self.fail(f"{path}.rate", f"{p.rate!r} records/s is not in (0, {RATE_MAX:g}]")
        self.config(
            p.config,
            f"{path}.config",
            PRODUCER_CONFIG.keys,
            "producer configuration",
            _FIELD_PRODUCER_KEYS,
        )
        props: dict[str, object] = {
            **p.config,
            "bootstrap.servers": "broker-1:9092",
            "acks": p.acks,
            "enable.idempotence": p.idempotent,
        }
        try:
            PRODUCER_CONFIG.parse(props)  # the cross-field rules Kafka applies
        except InvalidConfigError as e:
            self.fail(f"{path}.config", e.message)

    # -- faults -------------------------------------------------------------------------------

    def faults(self) -> None:
        faults = self.s.faults
        if len(faults) > FAULTS_MAX:
            self.fail("faults", f"{len(faults)} faults: at most {FAULTS_MAX}")
        for i, f in enumerate(faults):
            path = f"faults[{i}]"
            if i and f.at_s < faults[i - 1].at_s:
                self.fail(
                    f"{path}.at_s",
                    f"{f.at_s!r} is before faults[{i - 1}].at_s {faults[i - 1].at_s!r}: "
                    "list faults in time order",
                )
            self.fault(f, path)

    def fault(self, f: Fault, path: str) -> None:
        spec = ACTIONS.get(f.action)
        if spec is None:
            self.fail(
                f"{path}.action",
                f"unknown action {f.action!r} (expected one of: {', '.join(ACTIONS)})",
            )
        self.target(f, spec, path)
        self.duration(f, spec, path)
        self.params(f, spec, path)
        run_s = self.s.workload.duration_s
        if not 0 <= f.at_s < run_s:
            self.fail(
                f"{path}.at_s",
                f"{f.at_s!r} is outside the run: 0 <= at_s < workload.duration_s ({run_s!r})",
            )
        end_s = self.s.fault_end_s(f)
        if end_s > run_s + _EPSILON_S:
            what = "duration_s" if f.duration_s is not None else "params.interval_s"
            self.fail(
                f"{path}.{what}",
                f"heals at {end_s:g} s, after the workload ends "
                f"(workload.duration_s = {run_s!r}): every fault heals within the run",
            )

    def target(self, f: Fault, spec: ActionSpec, path: str) -> None:
        where = f"{path}.target"
        if not f.target:
            if spec.no_target:
                if spec.name == "split" and "groups" not in f.params:
                    self.fail(where, "split needs a target (one side) or params.groups")
                return
            kinds = ", ".join(sorted(k.value for k in spec.targets))
            self.fail(where, f"{spec.name} needs a target ({kinds})")
        if not spec.targets:
            self.fail(where, f"{spec.name} takes no target (it acts on every broker)")
        try:
            target = parse_target(f.target)
        except ScenarioError as e:
            self.fail(where, e.reason)
        if target.kind not in spec.targets:
            kinds = ", ".join(sorted(k.value for k in spec.targets))
            self.fail(where, f"{spec.name} cannot target {target.kind.value} (only: {kinds})")
        if spec.name == "split":
            if "groups" in f.params:
                self.fail(where, "split takes a target or params.groups, not both")
            if self.s.cluster.brokers < 2:
                self.fail(where, "a split needs at least 2 brokers")
        self.target_exists(target, where)

    def target_exists(self, target: Target, where: str) -> None:
        brokers = self.s.cluster.brokers
        if target.broker_id is not None and not 1 <= target.broker_id <= brokers:
            self.fail(where, f"no broker {target.broker_id}: the brokers are 1..{brokers}")
        if target.topic is not None and target.partition is not None:
            topic = self.topics.get(target.topic)
            if topic is None:
                self.fail(where, f"topic {target.topic!r} is not declared in cluster.topics")
            if target.partition >= topic.partitions:
                self.fail(
                    where,
                    f"topic {topic.name!r} has partitions 0..{topic.partitions - 1}, "
                    f"not {target.partition}",
                )
            if target.kind is TargetKind.FOLLOWER and topic.replication_factor < 2:
                self.fail(where, f"topic {topic.name!r} has replication_factor 1: no followers")

    def duration(self, f: Fault, spec: ActionSpec, path: str) -> None:
        where = f"{path}.duration_s"
        if f.duration_s is None:
            if spec.duration is Duration.REQUIRED:
                self.fail(where, f"missing: {spec.name} lasts duration_s seconds, then heals")
            return
        if spec.duration is Duration.NONE:
            self.fail(where, f"{spec.name} is instantaneous: it takes no duration_s")
        self.number(f.duration_s, where, DURATION_S_MIN, RUN_S_MAX, "seconds")

    def params(self, f: Fault, spec: ActionSpec, path: str) -> None:
        declared = {p.name: p for p in spec.params}
        for name in f.params:
            if name not in declared:
                self.fail(f"{path}.params.{name}", f"unknown param of {spec.name}")
        for p in spec.params:
            where = f"{path}.params.{p.name}"
            if p.name not in f.params:
                if p.required:
                    self.fail(where, f"missing: {spec.name} needs it ({p.doc})")
                continue
            value = f.params[p.name]
            if p.kind is ParamKind.BOOL:
                if not isinstance(value, bool):
                    self.fail(where, f"expected true or false, got {_describe(value)}")
            elif p.kind is ParamKind.NUMBER:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    self.fail(where, f"expected a number, got {_describe(value)}")
                if p.nonzero and value == 0:
                    self.fail(where, "must not be 0")
                low = -math.inf if p.low is None else p.low
                high = math.inf if p.high is None else p.high
                if not low <= value <= high:
                    bound = "> 0" if p.low == _POSITIVE else f"{low:g}..{high:g}"
                    self.fail(where, f"{value!r} is out of range: expected {bound}")
            else:
                self.groups(value, where)

    def groups(self, value: object, where: str) -> None:
        brokers = self.s.cluster.brokers
        if not isinstance(value, list) or len(value) < 2:
            self.fail(where, "expected at least two groups (arrays of broker ids)")
        seen: set[int] = set()
        for i, group in enumerate(value):
            if not isinstance(group, list) or not group:
                self.fail(f"{where}[{i}]", "expected a non-empty array of broker ids")
            for j, b in enumerate(group):
                if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= brokers:
                    self.fail(f"{where}[{i}][{j}]", f"{b!r} is not a broker id (1..{brokers})")
                if b in seen:
                    self.fail(f"{where}[{i}][{j}]", f"broker {b} is in two groups")
                seen.add(b)
        missing = sorted(set(range(1, brokers + 1)) - seen)
        if missing:
            self.fail(where, f"brokers {missing} are in no group: list every broker once")

    def seed_faults(self, r: RandomFaults) -> None:
        path = "seed_faults"
        self.number(r.count, f"{path}.count", 1, RANDOM_COUNT_MAX, "count")
        if not r.actions:
            self.fail(f"{path}.actions", "at least one action is needed")
        run_s = self.s.workload.duration_s
        start_s, end_s = r.window_s
        if not 0 <= start_s <= end_s <= run_s:
            self.fail(
                f"{path}.window_s",
                f"[{start_s!r}, {end_s!r}] is not a window within the run: "
                f"0 <= start <= end <= workload.duration_s ({run_s!r})",
            )
        self.number(r.max_duration_s, f"{path}.max_duration_s", DURATION_S_MIN, RUN_S_MAX, "s")
        for i, action in enumerate(r.actions):
            where = f"{path}.actions[{i}]"
            if action not in ACTIONS:
                self.fail(
                    where, f"unknown action {action!r} (expected one of: {', '.join(ACTIONS)})"
                )
            if action in r.actions[:i]:
                self.fail(where, f"{action!r} is listed twice")
            if action == "split" and self.s.cluster.brokers < 2:
                self.fail(where, "a split needs at least 2 brokers")
            earliest_ms, latest_ms = _start_range_ms(self.s, r, action)
            if latest_ms < earliest_ms:
                self.fail(
                    f"{path}.window_s",
                    f"leaves no room for {action} to start and heal within the run",
                )


# -- writing TOML ----------------------------------------------------------------------------

_ESCAPES: Final = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _escape(text: str, *, keep_newlines: bool = False) -> str:
    out: list[str] = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def _toml_str(text: str) -> str:
    return f'"{_escape(text)}"'


def _toml_text(text: str) -> str:
    """A string, as a multi-line string when it has line breaks (descriptions read as prose)."""
    if "\n" not in text:
        return _toml_str(text)
    # The newline right after the opening quotes is not part of the value (TOML trims it).
    return f'"""\n{_escape(text, keep_newlines=True)}"""'


def _toml_key(key: str) -> str:
    return key if _BARE_KEY_RE.fullmatch(key) else _toml_str(key)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value!r}: scenarios hold finite numbers only")
        return repr(value)  # Python's shortest repr is valid TOML and reads back exactly
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def dump(scenario: Scenario) -> str:
    """The scenario as TOML (the subset this language uses); ``parse`` reads it back equal."""
    s = scenario
    lines: list[str] = []

    def put(key: str, value: object) -> None:
        lines.append(f"{key} = {_toml_value(value)}")

    put("name", s.name)
    lines.append(f"description = {_toml_text(s.description)}")
    put("expect", s.expect)

    lines += ["", "[cluster]"]
    put("brokers", s.cluster.brokers)
    put("unclean_leader_election", s.cluster.unclean_leader_election)
    if s.cluster.broker_config:
        lines += ["", "[cluster.broker_config]"]
        for key, value in s.cluster.broker_config.items():
            put(_toml_key(key), value)
    for t in s.cluster.topics:
        lines += ["", "[[cluster.topics]]"]
        put("name", t.name)
        put("partitions", t.partitions)
        put("replication_factor", t.replication_factor)
        put("min_insync_replicas", t.min_insync_replicas)
        if t.configs:
            put("configs", t.configs)

    w = s.workload
    lines += ["", "[workload]"]
    put("duration_s", float(w.duration_s))
    put("settle_s", float(w.settle_s))
    for p in w.producers:
        lines += ["", "[[workload.producers]]"]
        put("name", p.name)
        put("topic", p.topic)
        put("acks", p.acks)
        put("idempotent", p.idempotent)
        put("rate", float(p.rate))
        put("keyed", p.keyed)
        if p.config:
            put("config", p.config)
    for c in w.consumers:
        lines += ["", "[[workload.consumers]]"]
        put("name", c.name)
        put("topic", c.topic)

    for f in s.faults:
        lines += ["", "[[faults]]"]
        put("at_s", float(f.at_s))
        put("action", f.action)
        if f.target:
            put("target", f.target)
        if f.duration_s is not None:
            put("duration_s", float(f.duration_s))
        if f.params:
            put("params", f.params)

    if s.seed_faults is not None:
        r = s.seed_faults
        lines += ["", "[seed_faults]"]
        put("count", r.count)
        put("actions", list(r.actions))
        put("window_s", [float(r.window_s[0]), float(r.window_s[1])])
        put("max_duration_s", float(r.max_duration_s))
    return "\n".join(lines) + "\n"


# -- the catalog -----------------------------------------------------------------------------

CATALOG_DIR: Final = Path(__file__).with_name("catalog")


def catalog() -> dict[str, Path]:
    """The shipped scenarios by name (the file's stem), in name order."""
    return {path.stem: path for path in sorted(CATALOG_DIR.glob("*.toml"))}


def find(name_or_path: str | Path) -> Path:
    """A scenario file: an existing path as given, else a catalog name."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    entries = catalog()
    if str(name_or_path) in entries:
        return entries[str(name_or_path)]
    if path.suffix == ".toml" or len(path.parts) > 1:
        raise ScenarioError("no such file", source=str(name_or_path))
    raise ScenarioError(
        f"no such scenario in the catalog ({', '.join(entries)}) and no such file",
        source=str(name_or_path),
    )


# -- where a random fault may start (the checker and sim.schedules) --------------------------


def _ms_at_least(seconds: float) -> int:
    """The first whole millisecond at or after ``seconds`` (exact in float, not just close)."""
    ms = math.ceil(seconds * 1000)  # the product may be off by an ulp either way
    while ms / 1000 < seconds:
        ms += 1
    while (ms - 1) / 1000 >= seconds:
        ms -= 1
    return ms


def _ms_at_most(seconds: float) -> int:
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


def _start_range_ms(scenario: Scenario, spec: RandomFaults, action: str) -> tuple[int, int]:
    """Where a random fault of ``action`` may start: within the window, leaving it room."""
    run_ms = _ms_at_most(scenario.workload.duration_s)
    latest = min(_ms_at_most(spec.window_s[1]), run_ms - _room_ms(scenario, action))
    return _ms_at_least(spec.window_s[0]), latest
