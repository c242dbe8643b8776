"""``kafkasim sim``: failure-injection runs in the deterministic simulation.

* ``sim list``: the scenario catalog.
* ``sim run SCENARIO --seed N``: one run; prints the faults as they happen (virtual time), then
  the checker's verdict; writes the history (JSON lines) and, with ``--report``, an HTML report.
  The same scenario and seed replay the same history, byte for byte. The same run as
  ``kafkasim chaos run SCENARIO --backend sim --seed N``.
* ``sim sweep SCENARIO --seeds 1..100``: one run per seed, each with a fault schedule drawn at
  random from the scenario's ``seed_faults`` section (its fixed schedule when it has none);
  lists every seed whose run the checker rejects (for a ``may-lose`` scenario: every seed that
  lost data), and shrinks the first one to a minimal fault schedule, printed as a scenario file
  that replays it.

SCENARIO is a catalog name (``leader-crash``) or a path to a TOML file. Exit status: 0 when
every run met the scenario's expectation, 1 when one did not (or for bad input: one line).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkasim.cli.pipes import say
from kafkasim.common.clock import SystemClock
from kafkasim.faults import checker, runner, schedules
from kafkasim.faults import report as html_report
from kafkasim.faults.backend import BackendSpec
from kafkasim.faults.history import History
from kafkasim.faults.reading import catalog, find, load
from kafkasim.faults.scenario import CLIENT_KAFKASIM, Fault, Scenario
from kafkasim.faults.writing import dump
from kafkasim.sim.backend import SIM
from kafkasim.sim.scratch import scratch_dir


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "sim", help="failure-injection runs in the deterministic simulation"
    )
    verbs = p.add_subparsers(dest="sim_command", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="the scenario catalog")
    listing.set_defaults(func=cmd_list)
    show = verbs.add_parser("show", help="print a scenario's TOML file (catalog name or file)")
    show.add_argument("scenario", help="a catalog name or a TOML file")
    show.set_defaults(func=cmd_show)
    one = verbs.add_parser("run", help="run a scenario with one seed")
    one.add_argument("scenario", help="a catalog name or a TOML file")
    one.add_argument("--seed", type=int, default=1)
    one.add_argument("--history", type=Path, help="write the history here (JSON lines)")
    one.add_argument("--report", type=Path, help="write an HTML report here")
    one.add_argument("--random-faults", action="store_true", help="draw the faults from the seed")
    one.set_defaults(func=cmd_run)
    sweep = verbs.add_parser("sweep", help="run many seeds with random fault schedules")
    sweep.add_argument("scenario", help="a catalog name or a TOML file")
    sweep.add_argument("--seeds", default="1..20", help="FIRST..LAST (inclusive)")
    sweep.add_argument("--no-shrink", action="store_true", help="do not shrink a failing seed")
    sweep.add_argument("--save", type=Path, help="write the shrunk failing scenario here")
    sweep.set_defaults(func=cmd_sweep)


def parse_seeds(text: str) -> range:
    first, sep, last = text.partition("..")
    try:
        lo = int(first)
        hi = int(last) if sep else lo
    except ValueError:
        raise ValueError(f"--seeds expects FIRST..LAST, got {text!r}") from None
    if hi < lo:
        raise ValueError(f"--seeds {text}: the last seed is below the first")
    return range(lo, hi + 1)


def cmd_list(args: argparse.Namespace) -> int:
    del args
    for name, path in sorted(catalog().items()):
        loaded = load(path)
        summary = loaded.description.strip().splitlines()[0] if loaded.description else ""
        print(f"{name:<28} {loaded.expect:<9} {summary}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """The scenario's file as written (comments included), after checking that it loads: what
    a user copies to start a scenario of their own (the keys: docs/scenarios.md)."""
    path = find(args.scenario)
    load(path)
    sys.stdout.write(path.read_text(encoding="utf-8"))
    return 0


def _quiet_logs() -> None:
    # The brokers' INFO lines would drown the run's own progress lines.
    logging.getLogger().setLevel(logging.ERROR)


def run_once(
    chosen: Scenario,
    seed: int | None,
    *,
    spec: BackendSpec = SIM,
    directory: Path | None = None,
    on_event: Callable[[str], None] | None = None,
) -> History:
    """One run on ``spec``'s backend, its files in ``directory`` (a temporary one if None)."""
    if directory is not None:
        return runner.run(chosen, spec, directory, seed=seed, on_event=on_event)
    scratch = scratch_dir() if spec.name == SIM.name else None  # RAM: fsyncs are free
    with tempfile.TemporaryDirectory(prefix=f"kafkasim-{spec.name}-", dir=scratch) as tmp:
        return runner.run(chosen, spec, Path(tmp), seed=seed, on_event=on_event)


def meets_expectation(chosen: Scenario, report: checker.CheckReport) -> bool:
    """A safe scenario must check clean; an unsafe one is run to show its loss, so any
    outcome is as expected (the verdict says which)."""
    return report.ok if chosen.expect == "safe" else True


def run_and_report(
    args: argparse.Namespace,
    chosen: Scenario,
    spec: BackendSpec,
    seed: int | None,
    directory: Path | None = None,
) -> int:
    """``sim run`` and ``chaos run``: one run with progress lines, the verdict, the outputs;
    the exit status."""
    where = f"seed {seed}" if spec is SIM else spec.runtime
    if chosen.workload.client != CLIENT_KAFKASIM:
        where += f", workload by {chosen.workload.client}"
    say(f"scenario {chosen.name} (expect: {chosen.expect}), {where}")
    wall = SystemClock()
    started = wall.monotonic_ms()
    history = run_once(chosen, seed, spec=spec, directory=directory, on_event=say)
    wall_s = max(wall.monotonic_ms() - started, 1) / 1000
    report = checker.check(history)
    for line in report.verdict_lines():
        say(line)
    if spec is SIM:
        sim_s = max((op.time_ms for op in history.ops), default=0) / 1000
        say(f"simulated {sim_s:.0f} s in {wall_s:.1f} s of wall time ({sim_s / wall_s:.0f}x)")
    else:
        say(f"ran {chosen.run_s:g} s of workload and settling in {wall_s:.1f} s of wall time")
    if directory is not None:
        say(f"cluster files: {directory}")
    save_outputs(args, history, report)
    return 0 if meets_expectation(chosen, report) else 1


def cmd_run(args: argparse.Namespace) -> int:
    chosen = load(find(args.scenario))
    if args.random_faults:
        chosen = schedules.randomize(chosen, random.Random(args.seed))
    _quiet_logs()
    return run_and_report(args, chosen, SIM, args.seed)


def save_outputs(args: argparse.Namespace, history: History, report: checker.CheckReport) -> None:
    """--history (JSON lines) and --report (HTML), when asked for."""
    if args.history is not None:
        history.write(args.history)
        say(f"history: {args.history}")
    if args.report is not None:
        args.report.write_text(html_report.render(history, report))
        say(f"report: {args.report}")


def cmd_sweep(args: argparse.Namespace) -> int:
    base = load(find(args.scenario))
    seeds = parse_seeds(args.seeds)
    _quiet_logs()
    say(f"sweeping {base.name} (expect: {base.expect}) over seeds {args.seeds}")
    failing: list[tuple[int, Scenario]] = []
    lossy = 0
    wall = SystemClock()
    started = wall.monotonic_ms()
    for seed in seeds:
        chosen = schedules.randomize(base, random.Random(seed)) if base.seed_faults else base
        report = checker.check(run_once(chosen, seed))
        lossy += not report.ok
        verdict = "ok" if report.ok else report.verdict_lines()[0]
        say(f"  seed {seed}: {verdict}")
        if not meets_expectation(chosen, report):
            failing.append((seed, chosen))
    minutes = max(wall.monotonic_ms() - started, 1) / 60_000
    say(
        f"{len(seeds)} seeds in {minutes * 60:.0f} s ({len(seeds) / minutes:.0f} seeds/min): "
        f"{lossy} with anomalies"
    )
    if base.expect != "safe":
        return 0
    if not failing:
        say("no failing seed")
        return 0
    say("failing seeds: " + ", ".join(str(seed) for seed, _ in failing))
    if args.no_shrink:
        return 1
    seed, chosen = failing[0]

    def fails(faults: tuple[Fault, ...]) -> bool:
        trial = dataclasses.replace(chosen, faults=faults, seed_faults=None)
        return not checker.check(run_once(trial, seed)).ok

    minimal = schedules.shrink(chosen.faults, fails)
    shrunk = dataclasses.replace(chosen, faults=minimal, seed_faults=None)
    text = dump(shrunk)
    say(f"seed {seed} shrunk from {len(chosen.faults)} to {len(minimal)} faults; replay with")
    say(f"  kafkasim sim run FILE --seed {seed}   where FILE holds:")
    say(text)
    if args.save is not None:
        args.save.write_text(text)
        say(f"saved: {args.save}")
    return 1
