"""Run one coordination scenario against SimZooKeeper or a real ZooKeeper.

A scenario is ``async def scenario(env: Env) -> None``. ``run`` builds the world for the kind —
``sim`` (SimZooKeeper on asyncio's loop), ``sim-vt`` (SimZooKeeper on the virtual-time loop) or
``real`` (KazooCoordination against a ZooKeeperProcess) — runs the scenario with a bound on its
duration, and closes every client it made, so tests stay clean under ``-W error``.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from kafkasim.common.coordination import Coordination, SessionState
from kafkasim.common.zk_acl import OPEN, ZkSecurity
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.controller.zk_process import ZooKeeperProcess, zookeeper_available
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

ZOOKEEPER_UNAVAILABLE = zookeeper_available()
requires_zookeeper = pytest.mark.skipif(
    ZOOKEEPER_UNAVAILABLE is not None,
    reason=f"real ZooKeeper cannot run here: {ZOOKEEPER_UNAVAILABLE}",
)
KINDS = ["sim", "sim-vt", pytest.param("real", marks=requires_zookeeper)]

SESSION_TIMEOUT_MS = 10_000
SCENARIO_TIMEOUT_S = 20.0  # wall seconds for asyncio runs
SIM_TIME_LIMIT_S = 3_600.0  # virtual seconds
WAIT_S = 5.0  # longest wait for an expected event


@dataclass
class Env:
    """What a scenario gets: started clients (all closed afterwards) and its own subtree."""

    kind: str
    root: str
    zookeeper: ZooKeeperProcess | None
    server: SimZooKeeperServer | None
    clients: list[Coordination] = field(default_factory=list)

    def path(self, *names: str) -> str:
        """A path under this test's root (created by ``run`` before the scenario starts)."""
        return "/".join((self.root, *names))

    async def client(
        self,
        *,
        start: bool = True,
        session_timeout_ms: int = SESSION_TIMEOUT_MS,
        security: ZkSecurity = OPEN,
    ) -> Coordination:
        client: Coordination
        if self.zookeeper is not None:
            client = KazooCoordination(
                self.zookeeper.connect_string, session_timeout_ms, security=security
            )
        else:
            assert self.server is not None
            client = SimZooKeeperClient(
                self.server,
                session_timeout_ms,
                name=f"client-{len(self.clients)}",
                security=security,
            )
        self.clients.append(client)
        if start:
            await client.start()
        return client

    async def aclose(self) -> None:
        for client in self.clients:
            await client.close()


def root_for(test_name: str) -> str:
    return "/" + re.sub(r"[^A-Za-z0-9_]+", "-", test_name).strip("-")


def run(
    kind: str,
    scenario: Callable[[Env], Awaitable[None]],
    *,
    root: str,
    zookeeper: ZooKeeperProcess | None = None,
) -> None:
    async def main() -> None:
        server = None if kind == "real" else SimZooKeeperServer()
        env = Env(kind, root, zookeeper, server)
        try:
            setup = await env.client()
            await setup.create(root)
            await scenario(env)
        finally:
            await env.aclose()

    if kind == "sim-vt":
        run_simulation(_wall_clock_bounded(main()), time_limit_s=SIM_TIME_LIMIT_S)
        return
    if kind == "real" and zookeeper is None:
        raise AssertionError("the real kind needs a ZooKeeperProcess")

    async def bounded() -> None:
        async with asyncio.timeout(SCENARIO_TIMEOUT_S):
            await main()

    asyncio.run(bounded())


async def _wall_clock_bounded(main: Awaitable[None]) -> None:
    """Bound a virtual-time run in wall time too: a livelock (callbacks always ready) never
    lets virtual time reach a timer, so only a thread can stop it."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    fired = threading.Event()

    def cancel() -> None:
        fired.set()
        loop.call_soon_threadsafe(task.cancel)

    timer = threading.Timer(SCENARIO_TIMEOUT_S, cancel)
    timer.start()
    try:
        await main
    except asyncio.CancelledError:
        if fired.is_set():
            raise TimeoutError(
                f"virtual-time scenario ran over {SCENARIO_TIMEOUT_S} s of wall time"
            ) from None
        raise
    finally:
        timer.cancel()
        timer.join()


class Recorder:
    """A watcher or session listener that keeps what it is called with, in order."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, item: Any) -> None:
        self.calls.append(item)

    async def wait_for(self, count: int, timeout_s: float = WAIT_S) -> list[Any]:
        """Wait until at least ``count`` calls were recorded; returns them."""
        async with asyncio.timeout(timeout_s):
            while len(self.calls) < count:
                await asyncio.sleep(0.005)
        return self.calls


async def expire_session(coord: Coordination, timeout_s: float = WAIT_S) -> None:
    """Make the server expire ``coord``'s session and wait until ``coord`` hears EXPIRED.

    Sim: the server's fault control. Real: the standard technique — a second client attaches
    to the session with its id and password and closes it (KazooCoordination does it)."""
    expired = asyncio.Event()
    coord.add_session_listener(
        lambda state: expired.set() if state is SessionState.EXPIRED else None
    )
    if isinstance(coord, SimZooKeeperClient):
        coord.server.expire_session(coord.session_id)
    elif isinstance(coord, KazooCoordination):
        await coord.inject_session_expiry()
    else:
        raise TypeError(f"do not know how to expire {coord!r}")
    async with asyncio.timeout(timeout_s):
        await expired.wait()


async def round_trip(coord: Coordination) -> None:
    """One request and its response: every notification the server sent this session before
    it has been delivered (ZooKeeper's per-session order)."""
    await coord.exists("/")
