"""Partition leader election and ISR removal: the controller's decisions, pure.

Values in, values out: each function takes a partition's assignment (replicas in preference
order), its current :class:`~controller.zk_data.LeaderAndIsr` as read from ZooKeeper and the
set of brokers that count as live, and returns the state to write — or no state and the reason,
named as the Kafka error an ElectLeaders caller would see.

Invariants (checked by :func:`sanity_check`, relied on by every caller):

1. leader ∈ ISR ⊆ replicas whenever there is a leader; an offline partition has leader -1
   (:data:`~controller.zk_data.NO_LEADER`) and keeps its last ISR;
2. every new state has ``leader_epoch`` = old + 1, so leader epochs only grow; the
   ``zk_version`` is the one read, and the conditional write that stores the state bumps it;
3. without unclean election the ISR is never emptied ("Retaining last ISR"): only a replica
   that was in the ISR can lead, so no acknowledged write is lost while one ISR member lives.

The election rules are Kafka's ``PartitionLeaderElectionAlgorithms``:

* offline: the first replica in assignment order that is live and in the ISR; else, only if
  unclean election is allowed, the first live replica (the result says it was unclean, and the
  ISR becomes just that leader);
* controlled shutdown: the first replica that is live, in the ISR and not shutting down; the
  shutting-down brokers leave the ISR;
* preferred: the first assigned replica, if it is live and in the ISR.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kafkasim.common.errors import KafkasimError
from kafkasim.controller.zk_data import NO_LEADER, LeaderAndIsr

_K = TypeVar("_K")  # a partition key (TopicPartition in the controller)

ELECTION_NOT_NEEDED = "ELECTION_NOT_NEEDED"
PREFERRED_LEADER_NOT_AVAILABLE = "PREFERRED_LEADER_NOT_AVAILABLE"
ELIGIBLE_LEADERS_NOT_AVAILABLE = "ELIGIBLE_LEADERS_NOT_AVAILABLE"


class PartitionStateInvariantError(KafkasimError):
    """A partition state breaks leader ∈ ISR ⊆ replicas (a bug, never sent to a peer)."""


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """The state to write (``leader_and_isr``), or None and why (``error``, ``reason``).

    ``unclean`` is True when the new leader was not in the ISR: records the old leader
    acknowledged may be lost, and the controller logs it loudly.
    """

    leader_and_isr: LeaderAndIsr | None
    unclean: bool = False
    error: str = ""
    reason: str = ""

    @property
    def elected(self) -> bool:
        return self.leader_and_isr is not None


def _failed(error: str, reason: str) -> ElectionResult:
    return ElectionResult(None, error=error, reason=reason)


def new_leader_and_isr(
    current: LeaderAndIsr, leader: int, isr: Sequence[int], controller_epoch: int
) -> LeaderAndIsr:
    """Kafka's ``LeaderAndIsr.newLeaderAndIsr``: next leader epoch, same zk version."""
    return LeaderAndIsr(
        leader=leader,
        leader_epoch=current.leader_epoch + 1,
        isr=tuple(isr),
        controller_epoch=controller_epoch,
        zk_version=current.zk_version,
    )


def initial_leader_and_isr(
    assignment: Sequence[int], live: Collection[int], controller_epoch: int
) -> LeaderAndIsr | None:
    """A new partition's first state: the live replicas form the ISR, the first one leads.

    None when no assigned replica is live (the partition stays new until one is).
    """
    live_replicas = [r for r in assignment if r in live]
    if not live_replicas:
        return None
    return LeaderAndIsr(live_replicas[0], 0, tuple(live_replicas), controller_epoch, 0)


def offline_election(
    assignment: Sequence[int],
    current: LeaderAndIsr,
    live: Collection[int],
    *,
    unclean_allowed: bool,
    controller_epoch: int,
) -> ElectionResult:
    """Elect a leader for a partition whose leader is gone (or that has none).

    Clean: the first assigned replica that is live and in the ISR leads; the ISR keeps its
    live members. Unclean (only when allowed): the first live replica leads alone.
    """
    isr = current.isr
    leader = next((r for r in assignment if r in live and r in isr), None)
    if leader is not None:
        new_isr = [r for r in isr if r in live]
        return ElectionResult(new_leader_and_isr(current, leader, new_isr, controller_epoch))
    if not unclean_allowed:
        return _failed(
            ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"no live replica in ISR {list(isr)} (replicas {list(assignment)}, live "
            f"{sorted(r for r in assignment if r in live)}) and unclean leader election is "
            "disabled",
        )
    leader = next((r for r in assignment if r in live), None)
    if leader is None:
        return _failed(
            ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"no assigned replica of {list(assignment)} is live",
        )
    return ElectionResult(
        new_leader_and_isr(current, leader, [leader], controller_epoch), unclean=True
    )


def controlled_shutdown_election(
    assignment: Sequence[int],
    current: LeaderAndIsr,
    live_or_shutting_down: Collection[int],
    shutting_down: Collection[int],
    *,
    controller_epoch: int,
) -> ElectionResult:
    """Move leadership off a broker that is shutting down, to a live ISR member.

    The shutting-down brokers leave the ISR. No eligible replica: no change (the broker keeps
    leading until it stops; then the offline election runs).
    """
    isr = current.isr
    leader = next(
        (
            r
            for r in assignment
            if r in live_or_shutting_down and r in isr and r not in shutting_down
        ),
        None,
    )
    if leader is None:
        return _failed(
            ELIGIBLE_LEADERS_NOT_AVAILABLE,
            f"no replica in ISR {list(isr)} is live and not shutting down",
        )
    new_isr = [r for r in isr if r not in shutting_down]
    return ElectionResult(new_leader_and_isr(current, leader, new_isr, controller_epoch))


def preferred_election(
    assignment: Sequence[int],
    current: LeaderAndIsr,
    live: Collection[int],
    *,
    controller_epoch: int,
) -> ElectionResult:
    """Give leadership back to the preferred (first assigned) replica; the ISR is unchanged."""
    if not assignment:
        return _failed(PREFERRED_LEADER_NOT_AVAILABLE, "the partition has no replicas")
    preferred = assignment[0]
    if current.leader == preferred:
        return _failed(ELECTION_NOT_NEEDED, f"broker {preferred} already leads")
    if preferred not in live or preferred not in current.isr:
        return _failed(
            PREFERRED_LEADER_NOT_AVAILABLE,
            f"preferred replica {preferred} is "
            + ("not live" if preferred not in live else f"not in ISR {list(current.isr)}"),
        )
    return ElectionResult(new_leader_and_isr(current, preferred, current.isr, controller_epoch))


def remove_replica_from_isr(
    current: LeaderAndIsr, replica: int, *, controller_epoch: int
) -> LeaderAndIsr | None:
    """The state after ``replica`` goes offline (Kafka's ``doRemoveReplicasFromIsr``).

    The replica leaves the ISR unless it is the last member ("Retaining last ISR": emptying it
    would leave no replica that is known to have every acknowledged record); if it led, the
    partition is left without a leader (-1). None when there is nothing to write: the replica
    neither leads nor is in the ISR, or it is the retained last ISR member of a partition that
    is already without a leader.
    """
    if replica not in current.isr and replica != current.leader:
        return None
    leader = NO_LEADER if current.leader == replica else current.leader
    isr = current.isr if len(current.isr) == 1 else tuple(r for r in current.isr if r != replica)
    if leader == current.leader and isr == current.isr:
        return None  # already offline with this last ISR: a rewrite would only bump the epoch
    return new_leader_and_isr(current, leader, isr, controller_epoch)


def sanity_check(tp: object, state: LeaderAndIsr, assignment: Sequence[int]) -> None:
    """Raise :class:`PartitionStateInvariantError` unless leader ∈ ISR ⊆ replicas.

    A state without a leader may hold any non-empty ISR of assigned replicas.
    """
    if not state.isr:
        raise PartitionStateInvariantError(f"{tp}: empty ISR in {state}")
    if not set(state.isr) <= set(assignment):
        raise PartitionStateInvariantError(
            f"{tp}: ISR {list(state.isr)} not within replicas {list(assignment)}"
        )
    if state.leader != NO_LEADER and state.leader not in state.isr:
        raise PartitionStateInvariantError(
            f"{tp}: leader {state.leader} not in ISR {list(state.isr)}"
        )
    if state.leader_epoch < 0:
        raise PartitionStateInvariantError(f"{tp}: negative leader epoch in {state}")


def leader_imbalance(
    assignments: Mapping[_K, Sequence[int]],
    leaders: Mapping[_K, int],
) -> dict[int, float]:
    """Per preferred broker: the share of its preferred partitions that another broker leads.

    Kafka's ``checkAndTriggerAutoLeaderRebalance`` ratio (``leader.imbalance.per.broker.
    percentage`` compares it, in percent). A partition without a known leader counts towards
    its preferred broker's total but not as led by another broker.
    """
    preferred_total: dict[int, int] = {}
    not_led: dict[int, int] = {}
    for tp, replicas in assignments.items():
        if not replicas:
            continue
        preferred = replicas[0]
        preferred_total[preferred] = preferred_total.get(preferred, 0) + 1
        if tp in leaders and leaders[tp] != preferred:
            not_led[preferred] = not_led.get(preferred, 0) + 1
    return {b: not_led.get(b, 0) / total for b, total in sorted(preferred_total.items())}
