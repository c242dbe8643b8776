"""``kafkasim sim``: failure-injection runs in the deterministic simulation.

* ``sim list``: the scenario catalog.
* ``sim run SCENARIO --seed N``: one run; prints the faults as they happen (virtual time), then
  the checker's verdict; writes the history (JSON lines) and, with ``--report``, an HTML report.
  The same scenario and seed replay the same history, byte for byte. The same run as
  ``kafkasim chaos run SCENARIO --backend sim --seed N``.
* ``sim sweep SCENARIO... --seeds 1..100``: one run per seed, each with a fault schedule drawn
  at random from the scenario's ``seed_faults`` section (its fixed schedule when it has none),
  on a local process pool or on Spark (``--spark``), for one scenario, some or the whole
  catalog (``all``); resumable, with a text and HTML summary, failing seeds shrunk to scenario
  files that replay them (``cli/sim_sweep.py``).

SCENARIO is a catalog name (``leader-crash``) or a path to a TOML file. Exit status: 0 when
every run met the scenario's expectation, 1 when one did not (or for bad input: one line;
``sim sweep`` exits 2 for bad input).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from kafkasim.cli import console
from kafkasim.cli.pipes import say
from kafkasim.cli.sim_sweep import register_sweep
from kafkasim.common.clock import SystemClock
from kafkasim.console.replay import Replay
from kafkasim.console.server import ReplayConsole
from kafkasim.faults import checker, schedules
from kafkasim.faults import report as html_report
from kafkasim.faults.backend import BackendSpec
from kafkasim.faults.history import History
from kafkasim.faults.reading import catalog, find, load
from kafkasim.faults.scenario import CLIENT_KAFKASIM, Scenario
from kafkasim.faults.sweep import meets_expectation, quiet_logs, run_once
from kafkasim.sim.backend import SIM


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
    one.add_argument(
        "--console", action="store_true", help="then replay the run in the web console"
    )
    console.add_bind(one)
    one.set_defaults(func=cmd_run)
    register_sweep(verbs)


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
    quiet_logs()
    if args.console and args.history is None:
        args.history = Path(tempfile.mkdtemp(prefix="kafkasim-sim-")) / "history.jsonl"
    status = run_and_report(args, chosen, SIM, args.seed)
    if args.console:
        replayed = ReplayConsole(Replay(History.read(args.history)))
        console.serve(replayed, args.bind)
    return status


def save_outputs(args: argparse.Namespace, history: History, report: checker.CheckReport) -> None:
    """--history (JSON lines) and --report (HTML), when asked for."""
    if args.history is not None:
        history.write(args.history)
        say(f"history: {args.history}")
    if args.report is not None:
        args.report.write_text(html_report.render(history, report))
        say(f"report: {args.report}")
