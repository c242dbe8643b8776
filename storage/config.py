"""Storage config keys, declared once each with Kafka's names, defaults and valid ranges.

Two levels, as in Kafka: topic-level keys (``segment.bytes``) form a :data:`LOG_CONFIG_DEF`;
broker-level keys (``log.segment.bytes``) in :data:`BROKER_LOG_KEYS` give the defaults for
every topic that does not override them (:func:`topic_defaults_from_broker`). Where Kafka has
several broker keys for one setting, the finer unit wins: ``log.retention.ms`` over
``log.retention.minutes`` over ``log.retention.hours``; ``log.roll.ms`` over ``log.roll.hours``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kafkasim.common.config import Config, ConfigDef, ConfigKey, ConfigType
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sentinels import INT64_MAX

I, L, D, B, S, LST = (  # noqa: E741 - one letter per type keeps the key tables one line each
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.DOUBLE,
    ConfigType.BOOLEAN,
    ConfigType.STRING,
    ConfigType.LIST,
)

DAY_MS = 24 * 60 * 60 * 1000
LEGACY_RECORD_OVERHEAD_V0 = 14  # the smallest thing a segment must be able to hold
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # 1 MiB of batch plus its log overhead
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")

TOPIC_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "segment.bytes",
        I,
        1024 * 1024 * 1024,
        "Size of one log segment file.",
        low=LEGACY_RECORD_OVERHEAD_V0,
    ),
    ConfigKey(
        "segment.ms", L, 7 * DAY_MS, "Roll a segment after this long even if it is not full.", low=1
    ),
    ConfigKey("segment.jitter.ms", L, 0, "Random jitter subtracted from segment.ms.", low=0),
    ConfigKey(
        "segment.index.bytes",
        I,
        10 * 1024 * 1024,
        "Size of the offset and time index files (preallocated).",
        low=4,
    ),
    ConfigKey(
        "index.interval.bytes",
        I,
        4096,
        "Bytes of batches appended between two sparse index entries.",
        low=0,
    ),
    ConfigKey(
        "retention.ms",
        L,
        7 * DAY_MS,
        "Delete segments whose newest record is older than this; -1 keeps forever.",
        low=-1,
    ),
    ConfigKey(
        "retention.bytes",
        L,
        -1,
        "Delete oldest segments while the log is larger than this; -1 = unlimited.",
    ),
    ConfigKey(
        "cleanup.policy",
        LST,
        ["delete"],
        "delete, compact, or both.",
        choices=("delete", "compact"),
    ),
    ConfigKey(
        "delete.retention.ms",
        L,
        DAY_MS,
        "How long tombstones are kept in a compacted topic.",
        low=0,
    ),
    ConfigKey(
        "min.cleanable.dirty.ratio",
        D,
        0.5,
        "Dirty/total ratio from which the cleaner compacts a log.",
        low=0,
        high=1,
    ),
    ConfigKey(
        "min.compaction.lag.ms", L, 0, "A record stays uncompacted at least this long.", low=0
    ),
    ConfigKey(
        "max.compaction.lag.ms",
        L,
        INT64_MAX,
        "A record becomes eligible for compaction at most this long after it is written.",
        low=1,
    ),
    ConfigKey(
        "file.delete.delay.ms",
        L,
        60_000,
        "Delay before a .deleted segment file is removed from disk.",
        low=0,
    ),
    ConfigKey(
        "flush.messages",
        L,
        INT64_MAX,
        "fsync after this many messages (default: leave it to the OS).",
        low=1,
    ),
    ConfigKey(
        "flush.ms",
        L,
        INT64_MAX,
        "fsync when the oldest unflushed message is this old (default: never).",
        low=0,
    ),
    ConfigKey(
        "max.message.bytes",
        I,
        DEFAULT_MAX_MESSAGE_BYTES,
        "Largest record batch (with log overhead) the log accepts.",
        low=0,
    ),
    ConfigKey(
        "message.timestamp.type",
        S,
        "CreateTime",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
        choices=TIMESTAMP_TYPES,
    ),
    ConfigKey(
        "message.timestamp.difference.max.ms",
        L,
        INT64_MAX,
        "Largest difference between a CreateTime timestamp and the broker's clock.",
        low=0,
    ),
    ConfigKey("preallocate", B, False, "Preallocate the segment file on roll."),
    ConfigKey(
        "compression.type",
        S,
        "producer",
        "Compression of stored batches; 'producer' keeps what the producer sent.",
        choices=COMPRESSION_TYPES,
    ),
    ConfigKey(
        "min.insync.replicas",
        I,
        1,
        "Replicas that must be in sync for an acks=all write to succeed.",
        low=1,
    ),
    ConfigKey(
        "unclean.leader.election.enable",
        B,
        False,
        "Allow a replica outside the ISR to become leader (may lose data).",
    ),
)


def _check_topic_rules(config: Config) -> None:
    if config["retention.bytes"] < -1:
        raise InvalidConfigError(
            f"Invalid value {config['retention.bytes']} for configuration retention.bytes: "
            "Value must be at least -1"
        )
    # Kafka's LogConfig.validateValues: a record cannot have to stay uncompacted longer than
    # the time by which it must be compacted.
    if config["min.compaction.lag.ms"] > config["max.compaction.lag.ms"]:
        raise InvalidConfigError(
            f"conflict topic config setting min.compaction.lag.ms "
            f"({config['min.compaction.lag.ms']}) > max.compaction.lag.ms "
            f"({config['max.compaction.lag.ms']})"
        )


LOG_CONFIG_DEF = ConfigDef(TOPIC_KEYS, rules=[_check_topic_rules], kind="topic configuration")


# Broker keys that carry storage settings; each maps to the topic key it defaults (or to None
# for settings of the log manager itself).
BROKER_LOG_KEYS: tuple[tuple[ConfigKey, str | None], ...] = (
    (ConfigKey("log.dirs", LST, None, "Directories holding the partition logs."), None),
    (ConfigKey("log.dir", S, "/tmp/kafka-logs", "Log directory when log.dirs is not set."), None),
    (
        ConfigKey(
            "log.segment.bytes",
            I,
            1024 * 1024 * 1024,
            "Default segment.bytes.",
            low=LEGACY_RECORD_OVERHEAD_V0,
        ),
        "segment.bytes",
    ),
    (
        ConfigKey("log.roll.ms", L, None, "Default segment.ms (wins over log.roll.hours).", low=1),
        "segment.ms",
    ),
    (ConfigKey("log.roll.hours", I, 168, "Default segment.ms in hours.", low=1), "segment.ms"),
    (
        ConfigKey("log.roll.jitter.ms", L, None, "Default segment.jitter.ms.", low=0),
        "segment.jitter.ms",
    ),
    (
        ConfigKey("log.roll.jitter.hours", I, 0, "Default segment.jitter.ms in hours.", low=0),
        "segment.jitter.ms",
    ),
    (
        ConfigKey(
            "log.index.size.max.bytes", I, 10 * 1024 * 1024, "Default segment.index.bytes.", low=4
        ),
        "segment.index.bytes",
    ),
    (
        ConfigKey("log.index.interval.bytes", I, 4096, "Default index.interval.bytes.", low=0),
        "index.interval.bytes",
    ),
    (
        ConfigKey(
            "log.retention.ms", L, None, "Default retention.ms (wins over minutes, hours).", low=-1
        ),
        "retention.ms",
    ),
    (
        ConfigKey("log.retention.minutes", I, None, "Default retention.ms in minutes.", low=-1),
        "retention.ms",
    ),
    (
        ConfigKey("log.retention.hours", I, 168, "Default retention.ms in hours.", low=-1),
        "retention.ms",
    ),
    (ConfigKey("log.retention.bytes", L, -1, "Default retention.bytes."), "retention.bytes"),
    (
        ConfigKey(
            "log.retention.check.interval.ms", L, 300_000, "How often retention is checked.", low=1
        ),
        None,
    ),
    (
        ConfigKey(
            "log.cleanup.policy",
            LST,
            ["delete"],
            "Default cleanup.policy.",
            choices=("delete", "compact"),
        ),
        "cleanup.policy",
    ),
    (ConfigKey("log.cleaner.enable", B, True, "Run the log cleaner for compacted topics."), None),
    (
        ConfigKey(
            "log.cleaner.delete.retention.ms", L, DAY_MS, "Default delete.retention.ms.", low=0
        ),
        "delete.retention.ms",
    ),
    (
        ConfigKey(
            "log.cleaner.min.cleanable.ratio",
            D,
            0.5,
            "Default min.cleanable.dirty.ratio.",
            low=0,
            high=1,
        ),
        "min.cleanable.dirty.ratio",
    ),
    (
        ConfigKey(
            "log.cleaner.min.compaction.lag.ms", L, 0, "Default min.compaction.lag.ms.", low=0
        ),
        "min.compaction.lag.ms",
    ),
    (
        ConfigKey(
            "log.cleaner.max.compaction.lag.ms",
            L,
            INT64_MAX,
            "Default max.compaction.lag.ms.",
            low=1,
        ),
        "max.compaction.lag.ms",
    ),
    (ConfigKey("log.cleaner.backoff.ms", L, 15_000, "Sleep between cleaner passes.", low=0), None),
    (
        ConfigKey(
            "log.cleaner.dedupe.buffer.size",
            L,
            128 * 1024 * 1024,
            "Memory for the cleaner's key→offset map (24 bytes an entry, as Kafka counts).",
            low=1024 * 1024,
        ),
        None,
    ),
    (
        ConfigKey("log.segment.delete.delay.ms", L, 60_000, "Default file.delete.delay.ms.", low=0),
        "file.delete.delay.ms",
    ),
    (
        ConfigKey("log.flush.interval.messages", L, INT64_MAX, "Default flush.messages.", low=1),
        "flush.messages",
    ),
    (ConfigKey("log.flush.interval.ms", L, None, "Default flush.ms.", low=0), "flush.ms"),
    (
        ConfigKey(
            "log.flush.scheduler.interval.ms",
            L,
            INT64_MAX,
            "Default flush.ms when log.flush.interval.ms is not set.",
            low=0,
        ),
        "flush.ms",
    ),
    (
        ConfigKey(
            "log.flush.offset.checkpoint.interval.ms",
            I,
            60_000,
            "How often the recovery point checkpoint is written.",
            low=0,
        ),
        None,
    ),
    (
        ConfigKey(
            "log.flush.start.offset.checkpoint.interval.ms",
            I,
            60_000,
            "How often the log start offset checkpoint is written.",
            low=0,
        ),
        None,
    ),
    (
        ConfigKey(
            "message.max.bytes", I, DEFAULT_MAX_MESSAGE_BYTES, "Default max.message.bytes.", low=0
        ),
        "max.message.bytes",
    ),
    (
        ConfigKey(
            "log.message.timestamp.type",
            S,
            "CreateTime",
            "Default message.timestamp.type.",
            choices=TIMESTAMP_TYPES,
        ),
        "message.timestamp.type",
    ),
    (
        ConfigKey(
            "log.message.timestamp.difference.max.ms",
            L,
            INT64_MAX,
            "Default message.timestamp.difference.max.ms.",
            low=0,
        ),
        "message.timestamp.difference.max.ms",
    ),
    (ConfigKey("log.preallocate", B, False, "Default preallocate."), "preallocate"),
    (
        ConfigKey(
            "compression.type",
            S,
            "producer",
            "Default compression.type.",
            choices=COMPRESSION_TYPES,
        ),
        "compression.type",
    ),
    (
        ConfigKey("min.insync.replicas", I, 1, "Default min.insync.replicas.", low=1),
        "min.insync.replicas",
    ),
    (
        ConfigKey(
            "unclean.leader.election.enable", B, False, "Default unclean.leader.election.enable."
        ),
        "unclean.leader.election.enable",
    ),
)

BROKER_LOG_CONFIG_DEF = ConfigDef(
    [key for key, _ in BROKER_LOG_KEYS], kind="broker log configuration"
)

# Which broker key feeds which topic key, finest unit first (the first one set wins).
_UNIT_PRECEDENCE: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
}


def topic_defaults_from_broker(broker: Config) -> dict[str, Any]:
    """The topic-level defaults a broker config implies (Kafka's
    ``LogConfig.extractLogConfigMap``)."""
    out: dict[str, Any] = {}
    for key, topic_key in BROKER_LOG_KEYS:
        if topic_key is None or topic_key in _UNIT_PRECEDENCE:
            continue
        out[topic_key] = broker[key.name]
    for topic_key, chain in _UNIT_PRECEDENCE.items():
        for broker_key, unit_ms in chain:
            value = broker[broker_key]
            if value is not None:
                # -1 means "forever" in every unit; do not multiply it.
                out[topic_key] = value if value < 0 else min(value * unit_ms, INT64_MAX)
                break
    return out


def broker_synonyms(topic_key: str) -> tuple[str, ...]:
    """The broker keys that give ``topic_key`` its default, in precedence order (Kafka's config
    synonyms: ``retention.ms`` → ``log.retention.ms``, ``log.retention.minutes``,
    ``log.retention.hours``); empty for a topic key no broker key defaults."""
    chain = _UNIT_PRECEDENCE.get(topic_key)
    if chain is not None:
        return tuple(broker_key for broker_key, _ in chain)
    return tuple(key.name for key, topic in BROKER_LOG_KEYS if topic == topic_key)


def log_dirs(broker: Config) -> list[str]:
    """``log.dirs`` when set, else ``log.dir`` (Kafka's rule)."""
    dirs: list[str] | None = broker["log.dirs"]
    return list(dirs) if dirs else [broker["log.dir"]]


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The typed view of one topic's storage settings, frozen after load."""

    segment_bytes: int
    segment_ms: int
    segment_jitter_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    cleanup_policy: tuple[str, ...]
    delete_retention_ms: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    file_delete_delay_ms: int
    flush_messages: int
    flush_ms: int
    max_message_bytes: int
    message_timestamp_type: str
    message_timestamp_difference_max_ms: int
    preallocate: bool
    compression_type: str
    min_insync_replicas: int
    unclean_leader_election_enable: bool

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @classmethod
    def from_config(cls, config: Config) -> LogConfig:
        return cls(**{k.replace(".", "_"): _freeze(config[k]) for k in LOG_CONFIG_DEF.keys})

    @classmethod
    def from_props(
        cls,
        props: Mapping[str, object] | None = None,
        *,
        defaults: Mapping[str, object] | None = None,
    ) -> LogConfig:
        """Topic overrides ``props`` on top of ``defaults`` (e.g. from the broker)."""
        merged: dict[str, object] = dict(defaults or {})
        merged.update(props or {})
        return cls.from_config(LOG_CONFIG_DEF.parse(merged))

    def to_props(self) -> dict[str, Any]:
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in ((k, getattr(self, k.replace(".", "_"))) for k in LOG_CONFIG_DEF.keys)
        }


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
