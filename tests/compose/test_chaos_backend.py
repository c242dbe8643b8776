"""The chaos runner's compose backend (``cluster.compose.ComposeBackend``) on real containers:
the catalog's leader-partition scenario, shortened, with two cuts of the leader one after the
other in one run (one compose project: a project's start and teardown under vfs cost as much
as a fault's run):

- an ``isolate`` of the leader: ``docker network disconnect`` from the ``cluster`` network cuts
  it off the other brokers and ZooKeeper, while the producer on the host still reaches it;
  another leader is elected;
- then the catalog's own ``split`` of the (new) leader, as DROP rules inside the brokers'
  namespaces (``cluster.container_net``, root only): the leader keeps ZooKeeper and its
  clients, its followers cannot fetch, the ISR shrinks to the leader;
- then an ``isolate_zk`` of the leader (the same DROP rules, towards ZooKeeper alone; the
  catalog's leader-zk-isolation): its session expires and a follower is elected while it still
  reaches the other brokers.

The checker must judge the run SAFE, both cuts must have happened, the simulation must judge
the same scenario the same way, and the run's compose project must be gone afterwards.

One run takes a few minutes on a slow engine: the project starts (containers under vfs),
~70 s of workload, 15 s of settling, a clean stop of every broker, ``down -v``. No assertion
is on how long anything takes.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from tests.compose.conftest import compose_unavailable

_REASON = compose_unavailable()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

from kafkasim.cluster import compose  # noqa: E402 - after the skip: nothing runs without an engine
from kafkasim.faults import checker, runner  # noqa: E402
from kafkasim.faults.history import History  # noqa: E402
from kafkasim.faults.reading import find, load  # noqa: E402
from kafkasim.faults.scenario import Scenario  # noqa: E402
from kafkasim.faults.validation import check  # noqa: E402
from kafkasim.sim.backend import SIM  # noqa: E402

pytestmark = pytest.mark.slow

FAULT_AT_S = 6.0
FAULT_FOR_S = 15.0  # past the 6 s ZooKeeper session timeout: another leader is elected
SPLIT_AT_S = 28.0  # the isolated broker has 7 s to return and catch up before the split
ZK_AT_S = 50.0


def cut_thrice() -> Scenario:
    """leader-partition in less time, its fault (a split of the leader) preceded by an
    ``isolate`` of the leader and followed by an ``isolate_zk`` of the leader, each for
    ``FAULT_FOR_S``; the last two only when the containers' links can be cut (root)."""
    base = load(find("leader-partition"))
    (fault,) = base.faults
    assert (fault.action, fault.target) == ("split", "leader:events-0")
    isolate = dataclasses.replace(
        fault, action="isolate", at_s=FAULT_AT_S, duration_s=FAULT_FOR_S, params={}
    )
    split = dataclasses.replace(fault, at_s=SPLIT_AT_S, duration_s=FAULT_FOR_S)
    zookeeper = dataclasses.replace(
        fault, action="isolate_zk", at_s=ZK_AT_S, duration_s=FAULT_FOR_S, params={}
    )
    splits = {"split", "isolate_zk"} <= compose.COMPOSE.injectable
    chosen = dataclasses.replace(
        base,
        workload=dataclasses.replace(
            base.workload,
            duration_s=(ZK_AT_S if splits else FAULT_AT_S) + FAULT_FOR_S + 7,
            settle_s=15.0,
        ),
        faults=(isolate, split, zookeeper) if splits else (isolate,),
        seed_faults=None,
    )
    check(chosen)
    return chosen


def run_both(chosen: Scenario, root: Path) -> tuple[History, list[str]]:
    """``chosen`` on the compose backend, then the simulation: both judged SAFE with nothing
    acknowledged lost; the real run's history and its event lines."""
    events: list[str] = []
    try:
        history = runner.run(chosen, compose.COMPOSE, root / "real", on_event=events.append)
    finally:
        print("\n".join(events))  # shown when the test fails
    real = checker.check(history)
    simulated = checker.check(runner.run(chosen, SIM, root / "sim", seed=1))
    assert real.ok, real.verdict_lines()
    assert real.verdict == simulated.verdict == "SAFE"
    assert (real.lost, simulated.lost) == (0, 0)
    assert real.acknowledged > 500 and real.read >= real.acknowledged
    return history, events


def leader_epochs(history: History, before_ms: int | None = None) -> set[int]:
    return {
        s.leader_epoch
        for s in history.samples
        if s.is_leader and (before_ms is None or s.time_ms < before_ms)
    }


def project_leftovers(project: str) -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    found = []
    for kind in (["ps", "-a", "-q"], ["network", "ls", "-q"], ["volume", "ls", "-q"]):
        done = compose.run_command(["docker", *kind, "--filter", label], timeout_s=60)
        found += done.stdout.split()
    return found


def test_a_leader_isolated_split_off_and_cut_from_zookeeper_loses_nothing_as_simulated(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    history, events = run_both(cut_thrice(), tmp_path)
    isolate, *rest = history.faults
    # The isolation happened, to the leader, and another leader was elected meanwhile.
    assert isolate.action == "isolate" and isolate.end_ms is not None
    isolated = isolate.target.split(" → ")[1]
    assert isolated in {"1", "2", "3"}, isolate.target
    before = leader_epochs(history, isolate.start_ms)
    after = leader_epochs(history, rest[0].start_ms if rest else None)
    assert before and max(after) > max(before), "no new leader epoch"
    assert any(
        s.is_leader and s.leader != int(isolated) and s.leader_epoch > max(before)
        for s in history.samples
    ), "no other broker led after the isolation"
    assert {broker for _, _, broker in history.final_logs} == {1, 2, 3}
    assert history.meta["runtime"] == "the compose cluster"
    phases = ["cluster up", "isolate leader:events-0 → ", "healed: isolate", "final read"]
    if rest:
        # The split: the leader stayed leader (ZooKeeper reached it) and led an ISR of itself
        # alone meanwhile.
        split, zookeeper = rest
        assert split.action == "split" and split.end_ms is not None
        split_off = int(split.target.split(" → ")[1])
        assert any(
            s.is_leader and s.leader == split_off and s.isr == (split_off,)
            for s in history.samples
            if s.time_ms >= split.start_ms
        ), "the split-off leader's ISR never shrank to itself"
        # Cut from ZooKeeper alone: its session expired and another leader was elected.
        assert zookeeper.action == "isolate_zk" and zookeeper.end_ms is not None
        assert max(leader_epochs(history)) > max(leader_epochs(history, zookeeper.start_ms))
        phases += [
            "split leader:events-0 → ",
            "healed: split",
            "isolate_zk leader:events-0 → ",
            "healed: isolate_zk",
        ]
    else:
        print("split and isolate_zk not run:", compose.COMPOSE.not_injectable.get("split", ""))
    for phase in phases:
        assert any(phase in line for line in events), (phase, events)
    # The run's own project, and nothing of it left.
    (up,) = [line for line in events if "cluster up" in line]
    project = up.split("compose project ", 1)[1].split(" ", 1)[0]
    assert project.startswith("kafkasim-chaos-")
    assert project_leftovers(project) == []
    override = (tmp_path / "real" / "compose-override.yml").read_text()
    assert 'KAFKASIM_CFG_REPLICA_LAG_TIME_MAX_MS: "5000"' in override


def test_librdkafka_on_the_host_across_a_container_leader_kill_is_judged_safe(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 13, point 6 on containers: the workload driven by confluent-kafka (librdkafka) on
    the host through the brokers' published Kafka listeners, the leader's container killed
    (``docker kill``) and started again; the same checker judges the real client's history."""
    caplog.set_level(logging.ERROR)
    base = load(find("leader-crash"))
    (fault,) = base.faults
    chosen = dataclasses.replace(
        base,
        workload=dataclasses.replace(
            base.workload, duration_s=25.0, settle_s=15.0, client="confluent-kafka"
        ),
        faults=(dataclasses.replace(fault, at_s=FAULT_AT_S, duration_s=FAULT_FOR_S),),
        seed_faults=None,
    )
    check(chosen)
    events: list[str] = []
    try:
        history = runner.run(chosen, compose.COMPOSE, tmp_path / "real", on_event=events.append)
    finally:
        print("\n".join(events))  # shown when the test fails
    report = checker.check(history)
    assert report.ok, report.verdict_lines()
    assert report.lost == 0 and report.acknowledged > 500
    assert history.meta["client"] == "confluent-kafka"
    assert any("by confluent-kafka" in line for line in events), events
    (crash,) = history.faults
    assert crash.action == "crash" and crash.end_ms is not None
    before = leader_epochs(history, crash.start_ms)
    assert before and max(leader_epochs(history)) > max(before), "no new leader epoch"
