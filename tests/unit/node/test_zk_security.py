"""The brokers' ZooKeeper credentials and ACL policy from their configuration."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.private_files import write_private
from kafkasim.common.zk_acl import (
    CREATOR_ALL_ACL,
    OPEN,
    JaasConfigError,
    ZkAuth,
    jaas_client_text,
    read_jaas_client,
)
from kafkasim.node.config import BrokerConfig
from kafkasim.node.zk_security import zk_security_for, zk_security_from_props

CONNECT = {"zookeeper.connect": "127.0.0.1:2181"}


def test_set_acl_without_credentials_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"zookeeper\.set\.acl is true"):
        BrokerConfig.from_props({**CONNECT, "zookeeper.set.acl": "true"})
    with pytest.raises(InvalidConfigError, match=r"zookeeper\.set\.acl is true"):
        BrokerConfig.from_props(
            {
                **CONNECT,
                "zookeeper.set.acl": "true",
                "zookeeper.sasl.client": "false",
                "zookeeper.jaas.config.file": "/x",
            }
        )


def test_no_credentials_means_an_open_anonymous_session() -> None:
    assert zk_security_for(BrokerConfig.from_props(CONNECT)) is OPEN


def test_credentials_and_kafkas_acls(tmp_path: Path) -> None:
    jaas = tmp_path / "zk.jaas"
    jaas.write_text(jaas_client_text("kafka", "pw"))
    props = {**CONNECT, "zookeeper.jaas.config.file": str(jaas)}
    authenticated_only = zk_security_for(BrokerConfig.from_props(props))
    assert authenticated_only.auth == ZkAuth("digest", "kafka:pw")
    assert authenticated_only.acls_for("/config/users")[0].scheme == "world"  # set.acl off
    secure = zk_security_from_props({**props, "zookeeper.set.acl": "true"})
    assert secure.acls_for("/config/users") == list(CREATOR_ALL_ACL)
    assert "pw" not in repr(secure.auth)


def test_unreadable_or_incomplete_jaas_files_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jaas"
    with pytest.raises(InvalidConfigError, match=r"missing\.jaas"):
        zk_security_for(
            BrokerConfig.from_props({**CONNECT, "zookeeper.jaas.config.file": str(missing)})
        )
    server_only = tmp_path / "server.jaas"
    server_only.write_text('Server {\n  x required\n  user_kafka="pw";\n};\n')
    with pytest.raises(JaasConfigError, match="no Client section"):
        read_jaas_client(server_only)
    no_password = tmp_path / "nopw.jaas"
    no_password.write_text('Client {\n  x required\n  username="kafka";\n};\n')
    with pytest.raises(JaasConfigError, match="password"):
        read_jaas_client(no_password)


def test_kafkas_jaas_format_is_read(tmp_path: Path) -> None:
    jaas = tmp_path / "kafka_server_jaas.conf"
    jaas.write_text(
        "KafkaServer {\n  org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="admin" password="admin-secret";\n};\n'
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '  username="kafka"\n  password="a \\"quoted\\" secret";\n};\n'
    )
    assert read_jaas_client(jaas) == ZkAuth("digest", 'kafka:a "quoted" secret')


def test_write_private_creates_and_resets_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    write_private(path, "one")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    write_private(path, b"two")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes() == b"two"
