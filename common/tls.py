"""TLS as Kafka configures it, for both front doors and the clients: the ``ssl.*`` keys in PEM
form (``ssl.keystore.type=PEM``, as Kafka's ``DefaultSslEngineFactory`` allows), checked and
loaded into :class:`TlsMaterial`; the ``ssl.SSLContext`` of the Kafka-protocol listener and
the PEM bytes gRPC takes are both made from it; and the principal of a client certificate as
Kafka's default principal builder makes it (``User:`` + the subject DN, RFC 2253).

What is read (Kafka's rules, each violation an INVALID_CONFIG naming the key):

* the keystore: ``ssl.keystore.location`` (one PEM file: the private key and the certificate
  chain) or ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (inline PEM); the key
  PKCS#8 (``PRIVATE KEY``, or ``ENCRYPTED PRIVATE KEY`` with ``ssl.key.password``);
  ``ssl.keystore.password`` is refused with PEM, as Kafka does;
* the truststore: ``ssl.truststore.location`` or ``ssl.truststore.certificates`` (PEM
  certificates); none: the system's trusted authorities;
* ``ssl.client.auth`` (servers), ``ssl.endpoint.identification.algorithm`` (clients: https,
  the default, checks the server's certificate names the host; empty turns it off),
  ``ssl.principal.mapping.rules`` (DEFAULT only).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from kafkasim.common.config import ConfigKey, ConfigType
from kafkasim.common.errors import InvalidConfigError, KafkaError
from kafkasim.common.security import ANONYMOUS

__all__ = [
    "CLIENT_AUTH_VALUES",
    "CLIENT_SECURITY_KEYS",
    "SSL_KEYS",
    "TLS_PROTOCOLS",
    "TlsMaterial",
    "client_tls",
    "load_tls",
    "principal_of_certificate",
]

TLS_PROTOCOLS: Final = ("SSL", "SASL_SSL")
"""The security protocols that speak TLS."""
SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_AUTH_VALUES: Final = ("required", "requested", "none")
PEM: Final = "PEM"

_S = ConfigType.STRING

SSL_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("ssl.keystore.type", _S, "JKS", "Keystore format; kafkasim reads PEM only."),
    ConfigKey(
        "ssl.keystore.location",
        _S,
        None,
        "A PEM file with the private key (PKCS#8) and the certificate chain.",
    ),
    ConfigKey("ssl.keystore.certificate.chain", _S, None, "The certificate chain, inline PEM."),
    ConfigKey("ssl.keystore.key", _S, None, "The private key (PKCS#8), inline PEM."),
    ConfigKey("ssl.keystore.password", _S, None, "Not allowed with PEM keystores (Kafka's rule)."),
    ConfigKey("ssl.key.password", _S, None, "The password of an encrypted private key."),
    ConfigKey("ssl.truststore.type", _S, "JKS", "Truststore format; kafkasim reads PEM only."),
    ConfigKey("ssl.truststore.location", _S, None, "A PEM file of trusted certificates."),
    ConfigKey("ssl.truststore.certificates", _S, None, "Trusted certificates, inline PEM."),
    ConfigKey("ssl.truststore.password", _S, None, "Not allowed with PEM truststores."),
    ConfigKey(
        "ssl.client.auth",
        _S,
        "none",
        "Servers: ask for client certificates: required, requested or none.",
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        _S,
        "https",
        "Clients: https checks the server certificate names the host; empty does not.",
    ),
    ConfigKey(
        "ssl.principal.mapping.rules",
        _S,
        "DEFAULT",
        "How a certificate subject becomes a principal (DEFAULT: User:<subject DN>).",
    ),
)

CLIENT_SECURITY_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "security.protocol",
        _S,
        "PLAINTEXT",
        "How to talk to brokers: PLAINTEXT, SSL or SASL_SSL (TLS, and SASL credentials).",
    ),
    *(k for k in SSL_KEYS if k.name not in ("ssl.client.auth", "ssl.principal.mapping.rules")),
    ConfigKey("sasl.mechanism", _S, "GSSAPI", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."),
    ConfigKey("sasl.username", _S, None, "The SASL user (librdkafka's key)."),
    ConfigKey("sasl.password", _S, None, "The SASL password (librdkafka's key)."),
    ConfigKey(
        "sasl.jaas.config",
        _S,
        None,
        "A PlainLoginModule or ScramLoginModule entry with username and password.",
    ),
)
"""The keys of Kafka's clients (producer, consumer, admin) about transport security."""


@dataclass(frozen=True)
class TlsMaterial:
    """Checked TLS settings with the PEM they name loaded (keys unencrypted, in memory only).

    ``trusted_pem`` None: the system's trusted authorities; ``key_pem``/``chain_pem`` None: no
    certificate of our own (a client without mTLS)."""

    trusted_pem: bytes | None
    chain_pem: bytes | None
    key_pem: bytes | None
    client_auth: str = "none"
    verify_hostname: bool = True

    def server_context(self) -> ssl.SSLContext:
        """The context of a TLS server socket (the Kafka-protocol listener)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load_own(context)
        if self.client_auth != "none":
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.client_auth == "required" else ssl.CERT_OPTIONAL
            )
            self._load_trusted(context)
        return context

    def client_context(self) -> ssl.SSLContext:
        """The context of a TLS client socket."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.verify_hostname
        self._load_trusted(context)
        if self.chain_pem is not None:
            self._load_own(context)
        return context

    def _load_trusted(self, context: ssl.SSLContext) -> None:
        if self.trusted_pem is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            context.load_verify_locations(cadata=self.trusted_pem.decode("ascii"))

    def _load_own(self, context: ssl.SSLContext) -> None:
        if self.chain_pem is None or self.key_pem is None:
            raise InvalidConfigError("a TLS server needs a keystore (ssl.keystore.location)")
        # The ssl module loads keys from files only: a private 0600 file, removed at once.
        fd, path = tempfile.mkstemp(prefix="kafkasim-key-", suffix=".pem")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(self.key_pem + b"\n" + self.chain_pem)
            context.load_cert_chain(path)
        finally:
            os.unlink(path)


def load_tls(
    values: Mapping[str, object],
    *,
    server: bool,
    name: Callable[[str], str] = lambda key: key,
) -> TlsMaterial:
    """Check the ``ssl.*`` ``values`` (unset keys absent or None) and load what they name;
    ``name(key)`` is how a key is spelled in errors (a broker's per-listener
    ``listener.name.<listener>.ssl.*`` override). A server must have a keystore."""

    def get(key: str) -> str | None:
        value = values.get(key)
        return None if value is None or value == "" else str(value)

    def invalid(key: str, why: str) -> KafkaError:
        if key in _INLINE_KEYS:  # PEM text or a secret: named, never shown
            return InvalidConfigError(f"Invalid configuration {name(key)}: {why}")
        return InvalidConfigError(f"Invalid value {get(key)} for configuration {name(key)}: {why}")

    client_auth = (get("ssl.client.auth") or "none").lower()
    if client_auth not in CLIENT_AUTH_VALUES:
        raise invalid("ssl.client.auth", "expected required, requested or none")
    rules = get("ssl.principal.mapping.rules") or "DEFAULT"
    if rules != "DEFAULT":
        raise invalid("ssl.principal.mapping.rules", "only DEFAULT is supported")
    algorithm = str(values.get("ssl.endpoint.identification.algorithm", "https") or "").lower()
    if algorithm not in ("https", ""):
        raise invalid("ssl.endpoint.identification.algorithm", "expected https or empty")
    key_pem, chain_pem = _keystore(get, invalid, name)
    if server and chain_pem is None:
        raise InvalidConfigError(
            f"A TLS listener needs a keystore: set {name('ssl.keystore.location')} (or "
            f"{name('ssl.keystore.certificate.chain')} and {name('ssl.keystore.key')})"
        )
    return TlsMaterial(
        trusted_pem=_truststore(get, invalid, name),
        chain_pem=chain_pem,
        key_pem=key_pem,
        client_auth=client_auth,
        verify_hostname=algorithm == "https",
    )


_INLINE_KEYS: Final = frozenset(
    (
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.certificates",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
    )
)
_Get = Callable[[str], "str | None"]
_Invalid = Callable[[str, str], KafkaError]


def _read(get: _Get, invalid: _Invalid, key: str) -> str:
    path = get(key)
    assert path is not None
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise invalid(key, f"cannot read it: {getattr(e, 'strerror', None) or e}") from None


def _check_pem_type(get: _Get, invalid: _Invalid, key: str) -> None:
    if (get(key) or "JKS").upper() != PEM:
        raise invalid(key, "kafkasim reads PEM keystores and truststores only: set it to PEM")


def _keystore(
    get: _Get, invalid: _Invalid, name: Callable[[str], str]
) -> tuple[bytes | None, bytes | None]:
    location = get("ssl.keystore.location")
    chain = get("ssl.keystore.certificate.chain")
    key = get("ssl.keystore.key")
    if location is None and chain is None and key is None:
        return None, None
    _check_pem_type(get, invalid, "ssl.keystore.type")
    if get("ssl.keystore.password") is not None:
        raise InvalidConfigError(
            f"{name('ssl.keystore.password')} cannot be specified with PEM format, only "
            f"{name('ssl.key.password')} may be specified"
        )
    if location is not None:
        if chain is not None or key is not None:
            raise InvalidConfigError(
                f"Both {name('ssl.keystore.location')} and "
                f"{name('ssl.keystore.key')}/{name('ssl.keystore.certificate.chain')} are "
                "specified: give one"
            )
        text = _read(get, invalid, "ssl.keystore.location")
        return _key_and_chain(
            text, text, get=get, invalid=invalid, key_name="ssl.keystore.location"
        )
    chain_name = "ssl.keystore.certificate.chain"
    if key is None:
        raise InvalidConfigError(
            f"{name('ssl.keystore.certificate.chain')} is specified, but "
            f"{name('ssl.keystore.key')} is not"
        )
    if chain is None:
        raise InvalidConfigError(
            f"{name('ssl.keystore.key')} is specified, but "
            f"{name('ssl.keystore.certificate.chain')} is not"
        )
    return _key_and_chain(
        key, chain, get=get, invalid=invalid, key_name="ssl.keystore.key", chain_name=chain_name
    )


def _key_and_chain(
    key_text: str,
    chain_text: str,
    *,
    get: _Get,
    invalid: _Invalid,
    key_name: str,
    chain_name: str = "",
) -> tuple[bytes, bytes]:
    """The unencrypted PKCS#8 key of ``key_text`` and the certificates of ``chain_text``."""
    blocks = _pem_blocks(key_text)
    keys = [b for kind, b in blocks if kind in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY")]
    if len(keys) != 1:
        raise invalid(key_name, f"expected one PKCS#8 private key in PEM, found {len(keys)}")
    password = get("ssl.key.password")
    try:
        private_key = serialization.load_pem_private_key(
            keys[0].encode("ascii"), None if password is None else password.encode()
        )
    except (ValueError, TypeError) as e:
        why = f"the private key cannot be read: {e}"
        if password is None and "ENCRYPTED" in keys[0]:
            why = "the private key is encrypted and ssl.key.password is not set"
        raise invalid(key_name, why) from None
    key_pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, _certificates(chain_text, invalid, chain_name or key_name)


def _truststore(get: _Get, invalid: _Invalid, name: Callable[[str], str]) -> bytes | None:
    location = get("ssl.truststore.location")
    inline = get("ssl.truststore.certificates")
    if location is None and inline is None:
        return None
    _check_pem_type(get, invalid, "ssl.truststore.type")
    if get("ssl.truststore.password") is not None:
        raise InvalidConfigError(
            f"{name('ssl.truststore.password')} cannot be specified for PEM format"
        )
    if location is not None and inline is not None:
        raise InvalidConfigError(
            f"Both {name('ssl.truststore.location')} and "
            f"{name('ssl.truststore.certificates')} are specified: give one"
        )
    key = "ssl.truststore.location" if location is not None else "ssl.truststore.certificates"
    text = _read(get, invalid, key) if location is not None else inline or ""
    return _certificates(text, invalid, key)


def _certificates(text: str, invalid: _Invalid, key: str) -> bytes:
    """The PEM certificates of ``text``, checked to parse; at least one."""
    certificates = "".join(b for kind, b in _pem_blocks(text) if kind == "CERTIFICATE")
    if not certificates:
        raise invalid(key, "at least one certificate expected, but none found")
    try:
        x509.load_pem_x509_certificates(certificates.encode("ascii"))
    except ValueError as e:
        raise invalid(key, f"a certificate cannot be read: {e}") from None
    return certificates.encode("ascii")


def _pem_blocks(text: str) -> list[tuple[str, str]]:
    """The ``-----BEGIN X-----`` … ``-----END X-----`` blocks of ``text``: (X, block)."""
    out: list[tuple[str, str]] = []
    rest = text
    while True:
        start = rest.find("-----BEGIN ")
        if start < 0:
            return out
        kind_end = rest.find("-----", start + 11)
        if kind_end < 0:
            return out
        kind = rest[start + 11 : kind_end]
        marker = f"-----END {kind}-----"
        end = rest.find(marker, kind_end)
        if end < 0:
            return out
        out.append((kind, rest[start : end + len(marker)] + "\n"))
        rest = rest[end + len(marker) :]


def client_tls(config: Mapping[str, object]) -> TlsMaterial | None:
    """The TLS of a client config (Kafka's client keys: ``security.protocol`` and the
    ``ssl.*`` keys; other keys ignored): None for PLAINTEXT. INVALID_CONFIG naming the key."""
    protocol = str(config.get("security.protocol") or "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol not in TLS_PROTOCOLS:
        raise InvalidConfigError(
            f"Invalid value {protocol} for configuration security.protocol: kafkasim's clients "
            "speak PLAINTEXT, SSL or SASL_SSL (gRPC carries SASL credentials in call metadata, "
            "so over TLS only)"
        )
    return load_tls({k: v for k, v in config.items() if k.startswith("ssl.")}, server=False)


@functools.lru_cache(maxsize=1024)
def principal_of_certificate(der_or_pem: bytes) -> str:
    """Kafka's default principal of a client certificate (``ssl.principal.mapping.rules=
    DEFAULT``): ``User:`` + the subject's distinguished name in RFC 2253 form, most specific
    attribute first (``User:CN=client-1,OU=test``). Cached: one parse per certificate."""
    if der_or_pem.lstrip().startswith(b"-----BEGIN"):
        certificate = x509.load_pem_x509_certificate(der_or_pem)
    else:
        certificate = x509.load_der_x509_certificate(der_or_pem)
    return "User:" + certificate.subject.rfc4514_string()


# How long a client has to finish its TLS handshake before the connection is closed.
TLS_HANDSHAKE_TIMEOUT_S = 10.0


async def server_handshake(
    writer: asyncio.StreamWriter,
    context: ssl.SSLContext,
    *,
    where: str,
    what: str,
    log: logging.Logger,
) -> str | None:
    """The server's TLS handshake on an accepted connection (``where``: the peer; ``what``:
    the listener, named in ``log``'s line when it fails): the principal of the client's
    certificate (``User:<subject DN>``, Kafka's default principal builder),
    ``User:ANONYMOUS`` without one, None (logged, as Kafka's "Failed authentication") if it
    failed."""
    try:
        await writer.start_tls(context, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
    except (ssl.SSLError, ConnectionError, TimeoutError, OSError) as e:
        reason = getattr(e, "reason", None) or str(e) or type(e).__name__
        detail = getattr(e, "verify_message", None)  # why a certificate was refused
        if detail:
            reason = f"{reason}: {detail}"
        log.info(
            "%s: Failed authentication with %s (SSL handshake failed: %s)", what, where, reason
        )
        return None
    ssl_object = writer.get_extra_info("ssl_object")
    try:
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    except ValueError as e:
        # The session broke right after the handshake (a bad record read with the client's
        # Finished): "handshake not done yet".
        log.info("%s: Failed authentication with %s (SSL session broken: %s)", what, where, e)
        return None
    return principal_of_certificate(der) if der else ANONYMOUS
