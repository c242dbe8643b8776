"""SCRAM (RFC 5802, with RFC 7677's SHA-256) as Kafka's SCRAM-SHA-256 and SCRAM-SHA-512 do it:
credentials, their stored text form, and both sides of the exchange. Pure: no I/O.

Kafka's ``ScramFormatter``: the salted password is PBKDF2-HMAC (``Hi``) of the UTF-8 password
(no SASLprep), the client key ``HMAC(salted, "Client Key")``, the stored key ``H(client key)``
and the server key ``HMAC(salted, "Server Key")`` — :func:`hashlib.pbkdf2_hmac` and
:mod:`hmac` from the standard library, never a primitive of our own. A credential is stored
(``/config/users/<user>``, ``ScramCredentialUtils``) as
``salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=<n>``.

The exchange (``ScramSaslServer``)::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<base64 client proof>
    server-final   v=<base64 server signature>

Only the ``n`` GS2 header is accepted (no channel binding), as Kafka. A wrong proof, an unknown
user and a nonce not this exchange's are all :class:`ScramError`; the message a client sees
for a wrong password or an unknown user is the same (nothing tells which).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = [
    "MECHANISMS",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramMechanism",
    "ScramServer",
    "credential_from_password",
    "decode_credential",
    "encode_credential",
    "mechanism",
    "password_matches",
]


class ScramError(Exception):
    """A SCRAM message that is malformed, or credentials that do not verify."""


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One of Kafka's SCRAM mechanisms: its SASL name, hash and iteration bounds."""

    name: str
    hash_name: str
    min_iterations: int = 4096
    max_iterations: int = 16384

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


SCRAM_SHA_256: Final = ScramMechanism("SCRAM-SHA-256", "sha256")
SCRAM_SHA_512: Final = ScramMechanism("SCRAM-SHA-512", "sha512")
MECHANISMS: Final = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


def mechanism(name: str) -> ScramMechanism:
    """The SCRAM mechanism called ``name``; ScramError naming the known ones otherwise."""
    found = MECHANISMS.get(name)
    if found is None:
        raise ScramError(f"unknown SCRAM mechanism {name}: expected {' or '.join(MECHANISMS)}")
    return found


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server keeps of a password (Kafka's ``ScramCredential``)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _random_string() -> str:
    """Kafka's ``ScramFormatter.secureRandomString``: 130 random bits in base 36."""
    value = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rest = divmod(value, 36)
        out = digits[rest] + out
        if value == 0:
            return out


def credential_from_password(
    scram: ScramMechanism, password: str, iterations: int, salt: bytes | None = None
) -> ScramCredential:
    """The credential of ``password`` (a fresh random salt unless given); ScramError for
    iterations outside the mechanism's bounds (Kafka's wording)."""
    if iterations < scram.min_iterations:
        raise ScramError(
            f"Iterations {iterations} is less than the minimum {scram.min_iterations} "
            f"required for {scram.name}"
        )
    if iterations > scram.max_iterations:
        raise ScramError(
            f"Iterations {iterations} is more than the maximum {scram.max_iterations} "
            f"allowed for {scram.name}"
        )
    salt = salt if salt is not None else _random_string().encode("ascii")
    salted = scram.salted_password(password, salt, iterations)
    return ScramCredential(
        salt=salt,
        stored_key=scram.hash(scram.hmac(salted, b"Client Key")),
        server_key=scram.hmac(salted, b"Server Key"),
        iterations=iterations,
    )


def password_matches(scram: ScramMechanism, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (constant-time compare)."""
    salted = scram.salted_password(password, credential.salt, credential.iterations)
    stored_key = scram.hash(scram.hmac(salted, b"Client Key"))
    return hmac.compare_digest(stored_key, credential.stored_key)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ScramError(f"{what} is not base64") from None


def encode_credential(credential: ScramCredential) -> str:
    """Kafka's stored form (``ScramCredentialUtils.credentialToString``)."""
    return (
        f"salt={_b64(credential.salt)},stored_key={_b64(credential.stored_key)},"
        f"server_key={_b64(credential.server_key)},iterations={credential.iterations}"
    )


def decode_credential(text: str) -> ScramCredential:
    """:func:`encode_credential`'s text back; ScramError naming what is missing or wrong."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise ScramError(f"invalid SCRAM credential {part!r}: expected key=value")
        fields[key] = value
    missing = [k for k in ("salt", "stored_key", "server_key", "iterations") if k not in fields]
    if missing:
        raise ScramError(f"invalid SCRAM credential: missing {', '.join(missing)}")
    if not fields["iterations"].isdigit():
        raise ScramError(f"invalid SCRAM credential: iterations {fields['iterations']!r}")
    return ScramCredential(
        salt=_unb64(fields["salt"], "salt"),
        stored_key=_unb64(fields["stored_key"], "stored_key"),
        server_key=_unb64(fields["server_key"], "server_key"),
        iterations=int(fields["iterations"]),
    )


# -- the exchange --------------------------------------------------------------------------------

_VALUE = r"[^,]*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_VALUE}))?,)(?P<bare>n=(?P<user>{_VALUE}),r=(?P<nonce>"
    rf"[\x21-\x2b\x2d-\x7e]+)(?P<extensions>(?:,{_VALUE})*))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<binding>{_VALUE}),r=(?P<nonce>{_VALUE})(?:,{_VALUE})*?)"
    rf",p=(?P<proof>{_VALUE})"
)
INVALID_CREDENTIALS: Final = "Authentication failed: Invalid user credentials"


def _sasl_name_decode(name: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ',' and ``=3D`` is '='; any other '=' is refused."""
    if re.search(r"=(?!2C|3D)", name):
        raise ScramError(f"Invalid SCRAM user name {name!r}")
    return name.replace("=2C", ",").replace("=3D", "=")


def _sasl_name_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """The server side of one exchange. ``lookup(user)``: the user's credential for this
    mechanism, None if it has none. :meth:`first` then :meth:`final`; :attr:`username` is the
    authenticated user once :meth:`final` returned."""

    def __init__(
        self, scram: ScramMechanism, lookup: CredentialLookup, server_nonce: str | None = None
    ) -> None:
        self.scram = scram
        self._lookup = lookup
        self._server_nonce = server_nonce or _random_string()
        self._state = "first"
        self._user = ""
        self._auth_prefix = ""
        self._nonce = ""
        self._gs2 = ""
        self._credential: ScramCredential | None = None
        self.username: str | None = None

    def first(self, message: bytes) -> bytes:
        """The client-first message → the server-first message."""
        if self._state != "first":
            raise ScramError("Unexpected SCRAM client-first message")
        self._state = "final"
        text = _text(message)
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise ScramError(f"Invalid SCRAM client first message {text!r}")
        user = _sasl_name_decode(match["user"])
        authzid = match["authzid"]
        if authzid and _sasl_name_decode(authzid) != user:
            raise ScramError(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        credential = self._lookup(user)
        if credential is None:
            raise ScramError(INVALID_CREDENTIALS)
        self._user, self._credential, self._gs2 = user, credential, match["gs2"]
        self._nonce = match["nonce"] + self._server_nonce
        server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._auth_prefix = f"{match['bare']},{server_first}"
        return server_first.encode("ascii")

    def final(self, message: bytes) -> bytes:
        """The client-final message → the server-final message (the proof verified)."""
        if self._state != "final" or self._credential is None:
            raise ScramError("Unexpected SCRAM client-final message")
        self._state = "done"
        text = _text(message)
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise ScramError(f"Invalid SCRAM client final message {text!r}")
        if match["nonce"] != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        if _unb64(match["binding"], "channel binding") != self._gs2.encode("utf-8"):
            raise ScramError("Invalid channel binding in the final client message.")
        auth_message = f"{self._auth_prefix},{match['without_proof']}".encode()
        proof = _unb64(match["proof"], "client proof")
        scram, credential = self.scram, self._credential
        signature = scram.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError(INVALID_CREDENTIALS)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(scram.hash(client_key), credential.stored_key):
            raise ScramError(INVALID_CREDENTIALS)
        self.username = self._user
        return f"v={_b64(scram.hmac(credential.server_key, auth_message))}".encode("ascii")


class ScramClient:
    """The client side of one exchange (kafkasim's tests and benchmarks; Kafka's clients
    bring their own)."""

    def __init__(
        self, scram: ScramMechanism, username: str, password: str, nonce: str | None = None
    ) -> None:
        self.scram = scram
        self._password = password
        self._nonce = nonce or _random_string()
        self._bare = f"n={_sasl_name_encode(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _text(server_first)
        fields = dict(part.partition("=")[::2] for part in text.split(","))
        nonce, salt, iterations = fields.get("r", ""), fields.get("s", ""), fields.get("i", "")
        if not nonce.startswith(self._nonce) or not iterations.isdigit():
            raise ScramError(f"Invalid SCRAM server first message {text!r}")
        salted = self.scram.salted_password(self._password, _unb64(salt, "salt"), int(iterations))
        client_key = self.scram.hmac(salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = self.scram.hmac(self.scram.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = self.scram.hmac(salted, b"Server Key")
        self._server_signature = self.scram.hmac(server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def check(self, server_final: bytes) -> None:
        """The server-final message proves the server knows the credential."""
        text = _text(server_final)
        if not text.startswith("v=") or not hmac.compare_digest(
            _unb64(text[2:], "server signature"), self._server_signature
        ):
            raise ScramError(f"Invalid SCRAM server final message {text!r}")


def _text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("a SCRAM message that is not UTF-8") from None
