"""TLS settings as Kafka reads them (common.tls, node.config): PEM keystores and truststores,
Kafka's INVALID_CONFIG rules naming the key, per-listener ``listener.name.<l>.ssl.*``
overrides; the principal of a certificate; the throw-away certificates (cluster.certs) and the
modes of the files holding their keys."""

from __future__ import annotations

import datetime
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kafkasim.cluster.certs import CertificateAuthority, Issued, create_certs
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.tls import load_tls, principal_of_certificate
from kafkasim.node.config import BrokerConfig

Certs = tuple[CertificateAuthority, dict[int, Issued], dict[str, Issued]]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return create_certs(tmp_path_factory.mktemp("certs"), brokers=2, clients=("alice",))


def ssl_props(ca: CertificateAuthority, issued: Issued, prefix: str = "") -> dict[str, object]:
    return {
        f"{prefix}ssl.keystore.type": "PEM",
        f"{prefix}ssl.keystore.location": str(issued.keystore),
        f"{prefix}ssl.truststore.type": "PEM",
        f"{prefix}ssl.truststore.location": str(ca.certificate_path),
    }


def broker(**props: object) -> BrokerConfig:
    base: dict[str, object] = {
        "broker.id": 1,
        "zookeeper.connect": "zk:2181",
        "listeners": "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
    }
    base.update(props)
    return BrokerConfig.from_props(base)


def test_an_ssl_listener_loads_its_pem_keystore_and_truststore(certs: Certs) -> None:
    ca, brokers, _ = certs
    config = broker(**ssl_props(ca, brokers[1]), **{"ssl.client.auth": "required"})
    tls = config.listener_tls("SSL")
    assert tls is not None and config.listener_tls("PLAINTEXT") is None
    assert tls.client_auth == "required" and tls.verify_hostname
    assert tls.chain_pem == brokers[1].certificate.read_bytes()
    assert tls.trusted_pem == ca.certificate_path.read_bytes()
    assert b"PRIVATE KEY" in (tls.key_pem or b"")
    # The contexts build (the key matches the certificate).
    tls.server_context()
    tls.client_context()


def test_inline_pem_keys_work_as_the_files(certs: Certs) -> None:
    ca, brokers, _ = certs
    inline = load_tls(
        {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": brokers[1].key.read_text(),
            "ssl.keystore.certificate.chain": brokers[1].certificate.read_text(),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.certificates": ca.certificate_path.read_text(),
        },
        server=True,
    )
    from_files = load_tls(ssl_props(ca, brokers[1]), server=True)
    assert inline == from_files


def test_an_encrypted_key_needs_ssl_key_password(
    certs: Certs,
    tmp_path: Path,
) -> None:
    _, brokers, _ = certs
    key = serialization.load_pem_private_key(brokers[1].key.read_bytes(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"s3cret"),
    )
    keystore = tmp_path / "enc.pem"
    keystore.write_bytes(encrypted + brokers[1].certificate.read_bytes())
    props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
    with pytest.raises(InvalidConfigError, match=r"encrypted and ssl\.key\.password is not set"):
        load_tls(props, server=True)
    with pytest.raises(
        InvalidConfigError, match=r"ssl\.keystore\.location: the private key cannot"
    ):
        load_tls({**props, "ssl.key.password": "wrong"}, server=True)
    tls = load_tls({**props, "ssl.key.password": "s3cret"}, server=True)
    assert tls.key_pem == brokers[1].key.read_bytes()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ssl.keystore.type": "JKS"}, "Invalid value JKS for configuration ssl.keystore.type"),
        ({"ssl.truststore.type": "JKS"}, "Invalid value JKS for configuration ssl.truststore"),
        ({"ssl.keystore.password": "x"}, "ssl.keystore.password cannot be specified with PEM"),
        ({"ssl.truststore.password": "x"}, "ssl.truststore.password cannot be specified"),
        ({"ssl.keystore.key": "k"}, "Both ssl.keystore.location and ssl.keystore.key"),
        ({"ssl.truststore.certificates": "c"}, "Both ssl.truststore.location and"),
        ({"ssl.keystore.location": "/nonexistent/k.pem"}, "ssl.keystore.location: cannot read"),
        ({"ssl.client.auth": "maybe"}, "Invalid value maybe for configuration ssl.client.auth"),
        ({"ssl.principal.mapping.rules": "RULE:x"}, "only DEFAULT is supported"),
        (
            {"ssl.endpoint.identification.algorithm": "ldap"},
            "Invalid value ldap for configuration ssl.endpoint.identification.algorithm",
        ),
    ],
)
def test_bad_ssl_settings_are_invalid_config_naming_the_key(
    certs: Certs,
    change: dict[str, object],
    message: str,
) -> None:
    ca, brokers, _ = certs
    props = {**ssl_props(ca, brokers[1]), **change}
    with pytest.raises(InvalidConfigError, match=message):
        broker(**props)


def test_pem_files_without_what_they_should_hold_are_refused(
    certs: Certs,
    tmp_path: Path,
) -> None:
    ca, brokers, _ = certs
    only_cert = tmp_path / "only-cert.pem"
    only_cert.write_bytes(brokers[1].certificate.read_bytes())
    with pytest.raises(InvalidConfigError, match="expected one PKCS#8 private key in PEM"):
        broker(**{**ssl_props(ca, brokers[1]), "ssl.keystore.location": str(only_cert)})
    with pytest.raises(InvalidConfigError, match="at least one certificate expected"):
        broker(**{**ssl_props(ca, brokers[1]), "ssl.truststore.location": str(brokers[1].key)})
    # Inline PEM and secrets are named, never printed.
    with pytest.raises(InvalidConfigError) as caught:
        load_tls(
            {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.key": brokers[1].key.read_text(),
                "ssl.keystore.certificate.chain": "junk",
            },
            server=True,
        )
    assert "ssl.keystore.certificate.chain" in str(caught.value)
    assert "PRIVATE KEY" not in str(caught.value)


def test_an_ssl_listener_without_a_keystore_is_invalid_config() -> None:
    with pytest.raises(InvalidConfigError, match="A TLS listener needs a keystore"):
        broker()


def test_per_listener_keys_override_the_broker_wide_ones(certs: Certs) -> None:
    ca, brokers, _ = certs
    config = broker(
        **ssl_props(ca, brokers[1]),
        **ssl_props(ca, brokers[2], prefix="listener.name.ssl."),
        **{"listener.name.ssl.ssl.client.auth": "required"},
    )
    tls = config.listener_tls("SSL")
    assert tls is not None and tls.chain_pem == brokers[2].certificate.read_bytes()
    assert tls.client_auth == "required"
    with pytest.raises(InvalidConfigError, match=r"listener\.name\.ssl\.ssl\.keystore\.location"):
        broker(**{**ssl_props(ca, brokers[1]), "listener.name.ssl.ssl.keystore.location": "/x"})
    with pytest.raises(InvalidConfigError, match="names listener 'other'"):
        broker(**ssl_props(ca, brokers[1]), **{"listener.name.other.ssl.client.auth": "none"})
    with pytest.raises(InvalidConfigError, match="Unknown broker configuration key"):
        broker(**ssl_props(ca, brokers[1]), **{"listener.name.ssl.log.dirs": "/x"})


def test_a_tls_inter_broker_listener_must_verify_host_names(certs: Certs) -> None:
    ca, brokers, _ = certs
    props = {**ssl_props(ca, brokers[1]), "inter.broker.listener.name": "SSL"}
    assert broker(**props).inter_broker_listener == "SSL"
    with pytest.raises(InvalidConfigError, match="always verifies the broker's host name"):
        broker(**props, **{"ssl.endpoint.identification.algorithm": ""})


def test_the_principal_of_a_certificate_is_user_and_its_subject_in_rfc2253_order(
    certs: Certs,
) -> None:
    _, _, clients = certs
    pem = clients["alice"].certificate.read_bytes()
    assert principal_of_certificate(pem) == "User:CN=alice,OU=kafkasim"
    der = x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)
    assert principal_of_certificate(der) == clients["alice"].principal
    # Most specific first, RFC 2253 escaping, as Java's X500Principal.getName().
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme, Inc"),
            x509.NameAttribute(NameOID.COMMON_NAME, "client-1"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    assert (
        principal_of_certificate(certificate.public_bytes(serialization.Encoding.DER))
        == "User:CN=client-1,O=Acme\\, Inc,C=DE"
    )


def test_certificates_are_made_with_sans_and_private_keys_0600(certs: Certs) -> None:
    ca, brokers, clients = certs
    for path in (ca.directory / "ca.key", brokers[1].key, brokers[1].keystore):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    certificate = x509.load_pem_x509_certificate(brokers[2].certificate.read_bytes())
    sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost", "broker-2", "broker-2.cluster"]
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert clients["alice"].principal == "User:CN=alice,OU=kafkasim"
    # A second run reuses the authority, so certificates made earlier stay trusted.
    again, _, _ = create_certs(ca.directory, brokers=1)
    assert again.certificate == ca.certificate
    with pytest.raises(ValueError, match="bad client name"):
        create_certs(ca.directory, brokers=0, clients=("../evil",))
