"""Broker configuration (``server.properties``), with Kafka's key names and defaults.

One declaration per key; the storage keys (``log.dirs``, ``log.segment.bytes`` …) come from
``storage.config.BROKER_LOG_KEYS``. Unknown keys are an INVALID_CONFIG error naming the key.

(Every broker key is declared here beside the cross-key rules that read it — ZooKeeper
security, the authorizer, broker ids — so that a key and its checks cannot drift apart. The
listener rules, the largest of them, are ``node.listener_config``'s: this module's rules call
them. TLS and SASL keys are ``common.tls``'s and ``node.sasl_config``'s.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafkasim.common.config import Config, ConfigDef, ConfigKey, ConfigType
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sasl import SaslCredentials
from kafkasim.common.tls import SSL_KEYS, TlsMaterial
from kafkasim.node.acl import InvalidAclError, parse_super_users
from kafkasim.node.listener_config import (
    DEFAULT_LISTENER,
    LISTENER_PREFIX,
    check_listeners,
    listener_overrides,
    listener_tls,
    parse_listeners,
    security_protocol_map,
    wire_protocol_map,
)
from kafkasim.node.sasl_config import (
    SASL_KEYS,
    ListenerSasl,
    check_inter_broker,
    inter_broker_credentials,
    listener_sasl,
)
from kafkasim.storage.config import BROKER_LOG_KEYS, LogConfig, topic_defaults_from_broker

I, L, B, S, LST = (  # noqa: E741 - one-letter type names keep the tables readable
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.LIST,
)

BROKER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("broker.id", I, -1, "This broker's id; -1 takes one from ZooKeeper.", low=-1),
    ConfigKey("broker.id.generation.enable", B, True, "Allow a generated broker id."),
    ConfigKey("reserved.broker.max.id", I, 1000, "Generated ids start above this.", low=0),
    ConfigKey("broker.rack", S, None, "Rack of this broker (reported in metadata)."),
    ConfigKey("listeners", LST, ["PLAINTEXT://127.0.0.1:9092"], "Where to listen."),
    ConfigKey("advertised.listeners", LST, None, "Where others reach us (default: listeners)."),
    ConfigKey(
        "listener.security.protocol.map",
        LST,
        None,
        "Listener name → security protocol (default: each listener named after one).",
    ),
    ConfigKey(
        "listener.wire.protocol.map",
        LST,
        None,
        "Listener name → wire protocol, grpc, kafka or replication (kafkasim's own key; "
        "default: a listener named KAFKA speaks Kafka's binary protocol, every other one "
        "gRPC). A replication listener serves followers' fetches only, as size-framed "
        "messages over TCP or TLS.",
    ),
    ConfigKey(
        "replica.fetch.listener.name",
        S,
        None,
        "The replication listener followers fetch from (kafkasim's own key; default: none, "
        "followers fetch over gRPC on the inter-broker listener). Every broker needs it.",
    ),
    ConfigKey(
        "inter.broker.listener.name",
        S,
        None,
        "The listener brokers and the controller use among themselves (default: PLAINTEXT).",
    ),
    ConfigKey(
        "socket.request.max.bytes",
        I,
        104_857_600,
        "The largest request a Kafka-protocol listener reads; a bigger frame closes the "
        "connection.",
        low=1,
    ),
    ConfigKey(
        "connections.max.idle.ms",
        I,
        600_000,
        "A Kafka-protocol connection idle this long is closed.",
        low=1,
    ),
    ConfigKey("zookeeper.connect", S, None, "ZooKeeper connect string host:port[,…][/chroot]."),
    # -- ZooKeeper security and the fetch cap (issue 15, points 4 and 5) --
    ConfigKey(
        "zookeeper.set.acl",
        B,
        False,
        "Create every znode with ACLs: the brokers' ZooKeeper identity may do everything, the "
        "world may only read, and nothing at all under /config/users, /config/brokers and "
        "/delegation_token/tokens. Needs ZooKeeper credentials (zookeeper.jaas.config.file).",
    ),
    ConfigKey(
        "zookeeper.sasl.client",
        B,
        True,
        "Authenticate to ZooKeeper with the JAAS file's Client section (Kafka's JVM property "
        "of this name); false connects anonymously.",
    ),
    ConfigKey(
        "zookeeper.jaas.config.file",
        S,
        None,
        "kafkasim's own key, in place of Kafka's -Djava.security.auth.login.config: the JAAS "
        "file whose Client section (username, password) the broker authenticates to ZooKeeper "
        "with, as ZooKeeper's digest scheme.",
    ),
    ConfigKey(
        "fetch.max.bytes",
        I,
        57_671_680,
        "The most a consumer fetch answer holds, whatever max_bytes the request asks "
        "(at least one batch is always returned).",
        low=0,
    ),
    ConfigKey("zookeeper.session.timeout.ms", I, 18_000, "ZooKeeper session timeout.", low=1),
    ConfigKey("zookeeper.connection.timeout.ms", I, None, "Connect timeout (default: session)."),
    ConfigKey(
        "default.replication.factor", I, 1, "Replication factor of auto-created topics.", low=1
    ),
    ConfigKey("num.partitions", I, 1, "Partitions of auto-created topics.", low=1),
    ConfigKey("auto.create.topics.enable", B, True, "Create topics on metadata requests."),
    ConfigKey("delete.topic.enable", B, True, "Allow topic deletion."),
    ConfigKey(
        "replica.lag.time.max.ms",
        L,
        30_000,
        "A follower not caught up for this long leaves the ISR.",
        low=1,
    ),
    ConfigKey("replica.fetch.wait.max.ms", I, 500, "Follower fetch long-poll wait.", low=0),
    ConfigKey("replica.fetch.min.bytes", I, 1, "Follower fetch min bytes.", low=1),
    ConfigKey(
        "replica.fetch.max.bytes", I, 1024 * 1024, "Follower fetch bytes per partition.", low=0
    ),
    ConfigKey(
        "replica.fetch.response.max.bytes",
        I,
        10 * 1024 * 1024,
        "Follower fetch bytes per response.",
        low=0,
    ),
    ConfigKey("replica.fetch.backoff.ms", I, 1000, "Backoff after a fetch error.", low=0),
    ConfigKey(
        "replica.high.watermark.checkpoint.interval.ms",
        L,
        5000,
        "How often high watermarks are checkpointed.",
        low=1,
    ),
    ConfigKey("replica.socket.timeout.ms", I, 30_000, "Follower request timeout.", low=1),
    ConfigKey("request.timeout.ms", I, 30_000, "Broker request timeout.", low=1),
    ConfigKey("controlled.shutdown.enable", B, True, "Move leadership away before stopping."),
    ConfigKey("controlled.shutdown.max.retries", I, 3, "Controlled shutdown attempts.", low=0),
    ConfigKey("controlled.shutdown.retry.backoff.ms", L, 5000, "Backoff between attempts.", low=0),
    ConfigKey("controller.socket.timeout.ms", I, 30_000, "Controller request timeout.", low=1),
    ConfigKey("auto.leader.rebalance.enable", B, True, "Move leaders back to preferred replicas."),
    ConfigKey("leader.imbalance.check.interval.seconds", L, 300, "Rebalance check period.", low=1),
    ConfigKey(
        "leader.imbalance.per.broker.percentage", I, 10, "Imbalance that triggers it.", low=0
    ),
    ConfigKey("offsets.topic.num.partitions", I, 50, "Partitions of __consumer_offsets.", low=1),
    ConfigKey("offsets.topic.replication.factor", I, 3, "RF of __consumer_offsets.", low=1),
    ConfigKey(
        "offsets.topic.segment.bytes", I, 100 * 1024 * 1024, "__consumer_offsets segments.", low=1
    ),
    ConfigKey(
        "offsets.commit.timeout.ms", I, 5000, "Offset commits wait this long for acks.", low=1
    ),
    ConfigKey("offset.metadata.max.bytes", I, 4096, "Largest commit metadata string.", low=0),
    ConfigKey("group.min.session.timeout.ms", I, 6000, "Shortest member session allowed.", low=0),
    ConfigKey(
        "group.max.session.timeout.ms", I, 1_800_000, "Longest member session allowed.", low=0
    ),
    ConfigKey(
        "group.initial.rebalance.delay.ms",
        I,
        3000,
        "A new group's first rebalance waits this long for more members.",
        low=0,
    ),
    # The transaction coordinator (Kafka's TransactionConfig; defaults are Kafka 3.x's).
    ConfigKey(
        "transaction.state.log.num.partitions",
        I,
        50,
        "Partitions of __transaction_state, fixed once the topic exists: a transactional id's "
        "coordinator leads partition abs(hash(id)) % this.",
        low=1,
    ),
    ConfigKey(
        "transaction.state.log.replication.factor",
        I,
        3,
        "RF of __transaction_state; its creation fails until this many brokers are alive.",
        low=1,
    ),
    ConfigKey(
        "transaction.state.log.min.isr",
        I,
        2,
        "min.insync.replicas of __transaction_state (its appends use acks=all).",
        low=1,
    ),
    ConfigKey(
        "transaction.state.log.segment.bytes",
        I,
        100 * 1024 * 1024,
        "__transaction_state segments; small to keep compaction and loading fast.",
        low=1,
    ),
    ConfigKey(
        "transaction.state.log.load.buffer.size",
        I,
        5 * 1024 * 1024,
        "Bytes read at a time while a new coordinator loads a __transaction_state partition.",
        low=1,
    ),
    ConfigKey(
        "transaction.max.timeout.ms",
        I,
        900_000,
        "Longest transaction.timeout.ms a producer may ask for; InitProducerId with a longer "
        "one is refused with INVALID_TRANSACTION_TIMEOUT.",
        low=1,
    ),
    ConfigKey(
        "transactional.id.expiration.ms",
        I,
        604_800_000,
        "A transactional id without a transaction and without any update for this long is "
        "expired: its __transaction_state entry is deleted by a tombstone.",
        low=1,
    ),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        I,
        10_000,
        "How often the coordinator aborts transactions open longer than their timeout.",
        low=1,
    ),
    ConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        I,
        3_600_000,
        "How often the coordinator expires transactional ids (transactional.id.expiration.ms).",
        low=1,
    ),
    ConfigKey("metrics.port", I, -1, "Prometheus metrics port (-1: none).", low=-1),
    ConfigKey(
        "authorizer.class.name",
        S,
        "",
        "The authorizer: empty for none, or Kafka's ACL authorizer "
        "(kafka.security.authorizer.AclAuthorizer; kafka.security.auth.SimpleAclAuthorizer is "
        "its older name). ACLs live in ZooKeeper under /kafka-acl.",
    ),
    ConfigKey(
        "super.users",
        S,
        None,
        "Principals allowed everything whatever the ACLs, separated by semicolons "
        "(User:admin;User:ops).",
    ),
    ConfigKey(
        "allow.everyone.if.no.acl.found",
        B,
        False,
        "With the ACL authorizer, allow a resource that has no ACL at all to everyone.",
    ),
)

# The class names that select Kafka's ACL authorizer (authorizer.class.name).
ACL_AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
)


def _check_broker_rules(config: Config) -> None:
    if config["broker.id"] < 0 and not config["broker.id.generation.enable"]:
        raise InvalidConfigError("broker.id must be set when broker.id.generation.enable is false")
    reserved = config["reserved.broker.max.id"]
    if config["broker.id.generation.enable"] and config["broker.id"] > reserved:
        # Kafka's rule: generated ids start above reserved.broker.max.id, configured ones stay
        # at or below it, so that the two never collide.
        raise InvalidConfigError(
            "broker.id must be greater than or equal to -1 and not greater than "
            f"reserved.broker.max.id ({reserved}), got {config['broker.id']}"
        )
    if config["zookeeper.connect"] in (None, ""):
        raise InvalidConfigError("Missing required configuration zookeeper.connect")
    if config["zookeeper.set.acl"] and not (
        config["zookeeper.sasl.client"] and config["zookeeper.jaas.config.file"]
    ):
        raise InvalidConfigError(
            "zookeeper.set.acl is true, but no ZooKeeper credentials are configured: set "
            "zookeeper.jaas.config.file to a JAAS file with a Client section (and leave "
            "zookeeper.sasl.client true)"
        )
    authorizer = config["authorizer.class.name"]
    if authorizer and authorizer not in ACL_AUTHORIZER_CLASSES:
        raise InvalidConfigError(
            f"Invalid value {authorizer} for configuration authorizer.class.name: "
            f"the authorizers are {' and '.join(ACL_AUTHORIZER_CLASSES)} (or empty for none)"
        )
    try:
        parse_super_users(config["super.users"])
    except InvalidAclError as e:
        raise InvalidConfigError(
            f"Invalid value {config['super.users']} for configuration super.users: {e}"
        ) from None
    check_listeners(config)


BROKER_CONFIG_DEF = ConfigDef(
    [*BROKER_KEYS, *SSL_KEYS, *SASL_KEYS, *(key for key, _ in BROKER_LOG_KEYS)],
    rules=[_check_broker_rules],
    kind="broker configuration",
)


@dataclass
class DynamicLayer:
    """The dynamic broker configs in force, raw strings: ``cluster_default``
    (``/config/brokers/<default>``) under ``own`` (``/config/brokers/<id>``); and the config
    they make with ``server.properties`` (None: none in force)."""

    cluster_default: dict[str, str] = dataclasses.field(default_factory=dict)
    own: dict[str, str] = dataclasses.field(default_factory=dict)
    effective: Config | None = None

    @property
    def raw(self) -> dict[str, str]:
        return {**self.cluster_default, **self.own}


@dataclass(frozen=True)
class BrokerConfig:
    """A parsed broker config and the views the broker needs. ``dynamic`` is shared by every
    view of this broker's config (:meth:`with_broker_id` keeps it): the topic defaults
    (:meth:`log_config`) follow the dynamic broker configs as they change."""

    config: Config
    dynamic: DynamicLayer = dataclasses.field(default_factory=DynamicLayer, compare=False)
    # Per-listener ``listener.name.<listener>.ssl.*`` keys: {LISTENER: {ssl.key: value}}.
    listener_overrides: Mapping[str, Mapping[str, str]] = dataclasses.field(
        default_factory=dict, compare=False
    )
    # The loaded TLS material of each TLS listener (checked at parse).
    tls: Mapping[str, TlsMaterial] = dataclasses.field(default_factory=dict, compare=False)
    # The SASL settings of each SASL listener (node.sasl_config).
    sasl: Mapping[str, ListenerSasl] = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> BrokerConfig:
        """Parse ``server.properties``; the TLS listeners' keystores and truststores are read
        and checked too (INVALID_CONFIG naming the key)."""
        plain = {k: v for k, v in props.items() if not k.startswith(LISTENER_PREFIX)}
        config = BROKER_CONFIG_DEF.parse(plain)
        overrides = listener_overrides(props, config)
        tls = listener_tls(config, overrides)
        inter_broker = (config["inter.broker.listener.name"] or DEFAULT_LISTENER).upper()
        if inter_broker in tls and not tls[inter_broker].verify_hostname:
            raise InvalidConfigError(
                "Invalid value (empty) for configuration ssl.endpoint.identification.algorithm: "
                f"the inter-broker listener {inter_broker} speaks gRPC, which always verifies "
                "the broker's host name; set https"
            )
        mapped = security_protocol_map(config["listener.security.protocol.map"])
        protocols = {name: mapped[name] for name in parse_listeners(config["listeners"], "")}
        sasl = listener_sasl(config, protocols, overrides)
        check_inter_broker(config, inter_broker, protocols, sasl)
        return cls(config, listener_overrides=overrides, tls=tls, sasl=sasl)

    def __getitem__(self, key: str) -> Any:
        return self.config[key]

    def with_broker_id(self, broker_id: int) -> BrokerConfig:
        """This config running as ``broker_id`` (a stored or generated id: not re-checked
        against the rules, which apply to the configured value)."""
        values = dict(self.config.values)
        values["broker.id"] = broker_id
        return dataclasses.replace(
            self, config=dataclasses.replace(self.config, values=values), dynamic=self.dynamic
        )

    def with_dynamic(self, raw: Mapping[str, str]) -> Config:
        """The config ``server.properties`` and the dynamic configs ``raw`` make (checked as
        a whole: INVALID_CONFIG naming a bad value); nothing is applied."""
        return BROKER_CONFIG_DEF.parse({**self.config.originals, **raw})

    def apply_dynamic(self, cluster_default: Mapping[str, str], own: Mapping[str, str]) -> None:
        """Put the dynamic configs in force (checked by :meth:`with_dynamic` first)."""
        raw = {**cluster_default, **own}
        self.dynamic.effective = self.with_dynamic(raw) if raw else None
        self.dynamic.cluster_default = dict(cluster_default)
        self.dynamic.own = dict(own)

    @property
    def broker_id(self) -> int:
        value: int = self.config["broker.id"]
        return value

    @property
    def listeners(self) -> dict[str, tuple[str, int]]:
        """Where this broker listens: {listener name: (host, port)}, in the config's order."""
        return parse_listeners(self.config["listeners"], "listeners")

    @property
    def advertised_listeners(self) -> dict[str, tuple[str, int]]:
        """Where others reach each listener (``advertised.listeners``, else ``listeners``)."""
        advertised = self.config["advertised.listeners"]
        return parse_listeners(advertised, "advertised.listeners") if advertised else self.listeners

    @property
    def wire_protocols(self) -> dict[str, str]:
        """{listener name: "grpc", "kafka" or "replication"} (``listener.wire.protocol.map``)."""
        return wire_protocol_map(self.config["listener.wire.protocol.map"], self.listeners)

    @property
    def replica_fetch_listener(self) -> str | None:
        """The replication listener followers fetch from (``replica.fetch.listener.name``),
        None: over gRPC on the inter-broker listener."""
        name: str | None = self.config["replica.fetch.listener.name"]
        return name.upper() if name else None

    @property
    def security_protocols(self) -> dict[str, str]:
        """{listener name: security protocol} (``listener.security.protocol.map``)."""
        return security_protocol_map(self.config["listener.security.protocol.map"])

    def inter_broker_sasl(self) -> SaslCredentials | None:
        """The SASL credentials of the broker's own gRPC calls (a SASL_SSL inter-broker
        listener), else None."""
        return inter_broker_credentials(self.config, self.inter_broker_listener, self.sasl)

    def listener_sasl(self, name: str) -> ListenerSasl | None:
        """The SASL settings of listener ``name``; None for a listener without SASL."""
        return self.sasl.get(name)

    def listener_tls(self, name: str) -> TlsMaterial | None:
        """The TLS material of listener ``name``; None for a listener without TLS."""
        return self.tls.get(name)

    @property
    def inter_broker_listener(self) -> str:
        """The listener replicas and the controller use (``inter.broker.listener.name``)."""
        name: str = self.config["inter.broker.listener.name"] or DEFAULT_LISTENER
        return name.upper()

    @property
    def listen_address(self) -> tuple[str, int]:
        """The inter-broker listener's bind address."""
        return self.listeners[self.inter_broker_listener]

    @property
    def advertised_address(self) -> tuple[str, int]:
        """Where other brokers reach this one (the inter-broker listener, advertised)."""
        return self.advertised_listeners[self.inter_broker_listener]

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.config["log.dirs"] or [self.config["log.dir"]]
        return [Path(d) for d in dirs]

    def topic_defaults(self) -> dict[str, Any]:
        """Topic-level defaults implied by this broker's ``log.*`` keys (dynamic ones too)."""
        return topic_defaults_from_broker(self.dynamic.effective or self.config)

    def log_config(self, overrides: Mapping[str, object] | None = None) -> LogConfig:
        return LogConfig.from_props(overrides or {}, defaults=self.topic_defaults())
