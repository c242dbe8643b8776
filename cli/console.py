"""``kafkasim console``: the live web console (``console/``) on 127.0.0.1 by default.

* ``--dir DIR``: the local cluster of ``kafkasim cluster up`` (its processes, ZooKeeper and
  metrics known from its state file; the fault buttons work), or a compose cluster's directory
  (``kafkasim certs compose``: its state says ``"backend": "compose"``): the brokers on their
  published ports, the fault buttons through ``ComposeBackend.over`` on the running project
  (docker kill/stop/start/pause/unpause, network disconnect/connect); ZooKeeper is not
  published by compose/docker-compose.yml, so partitions come from the brokers' metadata;
* ``--bootstrap HOST:PORT,...`` (and ``--zookeeper HOST:PORT`` for the registrations, the
  partition states and the watches of the timeline): any brokers, watched only;
* ``--replay FILE``: a recorded history (``chaos``/``sim run --history``) with a time slider.

``--bind HOST:PORT`` (default 127.0.0.1:9021; port 0 takes a free one) and the address it
listens on is printed. ``cluster up --console`` and ``sim run --console`` open it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Final

import uvicorn

from kafkasim.cli.console_bind import DEFAULT_BIND, add_bind, parse_bind
from kafkasim.cli.pipes import say
from kafkasim.cluster.chaos import ChaosBackend, LocalBackend
from kafkasim.cluster.compose import ComposeBackend, Runner, compose_command, run_command
from kafkasim.cluster.compose_secure import attached_cluster, save_state
from kafkasim.cluster.local import LocalCluster
from kafkasim.cluster.state_file import BACKEND as COMPOSE_BACKEND
from kafkasim.cluster.state_file import STATE_FILE
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.console.faults import Injector
from kafkasim.console.live import ComposeTarget, LocalTarget, Poller, StaticTarget, Target
from kafkasim.console.replay import Replay
from kafkasim.console.server import LiveConsole, ReplayConsole, allowed_hosts_for, create_app
from kafkasim.console.workload import ConsoleWorkload
from kafkasim.faults.history import History

__all__ = [
    "DEFAULT_BIND",
    "add_bind",
    "compose_console",
    "live_console",
    "parse_bind",
    "register",
    "serve",
]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "console", help="a live web console: brokers, partitions, faults, replay"
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--dir",
        type=Path,
        help="the cluster of 'kafkasim cluster up', or a compose cluster's (certs compose)",
    )
    where.add_argument("--bootstrap", help="brokers' gRPC addresses, HOST:PORT,...")
    where.add_argument("--replay", type=Path, metavar="FILE", help="a recorded history")
    p.add_argument("--zookeeper", help="ZooKeeper's HOST:PORT (with --bootstrap)")
    add_bind(p)
    p.set_defaults(func=cmd_console)


def live_console(root: Path, runner: Runner = run_command) -> LiveConsole:
    """The live console over the cluster in ``root``: a local one, or a compose one
    (``runner``: how its docker commands run)."""
    path = root / STATE_FILE
    if not path.is_file():
        raise ValueError(f"no cluster in {root} (run 'kafkasim cluster up' first)")
    state = json.loads(path.read_text())
    if not isinstance(state, dict):
        raise ValueError(f"{path} is not a cluster's state (a JSON object)")
    if state.get("backend") == COMPOSE_BACKEND:
        return compose_console(root, state, runner)
    cluster = LocalCluster.attach(state)
    target = LocalTarget(cluster, state["zookeeper"]["connect"], state.get("client_properties", {}))

    def record_pids(broker_id: int) -> None:
        # A broker the page restarts goes on the cluster's record, as 'cluster start' puts
        # it: 'cluster down' stops it by that pid.
        del broker_id
        save_state(root, {**cluster.state(), "zookeeper": state["zookeeper"]})

    return _console(target, LocalBackend.over(cluster), on_started=record_pids)


def compose_console(root: Path, state: dict[str, Any], runner: Runner = run_command) -> LiveConsole:
    """The live console over the running compose project ``state`` describes."""
    command = compose_command(runner)
    if command is None:
        raise ValueError(
            f"{root} holds a compose cluster's state, and neither `docker compose` nor "
            "`docker-compose` works here"
        )
    cluster = attached_cluster(state, command, runner)
    backend = ComposeBackend.over(cluster, root)
    zookeeper = state.get("zookeeper")  # compose/docker-compose.yml does not publish it
    target = ComposeTarget(
        backend,
        zookeeper.get("connect") if isinstance(zookeeper, dict) else None,
        cluster.client_properties,
    )

    def paused_now(broker_id: int) -> bool:
        return backend.status(broker_id) == "paused"

    return _console(target, backend, is_paused=paused_now)


def _console(
    target: Target,
    backend: ChaosBackend | None,
    on_started: Callable[[int], None] | None = None,
    is_paused: Callable[[int], bool] | None = None,
) -> LiveConsole:
    clock = SystemClock()
    holder: list[LiveConsole] = []

    def note(kind: str, text: str) -> None:
        holder[0].note(kind, text)

    paused = is_paused
    if isinstance(target, LocalTarget):
        cluster = target.cluster

        def paused_now(broker_id: int) -> bool:
            return cluster.brokers[broker_id].paused

        paused = paused_now
    injector = Injector(backend, note, is_paused=paused, on_started=on_started)
    properties = target.client_properties

    def answering() -> list[str]:  # the console exists by the time the workload asks
        return holder[0].answering()

    workload = ConsoleWorkload(
        lambda: client_transport(properties),
        target.bootstrap,
        answering,
        clock,
        note,
    )
    console = LiveConsole(Poller(target, clock), injector, clock.time_ms, workload)
    holder.append(console)
    return console


#: Seconds a stop waits for open connections before cancelling them.
STOP_GRACE_S: Final = 3


class _Server(uvicorn.Server):
    """uvicorn's server, telling the live console when it is asked to stop (Ctrl-C, SIGTERM):
    an open page's event stream never ends by itself, and uvicorn's graceful shutdown waits
    for every open response — a console with a browser tab open did not stop on SIGTERM."""

    def __init__(self, config: uvicorn.Config, console: LiveConsole | ReplayConsole) -> None:
        super().__init__(config)
        self._console = console

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if isinstance(self._console, LiveConsole):
            self._console.stopping.set()
        super().handle_exit(sig, frame)


def serve(console: LiveConsole | ReplayConsole, bind: str) -> None:
    """Serve until interrupted; prints the address once listening."""
    host, port = parse_bind(bind)
    config = uvicorn.Config(
        create_app(console, allowed_hosts_for(host)),
        host=host,
        port=port,
        log_level="warning",
        lifespan="on",
        # A backstop: whatever a connection still holds after this is cancelled.
        timeout_graceful_shutdown=STOP_GRACE_S,
    )
    server = _Server(config, console)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.05)
        if server.started:
            bound = server.servers[0].sockets[0].getsockname()
            say(f"kafkasim console on http://{bound[0]}:{bound[1]}/ (Ctrl-C stops it)")
        await task

    asyncio.run(main())


def cmd_console(args: argparse.Namespace) -> int:
    parse_bind(args.bind)  # refused before anything starts
    if args.zookeeper is not None and args.bootstrap is None:
        raise ValueError("--zookeeper goes with --bootstrap (--dir knows its ZooKeeper)")
    if args.replay is not None:
        console: LiveConsole | ReplayConsole = ReplayConsole(Replay(History.read(args.replay)))
    elif args.dir is not None:
        console = live_console(args.dir.resolve())
    else:
        addresses = [a.strip() for a in args.bootstrap.split(",") if a.strip()]
        if not addresses:
            raise ValueError("--bootstrap expects HOST:PORT,...")
        console = _console(StaticTarget(addresses, args.zookeeper), None)
    serve(console, args.bind)
    return 0
