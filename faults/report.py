"""The HTML report of a failure-injection run: one self-contained page (inline SVG, no
scripts, no external files) with

* the verdict and the checker's findings (lost, duplicated, unexpected, reordered records,
  invariant violations, transaction anomalies such as aborted and intermediate reads, with
  examples);
* throughput (acknowledged sends and records read per second) and send latency (p50 and max
  per second) over time, fault windows shaded;
* per partition: every replica's high watermark and log end offset over time, the leader and
  its epoch, and the ISR size, with the same fault windows.

``render(history, report)`` is pure: values in, one string out.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Sequence

from kafkasim.faults.history import History, OpType, ReplicaSample
from kafkasim.faults.verdict import CheckReport

WIDTH, HEIGHT, PAD = 860, 200, 42
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")

Series = tuple[str, Sequence[tuple[float, float]]]


def _chart(title: str, series: Sequence[Series], faults: Sequence[tuple[float, float, str]],
           *, x_max: float, y_label: str) -> str:  # fmt: skip
    """A line chart of ``series`` ((x seconds, y) points) with shaded fault windows."""
    y_max = max((y for _, points in series for _, y in points), default=1.0) or 1.0
    x_max = x_max or 1.0

    def x(v: float) -> float:
        return PAD + (WIDTH - 2 * PAD) * v / x_max

    def y(v: float) -> float:
        return HEIGHT - PAD + (2 * PAD - HEIGHT) * v / y_max

    parts = [
        f'<svg width="{WIDTH}" height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{PAD}" y="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for start, end, label in faults:
        parts.append(
            f'<rect x="{x(start):.1f}" y="{PAD - 18}" width="{max(x(end) - x(start), 2):.1f}" '
            f'height="{HEIGHT - 2 * PAD + 18}" fill="#f5c542" fill-opacity="0.25">'
            f"<title>{html.escape(label)}</title></rect>"
        )
    parts.append(
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        'stroke="#444"/>'
        f'<line x1="{PAD}" y1="{PAD - 18}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>'
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 14}" text-anchor="end">{x_max:.0f} s</text>'
        f'<text x="{PAD - 4}" y="{PAD - 18}" text-anchor="end">{y_max:g}</text>'
        f'<text x="{PAD - 4}" y="{HEIGHT - PAD}" text-anchor="end">0</text>'
        f'<text x="{PAD + 4}" y="{PAD - 22}">{html.escape(y_label)}</text>'
    )
    for i, (name, points) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        if points:
            path = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in points)
            parts.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>'
            )
        parts.append(
            f'<text x="{WIDTH - PAD - 150}" y="{PAD - 4 + 13 * i}" fill="{colour}">'
            f"{html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _per_second(times_ms: Sequence[int], x_max: float) -> list[tuple[float, float]]:
    counts: dict[int, int] = defaultdict(int)
    for t in times_ms:
        counts[t // 1000] += 1
    return [(float(s), float(counts.get(s, 0))) for s in range(int(x_max) + 1)]


def render(history: History, report: CheckReport) -> str:
    meta = history.meta
    end_ms = max([op.time_ms for op in history.ops] + [s.time_ms for s in history.samples] + [1000])
    x_max = end_ms / 1000
    faults = [
        (f.start_ms / 1000, (f.end_ms if f.end_ms is not None else f.start_ms + 300) / 1000,
         f"{f.action} {f.target}")
        for f in history.faults
    ]  # fmt: skip
    invoked: dict[str, int] = {}
    acked: list[int] = []
    latencies: dict[int, list[int]] = defaultdict(list)
    reads: list[int] = []
    for op in history.ops:
        if op.f == "send" and op.type is OpType.INVOKE:
            invoked[op.value] = op.time_ms
        elif op.f == "send" and op.type is OpType.OK:
            acked.append(op.time_ms)
            if op.value in invoked:
                latencies[op.time_ms // 1000].append(op.time_ms - invoked[op.value])
        elif op.f == "read" and op.type is OpType.OK:
            reads.append(op.time_ms)
    p50 = [(float(s), float(sorted(v)[len(v) // 2])) for s, v in sorted(latencies.items())]
    worst = [(float(s), float(max(v))) for s, v in sorted(latencies.items())]
    body = [
        f"<h1>kafkasim run: {html.escape(str(meta.get('scenario', '?')))}</h1>",
        f"<p>runtime: {html.escape(str(meta.get('runtime', '?')))}, "
        f"client: {html.escape(str(meta.get('client', 'kafkasim')))}, "
        f"{html.escape(_seed_text(meta.get('seed')))}</p>",
        "<p>Times count from the workload's start (0 s), as the run's console lines do.</p>",
        "<h2>Verdict</h2><pre>" + html.escape("\n".join(report.verdict_lines())) + "</pre>",
        "<h2>Faults</h2><ul>"
        + "".join(
            f"<li>{f.start_ms / 1000:.1f} s: {html.escape(f.action)} {html.escape(f.target)}"
            + ("" if f.end_ms is None else f" until {f.end_ms / 1000:.1f} s")
            + "</li>"
            for f in history.faults
        )
        + "</ul>",
        "<h2>Throughput and latency</h2>",
        _chart(
            "records per second",
            [("acknowledged", _per_second(acked, x_max)), ("read", _per_second(reads, x_max))],
            faults,
            x_max=x_max,
            y_label="records/s",
        ),
        _chart(
            "send latency (invoke to acknowledgement)",
            [("p50", p50), ("max", worst)],
            faults,
            x_max=x_max,
            y_label="ms",
        ),
        "<h2>Replicas</h2>",
    ]
    by_partition: dict[tuple[str, int], list[ReplicaSample]] = defaultdict(list)
    for sample in history.samples:
        by_partition[(sample.topic, sample.partition)].append(sample)
    for (topic, partition), samples in sorted(by_partition.items()):
        hw: dict[int, list[tuple[float, float]]] = defaultdict(list)
        leo: dict[int, list[tuple[float, float]]] = defaultdict(list)
        epochs: list[tuple[float, float]] = []
        isr: list[tuple[float, float]] = []
        for s in samples:
            t = s.time_ms / 1000
            hw[s.broker].append((t, s.high_watermark))
            leo[s.broker].append((t, s.log_end_offset))
            if s.is_leader:
                epochs.append((t, s.leader_epoch))
                isr.append((t, len(s.isr)))
        series: list[Series] = [(f"HW broker {b}", pts) for b, pts in sorted(hw.items())]
        series += [(f"LEO broker {b}", pts) for b, pts in sorted(leo.items())]
        body.append(
            _chart(
                f"{topic}-{partition}: HW and LEO per replica",
                series,
                faults,
                x_max=x_max,
                y_label="offset",
            )
        )
        body.append(
            _chart(
                f"{topic}-{partition}: leader epoch and ISR size (leader's view)",
                [("leader epoch", epochs), ("ISR size", isr)],
                faults,
                x_max=x_max,
                y_label="",
            )
        )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>kafkasim run</title>"
        "<style>body{font-family:sans-serif;max-width:900px;margin:1em auto}"
        "pre{background:#f4f4f4;padding:.5em}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )


def _seed_text(seed: object) -> str:
    """What the seed says about replaying the run."""
    if seed is None:
        return (
            "seed: none (a run on real processes is not replayable from a seed; its fault "
            "targets were drawn from a generator seeded with the scenario's name)"
        )
    return f"seed: {seed} (the same seed replays this run)"
