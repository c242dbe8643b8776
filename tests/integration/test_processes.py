"""Three real broker processes and a real ZooKeeper: failover after SIGKILL, ZooKeeper
session expiry of a broker, and controller failover. Nothing acknowledged with acks=all and
min.insync.replicas=2 may be lost."""

from __future__ import annotations

import asyncio
import re
import time

from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination

TP = TopicPartition("events", 0)


async def _client(cluster: LocalCluster) -> MinimalClient:
    client = MinimalClient(GrpcTransport(), cluster.bootstrap, SystemClock())
    await client.create_topic("events", 1, 3, {"min.insync.replicas": "2"})
    await client.wait_for_leaders("events", 1)
    return client


async def _produce(client: MinimalClient, values: list[bytes]) -> dict[bytes, int]:
    acked = {}
    for value in values:
        result = await client.produce(TP, [value], acks=-1)
        assert result.ok, result
        acked[value] = result.base_offset
    return acked


async def _controller_id(cluster: LocalCluster) -> tuple[int, int]:
    zk = KazooCoordination(cluster.zookeeper.connect_string, 6000)
    await zk.start()
    try:
        data, _ = await zk.get(zk_data.CONTROLLER)
        epoch, _ = await zk.get(zk_data.CONTROLLER_EPOCH)
        return zk_data.decode_controller(data), zk_data.decode_controller_epoch(epoch)
    finally:
        await zk.close()


def test_each_broker_leaves_its_start_up_objects_out_of_full_collections(
    local_cluster: LocalCluster,
) -> None:
    """node.gc_tuning, in the broker processes themselves."""
    for broker in local_cluster.brokers.values():
        log = broker.log_path.read_text()
        found = re.search(r"broker \d+: (\d+) start-up objects left out of full collections", log)
        assert found is not None and int(found.group(1)) > 50_000, log[-2000:]


async def kill_the_leader_and_read_back(
    cluster: LocalCluster, client: MinimalClient, acked: dict[bytes, int], leader: int
) -> None:
    """SIGKILL ``leader``; 30 more acks=all records go to its successor within 60 s, and
    everything acknowledged (``acked`` and those) reads back at its offset."""
    cluster.kill(leader)  # SIGKILL
    started = time.monotonic()
    acked.update(await _produce(client, [b"after-%d" % i for i in range(30)]))
    assert time.monotonic() - started < 60
    await client.refresh_metadata(["events"])
    assert client.metadata.leader(TP) not in (-1, leader)
    read = {r.value: r.offset for r in await client.read_all(TP)}
    assert read == acked


def test_sigkill_of_the_leader_loses_no_acknowledged_record(local_cluster: LocalCluster) -> None:
    async def main() -> None:
        client = await _client(local_cluster)
        try:
            acked = await _produce(client, [b"before-%d" % i for i in range(30)])
            leader = client.metadata.leader(TP)
            await kill_the_leader_and_read_back(local_cluster, client, acked, leader)
        finally:
            await client.transport.close()

    asyncio.run(main())


def test_a_broker_whose_zookeeper_session_expires_comes_back(
    local_cluster: LocalCluster,
) -> None:
    """SIGSTOP a follower past the session timeout: ZooKeeper expires its session, the
    controller takes it out of the ISR; after SIGCONT it registers again and rejoins."""

    async def main() -> None:
        client = await _client(local_cluster)
        try:
            acked = await _produce(client, [b"a-%d" % i for i in range(10)])
            leader = client.metadata.leader(TP)
            follower = next(b for b in local_cluster.brokers if b != leader)
            local_cluster.pause(follower)
            await asyncio.sleep(9)  # > zookeeper.session.timeout.ms (6 s)
            acked.update(await _produce(client, [b"b-%d" % i for i in range(10)]))
            local_cluster.resume(follower)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                await client.refresh_metadata(["events"])
                metadata = await client.refresh_metadata(["events"])
                isr = list(metadata.topics[0].partitions[0].isr)
                if follower in isr and follower in client.metadata.brokers:
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError(f"broker {follower} did not rejoin the ISR")
            read = {r.value: r.offset for r in await client.read_all(TP)}
            assert read == acked
        finally:
            await client.transport.close()

    asyncio.run(main())


def test_killing_the_controller_elects_a_new_one(local_cluster: LocalCluster) -> None:
    async def main() -> None:
        client = await _client(local_cluster)
        try:
            acked = await _produce(client, [b"x-%d" % i for i in range(5)])
            controller, epoch = await _controller_id(local_cluster)
            local_cluster.kill(controller)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    new_controller, new_epoch = await _controller_id(local_cluster)
                except Exception:
                    new_controller, new_epoch = -1, epoch
                if new_controller not in (-1, controller):
                    break
                await asyncio.sleep(0.5)
            else:
                raise AssertionError("no new controller")
            assert new_epoch > epoch
            acked.update(await _produce(client, [b"y-%d" % i for i in range(5)]))
            read = {r.value: r.offset for r in await client.read_all(TP)}
            assert read == acked
        finally:
            await client.transport.close()

    asyncio.run(main())


def test_a_failed_start_up_leaves_no_process_behind(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A broker that cannot start (here: an unknown config key) fails the cluster's start-up,
    and the ZooKeeper and brokers that did start are stopped, not left running."""
    import pytest

    from kafkasim.controller.zk_process import zookeeper_available

    if zookeeper_available() is not None:
        pytest.skip("real ZooKeeper unavailable")
    cluster = LocalCluster(tmp_path, brokers=2, broker_props={"no.such.key": "1"})
    from kafkasim.cluster.local import BrokerStartError

    with pytest.raises(BrokerStartError, match="exited during start-up"):
        cluster.start()
    pids = [b.pid for b in cluster.brokers.values()]
    assert all(pid is not None for pid in pids)
    for broker in cluster.brokers.values():
        assert broker.process is not None and broker.process.poll() is not None
    assert not cluster.zookeeper.running
    assert "Unknown broker configuration key" in cluster.brokers[1].log_path.read_text()
