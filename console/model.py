"""The console's view model: a pure function from snapshots of a cluster to what the page
shows (JSON-ready dicts), and the timeline events read from the difference between two
snapshots.

A ``Snapshot`` is everything one poll saw: each broker's process and ZooKeeper registration,
the controller, each partition's state as the controller wrote it (leader, ISR, leader epoch),
each replica's HW and LEO as its broker reported it (``ReplicaSample``, the history's type),
each broker's request counters, and the consumer groups. Nothing here performs I/O or reads a
clock; the live poller (``console.live``) and the replay (``console.replay``) both build
snapshots and hand them to :func:`view`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kafkasim.faults.history import ReplicaSample

__all__ = [
    "DOWN",
    "PAUSED",
    "UNKNOWN",
    "UP",
    "BrokerMetrics",
    "BrokerState",
    "Event",
    "GroupState",
    "PartitionState",
    "RatePoint",
    "Snapshot",
    "events_between",
    "rates_between",
    "view",
]

UP, DOWN, PAUSED, UNKNOWN = "up", "down", "paused", "unknown"
PROCESS_STATES: Final = (UP, DOWN, PAUSED, UNKNOWN)


@dataclass(frozen=True, slots=True)
class BrokerState:
    """``process``: up, down, paused, or unknown (brokers reached by address only: then
    registered in ZooKeeper, or answering, stands for up)."""

    broker_id: int
    address: str
    kafka_address: str | None = None
    metrics_url: str | None = None
    process: str = UNKNOWN
    registered: bool = True

    def __post_init__(self) -> None:
        if self.process not in PROCESS_STATES:
            raise ValueError(f"broker {self.broker_id}: process state {self.process!r}")


@dataclass(frozen=True, slots=True)
class PartitionState:
    """As the controller wrote it (``/brokers/topics/T/partitions/P/state``); leader -1:
    offline."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BrokerMetrics:
    """A broker's cumulative counters as scraped (Prometheus counters): requests by type,
    their total time, and bytes in (produced) and out (fetched)."""

    produce_requests: int = 0
    fetch_requests: int = 0
    requests: int = 0
    total_time_ms: float = 0.0
    bytes_in: int = 0
    bytes_out: int = 0


@dataclass(frozen=True, slots=True)
class GroupState:
    group_id: str
    state: str
    members: tuple[tuple[str, tuple[str, ...]], ...]  # member id, assigned "topic-p"
    lag: tuple[tuple[str, int, int, int, int], ...]  # topic, partition, committed, end, lag


@dataclass(frozen=True, slots=True)
class Snapshot:
    time_ms: int
    brokers: tuple[BrokerState, ...]
    controller: int
    partitions: tuple[PartitionState, ...]
    replicas: tuple[ReplicaSample, ...] = ()
    metrics: Mapping[int, BrokerMetrics] = field(default_factory=dict)
    groups: tuple[GroupState, ...] = ()


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the timeline: ``kind`` is controller, election, isr_shrink, isr_expand,
    registered, expired, process, truncation or fault."""

    time_ms: int
    kind: str
    text: str

    def record(self) -> dict[str, Any]:
        return {"time_ms": self.time_ms, "kind": self.kind, "text": self.text}


@dataclass(frozen=True, slots=True)
class RatePoint:
    """A broker's rates between two snapshots: produce and fetch requests/s, bytes/s in and
    out, and the mean request latency (ms) over that interval (None: no request)."""

    time_ms: int
    broker_id: int
    produce_per_s: float
    fetch_per_s: float
    bytes_in_per_s: float
    bytes_out_per_s: float
    latency_ms: float | None


def _key(p: PartitionState) -> tuple[str, int]:
    return (p.topic, p.partition)


def events_between(prev: Snapshot | None, cur: Snapshot) -> list[Event]:
    """What changed from ``prev`` to ``cur``, as timeline events at ``cur``'s time: the
    controller moving, a leader elected (a new leader epoch), ISR shrinks and expansions,
    broker registrations and expiries in ZooKeeper, a process going down, up or paused, and a
    replica's log end moving backwards (a truncation)."""
    if prev is None:
        return []
    t = cur.time_ms
    out: list[Event] = []
    if cur.controller != prev.controller:
        text = (
            f"controller moved from broker {prev.controller} to broker {cur.controller}"
            if prev.controller >= 0 and cur.controller >= 0
            else f"broker {cur.controller} became the controller"
            if cur.controller >= 0
            else f"no controller (broker {prev.controller} gone)"
        )
        out.append(Event(t, "controller", text))
    before_brokers = {b.broker_id: b for b in prev.brokers}
    for b in cur.brokers:
        old = before_brokers.get(b.broker_id)
        if old is None:
            continue
        if b.registered and not old.registered:
            out.append(Event(t, "registered", f"broker {b.broker_id} registered in ZooKeeper"))
        elif old.registered and not b.registered:
            out.append(
                Event(t, "expired", f"broker {b.broker_id}'s ZooKeeper registration is gone")
            )
        if b.process != old.process and UNKNOWN not in (b.process, old.process):
            out.append(Event(t, "process", f"broker {b.broker_id} process {b.process}"))
    before = {_key(p): p for p in prev.partitions}
    for p in cur.partitions:
        old_p = before.get(_key(p))
        if old_p is None:
            continue
        name = f"{p.topic}-{p.partition}"
        if p.leader_epoch != old_p.leader_epoch or p.leader != old_p.leader:
            leader = f"broker {p.leader}" if p.leader >= 0 else "no leader (offline)"
            out.append(
                Event(t, "election", f"{name}: leader {leader}, leader epoch {p.leader_epoch}")
            )
        gone = sorted(set(old_p.isr) - set(p.isr))
        came = sorted(set(p.isr) - set(old_p.isr))
        if gone:
            out.append(Event(t, "isr_shrink", f"{name}: ISR shrank to {list(p.isr)} (-{gone})"))
        if came:
            out.append(Event(t, "isr_expand", f"{name}: ISR expanded to {list(p.isr)} (+{came})"))
    leo_before = {(r.topic, r.partition, r.broker): r.log_end_offset for r in prev.replicas}
    for r in cur.replicas:
        old_leo = leo_before.get((r.topic, r.partition, r.broker))
        if old_leo is not None and r.log_end_offset < old_leo:
            out.append(
                Event(
                    t,
                    "truncation",
                    f"{r.topic}-{r.partition} on broker {r.broker}: log truncated from "
                    f"{old_leo} to {r.log_end_offset}",
                )
            )
    return out


def rates_between(prev: Snapshot | None, cur: Snapshot) -> list[RatePoint]:
    """Each broker's rates over the interval between the two snapshots (counters that went
    down, a restarted broker's, count from zero)."""
    if prev is None or cur.time_ms <= prev.time_ms:
        return []
    seconds = (cur.time_ms - prev.time_ms) / 1000
    points = []
    for broker_id, now in sorted(cur.metrics.items()):
        was = prev.metrics.get(broker_id, BrokerMetrics())
        if now.requests < was.requests:  # restarted: its counters began again
            was = BrokerMetrics()
        requests = now.requests - was.requests
        latency = (now.total_time_ms - was.total_time_ms) / requests if requests > 0 else None
        points.append(
            RatePoint(
                cur.time_ms,
                broker_id,
                (now.produce_requests - was.produce_requests) / seconds,
                (now.fetch_requests - was.fetch_requests) / seconds,
                (now.bytes_in - was.bytes_in) / seconds,
                (now.bytes_out - was.bytes_out) / seconds,
                latency,
            )
        )
    return points


def _partition_view(p: PartitionState, samples: Mapping[int, ReplicaSample]) -> dict[str, Any]:
    """A partition with a bar per replica: its HW and LEO as its broker reported them."""
    bars = []
    for broker_id in p.replicas:
        s = samples.get(broker_id)
        bars.append(
            {
                "broker": broker_id,
                "in_isr": broker_id in p.isr,
                "leader": broker_id == p.leader,
                "hw": None if s is None else s.high_watermark,
                "leo": None if s is None else s.log_end_offset,
                "epoch": None if s is None else s.leader_epoch,
            }
        )
    top = max((b["leo"] for b in bars if b["leo"] is not None), default=0)
    offline = p.leader < 0
    return {
        "topic": p.topic,
        "partition": p.partition,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "replicas": list(p.replicas),
        "isr": list(p.isr),
        "offline": offline,
        "under_replicated": not offline and len(p.isr) < len(p.replicas),
        "max_leo": top,
        "bars": bars,
    }


def view(
    snapshot: Snapshot,
    timeline: Sequence[Event] = (),
    rates: Sequence[RatePoint] = (),
    *,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What the page draws: brokers, partitions by topic (bars per replica), rate series per
    broker, consumer groups, the timeline (newest first), and ``extra`` (the workload's and
    the verdict's state, the replay's position) as given."""
    samples: dict[tuple[str, int], dict[int, ReplicaSample]] = {}
    for s in snapshot.replicas:
        samples.setdefault((s.topic, s.partition), {})[s.broker] = s
    leads: dict[int, int] = {}
    for p in snapshot.partitions:
        if p.leader >= 0:
            leads[p.leader] = leads.get(p.leader, 0) + 1
    brokers = [
        {
            "id": b.broker_id,
            "address": b.address,
            "kafka_address": b.kafka_address,
            "metrics_url": b.metrics_url,
            "process": b.process,
            "registered": b.registered,
            "controller": b.broker_id == snapshot.controller,
            "leaderships": leads.get(b.broker_id, 0),
        }
        for b in sorted(snapshot.brokers, key=lambda b: b.broker_id)
    ]
    topics: dict[str, list[dict[str, Any]]] = {}
    for p in sorted(snapshot.partitions, key=_key):
        topics.setdefault(p.topic, []).append(_partition_view(p, samples.get(_key(p), {})))
    series: dict[str, dict[str, list[Any]]] = {}
    for r in rates:
        one = series.setdefault(
            str(r.broker_id),
            {"t": [], "produce": [], "fetch": [], "bytes_in": [], "bytes_out": [], "latency": []},
        )
        one["t"].append(r.time_ms)
        one["produce"].append(round(r.produce_per_s, 2))
        one["fetch"].append(round(r.fetch_per_s, 2))
        one["bytes_in"].append(round(r.bytes_in_per_s, 1))
        one["bytes_out"].append(round(r.bytes_out_per_s, 1))
        one["latency"].append(None if r.latency_ms is None else round(r.latency_ms, 2))
    partitions = [p for ps in topics.values() for p in ps]
    return {
        "time_ms": snapshot.time_ms,
        "controller": snapshot.controller,
        "brokers": brokers,
        "topics": [{"name": name, "partitions": ps} for name, ps in sorted(topics.items())],
        "summary": {
            "brokers": len(brokers),
            "brokers_up": sum(1 for b in brokers if b["process"] in (UP, UNKNOWN)),
            "partitions": len(partitions),
            "under_replicated": sum(1 for p in partitions if p["under_replicated"]),
            "offline": sum(1 for p in partitions if p["offline"]),
        },
        "rates": series,
        "groups": [
            {
                "group": g.group_id,
                "state": g.state,
                "members": [{"id": m, "assignment": list(a)} for m, a in g.members],
                "lag": [
                    {"topic": t, "partition": p, "committed": c, "end": e, "lag": lag}
                    for t, p, c, e, lag in g.lag
                ],
                "total_lag": sum(row[4] for row in g.lag),
            }
            for g in snapshot.groups
        ],
        "timeline": [e.record() for e in sorted(timeline, key=lambda e: -e.time_ms)],
        **(extra or {}),
    }
