"""The history checker (faults/checker.py) on hand-made histories: a clean run checks ok, and each
history that holds exactly one kind of anomaly is caught and named — the checker is what every
failure-injection verdict rests on, so each rule has a history that trips it."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.faults.checker import CheckReport, Violation, check
from kafkasim.faults.history import FaultEvent, History, Op, OpType, ReplicaSample
from tests.cli_run import kafkasim as run_kafkasim

kafkasim = functools.partial(run_kafkasim, timeout=120)

T, P = "t", 0
BROKERS = (1, 2, 3)


def sends(
    value: str,
    offset: int | None,
    *,
    time_ms: int,
    outcome: OpType = OpType.OK,
    process: str = "producer-1",
    idempotent: bool = True,
    acks: str = "all",
) -> list[Op]:
    """An invoke and its completion."""
    invoke = Op(OpType.INVOKE, "send", process, time_ms, T, P, value, idempotent=idempotent)
    invoke = replace(invoke, acks=acks)
    done = replace(invoke, type=outcome, time_ms=time_ms + 1)
    if outcome is OpType.OK:
        done = replace(done, offset=offset)
    else:
        done = replace(done, error="REQUEST_TIMED_OUT")
    return [invoke, done]


def read(value: str, offset: int, hw: int, time_ms: int, process: str = "consumer-1") -> Op:
    return Op(OpType.OK, "read", process, time_ms, T, P, value, offset=offset, hw=hw)


def sample(
    time_ms: int,
    broker: int,
    hw: int,
    *,
    leader: int = 1,
    epoch: int = 1,
    isr: tuple[int, ...] = BROKERS,
    is_leader: bool | None = None,
    fetched: int | None = None,
    registration: int | None = None,
) -> ReplicaSample:
    return ReplicaSample(
        time_ms=time_ms,
        broker=broker,
        topic=T,
        partition=P,
        is_leader=broker == leader if is_leader is None else is_leader,
        leader=leader,
        leader_epoch=epoch,
        high_watermark=hw,
        log_end_offset=hw,
        isr=isr,
        replicas=BROKERS,
        fetched_leader_epoch=fetched,
        broker_epoch=registration,
    )


def history(
    sent: Sequence[str] = ("a", "b", "c", "d", "e"),
    log: Sequence[str] | None = None,
    *,
    idempotent: bool = True,
) -> History:
    """A clean run by default: one producer sends ``sent`` in order; the log holds ``log``
    (default: the same order) on every replica, all committed and all read back; the leader's
    HW rises to the end and the followers trail it."""
    log = list(sent) if log is None else list(log)
    h = History(meta={"scenario": "hand-made"})
    for i, value in enumerate(sent):
        h.ops.extend(sends(value, log.index(value), time_ms=10 * i, idempotent=idempotent))
    h.ops.extend(read(value, offset, len(log), 1000 + offset) for offset, value in enumerate(log))
    for step, hw in enumerate(range(len(log) + 1)):
        h.samples.extend(sample(100 * step, broker, hw) for broker in BROKERS)
    h.faults.append(FaultEvent(start_ms=50, action="crash", target="broker-3", end_ms=None))
    for broker in BROKERS:
        h.final_logs[(T, P, broker)] = list(enumerate(log))
    h.final_hw[(T, P)] = len(log)
    return h


def invariants(report: CheckReport) -> list[int]:
    return sorted(v.invariant for v in report.invariant_violations)


def only_anomaly(report: CheckReport, *kinds: str) -> None:
    """Exactly these kinds of anomaly were found (count names of CheckReport.counts)."""
    counts = {k: v for k, v in report.counts().items() if k not in ("acknowledged", "read")}
    assert {k for k, v in counts.items() if v} == set(kinds), counts


def test_a_clean_history_checks_ok_and_says_safe() -> None:
    report = check(history())
    assert report.ok
    assert report.verdict_lines()[0] == (
        "VERDICT: SAFE — 5 acknowledged, 5 read back, 0 lost, 0 duplicated, 0 unexpected, "
        "0 reordered, 0 invariant violations"
    )
    assert report.verdict_lines()[1].startswith("t-0: ok — leader 1, HW 5, 5 acknowledged")
    partition = report.partitions[(T, P)]
    assert (partition.leader, partition.final_hw) == (1, 5)


def test_an_acknowledged_send_missing_from_the_final_state_is_lost() -> None:
    h = history()
    h.ops.extend(sends("z", 5, time_ms=500))
    report = check(h)
    only_anomaly(report, "lost")
    lost = report.partitions[(T, P)].lost
    assert [(x.value, x.offset, x.process) for x in lost] == [("z", 5, "producer-1")]
    assert report.verdict == "DATA LOST" and not report.ok
    assert "'z' acknowledged at offset 5 to producer-1" in "\n".join(report.verdict_lines())


def test_an_acknowledged_value_read_once_but_gone_from_the_log_is_lost() -> None:
    """What counts is the final log (what a consumer gets from now on): a record a consumer
    saw that the log no longer has is lost all the same."""
    h = history()
    h.ops.extend(sends("z", 5, time_ms=500))
    h.ops.append(read("z", 5, 6, 2000))
    report = check(h)
    assert [r.value for r in report.partitions[(T, P)].lost] == ["z"]
    assert report.verdict == "DATA LOST"


def test_without_captured_logs_the_reads_stand_for_the_final_state() -> None:
    h = history()
    h.final_logs.clear()
    h.ops.extend(sends("z", 5, time_ms=500))
    h.ops.append(read("z", 5, 6, 2000))
    assert check(h).lost == 0


@pytest.mark.parametrize(
    ("outcome", "in_log"),
    [(OpType.INFO, False), (OpType.INFO, True), (OpType.FAIL, False)],
    ids=["info-absent", "info-present", "fail-absent"],
)
def test_sends_of_unknown_or_failed_outcome_are_never_lost(outcome: OpType, in_log: bool) -> None:
    h = history(log=["a", "b", "c", "d", "e", "z"] if in_log else None)
    h.ops.extend(sends("z", None, time_ms=45, outcome=outcome))
    report = check(h)
    assert report.ok, report.verdict_lines()
    assert report.lost == 0 and report.acknowledged == 5


def test_an_acks_0_send_is_never_acknowledged_so_never_lost() -> None:
    h = history()
    h.ops.extend(sends("z", None, time_ms=45, acks="0"))
    report = check(h)
    assert report.ok and report.acknowledged == 5


def test_a_committed_value_that_was_never_sent_is_unexpected() -> None:
    h = history()
    for broker in BROKERS:
        h.final_logs[(T, P, broker)].append((5, "ghost"))
    h.final_hw[(T, P)] = 6
    report = check(h)
    only_anomaly(report, "unexpected")
    [ghost] = report.partitions[(T, P)].unexpected
    assert (ghost.value, ghost.offset, ghost.source) == ("ghost", 5, "log")
    assert report.verdict == "ANOMALIES"


def test_a_read_of_a_value_never_sent_is_unexpected_and_names_the_reader() -> None:
    h = history()
    h.ops.append(read("ghost", 5, 6, 2000, process="consumer-9"))
    report = check(h)
    only_anomaly(report, "unexpected")
    assert report.partitions[(T, P)].unexpected[0].source == "consumer-9"


def test_a_duplicate_from_an_idempotent_producer_violates_invariant_7() -> None:
    h = history(log=["a", "b", "c", "d", "e", "c"])
    report = check(h)
    assert report.duplicated == 1
    [dup] = report.partitions[(T, P)].duplicates
    assert (dup.value, dup.offsets, dup.process, dup.idempotent) == (
        "c",
        (2, 5),
        "producer-1",
        True,
    )
    assert invariants(report) == [7]
    assert not report.ok and report.verdict == "INVARIANT VIOLATED"
    assert report.lost == report.unexpected == report.reordered == 0


def test_a_duplicate_from_a_non_idempotent_producer_is_reported_but_allowed() -> None:
    h = history(log=["a", "b", "c", "d", "e", "c"], idempotent=False)
    report = check(h)
    assert report.duplicated == 1 and not report.partitions[(T, P)].duplicates[0].idempotent
    assert report.invariant_violations == []
    assert report.ok
    assert "1 duplicated (1 by non-idempotent producers, allowed)" in report.verdict_lines()[0]


def test_a_duplicate_seen_by_a_read_above_the_final_hw_is_a_duplicate() -> None:
    h = history()
    h.ops.append(read("c", 5, 6, 3000, process="consumer-2"))
    report = check(h)
    only_anomaly(report, "duplicated", "invariant_violations")
    assert report.partitions[(T, P)].duplicates[0].offsets == (2, 5)
    assert invariants(report) == [7]


def test_an_idempotent_producers_values_out_of_send_order_are_reordered() -> None:
    report = check(history(log=["a", "c", "b", "d", "e"]))
    only_anomaly(report, "reordered")
    [r] = report.partitions[(T, P)].reordered
    assert (r.process, r.earlier_value, r.earlier_offset, r.later_value, r.later_offset) == (
        "producer-1",
        "b",
        2,
        "c",
        1,
    )
    assert r.idempotent and not report.ok and report.verdict == "ANOMALIES"


def test_a_non_idempotent_producers_reordering_is_reported_but_allowed() -> None:
    report = check(history(log=["a", "c", "b", "d", "e"], idempotent=False))
    assert report.reordered == 1 and report.ok
    assert "1 reordered (1 by non-idempotent producers, allowed)" in report.verdict_lines()[0]


def test_values_of_different_producers_may_interleave_in_any_order() -> None:
    h = history(sent=["a", "b"], log=["b", "a"])
    h.ops = [replace(op, process="producer-2") if op.value == "a" else op for op in h.ops]
    assert check(h).ok


def test_a_read_at_or_above_the_fetchs_hw_violates_invariant_3() -> None:
    h = history()
    h.ops.append(read("e", 4, 4, 3000, process="consumer-2"))
    report = check(h)
    only_anomaly(report, "read_beyond_hw", "invariant_violations")
    [beyond] = report.partitions[(T, P)].read_beyond_hw
    assert (beyond.process, beyond.offset, beyond.hw) == ("consumer-2", 4, 4)
    assert invariants(report) == [3]


def test_a_read_record_overwritten_in_the_final_log_is_a_divergent_read() -> None:
    """acks=1 losing a record after a consumer saw it: the offset now holds another value,
    and the record is lost from the log; the verdict says both."""
    h = history(sent=["b"])
    h.ops[:0] = sends("a", 0, time_ms=-20, acks="1")  # 'a' was acknowledged at offset 0 ...
    h.ops.insert(2, read("a", 0, 1, -10))  # ... and read there before the leader crashed
    report = check(h)
    assert [r.value for r in report.partitions[(T, P)].lost] == ["a"]
    [d] = report.partitions[(T, P)].divergent_reads
    assert (d.offset, d.value, d.log_value) == (0, "a", "b")
    assert report.verdict == "DATA LOST" and not report.ok


def test_a_gap_in_a_replica_log_violates_invariant_1() -> None:
    h = history()
    h.ops.extend(sends("f", None, time_ms=45, outcome=OpType.INFO))
    h.final_logs[(T, P, 1)].append((6, "f"))  # offset 5 missing (above the HW: no invariant 5)
    report = check(h)
    assert invariants(report) == [1]
    assert "gap: offsets 5..5 missing between 4 and 6" in report.invariant_violations[0].detail


def test_offsets_that_do_not_increase_violate_invariant_1() -> None:
    h = history()
    h.final_logs[(T, P, 3)] = [(0, "a"), (1, "b"), (1, "c"), (3, "d")]
    h.samples = [s for s in h.samples if s.broker != 3]
    h.samples = [replace(s, isr=(1, 2)) for s in h.samples]
    report = check(h)
    assert invariants(report) == [1, 1]


def test_a_leaders_hw_moving_backwards_within_an_epoch_violates_invariant_2() -> None:
    h = history()
    h.samples.append(sample(900, 1, 3))
    report = check(h)
    # The leader's own regression, and its followers of 500 ms above its HW at 900 ms.
    assert set(invariants(report)) == {2}
    details = [v.detail for v in report.invariant_violations]
    assert any("HW went back from 5 (500 ms) to 3 (900 ms)" in d for d in details), details


def test_a_new_leader_epoch_may_start_from_a_lower_hw() -> None:
    h = history()
    h.samples.append(sample(900, 2, 3, leader=2, epoch=2))
    h.samples.append(sample(900, 1, 3, leader=2, epoch=2))
    assert check(h).ok


def test_a_follower_hw_above_its_leaders_violates_invariant_2() -> None:
    h = history()
    h.samples.append(sample(900, 2, 6))
    h.samples.append(sample(901, 1, 5))
    report = check(h)
    assert invariants(report) == [2]
    detail = report.invariant_violations[0].detail
    assert "follower 2's HW 6 at 900 ms is above its leader's 5 at 901 ms" in detail


def test_a_leader_sampled_in_the_followers_millisecond_may_have_been_asked_first() -> None:
    """The sampler asks one broker after the other: the leader's sample of the same
    millisecond may predate the HW the follower then reports (leader-crash seed 12 with
    hw_ignores_followers: the leader's HW moved at its append and reached the follower within
    the millisecond). Only the leader's next sample in a later millisecond judges it."""
    h = history()
    h.samples.append(sample(900, 1, 5))
    h.samples.append(sample(900, 2, 6))
    assert check(h).ok
    h.samples.append(sample(901, 1, 6))
    assert check(h).ok
    h.samples[-1] = sample(901, 1, 5)
    assert invariants(check(h)) == [2]


def test_a_follower_hw_is_held_against_the_leaders_next_sample_of_its_epoch() -> None:
    """Brokers are sampled one after another: a follower at 900 ms above the leader's HW at
    950 ms was above it at 900 ms too (a leader's HW only grows within an epoch)."""
    h = history()
    h.samples.append(sample(900, 2, 6))
    h.samples.append(sample(950, 1, 5))
    assert invariants(check(h)) == [2]


def test_a_deposed_leader_is_not_judged_before_its_first_fetch_in_the_new_epoch() -> None:
    """Seed 141 of leader-crash's random schedules: the leader of epoch 1 (broker 1 here)
    announced HW 5, its follower 3 had learnt 4 when it took over in epoch 2; until broker 1
    fetches in epoch 2, Kafka leaves it the HW of epoch 1 (makeFollower keeps it), and so it
    does broker 2, which last fetched in epoch 1. Once a follower has fetched in epoch 2, it
    is held to its leader's HW; a sample that does not say is judged as before."""

    def epoch_2(fetched_1: int | None, fetched_2: int | None) -> History:
        h = history()
        h.samples.append(sample(950, 1, 5, leader=3, epoch=2, fetched=fetched_1))
        h.samples.append(sample(950, 2, 5, leader=3, epoch=2, fetched=fetched_2))
        h.samples.append(sample(951, 3, 4, leader=3, epoch=2, fetched=1))
        return h

    assert check(epoch_2(-1, 1)).ok
    report = check(epoch_2(-1, 2))
    assert invariants(report) == [2]
    detail = report.invariant_violations[0].detail
    assert "follower 2's HW 5 at 950 ms is above its leader's 4 at 951 ms (leader epoch 2)" in (
        detail
    )
    assert invariants(check(epoch_2(None, None))) == [2, 2]


def test_a_leader_restarted_within_its_epoch_may_announce_a_lower_hw() -> None:
    """Seed 50 of the short follower-slow-fetch sweep: every broker crashed at once and came
    back after its session expired, so no controller saw leader 1 die; the next controller's
    failover handed it epoch 1 again, and it restarted from its checkpointed HW (0). Its new
    registration (broker epoch) makes that a new series; within one registration the HW must
    still grow. Followers sampled before the restart, above what the restarted leader says,
    are not judged (their HW came from its earlier registration)."""
    h = history()
    h.samples[:] = [replace(s, broker_epoch=10 * s.broker) for s in h.samples]  # up to 500 ms
    h.samples.append(sample(900, 1, 0, registration=99))
    h.samples.append(sample(1000, 1, 2, registration=99))
    h.samples.append(sample(1000, 2, 5, registration=20))  # not fetched from it since
    assert check(h).ok
    h.samples.append(sample(1100, 1, 1, registration=99))
    report = check(h)
    assert invariants(report) == [2]
    assert "HW went back from 2 (1000 ms) to 1 (1100 ms) within leader epoch 1" in (
        report.invariant_violations[0].detail
    )
    same_registration = history()
    same_registration.samples.append(sample(900, 1, 0))
    # The leader going back, and its followers of 500 ms above its HW at 900 ms.
    assert set(invariants(check(same_registration))) == {2}


def test_a_follower_sample_after_the_leaders_last_one_is_not_judged() -> None:
    h = history()
    h.samples.append(sample(900, 2, 6))  # the leader may well have reached 6 by then
    assert check(h).ok


def test_a_leader_outside_its_isr_violates_invariant_4_once() -> None:
    h = history()
    h.samples.extend(sample(t, 1, 5, isr=(2, 3)) for t in (900, 1000, 1100))
    report = check(h)
    assert invariants(report) == [4]
    assert "leader not in ISR (2, 3)" in report.invariant_violations[0].detail


def test_an_isr_outside_the_replicas_violates_invariant_4() -> None:
    h = history()
    h.samples.append(sample(900, 1, 5, isr=(1, 2, 7)))
    assert invariants(check(h)) == [4]


def test_a_leader_epoch_going_backwards_violates_invariant_4() -> None:
    h = history()
    h.samples.append(sample(900, 1, 5, epoch=2))
    h.samples.append(sample(1000, 1, 5, epoch=1))
    report = check(h)
    assert invariants(report) == [4]
    assert "leader epoch went back from 2" in report.invariant_violations[0].detail


def test_two_leaders_of_one_epoch_violate_invariant_4() -> None:
    h = history()
    h.samples.append(sample(900, 2, 5, leader=2, epoch=1))
    assert invariants(check(h)) == [4]


def test_a_deposed_leader_still_reporting_its_old_epoch_is_not_a_violation() -> None:
    """Kafka's zombie leader, cut off from ZooKeeper: fenced by the epoch, not a bug."""
    h = history()
    h.samples.append(sample(900, 2, 5, leader=2, epoch=2, isr=(2, 3)))
    h.samples.append(sample(900, 1, 5, leader=1, epoch=1))
    assert check(h).ok


def test_an_isr_member_diverging_below_the_hw_violates_invariant_5() -> None:
    h = history()
    h.final_logs[(T, P, 2)][2] = (2, "X")
    report = check(h)
    assert invariants(report) == [5]
    detail = report.invariant_violations[0].detail
    assert "broker 2 (in the final ISR (1, 2, 3)) disagrees with leader 1 below HW 5" in detail
    assert "first at offset 2: it holds 'X', the leader 'c'" in detail


def test_a_replica_outside_the_final_isr_may_diverge() -> None:
    h = history()
    h.final_logs[(T, P, 3)] = [(0, "a"), (1, "Y")]
    h.samples = [replace(s, isr=(1, 2)) for s in h.samples]
    assert check(h).ok


def test_the_final_leader_is_the_last_samples_leader_even_with_a_shorter_log() -> None:
    """An unclean election: broker 2 lagged, yet leads at the end; what it lacks is lost."""
    h = history()
    h.ops = [op for op in h.ops if op.f == "send"]
    h.final_logs[(T, P, 2)] = h.final_logs[(T, P, 2)][:3]
    h.samples.append(sample(900, 2, 3, leader=2, epoch=2, isr=(2,)))
    h.final_hw[(T, P)] = 3
    report = check(h)
    assert report.partitions[(T, P)].leader == 2
    only_anomaly(report, "lost")
    assert [x.value for x in report.partitions[(T, P)].lost] == ["d", "e"]


def test_without_samples_the_log_holding_most_below_the_hw_leads() -> None:
    h = history()
    h.samples = []
    h.final_logs[(T, P, 1)] = h.final_logs[(T, P, 1)][:2]
    assert check(h).partitions[(T, P)].leader == 2


def test_examples_are_bounded_in_the_text_but_complete_in_the_report() -> None:
    h = history()
    for i in range(25):
        h.ops.extend(sends(f"z{i}", 5 + i, time_ms=500 + i))
    report = check(h)
    assert len(report.partitions[(T, P)].lost) == 25
    text = report.verdict_lines()
    assert sum(1 for line in text if "acknowledged at offset" in line) == 10
    assert "    … and 15 more" in text


def test_a_history_survives_write_and_read(tmp_path: Path) -> None:
    h = history(log=["a", "c", "b", "d", "e"])
    h.ops.extend(sends("z", None, time_ms=45, outcome=OpType.INFO, acks="1"))
    path = tmp_path / "history.jsonl"
    h.write(path)
    back = History.read(path)
    assert back == h
    assert check(back).to_dict() == check(h).to_dict()


def test_a_large_clean_history_checks_in_one_pass() -> None:
    """10^5 values (3 * 10^5 ops): a quadratic scan would not finish."""
    n = 100_000
    h = History()
    log = [f"v{i}" for i in range(n)]
    for i, value in enumerate(log):
        h.ops.extend(sends(value, i, time_ms=i, process=f"producer-{i % 4}"))
        h.ops.append(read(value, i, n, n + i))
    for broker in BROKERS:
        h.final_logs[(T, P, broker)] = list(enumerate(log))
        h.samples.append(sample(0, broker, n))
    h.final_hw[(T, P)] = n
    report = check(h)
    assert report.ok and report.acknowledged == report.read == n


# -- property: any history of a correct partition checks ok -----------------------------------


@st.composite
def correct_partitions(draw: st.DrawFn) -> History:
    """A model of a correct partition: producers' values are appended in send order; every
    acknowledged value is committed (below the HW); values of unknown outcome may or may not
    be appended; consumers read prefixes below the HW of their fetch; leader HW only grows and
    followers trail it; ISR followers hold a prefix of the leader's log at least up to the HW."""
    producers = draw(st.integers(1, 3))
    idempotent = [draw(st.booleans()) for _ in range(producers)]
    acks = [draw(st.sampled_from(["1", "all", "0"])) for _ in range(producers)]
    n = draw(st.integers(0, 30))
    h = History()
    log: list[str] = []
    last_acked = 0
    for i in range(n):
        value, producer = f"v{i}", draw(st.integers(0, producers - 1))
        outcome = draw(st.sampled_from([OpType.OK, OpType.OK, OpType.INFO, OpType.FAIL]))
        appended = outcome is OpType.OK or (outcome is OpType.INFO and draw(st.booleans()))
        offset = len(log) if appended else None
        if appended:
            log.append(value)
        if outcome is OpType.OK:
            last_acked = len(log)
        h.ops.extend(
            sends(
                value,
                offset,
                time_ms=i,
                outcome=outcome,
                process=f"producer-{producer}",
                idempotent=idempotent[producer],
                acks=acks[producer],
            )
        )
    hw = draw(st.integers(last_acked, len(log)))
    for reader in range(draw(st.integers(0, 2))):
        fetch_hw = draw(st.integers(0, hw))
        upto = draw(st.integers(0, fetch_hw))
        h.ops.extend(read(log[o], o, fetch_hw, 100 + o, f"consumer-{reader}") for o in range(upto))
    hws = [*sorted(draw(st.lists(st.integers(0, hw), max_size=5))), hw]
    for t, leader_hw in enumerate(hws):
        h.samples.append(sample(1000 + t, 1, leader_hw))
        for follower in (2, 3):
            h.samples.append(sample(1000 + t, follower, draw(st.integers(0, leader_hw))))
    h.final_logs[(T, P, 1)] = list(enumerate(log))
    for follower in (2, 3):
        h.final_logs[(T, P, follower)] = list(enumerate(log[: draw(st.integers(hw, len(log)))]))
    h.final_hw[(T, P)] = hw
    return h


@given(correct_partitions())
def test_any_history_of_a_correct_partition_checks_ok(h: History) -> None:
    report = check(h)
    assert report.ok, report.verdict_lines()
    assert report.lost == report.duplicated == report.reordered == 0


# -- the command --------------------------------------------------------------------------------


def test_check_command_exits_0_on_a_clean_history(tmp_path: Path) -> None:
    path = tmp_path / "clean.jsonl"
    history().write(path)
    out = kafkasim("check", str(path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("VERDICT: SAFE — 5 acknowledged, 5 read back, 0 lost")


def test_check_command_exits_1_on_lost_data_in_text_and_json(tmp_path: Path) -> None:
    h = history()
    h.ops.extend(sends("z", 5, time_ms=500))
    path = tmp_path / "lossy.jsonl"
    h.write(path)
    out = kafkasim("check", str(path))
    assert out.returncode == 1, out.stderr
    assert out.stdout.startswith("VERDICT: DATA LOST — 6 acknowledged, 5 read back, 1 lost")
    out = kafkasim("check", str(path), "--json")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert report["verdict"] == "DATA LOST" and report["ok"] is False
    assert report["partitions"][0]["lost"][0]["value"] == "z"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"kind": "meta"}\n{"kind": "op", "type": "ok"\n', r"malformed\.jsonl:2: not a history"),
        ('{"kind": "nonsense"}\n', r"malformed\.jsonl:1: not a history line \(unknown kind"),
        (None, r"cannot read .*malformed\.jsonl: No such file or directory"),
    ],
    ids=["truncated-json", "unknown-kind", "missing"],
)
def test_check_command_exits_2_with_one_line_on_an_unreadable_file(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "malformed.jsonl"
    if content is not None:
        path.write_text(content)
    out = kafkasim("check", str(path))
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("kafkasim check: error: ")
    assert re.search(message, lines[0]), lines[0]


def test_violation_reads_as_a_sentence() -> None:
    assert str(Violation(4, "t", 0, "x")) == "invariant 4 on t-0: x"


def test_a_samples_fetched_epoch_is_written_and_read_back_and_old_samples_as_before() -> None:
    h = History(meta={"scenario": "hand-made"})
    h.samples.append(sample(950, 2, 5, leader=1, epoch=2, fetched=-1, registration=37))
    h.samples.append(sample(960, 2, 5, leader=1, epoch=2))  # a sample that does not say
    lines = list(h.lines())
    assert '"fetched_leader_epoch": -1' in lines[1]
    assert '"broker_epoch": 37' in lines[1]
    assert "fetched_leader_epoch" not in lines[2]  # written as before the field existed
    assert "broker_epoch" not in lines[2]
    again = History.parse(lines)
    assert again.samples == h.samples
    assert list(again.lines()) == lines
