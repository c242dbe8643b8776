"""The chaos runner's compose backend (``cluster.compose.ComposeBackend``) on real containers:
the catalog's leader-partition scenario, shortened, with its fault made an ``isolate`` of the
leader (the catalog's ``split`` keeps ZooKeeper on both sides, which a container network
cannot give; ``docker network disconnect`` from the ``cluster`` network cuts the leader off
the other brokers and ZooKeeper, while the producer on the host still reaches it). The checker
must judge it SAFE, the isolation must have happened (a fault event on a broker, a new leader
epoch), the simulation must judge the same scenario the same way, and the run's compose
project must be gone afterwards. The catalog's ``split`` itself, as DROP rules inside the
brokers' namespaces (``cluster.container_net``, root only), is judged as the simulation judges
it too.

One run takes a few minutes on a slow engine: the project starts (containers under vfs),
25 s of workload, 15 s of settling, a clean stop of every broker, ``down -v``. No assertion
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


def shortened(action: str) -> Scenario:
    """leader-partition in less time, its fault (a split of the leader) made ``action`` on the
    same target."""
    base = load(find("leader-partition"))
    (fault,) = base.faults
    assert (fault.action, fault.target) == ("split", "leader:events-0")
    params = fault.params if action == fault.action else {}
    chosen = dataclasses.replace(
        base,
        workload=dataclasses.replace(base.workload, duration_s=25.0, settle_s=15.0),
        faults=(
            dataclasses.replace(
                fault, action=action, at_s=FAULT_AT_S, duration_s=FAULT_FOR_S, params=params
            ),
        ),
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


def test_an_isolated_leader_loses_nothing_acknowledged_and_agrees_with_the_simulation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    history, events = run_both(shortened("isolate"), tmp_path)
    # The isolation happened, to the leader, and another leader was elected meanwhile.
    (fault,) = history.faults
    assert fault.action == "isolate" and fault.end_ms is not None
    isolated = fault.target.split(" → ")[1]
    assert isolated in {"1", "2", "3"}, fault.target
    before = leader_epochs(history, fault.start_ms)
    assert before and max(leader_epochs(history)) > max(before), "no new leader epoch"
    assert any(
        s.is_leader and s.leader != int(isolated) and s.leader_epoch > max(before)
        for s in history.samples
    ), "no other broker led after the isolation"
    assert {broker for _, _, broker in history.final_logs} == {1, 2, 3}
    assert history.meta["runtime"] == "the compose cluster"
    for phase in ("cluster up", "isolate leader:events-0 → ", "healed: isolate", "final read"):
        assert any(phase in line for line in events), (phase, events)
    # The run's own project, and nothing of it left.
    (up,) = [line for line in events if "cluster up" in line]
    project = up.split("compose project ", 1)[1].split(" ", 1)[0]
    assert project.startswith("kafkasim-chaos-")
    assert project_leftovers(project) == []
    override = (tmp_path / "real" / "compose-override.yml").read_text()
    assert 'KAFKASIM_CFG_REPLICA_LAG_TIME_MAX_MS: "5000"' in override


@pytest.mark.skipif(
    "split" not in compose.COMPOSE.injectable,
    reason=compose.COMPOSE.not_injectable.get("split", ""),
)
def test_a_split_off_leader_loses_nothing_acknowledged_and_agrees_with_the_simulation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """leader-partition: the leader keeps ZooKeeper and its clients, its followers cannot fetch;
    the ISR shrinks to the leader, acks=all writes are refused until the split heals."""
    caplog.set_level(logging.ERROR)
    history, events = run_both(shortened("split"), tmp_path)
    (fault,) = history.faults
    assert fault.action == "split" and fault.end_ms is not None
    split_off = int(fault.target.split(" → ")[1])
    # The leader stayed leader (ZooKeeper reached it) and led an ISR of itself alone meanwhile.
    assert any(
        s.is_leader and s.leader == split_off and s.isr == (split_off,) for s in history.samples
    ), "the split-off leader's ISR never shrank to itself"
    for phase in ("cluster up", "split leader:events-0 → ", "healed: split", "final read"):
        assert any(phase in line for line in events), (phase, events)
    (up,) = [line for line in events if "cluster up" in line]
    project = up.split("compose project ", 1)[1].split(" ", 1)[0]
    assert project_leftovers(project) == []


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
