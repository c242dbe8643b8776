"""Seeds that sweeps found, kept as they were found: the scenario, the seed and its random
schedule, run as ``kafkasim sim run SCENARIO --seed N --random-faults`` runs them.

leader-crash, seed 141 (issue 17), now seed 2963: ``expire_session`` of the leader at 2.991 s.
The leader of epoch 0 (broker 2) had announced HW 299; its follower 3 had learnt only 298
when the controller made it leader of epoch 1. The sample at 3035 ms caught broker 2, now a
follower, with HW 299 above its new leader's 298 at 3038 ms: Kafka's own window (makeFollower
keeps the HW; makeLeader forgets what the followers hold, so the new leader's HW waits for
their fetches), not a broker bug. Broker 2 had not fetched in epoch 1 yet; its first fetch
there lowers its HW to the leader's (``tests/unit/node/test_fetcher.py``). The checker once
called it an invariant 2 violation; it now waits for the follower's first fetch in the epoch
(``ReplicaSample.fetched_leader_epoch``). The test also asserts the window is still in the
run, so that it cannot pass by no longer reaching it. Seed 141 found it first (at 2.989 s,
against a leader sample of the same millisecond); when a new controller began sending
UpdateMetadata before LeaderAndIsr (as Kafka's does) and the checker began judging a
follower only against a leader sample of a later millisecond, seed 141 no longer reached it,
and a scan of the seeds 1..3000 with an ``expire_session`` of the leader found 2963.

short follower-slow-fetch, seed 50 (issue 17; ``tests.sweep_scenarios.short``): broker 1, the
leader of epoch 0, crashes at 1.919 s, brokers 2 and 3 at 2.09 s; all three restart within a
second and 1.6 s, before their 3 s sessions expire, and wait for their old registrations to go
(Kafka's broker cannot register over a live node of an older session). No controller was
left to see anyone die, so no leader epoch moved. Broker 1 registers first (6.0 s), becomes
controller, and its failover resends the leadership found in ZooKeeper unchanged (leader 1,
epoch 0): Kafka's ``onControllerFailover`` does the same (the replica state machine's startup
sends each live replica its partition's current LeaderAndIsr; only offline replicas leave the
ISR, which bumps the epoch). Its bounced-broker handling (KIP-380) needs a controller that saw
the old registration. Broker 1 restarted from its checkpointed HW, 0 (it crashed before the
first checkpoint), after announcing 76: Kafka's restarted leader does the same. The checker
once called that invariant 2; it now judges a leader's HW per registration of the leader
(``ReplicaSample.broker_epoch``).

txn-leader-crash, seed 8 (found while sweeping this session's late-delivery scenarios): the
transaction coordinator of p1 and t1 (broker 2) crashes at 3.121 s, right after t1's commit of
its transaction 19 was answered (PrepareCommit in the log, markers not yet written), and the
leader of events-0 (broker 1, the controller) at 5.034 s. Broker 2 comes back, and at 11.257 s
the new controller's failover makes it leader of its transaction log partitions with a
LeaderAndIsr that arrived before its first UpdateMetadata: its metadata cache knew no
partition yet, and the marker channel took shipped-0/1, events-0/1 and __consumer_offsets-45
for deleted topics and dropped the COMMIT markers of two committed transactions. Their records
stayed invisible to read_committed consumers, and t1, which read its input again, wrote them a
second time. A partition the cache does not know yet is now one without a leader
(``MetadataCache.marker_leader``): the markers wait for it.

txn-leader-crash, seed 5 (found by a sweep of seeds 3..10 of the catalog once a new controller
sent UpdateMetadata first): two pauses of p1's transaction coordinator (8.076 s and 8.356 s). The
transformer t1 restarted as ``t1#1`` and resumed each partition from its group's committed
offset: events-0 at 829, before p1's transaction 237's records there, and events-1 at 832,
after its records there (t1's committed transaction 107 had processed them). The checker
called that "committed transaction partly visible": having read the transaction on events-0,
t1#1 was held to its records on events-1 too. It now holds a process that resumed a
partition from the group's offset to the records from that offset on.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from kafkasim.faults import checker, runner, schedules
from kafkasim.faults.history import History
from kafkasim.faults.reading import find, load
from kafkasim.sim.backend import SIM
from tests.sweep_scenarios import short


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)


def run_random(name: str, seed: int, tmp_path: Path) -> History:
    """As ``kafkasim sim run NAME --seed SEED --random-faults``."""
    chosen = schedules.randomize(load(find(name)), random.Random(seed))
    return runner.run(chosen, SIM, tmp_path, seed=seed)


def followers_above_a_leader_before_fetching(history: History) -> list[tuple[int, int, int]]:
    """(time, follower, HW) of each follower sample above the HW of its leader's next sample
    of the same epoch (a later millisecond, as the checker judges it), while the follower
    had not yet fetched in that epoch."""
    leaders: dict[tuple[str, int, int], list[tuple[int, int]]] = {}
    for s in history.samples:
        if s.is_leader:
            leaders.setdefault((s.topic, s.partition, s.leader_epoch), []).append(
                (s.time_ms, s.high_watermark)
            )
    found = []
    for s in history.samples:
        fetched = s.fetched_leader_epoch
        if s.is_leader or fetched is None or fetched >= s.leader_epoch:
            continue
        series = leaders.get((s.topic, s.partition, s.leader_epoch), [])
        later = [hw for time_ms, hw in series if time_ms > s.time_ms]
        if later and s.high_watermark > later[0]:
            found.append((s.time_ms, s.broker, s.high_watermark))
    return found


def test_leader_crash_seed_2963_a_deposed_leaders_hw_above_the_new_leaders_is_safe(
    tmp_path: Path,
) -> None:
    history = run_random("leader-crash", 2963, tmp_path)
    first = history.faults[0]
    assert (first.action, first.start_ms) == ("expire_session", 2991), history.faults
    assert followers_above_a_leader_before_fetching(history) == [(3035, 2, 299)]
    report = checker.check(history)
    assert report.verdict_lines()[0].startswith("VERDICT: SAFE"), report.verdict_lines()
    assert report.ok and report.lost == 0 and report.acknowledged > 0


def test_short_follower_slow_fetch_seed_50_a_leader_restarted_in_its_epoch_is_safe(
    tmp_path: Path,
) -> None:
    chosen = schedules.randomize(short("follower-slow-fetch"), random.Random(50))
    history = runner.run(chosen, SIM, tmp_path, seed=50)
    assert [(f.action, f.start_ms) for f in history.faults[:2]] == [
        ("crash", 1919),
        ("crash", 2090),
    ], history.faults
    leader_1 = [
        (s.broker_epoch, s.high_watermark)
        for s in history.samples
        if s.is_leader and s.broker == 1 and s.leader_epoch == 0 and s.topic == "events"
    ]
    registrations = sorted({epoch for epoch, _ in leader_1 if epoch is not None})
    assert len(registrations) == 2, leader_1  # epoch 0 led by two registrations of broker 1
    before = max(hw for epoch, hw in leader_1 if epoch == registrations[0])
    after = min(hw for epoch, hw in leader_1 if epoch == registrations[1])
    assert after < before, leader_1  # the restarted leader's checkpointed HW is lower
    report = checker.check(history)
    assert report.verdict_lines()[0].startswith("VERDICT: SAFE"), report.verdict_lines()
    assert report.ok and report.lost == 0 and report.acknowledged > 0


def test_txn_leader_crash_seed_8_a_coordinator_without_metadata_yet_keeps_its_markers(
    tmp_path: Path,
) -> None:
    history = run_random("txn-leader-crash", 8, tmp_path)
    assert [(f.action, f.start_ms) for f in history.faults[:2]] == [
        ("crash", 3121),
        ("crash", 5034),
    ], history.faults
    report = checker.check(history)
    assert report.verdict_lines()[0].startswith("VERDICT: SAFE"), report.verdict_lines()
    assert report.ok and report.lost == 0 and report.acknowledged > 0


def test_txn_leader_crash_seed_5_a_transformer_resuming_past_a_transaction_is_safe(
    tmp_path: Path,
) -> None:
    history = run_random("txn-leader-crash", 5, tmp_path)
    assert [(f.action, f.start_ms) for f in history.faults[:2]] == [
        ("pause", 8076),
        ("pause", 8356),
    ], history.faults
    resumed = {
        (op.topic, op.partition): op.offset
        for op in history.ops
        if op.process == "t1#1" and op.f == "fetch_offsets" and op.time_ms == 16800
    }
    assert resumed == {("events", 0): 829, ("events", 1): 832}, resumed
    report = checker.check(history)
    assert report.verdict_lines()[0].startswith("VERDICT: SAFE"), report.verdict_lines()
    assert report.ok and report.transactions is not None and report.transactions.committed > 0
