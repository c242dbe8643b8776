"""Pure replication rules: HW, caught-up tracking, ISR shrink/expand, truncation point."""

from __future__ import annotations

import pytest

from kafkasim.node.replication import (
    FollowerState,
    can_join_isr,
    follower_high_watermark,
    low_watermark,
    new_leader_high_watermark,
    out_of_sync_replicas,
    record_follower_fetch,
    truncation_decision,
)


def _followers(**leos: int) -> dict[int, FollowerState]:
    return {int(k[1:]): FollowerState(int(k[1:]), log_end_offset=v) for k, v in leos.items()}


@pytest.mark.parametrize(
    ("current", "leader_leo", "isr", "leos", "expected"),
    [
        (0, 10, [1], {}, 10),  # alone in the ISR: HW = own LEO
        (0, 10, [1, 2, 3], {"b2": 7, "b3": 9}, 7),  # min LEO over the ISR
        (5, 10, [1, 2], {"b2": 3}, 5),  # never moves back
        (0, 10, [1, 2], {"b2": -1}, 0),  # an ISR follower not yet heard from holds it
        (0, 10, [1, 2], {"b2": 12}, 10),  # a follower cannot be ahead of the leader's LEO
        (0, 10, [1, 2], {"b2": 4, "b3": 1}, 4),  # a follower outside the ISR does not count
    ],
)
def test_leader_high_watermark_is_min_leo_over_isr_and_never_moves_back(
    current: int, leader_leo: int, isr: list[int], leos: dict[str, int], expected: int
) -> None:
    assert new_leader_high_watermark(current, leader_leo, isr, 1, _followers(**leos)) == expected


def test_follower_high_watermark_is_min_of_own_leo_and_leaders_hw() -> None:
    assert follower_high_watermark(10, 7) == 7
    assert follower_high_watermark(5, 7) == 5


def test_caught_up_time_follows_kafkas_two_rules() -> None:
    """Caught up at fetch time when fetching the leader's LEO; caught up as of the previous
    fetch when fetching at least the leader's LEO of that previous fetch (slow, not stuck)."""
    state = FollowerState(2)
    record_follower_fetch(state, fetch_offset=10, leader_log_end_offset=10, now_ms=1000)
    assert state.last_caught_up_time_ms == 1000
    record_follower_fetch(state, fetch_offset=10, leader_log_end_offset=20, now_ms=2000)
    assert state.last_caught_up_time_ms == 1000  # behind the current LEO
    record_follower_fetch(state, fetch_offset=20, leader_log_end_offset=30, now_ms=3000)
    assert state.last_caught_up_time_ms == 2000  # reached the LEO it saw at the last fetch
    record_follower_fetch(state, fetch_offset=21, leader_log_end_offset=40, now_ms=4000)
    assert state.last_caught_up_time_ms == 2000  # stuck short of it: no progress credited


def test_out_of_sync_replicas_are_those_not_caught_up_within_the_lag_time() -> None:
    followers = {
        2: FollowerState(2, log_end_offset=10, last_caught_up_time_ms=0),
        3: FollowerState(3, log_end_offset=5, last_caught_up_time_ms=0),
        4: FollowerState(4, log_end_offset=5, last_caught_up_time_ms=25_000),
    }
    out = out_of_sync_replicas(
        [1, 2, 3, 4],
        1,
        leader_log_end_offset=10,
        followers=followers,
        now_ms=31_000,
        lag_time_max_ms=30_000,
    )
    # 2 is at the LEO (not lagging); 4 caught up 6 s ago; 3 is stuck for 31 s.
    assert out == {3}


def test_a_follower_rejoins_the_isr_at_the_hw_and_the_leader_epoch_start() -> None:
    assert can_join_isr(
        FollowerState(2, log_end_offset=10), high_watermark=10, leader_epoch_start_offset=8
    )
    assert not can_join_isr(
        FollowerState(2, log_end_offset=9), high_watermark=10, leader_epoch_start_offset=8
    )
    assert not can_join_isr(
        FollowerState(2, log_end_offset=10), high_watermark=5, leader_epoch_start_offset=12
    )


@pytest.mark.parametrize(
    ("case", "leader_epoch", "leader_end", "local_for_epoch", "leo", "hw", "expected"),
    [
        # Same epoch on both sides: the logs agree up to where the first of them ends it.
        ("same-epoch-leader-shorter", 3, 100, (3, 120), 120, 90, (100, True)),
        ("same-epoch-follower-shorter", 3, 100, (3, 80), 80, 70, (80, True)),
        # KIP-101 case 1: the follower's HW lags (it has 100 but HW 90); truncating to the HW
        # would lose acknowledged data. By epoch: nothing to truncate.
        ("kip101-hw-lag-no-loss", 3, 100, (3, 100), 100, 90, (100, True)),
        # KIP-101 case 2 / KIP-279: the follower wrote in epoch 4 that the leader never had;
        # the leader answers epoch 3 ending at 100; the follower's epoch 3 ends at 95.
        ("kip279-diverged-later-epoch", 3, 100, (3, 95), 110, 60, (95, True)),
        # The follower's largest epoch <= the answer is another one: cut and ask again.
        ("intermediate", 5, 200, (4, 150), 180, 100, (150, False)),
        # No epochs on the leader side: fall back to the HW.
        ("no-leader-epochs", -1, -1, (-1, -1), 50, 30, (30, True)),
        # The follower knows no epoch that old: trust the leader's end offset.
        ("follower-knows-none", 2, 40, (-1, -1), 70, 10, (40, True)),
    ],
)
def test_truncation_point_follows_kip101_and_kip279(  # noqa: PLR0917 - parametrize columns
    case: str,
    leader_epoch: int,
    leader_end: int,
    local_for_epoch: tuple[int, int],
    leo: int,
    hw: int,
    expected: tuple[int, bool],
) -> None:
    decision = truncation_decision(
        leader_epoch=leader_epoch,
        leader_end_offset=leader_end,
        local_end_for_leader_epoch=local_for_epoch,
        local_log_end_offset=leo,
        local_high_watermark=hw,
    )
    assert (decision.offset, decision.completed) == expected, case


def test_truncation_never_goes_to_the_local_hw_while_epochs_exist() -> None:
    """The bug KIP-101 fixed: truncating to a lagging HW drops acknowledged records."""
    for hw in range(0, 100, 7):
        decision = truncation_decision(
            leader_epoch=1,
            leader_end_offset=100,
            local_end_for_leader_epoch=(1, 100),
            local_log_end_offset=100,
            local_high_watermark=hw,
        )
        assert decision.offset == 100


@pytest.mark.parametrize(
    ("leader_start", "starts", "dead", "expected"),
    [
        (10, {2: 10, 3: 10}, set(), 10),  # everyone moved
        (10, {2: 4, 3: 10}, set(), 4),  # the smallest live replica's start
        (10, {2: -1, 3: 10}, set(), -1),  # a follower not heard from holds it at unknown
        (10, {2: 4, 3: 10}, {2}, 10),  # a follower on a dead broker does not count
        (3, {2: 10}, set(), 3),  # the leader's own start counts too
    ],
)
def test_low_watermark_is_min_log_start_over_the_leader_and_live_followers(
    leader_start: int, starts: dict[int, int], dead: set[int], expected: int
) -> None:
    """Kafka's lowWatermarkIfLeader: every replica on a live broker, ISR member or not."""
    followers = [FollowerState(b, log_start_offset=s) for b, s in starts.items()]
    assert low_watermark(leader_start, followers, lambda b: b not in dead) == expected
