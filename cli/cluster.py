"""``kafkasim cluster up|status|down``: a local cluster of real processes on loopback.

``up`` starts Debian's ZooKeeper and N brokers (free ports, one data dir each) as detached
processes, waits until every broker is registered and a controller is elected, records what
it started in ``<dir>/cluster.json`` and prints how to reach them: each broker has a gRPC
listener (kafkasim's own tools and clients) and a Kafka-protocol one (Kafka's clients: kcat,
librdkafka, Java), and ``up`` prints a bootstrap string for each. ``status`` shows brokers with
both addresses, the controller and, for every partition, leader, replicas and ISR (from
ZooKeeper) with each replica's HW and LEO (asked of the brokers). ``down`` stops everything
``up`` started — by the pids it recorded, SIGTERM first (a controlled shutdown), SIGKILL if a
process hangs.
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

from kafkasim.cli.status import StatusFilter, describe_cluster
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.coordination import NoNodeError
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.controller.zk_process import zookeeper_available

STATE_FILE = "cluster.json"
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


def _pid_alive(pid: int, marker: str) -> bool:
    """The pid runs and is ours (its command line names our directory: pids get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return marker in cmdline


def _load_state(root: Path) -> dict[str, Any] | None:
    path = root / STATE_FILE
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    return state


def _running_pids(state: dict[str, Any]) -> list[int]:
    marker = state["dir"]
    pids = [b["pid"] for b in state["brokers"]] + [state["zookeeper"]["pid"]]
    return [pid for pid in pids if _pid_alive(pid, marker)]


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
    cluster = LocalCluster(root, brokers=args.brokers, broker_props=props, detached=True)
    try:
        cluster.start()
        asyncio.run(_wait_for_controller(cluster.zookeeper.connect_string, args.brokers))
    except BaseException:
        cluster.stop()
        raise
    state = {
        "dir": str(root),
        "zookeeper": {
            "pid": cluster.zookeeper.pid,
            "connect": cluster.zookeeper.connect_string,
            "log": str(cluster.zookeeper.log_path),
        },
        "brokers": [
            {
                "id": b.broker_id,
                "pid": b.pid,
                "address": b.address,
                "kafka_address": b.kafka_address,
                "data": str(b.data_dir),
                "log": str(b.log_path),
            }
            for b in cluster.brokers.values()
        ],
    }
    cluster.zookeeper.release()
    (root / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    print(f"kafkasim cluster up in {root}")
    print(f"  zookeeper.connect  {state['zookeeper']['connect']}")
    grpc = ",".join(b["address"] for b in state["brokers"])
    kafka = ",".join(b["kafka_address"] for b in state["brokers"])
    print(f"  bootstrap.servers (kafkasim tools, gRPC)  {grpc}")
    print(f"  bootstrap.servers (Kafka clients)         {kafka}")
    for b in state["brokers"]:
        print(
            f"  broker {b['id']}  gRPC {b['address']}  Kafka {b['kafka_address']}  "
            f"pid {b['pid']}  log {b['log']}"
        )
    print(f"stop it with: kafkasim cluster down --dir {args.dir}")
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
    return await describe_cluster(
        state["zookeeper"]["connect"],
        {b["id"]: b["address"] for b in state["brokers"]},
        alive={b["id"]: _pid_alive(b["pid"], state["dir"]) for b in state["brokers"]},
        # A state file written before brokers had a Kafka listener names none.
        kafka_addresses={
            b["id"]: b["kafka_address"] for b in state["brokers"] if "kafka_address" in b
        },
        shown=shown,
    )


def cmd_down(args: argparse.Namespace) -> int:
    root: Path = args.dir.resolve()
    state = _load_state(root)
    if state is None:
        raise ValueError(f"no cluster in {args.dir}")
    marker = state["dir"]
    brokers = [b["pid"] for b in state["brokers"] if _pid_alive(b["pid"], marker)]
    for pid in brokers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # a paused broker cannot shut down
            os.kill(pid, signal.SIGTERM)  # controlled shutdown
    _wait_gone(brokers, marker, 60.0)
    zk_pid = state["zookeeper"]["pid"]
    if _pid_alive(zk_pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(zk_pid, signal.SIGTERM)
        _wait_gone([zk_pid], marker, 15.0)
    (root / STATE_FILE).unlink()
    if args.wipe:
        shutil.rmtree(root)
    print(f"kafkasim cluster in {root} stopped" + (" and wiped" if args.wipe else ""))
    return 0


def _wait_gone(pids: list[int], marker: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _pid_alive(pid, marker)]
        if not alive:
            return
        time.sleep(0.1)
    for pid in pids:
        if _pid_alive(pid, marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
