"""Deterministic in-process cluster tests: brokers, controller, SimZooKeeper and SimNetwork on
the virtual-time loop (one process, one thread; time jumps when nothing is ready)."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)


SWEEP_TEST = "test_catalog.py::test_a_safe_scenario_finds_nothing_with_its_own_and_random_schedules"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The catalog acceptance sweep says how many schedules it ran (issue 17)."""
    outcomes = {"passed": 0, "failed": 0}
    for outcome in outcomes:
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") == "call" and SWEEP_TEST in report.nodeid:
                outcomes[outcome] += 1
    ran = sum(outcomes.values())
    if not ran:
        return
    from tests.sim.test_catalog import BUDGET_S, RANDOM_SEEDS, RUN_S, SAFE

    terminalreporter.write_line(
        f"catalog acceptance sweep: {ran} schedules run ({outcomes['failed']} failed) of "
        f"{len(SAFE)} safe scenarios x (own schedule + random seeds 1..{len(RANDOM_SEEDS)}); "
        f"budget {BUDGET_S:.0f} s at {RUN_S} s a run"
    )
