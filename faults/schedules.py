"""Fault schedules for sweeps: random ones drawn from a scenario's ``[seed_faults]``, and a
failing one shrunk to a minimal one.

Theory of operation
-------------------
1. ``randomize`` draws a new schedule from ``seed_faults`` with the rng it is given (one seed,
   one schedule). It never loses unflushed data (``lose_unflushed = false``): process kills,
   pauses and partitions are within Kafka's promise for acks=all, min ISR 2 and clean election
   whatever their number, so a safe scenario's sweep must find nothing; losing the unflushed
   tail of more than RF-1 replicas is not, and is only scheduled by hand. ``torn_write`` tears
   only the last batch of one broker's logs, never of every broker at once (target ``all``: a
   power cut of every replica loses what was acknowledged but not yet fsynced, which Kafka
   does not promise to keep): a scenario drawing it draws fewer than RF of them
   (``torn-write``: two), so some replica keeps every acknowledged batch. A torn write is
   also never drawn with another fault in flight: Kafka keeps a torn broker's acknowledged
   records only once a controller has seen its ZooKeeper session expire and moved its
   leadership. A controller that changes before that (its broker killed, torn or cut off)
   takes over with no memory of the torn broker's old registration, sees it registered again
   and keeps its shorter log as the leader's (torn-write random seed 28: a torn leader, then
   the controller torn 1.6 s later, lost an acknowledged record, as Kafka would). So no other
   fault starts from ``TORN_WRITE_APART_S`` before a torn write's ``settle`` (its start plus its
   duration or the session timeout, whichever is longer, plus that margin), nor a torn write
   within another fault's; a fault with no room left in the window is not drawn.
   Only the actions a scenario lists are drawn, and every action's draws are its own: adding
   an action changed no schedule of a scenario that does not list it.
2. ``shrink`` is pure apart from calling the predicate: ddmin over the fault list, then halving
   each duration while the run still fails, until neither changes anything. The result is saved
   with ``faults.writing.dump`` and replays with ``kafkasim sim run FILE --seed N``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from kafkasim.faults.actions import ACTIONS, PEER_ALL, ActionSpec, Duration
from kafkasim.faults.scenario import (
    DURATION_S_MIN,
    Fault,
    RandomFaults,
    Scenario,
    ScenarioError,
    Target,
    TargetKind,
    ms_at_most,
    session_timeout_s,
    start_range_ms,
)
from kafkasim.faults.validation import check

__all__ = ["DRIFT_RATES", "SLOW_WRITE_MS_MAX", "TORN_WRITE_APART_S", "randomize", "shrink"]

DRIFT_RATES = (0.25, 0.5, 2.0, 4.0)  # a random clock_drift's rate: slow or fast, never exact
TORN_WRITE_APART_S = 2.0  # a controller's reaction to an expired session, and then some
SLOW_WRITE_MS_MAX = 15_000  # a random slow_disk's longest write
# Actions a random schedule never aims at every broker at once (see the module doc, 1).
_ONE_BROKER_AT_A_TIME = frozenset({"torn_write"})

# -- random schedules ------------------------------------------------------------------------


def randomize(scenario: Scenario, rng: random.Random) -> Scenario:
    """``scenario`` with its faults replaced by ``seed_faults.count`` random ones (time order),
    drawn with ``rng`` only: the same rng state gives the same schedule. Each fault starts
    within the window on a 1 ms grid, lasts between a tenth of and ``max_duration_s`` (cut to
    heal within the run), and targets a kind its action takes. Crashes and controlled
    shutdowns always come back (they get a duration) and never lose unflushed data."""
    spec = scenario.seed_faults
    if spec is None:
        raise ScenarioError(
            "no [seed_faults]: nothing says what to randomise", source=scenario.name
        )
    check(scenario)  # a window without room would otherwise fail deep in the draw
    faults: list[Fault] = []
    for _ in range(spec.count):
        fault = _apart_from_torn_writes(
            scenario, spec, _random_fault(scenario, spec, rng), faults, rng
        )
        if fault is not None:
            faults.append(fault)
    faults.sort(key=lambda f: f.at_s)  # stable: equal times keep the order drawn
    return replace(scenario, faults=tuple(faults))


def _random_fault(scenario: Scenario, spec: RandomFaults, rng: random.Random) -> Fault:
    action = ACTIONS[rng.choice(spec.actions)]
    run_ms = ms_at_most(scenario.workload.duration_s)
    at_ms = rng.randint(*start_range_ms(scenario, spec, action.name))
    max_ms = max(1, ms_at_most(spec.max_duration_s))
    span_ms = min(rng.randint(max(1, max_ms // 10), max_ms), run_ms - at_ms)

    params: dict[str, Any] = {}
    duration_s: float | None = None
    if action.duration is not Duration.NONE:
        duration_s = span_ms / 1000
    if action.name == "crash":
        params["lose_unflushed"] = False  # see the module doc, rule 1
    elif action.name == "slow_network":
        latency_ms = rng.randint(10, 1000)
        params["latency_ms"] = float(latency_ms)
        params["jitter_ms"] = float(rng.randint(0, latency_ms // 2))
    elif action.name == "clock_jump":
        params["seconds"] = float(rng.choice((-1, 1)) * rng.randint(1, 600))
    elif action.name in ("partition_one_way", "slow_one_way"):
        params.update(_random_one_way(action.name, rng))
    elif action.name == "clock_drift":
        params["rate"] = rng.choice(DRIFT_RATES)
    elif action.name == "slow_disk":
        # Up to beyond replica.lag.time.max.ms (10 s in the simulation): a slowed follower
        # may leave the ISR; fsyncs up to as slow as the writes, or not slowed.
        write_ms = rng.randint(1, SLOW_WRITE_MS_MAX)
        params["write_latency_ms"] = float(write_ms)
        params["fsync_latency_ms"] = float(rng.randint(0, write_ms))
    elif action.name == "rolling_restart":
        brokers = scenario.cluster.brokers
        interval_ms = max(1, min(span_ms, (run_ms - at_ms) // brokers))
        params["interval_s"] = interval_ms / 1000

    target = ""
    if action.name == "split" and rng.random() < 0.5:
        params["groups"] = _random_groups(scenario.cluster.brokers, rng)
    elif action.targets:
        target = _random_target(scenario, action, rng)
    return Fault(
        at_s=at_ms / 1000, action=action.name, target=target, duration_s=duration_s, params=params
    )


def _apart_from_torn_writes(
    scenario: Scenario, spec: RandomFaults, fault: Fault, drawn: Sequence[Fault], rng: random.Random
) -> Fault | None:
    """``fault``, moved to a start (drawn with ``rng``) where neither it nor an earlier fault
    is in flight while the other is a torn write (see the module doc, 1); None when the window
    has no such start. A fault already apart (any fault where no torn write is drawn) is
    returned as it is, with no draw."""
    session_s = session_timeout_s(scenario)

    def settle_ms(f: Fault) -> int:
        """From a fault's start until its broker is back and seen by a controller."""
        return round((max(f.duration_s or 0.0, session_s) + TORN_WRITE_APART_S) * 1000)

    blocked = [
        (round(f.at_s * 1000) - settle_ms(fault), round(f.at_s * 1000) + settle_ms(f))
        for f in drawn
        if "torn_write" in (fault.action, f.action)
    ]
    at_ms = round(fault.at_s * 1000)
    if not any(start < at_ms < end for start, end in blocked):
        return fault
    free = _free_segments(*start_range_ms(scenario, spec, fault.action), blocked)
    room = sum(last - first + 1 for first, last in free)
    if room == 0:
        return None
    index = rng.randrange(room)
    for first, last in free:
        if index <= last - first:
            at_ms = first + index
            break
        index -= last - first + 1
    run_ms = ms_at_most(scenario.workload.duration_s)
    duration_s = fault.duration_s
    if duration_s is not None:
        duration_s = min(duration_s, (run_ms - at_ms) / 1000)
    return replace(fault, at_s=at_ms / 1000, duration_s=duration_s)


def _free_segments(lo: int, hi: int, blocked: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The whole numbers of ``[lo, hi]`` outside every open interval of ``blocked``, as
    closed segments in order."""
    free: list[tuple[int, int]] = []
    at = lo
    for start, end in sorted(blocked):
        if start >= at:  # [at, start] is free (start itself is outside (start, end))
            free.append((at, min(start, hi)))
        at = max(at, end)
        if at > hi:
            break
    if at <= hi:
        free.append((at, hi))
    return [(a, b) for a, b in free if a <= b]


def _random_one_way(action: str, rng: random.Random) -> dict[str, Any]:
    """A one-way fault's params: every other broker as the peer, either direction; a slowed
    link 50 ms..2 s more, plus up to half that again."""
    params: dict[str, Any] = {"peer": float(PEER_ALL), "inbound": rng.random() < 0.5}
    if action == "slow_one_way":
        latency_ms = rng.randint(50, 2000)
        params["latency_ms"] = float(latency_ms)
        params["jitter_ms"] = float(rng.randint(0, latency_ms // 2))
    return params


def _random_groups(brokers: int, rng: random.Random) -> list[list[int]]:
    ids = list(range(1, brokers + 1))
    rng.shuffle(ids)
    cut = rng.randint(1, brokers - 1)
    return [sorted(ids[:cut]), sorted(ids[cut:])]


def _random_target(scenario: Scenario, action: ActionSpec, rng: random.Random) -> str:
    followed = [t for t in scenario.cluster.topics if t.replication_factor >= 2]
    txn_ids = transactional_ids(scenario)
    kinds = [
        k
        for k in TargetKind  # declaration order: the draw does not depend on set order
        if k in action.targets
        and (k is not TargetKind.ALL or action.name not in _ONE_BROKER_AT_A_TIME)
        and (k is not TargetKind.FOLLOWER or followed)
        and (k is not TargetKind.TXN_COORDINATOR or txn_ids)
    ]
    kind = rng.choice(kinds)
    if kind is TargetKind.TXN_COORDINATOR:
        return str(Target(kind, transactional_id=rng.choice(txn_ids)))
    if kind is TargetKind.BROKER:
        return str(Target(kind, broker_id=rng.randint(1, scenario.cluster.brokers)))
    if kind in (TargetKind.LEADER, TargetKind.FOLLOWER):
        topic = rng.choice(followed if kind is TargetKind.FOLLOWER else scenario.cluster.topics)
        return str(Target(kind, topic=topic.name, partition=rng.randrange(topic.partitions)))
    return str(Target(kind))


def transactional_ids(scenario: Scenario) -> list[str]:
    """The transactional ids the workload uses, in declaration order, each once."""
    w = scenario.workload
    ids = [p.txn_id for p in w.producers if p.transactional] + [t.txn_id for t in w.transformers]
    return list(dict.fromkeys(ids))


# -- shrinking -------------------------------------------------------------------------------

Faults = tuple[Fault, ...]


def shrink(faults: Sequence[Fault], fails: Callable[[Faults], bool]) -> Faults:
    """A 1-minimal failing sub-schedule of ``faults``: removing any one fault, or halving any
    one duration (down to 1 ms), makes ``fails`` false. Faults keep their order.

    Delta debugging (Zeller's ddmin) over the list, then each duration halved while the run
    still fails; repeated until neither changes anything (a shorter fault can make another
    one unnecessary). ``fails`` is called at most once per distinct schedule; ``fails(faults)``
    must be true (ValueError otherwise: there is nothing to shrink)."""
    seen: dict[str, bool] = {}

    def test(candidate: Faults) -> bool:
        key = repr(candidate)
        if key not in seen:
            seen[key] = bool(fails(candidate))
        return seen[key]

    current = tuple(faults)
    if not test(current):
        raise ValueError("shrink needs a failing schedule: fails(faults) is false")
    while True:
        smaller = _shorten_durations(_ddmin(current, test), test)
        if smaller == current:
            return current
        current = smaller


def _ddmin(faults: Faults, test: Callable[[Faults], bool]) -> Faults:
    if test(()):
        return ()
    n = 2
    while len(faults) >= 2:
        size, extra = divmod(len(faults), n)
        chunks: list[Faults] = []
        start = 0
        for i in range(n):
            end = start + size + (1 if i < extra else 0)
            chunks.append(faults[start:end])
            start = end
        reduced = next((chunk for chunk in chunks if test(chunk)), None)
        if reduced is not None:
            faults, n = reduced, 2
            continue
        if n > 2:  # with two chunks each complement is the other chunk, tried above
            complements = (
                tuple(f for j, chunk in enumerate(chunks) if j != i for f in chunk)
                for i in range(n)
            )
            reduced = next((c for c in complements if test(c)), None)
            if reduced is not None:
                faults, n = reduced, max(n - 1, 2)
                continue
        if n >= len(faults):
            break
        n = min(2 * n, len(faults))
    return faults


def _shorten_durations(faults: Faults, test: Callable[[Faults], bool]) -> Faults:
    current = list(faults)
    for i in range(len(current)):
        while True:
            duration = current[i].duration_s
            if duration is None:
                break
            halved = round(duration / 2, 3)
            if halved < DURATION_S_MIN or halved >= duration:
                break
            candidate = [*current[:i], replace(current[i], duration_s=halved), *current[i + 1 :]]
            if not test(tuple(candidate)):
                break
            current = candidate
    return tuple(current)
