"""Who is calling: the authenticated principal of a request, as Kafka's ``RequestContext``
carries it (``KafkaPrincipal`` + client address + listener), for both front doors.

The transports set it, the request layer reads it:

* the Kafka-protocol listener (``node.kafka_server``) knows it per connection — ``User:ANONYMOUS``
  on a PLAINTEXT listener, the SASL user after authentication, the certificate's subject with
  mutual TLS — and puts it on each ``KafkaRequest``;
* a gRPC call's handler sees only its request message (the same handlers run over the
  simulation's transport), so the gRPC adapter (``node.rpc_grpc``) sets :data:`CALLER` for the
  task that runs the handler, from the call's peer, its TLS certificate and its metadata; the
  simulation's transport leaves the default.

:func:`current_caller` is what an authorizer asks. A principal is Kafka's ``Type:name`` text
(``User:alice``); Kafka's default for an unauthenticated connection is ``User:ANONYMOUS``.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Final, Protocol

from kafkasim.common.frozen import fast_frozen_init

ANONYMOUS: Final = "User:ANONYMOUS"


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Caller:
    """``principal``: Kafka's ``Type:name``; ``host``: the client's IP address, bare (no "/");
    ``listener``: the listener name the request came in on ("" when not known)."""

    principal: str = ANONYMOUS
    host: str = ""
    listener: str = ""


UNKNOWN_CALLER: Final = Caller()  # frozen: safe as the default of every task
CALLER: ContextVar[Caller] = ContextVar("kafkasim_caller", default=UNKNOWN_CALLER)


def current_caller() -> Caller:
    """The caller of the request this task serves (anonymous when no transport said)."""
    return CALLER.get()


# SASL credentials of a gRPC call (kafkasim's clients over a SASL_SSL gRPC listener): call
# metadata, checked per call by the gRPC adapter (node.rpc_grpc) against the listener's users.
SASL_MECHANISM_METADATA: Final = "x-kafkasim-sasl-mechanism"
SASL_USERNAME_METADATA: Final = "x-kafkasim-sasl-username"
SASL_PASSWORD_METADATA: Final = "x-kafkasim-sasl-password"


class PasswordVerifier(Protocol):
    """What a transport asks of a SASL listener's users (``node.sasl_auth``)."""

    mechanisms: tuple[str, ...]

    def password_matches(self, mechanism: str, username: str, password: str) -> bool: ...
