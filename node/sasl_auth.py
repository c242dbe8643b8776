"""The server side of SASL for one listener, whatever carries it: a mechanism's exchange for
the Kafka-protocol listener (``node.kafka_sasl``) and a username/password check for gRPC calls
(``node.rpc_grpc``), against the same users — the listener's PLAIN ``user_<name>`` entries
and the broker's SCRAM credentials from ZooKeeper (``node.scram_cache``).

A password check against a SCRAM credential costs a PBKDF2 of the credential's iterations;
the outcome of a successful check is remembered (keyed by a SHA-256 of user, mechanism and
password, and the credential it verified against, so a changed credential is checked again),
so that a gRPC client sending the same credentials on each call pays it once.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from typing import Final, Protocol

from kafkasim.common.sasl import (
    INVALID_PLAIN_CREDENTIALS,
    PLAIN,
    SaslAuthenticationError,
    parse_plain,
)
from kafkasim.common.scram import MECHANISMS, ScramCredential, ScramError, ScramServer
from kafkasim.common.scram import password_matches as scram_password_matches
from kafkasim.node.sasl_config import ListenerSasl
from kafkasim.node.scram_cache import ScramCredentialCache

_VERIFIED_MAX: Final = 1024


class SaslServer(Protocol):
    """One exchange: :meth:`evaluate` each client token into the server's answer;
    :attr:`username` is set once it is complete. Raises SaslAuthenticationError (its message
    is for the client) or ScramError (logged; the client hears a generic refusal)."""

    username: str | None

    def evaluate(self, token: bytes) -> bytes: ...


class _PlainServer:
    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.username is not None:
            raise SaslAuthenticationError("Unexpected SASL/PLAIN message after authentication")
        message = parse_plain(token)
        if not _plain_matches(self._users, message.username, message.password):
            raise SaslAuthenticationError(INVALID_PLAIN_CREDENTIALS)
        self.username = message.username
        return b""


def _plain_matches(users: dict[str, str], username: str, password: str) -> bool:
    expected = users.get(username)
    # Compared in constant time, and compared even for an unknown user.
    matches = hmac.compare_digest((expected or "").encode(), password.encode())
    return expected is not None and matches


class _ScramExchange:
    def __init__(self, server: ScramServer) -> None:
        self._server = server
        self._first = True
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self._first:
            self._first = False
            return self._server.first(token)
        answer = self._server.final(token)
        self.username = self._server.username
        return answer


class ListenerAuthenticator:
    """The SASL users of one listener: ``settings`` (its mechanisms and PLAIN users) and the
    broker's SCRAM ``credentials``."""

    def __init__(self, settings: ListenerSasl, credentials: ScramCredentialCache) -> None:
        self.settings = settings
        self.mechanisms = settings.mechanisms
        self._credentials = credentials
        self._plain_users = settings.plain_users
        self._verified: OrderedDict[bytes, ScramCredential] = OrderedDict()

    def server(self, mechanism: str) -> SaslServer:
        """A new exchange of ``mechanism`` (enabled on this listener)."""
        if mechanism == PLAIN:
            return _PlainServer(self._plain_users)
        scram = MECHANISMS[mechanism]
        return _ScramExchange(
            ScramServer(scram, lambda user: self._credentials.get(user, mechanism))
        )

    def password_matches(self, mechanism: str, username: str, password: str) -> bool:
        """Whether ``password`` is ``username``'s for ``mechanism`` on this listener."""
        if mechanism not in self.mechanisms:
            return False
        if mechanism == PLAIN:
            return _plain_matches(self._plain_users, username, password)
        credential = self._credentials.get(username, mechanism)
        if credential is None:
            return False
        key = hashlib.sha256(
            b"\0".join(s.encode() for s in (mechanism, username, password))
        ).digest()
        if self._verified.get(key) is credential:
            self._verified.move_to_end(key)
            return True
        try:
            ok = scram_password_matches(MECHANISMS[mechanism], credential, password)
        except ScramError:
            return False
        if ok:
            self._verified[key] = credential
            if len(self._verified) > _VERIFIED_MAX:
                self._verified.popitem(last=False)
        return ok
