"""Leader election and ISR removal decisions (pure): Kafka's rules, epochs that only grow,
leader ∈ ISR ⊆ replicas, and "retaining last ISR" when unclean election is off."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.controller.election import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    PREFERRED_LEADER_NOT_AVAILABLE,
    PartitionStateInvariantError,
    controlled_shutdown_election,
    initial_leader_and_isr,
    leader_imbalance,
    offline_election,
    preferred_election,
    remove_replica_from_isr,
    sanity_check,
)
from kafkasim.controller.zk_data import NO_LEADER, LeaderAndIsr

EPOCH = 7  # the electing controller's epoch


def state(leader: int, isr: tuple[int, ...], leader_epoch: int = 4) -> LeaderAndIsr:
    return LeaderAndIsr(leader, leader_epoch, isr, controller_epoch=3, zk_version=11)


@pytest.mark.parametrize(
    ("assignment", "current", "live", "leader", "isr"),
    [
        # The first assigned replica that is live and in the ISR; the ISR keeps live members.
        ([1, 2, 3], state(1, (1, 2, 3)), {2, 3}, 2, (2, 3)),
        # Assignment order decides, not ISR order.
        ([3, 2, 1], state(3, (1, 2, 3)), {1, 2}, 2, (1, 2)),
        # A live replica outside the ISR is skipped.
        ([1, 2, 3], state(1, (1, 3)), {2, 3}, 3, (3,)),
        # A partition that was offline (leader -1) with a retained ISR member who came back.
        ([1, 2], state(NO_LEADER, (2,)), {1, 2}, 2, (2,)),
    ],
)
def test_offline_election_is_clean(
    assignment: list[int],
    current: LeaderAndIsr,
    live: set[int],
    leader: int,
    isr: tuple[int, ...],
) -> None:
    result = offline_election(
        assignment, current, live, unclean_allowed=False, controller_epoch=EPOCH
    )
    assert result.leader_and_isr == LeaderAndIsr(leader, 5, isr, EPOCH, zk_version=11)
    assert not result.unclean


def test_offline_election_without_live_isr_fails_when_unclean_is_off() -> None:
    """No acknowledged write may be lost: wait for an ISR member instead."""
    result = offline_election(
        [1, 2, 3], state(1, (1,)), {2, 3}, unclean_allowed=False, controller_epoch=EPOCH
    )
    assert result.leader_and_isr is None
    assert result.error == ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert "unclean leader election is disabled" in result.reason


def test_unclean_election_takes_the_first_live_replica_alone_and_says_so() -> None:
    result = offline_election(
        [1, 3, 2], state(1, (1,)), {2, 3}, unclean_allowed=True, controller_epoch=EPOCH
    )
    assert result.leader_and_isr == LeaderAndIsr(3, 5, (3,), EPOCH, 11)
    assert result.unclean


def test_clean_choice_wins_even_when_unclean_is_allowed() -> None:
    result = offline_election(
        [1, 2, 3], state(1, (1, 3)), {2, 3}, unclean_allowed=True, controller_epoch=EPOCH
    )
    assert result.leader_and_isr is not None and result.leader_and_isr.leader == 3
    assert not result.unclean


def test_no_live_replica_at_all_fails_even_unclean() -> None:
    result = offline_election(
        [1, 2], state(1, (1,)), set(), unclean_allowed=True, controller_epoch=EPOCH
    )
    assert result.leader_and_isr is None
    assert result.error == ELIGIBLE_LEADERS_NOT_AVAILABLE


@pytest.mark.parametrize(
    ("assignment", "current", "shutting_down", "expected"),
    [
        ([1, 2, 3], state(1, (1, 2, 3)), {1}, LeaderAndIsr(2, 5, (2, 3), EPOCH, 11)),
        # The shutting-down brokers leave the ISR even if a later replica is chosen.
        ([1, 2, 3], state(1, (1, 2, 3)), {1, 2}, LeaderAndIsr(3, 5, (3,), EPOCH, 11)),
        # No other ISR member: leadership cannot move (the broker keeps it until it stops).
        ([1, 2, 3], state(1, (1,)), {1}, None),
    ],
)
def test_controlled_shutdown_election(
    assignment: list[int],
    current: LeaderAndIsr,
    shutting_down: set[int],
    expected: LeaderAndIsr | None,
) -> None:
    result = controlled_shutdown_election(
        assignment, current, {1, 2, 3}, shutting_down, controller_epoch=EPOCH
    )
    assert result.leader_and_isr == expected


@pytest.mark.parametrize(
    ("current", "live", "leader", "error"),
    [
        (state(2, (1, 2)), {1, 2}, 1, ""),
        (state(1, (1, 2)), {1, 2}, None, ELECTION_NOT_NEEDED),
        (state(2, (2,)), {1, 2}, None, PREFERRED_LEADER_NOT_AVAILABLE),  # not in ISR
        (state(2, (1, 2)), {2}, None, PREFERRED_LEADER_NOT_AVAILABLE),  # not live
    ],
)
def test_preferred_election(
    current: LeaderAndIsr, live: set[int], leader: int | None, error: str
) -> None:
    result = preferred_election([1, 2], current, live, controller_epoch=EPOCH)
    if leader is None:
        assert result.leader_and_isr is None and result.error == error
    else:
        assert result.leader_and_isr == LeaderAndIsr(leader, 5, current.isr, EPOCH, 11)


@pytest.mark.parametrize(
    ("current", "replica", "expected"),
    [
        # A follower leaves the ISR; the leader stays; the epoch grows (Kafka 2.x does so).
        (state(1, (1, 2, 3)), 3, LeaderAndIsr(1, 5, (1, 2), EPOCH, 11)),
        # The leader goes: no leader until an election.
        (state(1, (1, 2)), 1, LeaderAndIsr(NO_LEADER, 5, (2,), EPOCH, 11)),
        # Retaining last ISR: the only member stays in the ISR, the partition goes offline.
        (state(1, (1,)), 1, LeaderAndIsr(NO_LEADER, 5, (1,), EPOCH, 11)),
        # Nothing to do.
        (state(1, (1, 2)), 3, None),
        (state(NO_LEADER, (2,)), 2, None),
    ],
)
def test_remove_replica_from_isr(
    current: LeaderAndIsr, replica: int, expected: LeaderAndIsr | None
) -> None:
    assert remove_replica_from_isr(current, replica, controller_epoch=EPOCH) == expected


def test_unclean_disabled_partition_goes_offline_and_keeps_its_last_isr() -> None:
    """The story Kafka users know: ISR {1, 2}; 1 dies, 2 leads; 2 dies, the partition is
    offline with ISR [2] retained; 1 returns but may not lead; 2 returns and leads again."""
    assignment = [1, 2]
    s0 = LeaderAndIsr(1, 0, (1, 2), 1, 0)
    s1 = offline_election(assignment, s0, {2}, unclean_allowed=False, controller_epoch=1)
    assert s1.leader_and_isr == LeaderAndIsr(2, 1, (2,), 1, 0)
    s1_written = s1.leader_and_isr.with_(zk_version=1)
    assert (
        offline_election(
            assignment, s1_written, set(), unclean_allowed=False, controller_epoch=1
        ).leader_and_isr
        is None
    )
    s2 = remove_replica_from_isr(s1_written, 2, controller_epoch=1)
    assert s2 == LeaderAndIsr(NO_LEADER, 2, (2,), 1, 1)
    s2_written = s2.with_(zk_version=2)
    sanity_check("t-0", s2_written, assignment)
    back_1 = offline_election(
        assignment, s2_written, {1}, unclean_allowed=False, controller_epoch=1
    )
    assert back_1.leader_and_isr is None
    back_2 = offline_election(
        assignment, s2_written, {1, 2}, unclean_allowed=False, controller_epoch=1
    )
    assert back_2.leader_and_isr == LeaderAndIsr(2, 3, (2,), 1, 2)


def test_initial_leader_and_isr_is_the_live_replicas() -> None:
    assert initial_leader_and_isr([3, 1, 2], {1, 2}, EPOCH) == LeaderAndIsr(1, 0, (1, 2), EPOCH, 0)
    assert initial_leader_and_isr([3], {1, 2}, EPOCH) is None


@pytest.mark.parametrize(
    ("bad", "assignment", "message"),
    [
        (LeaderAndIsr(1, 0, (2,), 1), [1, 2], "leader 1 not in ISR"),
        (LeaderAndIsr(1, 0, (1, 4), 1), [1, 2], "not within replicas"),
        (LeaderAndIsr(NO_LEADER, 0, (), 1), [1, 2], "empty ISR"),
        (LeaderAndIsr(1, -1, (1,), 1), [1, 2], "negative leader epoch"),
    ],
)
def test_sanity_check_names_the_broken_invariant(
    bad: LeaderAndIsr, assignment: list[int], message: str
) -> None:
    with pytest.raises(PartitionStateInvariantError, match=message):
        sanity_check("t-0", bad, assignment)


def test_leader_imbalance_ratio() -> None:
    assignments = {"a": [1, 2], "b": [1, 2], "c": [2, 1], "d": [1, 2]}
    leaders = {"a": 2, "b": 1, "c": 2}  # "d" has no known leader: counted, not as moved
    assert leader_imbalance(assignments, leaders) == {1: 1 / 3, 2: 0.0}


@given(
    replicas=st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True),
    data=st.data(),
)
def test_every_election_keeps_the_invariants(replicas: list[int], data: st.DataObject) -> None:
    """Whatever the live set: a new state has epoch + 1, leader ∈ ISR ⊆ replicas, and a clean
    leader was in the old ISR."""
    isr = tuple(data.draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True)))
    leader = data.draw(st.sampled_from([NO_LEADER, *isr]))
    live = set(data.draw(st.lists(st.sampled_from(replicas), unique=True)))
    unclean = data.draw(st.booleans())
    current = LeaderAndIsr(leader, 3, isr, 1, 5)
    results = [
        offline_election(replicas, current, live, unclean_allowed=unclean, controller_epoch=2),
        controlled_shutdown_election(replicas, current, set(replicas), live, controller_epoch=2),
        preferred_election(replicas, current, live, controller_epoch=2),
    ]
    for result in results:
        new = result.leader_and_isr
        if new is None:
            continue
        sanity_check("t-0", new, replicas)
        assert new.leader_epoch == 4 and new.zk_version == 5 and new.controller_epoch == 2
        assert new.leader in isr or result.unclean
    removed = remove_replica_from_isr(
        current, data.draw(st.sampled_from(replicas)), controller_epoch=2
    )
    if removed is not None:
        sanity_check("t-0", removed, replicas)
        assert removed.leader_epoch == 4 and set(removed.isr) <= set(isr) and removed.isr
