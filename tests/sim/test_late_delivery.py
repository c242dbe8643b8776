"""Late delivery in a failure run (a scenario's ``cluster.late_delivery``; ``sim.network``, 5):
the catalog's ``leader-isolation-late`` holds what crosses the isolated leader's cut, as TCP
does, and delivers it once the cut heals. The stale requests that then reach the deposed
leader lose nothing acknowledged; the run replays exactly from its seed; and the mode is what
changes the run (the same schedule without it holds nothing)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from kafkasim.faults import checker, reading, runner
from kafkasim.faults.history import History
from kafkasim.faults.scenario import Scenario
from kafkasim.sim.backend import SIM, SimBackend
from kafkasim.sim.network import SimNetworkStats

NAME = "leader-isolation-late"


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)


def _run(scenario: Scenario, root: Path, seed: int = 1) -> tuple[History, SimNetworkStats]:
    """The run's history and its network's counts."""
    made: list[SimBackend] = []

    def create(chosen: Scenario, run_seed: int | None, run_root: Path) -> SimBackend:
        backend = SimBackend(chosen, run_seed, run_root)
        made.append(backend)
        return backend

    history = runner.run(scenario, dataclasses.replace(SIM, create=create), root, seed=seed)
    return history, made[0].cluster.network.stats


def test_what_the_cut_held_arrives_after_the_heal_and_nothing_acknowledged_is_lost(
    tmp_path: Path,
) -> None:
    scenario = reading.load(reading.find(NAME))
    assert scenario.cluster.late_delivery
    history, stats = _run(scenario, tmp_path / "late")
    report = checker.check(history)
    assert report.ok, report.verdict_lines()
    assert report.acknowledged > 0 and report.lost == 0
    # Messages were held by the cut and delivered once it healed (not lost).
    assert stats.held > 0 and stats.late > 0

    again, _ = _run(scenario, tmp_path / "again")
    assert list(again.lines()) == list(history.lines())  # a seed replays the late deliveries too

    dropping = dataclasses.replace(
        scenario, cluster=dataclasses.replace(scenario.cluster, late_delivery=False)
    )
    dropped, dropped_stats = _run(dropping, tmp_path / "dropped")
    assert dropped_stats.held == dropped_stats.late == 0
    assert list(dropped.lines()) != list(history.lines())
