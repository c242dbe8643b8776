"""SimZooKeeper's own fault controls and guarantees, mostly on the virtual-time loop: connection
loss, expiry after the session timeout, requests lost in flight, latency that keeps order, and
replay of a whole run from its seeds. (What it shares with a real server is in
test_conformance.py.)"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from kafkasim.common.coordination import (
    BadVersionError,
    CheckOp,
    ConnectionLossError,
    CoordinationError,
    CreateOp,
    DeleteOp,
    EventType,
    NoNodeError,
    SessionExpiredError,
    SessionState,
    SetOp,
    WatchEvent,
)
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer
from tests.unit.coordination.harness import Recorder

T = TypeVar("T")

TIMEOUT_MS = 6_000


def simulate(main: Callable[[], Awaitable[T]]) -> T:
    async def run() -> T:
        return await main()

    return run_simulation(run(), time_limit_s=3_600)


async def started(
    server: SimZooKeeperServer, name: str, **options: Any
) -> tuple[SimZooKeeperClient, Recorder]:
    client = SimZooKeeperClient(server, TIMEOUT_MS, name, **options)
    states = Recorder()
    client.add_session_listener(states)
    await client.start()
    return client, states


async def settle(seconds: float = 0.001) -> None:
    """Let queued messages be delivered (virtual time: costs nothing)."""
    await asyncio.sleep(seconds)


def test_disconnect_suspends_and_reconnect_in_time_keeps_the_session() -> None:
    """A short network blip: calls fail with ConnectionLoss, the session and its ephemerals
    survive, watches set before the blip are gone (kazoo semantics)."""

    async def main() -> None:
        server = SimZooKeeperServer()
        zk, states = await started(server, "broker")
        await zk.create("/b", ephemeral=True)
        seen = Recorder()
        await zk.get("/b", seen)
        zk.disconnect()
        with pytest.raises(ConnectionLossError):
            await zk.get("/b")
        await settle()
        assert states.calls == [SessionState.CONNECTED, SessionState.SUSPENDED]
        assert zk.state is SessionState.SUSPENDED
        await asyncio.sleep(TIMEOUT_MS / 1000 / 2)
        zk.reconnect()
        await settle()
        assert states.calls[-1] is SessionState.CONNECTED
        assert server.is_session_alive(zk.session_id)
        await zk.set("/b", b"changed")
        await settle()
        assert seen.calls == []  # the watch did not survive the connection loss
        await zk.close()

    simulate(main)


def test_disconnected_session_expires_after_the_timeout() -> None:
    """The server expires a silent session exactly one timeout after the connection went;
    others see its ephemerals vanish then; the client hears EXPIRED only on reconnect."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = SimZooKeeperServer()
        zk, states = await started(server, "broker")
        observer, _ = await started(server, "controller")
        await zk.create("/b", ephemeral=True)
        gone = Recorder()
        await observer.exists("/b", gone)
        cut_at = loop.time()
        zk.disconnect()
        await gone.wait_for(1, timeout_s=60)
        assert gone.calls == [WatchEvent(EventType.DELETED, "/b")]
        assert loop.time() == pytest.approx(cut_at + TIMEOUT_MS / 1000, abs=0.01)
        assert not server.is_session_alive(zk.session_id)
        assert states.calls == [SessionState.CONNECTED, SessionState.SUSPENDED]  # cannot know yet
        zk.reconnect()
        await settle()
        assert states.calls == [
            SessionState.CONNECTED,
            SessionState.SUSPENDED,
            SessionState.EXPIRED,
        ]
        with pytest.raises(SessionExpiredError):
            await zk.exists("/")
        await zk.close()
        await observer.close()
        server.sanity_check()

    simulate(main)


def test_requests_in_flight_at_a_disconnect_may_or_may_not_have_been_applied() -> None:
    """ConnectionLoss means "unknown outcome": lost on the way there (not applied) or on the
    way back (applied)."""

    async def main() -> None:
        server = SimZooKeeperServer()
        zk, _ = await started(server, "c", latency_ms=(10, 10))
        checker, _ = await started(server, "checker")
        await zk.create("/n", b"0")

        lost_going = asyncio.create_task(zk.set("/n", b"never"))
        await asyncio.sleep(0.005)  # still on its way to the server
        zk.disconnect()
        with pytest.raises(ConnectionLossError):
            await lost_going
        assert (await checker.get("/n"))[0] == b"0"

        zk.reconnect()
        await asyncio.sleep(0.1)
        lost_coming = asyncio.create_task(zk.set("/n", b"applied"))
        await asyncio.sleep(0.015)  # applied at 10 ms; the answer is due at 20 ms
        zk.disconnect()
        with pytest.raises(ConnectionLossError):
            await lost_coming
        assert (await checker.get("/n"))[0] == b"applied"
        await zk.close()
        await checker.close()

    simulate(main)


def test_server_expiry_of_a_connected_session_drops_its_connection_first() -> None:
    async def main() -> None:
        server = SimZooKeeperServer()
        zk, states = await started(server, "c")
        server.expire_session(zk.session_id)
        await settle()
        assert states.calls == [
            SessionState.CONNECTED,
            SessionState.SUSPENDED,
            SessionState.EXPIRED,
        ]
        server.expire_session(zk.session_id)  # already gone: ignored
        await zk.close()

    simulate(main)


def test_closing_a_disconnected_client_leaves_its_session_to_expire() -> None:
    """close() cannot reach the server, so the ephemerals stay until the timeout, as with a
    real server."""

    async def main() -> None:
        server = SimZooKeeperServer()
        zk, _ = await started(server, "c")
        await zk.create("/e", ephemeral=True)
        zk.disconnect()
        await zk.close()
        assert "/e" in server.snapshot()
        await asyncio.sleep(TIMEOUT_MS / 1000 + 0.1)
        assert "/e" not in server.snapshot()
        assert server.session_ids() == []

    simulate(main)


def test_a_client_closed_while_its_session_opens_leaves_it_to_expire() -> None:
    async def main() -> None:
        server = SimZooKeeperServer()
        zk = SimZooKeeperClient(server, TIMEOUT_MS, "c", latency_ms=(10, 10))
        starting = asyncio.create_task(zk.start())
        await asyncio.sleep(0.015)  # the server has opened it; the answer is on its way
        await zk.close()
        with pytest.raises(SessionExpiredError):
            await starting
        assert server.session_ids() == [zk.session_id]
        await asyncio.sleep(TIMEOUT_MS / 1000 + 0.1)
        assert server.session_ids() == []

    simulate(main)


@pytest.mark.parametrize(
    ("requested_ms", "granted_ms"),
    [(100, 4_000), (6_000, 6_000), (18_000, 18_000), (90_000, 40_000)],
)
def test_session_timeout_is_clamped_to_two_and_twenty_ticks(
    requested_ms: int, granted_ms: int
) -> None:
    async def main() -> None:
        server = SimZooKeeperServer(tick_time_ms=2_000)
        zk = SimZooKeeperClient(server, requested_ms, "c")
        await zk.start()
        assert zk.session_timeout_ms == granted_ms
        await zk.close()

    simulate(main)


def test_latency_keeps_message_order_per_client() -> None:
    """Random per-message latency never reorders one connection: writes apply in the order
    sent and watch events precede the data they announce."""

    async def main() -> None:
        server = SimZooKeeperServer()
        writer, _ = await started(server, "w", latency_ms=(0, 20), seed=7)
        reader, _ = await started(server, "r", latency_ms=(0, 20), seed=8)
        await writer.create("/n", b"0")
        writes = [asyncio.create_task(writer.set("/n", str(i).encode())) for i in range(1, 30)]
        stats = await asyncio.gather(*writes)
        assert [stat.version for stat in stats] == list(range(1, 30))
        assert (await reader.get("/n"))[0] == b"29"

        order: list[str] = []
        await reader.get("/n", lambda event: order.append(event.type.value))
        setting = asyncio.create_task(writer.set("/n", b"new"))
        while (await reader.get("/n"))[0] != b"new":
            pass
        order.append("data")
        await setting
        assert order == ["CHANGED", "data"]
        await writer.close()
        await reader.close()

    simulate(main)


def _workload(seed: int) -> list[tuple[float, str]]:
    """A seeded run with latency, competing clients, a blip and an expiry; its history."""

    async def main() -> list[tuple[float, str]]:
        loop = asyncio.get_running_loop()
        history: list[tuple[float, str]] = []
        server = SimZooKeeperServer(tick_time_ms=500)
        clients = [
            SimZooKeeperClient(server, 3_000, f"c{i}", latency_ms=(1, 30), seed=seed)
            for i in range(3)
        ]

        def record(line: str) -> None:
            history.append((loop.time(), line))

        def recorder(prefix: str) -> Callable[[object], None]:
            return lambda item: record(f"{prefix} {item}")

        for client in clients:
            client.add_session_listener(recorder(client.name))
            await client.start()
        await clients[0].create("/jobs")

        async def worker(client: SimZooKeeperClient, rng: random.Random) -> None:
            for i in range(20):
                try:
                    path = await client.create(f"/jobs/{client.name}-", sequence=True)
                    record(f"{client.name} created {path}")
                    await client.get_children("/jobs", recorder(client.name))
                    await asyncio.sleep(rng.uniform(0, 0.05))
                except CoordinationError as e:
                    record(f"{client.name} step {i}: {type(e).__name__}")
                    await asyncio.sleep(0.5)

        async def faults() -> None:
            await asyncio.sleep(0.2)
            clients[1].disconnect()
            await asyncio.sleep(1.0)
            clients[1].reconnect()
            await asyncio.sleep(0.2)
            server.expire_session(clients[2].session_id)

        rng = random.Random(seed)
        await asyncio.gather(faults(), *(worker(c, random.Random(rng.random())) for c in clients))
        server.sanity_check()
        for client in clients:
            await client.close()
        history.append((loop.time(), f"zxid {server.last_zxid}"))
        return history

    return simulate(main)


def test_a_seeded_run_replays_exactly_on_the_virtual_loop() -> None:
    """Everything (times, order, sequence numbers, errors) is a function of the seed."""
    first = _workload(seed=11)
    assert first == _workload(seed=11)
    assert first != _workload(seed=12)
    assert any("SessionExpiredError" in line for _, line in first)
    assert any("ConnectionLossError" in line for _, line in first)


def test_failed_multi_leaves_the_tree_as_it_was_and_uses_one_zxid() -> None:
    """Rollback restores every touched node (data, versions, children, sequence counters)."""

    async def main() -> None:
        server = SimZooKeeperServer()
        zk, _ = await started(server, "c")
        await zk.create("/p", b"0")
        await zk.create("/p/s-", sequence=True)
        await zk.create("/q/r", makepath=True)
        before, zxid = server.snapshot(), server.last_zxid
        with pytest.raises(BadVersionError):
            await zk.multi(
                [
                    CreateOp("/p/s-", sequence=True),
                    SetOp("/p", b"1"),
                    DeleteOp("/q/r"),
                    DeleteOp("/q"),
                    CreateOp("/x", ephemeral=True),
                    CheckOp("/p", 0),  # /p is at version 1 by now
                ]
            )
        assert server.snapshot() == before
        assert server.last_zxid == zxid + 1  # ZooKeeper logs a failed multi as an error txn
        server.sanity_check()
        assert await zk.create("/p/s-", sequence=True) == "/p/s-0000000001"
        await zk.close()

    simulate(main)


def test_random_operations_keep_the_tree_invariants() -> None:
    """A seeded random mix of every operation, checked against sanity_check after each step."""

    async def main() -> None:
        rng = random.Random(5)
        server = SimZooKeeperServer()
        clients = [(await started(server, f"c{i}"))[0] for i in range(3)]
        paths = ["/a", "/a/b", "/a/b/c", "/d", "/d/e"]
        for _ in range(400):
            zk = rng.choice(clients)
            path = rng.choice(paths)
            op = rng.randrange(7)
            try:
                if op == 0:
                    await zk.create(path, ephemeral=rng.random() < 0.3, sequence=rng.random() < 0.2)
                elif op == 1:
                    await zk.set(path, b"x", version=rng.choice([-1, 0, 1]))
                elif op == 2:
                    await zk.delete(path, recursive=rng.random() < 0.3)
                elif op == 3:
                    await zk.multi([CreateOp(path), SetOp(rng.choice(paths), b"y")])
                elif op == 4:
                    await zk.get_children(path, lambda _: None)
                elif op == 5 and rng.random() < 0.1:
                    index = clients.index(zk)
                    await zk.close()
                    clients[index] = (await started(server, f"c{index}-again"))[0]
                else:
                    await zk.exists(path, lambda _: None)
            except CoordinationError:
                pass
            server.sanity_check()
        for zk in clients:
            await zk.close()
        assert server.session_ids() == []
        assert all(stat.ephemeral_owner == 0 for _, stat in server.snapshot().values())

    simulate(main)


def test_a_failing_watcher_is_reported_and_does_not_block_later_events() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _, context: reported.append(context))
        server = SimZooKeeperServer()
        zk, _ = await started(server, "c")
        await zk.create("/n")

        def broken(event: WatchEvent) -> None:
            raise RuntimeError("watcher bug")

        seen = Recorder()
        await zk.get("/n", broken)
        await zk.get("/n", seen)
        await zk.set("/n", b"1")
        await settle()
        assert seen.calls == [WatchEvent(EventType.CHANGED, "/n")]
        assert [type(context["exception"]) for context in reported] == [RuntimeError]
        await zk.close()

    simulate(main)


def test_calls_before_start_are_a_usage_error() -> None:
    async def main() -> None:
        zk = SimZooKeeperClient(SimZooKeeperServer(), TIMEOUT_MS, "c")
        with pytest.raises(CoordinationError, match="start"):
            await zk.get("/")
        await zk.start()
        with pytest.raises(CoordinationError, match="once"):
            await zk.start()
        with pytest.raises(NoNodeError):
            await zk.get("/missing")
        await zk.close()

    simulate(main)


def test_works_on_the_standard_asyncio_loop_with_latency() -> None:
    """Only loop.time()/call_at are used, so a real loop works too (in real time)."""

    async def main() -> None:
        server = SimZooKeeperServer()
        a, _ = await started(server, "a", latency_ms=(0, 2), seed=1)
        b, _ = await started(server, "b", latency_ms=(0, 2), seed=2)
        seen = Recorder()
        await b.exists("/n", seen)
        await a.create("/n", ephemeral=True)
        await seen.wait_for(1)
        await a.close()
        await b.close()
        assert seen.calls == [WatchEvent(EventType.CREATED, "/n")]

    asyncio.run(asyncio.wait_for(main(), 10))
