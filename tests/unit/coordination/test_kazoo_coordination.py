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
        assert time.monotonic() - started < 5
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
