"""Kafka's listeners: a broker listens on several named listeners, registers every advertised
one in ZooKeeper, replicates over ``inter.broker.listener.name``, and tells each client the
addresses of the listener its request came in on (so a client outside a container network
reaches brokers through their published ports while replication stays inside it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim import proto
from kafkasim.client.admin import AdminClient
from kafkasim.client.simple import MinimalClient
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.node.config import BrokerConfig
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster
from kafkasim.sim.network import SimTransport
from tests.sim.helpers import create, simulate

TWO_LISTENERS = {
    "listeners": "INTERNAL://broker-{broker_id}:9092,EXTERNAL://outside{broker_id}:9093",
    "advertised.listeners": "INTERNAL://broker-{broker_id}:9092,EXTERNAL://outside{broker_id}:9093",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
}


def config(**props: object) -> BrokerConfig:
    base: dict[str, object] = {"broker.id": 1, "zookeeper.connect": "zk:2181"}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return BrokerConfig.from_props(base)


def test_listeners_advertised_listeners_and_the_inter_broker_listener_are_parsed() -> None:
    c = config(
        listeners="INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:9093",
        advertised_listeners="INTERNAL://broker-1:9092,EXTERNAL://127.0.0.1:19092",
        listener_security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        inter_broker_listener_name="INTERNAL",
    )
    assert c.listeners == {"INTERNAL": ("0.0.0.0", 9092), "EXTERNAL": ("0.0.0.0", 9093)}
    assert c.advertised_listeners["EXTERNAL"] == ("127.0.0.1", 19092)
    assert c.inter_broker_listener == "INTERNAL"
    assert c.listen_address == ("0.0.0.0", 9092)
    assert c.advertised_address == ("broker-1", 9092)
    # Kafka's defaults: one PLAINTEXT listener, advertised as it listens.
    plain = config(listeners="PLAINTEXT://127.0.0.1:9092")
    assert plain.inter_broker_listener == "PLAINTEXT"
    assert plain.advertised_address == ("127.0.0.1", 9092)


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"listeners": "INTERNAL://h:1"}, "No security protocol defined for listener INTERNAL"),
        (
            {
                "listeners": "X://h:1",
                "listener.security.protocol.map": "X:GSSAPI",
                "inter.broker.listener.name": "X",
            },
            "Listener X uses security protocol GSSAPI: supported are PLAINTEXT, SSL, "
            "SASL_PLAINTEXT, SASL_SSL",
        ),
        (
            {"listeners": "SSL://h:1", "inter.broker.listener.name": "SSL"},
            "A TLS listener needs a keystore: set ssl.keystore.location",
        ),
        (
            {"listeners": "PLAINTEXT://h:1", "advertised.listeners": "OTHER://h:1"},
            "OTHER is not in listeners",
        ),
        (
            {"listeners": "PLAINTEXT://0.0.0.0:1"},
            "cannot use the nonroutable meta-address 0.0.0.0",
        ),
        (
            {"listeners": "PLAINTEXT://h:1", "inter.broker.listener.name": "INTERNAL"},
            "inter.broker.listener.name must be a listener name defined in advertised.listeners",
        ),
        ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "must have a different name"),
        (
            {
                "listeners": "A://h:1,B://h:1",
                "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT",
                "inter.broker.listener.name": "A",
            },
            "must have a different port",
        ),
        (
            {"listeners": "PLAINTEXT://h:1", "listener.security.protocol.map": "PLAINTEXT"},
            "Invalid value PLAINTEXT for configuration listener.security.protocol.map",
        ),
        ({"listeners": "PLAINTEXT://h"}, "Invalid value PLAINTEXT://h for configuration listeners"),
    ],
)
def test_bad_listener_configs_are_invalid_config_naming_what_is_wrong(
    props: dict[str, object], message: str
) -> None:
    base: dict[str, object] = {"broker.id": 1, "zookeeper.connect": "zk:2181", **props}
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_props(base)


def test_a_registration_carries_every_listener_and_is_read_on_the_inter_broker_one() -> None:
    info = zk_data.BrokerInfo(
        2,
        "broker-2",
        9092,
        "r1",
        endpoints=(("INTERNAL", "broker-2", 9092), ("EXTERNAL", "127.0.0.1", 19093)),
    )
    data = zk_data.encode_broker(info, 0)
    assert b'"endpoints":["INTERNAL://broker-2:9092","EXTERNAL://127.0.0.1:19093"]' in data
    assert b'"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT","EXTERNAL":"PLAINTEXT"}' in (
        data
    )
    internal = zk_data.decode_broker(2, data, 7, "INTERNAL")
    assert (internal.host, internal.port, internal.epoch, internal.rack) == (
        "broker-2",
        9092,
        7,
        "r1",
    )
    assert internal.endpoints == info.endpoints
    external = zk_data.decode_broker(2, data, 7, "EXTERNAL")
    assert external.address == "127.0.0.1:19093"
    with pytest.raises(ValueError, match="broker 2 has no listener PLAINTEXT"):
        zk_data.decode_broker(2, data)
    # A one-listener registration, as before, reads the same.
    single = zk_data.encode_broker(zk_data.BrokerInfo(1, "h", 1), 0)
    assert zk_data.decode_broker(1, single).address == "h:1"


def test_clients_get_the_addresses_of_the_listener_they_came_in_on(tmp_path: Path) -> None:
    """Three brokers with an internal listener (replication, the controller) and an external
    one: a client bootstrapped on the external listener is told external addresses for
    metadata, the cluster and the group coordinator, and produces with acks=all (so the
    followers replicate over the internal listener); one on the internal listener is told the
    internal addresses."""
    tp = TopicPartition("t", 0)

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, tp.topic, partitions=1, rf=3)
        outside = SimTransport(cluster.network, "outside-client")
        external = MinimalClient(outside, ["outside1:9093"], cluster.clock)
        internal = cluster.client("inside-client")
        try:
            metadata = await external.call_any(
                proto.METHOD_METADATA, pb.MetadataRequest(topics=[tp.topic])
            )
            assert isinstance(metadata, pb.MetadataResponse)
            assert sorted(f"{b.host}:{b.port}" for b in metadata.brokers) == [
                f"outside{b}:9093" for b in (1, 2, 3)
            ]
            assert all(not b.listeners for b in metadata.brokers)
            assert await external.leader_address(tp) == (
                f"outside{metadata.topics[0].partitions[0].leader}:9093"
            )
            result = await external.produce(tp, [b"a", b"b"], acks=-1)
            assert result.ok and result.base_offset == 0
            inside = await internal.call_any(
                proto.METHOD_METADATA, pb.MetadataRequest(topics=[tp.topic])
            )
            assert isinstance(inside, pb.MetadataResponse)
            assert sorted(f"{b.host}:{b.port}" for b in inside.brokers) == [
                f"broker-{b}:9092" for b in (1, 2, 3)
            ]
            admin = AdminClient(["outside2:9093"], transport=outside, clock=cluster.clock)
            described = await admin.describe_cluster()
            assert sorted(f"{b.host}:{b.port}" for b in described.brokers) == [
                f"outside{b}:9093" for b in (1, 2, 3)
            ]
            coordinator: pb.FindCoordinatorResponse = pb.FindCoordinatorResponse()
            for _ in range(50):  # the first call creates __consumer_offsets
                answer = await external.call_any(
                    proto.METHOD_FIND_COORDINATOR, pb.FindCoordinatorRequest(key="g")
                )
                assert isinstance(answer, pb.FindCoordinatorResponse)
                coordinator = answer
                if answer.error_code == 0:
                    break
                await cluster.sleep(0.5)
            assert coordinator.error_code == 0
            assert coordinator.host == f"outside{coordinator.node_id}"
            assert coordinator.port == 9093
        finally:
            await outside.close()

    simulate(tmp_path, scenario, **{**TWO_LISTENERS, "offsets.topic.num.partitions": 1})


def test_a_partition_whose_leader_lacks_the_listener_is_listener_not_found() -> None:
    cache = MetadataCache(1)
    cache.update(
        pb.UpdateMetadataRequest(
            controller_id=1,
            controller_epoch=1,
            live_brokers=[
                pb.BrokerEndpoint(
                    node_id=1,
                    host="b1",
                    port=1,
                    listeners=[
                        pb.ListenerEndpoint(name="INTERNAL", host="b1", port=1),
                        pb.ListenerEndpoint(name="EXTERNAL", host="x1", port=2),
                    ],
                ),
                pb.BrokerEndpoint(
                    node_id=2,
                    host="b2",
                    port=1,
                    listeners=[pb.ListenerEndpoint(name="INTERNAL", host="b2", port=1)],
                ),
            ],
            partition_states=[
                pb.PartitionState(topic="t", partition=0, leader=2, replicas=[1, 2], isr=[1, 2]),
                pb.PartitionState(topic="t", partition=1, leader=1, replicas=[1, 2], isr=[1, 2]),
            ],
        )
    )
    view = cache.describe(["t"], "EXTERNAL")
    assert [(b.node_id, b.host, b.port) for b in view.brokers] == [(1, "x1", 2)]
    codes = [p.error.code if p.error else 0 for p in view.topics[0].partitions]
    assert codes == [72, 0]  # LISTENER_NOT_FOUND for the leader only INTERNAL reaches
