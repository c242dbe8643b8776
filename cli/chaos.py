"""``kafkasim chaos``: failure-injection runs against a real cluster on this machine.

* ``chaos run SCENARIO``: start ZooKeeper and the scenario's brokers, run its workload and
  fault schedule on the wall clock (``cluster.chaos``), print progress lines as they happen,
  then the checker's verdict; writes the history (JSON lines) with ``--history`` and an HTML
  report with ``--report``. ``--dir D`` keeps the run's files in D, which must be new or
  empty; otherwise they go to a temporary directory removed afterwards.
* ``--backend local`` (the default): local processes (``cluster.chaos.LocalBackend``; the
  files are the broker logs, data and ZooKeeper). ``--backend compose``: the containers of
  compose/docker-compose.yml, a compose project of the run's own, taken down (``down -v``) at
  the end (``cluster.compose``; the files are the generated compose override and the
  project's logs). It needs a Docker engine and the images built by
  compose/build-offline.sh; without them it fails in one line saying which is missing.

SCENARIO is a catalog name (``leader-crash``) or a path to a TOML file, as for ``kafkasim sim
run``. A scenario with a fault the chosen backend cannot inject (for local processes a network
partition, for both a power cut, ...) is refused before anything starts, with one line naming
the backend's runtime and those faults. Exit status: 0 when the run met the scenario's
expectation (safe: the checker found nothing; may-lose: any verdict), 1 otherwise or on an
error.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path
from typing import Any

from kafkasim.cli.sim import meets_expectation, save_outputs
from kafkasim.cluster import chaos, compose
from kafkasim.common.clock import SystemClock
from kafkasim.sim import checker, scenario
from kafkasim.faults.history import History

BACKENDS: dict[str, chaos.BackendSpec] = {"local": chaos.LOCAL, "compose": compose.COMPOSE}


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "chaos", help="failure-injection runs against real processes or containers"
    )
    verbs = p.add_subparsers(dest="chaos_command", required=True, metavar="VERB")
    one = verbs.add_parser("run", help="run a scenario on ZooKeeper and broker processes")
    one.add_argument("scenario", help="a catalog name or a TOML file")
    one.add_argument(
        "--backend",
        choices=sorted(BACKENDS),
        default="local",
        help="local processes (default) or the compose cluster's containers",
    )
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
    spec = BACKENDS[args.backend]
    chaos.check_supported(chosen, spec)  # before a line is printed or a process started
    if spec is compose.COMPOSE:
        missing = compose.compose_unavailable()
        if missing is not None:
            raise chaos.ChaosError(f"the compose backend cannot run here: {missing}")
    if not args.verbose:
        # The clients' retry warnings during faults would drown the run's own lines.
        logging.getLogger().setLevel(logging.ERROR)
    print(f"scenario {chosen.name} (expect: {chosen.expect}), {spec.runtime}", flush=True)
    wall = SystemClock()
    started = wall.monotonic_ms()
    history = _run(chosen, args.dir, spec)
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


def _run(chosen: scenario.Scenario, directory: Path | None, spec: chaos.BackendSpec) -> History:
    if directory is not None:
        return chaos.run(chosen, directory, on_event=_progress, spec=spec)
    with tempfile.TemporaryDirectory(prefix="kafkasim-chaos-") as tmp:
        return chaos.run(chosen, Path(tmp), on_event=_progress, spec=spec)
