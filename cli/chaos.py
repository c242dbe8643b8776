"""``kafkasim chaos``: failure-injection runs on a backend of choice.

* ``chaos run SCENARIO``: start ZooKeeper and the scenario's brokers, run its workload and
  fault schedule (the one runner every backend shares, the same as ``kafkasim sim run``),
  print progress lines as they happen, then the checker's verdict; writes the history (JSON
  lines) with ``--history`` and an HTML report with ``--report``. ``--dir D`` keeps the run's
  files in D, which must be new or empty; otherwise they go to a temporary directory removed
  afterwards.
* ``--backend local`` (the default): local processes (the files are the broker logs, data and
  ZooKeeper). ``--backend local-root``: local processes with the faults that need root
  (``disk_full``: each log dir a tmpfs, filled by a ballast file; ``isolate``, ``split``,
  ``isolate_zk``: each broker in a network namespace of its own, links cut by iptables in
  them; ``slow_network`` where the kernel has tc netem; ``cluster.root_backend``); without
  root those faults are refused in one line. ``--backend compose``: the containers
  of compose/docker-compose.yml, a compose project of the run's own, taken down (``down -v``)
  at the end (the files are the generated compose override and the project's logs); it needs
  a Docker engine and the images built by compose/build-offline.sh, and without them fails in
  one line saying which is missing.
  ``--backend sim``: the deterministic simulation on virtual time, with ``--seed N``
  (default 1): the same run as ``kafkasim sim run SCENARIO --seed N``.
* ``--client confluent-kafka``: the workload's producers and consumers are librdkafka's
  (through confluent-kafka) on the brokers' Kafka listeners instead of kafkasim's own client
  (the scenario's ``workload.client``, which this overrides); the same checker judges the
  history. Real brokers only: the simulation has no sockets, and is refused before it starts.

SCENARIO is a catalog name (``leader-crash``) or a path to a TOML file, as for ``kafkasim sim
run``. A scenario with a fault the chosen backend cannot inject (for local processes a network
partition, for both a power cut, ...) is refused before anything starts, with one line naming
the backend's runtime and those faults. Exit status: 0 when the run met the scenario's
expectation (safe: the checker found nothing; may-lose: any verdict), 1 otherwise or on an
error.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafkasim.cli.sim import run_and_report
from kafkasim.cluster import chaos, compose
from kafkasim.cluster.root_backend import local_root
from kafkasim.faults.backend import BackendSpec, check_supported
from kafkasim.faults.reading import find, load
from kafkasim.faults.real_client import require
from kafkasim.faults.scenario import CLIENT_KAFKASIM, CLIENTS, Scenario
from kafkasim.faults.validation import check
from kafkasim.sim.backend import SIM

# Each backend's spec, built when chosen (local-root's probes what this machine allows).
BACKENDS: dict[str, Callable[[], BackendSpec]] = {
    "local": lambda: chaos.LOCAL,
    "local-root": local_root,
    "compose": lambda: compose.COMPOSE,
    "sim": lambda: SIM,
}


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
        help="local processes (default), local processes with root's faults (a full disk on "
        "a tmpfs log dir, links cut between network namespaces), the compose cluster's "
        "containers, or the simulation",
    )
    one.add_argument(
        "--client",
        choices=CLIENTS,
        help="the client driving the workload: kafkasim's own, or librdkafka through "
        "confluent-kafka on the Kafka listeners (default: the scenario's workload.client, "
        f"else {CLIENT_KAFKASIM})",
    )
    one.add_argument("--seed", type=int, help="the simulation's seed (--backend sim; default 1)")
    one.add_argument("--history", type=Path, help="write the history here (JSON lines)")
    one.add_argument("--report", type=Path, help="write an HTML report here")
    one.add_argument(
        "--dir", type=Path, help="keep the cluster's files here (a new or empty directory)"
    )
    one.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    chosen = with_client(load(find(args.scenario)), args.client)
    spec = BACKENDS[args.backend]()
    if args.seed is not None and spec is not SIM:
        raise ValueError(f"--seed is for --backend sim: a {spec.runtime} run is not replayable")
    seed = (1 if args.seed is None else args.seed) if spec is SIM else None
    check_supported(chosen, spec)  # before a line is printed or a process started
    require(chosen.workload.client)
    if spec is compose.COMPOSE:
        missing = compose.compose_unavailable()
        if missing is not None:
            raise chaos.ChaosError(f"the compose backend cannot run here: {missing}")
    if not args.verbose:
        # The clients' retry warnings during faults would drown the run's own lines.
        logging.getLogger().setLevel(logging.ERROR)
    return run_and_report(args, chosen, spec, seed, args.dir)


def with_client(scenario: Scenario, client: str | None) -> Scenario:
    """``scenario`` with its workload driven by ``client`` (None: as the scenario says)."""
    if client is None or client == scenario.workload.client:
        return scenario
    chosen = dataclasses.replace(
        scenario, workload=dataclasses.replace(scenario.workload, client=client)
    )
    check(chosen)  # ScenarioError naming workload.client for a client that does not exist
    return chosen
