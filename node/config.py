"""Broker configuration (``server.properties``), with Kafka's key names and defaults.

One declaration per key; the storage keys (``log.dirs``, ``log.segment.bytes`` …) come from
``storage.config.BROKER_LOG_KEYS``. Unknown keys are an INVALID_CONFIG error naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.config import Config, ConfigDef, ConfigKey, ConfigType, read_properties
from common.errors import InvalidConfigError
from storage.config import BROKER_LOG_KEYS, LogConfig, topic_defaults_from_broker

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
    ConfigKey("zookeeper.connect", S, None, "ZooKeeper connect string host:port[,…][/chroot]."),
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
    ConfigKey("metrics.port", I, -1, "Prometheus metrics port (-1: none).", low=-1),
)


def _check_broker_rules(config: Config) -> None:
    if config["broker.id"] < 0 and not config["broker.id.generation.enable"]:
        raise InvalidConfigError("broker.id must be set when broker.id.generation.enable is false")
    if config["zookeeper.connect"] in (None, ""):
        raise InvalidConfigError("Missing required configuration zookeeper.connect")
    for listener in config["listeners"]:
        parse_listener(listener)


BROKER_CONFIG_DEF = ConfigDef(
    [*BROKER_KEYS, *(key for key, _ in BROKER_LOG_KEYS)],
    rules=[_check_broker_rules],
    kind="broker configuration",
)


def parse_listener(listener: str) -> tuple[str, str, int]:
    """``PLAINTEXT://host:port`` → (name, host, port); INVALID_CONFIG naming the value."""
    name, sep, rest = listener.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise InvalidConfigError(
            f"Invalid value {listener} for configuration listeners: expected NAME://host:port"
        )
    return name, host or "0.0.0.0", int(port)


@dataclass(frozen=True)
class BrokerConfig:
    """A parsed broker config and the views the broker needs."""

    config: Config

    @classmethod
    def from_props(cls, props: Mapping[str, object]) -> BrokerConfig:
        return cls(BROKER_CONFIG_DEF.parse(props))

    @classmethod
    def from_file(cls, path: Path) -> BrokerConfig:
        return cls.from_props(read_properties(path))

    def __getitem__(self, key: str) -> Any:
        return self.config[key]

    @property
    def broker_id(self) -> int:
        value: int = self.config["broker.id"]
        return value

    @property
    def listen_address(self) -> tuple[str, int]:
        _, host, port = parse_listener(self.config["listeners"][0])
        return host, port

    @property
    def advertised_address(self) -> tuple[str, int]:
        listeners = self.config["advertised.listeners"] or self.config["listeners"]
        _, host, port = parse_listener(listeners[0])
        return host, port

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.config["log.dirs"] or [self.config["log.dir"]]
        return [Path(d) for d in dirs]

    def topic_defaults(self) -> dict[str, Any]:
        """Topic-level defaults implied by this broker's ``log.*`` keys."""
        return topic_defaults_from_broker(self.config)

    def log_config(self, overrides: Mapping[str, object] | None = None) -> LogConfig:
        return LogConfig.from_props(overrides or {}, defaults=self.topic_defaults())
