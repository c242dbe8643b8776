"""The sweep report: every seed's verdict and schedule, the failing seeds named, the shrunk
schedule printed as the scenario file that replays it; a valid Plotly figure, nothing loaded
from the network."""

from __future__ import annotations

import dataclasses
import re

import plotly.graph_objects as go

from kafkasim.faults import checker, reading
from kafkasim.faults.history import History
from kafkasim.faults.report_sweep import SweepRun, figure_sweep, render_sweep
from kafkasim.faults.scenario import Fault, Scenario


def _runs() -> tuple[list[SweepRun], Scenario]:
    base = reading.load(reading.find("leader-crash"))
    clean = checker.check(History())
    ok = SweepRun.of(1, base, clean, meets_expectation=True)
    failing_scenario = dataclasses.replace(
        base, faults=(Fault(3.0, "crash", "leader:events-0", 4.0), Fault(5.0, "kill", "controller"))
    )
    bad = SweepRun(
        2,
        "DATA LOST",
        "VERDICT: DATA LOST — 5 lost",
        False,
        tuple((f, failing_scenario.fault_end_s(f)) for f in failing_scenario.faults),
    )
    return [ok, bad], failing_scenario


def test_a_sweep_report_names_the_failing_seeds_and_prints_the_shrunk_schedule() -> None:
    runs, shrunk = _runs()
    page = render_sweep("leader-crash", runs, shrunk=shrunk, shrunk_seed=2)
    assert "<title>kafkasim sweep: leader-crash, 2 seeds, 1 failing</title>" in page
    assert "failing seeds: 2" in page
    assert "VERDICT: DATA LOST — 5 lost" in page
    assert "crash leader:events-0 at 3 s until 7 s; kill controller at 5 s" in page
    assert "Shrunk failing schedule (seed 2)" in page
    assert "action = &quot;kill&quot;" in page and "kafkasim sim run FILE --seed 2" in page
    assert not re.search(r"<script[^>]*\bsrc\s*=", page)


def test_a_sweep_without_failures_says_so_and_shows_no_shrunk_schedule() -> None:
    runs, _ = _runs()
    page = render_sweep("leader-crash", runs[:1])
    assert "no failing seed" in page and "Shrunk" not in page


def test_the_sweep_figure_is_a_valid_plotly_figure_with_a_row_per_seed() -> None:
    runs, _ = _runs()
    figure = figure_sweep(runs)
    go.Figure(figure)
    assert figure["layout"]["yaxis"]["categoryarray"] == ["seed 2", "seed 1"]
