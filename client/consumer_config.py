"""The consumer's configuration: Kafka's consumer config keys, with their types, defaults,
valid values and what each does here, declared once (:data:`CONSUMER_CONFIG`).

Unknown keys are refused naming the key; ``bootstrap.servers`` is required.
"""

from __future__ import annotations

from typing import Final

from kafkasim.client.serde import SERDE_NAMES
from kafkasim.common.config import Config, ConfigDef, ConfigKey, ConfigType
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.tls import CLIENT_SECURITY_KEYS

__all__ = ["CONSUMER_CONFIG", "CONSUMER_KEYS", "ISOLATION_LEVELS"]

ISOLATION_LEVELS: Final = {"read_uncommitted": 0, "read_committed": 1}
"""``isolation.level`` values and their wire codes."""

_I, _L, _S, _LST, _B = (
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.STRING,
    ConfigType.LIST,
    ConfigType.BOOLEAN,
)

CONSUMER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("bootstrap.servers", _LST, None, "host:port of brokers to ask for metadata."),
    ConfigKey("client.id", _S, "", "A name for logs; default consumer-N."),
    ConfigKey(
        "group.id",
        _S,
        None,
        "The consumer group: needed by subscribe(), commit() and committed().",
    ),
    ConfigKey(
        "session.timeout.ms",
        _I,
        10_000,
        "A member silent this long is removed from the group (within the broker's "
        "group.min/max.session.timeout.ms).",
        low=1,
    ),
    ConfigKey("heartbeat.interval.ms", _I, 3000, "Time between heartbeats.", low=1),
    ConfigKey(
        "max.poll.interval.ms",
        _I,
        300_000,
        "Longest time between polls before the member leaves the group; also the rebalance "
        "timeout.",
        low=1,
    ),
    ConfigKey("enable.auto.commit", _B, True, "Commit positions from poll() and close()."),
    ConfigKey("auto.commit.interval.ms", _I, 5000, "Time between auto commits.", low=0),
    ConfigKey(
        "partition.assignment.strategy",
        _LST,
        ["range"],
        "Assignors offered to the group, most preferred first: range, roundrobin (or "
        "Kafka's class names).",
    ),
    ConfigKey(
        "metadata.max.age.ms",
        _L,
        300_000,
        "The group leader re-reads the subscribed topics this often and asks for a new "
        "assignment when their partition counts changed.",
        low=0,
    ),
    ConfigKey(
        "allow.auto.create.topics",
        _B,
        True,
        "Let the broker create subscribed topics that do not exist "
        "(with its auto.create.topics.enable).",
    ),
    ConfigKey(
        "auto.offset.reset",
        _S,
        "latest",
        "Where to start without a valid position: earliest (log start), latest (high "
        "watermark) or none (raise OFFSET_OUT_OF_RANGE).",
        choices=("latest", "earliest", "none"),
    ),
    ConfigKey("fetch.min.bytes", _I, 1, "Bytes a fetch waits for (up to the wait).", low=0),
    ConfigKey("fetch.max.wait.ms", _I, 500, "Longest a fetch waits for fetch.min.bytes.", low=0),
    ConfigKey(
        "fetch.max.bytes",
        _I,
        52_428_800,
        "Most bytes per fetch response (one batch more if the first is larger).",
        low=0,
    ),
    ConfigKey(
        "max.partition.fetch.bytes",
        _I,
        1_048_576,
        "Most bytes per partition in a fetch response (one batch more if the first is larger).",
        low=0,
    ),
    ConfigKey("max.poll.records", _I, 500, "Most records one poll() returns.", low=1),
    ConfigKey(
        "isolation.level",
        _S,
        "read_uncommitted",
        "read_committed: only committed transactional data, up to the last stable offset.",
        choices=tuple(ISOLATION_LEVELS),
    ),
    ConfigKey("request.timeout.ms", _I, 30_000, "How long to wait for an answer.", low=0),
    ConfigKey(
        "default.api.timeout.ms",
        _I,
        60_000,
        "Bound of offset lookups (beginning/end offsets, offsets_for_times), retries included.",
        low=0,
    ),
    ConfigKey("retry.backoff.ms", _L, 100, "Wait before a failed request is retried.", low=0),
    *(
        ConfigKey(
            f"{part}.deserializer",
            _S,
            "bytes",
            f"What poll() makes of each record's {part}: bytes (as fetched), str (UTF-8) or "
            "json; or a callable taking bytes (client.serde). None stays None.",
            choices=SERDE_NAMES,
        )
        for part in ("key", "value")
    ),
)


def _check_required(config: Config) -> None:
    if not config["bootstrap.servers"]:
        raise InvalidConfigError(
            'Missing required configuration "bootstrap.servers" which has no default value.'
        )


CONSUMER_CONFIG = ConfigDef(
    (*CONSUMER_KEYS, *CLIENT_SECURITY_KEYS), rules=(_check_required,), kind="consumer configuration"
)
