"""What the report draws, derived from small hand-made histories: who led when, unclean
elections, ISR steps, truncations (sampled and inferred), lost ranges, fault lanes and
throughput per second."""

from __future__ import annotations

import pytest

from kafkasim.faults.history import FaultEvent, History, Op, OpType, ReplicaSample
from kafkasim.faults.report_series import (
    FaultWindow,
    IsrStep,
    LeaderInterval,
    OffsetRange,
    Truncation,
    UncleanElection,
    derive,
    fault_lanes,
    isr_steps,
    leader_intervals,
    offset_ranges,
    partition_series,
    sample_period_ms,
)
from kafkasim.faults.verdict import CheckReport, LostRecord, PartitionReport

REPLICAS = (1, 2, 3)


def sample(time_ms: int, broker: int, *, leader: int, epoch: int, isr: tuple[int, ...],
           hw: int = 0, leo: int = 0) -> ReplicaSample:  # fmt: skip
    return ReplicaSample(
        time_ms, broker, "t", 0, broker == leader, leader, epoch, hw, leo, isr, REPLICAS
    )


def test_a_leadership_runs_from_its_first_to_its_last_sighting_plus_one_sampling_period() -> None:
    samples = [
        sample(0, 1, leader=1, epoch=0, isr=(1, 2, 3)),
        sample(500, 1, leader=1, epoch=0, isr=(1, 2, 3)),
        sample(3000, 2, leader=2, epoch=1, isr=(2, 3)),
        sample(3500, 2, leader=2, epoch=1, isr=(2, 3)),
    ]
    leaders, unclean = leader_intervals(samples, period=500)
    # The last leadership stops at the last sample: the history says nothing after it.
    assert leaders == (LeaderInterval(1, 0, 0, 1000), LeaderInterval(2, 1, 3000, 3500))
    assert unclean == ()


def test_a_leadership_is_never_drawn_past_the_start_of_a_later_epoch() -> None:
    samples = [
        sample(0, 1, leader=1, epoch=0, isr=(1, 2)),
        sample(200, 2, leader=2, epoch=1, isr=(2,)),
    ]
    leaders, _ = leader_intervals(samples, period=500)
    assert leaders[0] == LeaderInterval(1, 0, 0, 200)


def test_a_leader_from_outside_the_previous_leader_s_last_isr_is_an_unclean_election() -> None:
    samples = [
        sample(0, 1, leader=1, epoch=0, isr=(1, 2)),
        sample(500, 1, leader=1, epoch=0, isr=(1,)),  # 2 dropped out of the ISR
        # 2, isolated, still believes the old ISR: its view is not the leader's
        sample(600, 2, leader=1, epoch=0, isr=(1, 2)),
        sample(5000, 2, leader=2, epoch=1, isr=(2,)),
    ]
    leaders, unclean = leader_intervals(samples, period=500)
    assert unclean == (UncleanElection(5000, 2, 1, (1,)),)
    assert [i.unclean for i in leaders] == [False, True]


def test_a_leader_from_the_isr_is_a_clean_election() -> None:
    samples = [
        sample(0, 1, leader=1, epoch=0, isr=(1, 2)),
        sample(5000, 2, leader=2, epoch=1, isr=(2,)),
    ]
    assert leader_intervals(samples, period=500)[1] == ()


def test_a_zombie_leader_overlaps_the_new_one_and_its_stale_isr_is_no_step() -> None:
    samples = [
        sample(0, 1, leader=1, epoch=0, isr=(1, 2, 3)),
        sample(1000, 2, leader=2, epoch=1, isr=(2, 3)),
        sample(1500, 1, leader=1, epoch=0, isr=(1, 2, 3)),  # cut off, still says epoch 0
        sample(2000, 2, leader=2, epoch=1, isr=(1, 2, 3)),
    ]
    leaders, _ = leader_intervals(samples, period=500)
    assert {(i.broker, i.leader_epoch) for i in leaders} == {(1, 0), (2, 1)}
    assert isr_steps(samples) == (
        IsrStep(0, 0, (1, 2, 3)),
        IsrStep(1000, 1, (2, 3)),
        IsrStep(2000, 1, (1, 2, 3)),
    )


def test_the_isr_is_one_step_per_change_of_membership_not_of_size() -> None:
    samples = [
        sample(0, 1, leader=1, epoch=0, isr=(1, 2)),
        sample(500, 1, leader=1, epoch=0, isr=(1, 2)),
        sample(1000, 1, leader=1, epoch=0, isr=(1, 3)),  # same size, other member
        sample(1000, 2, leader=1, epoch=0, isr=(1,)),  # a follower's view: no step
    ]
    assert isr_steps(samples) == (IsrStep(0, 0, (1, 2)), IsrStep(1000, 0, (1, 3)))


def test_a_sampled_fall_of_the_log_end_offset_is_an_observed_truncation() -> None:
    samples = [
        sample(0, 2, leader=1, epoch=0, isr=(1, 2), leo=50),
        sample(500, 2, leader=3, epoch=1, isr=(2, 3), leo=40),
        sample(1000, 2, leader=3, epoch=1, isr=(2, 3), leo=45),
    ]
    series = partition_series("t", 0, samples, None, period=500)
    assert series.truncations == (Truncation(500, 2, 50, 40, observed=True),)


def test_lost_records_are_a_truncation_of_the_leader_that_acknowledged_them() -> None:
    """Broker 1 acknowledged offsets 10..14 while leading epoch 0, crashed, and came back as a
    follower of epoch 1, catching up between two samples: the cut is inferred from the loss."""
    samples = [
        sample(0, 1, leader=1, epoch=0, isr=(1, 2), leo=5),
        sample(500, 1, leader=1, epoch=0, isr=(1, 2), leo=13),
        sample(1000, 2, leader=2, epoch=1, isr=(2,), leo=10),
        sample(3000, 1, leader=2, epoch=1, isr=(2,), leo=30),  # already caught up
    ]
    verdict = PartitionReport("t", 0, leader=2, final_hw=30)
    verdict.lost = [LostRecord(f"v{o}", "p1", o, 400 + o) for o in range(10, 15)]
    series = partition_series("t", 0, samples, verdict, period=500)
    assert series.truncations == (Truncation(3000, 1, 15, 10, observed=False),)
    assert series.ranges == (OffsetRange("lost", 10, 14, 5),)


def test_lost_records_of_a_leader_never_seen_again_mark_no_truncation() -> None:
    samples = [
        sample(0, 1, leader=1, epoch=0, isr=(1, 2), leo=13),
        sample(1000, 2, leader=2, epoch=1, isr=(2,), leo=10),
    ]
    verdict = PartitionReport("t", 0, leader=2, final_hw=10)
    verdict.lost = [LostRecord("v12", "p1", 12, 100)]
    assert partition_series("t", 0, samples, verdict, period=500).truncations == ()


@pytest.mark.parametrize(
    ("offsets", "ranges"),
    [
        ([], []),
        ([7], [(7, 7, 1)]),
        ([3, 1, 2, 2], [(1, 3, 3)]),
        ([1, 2, 5, 6, 7, 9], [(1, 2, 2), (5, 7, 3), (9, 9, 1)]),
    ],
)
def test_offsets_make_runs_of_consecutive_offsets(
    offsets: list[int], ranges: list[tuple[int, int, int]]
) -> None:
    assert offset_ranges("lost", offsets) == [OffsetRange("lost", *r) for r in ranges]


def test_overlapping_fault_windows_take_separate_lanes_and_later_ones_reuse_a_free_lane() -> None:
    faults = [
        FaultEvent(8000, "split", "leader", 14000),
        FaultEvent(11000, "crash", "leader", 21000),
        FaultEvent(15000, "pause", "follower", 16000),  # lane 0 is free again at 15 s
        FaultEvent(30000, "kill", "controller"),  # an instant
    ]
    assert [w.lane for w in fault_lanes(faults)] == [0, 1, 0, 0]
    assert fault_lanes(faults)[3] == FaultWindow(30000, None, "kill", "controller", 0)


def test_the_sampling_period_is_the_median_gap_between_samples_of_one_replica() -> None:
    samples = [sample(t, 1, leader=1, epoch=0, isr=(1,)) for t in (0, 400, 900, 1400, 5000)]
    assert sample_period_ms(samples) == 500
    assert sample_period_ms([]) == 500


def test_throughput_counts_acknowledgements_and_reads_per_second_and_the_send_latency() -> None:
    history = History()
    for value, invoked, acked in (("a", 0, 100), ("b", 200, 900), ("c", 1500, 1600)):
        history.add(Op(OpType.INVOKE, "send", "p1", invoked, "t", 0, value))
        history.add(Op(OpType.OK, "send", "p1", acked, "t", 0, value, offset=0))
    history.add(Op(OpType.OK, "read", "c1", 2500, "t", 0, "a", offset=0, hw=1))
    t = derive(history, CheckReport()).throughput
    assert t.seconds == (0, 1, 2)
    assert t.acknowledged == (2, 1, 0)
    assert t.read == (0, 0, 1)
    # second 0: latencies 100 and 700 ms; p50 is the upper median of an even count
    assert t.latency_p50_ms == (700, 100, None)
    assert t.latency_max_ms == (700, 100, None)
