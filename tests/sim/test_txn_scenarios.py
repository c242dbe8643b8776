"""Transactions in the fault runner (issue 14's simulation tests): the catalog's transactional
scenarios do what their descriptions say (each is also run and checked SAFE, with random
schedules, by ``test_catalog.py``), replay exactly from their seed, and the test-only switches
of ``node.rules`` that break read_committed are caught by the history checker in a simulated
run (G1b with the LSO running ahead of open transactions, G1a without the aborted-transactions
list), while the same run with the switches off is clean."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kafkasim.faults import checker, reading, runner
from kafkasim.faults.backend import BackendSpec
from kafkasim.faults.history import History, OpType
from kafkasim.faults.scenario import Scenario
from kafkasim.node.rules import ReplicationRules
from kafkasim.sim.backend import SIM, sim_backend

TXN_SCENARIOS = ("txn-coordinator-crash", "txn-leader-crash", "txn-zombie-fenced",
                 "txn-timeout-abort")  # fmt: skip

SMALL = """
name = "txn-small"
description = "transactions, some aborted on purpose, read by a read_committed consumer"
expect = "safe"
[cluster]
brokers = 3
broker_config = { "transaction.state.log.num.partitions" = 3 }
[[cluster.topics]]
name = "events"
partitions = 2
[workload]
duration_s = 4.0
settle_s = 3.0
[[workload.producers]]
name = "p1"
topic = "events"
rate = 100.0
transactional = true
transaction_records = 8
abort_every = 2
[[workload.consumers]]
name = "c1"
topic = "events"
isolation = "read_committed"
"""


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)


def run(chosen: Scenario, tmp_path: Path, spec: BackendSpec = SIM, seed: int = 1) -> History:
    root = tmp_path / f"{chosen.name}-{seed}-{len(list(tmp_path.iterdir()))}"
    return runner.run(chosen, spec, root, seed=seed)


def scenario(name: str) -> Scenario:
    return reading.load(reading.find(name))


def ends(history: History, f: str, type_: OpType) -> dict[str, int]:
    return {o.txn: o.time_ms for o in history.ops if o.f == f and o.type is type_ and o.txn}


def test_the_catalog_has_the_transactional_scenarios() -> None:
    for name in TXN_SCENARIOS:
        chosen = scenario(name)
        assert chosen.expect == "safe" and chosen.workload.transactional
        assert any(c.isolation == "read_committed" for c in chosen.workload.consumers)


def test_the_coordinator_crashes_with_a_commit_in_flight_and_it_completes(
    tmp_path: Path,
) -> None:
    history = run(scenario("txn-coordinator-crash"), tmp_path)
    crash = next(f for f in history.faults if f.action == "crash")
    assert crash.target.endswith("→ " + crash.target.rpartition("→ ")[2])  # resolved to one
    invoked, committed = ends(history, "commit", OpType.INVOKE), ends(history, "commit", OpType.OK)
    in_flight = [t for t, at in invoked.items() if at <= crash.start_ms < committed.get(t, 10**9)]
    assert in_flight and all(t in committed for t in in_flight)
    report = checker.check(history)
    assert report.ok, report.verdict_lines()
    assert report.transactions.committed > 0 and report.transactions.aborted > 0
    assert any(markers for markers in history.final_markers.values())


def test_a_leader_crash_under_a_transformer_keeps_exactly_once(tmp_path: Path) -> None:
    history = run(scenario("txn-leader-crash"), tmp_path)
    report = checker.check(history)
    assert report.ok, report.verdict_lines()
    assert any(o.f == "send_offsets" for o in history.ops)
    assert history.final_group_offsets  # read back at the end
    shipped = [o for o in history.ops if o.f == "read" and o.topic == "shipped"]
    assert shipped and all(o.read_committed for o in shipped if o.process != "final-reader")


def test_the_zombie_is_fenced_and_its_last_transaction_never_seen(tmp_path: Path) -> None:
    chosen = scenario("txn-zombie-fenced")
    events: list[str] = []
    root = tmp_path / "zombie"
    history = runner.run(chosen, SIM, root, seed=1, on_event=events.append)
    assert any("2 transactional producers, 1 read_committed consumers" in e for e in events)
    assert any(e.rstrip().endswith("transaction markers") for e in events)
    report = checker.check(history)
    assert report.ok, report.verdict_lines()
    zombie_last = max((o for o in history.ops if o.process == "p1" and o.txn),
                      key=lambda o: o.time_ms).txn  # fmt: skip
    assert zombie_last not in ends(history, "commit", OpType.OK)
    errors = [o.error or "" for o in history.ops if o.process == "p1" and o.time_ms >= 10_000]
    assert any("FENCED" in e or "EPOCH" in e for e in errors)
    p2 = {o.txn for o in history.ops if o.process == "p2" and o.txn}
    assert p2 & set(ends(history, "commit", OpType.OK))
    values = {o.value for o in history.ops if o.f == "send" and o.txn == zombie_last}
    seen = {o.value for o in history.ops if o.f == "read" and o.read_committed}
    assert values and not values & seen


def test_a_transaction_past_its_timeout_is_aborted_by_the_coordinator(tmp_path: Path) -> None:
    history = run(scenario("txn-timeout-abort"), tmp_path)
    report = checker.check(history)
    assert report.ok, report.verdict_lines()
    stalled = next(o.txn for o in history.ops if o.f == "send" and 4_000 <= o.time_ms < 9_000)
    assert stalled not in ends(history, "commit", OpType.OK)
    values = {o.value for o in history.ops if o.f == "send" and o.txn == stalled}
    seen = {o.value for o in history.ops if o.f == "read" and o.read_committed}
    assert not values & seen
    assert any(t == "ABORT" for m in history.final_markers.values() for _, t in m)
    # Its application replaces the fenced instance, which stalls no more and commits again.
    woke_ms = 9_000
    assert any(at > woke_ms for at in ends(history, "commit", OpType.OK).values())
    assert not any(o.f == "send" and o.txn != stalled and "FENCED" in (o.error or "")
                   for o in history.ops)  # fmt: skip


def test_a_transactional_run_replays_exactly_from_its_seed(tmp_path: Path) -> None:
    chosen = scenario("txn-leader-crash")
    first = list(run(chosen, tmp_path, seed=3).lines())
    assert first == list(run(chosen, tmp_path, seed=3).lines())


def test_switches_off_the_small_run_is_clean(tmp_path: Path) -> None:
    report = checker.check(run(reading.parse(SMALL, source="small"), tmp_path))
    assert report.ok, report.verdict_lines()
    t = report.transactions
    assert t.committed > 0 and t.aborted > 0
    assert not t.aborted_reads and not t.intermediate_reads


def test_the_lso_running_ahead_is_caught_as_intermediate_reads(tmp_path: Path) -> None:
    buggy = sim_backend(ReplicationRules(lso_ignores_open_transactions=True))
    report = checker.check(run(reading.parse(SMALL, source="small"), tmp_path, buggy))
    assert not report.ok
    assert report.transactions.intermediate_reads, report.verdict_lines()
    assert any("G1b" in line for line in report.verdict_lines())


def test_skipping_the_aborted_transactions_is_caught_as_aborted_reads(tmp_path: Path) -> None:
    buggy = sim_backend(ReplicationRules(skip_aborted_transactions=True))
    report = checker.check(run(reading.parse(SMALL, source="small"), tmp_path, buggy))
    assert not report.ok
    assert report.transactions.aborted_reads, report.verdict_lines()
    assert not report.transactions.intermediate_reads
    assert any("G1a" in line for line in report.verdict_lines())
