"""The HTML report of a sweep (``sim sweep``): every seed's verdict and fault schedule, and the
shrunk schedule of a failure, in one self-contained page drawn like the run report
(``faults.report``: Plotly, its bundle embedded).

Input: one ``SweepRun`` per seed, in the order run (``SweepRun.of`` builds one from the
scenario a seed ran, after ``schedules.randomize``, and its ``CheckReport``), and optionally
the shrunk failing scenario (``shrink`` of the first failing seed) with its seed. Pure:
``render_sweep(...)`` is values in, one string out.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from kafkasim.faults.report import FAULT_FILL, Figure, figure_html, page
from kafkasim.faults.scenario import Fault, Scenario
from kafkasim.faults.verdict import CheckReport
from kafkasim.faults.writing import dump

FAILED_COLOUR, PASSED_COLOUR = "#d62728", "#2ca02c"


@dataclass(frozen=True, slots=True)
class SweepRun:
    """One seed of a sweep: its verdict (``CheckReport.verdict``: "SAFE", "DATA LOST", ...),
    the verdict's first line (the counts), whether the run met the scenario's expectation
    (``cli.sim.meets_expectation``), and the fault schedule it ran, each fault with its end
    (seconds; the start for an instantaneous one)."""

    seed: int
    verdict: str
    summary: str
    meets_expectation: bool
    faults: tuple[tuple[Fault, float], ...]

    @classmethod
    def of(cls, seed: int, scenario: Scenario, report: CheckReport, *,
           meets_expectation: bool) -> SweepRun:  # fmt: skip
        return cls(
            seed=seed,
            verdict=report.verdict,
            summary=report.verdict_lines()[0],
            meets_expectation=meets_expectation,
            faults=tuple((f, scenario.fault_end_s(f)) for f in scenario.faults),
        )


def render_sweep(scenario: str, runs: Sequence[SweepRun], *, shrunk: Scenario | None = None,
                 shrunk_seed: int | None = None) -> str:  # fmt: skip
    """The sweep of ``scenario`` (its name) over ``runs``; ``shrunk``: the minimal failing
    schedule found (with the seed that replays it), shown as the scenario file to run."""
    failing = [r.seed for r in runs if not r.meets_expectation]
    title = f"kafkasim sweep: {scenario}, {len(runs)} seeds, {len(failing)} failing"
    body = [
        f"<h1>{html.escape(title)}</h1>",
        "<p>"
        + html.escape(
            "failing seeds: " + ", ".join(map(str, failing)) if failing else "no failing seed"
        )
        + "</p>",
        "<h2>Fault schedules and verdicts</h2>",
        figure_html("sweep", figure_sweep(runs)),
        "<h2>Verdicts</h2>",
        _table(runs),
    ]
    if shrunk is not None:
        replay = "" if shrunk_seed is None else f" (seed {shrunk_seed})"
        body += [
            f"<h2>Shrunk failing schedule{html.escape(replay)}</h2>",
            "<p>The smallest fault schedule found that still fails. Save it as a file and "
            f"replay it with <code>kafkasim sim run FILE --seed {shrunk_seed or 1}</code>.</p>",
            "<pre>" + html.escape(dump(shrunk)) + "</pre>",
        ]
    return page(title, body)


def figure_sweep(runs: Sequence[SweepRun]) -> Figure:
    """One row per seed: its fault windows as bars (instant faults as diamonds), the seed's
    label coloured by whether it met the expectation."""
    rows = [f"seed {r.seed}" for r in runs]
    data: list[dict[str, object]] = []
    for run, row in zip(runs, rows, strict=True):
        colour = PASSED_COLOUR if run.meets_expectation else FAILED_COLOUR
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "showlegend": False,
                "x": [0],
                "y": [row],
                "marker": {"color": colour, "size": 10, "symbol": "square"},
                "hovertext": f"{row}: {run.summary}",
                "hoverinfo": "text",
            }
        )
        for fault, end_s in run.faults:
            label = f"{fault.action} {fault.target}".strip()
            if end_s <= fault.at_s:
                data.append(
                    {
                        "type": "scatter",
                        "mode": "markers",
                        "showlegend": False,
                        "x": [fault.at_s],
                        "y": [row],
                        "hovertext": label,
                        "hoverinfo": "text+x",
                        "marker": {"symbol": "diamond", "size": 11, "color": "#b8860b"},
                    }
                )
                continue
            data.append(
                {
                    "type": "bar",
                    "orientation": "h",
                    "showlegend": False,
                    "y": [row],
                    "base": [fault.at_s],
                    "x": [end_s - fault.at_s],
                    "text": [label],
                    "textposition": "inside",
                    "marker": {"color": FAULT_FILL, "line": {"color": colour, "width": 2}},
                    "hovertext": f"{label}: {fault.at_s:g} s to {end_s:g} s",
                    "hoverinfo": "text",
                }
            )
    return {
        "data": data,
        "layout": {
            "title": {"text": "Fault schedule per seed (outlined red: the run failed)"},
            "height": 160 + 28 * len(runs),
            "barmode": "overlay",
            "showlegend": False,
            "xaxis": {
                "title": {"text": "time since the workload's start (s)"},
                "ticks": "outside",
                "ticksuffix": " s",
                "rangemode": "tozero",
            },
            "yaxis": {
                "type": "category",
                "categoryorder": "array",
                "categoryarray": rows[::-1],
                "ticks": "outside",
                "automargin": True,
            },
        },
    }


def _table(runs: Sequence[SweepRun]) -> str:
    rows = "".join(
        "<tr>"
        f"<td>{run.seed}</td>"
        f"<td style='color:{PASSED_COLOUR if run.meets_expectation else FAILED_COLOUR}'>"
        f"{'as expected' if run.meets_expectation else 'FAILED'}</td>"
        f"<td>{html.escape(run.verdict)}</td>"
        f"<td>{html.escape(run.summary)}</td>"
        f"<td>{html.escape('; '.join(_fault_text(f, e) for f, e in run.faults) or 'none')}</td>"
        "</tr>"
        for run in runs
    )
    return (
        "<table><thead><tr><th>seed</th><th>expectation</th><th>verdict</th><th>summary</th>"
        f"<th>faults</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _fault_text(fault: Fault, end_s: float) -> str:
    label = f"{fault.action} {fault.target}".strip()
    return f"{label} at {fault.at_s:g} s" + (f" until {end_s:g} s" if end_s > fault.at_s else "")
