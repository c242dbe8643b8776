"""The HTML report's header: what its seed says, and where its times count from."""

from __future__ import annotations

from kafkasim.faults import checker, report
from kafkasim.faults.history import History


def _header(seed: int | None) -> str:
    history = History()
    history.meta = {"scenario": "s", "seed": seed, "runtime": "local processes"}
    return report.render(history, checker.check(history))


def test_a_real_run_s_report_says_why_it_has_no_seed() -> None:
    html = _header(None)
    assert "seed: None" not in html
    assert "seed: none (a run on real processes is not replayable from a seed;" in html


def test_a_simulated_run_s_report_gives_the_seed_that_replays_it() -> None:
    assert "seed: 7 (the same seed replays this run)" in _header(7)


def test_the_report_says_its_times_count_from_the_workload_s_start() -> None:
    assert "Times count from the workload's start (0 s)" in _header(1)
