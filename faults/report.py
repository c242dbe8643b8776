"""The HTML report of a failure-injection run: one self-contained page, charts drawn by Plotly
(its JavaScript bundle, from the pinned ``plotly`` package, embedded once in the page: no
network, no other file). Titled with the scenario and the seed, it shows

* the verdict and the checker's findings, wrapped (never cut off);
* the fault windows, one lane per overlap, labelled, and shaded across every chart;
* throughput (acknowledged sends, records read: each on its own scale, so a stall shows as a
  drop to zero) and send latency (p50 and max per second);
* per partition: who led when (a bar per leader and epoch, an unclean election named), the ISR
  as steps of membership (which brokers), and every replica's high watermark and log end
  offset with its truncations and the lost offset ranges marked.

What is drawn comes from ``faults.report_series`` (pure, tested on its own); this module only
lays it out. ``render(history, report)`` is pure: values in, one string out. The figures are
Plotly figure specifications built as plain dicts (``figure_*``), so that a test can hand them
to ``plotly.graph_objects.Figure`` to validate every property name.

A sweep's report (seeds, verdicts, the shrunk schedule) is ``faults.report_sweep.render_sweep``,
drawn with this module's ``page`` and ``figure_html``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from kafkasim.faults.history import History
from kafkasim.faults.report_series import (
    FaultWindow,
    PartitionSeries,
    ReportSeries,
    Throughput,
    derive,
)
from kafkasim.faults.verdict import CheckReport

Figure = dict[str, Any]

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
FAULT_FILL, LOST_FILL, UNCLEAN_COLOUR, TRUNCATION_COLOUR = "#f5c542", "#d62728", "#b00020", "#000"
TIME_AXIS = "time since the workload's start (s)"
ROW_GAP = 0.06  # of the figure's height, between two rows
PAGE_STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:1em auto;padding:0 1em}"
    "pre{background:#f4f4f4;padding:.5em;white-space:pre-wrap;overflow-wrap:anywhere}"
    ".figure{margin:1em 0}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:.2em .4em;vertical-align:top;text-align:left}"
)


@cache
def plotly_js_path() -> Path:
    """Where the pinned ``plotly`` package keeps its JavaScript bundle (``plotly.min.js``):
    the one copy the reports inline and the live console serves."""
    path = Path(str(resources.files("plotly").joinpath("package_data/plotly.min.js")))
    if not path.is_file():
        raise FileNotFoundError(f"plotly.min.js is not in the plotly package ({path})")
    return path


def plotly_js() -> str:
    """Plotly's JavaScript bundle as the pinned ``plotly`` package ships it."""
    return plotly_js_path().read_text("utf-8")


def page(title: str, body: Sequence[str]) -> str:
    """A self-contained HTML page: ``body`` (HTML fragments) after the Plotly bundle."""
    # "</script" inside the bundle would end the element early; it holds none today, but the
    # check costs nothing and keeps a future bundle from breaking every report.
    bundle = plotly_js().replace("</script", "<\\/script")
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style>"
        f"<script>{bundle}</script></head><body>" + "\n".join(body) + "</body></html>\n"
    )


def figure_html(figure_id: str, figure: Figure) -> str:
    """A div and the script that draws ``figure`` in it (no mode bar link to any site)."""
    spec = json.dumps(figure, separators=(",", ":")).replace("</", "<\\/")
    config = json.dumps({"displaylogo": False, "responsive": True})
    return (
        f'<div class="figure" id="{figure_id}"></div><script>(function(){{var f={spec};'
        f'Plotly.newPlot("{figure_id}",f.data,f.layout,{config});}})();</script>'
    )


# -- the run report ---------------------------------------------------------------------------


def render(history: History, report: CheckReport) -> str:
    meta = history.meta
    series = derive(history, report)
    scenario = str(meta.get("scenario", "?"))
    title = f"kafkasim run: {scenario}, {_seed_title(meta.get('seed'))}"
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p>runtime: {html.escape(str(meta.get('runtime', '?')))}, "
        f"client: {html.escape(str(meta.get('client', 'kafkasim')))}, "
        f"{html.escape(_seed_text(meta.get('seed')))}</p>",
        "<p>Times count from the workload's start (0 s), as the run's console lines do. "
        "Fault windows are shaded on every chart and named in the top row of each.</p>",
        "<h2>Verdict</h2><pre>" + html.escape("\n".join(report.verdict_lines())) + "</pre>",
        "<h2>Faults</h2>" + _fault_list(series.faults),
        "<h2>Throughput and latency</h2>",
        figure_html("throughput", figure_throughput(series)),
        "<h2>Replicas</h2>",
    ]
    for i, partition in enumerate(series.partitions):
        body.append(f"<h3>{html.escape(partition.name)}</h3>")
        body.append(_partition_notes(partition))
        body.append(figure_html(f"partition-{i}", figure_partition(series, partition)))
    return page(title, body)


def _fault_list(faults: Sequence[FaultWindow]) -> str:
    if not faults:
        return "<p>none</p>"
    items = "".join(
        f"<li>{f.start_ms / 1000:.1f} s: {html.escape(f.label)}"
        + ("" if f.end_ms is None else f" until {f.end_ms / 1000:.1f} s")
        + "</li>"
        for f in faults
    )
    return f"<ul>{items}</ul>"


def _partition_notes(p: PartitionSeries) -> str:
    """What the partition's chart marks, in words (elections, truncations, lost ranges)."""
    notes = [
        f"leader {i.broker}, epoch {i.leader_epoch}, from {i.start_ms / 1000:.1f} s"
        + (" (UNCLEAN election: elected from outside the ISR)" if i.unclean else "")
        for i in p.leaders
    ]
    notes += [
        _truncation_text(t.broker, t.from_offset, t.to_offset, t.observed)
        + f" at {t.time_ms / 1000:.1f} s"
        for t in p.truncations
    ]
    notes += [_range_text(r.kind, r.first, r.last, r.records) for r in p.ranges]
    return "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>"


def _truncation_text(broker: int, from_offset: int, to_offset: int, observed: bool) -> str:
    how = "truncated" if observed else "truncated (inferred from the lost records)"
    return f"broker {broker} {how}: log end {from_offset} → {to_offset}"


def _range_text(kind: str, first: int, last: int, records: int) -> str:
    what = "acknowledged records lost" if kind == "lost" else "reads later overwritten"
    return f"{what}: offsets {first} to {last} ({records} records)"


# -- figures ----------------------------------------------------------------------------------


def figure_throughput(series: ReportSeries) -> Figure:
    """Fault lanes; acknowledged records/s; records read/s; send latency (ms)."""
    t: Throughput = series.throughput
    seconds = list(t.seconds)
    rows = _Rows(series)
    rows.add_faults()
    ack = rows.add("acknowledged (records/s)", 1.0)
    rows.trace(
        ack,
        {
            "type": "bar",
            "name": "acknowledged records/s",
            "x": seconds,
            "y": list(t.acknowledged),
            "marker": {"color": COLOURS[0]},
        },
    )
    read = rows.add("read (records/s)", 1.0)
    rows.trace(
        read,
        {
            "type": "bar",
            "name": "records read/s",
            "x": seconds,
            "y": list(t.read),
            "marker": {"color": COLOURS[2]},
        },
    )
    latency = rows.add("send latency (ms)", 1.0)
    for name, values, colour in (
        ("p50", t.latency_p50_ms, COLOURS[4]),
        ("max", t.latency_max_ms, COLOURS[1]),
    ):
        rows.trace(
            latency,
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"send latency {name} (ms)",
                "x": seconds,
                "y": list(values),
                "line": {"color": colour},
            },
        )
    return rows.figure("Throughput and send latency, per second", height=640)


def figure_partition(series: ReportSeries, p: PartitionSeries) -> Figure:
    """Fault lanes; who led when; ISR membership; HW and LEO per replica with truncations and
    lost ranges."""
    rows = _Rows(series)
    rows.add_faults()
    brokers = [f"broker {b}" for b in p.replicas]
    lead = rows.add("leader (epoch)", 0.6, categories=brokers)
    for i in p.leaders:
        name = f"leader {i.broker}, epoch {i.leader_epoch}" + (" (UNCLEAN)" if i.unclean else "")
        rows.trace(
            lead,
            _span(
                name,
                f"broker {i.broker}",
                i.start_ms,
                i.end_ms,
                colour=UNCLEAN_COLOUR if i.unclean else COLOURS[i.leader_epoch % 7],
                text=f"epoch {i.leader_epoch}" + (" UNCLEAN" if i.unclean else ""),
            ),
        )
    for e in p.unclean_elections:
        rows.marker_line(
            e.time_ms,
            UNCLEAN_COLOUR,
            f"unclean election: broker {e.broker} leads epoch {e.leader_epoch} "
            f"(ISR was {_set(e.isr_before)})",
        )
    isr = rows.add("ISR members", 0.6, categories=brokers)
    for broker in p.replicas:
        colour = COLOURS[(broker - 1) % 7]
        start: int | None = None
        for step in (*p.isr, None):  # None: the end of the run closes an open membership
            member = step is not None and broker in step.isr
            if member and start is None and step is not None:
                start = step.time_ms
            elif not member and start is not None:
                stop = series.end_ms if step is None else step.time_ms
                rows.trace(
                    isr,
                    _span(
                        f"broker {broker} in the ISR",
                        f"broker {broker}",
                        start,
                        stop,
                        colour=colour,
                        text="in ISR",
                        legend=False,
                    ),
                )
                start = None
        for step in p.isr:  # hover: the whole ISR at each change
            rows.trace(
                isr,
                {
                    "type": "scatter",
                    "mode": "markers",
                    "showlegend": False,
                    "x": [step.time_ms / 1000],
                    "y": [f"broker {broker}"],
                    "marker": {"size": 4, "color": "#444"},
                    "hovertext": f"ISR {_set(step.isr)} (epoch {step.leader_epoch})",
                    "hoverinfo": "text+x",
                },
            )
    offsets = rows.add("offset", 2.0)
    for broker, points in p.points.items():
        colour = COLOURS[(broker - 1) % 7]
        xs, hws, leos = _broken(points, series.sample_period_ms)
        rows.trace(
            offsets,
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"HW broker {broker}",
                "x": xs,
                "y": hws,
                "line": {"color": colour, "shape": "hv"},
            },
        )
        rows.trace(
            offsets,
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"LEO broker {broker}",
                "x": xs,
                "y": leos,
                "line": {"color": colour, "shape": "hv", "dash": "dot"},
            },
        )
    for t in p.truncations:
        text = _truncation_text(t.broker, t.from_offset, t.to_offset, t.observed)
        rows.trace(
            offsets,
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": text,
                "x": [t.time_ms / 1000] * 2,
                "y": [t.from_offset, t.to_offset],
                "line": {"color": TRUNCATION_COLOUR, "width": 3},
                "marker": {"symbol": ["circle-open", "x"], "size": 10},
            },
        )
        rows.note(offsets, t.time_ms / 1000, t.to_offset, f"broker {t.broker} truncated")
    for r in p.ranges:
        text = _range_text(r.kind, r.first, r.last, r.records)
        # Lost labels sit above their band at the left, divergent ones below it at the right:
        # the two kinds often cover the same offsets.
        rows.band(
            offsets,
            r.first,
            r.last + 1,
            text,
            LOST_FILL if r.kind == "lost" else COLOURS[4],
            above=r.kind == "lost",
        )
    return rows.figure(
        f"{p.name}: who led when, ISR, HW and LEO per replica",
        height=820 + 18 * len(p.replicas),
    )


def _span(name: str, y: str, start_ms: int, end_ms: int, *, colour: str, text: str,
          legend: bool = True) -> dict[str, Any]:  # fmt: skip
    """A horizontal bar from ``start_ms`` to ``end_ms`` on row ``y``."""
    return {
        "type": "bar",
        "orientation": "h",
        "name": name,
        "showlegend": legend,
        "y": [y],
        "base": [start_ms / 1000],
        "x": [max(end_ms - start_ms, 1) / 1000],
        "text": [text],
        "textposition": "inside",
        "insidetextanchor": "middle",
        "marker": {"color": colour},
        "hovertext": f"{name}: {start_ms / 1000:.1f} s to {end_ms / 1000:.1f} s",
        "hoverinfo": "text",
    }


def _broken(points: Sequence[Any], period_ms: int) -> tuple[list[Any], list[Any], list[Any]]:
    """x, HW and LEO of a replica's samples, the line broken (None) across a gap of more than
    two sampling periods (the broker was down or unreachable)."""
    xs: list[Any] = []
    hws: list[Any] = []
    leos: list[Any] = []
    previous: int | None = None
    for point in points:
        if previous is not None and point.time_ms - previous > 2 * period_ms:
            xs.append(None)
            hws.append(None)
            leos.append(None)
        xs.append(point.time_ms / 1000)
        hws.append(point.high_watermark)
        leos.append(point.log_end_offset)
        previous = point.time_ms
    return xs, hws, leos


def _set(brokers: Sequence[int]) -> str:
    return "{" + ", ".join(str(b) for b in brokers) + "}"


class _Rows:
    """Rows stacked in one figure, sharing the time axis (each row its own y axis, so each
    its own scale), with the fault windows shaded across all of them."""

    def __init__(self, series: ReportSeries) -> None:
        self.series = series
        self.rows: list[tuple[str, float, list[str] | None]] = []
        self.data: list[dict[str, Any]] = []
        self.shapes: list[dict[str, Any]] = []
        self.annotations: list[dict[str, Any]] = []

    def add(self, title: str, weight: float, *, categories: list[str] | None = None) -> int:
        self.rows.append((title, weight, categories))
        return len(self.rows)

    def trace(self, row: int, trace: dict[str, Any]) -> None:
        self.data.append({**trace, "xaxis": _axis("x", row), "yaxis": _axis("y", row)})

    def add_faults(self) -> None:
        """The top row: one bar per fault window, in its lane, labelled."""
        faults = self.series.faults
        lanes = [
            f"faults {lane + 1}" for lane in range(max((f.lane for f in faults), default=0) + 1)
        ]
        row = self.add("faults", 0.25 * len(lanes), categories=lanes[::-1])
        for f in faults:
            if f.end_ms is None:
                self.trace(
                    row,
                    {
                        "type": "scatter",
                        "mode": "markers+text",
                        "name": f.label,
                        "x": [f.start_ms / 1000],
                        "y": [lanes[f.lane]],
                        "text": [f.label],
                        "textposition": "middle right",
                        "marker": {"symbol": "diamond", "size": 12, "color": "#b8860b"},
                    },
                )
                continue
            self.trace(
                row,
                _span(
                    f.label,
                    lanes[f.lane],
                    f.start_ms,
                    f.end_ms,
                    colour=FAULT_FILL,
                    text=f.label,
                    legend=False,
                ),
            )
            self.shapes.append(
                {
                    "type": "rect",
                    "xref": "x",
                    "yref": "paper",
                    "x0": f.start_ms / 1000,
                    "x1": f.end_ms / 1000,
                    "y0": 0,
                    "y1": 1,
                    "fillcolor": FAULT_FILL,
                    "opacity": 0.15,
                    "line": {"width": 0},
                    "layer": "below",
                }
            )

    def marker_line(self, time_ms: int, colour: str, text: str) -> None:
        """A vertical line across every row, labelled at the top."""
        x = time_ms / 1000
        self.shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": x,
                "x1": x,
                "y0": 0,
                "y1": 1,
                "line": {"color": colour, "width": 2, "dash": "dash"},
            }
        )
        self.annotations.append(
            {
                "xref": "x",
                "yref": "paper",
                "x": x,
                "y": 1.0,
                "text": text,
                "showarrow": False,
                "xanchor": "left",
                "yanchor": "bottom",
                "font": {"color": colour},
            }
        )

    def band(self, row: int, y0: float, y1: float, text: str, colour: str, *,
             above: bool) -> None:  # fmt: skip
        """A horizontal band across the run on ``row`` (an offset range), labelled."""
        xref, yref = _axis("x", row), _axis("y", row)
        self.shapes.append(
            {
                "type": "rect",
                "xref": f"{xref} domain",
                "yref": yref,
                "x0": 0,
                "x1": 1,
                "y0": y0,
                "y1": y1,
                "fillcolor": colour,
                "opacity": 0.2,
                "line": {"color": colour, "width": 1},
            }
        )
        self.annotations.append(
            {
                "xref": f"{xref} domain",
                "yref": yref,
                "x": 0.01 if above else 0.99,
                "y": y1 if above else y0,
                "text": text,
                "showarrow": False,
                "xanchor": "left" if above else "right",
                "yanchor": "bottom" if above else "top",
                "font": {"color": colour},
            }
        )

    def note(self, row: int, x: float, y: float, text: str) -> None:
        self.annotations.append(
            {
                "xref": _axis("x", row),
                "yref": _axis("y", row),
                "x": x,
                "y": y,
                "text": text,
                "showarrow": True,
                "arrowhead": 2,
                "ax": 40,
                "ay": 30,
            }
        )

    def figure(self, title: str, *, height: int) -> Figure:
        total = sum(weight for _, weight, _ in self.rows)
        usable = 1 - ROW_GAP * (len(self.rows) - 1)
        layout: dict[str, Any] = {
            "title": {"text": title},
            "height": height,
            "barmode": "overlay",
            "hovermode": "closest",
            "margin": {"l": 90, "r": 30, "t": 80, "b": 60},
            # Below the time axis's title, which sits about 60 px under the last row.
            "legend": {"orientation": "h", "yanchor": "top", "y": -90 / height},
            "shapes": self.shapes,
            "annotations": self.annotations,
        }
        top = 1.0
        for row, (row_title, weight, categories) in enumerate(self.rows, 1):
            bottom = max(top - usable * weight / total, 0.0)
            last = row == len(self.rows)
            x: dict[str, Any] = {
                "anchor": _axis("y", row),
                "range": [0, self.series.end_ms / 1000],
                "ticks": "outside",
                "ticksuffix": " s",
                "showgrid": True,
            }
            if row > 1:
                x["matches"] = "x"
            if last:
                x["title"] = {"text": TIME_AXIS}
            y: dict[str, Any] = {
                "domain": [bottom, top],
                "anchor": _axis("x", row),
                "title": {"text": row_title},
                "ticks": "outside",
                "automargin": True,
            }
            if categories is not None:
                y.update(
                    type="category",
                    categoryorder="array",
                    categoryarray=categories,
                    range=[-0.5, len(categories) - 0.5],
                )
            else:
                y["rangemode"] = "tozero"
            layout[_axis("xaxis", row)] = x
            layout[_axis("yaxis", row)] = y
            top = bottom - ROW_GAP
        return {"data": self.data, "layout": layout}


def _axis(prefix: str, row: int) -> str:
    return prefix if row == 1 else f"{prefix}{row}"


def _seed_title(seed: object) -> str:
    return "no seed (real processes)" if seed is None else f"seed {seed}"


def _seed_text(seed: object) -> str:
    """What the seed says about replaying the run."""
    if seed is None:
        return (
            "seed: none (a run on real processes is not replayable from a seed; its fault "
            "targets were drawn from a generator seeded with the scenario's name)"
        )
    return f"seed: {seed} (the same seed replays this run)"
