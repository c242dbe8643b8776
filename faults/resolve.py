"""Which brokers a fault applies to, decided when it fires, from what the cluster shows then.

``resolve`` is pure (its ``rng`` aside), so every backend gives a target the same meaning:

* ``broker:N``: broker N, whatever its state (an action on a broker in the wrong state, such as
  restarting one that runs, does nothing).
* ``leader:T-P``: the leader named by the report with the highest leader epoch. A deposed
  leader that has not heard of its successor still believes it leads, at a lower epoch; at one
  epoch the leader's own report wins (it knows the ISR best).
* ``follower:T-P``: one of the running replicas of the partition other than that leader, an
  in-sync one if any (a paused or lagging follower that fell out of the ISR is picked only when
  no follower is in sync).
* ``txn-coordinator:ID``: the transaction coordinator of transactional id ID, the leader (as
  for ``leader:``) of ID's partition of ``__transaction_state`` (Kafka's
  ``abs(hashCode(ID)) % transaction.state.log.num.partitions``).
* ``controller``: the active controller, if it runs.
* ``random``: a running broker.
* ``all`` (or no target): every running broker; for ``restart``, every broker that is down.

A target that resolves to no broker skips the fault (the runner records that it did).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kafkasim.faults.history import ReplicaSample
from kafkasim.faults.scenario import Fault, TargetKind, parse_target
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC, partition_for

__all__ = ["DEFAULT_TXN_PARTITIONS", "ClusterView", "resolve", "view_needs"]

DEFAULT_TXN_PARTITIONS = 50  # transaction.state.log.num.partitions' default


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What resolving a target needs, gathered when its fault fires. ``running``: brokers
    whose process is alive (paused ones too); ``down``: crashed or shut down; ``controller``:
    the active controller (-1: none); ``replicas``: what the brokers that answered report of
    their replicas (a paused or cut-off broker does not answer)."""

    running: tuple[int, ...]
    down: tuple[int, ...] = ()
    controller: int = -1
    replicas: tuple[ReplicaSample, ...] = ()
    txn_partitions: int = DEFAULT_TXN_PARTITIONS  # transaction.state.log.num.partitions


def view_needs(fault: Fault) -> TargetKind:
    """The kind of target of ``fault`` (ALL for none): what its view must hold."""
    return parse_target(fault.target).kind if fault.target else TargetKind.ALL


def resolve(fault: Fault, view: ClusterView, rng: random.Random) -> list[int]:
    """The broker ids ``fault`` applies to now (see the module doc); [] skips it."""
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
    where = (parsed.topic, parsed.partition)
    if parsed.kind is TargetKind.TXN_COORDINATOR:
        assert parsed.transactional_id is not None
        where = (
            TRANSACTION_STATE_TOPIC,
            partition_for(parsed.transactional_id, view.txn_partitions),
        )
    states = [r for r in view.replicas if (r.topic, r.partition) == where and r.broker in running]
    states.sort(key=lambda r: (r.leader_epoch, r.is_leader and r.leader == r.broker), reverse=True)
    best = states[0] if states else None
    leader = best.leader if best is not None and best.leader >= 0 else None
    if parsed.kind in (TargetKind.LEADER, TargetKind.TXN_COORDINATOR):
        return [leader] if leader is not None and leader in running else []
    assigned = set(best.replicas) if best is not None else set()
    hosting = assigned | {r.broker for r in states}
    followers = sorted(b for b in hosting if b in running and b != leader)
    in_sync = [b for b in followers if best is not None and b in best.isr]
    pool = in_sync or followers
    return [rng.choice(pool)] if pool else []
