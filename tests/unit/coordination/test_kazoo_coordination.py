"""KazooCoordination outside the conformance cases: a bounded, clear failure when ZooKeeper is
unreachable, usage errors, and no kazoo thread left behind."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from kafkasim.common.coordination import ConnectionLossError, CoordinationError, SessionExpiredError
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.controller.zk_process import ZooKeeperProcess, free_loopback_port
from tests.unit.coordination.harness import requires_zookeeper


def test_unreachable_zookeeper_fails_start_in_time_naming_the_hosts() -> None:
    hosts = f"127.0.0.1:{free_loopback_port()}"  # nothing listens there

    async def main() -> None:
        zk = KazooCoordination(hosts, 6_000, connect_timeout_ms=500)
        started = time.monotonic()
        with pytest.raises(ConnectionLossError, match=hosts):
            await zk.start()
        # Its connect timeout (0.5 s) ends it, not the session timeout (6 s) many times over:
        # a generous bound for a loaded machine.
        assert time.monotonic() - started < 20
        with pytest.raises(SessionExpiredError):
            await zk.get("/")
        await zk.close()

    threads_before = threading.active_count()
    asyncio.run(main())
    assert threading.active_count() == threads_before


def test_calls_before_start_are_a_usage_error() -> None:
    async def main() -> None:
        zk = KazooCoordination("127.0.0.1:1", 6_000)
        with pytest.raises(CoordinationError, match="start"):
            await zk.exists("/")
        await zk.close()  # never started: nothing to release

    asyncio.run(main())


@requires_zookeeper
def test_close_joins_kazoo_threads_and_a_second_start_is_refused(
    zookeeper: ZooKeeperProcess,
) -> None:
    async def main() -> None:
        zk = KazooCoordination(zookeeper.connect_string, 6_000)
        await zk.start()
        assert zk.session_id != 0
        with pytest.raises(CoordinationError, match="once"):
            await zk.start()
        await zk.close()

    threads_before = threading.active_count()
    asyncio.run(main())
    assert threading.active_count() == threads_before


@requires_zookeeper
def test_a_watch_event_that_overtakes_its_reads_response_still_fires(
    zookeeper: ZooKeeperProcess,
) -> None:
    """kazoo completes responses on its completion thread but runs watch events on its
    callback thread: an event for a change made just after a read can reach the loop before
    the read's response. Held back here on purpose (the completion thread is blocked), the
    child watch set by get_children must still fire — once lost, a controller never learnt
    of a broker that registered while it read /brokers/ids."""

    async def main() -> None:
        zk = KazooCoordination(zookeeper.connect_string, 6_000)
        other = KazooCoordination(zookeeper.connect_string, 6_000)
        await zk.start()
        await other.start()
        await zk.create("/overtake", b"")
        fired: list[str] = []
        got_event = asyncio.Event()

        def watcher(event: object) -> None:
            fired.append(str(event))
            got_event.set()

        handler = zk._client.handler
        release, holding = threading.Event(), threading.Event()

        def hold() -> None:
            holding.set()
            release.wait()

        handler.completion_queue.put(hold)  # hold the completion thread
        assert await asyncio.to_thread(holding.wait, 10)
        read = asyncio.ensure_future(zk.get_children("/overtake", watcher))
        deadline = time.monotonic() + 10
        while handler.completion_queue.qsize() == 0:  # the response is queued behind it
            assert time.monotonic() < deadline, "no response to get_children"
            await asyncio.sleep(0.01)
        await other.create("/overtake/b3", b"")
        await asyncio.wait_for(got_event.wait(), 10)  # the event, before the response
        assert not read.done()
        release.set()
        assert await read == []
        assert len(fired) == 1
        await other.close()
        await zk.close()

    asyncio.run(main())


@requires_zookeeper
def test_a_watch_on_a_missing_node_read_by_get_is_not_kept(zookeeper: ZooKeeperProcess) -> None:
    """ZooKeeper sets no watch when getData or getChildren fails with NoNode: neither does the
    adapter keep the watcher it held while the read was in flight."""
    from kafkasim.common.coordination import NoNodeError

    async def main() -> None:
        zk = KazooCoordination(zookeeper.connect_string, 6_000)
        await zk.start()
        with pytest.raises(NoNodeError):
            await zk.get("/missing-node", lambda event: None)
        with pytest.raises(NoNodeError):
            await zk.get_children("/missing-node", lambda event: None)
        assert zk._data_watchers == {}
        assert zk._child_watchers == {}
        await zk.close()

    asyncio.run(main())
