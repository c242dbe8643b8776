"""Pure replication decisions: values in, values out; no IO, no clock, no randomness.

These are Kafka's rules (``Partition``, ``Replica``, ``AbstractFetcherThread``), each in one
function so that the simulation and the tests can hold them to the invariants:

* the leader's HW is the smallest LEO among the ISR and never moves back;
* a follower's HW is min(its LEO, the leader's HW);
* a follower leaves the ISR when it has not caught up for ``replica.lag.time.max.ms``,
  and rejoins when its LEO reaches the HW (and the start of the leader's epoch);
* a new follower truncates to where its log and the leader's stop agreeing on leader epochs
  (KIP-101/279), never to its own HW — unless there are no epochs to compare;
* the leader's low watermark (DeleteRecords) is the smallest log start offset over its own log
  and the followers on live brokers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    """What a leader knows about one follower replica (Kafka's ``Replica``)."""

    broker_id: int
    log_end_offset: int = -1  # unknown until the follower's first fetch
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    log_start_offset: int = -1  # as its last fetch said; unknown until then


def record_follower_fetch(
    state: FollowerState, fetch_offset: int, leader_log_end_offset: int, now_ms: int
) -> None:
    """Update a follower's state from a fetch at ``fetch_offset`` (its LEO).

    Caught up means: it asked for the leader's LEO at this fetch; or it asked for at least the
    leader's LEO as of its previous fetch, in which case it was caught up at that earlier
    time. This is how Kafka tells a slow follower from a stuck one.
    """
    if fetch_offset >= leader_log_end_offset:
        state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, now_ms)
    elif fetch_offset >= state.last_fetch_leader_log_end_offset >= 0:
        state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
    state.log_end_offset = fetch_offset
    state.last_fetch_leader_log_end_offset = leader_log_end_offset
    state.last_fetch_time_ms = now_ms


def new_leader_high_watermark(
    current_hw: int,
    leader_log_end_offset: int,
    isr: Iterable[int],
    leader_id: int,
    followers: Mapping[int, FollowerState],
    *,
    ignore_followers: bool = False,
) -> int:
    """The HW the leader may move to: min LEO over the ISR, never below ``current_hw``.

    A follower in the ISR whose LEO is unknown (-1) holds the HW where it is.
    ``ignore_followers`` (``ReplicationRules.hw_ignores_followers``, a reproduced bug for the
    failure-search tests): the leader's own LEO, whatever the followers have.
    """
    candidate = leader_log_end_offset
    if ignore_followers:
        return max(current_hw, candidate)
    for broker_id in isr:
        if broker_id == leader_id:
            continue
        follower = followers.get(broker_id)
        if follower is None or follower.log_end_offset < 0:
            return current_hw
        candidate = min(candidate, follower.log_end_offset)
    return max(current_hw, candidate)


def out_of_sync_replicas(
    isr: Iterable[int],
    leader_id: int,
    *,
    leader_log_end_offset: int,
    followers: Mapping[int, FollowerState],
    now_ms: int,
    lag_time_max_ms: int,
) -> set[int]:
    """ISR followers that have not caught up within ``replica.lag.time.max.ms``."""
    out: set[int] = set()
    for broker_id in isr:
        if broker_id == leader_id:
            continue
        follower = followers.get(broker_id)
        if follower is None:
            out.add(broker_id)
            continue
        lagging = follower.log_end_offset != leader_log_end_offset
        if lagging and now_ms - follower.last_caught_up_time_ms > lag_time_max_ms:
            out.add(broker_id)
    return out


def low_watermark(
    leader_log_start_offset: int,
    followers: Iterable[FollowerState],
    is_alive: Callable[[int], bool],
) -> int:
    """Kafka's ``lowWatermarkIfLeader``: the smallest log start offset over the leader's log
    and every follower on a live broker, ISR member or not.

    A follower not heard from yet counts with -1 (unknown), which holds the low watermark
    down: a DeleteRecords is only answered once each live replica has moved its own start.
    A follower on a dead broker does not count (it catches up when it comes back).
    """
    low = leader_log_start_offset
    for follower in followers:
        if is_alive(follower.broker_id):
            low = min(low, follower.log_start_offset)
    return low


def can_join_isr(
    follower: FollowerState, high_watermark: int, leader_epoch_start_offset: int
) -> bool:
    """A follower rejoins once its LEO reaches the HW and the start of the leader's epoch."""
    return (
        follower.log_end_offset >= 0
        and follower.log_end_offset >= high_watermark
        and follower.log_end_offset >= leader_epoch_start_offset
    )


def follower_high_watermark(follower_log_end_offset: int, leader_high_watermark: int) -> int:
    return min(follower_log_end_offset, leader_high_watermark)


@dataclass(frozen=True, slots=True)
class TruncationDecision:
    offset: int
    completed: bool  # False: truncate there, then ask the leader again with the new epoch


def truncation_decision(
    *,
    leader_epoch: int,
    leader_end_offset: int,
    local_end_for_leader_epoch: tuple[int, int],
    local_log_end_offset: int,
    local_high_watermark: int,
) -> TruncationDecision:
    """Where a new follower truncates, from the leader's OffsetsForLeaderEpoch answer.

    The follower asked for its latest epoch; the leader answered with the largest epoch it has
    that is ≤ that one (KIP-279) and where it ends. ``local_end_for_leader_epoch`` is the
    follower's own (epoch, end offset) for the leader's answered epoch, as its epoch cache
    computes it ((-1, -1) when it knows no such epoch).

    * no end offset from the leader (no epochs there): fall back to the local HW;
    * no epoch from the leader: trust its end offset;
    * the follower knows the answered epoch: the logs agree up to where the first of the
      two ends it;
    * the follower's largest epoch ≤ the answer is a different one: truncate to its end and
      ask again (the logs diverged earlier than one round can tell);
    * the follower knows no epoch that old: truncate to the leader's end offset.
    """
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncationDecision(min(local_high_watermark, local_log_end_offset), True)
    if leader_epoch == UNDEFINED_EPOCH:
        return TruncationDecision(min(leader_end_offset, local_log_end_offset), True)
    local_epoch, local_end = local_end_for_leader_epoch
    if local_epoch == UNDEFINED_EPOCH or local_end == UNDEFINED_EPOCH_OFFSET:
        return TruncationDecision(min(leader_end_offset, local_log_end_offset), True)
    if local_epoch != leader_epoch:
        return TruncationDecision(min(local_end, local_log_end_offset), False)
    return TruncationDecision(min(local_end, leader_end_offset, local_log_end_offset), True)
