"""Failure-injection runs on real processes (``cluster.chaos``, ``kafkasim chaos run``): the
catalog's leader-crash and follower-pause scenarios, shortened, are judged SAFE by the checker,
as the simulation judges the same scenarios (issue 5's acceptance: the real-process runner
agrees with the simulation's verdicts); the command prints its progress and verdict; a scenario
with faults that local processes cannot suffer is refused in one line before anything starts.

Each real run takes about 50 s: ZooKeeper and three brokers start (a few seconds), 20 s of
workload, 10 s of settling, and a clean stop whose last broker retries its controlled shutdown
(3 x 5 s, as Kafka's does) with nowhere to move its leaderships.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from kafkasim.cluster import chaos
from kafkasim.controller.zk_process import zookeeper_available
from kafkasim.faults import checker, runner
from kafkasim.faults.history import History
from kafkasim.faults.reading import find, load
from kafkasim.faults.scenario import Scenario
from kafkasim.faults.validation import check
from kafkasim.sim.backend import SIM
from tests.cli_run import kafkasim


def needs_zookeeper() -> None:
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")


def shortened(name: str, *, at_s: float, duration_s: float) -> Scenario:
    """The catalog scenario with 20 s of workload and 10 s of settling, its one fault moved
    to ``at_s`` for ``duration_s``: the same fault on the same target, in less time."""
    base = load(find(name))
    (fault,) = base.faults
    chosen = dataclasses.replace(
        base,
        workload=dataclasses.replace(base.workload, duration_s=20.0, settle_s=10.0),
        faults=(dataclasses.replace(fault, at_s=at_s, duration_s=duration_s),),
        seed_faults=None,
    )
    check(chosen)
    return chosen


def leader_epochs(history: History) -> set[int]:
    return {s.leader_epoch for s in history.samples if s.is_leader}


def smallest_isr(history: History) -> int:
    return min(len(s.isr) for s in history.samples if s.is_leader)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "at_s", "duration_s"),
    [
        # The leader killed at 5 s, back at 15 s: a new leader after the 6 s session timeout.
        ("leader-crash", 5.0, 10.0),
        # A follower frozen for 10 s: past replica.lag.time.max.ms (5 s), within its
        # ZooKeeper session (18 s), so only the leader notices and shrinks the ISR.
        ("follower-pause", 4.0, 10.0),
    ],
)
def test_a_real_run_is_safe_and_agrees_with_the_simulation(
    name: str, at_s: float, duration_s: float, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    needs_zookeeper()
    caplog.set_level(logging.ERROR)
    chosen = shortened(name, at_s=at_s, duration_s=duration_s)
    events: list[str] = []
    history = runner.run(chosen, chaos.LOCAL, tmp_path / "real", on_event=events.append)
    real = checker.check(history)
    simulated = checker.check(runner.run(chosen, SIM, tmp_path / "sim", seed=1))

    assert real.ok, real.verdict_lines()
    assert (real.ok, real.lost) == (simulated.ok, simulated.lost) == (True, 0)
    assert real.verdict == simulated.verdict == "SAFE"
    assert real.acknowledged > 1000 and real.read >= real.acknowledged
    # The fault happened to a broker, and did what the scenario says it does.
    (fault,) = history.faults
    assert fault.action == chosen.faults[0].action
    assert fault.target.split(" → ")[1] in {"1", "2", "3"}, fault.target
    if name == "leader-crash":
        assert len(leader_epochs(history)) >= 2, "no new leader was elected"
    else:
        assert smallest_isr(history) == 2, "the leader never shrank the ISR"
    assert {broker for _, _, broker in history.final_logs} == {1, 2, 3}
    assert history.meta == {"scenario": name, "seed": None, "runtime": "local processes"}
    for phase in ("cluster up", "workload started", "healed: ", "settling for 10 s", "final read"):
        assert any(phase in line for line in events), (phase, events)


@pytest.mark.slow
def test_the_command_prints_progress_and_the_verdict(tmp_path: Path) -> None:
    needs_zookeeper()
    path = tmp_path / "small.toml"
    path.write_text(
        "\n".join(
            [
                'name = "small-pause"',
                'description = "A follower paused for two seconds."',
                'expect = "safe"',
                "[cluster]",
                "brokers = 3",
                "[[cluster.topics]]",
                'name = "events"',
                "[workload]",
                "duration_s = 6.0",
                "settle_s = 3.0",
                "[[workload.producers]]",
                'name = "p1"',
                'topic = "events"',
                "rate = 50.0",
                "[[workload.consumers]]",
                'name = "c1"',
                'topic = "events"',
                "[[faults]]",
                "at_s = 2.0",
                'action = "pause"',
                'target = "follower:events-0"',
                "duration_s = 2.0",
            ]
        )
        + "\n"
    )
    history_path = tmp_path / "history.jsonl"
    done = kafkasim(
        "chaos", "run", str(path), "--dir", str(tmp_path / "c"), "--history", str(history_path)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "scenario small-pause (expect: safe), local processes"
    for expected in (
        "cluster up: brokers 1, 2, 3 serving",
        "workload started (1 producers, 1 consumers, 6 s)",
        "pause follower:events-0 → ",
        "healed: pause follower:events-0 → ",
        "producers stopped; healing every fault",
        "settling for 3 s",
        "final read done",
        "final logs read: 3 replicas",
    ):
        assert any(expected in line for line in lines), (expected, done.stdout)
    # Progress lines carry the wall seconds since the run began, in order.
    times = [float(line.split(" s  ", 1)[0]) for line in lines if " s  " in line]
    assert times == sorted(times) and len(times) >= 8
    assert any(line.startswith("VERDICT: SAFE") for line in lines), done.stdout
    assert History.read(history_path).meta["runtime"] == "local processes"


@pytest.mark.parametrize(
    ("faults", "named"),
    [
        (
            '[[faults]]\nat_s = 1.0\naction = "isolate"\ntarget = "broker:1"\nduration_s = 1.0\n',
            "isolate (faults[0])",
        ),
        (
            '[[faults]]\nat_s = 1.0\naction = "crash"\ntarget = "leader:events-0"\n'
            "params = { lose_unflushed = true }\n",
            "crash with lose_unflushed (faults[0])",
        ),
    ],
    ids=["isolate", "lose-unflushed"],
)
def test_a_fault_local_processes_cannot_suffer_is_refused_in_one_line(
    faults: str, named: str, tmp_path: Path
) -> None:
    """No ZooKeeper needed: the refusal comes before anything starts."""
    path = tmp_path / "refused.toml"
    path.write_text(
        'name = "refused"\ndescription = ""\nexpect = "safe"\n'
        '[cluster]\nbrokers = 3\n[[cluster.topics]]\nname = "events"\n'
        "[workload]\nduration_s = 5.0\n"
        '[[workload.producers]]\nname = "p1"\ntopic = "events"\nrate = 10.0\n' + faults
    )
    done = kafkasim("chaos", "run", str(path), "--dir", str(tmp_path / "c"), timeout=60)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("kafkasim chaos: error: scenario refused: local processes")
    assert named in done.stderr
    assert not (tmp_path / "c").exists()
