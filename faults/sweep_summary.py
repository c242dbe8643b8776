"""A sweep's summary: seeds per scenario and verdict, the failing seeds, wall time and seeds
per second, and the shrunk schedule of each failure; as text lines (printed) and as one
self-contained HTML page (no scripts, no external files).

``lines(summary)`` and ``render_html(summary)`` are pure: values in, text out. The counts
depend on the results only, so a resumed sweep's counts are those of the same sweep run in
one go; the times say what this invocation ran.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kafkasim.faults.sweep import SeedResult, Shrunk

__all__ = ["SweepSummary", "lines", "render_html"]

# Verdict columns in this order, then any other the checker gives, by name.
VERDICT_ORDER = ("SAFE", "ANOMALIES", "INVARIANT VIOLATED", "DATA LOST")
FAILING_SHOWN_MAX = 20


@dataclass(frozen=True)
class SweepSummary:
    engine: str  # what ran the seeds: "local pool (2 processes)", "Spark local[2]"
    scenarios: Sequence[str]  # in the sweep's order
    expectations: Sequence[str]  # each scenario's expect, same order
    seeds: range
    results: Sequence[SeedResult]  # every seed of the sweep: resumed ones included
    resumed: int  # how many results came from the resume state
    wall_s: float  # this invocation's wall time (running the seeds, not shrinking)
    shrunk: Sequence[Shrunk] = ()

    def verdicts(self) -> list[str]:
        seen = {r.verdict for r in self.results}
        return [v for v in VERDICT_ORDER if v in seen] + sorted(seen - set(VERDICT_ORDER))

    def counts(self) -> dict[str, Counter[str]]:
        table: dict[str, Counter[str]] = {name: Counter() for name in self.scenarios}
        for r in self.results:
            table[r.scenario][r.verdict] += 1
        return table

    def failing(self, scenario: str) -> list[int]:
        return sorted(r.seed for r in self.results if r.scenario == scenario and r.failed)

    @property
    def ran(self) -> int:
        return len(self.results) - self.resumed

    @property
    def seeds_per_s(self) -> float:
        return self.ran / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        return not any(r.failed for r in self.results)


def _seeds_text(seeds: Sequence[int]) -> str:
    shown = ", ".join(str(s) for s in seeds[:FAILING_SHOWN_MAX])
    more = len(seeds) - FAILING_SHOWN_MAX
    return shown + (f" and {more} more" if more > 0 else "")


def lines(summary: SweepSummary) -> list[str]:
    """The text summary: a table (scenario, expectation, seeds, one column per verdict,
    failing), the failing seeds of each scenario, then the times."""
    verdicts = summary.verdicts()
    counts = summary.counts()
    table = [["scenario", "expect", "seeds", *verdicts, "failing"]]
    for name, expect in zip(summary.scenarios, summary.expectations, strict=True):
        row = [name, expect, str(sum(counts[name].values()))]
        row += [str(counts[name][v]) for v in verdicts]
        table.append([*row, str(len(summary.failing(name)))])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    out = [
        "  ".join(
            f"{cell:<{w}}" if i == 0 else f"{cell:>{w}}"
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    ]
    for name in summary.scenarios:
        failing = summary.failing(name)
        if failing:
            out.append(f"failing seeds of {name}: {_seeds_text(failing)}")
    resumed = f", {summary.resumed} resumed from the state file" if summary.resumed else ""
    out.append(
        f"{len(summary.results)} seeds ({summary.ran} run{resumed}) on {summary.engine}: "
        f"{summary.ran} in {summary.wall_s:.1f} s of wall time, "
        f"{summary.seeds_per_s:.2f} seeds per second"
    )
    return out


_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border:1px solid #bbb;padding:4px 10px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}.bad{background:#fbe3e3}"
    "pre{background:#f4f4f4;padding:8px;overflow-x:auto}"
)


def render_html(summary: SweepSummary) -> str:
    """One page: the table of ``lines`` with failing rows marked, the times, and for each
    failure its summary line and the shrunk scenario file that replays it."""
    esc = html.escape
    verdicts = summary.verdicts()
    counts = summary.counts()
    head = "".join(
        f"<th>{esc(c)}</th>" for c in ("scenario", "expect", "seeds", *verdicts, "failing seeds")
    )
    rows = []
    for name, expect in zip(summary.scenarios, summary.expectations, strict=True):
        failing = summary.failing(name)
        cells = [name, expect, str(sum(counts[name].values()))]
        cells += [str(counts[name][v]) for v in verdicts]
        cells.append(_seeds_text(failing) if failing else "0")
        mark = ' class="bad"' if failing else ""
        rows.append(f"<tr{mark}>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>")
    times = lines(summary)[-1]
    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8"><title>kafkasim sweep</title>',
        f"<style>{_STYLE}</style></head><body>",
        "<h1>kafkasim sweep</h1>",
        f"<p>seeds {summary.seeds.start}..{summary.seeds.stop - 1} of "
        f"{len(summary.scenarios)} scenario(s); {esc(times)}</p>",
        f"<table><tr>{head}</tr>{''.join(rows)}</table>",
    ]
    if summary.shrunk:
        parts.append("<h2>Failures, shrunk</h2>")
    for s in summary.shrunk:
        parts += [
            f"<h3>{esc(s.scenario)}, seed {s.seed}</h3>",
            f"<p>{esc(s.summary)}</p>",
            f"<p>shrunk from {s.faults_before} to {s.faults_after} faults; replay with "
            f"<code>kafkasim sim run FILE --seed {s.seed}</code> where FILE holds:</p>",
            f"<pre>{esc(s.text)}</pre>",
        ]
    parts.append("</body></html>\n")
    return "\n".join(parts)
