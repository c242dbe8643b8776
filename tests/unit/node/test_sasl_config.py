"""A broker's SASL settings (node.sasl_config): per-listener mechanisms and JAAS entries, and
each mistake an INVALID_CONFIG naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.cluster.certs import create_certs
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sasl import SaslCredentials, jaas_config
from kafkasim.node.config import BrokerConfig

PLAIN_JAAS = jaas_config("PLAIN", "broker", "b-pw", broker="b-pw", alice="a-pw")
BASE: dict[str, object] = {
    "broker.id": 1,
    "zookeeper.connect": "zk:2181",
    "listeners": "PLAINTEXT://h:1,KAFKA://h:2",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,KAFKA:SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "listener.name.kafka.plain.sasl.jaas.config": PLAIN_JAAS,
}


def test_a_sasl_listener_reads_its_mechanisms_and_users() -> None:
    config = BrokerConfig.from_props(BASE)
    kafka = config.listener_sasl("KAFKA")
    assert kafka is not None and config.listener_sasl("PLAINTEXT") is None
    assert kafka.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert kafka.plain_users == {"broker": "b-pw", "alice": "a-pw"}
    assert config.inter_broker_sasl() is None
    own = BrokerConfig.from_props(
        {
            **{k: v for k, v in BASE.items() if "jaas" not in k},
            "listener.name.kafka.sasl.enabled.mechanisms": "SCRAM-SHA-256",
        }
    ).listener_sasl("KAFKA")
    assert own is not None and own.mechanisms == ("SCRAM-SHA-256",)


def test_a_sasl_ssl_inter_broker_listener_gives_the_brokers_credentials(tmp_path: Path) -> None:
    _, _, issued = create_certs(tmp_path, brokers=0, clients=("b",))
    props: dict[str, object] = {
        **BASE,
        "listeners": "INTERNAL://h:1,KAFKA://h:2",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,KAFKA:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(issued["b"].keystore),
        "listener.name.internal.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    with pytest.raises(InvalidConfigError, match=r"GSSAPI must be included in sasl\.enabled"):
        BrokerConfig.from_props(props)  # Kafka's default inter-broker mechanism
    props["sasl.mechanism.inter.broker.protocol"] = "SCRAM-SHA-256"
    with pytest.raises(InvalidConfigError, match=r"set listener\.name\.internal\.scram-sha-256"):
        BrokerConfig.from_props(props)  # no login of the broker's own
    props["sasl.mechanism.inter.broker.protocol"] = "PLAIN"
    config = BrokerConfig.from_props(props)
    assert config.inter_broker_sasl() == SaslCredentials("PLAIN", "broker", "b-pw")


@pytest.mark.parametrize(
    ("props", "message"),
    [
        (
            {"sasl.enabled.mechanisms": "GSSAPI"},
            r"Invalid value GSSAPI for configuration sasl\.enabled\.mechanisms \(listener KAFKA "
            r"is SASL_PLAINTEXT\): kafkasim speaks PLAIN",
        ),
        (
            {"listener.name.kafka.plain.sasl.jaas.config": None},
            r"Listener KAFKA enables PLAIN: set listener\.name\.kafka\.plain\.sasl\.jaas\.config",
        ),
        (
            {"listener.name.kafka.plain.sasl.jaas.config": jaas_config("SCRAM-SHA-256", "a", "b")},
            r"PLAIN needs the login module org\.apache\.kafka\.common\.security\.plain",
        ),
        (
            {"listener.name.kafka.scram-sha-256.sasl.jaas.config": PLAIN_JAAS},
            r"names mechanism 'scram-sha-256', which is not enabled",
        ),
        (
            {"listener.name.plaintext.sasl.enabled.mechanisms": "PLAIN"},
            r"listener PLAINTEXT uses PLAINTEXT, not SASL_PLAINTEXT or SASL_SSL",
        ),
        (
            {"listener.name.kafka.sasl.bogus": "x"},
            r"Unknown broker configuration key: listener\.name\.kafka\.sasl\.bogus",
        ),
        (
            {"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT,KAFKA:SASL_PLAINTEXT"},
            r"Listener PLAINTEXT speaks gRPC, whose SASL credentials travel in call metadata: "
            r"it must use SASL_SSL",
        ),
    ],
)
def test_sasl_mistakes_are_invalid_config_naming_the_key(
    props: dict[str, object], message: str
) -> None:
    merged = {k: v for k, v in {**BASE, **props}.items() if v is not None}
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_props(merged)
