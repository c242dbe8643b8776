"""``kafkasim chaos``: failure-injection runs against real processes on this machine.

* ``chaos run SCENARIO``: start ZooKeeper and the scenario's brokers as local processes, run
  its workload and fault schedule on the wall clock (``cluster.chaos``), print progress lines as
  they happen, then the checker's verdict; writes the history (JSON lines) with ``--history``
  and an HTML report with ``--report``. ``--dir D`` keeps the cluster's files (broker logs,
  data, ZooKeeper) in D, which must be new or empty; otherwise they go to a temporary
  directory removed afterwards.

SCENARIO is a catalog name (``leader-crash``) or a path to a TOML file, as for ``kafkasim sim
run``. A scenario with a fault that local processes cannot suffer (a network partition, a
power cut, ...) is refused before anything starts, with one line naming those faults. Exit
status: 0 when the run met the scenario's expectation (safe: the checker found nothing;
may-lose: any verdict), 1 otherwise or on an error.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import Any

from cli.sim import meets_expectation, save_outputs
from cluster import chaos
from common.clock import SystemClock
from sim import checker, scenario
from sim.history import History


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "chaos", help="failure-injection runs against real local processes"
    )
    verbs = p.add_subparsers(dest="chaos_command", required=True, metavar="VERB")
    one = verbs.add_parser("run", help="run a scenario on ZooKeeper and broker processes")
    one.add_argument("scenario", help="a catalog name or a TOML file")
    one.add_argument("--history", type=Path, help="write the history here (JSON lines)")
    one.add_argument("--report", type=Path, help="write an HTML report here")
    one.add_argument(
        "--dir", type=Path, help="keep the cluster's files here (a new or empty directory)"
    )
    one.set_defaults(func=cmd_run)


def _progress(line: str) -> None:
    print(line, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    chosen = scenario.load(scenario.find(args.scenario))
    chaos.check_supported(chosen)  # before a line is printed or a process started
    if not args.verbose:
        # The clients' retry warnings during faults would drown the run's own lines.
        logging.getLogger().setLevel(logging.ERROR)
    print(f"scenario {chosen.name} (expect: {chosen.expect}), {chaos.RUNTIME}", flush=True)
    wall = SystemClock()
    started = wall.monotonic_ms()
    history = _run(chosen, args.dir)
    wall_s = (wall.monotonic_ms() - started) / 1000
    report = checker.check(history)
    for line in report.verdict_lines():
        print(line)
    run_s = chosen.run_s
    print(f"ran {run_s:g} s of workload and settling in {wall_s:.1f} s of wall time")
    if args.dir is not None:
        print(f"cluster files: {args.dir}")
    save_outputs(args, history, report)
    return 0 if meets_expectation(chosen, report) else 1


def _run(chosen: scenario.Scenario, directory: Path | None) -> History:
    if directory is not None:
        return chaos.run(chosen, directory, on_event=_progress)
    with tempfile.TemporaryDirectory(prefix="kafkasim-chaos-") as tmp:
        return chaos.run(chosen, Path(tmp), on_event=_progress)
