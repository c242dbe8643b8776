"""Checking a scenario value: every limit, name, config key, target and time of a scenario, with
the key path of the first problem (``ScenarioError``). A scenario that passes can be run."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final, NoReturn

from kafkasim.client.producer_config import PRODUCER_CONFIG
from kafkasim.common.config import ConfigKey
from kafkasim.common.errors import InvalidConfigError
from kafkasim.faults.actions import ACTIONS, POSITIVE, ActionSpec, Duration, ParamKind
from kafkasim.faults.history import ISOLATION_LEVELS
from kafkasim.faults.scenario import (
    ACKS,
    BROKERS_MAX,
    CLIENT_KAFKASIM,
    CLIENTS,
    CLIENTS_MAX,
    DURATION_S_MIN,
    EXPECTS,
    FAULTS_MAX,
    NAME_RE,
    PARTITIONS_MAX,
    RANDOM_COUNT_MAX,
    RATE_MAX,
    RUN_S_MAX,
    TOPIC_RE,
    TOPICS_MAX,
    ConsumerSpec,
    Fault,
    ProducerSpec,
    RandomFaults,
    Scenario,
    ScenarioError,
    Target,
    TargetKind,
    TopicSpec,
    describe_value,
    key_path,
    parse_target,
    start_range_ms,
)
from kafkasim.node.config import BROKER_CONFIG_DEF
from kafkasim.storage.config import LOG_CONFIG_DEF

__all__ = ["check"]

_EPSILON_S: Final = 1e-9  # float sums (at_s + duration_s) compared against the run's end

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
    "transactional.id": "set the producer's transactional (and transactional_id) instead",
    "transaction.timeout.ms": "set the producer's transaction_timeout_ms instead",
}
TRANSACTION_RECORDS_MAX: Final = 10_000
# Kafka's transaction.max.timeout.ms default: a longer transaction.timeout.ms is refused.
TRANSACTION_TIMEOUT_MS_MAX: Final = 900_000


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
        if not NAME_RE.fullmatch(name):
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
            where = key_path(path, key)
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
            if not TOPIC_RE.fullmatch(t.name) or t.name.startswith("__"):
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
        if w.client not in CLIENTS:
            self.fail(
                "workload.client",
                f"unknown client {w.client!r}: expected one of {', '.join(map(repr, CLIENTS))}",
            )
        if not w.producers:
            self.fail("workload.producers", "at least one producer is needed")
        if len(w.producers) + len(w.consumers) + len(w.transformers) > CLIENTS_MAX:
            self.fail("workload", f"more than {CLIENTS_MAX} producers, consumers and transformers")
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
            elif client.isolation not in ISOLATION_LEVELS:
                self.fail(
                    f"{path}.isolation",
                    f"expected one of {', '.join(map(repr, ISOLATION_LEVELS))}, "
                    f"got {client.isolation!r}",
                )
        self.transformers(names)

    def transformers(self, names: set[str]) -> None:
        w = self.s.workload
        ids = {p.txn_id for p in w.producers if p.transactional}
        for i, t in enumerate(w.transformers):
            path = f"workload.transformers[{i}]"
            self.name(t.name, f"{path}.name")
            if t.name in names:
                self.fail(f"{path}.name", f"{t.name!r} names two clients")
            names.add(t.name)
            for key in ("input", "output"):
                topic = getattr(t, key)
                if topic not in self.topics:
                    self.fail(
                        f"{path}.{key}",
                        f"topic {topic!r} is not declared in cluster.topics "
                        f"(declared: {', '.join(self.topics)})",
                    )
            if t.input == t.output:
                self.fail(f"{path}.output", f"the input topic {t.input!r} again: use another")
            if t.group:
                self.name(t.group, f"{path}.group")
            if t.transactional_id:
                self.name(t.transactional_id, f"{path}.transactional_id")
            if t.txn_id in ids:
                self.fail(
                    f"{path}.transactional_id",
                    f"transactional id {t.txn_id!r} is another client's: two transformers "
                    "(or a producer) with one id fence each other",
                )
            ids.add(t.txn_id)
            if t.abort_every < 0:
                self.fail(f"{path}.abort_every", f"{t.abort_every} is negative: 0 never aborts")
            self.transactional_client(path)

    def transactional_client(self, path: str) -> None:
        if self.s.workload.client != CLIENT_KAFKASIM:
            self.fail(
                path,
                f"transactions are driven by kafkasim's own client only (workload.client = "
                f"{self.s.workload.client!r}): set workload.client = {CLIENT_KAFKASIM!r}",
            )

    def producer_transactions(self, p: ProducerSpec, path: str) -> None:
        run_s = self.s.workload.duration_s
        if not 0 <= p.start_s < run_s:
            self.fail(f"{path}.start_s", f"{p.start_s!r} is not in [0, workload.duration_s)")
        if p.pause_at_s is not None:
            if not p.start_s <= p.pause_at_s < run_s:
                self.fail(
                    f"{path}.pause_at_s",
                    f"{p.pause_at_s!r} is not in [start_s, workload.duration_s)",
                )
            self.number(p.pause_s, f"{path}.pause_s", DURATION_S_MIN, RUN_S_MAX, "seconds")
        elif p.pause_s:
            self.fail(f"{path}.pause_s", "a pause needs pause_at_s (when it begins)")
        if not p.transactional:
            for key, default in (
                ("transactional_id", ""),
                ("transaction_records", 10),
                ("abort_every", 0),
                ("transaction_timeout_ms", None),
                ("start_s", 0.0),
                ("pause_at_s", None),
                ("pause_s", 0.0),
            ):
                if getattr(p, key) != default:
                    self.fail(
                        f"{path}.{key}",
                        "only for a transactional producer: set transactional = true",
                    )
            return
        self.transactional_client(f"{path}.transactional")
        if not p.idempotent:
            self.fail(
                f"{path}.idempotent",
                "a transactional producer is idempotent (Kafka refuses transactional.id "
                "without enable.idempotence): set idempotent = true",
            )
        if p.transactional_id:
            self.name(p.transactional_id, f"{path}.transactional_id")
        self.number(
            p.transaction_records,
            f"{path}.transaction_records",
            1,
            TRANSACTION_RECORDS_MAX,
            "records",
        )
        if p.abort_every < 0:
            self.fail(f"{path}.abort_every", f"{p.abort_every} is negative: 0 never aborts")
        if p.transaction_timeout_ms is not None:
            self.number(
                p.transaction_timeout_ms,
                f"{path}.transaction_timeout_ms",
                1,
                TRANSACTION_TIMEOUT_MS_MAX,
                "ms (transaction.max.timeout.ms)",
            )

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
        self.producer_transactions(p, path)
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
        if target.transactional_id is not None:
            w = self.s.workload
            used = [p.txn_id for p in w.producers if p.transactional]
            used += [t.txn_id for t in w.transformers]
            if target.transactional_id not in used:
                self.fail(
                    where,
                    f"no transactional client uses id {target.transactional_id!r} "
                    f"(used: {', '.join(used) or 'none'})",
                )
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
                    self.fail(where, f"expected true or false, got {describe_value(value)}")
            elif p.kind is ParamKind.NUMBER:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    self.fail(where, f"expected a number, got {describe_value(value)}")
                if p.nonzero and value == 0:
                    self.fail(where, "must not be 0")
                low = -math.inf if p.low is None else p.low
                high = math.inf if p.high is None else p.high
                if not low <= value <= high:
                    bound = "> 0" if p.low == POSITIVE else f"{low:g}..{high:g}"
                    self.fail(where, f"{value!r} is out of range: expected {bound}")
                if p.name == "peer":
                    self.peer(value, where)
            else:
                self.groups(value, where)
        if spec.name == "slow_disk" and not any(
            f.params.get(name, 0) for name in ("write_latency_ms", "fsync_latency_ms")
        ):
            self.fail(
                f"{path}.params",
                "slow_disk slows nothing: give write_latency_ms or fsync_latency_ms above 0",
            )

    def peer(self, value: float, where: str) -> None:
        brokers = self.s.cluster.brokers
        if value != int(value) or value > brokers:
            self.fail(where, f"{value!r} is not a broker id (1..{brokers}) or 0 (every other)")

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
            earliest_ms, latest_ms = start_range_ms(self.s, r, action)
            if latest_ms < earliest_ms:
                self.fail(
                    f"{path}.window_s",
                    f"leaves no room for {action} to start and heal within the run",
                )
