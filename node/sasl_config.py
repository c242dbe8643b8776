"""A broker's SASL configuration, as Kafka's: which listeners authenticate, with which
mechanisms, and the PLAIN users of each (its ``sasl.jaas.config``).

Keys (Kafka's names and defaults):

* ``sasl.enabled.mechanisms`` (default GSSAPI, which kafkasim does not speak: a SASL listener
  needs it set), overridable per listener as ``listener.name.<l>.sasl.enabled.mechanisms``;
* ``listener.name.<l>.<mechanism>.sasl.jaas.config``: the listener's JAAS entry for a
  mechanism (lower-case listener and mechanism, as Kafka spells them). PLAIN needs one with
  ``PlainLoginModule`` and its ``user_<name>="password"`` options; SCRAM's users live in
  ZooKeeper (``/config/users``), its entry (``ScramLoginModule``) is optional and only gives
  the broker's own login;
* ``sasl.mechanism.inter.broker.protocol`` (default GSSAPI): the mechanism brokers
  authenticate with when the inter-broker listener is SASL_SSL;
* ``sasl.server.max.receive.size`` (default 524288): the largest message a client may send
  before it is authenticated; a bigger one closes the connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kafkasim.common.config import Config, ConfigKey, ConfigType
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sasl import (
    LOGIN_MODULES,
    PLAIN,
    SASL_MECHANISMS,
    SASL_PROTOCOLS,
    JaasEntry,
    SaslCredentials,
    parse_jaas_config,
)

SASL_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "sasl.enabled.mechanisms",
        ConfigType.LIST,
        ["GSSAPI"],
        "The SASL mechanisms a SASL listener accepts: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
    ),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        ConfigType.STRING,
        "GSSAPI",
        "The mechanism brokers authenticate with on a SASL_SSL inter-broker listener.",
    ),
    ConfigKey(
        "sasl.server.max.receive.size",
        ConfigType.INT,
        524_288,
        "The largest message read from a client before it is authenticated.",
        low=1,
    ),
)
LISTENER_SASL_KEY = "sasl.enabled.mechanisms"
JAAS_SUFFIX = ".sasl.jaas.config"


def is_listener_sasl_key(rest: str) -> bool:
    """Whether ``rest`` (a ``listener.name.<l>.`` key without its prefix) is a SASL key:
    ``sasl.enabled.mechanisms`` or ``<mechanism>.sasl.jaas.config``."""
    return rest == LISTENER_SASL_KEY or rest.endswith(JAAS_SUFFIX)


@dataclass(frozen=True)
class ListenerSasl:
    """One SASL listener's settings: its mechanisms, JAAS entries and PLAIN users."""

    mechanisms: tuple[str, ...]
    jaas: Mapping[str, JaasEntry] = field(default_factory=dict)  # {mechanism: entry}

    @property
    def plain_users(self) -> dict[str, str]:
        entry = self.jaas.get(PLAIN)
        return entry.plain_users() if entry is not None else {}

    def login(self, mechanism: str) -> tuple[str, str] | None:
        """The username and password the broker itself logs in with for ``mechanism``."""
        entry = self.jaas.get(mechanism)
        if entry is None or "username" not in entry.options or "password" not in entry.options:
            return None
        return entry.options["username"], entry.options["password"]

    def credentials(self, mechanism: str) -> SaslCredentials | None:
        """The broker's own credentials for ``mechanism`` (as a client of this listener)."""
        login = self.login(mechanism)
        return None if login is None else SaslCredentials(mechanism, *login)


def inter_broker_credentials(
    config: Config, inter_broker: str, sasl: Mapping[str, ListenerSasl]
) -> SaslCredentials | None:
    """What the broker's own gRPC calls (replication, the controller) carry when the
    inter-broker listener is SASL_SSL (checked by :func:`check_inter_broker`); else None."""
    listener = sasl.get(inter_broker)
    if listener is None:
        return None
    return listener.credentials(str(config["sasl.mechanism.inter.broker.protocol"]).upper())


def listener_sasl(
    config: Config, protocols: Mapping[str, str], overrides: Mapping[str, Mapping[str, str]]
) -> dict[str, ListenerSasl]:
    """Each SASL listener's settings (``protocols``: {listener: security protocol};
    ``overrides``: the ``listener.name.<l>.*`` keys); INVALID_CONFIG naming a bad key."""
    out: dict[str, ListenerSasl] = {}
    for name, own in overrides.items():
        if protocols.get(name) not in SASL_PROTOCOLS and any(is_listener_sasl_key(k) for k in own):
            raise InvalidConfigError(
                f"listener.name.{name.lower()}.* sets SASL keys, but listener {name} uses "
                f"{protocols.get(name)}, not SASL_PLAINTEXT or SASL_SSL"
            )
    for name, protocol in protocols.items():
        if protocol not in SASL_PROTOCOLS:
            continue
        own = overrides.get(name, {})
        prefix = f"listener.name.{name.lower()}."
        if LISTENER_SASL_KEY in own:
            key = prefix + LISTENER_SASL_KEY
            mechanisms = [m.strip().upper() for m in own[LISTENER_SASL_KEY].split(",")]
        else:
            key = LISTENER_SASL_KEY
            mechanisms = [str(m).strip().upper() for m in config[LISTENER_SASL_KEY] or []]
        mechanisms = [m for m in mechanisms if m]
        unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
        if unsupported or not mechanisms:
            raise InvalidConfigError(
                f"Invalid value {','.join(mechanisms)} for configuration {key} (listener "
                f"{name} is {protocol}): kafkasim speaks {', '.join(SASL_MECHANISMS)}"
            )
        jaas: dict[str, JaasEntry] = {}
        for rest, value in own.items():
            if not rest.endswith(JAAS_SUFFIX):
                continue
            mechanism = rest.removesuffix(JAAS_SUFFIX)
            if mechanism.upper() not in mechanisms or mechanism != mechanism.lower():
                raise InvalidConfigError(
                    f"{prefix}{rest} names mechanism {mechanism!r}, which is not enabled on "
                    f"listener {name} ({', '.join(mechanisms)}; written in lower case)"
                )
            entry = parse_jaas_config(value, prefix + rest)
            expected = LOGIN_MODULES[mechanism.upper()]
            if entry.login_module != expected:
                raise InvalidConfigError(
                    f"Invalid configuration {prefix}{rest}: {mechanism.upper()} needs the "
                    f"login module {expected}"
                )
            jaas[mechanism.upper()] = entry
        if PLAIN in mechanisms and PLAIN not in jaas:
            raise InvalidConfigError(
                f"Listener {name} enables PLAIN: set {prefix}plain.sasl.jaas.config (a "
                'PlainLoginModule with user_<name>="password" entries)'
            )
        out[name] = ListenerSasl(tuple(mechanisms), jaas)
    return out


def check_inter_broker(
    config: Config,
    inter_broker: str,
    protocols: Mapping[str, str],
    sasl: Mapping[str, ListenerSasl],
) -> None:
    """A SASL inter-broker listener: its mechanism enabled there, with the broker's login."""
    if protocols.get(inter_broker) not in SASL_PROTOCOLS:
        return
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).upper()
    listener = sasl[inter_broker]
    if mechanism not in listener.mechanisms:
        raise InvalidConfigError(
            f"sasl.mechanism.inter.broker.protocol {mechanism} must be included in "
            f"sasl.enabled.mechanisms of the inter-broker listener {inter_broker} "
            f"({', '.join(listener.mechanisms)})"
        )
    if listener.login(mechanism) is None:
        raise InvalidConfigError(
            f"The inter-broker listener {inter_broker} uses SASL {mechanism}: set "
            f"listener.name.{inter_broker.lower()}.{mechanism.lower()}.sasl.jaas.config with "
            "the broker's username and password"
        )
