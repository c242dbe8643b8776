"""SASL as Kafka configures it, pure: the mechanisms kafkasim speaks, SASL/PLAIN's message
(RFC 4616, Kafka's ``PlainSaslServer``), the one-entry JAAS text of a ``sasl.jaas.config``
value, and the SASL credentials of a client config.

A ``sasl.jaas.config`` value is Kafka's ``JaasConfig`` syntax: a login module class, a control
flag and ``key="value"`` options, ending with ``;``::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret" user_alice="a1";

A broker's PLAIN users are its ``user_<name>`` options (Kafka's ``PlainServerCallbackHandler``);
``username``/``password`` are what a client (or the broker itself, between brokers) logs in
with. Clients also take librdkafka's ``sasl.username``/``sasl.password``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kafkasim.common.errors import InvalidConfigError, KafkasimError

PLAIN: Final = "PLAIN"
SCRAM_SHA_256: Final = "SCRAM-SHA-256"
SCRAM_SHA_512: Final = "SCRAM-SHA-512"
SASL_MECHANISMS: Final = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)
"""The SASL mechanisms kafkasim speaks (Kafka's GSSAPI and OAUTHBEARER it does not)."""
SASL_PROTOCOLS: Final = ("SASL_PLAINTEXT", "SASL_SSL")
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
LOGIN_MODULES: Final = {
    PLAIN: PLAIN_LOGIN_MODULE,
    SCRAM_SHA_256: SCRAM_LOGIN_MODULE,
    SCRAM_SHA_512: SCRAM_LOGIN_MODULE,
}
PLAIN_USER_PREFIX: Final = "user_"
INVALID_PLAIN_CREDENTIALS: Final = "Authentication failed: Invalid username or password"


class SaslAuthenticationError(KafkasimError):
    """Credentials that do not verify, or a SASL message that is not the mechanism's; the
    message is what the client is told (Kafka's ``SaslAuthenticationException``)."""


@dataclass(frozen=True, slots=True)
class PlainMessage:
    authzid: str
    username: str
    password: str


def parse_plain(message: bytes) -> PlainMessage:
    """SASL/PLAIN's ``[authzid] NUL authcid NUL passwd``, checked as Kafka's
    ``PlainSaslServer`` does (SaslAuthenticationError with its wording)."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationError("Invalid SASL/PLAIN response: not UTF-8") from None
    tokens = text.split("\0")
    if len(tokens) != 3:
        raise SaslAuthenticationError(
            f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
        )
    authzid, username, password = tokens
    if not username:
        raise SaslAuthenticationError("Authentication failed: username not specified")
    if not password:
        raise SaslAuthenticationError("Authentication failed: password not specified")
    if authzid and authzid != username:
        raise SaslAuthenticationError(
            "Authentication failed: Client requested an authorization id that is different "
            "from username"
        )
    return PlainMessage(authzid, username, password)


def plain_message(username: str, password: str) -> bytes:
    """What a PLAIN client sends."""
    return f"\0{username}\0{password}".encode()


@dataclass(frozen=True, slots=True)
class JaasEntry:
    """One login module entry of a ``sasl.jaas.config`` value."""

    login_module: str
    flag: str
    options: Mapping[str, str]

    def plain_users(self) -> dict[str, str]:
        """The ``user_<name>="password"`` options: {name: password}."""
        return {
            key.removeprefix(PLAIN_USER_PREFIX): value
            for key, value in self.options.items()
            if key.startswith(PLAIN_USER_PREFIX) and len(key) > len(PLAIN_USER_PREFIX)
        }


_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>\w+)(?P<options>.*?);\s*", re.DOTALL)
_JAAS_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')
_FLAGS: Final = ("required", "requisite", "sufficient", "optional")


def parse_jaas_config(value: str, key: str = "sasl.jaas.config") -> JaasEntry:
    """A ``sasl.jaas.config`` value → its one entry; INVALID_CONFIG naming ``key`` (the
    options are never shown: they hold passwords)."""
    match = _JAAS.fullmatch(value)
    if match is None or match["flag"].lower() not in _FLAGS:
        raise InvalidConfigError(
            f"Invalid configuration {key}: expected '<LoginModule> required key=\"value\" …;'"
        )
    options: dict[str, str] = {}
    rest = match["options"]
    position = 0
    for option in _JAAS_OPTION.finditer(rest):
        if rest[position : option.start()].strip():
            break
        quoted, bare = option[2], option[3]
        options[option[1]] = quoted.replace('\\"', '"') if quoted is not None else bare
        position = option.end()
    if rest[position:].strip():
        raise InvalidConfigError(
            f'Invalid configuration {key}: the options must be key="value" pairs'
        )
    return JaasEntry(match["module"], match["flag"].lower(), options)


def jaas_config(mechanism: str, username: str, password: str, **users: str) -> str:
    """A ``sasl.jaas.config`` value logging in as ``username`` (and, for a broker's PLAIN,
    listing ``users``: {name: password})."""
    parts = [f'username="{_quote(username)}"', f'password="{_quote(password)}"']
    parts += [f'{PLAIN_USER_PREFIX}{name}="{_quote(pw)}"' for name, pw in users.items()]
    return f"{LOGIN_MODULES[mechanism]} required {' '.join(parts)};"


def _quote(text: str) -> str:
    return text.replace('"', '\\"')


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """What a client authenticates with."""

    mechanism: str
    username: str
    password: str


def client_sasl(config: Mapping[str, object]) -> SaslCredentials | None:
    """The SASL credentials of a client config: None unless ``security.protocol`` is
    SASL_PLAINTEXT or SASL_SSL; then ``sasl.mechanism`` (default GSSAPI, as Kafka's, which
    kafkasim refuses) with ``sasl.username``/``sasl.password`` or ``sasl.jaas.config``'s
    username and password. INVALID_CONFIG naming the key that is wrong or missing."""
    protocol = str(config.get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in SASL_PROTOCOLS:
        return None
    mechanism = str(config.get("sasl.mechanism") or "GSSAPI").upper()
    if mechanism not in SASL_MECHANISMS:
        raise InvalidConfigError(
            f"Invalid value {mechanism} for configuration sasl.mechanism: kafkasim speaks "
            f"{', '.join(SASL_MECHANISMS)}"
        )
    username, password = config.get("sasl.username"), config.get("sasl.password")
    jaas = config.get("sasl.jaas.config")
    if jaas and (username is None or password is None):
        options = parse_jaas_config(str(jaas)).options
        username = options.get("username") if username is None else username
        password = options.get("password") if password is None else password
    if not username or password is None:
        raise InvalidConfigError(
            f"security.protocol={protocol} needs credentials: set sasl.username and "
            "sasl.password (or sasl.jaas.config with username and password)"
        )
    return SaslCredentials(mechanism, str(username), str(password))
