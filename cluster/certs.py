"""Throw-away TLS material for a test or development cluster (``kafkasim certs create``,
``kafkasim cluster up --tls``): a certificate authority, one certificate per broker and per
client, made with the ``cryptography`` library. Not for production: the CA's key sits next to
what it signed.

Layout of a directory (private keys and keystores 0600, certificates 0644)::

    ca.crt  ca.key                    the authority (ca.crt is every truststore)
    broker-N.crt broker-N.key         broker N: subject CN=broker-N,OU=kafkasim; SANs
    broker-N.keystore.pem             localhost, broker-N and broker-N.cluster (its compose
                                      host name and advertised internal name), 127.0.0.1
    <client>.crt <client>.key         a client: subject CN=<client>,OU=kafkasim, so its
    <client>.keystore.pem             principal is User:CN=<client>,OU=kafkasim

A ``*.keystore.pem`` is what ``ssl.keystore.location`` takes (``ssl.keystore.type=PEM``): the
private key (PKCS#8) and then the certificate chain. Keys are ECDSA P-256.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertificateAuthority",
    "Issued",
    "broker_dns_names",
    "create_certs",
    "load_or_create_ca",
]

ORGANIZATIONAL_UNIT = "kafkasim"
DEFAULT_VALID_DAYS = 365


def _write_private(path: Path, data: bytes) -> None:
    """Write a file that holds a secret: created 0600 (never world-readable, even briefly)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ORGANIZATIONAL_UNIT),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


@dataclass(frozen=True)
class Issued:
    """One issued certificate's files."""

    name: str
    certificate: Path  # <name>.crt
    key: Path  # <name>.key (0600)
    keystore: Path  # <name>.keystore.pem: key + chain (0600)

    @property
    def principal(self) -> str:
        """The principal Kafka's default principal builder gives this certificate."""
        return f"User:CN={self.name},OU={ORGANIZATIONAL_UNIT}"


@dataclass(frozen=True)
class CertificateAuthority:
    directory: Path
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @property
    def certificate_path(self) -> Path:
        return self.directory / "ca.crt"

    def issue(
        self,
        name: str,
        *,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        not_before: datetime.datetime | None = None,
        not_after: datetime.datetime | None = None,
        directory: Path | None = None,
    ) -> Issued:
        """Sign a certificate for ``name`` (subject CN=name,OU=kafkasim; ``dns``/``ips`` as
        subject alternative names) and write its files under ``directory`` (default: the
        CA's)."""
        where = directory or self.directory
        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before or now - datetime.timedelta(minutes=5))
            .not_valid_after(not_after or now + datetime.timedelta(days=DEFAULT_VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        alt_names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        chain = certificate.public_bytes(serialization.Encoding.PEM)
        issued = Issued(
            name, where / f"{name}.crt", where / f"{name}.key", where / f"{name}.keystore.pem"
        )
        issued.certificate.write_bytes(chain)
        _write_private(issued.key, _key_pem(key))
        _write_private(issued.keystore, _key_pem(key) + chain)
        return issued


def load_or_create_ca(directory: Path) -> CertificateAuthority:
    """The CA of ``directory`` (``ca.crt``/``ca.key``), made first if there is none."""
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "ca.crt", directory / "ca.key"
    if cert_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path} is not the EC key of a kafkasim CA")
        return CertificateAuthority(
            directory, key, x509.load_pem_x509_certificate(cert_path.read_bytes())
        )
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("kafkasim test CA")
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=DEFAULT_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, _key_pem(key))
    return CertificateAuthority(directory, key, certificate)


def broker_name(broker_id: int) -> str:
    """A broker's certificate name, also its host name in compose (broker-N)."""
    return f"broker-{broker_id}"


def broker_dns_names(broker_id: int) -> tuple[str, str, str]:
    """The DNS names in a broker's certificate: localhost, its compose host name broker-N and
    the name its compose internal listeners advertise, broker-N.cluster (what the other
    brokers verify when they connect to it)."""
    name = broker_name(broker_id)
    return "localhost", name, f"{name}.cluster"


def create_certs(
    directory: Path, *, brokers: int, clients: tuple[str, ...] = ()
) -> tuple[CertificateAuthority, dict[int, Issued], dict[str, Issued]]:
    """A CA (reused if ``directory`` has one), a certificate per broker 1..``brokers`` (SANs
    :func:`broker_dns_names` and 127.0.0.1) and one per client name."""
    for client in clients:
        if not client or "/" in client or client.startswith(".") or "," in client:
            raise ValueError(f"bad client name {client!r}: expected a plain name")
    ca = load_or_create_ca(directory)
    issued_brokers = {
        n: ca.issue(broker_name(n), dns=broker_dns_names(n), ips=("127.0.0.1",))
        for n in range(1, brokers + 1)
    }
    issued_clients = {c: ca.issue(c) for c in clients}
    return ca, issued_brokers, issued_clients
