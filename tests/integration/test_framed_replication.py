"""Followers fetching over replication listeners (``replica.fetch.listener.name``, framed TCP
or TLS: ``node/rpc_framed.py``; local clusters have them by default) on three real broker
processes and a real ZooKeeper: every broker registers the listener, acks=all is acknowledged
only once followers have fetched over it, and after a SIGKILL of the leader nothing
acknowledged is lost. The same over gRPC, for a cluster without them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.tls import client_tls
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from tests.cli_run import local_cluster
from tests.integration.test_processes import TP, _produce, kill_the_leader_and_read_back


async def _registrations(cluster: LocalCluster) -> dict[int, zk_data.BrokerInfo]:
    zk = KazooCoordination(cluster.zookeeper.connect_string, 6000)
    await zk.start()
    try:
        found = {}
        for broker_id in cluster.brokers:
            data, _ = await zk.get(zk_data.broker_path(broker_id))
            found[broker_id] = zk_data.decode_broker(
                broker_id, data, listener="SSL" if cluster.tls else "PLAINTEXT"
            )
        return found
    finally:
        await zk.close()


def established_to(port: int, table: str | None = None) -> int:
    """TCP connections established to local port ``port`` in ``table``, the text of a network
    namespace's /proc/net/tcp (by default this machine's)."""
    if table is None:
        table = Path("/proc/net/tcp").read_text()
    count = 0
    for line in table.splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rpartition(":")[2], 16)
        if local_port == port and fields[3] == "01":  # 01: ESTABLISHED
            count += 1
    return count


async def _survives_a_leader_kill(cluster: LocalCluster) -> None:
    tls = client_tls(cluster.client_properties()) if cluster.tls else None
    client = MinimalClient(GrpcTransport(tls=tls), cluster.bootstrap, SystemClock())
    try:
        registered = await _registrations(cluster)
        for broker_id, broker in cluster.brokers.items():
            names = [name for name, _, _ in registered[broker_id].endpoints]
            if cluster.framed_replication:
                assert ("REPLICATION", broker.host, broker.replication_port) in registered[
                    broker_id
                ].endpoints
            else:
                assert "REPLICATION" not in names
        await client.create_topic("events", 1, 3, {"min.insync.replicas": "2"})
        await client.wait_for_leaders("events", 1)
        acked = await _produce(client, [b"before-%d" % i for i in range(30)])
        leader = client.metadata.leader(TP)
        # The two followers' fetch streams are connections to its replication listener.
        port = cluster.brokers[leader].replication_port
        assert (port is not None) is cluster.framed_replication
        if port is not None:
            assert established_to(port) >= 2
        await kill_the_leader_and_read_back(cluster, client, acked, leader)
    finally:
        await client.transport.close()
    for broker_id, broker in cluster.brokers.items():
        if broker_id != leader:
            log = broker.log_path.read_text()
            assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize(
    ("tls", "framed"),
    [(False, True), (True, True), (False, False)],
    ids=["plaintext", "mutual-tls", "over-grpc"],
)
def test_followers_fetch_over_the_replication_listener_and_fail_over(
    tmp_path: Path, tls: bool, framed: bool
) -> None:
    # acks=all with min ISR 2 needs a follower's fetch: with a replication listener there is
    # no gRPC path for it to take. Without one (over-grpc), followers fetch over gRPC.
    with local_cluster(tmp_path, brokers=3, tls=tls, framed_replication=framed) as cluster:
        asyncio.run(_survives_a_leader_kill(cluster))
