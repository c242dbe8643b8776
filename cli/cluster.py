"""``kafkasim cluster up|status|down``: a local cluster of real processes on loopback.

``up`` starts Debian's ZooKeeper and N brokers (free ports, one data dir each) as detached
processes, waits until every broker is registered and a controller is elected, records what
it started in ``<dir>/cluster.json`` and prints how to reach them: each broker has a gRPC
listener (kafkasim's own tools and clients) and a Kafka-protocol one (Kafka's clients: kcat,
librdkafka, Java), and ``up`` prints a bootstrap string for each. ``status`` shows brokers with
both addresses, the controller and, for every partition, leader, replicas and ISR (from
ZooKeeper) with each replica's HW and LEO (asked of the brokers). Each broker also serves its
Prometheus metrics on a port of its own (``metrics.port``: free ones by default), which ``up``
and ``status`` print. ``down`` stops everything ``up`` started — by the pids it recorded,
SIGTERM first (a controlled shutdown), SIGKILL if a process hangs.

One broker at a time: ``stop`` (a controlled shutdown), ``kill`` (kill -9), ``pause`` /
``resume`` (SIGSTOP / SIGCONT) and ``start`` (again, on its ports and data, until it serves)
take the same steps as the failure runner's local-process backend
(``cluster.chaos.LocalBackend``) on the cluster ``cluster.json`` describes, and record a
restarted broker's pid there for ``status`` and ``down``. ``logs`` prints the end of a
broker's log (``-f``: and follows it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from kafkasim.cli.console_bind import add_bind
from kafkasim.cli.status import StatusFilter, describe_cluster
from kafkasim.cluster import compose_secure
from kafkasim.cluster.chaos import LOCAL, LocalBackend
from kafkasim.cluster.local import BrokerProcess, LocalCluster, process_alive
from kafkasim.cluster.state_file import BACKEND as COMPOSE_BACKEND  # not ours to manage
from kafkasim.cluster.state_file import STATE_FILE
from kafkasim.common.config import DEV_ZK_SESSION_TIMEOUT_MS
from kafkasim.common.coordination import NoNodeError
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.controller.zk_process import zookeeper_available

DEFAULT_DIR = Path("kafkasim-cluster")


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("cluster", help="a local cluster of processes")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    up = verbs.add_parser("up", help="start ZooKeeper and N brokers on loopback")
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    up.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="where data and logs go")
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config key for every broker (repeatable)",
    )
    up.add_argument(
        "--tls",
        action="store_true",
        help="TLS on every listener (mutual: client certificates required), with a throw-away "
        "CA and certificates made under DIR/certs; the tools given --dir use them",
    )
    up.add_argument("--console", action="store_true", help="then serve the live web console on it")
    add_bind(up)
    up.set_defaults(func=cmd_up)
    status = verbs.add_parser("status", help="brokers, controller, partitions, HW and LEO")
    status.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    status.add_argument("--topic", help="only this topic")
    status.add_argument(
        "--include-internal",
        action="store_true",
        help="also internal topics (__consumer_offsets, __transaction_state): hidden by default",
    )
    status.add_argument(
        "--under-replicated",
        action="store_true",
        help="only partitions whose ISR is smaller than their replicas",
    )
    status.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        help="print the status again every SECONDS until Ctrl-C",
    )
    status.add_argument(
        "--iterations",
        type=int,
        metavar="N",
        help="with --watch: stop after N views (default: until Ctrl-C)",
    )
    status.set_defaults(func=cmd_status)
    down = verbs.add_parser("down", help="stop everything 'cluster up' started")
    down.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    down.add_argument("--wipe", action="store_true", help="also delete the data directory")
    down.set_defaults(func=cmd_down)
    for verb, text in _BROKER_VERBS.items():
        one = verbs.add_parser(verb, help=text)
        one.add_argument("--broker", type=int, required=True, metavar="N", help="broker id")
        one.add_argument("--dir", type=Path, default=DEFAULT_DIR)
        one.set_defaults(func=cmd_broker)
    logs = verbs.add_parser("logs", help="the end of a broker's log")
    logs.add_argument("--broker", type=int, required=True, metavar="N", help="broker id")
    logs.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    logs.add_argument(
        "--tail", type=int, default=50, metavar="LINES", help="lines to print (default 50)"
    )
    logs.add_argument(
        "-f", "--follow", action="store_true", help="then print what it writes, until Ctrl-C"
    )
    logs.set_defaults(func=cmd_logs)


_BROKER_VERBS = {
    "start": "start a broker that is down (its ports and data), until it serves",
    "stop": "stop a broker: a controlled shutdown (SIGTERM)",
    "kill": "kill a broker at once (SIGKILL), as a crash",
    "pause": "freeze a broker (SIGSTOP): alive but silent, as a long GC pause",
    "resume": "let a paused broker run again (SIGCONT)",
}


def _load_state(root: Path) -> dict[str, Any] | None:
    path = root / STATE_FILE
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    if state.get("backend") == COMPOSE_BACKEND:
        raise ValueError(
            f"{root} holds a compose cluster's state (kafkasim certs compose): its client "
            "tools take --dir; manage its containers with docker compose (compose/README.md)"
        )
    return state


def _running_pids(state: dict[str, Any]) -> list[int]:
    marker = state["dir"]
    pids = [b["pid"] for b in state["brokers"]] + [state["zookeeper"]["pid"]]
    return [pid for pid in pids if pid is not None and process_alive(pid, marker)]


def cmd_up(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise ValueError("--brokers must be at least 1")
    reason = zookeeper_available()
    if reason is not None:
        raise ValueError(f"cannot start ZooKeeper: {reason}")
    root: Path = args.dir.resolve()
    state = _load_state(root)
    if state is not None and _running_pids(state):
        raise ValueError(
            f"a cluster is already running in {root}; run 'kafkasim cluster down "
            f"--dir {args.dir}' first"
        )
    props: dict[str, object] = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--override expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    cluster = LocalCluster(
        root, brokers=args.brokers, broker_props=props, detached=True, tls=args.tls
    )
    try:
        cluster.start()
        asyncio.run(_wait_for_controller(cluster.zookeeper.connect_string, args.brokers))
    except BaseException:
        cluster.stop()
        raise
    state = cluster.state()
    cluster.zookeeper.release()
    compose_secure.save_state(root, state)
    print(f"kafkasim cluster up in {root}")
    print(f"  zookeeper.connect  {cluster.zookeeper.connect_string}")
    print(f"  bootstrap.servers (kafkasim tools, gRPC)  {','.join(cluster.bootstrap)}")
    print(f"  bootstrap.servers (Kafka clients)         {cluster.kafka_bootstrap}")
    for b in cluster.brokers.values():
        metrics = f"  metrics {b.metrics_url}" if b.metrics_url else ""
        # Where followers fetch from it (node.rpc_framed), when it has a replication listener.
        replication = f"  replication {b.replication_address}" if b.replication_address else ""
        print(
            f"  broker {b.broker_id}  gRPC {b.address}  Kafka {b.kafka_address}{replication}"
            f"{metrics}  pid {b.pid}  log {b.log_path}"
        )
    print(f"stop it with: kafkasim cluster down --dir {args.dir}", flush=True)
    if args.console:
        # Loaded here only: the console's server and backends cost ~0.3 s of CPU at start.
        from kafkasim.cli import console  # noqa: PLC0415

        console.serve(console.live_console(root), args.bind)
    return 0


async def _wait_for_controller(connect: str, brokers: int, timeout_s: float = 60.0) -> None:
    zk = KazooCoordination(connect, 10_000)
    await zk.start()
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                ids = await zk.get_children(zk_data.BROKER_IDS)
                await zk.get(zk_data.CONTROLLER)
                if len(ids) >= brokers:
                    return
            except NoNodeError:
                pass
            await asyncio.sleep(0.1)
        raise TimeoutError(f"brokers did not register with a controller within {timeout_s} s")
    finally:
        await zk.close()


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch is not None and args.watch <= 0:
        raise ValueError(f"--watch must be a positive number of seconds, got {args.watch}")
    if args.iterations is not None and (args.watch is None or args.iterations < 1):
        raise ValueError("--iterations needs --watch and a count of at least 1")
    state = _load_state(args.dir.resolve())
    if state is None:
        raise ValueError(f"no cluster in {args.dir} (run 'kafkasim cluster up' first)")
    shown = StatusFilter(args.topic, args.include_internal, args.under_replicated)
    if args.watch is None:
        print(asyncio.run(_status(state, shown)), end="")
        return 0
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a watch ends
        asyncio.run(_watch(state, shown, args.watch, args.iterations))
    return 0


async def _watch(
    state: dict[str, Any], shown: StatusFilter, every_s: float, iterations: int | None
) -> None:
    """The view every ``every_s`` seconds, each headed by its local time (as watch(1) does);
    the screen is cleared between views on a terminal."""
    count = 0
    while iterations is None or count < iterations:
        view = await _status(state, shown)
        clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() else ("\n" if count else "")
        print(f"{clear}Every {every_s:g}s: {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
        print(view, end="", flush=True)
        count += 1
        if iterations is None or count < iterations:
            await asyncio.sleep(every_s)


async def _status(state: dict[str, Any], shown: StatusFilter) -> str:
    cluster = LocalCluster.attach(state)
    return await describe_cluster(
        state["zookeeper"]["connect"],
        {b.broker_id: b.address for b in cluster.brokers.values()},
        alive={b.broker_id: b.running for b in cluster.brokers.values()},
        paused={b.broker_id for b in cluster.brokers.values() if b.paused},
        kafka_addresses={b.broker_id: b.kafka_address for b in cluster.brokers.values()},
        metrics_urls={
            b.broker_id: b.metrics_url for b in cluster.brokers.values() if b.metrics_url
        },
        shown=shown,
        client_properties=state.get("client_properties", {}),
    )


def cmd_down(args: argparse.Namespace) -> int:
    root: Path = args.dir.resolve()
    state = _load_state(root)
    if state is None:
        raise ValueError(f"no cluster in {args.dir}")
    # Every broker by the pid the state file names now (a restarted one's too): SIGTERM for
    # a controlled shutdown (SIGCONT first: a paused broker cannot shut down), SIGKILL if one
    # hangs.
    LocalCluster.attach(state).stop()
    marker = state["dir"]
    zk_pid = state["zookeeper"]["pid"]
    if process_alive(zk_pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(zk_pid, signal.SIGTERM)
        _wait_gone([zk_pid], marker, 15.0)
    (root / STATE_FILE).unlink()
    if args.wipe:
        shutil.rmtree(root)
    print(f"kafkasim cluster in {root} stopped" + (" and wiped" if args.wipe else ""))
    return 0


def _attached(args: argparse.Namespace) -> tuple[dict[str, Any], LocalCluster, BrokerProcess]:
    """The state, the cluster and ``--broker``'s broker; a clear error when there is none."""
    state = _load_state(args.dir.resolve())
    if state is None:
        raise ValueError(f"no cluster in {args.dir} (run 'kafkasim cluster up' first)")
    cluster = LocalCluster.attach(state)
    broker = cluster.brokers.get(args.broker)
    if broker is None:
        known = ", ".join(map(str, sorted(cluster.brokers)))
        raise ValueError(f"no broker {args.broker} in the cluster in {args.dir} (brokers {known})")
    return state, cluster, broker


def cmd_broker(args: argparse.Namespace) -> int:
    """start|stop|kill|pause|resume one broker, as the failure runner does it."""
    state, cluster, broker = _attached(args)
    backend = LocalBackend.over(cluster)
    n, verb = broker.broker_id, args.verb
    if verb == "start":
        if broker.running:
            raise ValueError(f"broker {n} is already running (pid {broker.pid})")
        backend.start_broker(n)
        # The new pid goes on record before the wait: `down` stops it whatever happens next.
        compose_secure.save_state(
            cluster.root, {**cluster.state(), "zookeeper": state["zookeeper"]}
        )
        waited_s = _wait_serving(backend, n, _session_timeout_s(cluster))
        print(f"broker {n} started (pid {broker.pid}), serving after {waited_s:.1f} s")
        return 0
    if not broker.running:
        raise ValueError(f"broker {n} is not running (start it with 'kafkasim cluster start')")
    if verb == "pause" and broker.paused:
        raise ValueError(f"broker {n} is already paused")
    if verb == "resume" and not broker.paused:
        raise ValueError(f"broker {n} is not paused")
    if verb == "stop":
        backend.kill(n, signal.SIGTERM)
    elif verb == "kill":
        backend.kill(n, signal.SIGKILL)
    elif verb == "pause":
        backend.pause(n)
    else:
        backend.resume(n)
    done = {"stop": "stopped", "kill": "killed", "pause": "paused", "resume": "resumed"}[verb]
    print(f"broker {n} {done} (pid {broker.pid})")
    return 0


def _session_timeout_s(cluster: LocalCluster) -> float:
    raw = cluster.broker_props.get("zookeeper.session.timeout.ms", DEV_ZK_SESSION_TIMEOUT_MS)
    return int(str(raw)) / 1000


def _wait_serving(backend: LocalBackend, broker_id: int, session_timeout_s: float) -> float:
    """As the failure runner waits for a restarted broker: until its log says it serves, at
    most the ZooKeeper session timeout (its previous registration may linger that long after
    a kill -9) and the backend's grace; seconds waited."""
    started = time.monotonic()
    limit_s = session_timeout_s + LOCAL.serving_grace_s
    while not backend.serving_again(broker_id):
        if not backend.running(broker_id):
            raise ValueError(
                f"broker {broker_id} exited while starting ({backend.exit_note(broker_id)})"
            )
        if time.monotonic() - started > limit_s:
            raise ValueError(
                f"broker {broker_id} not serving {limit_s:g} s after its start "
                f"({backend.exit_note(broker_id)})"
            )
        time.sleep(LOCAL.serving_poll_s)
    return time.monotonic() - started


def cmd_logs(args: argparse.Namespace) -> int:
    _, _, broker = _attached(args)
    if args.tail < 0:
        raise ValueError(f"--tail must be 0 or more, got {args.tail}")
    path = broker.log_path
    if not path.exists():
        raise ValueError(f"broker {broker.broker_id} has no log yet ({path})")
    with path.open("rb") as log:
        lines = log.read().splitlines(keepends=True)
        out = sys.stdout.buffer
        out.writelines(lines[-args.tail :] if args.tail else [])
        out.flush()
        while args.follow:
            chunk = log.read()
            if chunk:
                out.write(chunk)
                out.flush()
            else:
                time.sleep(0.2)
    return 0


def _wait_gone(pids: list[int], marker: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if process_alive(pid, marker)]
        if not alive:
            return
        time.sleep(0.1)
    for pid in pids:
        if process_alive(pid, marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
