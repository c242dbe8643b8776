"""The broker's listeners (Kafka's ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``, ``inter.broker.listener.name``) and kafkasim's own
``listener.wire.protocol.map`` and ``replica.fetch.listener.name``: their parsing, the rules
that bind them together, and each TLS listener's material (``listener.name.<l>.ssl.*`` over the
``ssl.*`` keys). The keys themselves are declared in ``node.config`` with every broker key;
its rules call :func:`check_listeners`, and ``BrokerConfig``'s views read the parsers here.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafkasim.common.config import Config
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.tls import SSL_KEYS, TLS_PROTOCOLS, TlsMaterial, load_tls
from kafkasim.node.sasl_config import is_listener_sasl_key

DEFAULT_LISTENER = "PLAINTEXT"
# The security protocols a listener may use.
SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_SSL_KEY_NAMES = frozenset(key.name for key in SSL_KEYS)
LISTENER_PREFIX = "listener.name."
# Kafka's default listener.security.protocol.map: each protocol is also a listener name; and
# KAFKA, the default name of the Kafka-protocol listener, is PLAINTEXT too.
_DEFAULT_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
WIRE_GRPC = "grpc"
WIRE_KAFKA = "kafka"
WIRE_REPLICATION = "replication"
_WIRES = (WIRE_GRPC, WIRE_KAFKA, WIRE_REPLICATION)
KAFKA_LISTENER = "KAFKA"


def wire_protocol_map(values: list[str] | None, listeners: Mapping[str, object]) -> dict[str, str]:
    """``listener.wire.protocol.map`` (``NAME:grpc|kafka|replication`` entries) → {listener:
    wire protocol} for every listener in ``listeners``: a listener the map does not name speaks
    Kafka's protocol when it is called KAFKA and gRPC otherwise. INVALID_CONFIG naming a bad
    entry."""
    named: dict[str, str] = {}
    for value in values or []:
        name, sep, wire = value.partition(":")
        wire = wire.strip().lower()
        if not sep or not name.strip() or wire not in _WIRES:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration listener.wire.protocol.map: "
                "expected NAME:grpc, NAME:kafka or NAME:replication"
            )
        named[name.strip().upper()] = wire
    for name in named:
        if name not in listeners:
            raise InvalidConfigError(
                f"listener.wire.protocol.map names {name}, which is not in listeners"
            )
    return {
        name: named.get(name, WIRE_KAFKA if name == KAFKA_LISTENER else WIRE_GRPC)
        for name in listeners
    }


def parse_listeners(values: list[str], key: str) -> dict[str, tuple[str, int]]:
    """``NAME://host:port`` entries → {name: (host, port)}, in order; INVALID_CONFIG naming
    the value on a malformed entry or a name or port used twice (as Kafka refuses them)."""
    out: dict[str, tuple[str, int]] = {}
    ports: set[int] = set()
    for value in values:
        name, host, port = parse_listener(value, key)
        if name in out:
            raise InvalidConfigError(f"Each listener must have a different name, {key}: {value}")
        if key == "listeners" and port != 0 and port in ports:
            raise InvalidConfigError(f"Each listener must have a different port, {key}: {value}")
        ports.add(port)
        out[name] = (host, port)
    return out


def security_protocol_map(values: list[str] | None) -> dict[str, str]:
    """``NAME:PROTOCOL`` entries → {name: protocol}; None gives Kafka's default map."""
    if not values:
        return {**{p: p for p in _DEFAULT_PROTOCOLS}, KAFKA_LISTENER: "PLAINTEXT"}
    out: dict[str, str] = {}
    for value in values:
        name, sep, protocol = value.partition(":")
        if not sep or not name or not protocol:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration listener.security.protocol.map: "
                "expected NAME:PROTOCOL"
            )
        out[name.strip().upper()] = protocol.strip().upper()
    return out


def parse_listener(listener: str, key: str = "listeners") -> tuple[str, str, int]:
    """``PLAINTEXT://host:port`` → (name, host, port); INVALID_CONFIG naming the value."""
    name, sep, rest = listener.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise InvalidConfigError(
            f"Invalid value {listener} for configuration {key}: expected NAME://host:port"
        )
    return name.upper(), host or "0.0.0.0", int(port)


def check_listeners(config: Config) -> None:
    """The listener rules of a broker config (Kafka's, and kafkasim's wire protocols):
    INVALID_CONFIG naming the key and the listener at fault."""
    listeners = parse_listeners(config["listeners"], "listeners")
    advertised = (
        parse_listeners(config["advertised.listeners"], "advertised.listeners")
        if config["advertised.listeners"]
        else listeners
    )
    protocols = security_protocol_map(config["listener.security.protocol.map"])
    for name in listeners:
        protocol = protocols.get(name)
        if protocol is None:
            raise InvalidConfigError(
                f"No security protocol defined for listener {name} "
                "in listener.security.protocol.map"
            )
        if protocol not in SUPPORTED_PROTOCOLS:
            raise InvalidConfigError(
                f"Listener {name} uses security protocol {protocol}: supported are "
                f"{', '.join(SUPPORTED_PROTOCOLS)}"
            )
    wire = wire_protocol_map(config["listener.wire.protocol.map"], listeners)
    for name in listeners:
        if wire[name] == WIRE_GRPC and protocols[name] == "SASL_PLAINTEXT":
            # gRPC carries SASL credentials (a password) in call metadata: over TLS only.
            raise InvalidConfigError(
                f"Listener {name} speaks gRPC, whose SASL credentials travel in call metadata: "
                "it must use SASL_SSL, not SASL_PLAINTEXT (a password is not sent in the clear)"
            )
    for name, (host, _port) in advertised.items():
        if name not in listeners:
            raise InvalidConfigError(
                f"advertised.listeners listener names must be equal to or a subset of the ones "
                f"defined in listeners: {name} is not in listeners"
            )
        if host == "0.0.0.0":
            raise InvalidConfigError(
                "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                "Use a routable IP address."
            )
    inter_broker = config["inter.broker.listener.name"] or DEFAULT_LISTENER
    if inter_broker not in advertised:
        raise InvalidConfigError(
            f"inter.broker.listener.name must be a listener name defined in "
            f"advertised.listeners: {inter_broker} is not ({', '.join(advertised)})"
        )
    if wire[inter_broker] != WIRE_GRPC:
        raise InvalidConfigError(
            f"inter.broker.listener.name {inter_broker} speaks {wire[inter_broker]}: brokers and "
            "the controller talk to each other over gRPC, so it must name a grpc listener"
        )
    for name in listeners:
        if wire[name] == WIRE_REPLICATION and protocols[name] not in ("PLAINTEXT", "SSL"):
            raise InvalidConfigError(
                f"Listener {name} is a replication listener, which carries no SASL "
                f"credentials: it must use PLAINTEXT or SSL, not {protocols[name]} (SSL with "
                "ssl.client.auth=required authenticates followers by their certificates)"
            )
    fetch_listener = (config["replica.fetch.listener.name"] or "").upper()
    if fetch_listener:
        if fetch_listener not in advertised:
            raise InvalidConfigError(
                "replica.fetch.listener.name must be a listener name defined in "
                f"advertised.listeners: {fetch_listener} is not ({', '.join(advertised)})"
            )
        if wire[fetch_listener] != WIRE_REPLICATION:
            raise InvalidConfigError(
                f"replica.fetch.listener.name {fetch_listener} speaks {wire[fetch_listener]}: "
                "it must name a listener mapped to replication in listener.wire.protocol.map"
            )


def listener_overrides(props: Mapping[str, object], config: Config) -> dict[str, dict[str, str]]:
    """The ``listener.name.<listener>.ssl.*`` keys of ``props``: {LISTENER: {ssl key: value}};
    INVALID_CONFIG naming a key that is not an ssl key or names no listener."""
    listeners = parse_listeners(config["listeners"], "listeners")
    out: dict[str, dict[str, str]] = {}
    for key, value in props.items():
        if not key.startswith(LISTENER_PREFIX):
            continue
        listener, _, rest = key.removeprefix(LISTENER_PREFIX).partition(".")
        if rest not in _SSL_KEY_NAMES and not is_listener_sasl_key(rest):
            raise InvalidConfigError(
                f"Unknown broker configuration key: {key} (a per-listener key is "
                "listener.name.<listener>.ssl.<key>, .sasl.enabled.mechanisms or "
                ".<mechanism>.sasl.jaas.config)"
            )
        if listener != listener.lower() or listener.upper() not in listeners:
            raise InvalidConfigError(
                f"{key} names listener {listener!r}, which is not in listeners (the listener "
                "name is written in lower case)"
            )
        out.setdefault(listener.upper(), {})[rest] = "" if value is None else str(value)
    return out


def listener_tls(
    config: Config, overrides: Mapping[str, Mapping[str, str]]
) -> dict[str, TlsMaterial]:
    """Each TLS listener's material: its ``listener.name.<l>.ssl.*`` over the ``ssl.*``
    keys, as Kafka reads them."""
    protocols = security_protocol_map(config["listener.security.protocol.map"])
    out: dict[str, TlsMaterial] = {}
    for name in parse_listeners(config["listeners"], "listeners"):
        if protocols.get(name) not in TLS_PROTOCOLS:
            continue
        own = overrides.get(name, {})
        values: dict[str, object] = {k.name: config[k.name] for k in SSL_KEYS}
        values.update(own)
        prefix = f"{LISTENER_PREFIX}{name.lower()}."

        def spelled(key: str, own: Mapping[str, str] = own, prefix: str = prefix) -> str:
            return prefix + key if key in own else key

        out[name] = load_tls(values, server=True, name=spelled)
    return out
