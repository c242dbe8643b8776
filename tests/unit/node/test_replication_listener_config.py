"""The replication listener's configuration (node.config): ``listener.wire.protocol.map`` maps
a listener to ``replication``, ``replica.fetch.listener.name`` names the one followers fetch
from, and each mistake is an INVALID_CONFIG naming what is wrong; and where a follower finds
a leader's replication listener (``MetadataCache.listener_address_of``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.cluster.certs import create_certs
from kafkasim.common.errors import InvalidConfigError
from kafkasim.node.config import BrokerConfig
from kafkasim.node.listener_config import WIRE_REPLICATION
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.proto import kafkasim_pb2 as pb

BASE: dict[str, object] = {
    "broker.id": 1,
    "zookeeper.connect": "zk:2181",
    "listeners": "PLAINTEXT://h:9092,REPLICATION://h:9094",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
    "listener.wire.protocol.map": "REPLICATION:replication",
    "replica.fetch.listener.name": "REPLICATION",
}


def config(**changes: object) -> BrokerConfig:
    """``BASE`` with ``changes`` (keys with dots; None removes a key)."""
    props = {**BASE, **changes}
    return BrokerConfig.from_props({k: v for k, v in props.items() if v is not None})


def invalid(**changes: object) -> str:
    with pytest.raises(InvalidConfigError) as raised:
        config(**changes)
    return str(raised.value)


def test_a_replication_listener_followers_fetch_from() -> None:
    c = config()
    assert WIRE_REPLICATION == "replication"
    assert c.wire_protocols == {"PLAINTEXT": "grpc", "REPLICATION": "replication"}
    assert c.wire_protocols["REPLICATION"] == "replication"
    assert c.replica_fetch_listener == "REPLICATION"
    assert c.inter_broker_listener == "PLAINTEXT"
    # Names and wire protocols are read case-insensitively, as the other listener keys.
    c = config(**{"replica.fetch.listener.name": "replication"})
    assert c.replica_fetch_listener == "REPLICATION"
    c = config(**{"listener.wire.protocol.map": "replication:Replication"})
    assert c.wire_protocols["REPLICATION"] == "replication"


def test_without_replica_fetch_listener_name_followers_fetch_over_grpc() -> None:
    c = config(**{"replica.fetch.listener.name": None})
    assert c.replica_fetch_listener is None
    # A replication listener may be there without being the one followers use.
    assert c.wire_protocols["REPLICATION"] == "replication"
    plain = BrokerConfig.from_props({"broker.id": 1, "zookeeper.connect": "zk:2181"})
    assert plain.replica_fetch_listener is None
    assert set(plain.wire_protocols.values()) == {"grpc"}


@pytest.mark.parametrize("value", ["REPLICATION:framed", "REPLICATION", ":replication"])
def test_a_bad_wire_protocol_entry_names_the_replication_choice(value: str) -> None:
    message = invalid(**{"listener.wire.protocol.map": value, "replica.fetch.listener.name": None})
    assert f"Invalid value {value} for configuration listener.wire.protocol.map" in message
    assert "NAME:replication" in message


def test_replica_fetch_listener_name_must_name_a_replication_listener() -> None:
    message = invalid(**{"replica.fetch.listener.name": "PLAINTEXT"})
    assert "replica.fetch.listener.name PLAINTEXT speaks grpc" in message
    assert "replication" in message.split("speaks grpc", 1)[1]
    # A listener mapped to kafka is not one either.
    message = invalid(
        **{
            "listeners": "PLAINTEXT://h:9092,KAFKA://h:9093",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,KAFKA:PLAINTEXT",
            "listener.wire.protocol.map": None,
            "replica.fetch.listener.name": "KAFKA",
        }
    )
    assert "replica.fetch.listener.name KAFKA speaks kafka" in message


def test_replica_fetch_listener_name_must_be_an_advertised_listener() -> None:
    message = invalid(**{"replica.fetch.listener.name": "ELSEWHERE"})
    assert "replica.fetch.listener.name must be a listener name defined in advertised" in message
    assert "ELSEWHERE is not" in message
    # A replication listener that is not advertised cannot be fetched from either.
    message = invalid(**{"advertised.listeners": "PLAINTEXT://h:9092"})
    assert "REPLICATION is not (PLAINTEXT)" in message


@pytest.mark.parametrize("security", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_a_replication_listener_carries_no_sasl(security: str) -> None:
    message = invalid(
        **{"listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,REPLICATION:{security}"}
    )
    assert "Listener REPLICATION is a replication listener" in message
    assert f"it must use PLAINTEXT or SSL, not {security}" in message


def test_a_replication_listener_over_tls_is_accepted(tmp_path: Path) -> None:
    _, brokers, _ = create_certs(tmp_path, brokers=1)
    c = config(
        **{
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(brokers[1].keystore),
            "ssl.client.auth": "required",
        }
    )
    assert c.security_protocols["REPLICATION"] == "SSL"
    assert c.replica_fetch_listener == "REPLICATION"


def test_the_inter_broker_listener_cannot_be_the_replication_listener() -> None:
    message = invalid(**{"inter.broker.listener.name": "REPLICATION"})
    assert "inter.broker.listener.name REPLICATION speaks replication" in message
    assert "must name a grpc listener" in message


def test_listener_address_of_gives_the_named_listener_never_another() -> None:
    cache = MetadataCache(1)
    cache.add_brokers(
        [
            pb.BrokerEndpoint(
                node_id=1,
                host="b1",
                port=9092,
                listeners=[
                    pb.ListenerEndpoint(name="PLAINTEXT", host="b1", port=9092),
                    pb.ListenerEndpoint(name="REPLICATION", host="r1", port=9094),
                ],
            ),
            pb.BrokerEndpoint(
                node_id=2,
                host="b2",
                port=9092,
                listeners=[pb.ListenerEndpoint(name="PLAINTEXT", host="b2", port=9092)],
            ),
            # A registration without listeners: only its inter-broker address is known.
            pb.BrokerEndpoint(node_id=3, host="b3", port=9092),
        ]
    )
    assert cache.listener_address_of(1, "REPLICATION") == "r1:9094"
    assert cache.listener_address_of(1, "PLAINTEXT") == "b1:9092"
    assert cache.listener_address_of(2, "REPLICATION") is None
    assert cache.address_of(2) == "b2:9092"  # known, but not as its replication listener
    assert cache.listener_address_of(3, "REPLICATION") is None
    assert cache.listener_address_of(4, "REPLICATION") is None
    assert cache.address_of(4) is None
