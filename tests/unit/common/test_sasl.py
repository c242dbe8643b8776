"""SASL/PLAIN's message as Kafka's PlainSaslServer reads it, sasl.jaas.config values, and the
SASL credentials of a client config."""

from __future__ import annotations

import pytest

from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sasl import (
    PlainMessage,
    SaslAuthenticationError,
    SaslCredentials,
    client_sasl,
    jaas_config,
    parse_jaas_config,
    parse_plain,
    plain_message,
)


def test_plain_messages() -> None:
    assert parse_plain(plain_message("alice", "pw")) == PlainMessage("", "alice", "pw")
    assert parse_plain(b"alice\0alice\0pw") == PlainMessage("alice", "alice", "pw")
    for bad, why in [
        (b"alice\0pw", "expected 3 tokens, got 2"),
        (b"\0alice\0pw\0x", "expected 3 tokens, got 4"),
        (b"\0\0pw", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"admin\0alice\0pw", "authorization id that is different from username"),
        (b"\0\xff\0pw", "not UTF-8"),
    ]:
        with pytest.raises(SaslAuthenticationError, match=why):
            parse_plain(bad)


def test_jaas_config_values() -> None:
    entry = parse_jaas_config(
        "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="admin" password="a \\"quoted\\" secret"\n'
        '  user_admin="admin-secret" user_alice=alice-secret user_=ignored;'
    )
    assert entry.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert entry.flag == "required"
    assert entry.options["password"] == 'a "quoted" secret'
    assert entry.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}
    text = jaas_config("SCRAM-SHA-256", "bob", 'p"w')
    assert parse_jaas_config(text).options == {"username": "bob", "password": 'p"w'}
    for bad in [
        "PlainLoginModule required password=secret",  # no ';'
        "PlainLoginModule always password=secret;",  # not a control flag
        'PlainLoginModule required password="secret" junk;',
    ]:
        with pytest.raises(InvalidConfigError, match=r"sasl\.jaas\.config") as refused:
            parse_jaas_config(bad)
        assert "secret" not in str(refused.value)  # the options are never shown


def test_the_sasl_credentials_of_a_client_config() -> None:
    assert client_sasl({"security.protocol": "SSL"}) is None
    assert client_sasl(
        {"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.username": "a",
         "sasl.password": "b"}
    ) == SaslCredentials("PLAIN", "a", "b")  # fmt: skip
    jaas = jaas_config("SCRAM-SHA-512", "carol", "c-pw")
    assert client_sasl(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
         "sasl.jaas.config": jaas}
    ) == SaslCredentials("SCRAM-SHA-512", "carol", "c-pw")  # fmt: skip
    with pytest.raises(InvalidConfigError, match=r"GSSAPI for configuration sasl\.mechanism"):
        client_sasl({"security.protocol": "SASL_SSL", "sasl.username": "a"})
    with pytest.raises(InvalidConfigError, match=r"needs credentials: set sasl\.username"):
        client_sasl({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
