"""Memory stays flat over a sweep (issue 17): nothing of a simulated run outlives it. After each
run in one process, no loop, network, cluster, broker or ZooKeeper of the simulation is left
alive, the process-wide fault state is empty, and the objects the garbage collector tracks do
not grow from one run to the next (a cache that kept something per run would: a run leaves
tens of thousands of objects behind if anything holds on to it)."""

from __future__ import annotations

import dataclasses
import gc
import logging
from pathlib import Path

import pytest

from kafkasim.faults import runner
from kafkasim.faults.reading import find, load
from kafkasim.faults.scenario import Scenario
from kafkasim.node.broker import Broker
from kafkasim.sim.backend import SIM, SimBackend
from kafkasim.sim.cluster import SimCluster
from kafkasim.sim.loop import VirtualTimeLoop
from kafkasim.sim.network import SimNetwork, SimServer, SimTransport
from kafkasim.storage import disk_faults

RUN_SCOPED = (VirtualTimeLoop, SimNetwork, SimServer, SimTransport, SimCluster, SimBackend, Broker)
# Slack for what the interpreter itself may keep between runs (a method cache, an interned
# tuple); anything a run leaves behind is thousands of objects.
SLACK = 50


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)


def _short_leader_crash() -> Scenario:
    base = load(find("leader-crash"))
    workload = dataclasses.replace(base.workload, duration_s=6.0, settle_s=3.0)
    crash = dataclasses.replace(base.faults[0], at_s=2.0, duration_s=2.0)
    return dataclasses.replace(base, workload=workload, faults=(crash,))


def _alive(kinds: tuple[type, ...]) -> list[str]:
    return sorted(type(o).__name__ for o in gc.get_objects() if isinstance(o, kinds))


def test_nothing_of_a_run_outlives_it_and_memory_does_not_grow(tmp_path: Path) -> None:
    scenario = _short_leader_crash()
    tracked: list[int] = []
    for seed in (1, 2, 3):
        history = runner.run(scenario, SIM, tmp_path / f"seed-{seed}", seed=seed)
        assert history.ops, "the run did nothing"
        del history
        gc.collect()
        assert _alive(RUN_SCOPED) == []
        assert not disk_faults._full
        tracked.append(len(gc.get_objects()))
    # The first run imports and warms caches; from the second on a run leaves nothing.
    assert tracked[2] - tracked[1] <= SLACK, tracked
