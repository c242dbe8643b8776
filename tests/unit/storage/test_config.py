"""Storage config: topic keys validated with errors that name the key, broker keys turned into
topic defaults with Kafka's unit precedence, and defaults equal to Kafka's documented ones."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kafkasim.common.config import ConfigKey, ConfigType
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sentinels import INT64_MAX
from kafkasim.storage.config import (
    BROKER_LOG_CONFIG_DEF,
    TOPIC_KEYS,
    LogConfig,
    log_dirs,
    topic_defaults_from_broker,
)

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


def broker_topic_defaults(props: dict[str, object]) -> dict[str, Any]:
    return topic_defaults_from_broker(BROKER_LOG_CONFIG_DEF.parse(props))


# -- unknown keys -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "segment.byte",  # a typo must not silently fall back to the default
        "log.retention.ms",  # a broker key is not a topic key
        "retention.hours",
        "",
    ],
)
def test_an_unknown_topic_key_is_an_error_naming_the_key(key: str) -> None:
    """Kafka rejects unknown topic configs (INVALID_CONFIG) so typos are caught at creation."""
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig.from_props({key: "1"})
    assert excinfo.value.error_name == "INVALID_CONFIG"
    assert key in str(excinfo.value)


def test_every_unknown_key_is_named() -> None:
    """One round trip should show the user every mistake, not just the first."""
    with pytest.raises(InvalidConfigError, match=r"foo\.bar, segment\.byte"):
        LogConfig.from_props({"segment.byte": 1, "foo.bar": 2, "segment.bytes": 1024})


# -- ranges -------------------------------------------------------------------------------

LOW_BOUNDED = [key for key in TOPIC_KEYS if key.low is not None]


def _just_below(key: ConfigKey) -> int | float:
    assert key.low is not None
    return key.low - 0.01 if key.type is ConfigType.DOUBLE else int(key.low) - 1


def _bound_text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def test_the_low_bounded_keys_are_the_ones_kafka_bounds() -> None:
    """Guard the parametrized table below against a key losing its bound unnoticed."""
    assert {k.name for k in LOW_BOUNDED} >= {
        "segment.bytes",
        "segment.ms",
        "segment.index.bytes",
        "index.interval.bytes",
        "retention.ms",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "max.message.bytes",
        "min.insync.replicas",
    }


@pytest.mark.parametrize("key", LOW_BOUNDED, ids=[k.name for k in LOW_BOUNDED])
def test_a_value_below_the_minimum_is_an_error_naming_key_and_bound(key: ConfigKey) -> None:
    """The message must say which key and what the smallest allowed value is."""
    assert key.low is not None
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig.from_props({key.name: _just_below(key)})
    message = str(excinfo.value)
    assert f"configuration {key.name}" in message
    assert f"at least {_bound_text(key.low)}" in message


@pytest.mark.parametrize("key", LOW_BOUNDED, ids=[k.name for k in LOW_BOUNDED])
def test_the_minimum_itself_is_accepted(key: ConfigKey) -> None:
    """The bound is inclusive, as Kafka's Range.atLeast."""
    assert key.low is not None
    value: int | float = key.low if key.type is ConfigType.DOUBLE else int(key.low)
    config = LogConfig.from_props({key.name: value})
    assert getattr(config, key.name.replace(".", "_")) == value


@pytest.mark.parametrize(
    ("key", "value", "bound_text"),
    [
        ("retention.bytes", -2, "at least -1"),  # checked by a rule: -1 means unlimited
        ("min.cleanable.dirty.ratio", 1.01, "no more than 1"),
        ("segment.bytes", 2**31, "INT"),  # an int32 on the wire and on disk
        ("segment.ms", 2**63, "LONG"),
    ],
)
def test_other_out_of_range_values_are_errors_naming_the_key(
    key: str, value: object, bound_text: str
) -> None:
    """Upper bounds, the -1 sentinel and integer widths are checked like lower bounds."""
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig.from_props({key: value})
    assert key in str(excinfo.value)
    assert bound_text in str(excinfo.value)


@pytest.mark.parametrize(
    ("min_lag", "max_lag", "ok"),
    [
        (0, 1, True),
        (1000, 1000, True),
        (1001, 1000, False),
    ],
)
def test_min_compaction_lag_above_max_compaction_lag_is_an_error_naming_both(
    min_lag: int, max_lag: int, ok: bool
) -> None:
    """Kafka's cross-field rule: no record can be both not-yet-compactable and overdue."""
    props = {"min.compaction.lag.ms": min_lag, "max.compaction.lag.ms": max_lag}
    if ok:
        assert LogConfig.from_props(props).min_compaction_lag_ms == min_lag
        return
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig.from_props(props)
    assert "min.compaction.lag.ms" in str(excinfo.value)
    assert "max.compaction.lag.ms" in str(excinfo.value)


# -- types --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "type_name"),
    [
        ("segment.bytes", "abc", "INT"),
        ("segment.bytes", 1.5, "INT"),
        ("segment.bytes", True, "INT"),  # a bool is an int in Python, not in Kafka
        ("retention.ms", "7d", "LONG"),
        ("retention.ms", [1], "LONG"),
        ("min.cleanable.dirty.ratio", "half", "DOUBLE"),
        ("min.cleanable.dirty.ratio", False, "DOUBLE"),
        ("preallocate", "yes", "BOOLEAN"),
        ("preallocate", 1, "BOOLEAN"),
        ("cleanup.policy", 5, "LIST"),
        ("compression.type", 3, "STRING"),
    ],
)
def test_a_value_of_the_wrong_type_is_an_error_naming_key_and_type(
    key: str, value: object, type_name: str
) -> None:
    """Values from a properties file are strings; anything else must already be typed."""
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig.from_props({key: value})
    assert f"configuration {key}" in str(excinfo.value)
    assert type_name in str(excinfo.value)


@pytest.mark.parametrize(
    ("key", "raw", "attribute", "value"),
    [
        ("segment.bytes", "1024", "segment_bytes", 1024),
        ("segment.bytes", " 2048 ", "segment_bytes", 2048),
        ("retention.ms", "-1", "retention_ms", -1),
        ("min.cleanable.dirty.ratio", "0.25", "min_cleanable_dirty_ratio", 0.25),
        ("min.cleanable.dirty.ratio", 1, "min_cleanable_dirty_ratio", 1.0),
        ("preallocate", "TRUE", "preallocate", True),
        ("preallocate", "false", "preallocate", False),
    ],
)
def test_strings_from_properties_files_are_parsed(
    key: str, raw: object, attribute: str, value: object
) -> None:
    """A topic config read from ZooKeeper or a file arrives as strings."""
    assert getattr(LogConfig.from_props({key: raw}), attribute) == value


# -- cleanup.policy -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "policy", "compact", "delete"),
    [
        ("delete", ("delete",), False, True),
        ("compact", ("compact",), True, False),
        ("compact,delete", ("compact", "delete"), True, True),
        ("delete, compact", ("delete", "compact"), True, True),
        (["compact", "delete"], ("compact", "delete"), True, True),
    ],
)
def test_cleanup_policy_accepts_compact_delete_and_both(
    raw: object, policy: tuple[str, ...], compact: bool, delete: bool
) -> None:
    """compact,delete compacts and also expires old segments by time and size."""
    config = LogConfig.from_props({"cleanup.policy": raw})
    assert config.cleanup_policy == policy
    assert (config.compact, config.delete) == (compact, delete)


def test_an_unknown_cleanup_policy_is_an_error_naming_key_and_choices() -> None:
    with pytest.raises(InvalidConfigError) as excinfo:
        LogConfig.from_props({"cleanup.policy": "compact,archive"})
    assert "cleanup.policy" in str(excinfo.value)
    assert "archive" in str(excinfo.value)
    assert "delete, compact" in str(excinfo.value)


# -- broker defaults ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("props", "retention_ms"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.retention.hours": 1}, HOUR_MS),
        ({"log.retention.minutes": 30}, 30 * MINUTE_MS),
        ({"log.retention.hours": 1, "log.retention.minutes": 30}, 30 * MINUTE_MS),
        ({"log.retention.ms": 5}, 5),
        ({"log.retention.ms": 5, "log.retention.minutes": 30, "log.retention.hours": 1}, 5),
        ({"log.retention.ms": "5", "log.retention.hours": "1"}, 5),
        # -1 means forever in every unit; it is not multiplied.
        ({"log.retention.hours": -1}, -1),
        ({"log.retention.minutes": -1}, -1),
        ({"log.retention.ms": -1}, -1),
        ({"log.retention.minutes": -1, "log.retention.hours": 1}, -1),
        ({"log.retention.ms": -1, "log.retention.minutes": 30}, -1),
        ({"log.retention.ms": 7, "log.retention.minutes": -1}, 7),
    ],
)
def test_broker_retention_precedence_is_ms_over_minutes_over_hours(
    props: dict[str, object], retention_ms: int
) -> None:
    """Kafka's logRetentionTimeMillis: the finest unit that is set wins."""
    defaults = broker_topic_defaults(props)
    assert defaults["retention.ms"] == retention_ms
    assert LogConfig.from_props({}, defaults=defaults).retention_ms == retention_ms


@pytest.mark.parametrize(
    ("props", "segment_ms"),
    [
        ({}, 168 * HOUR_MS),
        ({"log.roll.hours": 1}, HOUR_MS),
        ({"log.roll.ms": 1234}, 1234),
        ({"log.roll.ms": 1234, "log.roll.hours": 1}, 1234),
    ],
)
def test_broker_roll_precedence_is_ms_over_hours(props: dict[str, object], segment_ms: int) -> None:
    """log.roll.ms over log.roll.hours, as KafkaConfig.logRollTimeMillis."""
    assert broker_topic_defaults(props)["segment.ms"] == segment_ms


def test_broker_log_roll_hours_below_one_is_an_error() -> None:
    """Kafka bounds log.roll.hours with atLeast(1): a zero roll time would roll every append."""
    with pytest.raises(InvalidConfigError) as excinfo:
        BROKER_LOG_CONFIG_DEF.parse({"log.roll.hours": 0})
    assert "log.roll.hours" in str(excinfo.value)
    assert "at least 1" in str(excinfo.value)


def test_broker_keys_map_to_their_topic_keys() -> None:
    """Each log.* broker key sets the default of its topic key."""
    defaults = broker_topic_defaults(
        {
            "log.segment.bytes": 1000,
            "log.retention.bytes": 5000,
            "log.cleanup.policy": "compact",
            "log.cleaner.delete.retention.ms": 10,
            "log.cleaner.min.cleanable.ratio": 0.1,
            "log.segment.delete.delay.ms": 20,
            "message.max.bytes": 30,
            "log.index.size.max.bytes": 4096,
            "log.index.interval.bytes": 40,
        }
    )
    config = LogConfig.from_props({}, defaults=defaults)
    assert (config.segment_bytes, config.retention_bytes, config.cleanup_policy) == (
        1000,
        5000,
        ("compact",),
    )
    assert (config.delete_retention_ms, config.min_cleanable_dirty_ratio) == (10, 0.1)
    assert (config.file_delete_delay_ms, config.max_message_bytes) == (20, 30)
    assert (config.segment_index_bytes, config.index_interval_bytes) == (4096, 40)


def test_topic_overrides_win_over_broker_defaults() -> None:
    """A per-topic config overrides the broker's default for that topic only."""
    defaults = broker_topic_defaults({"log.retention.hours": 1, "log.segment.bytes": 1000})
    config = LogConfig.from_props({"retention.ms": 42}, defaults=defaults)
    assert (config.retention_ms, config.segment_bytes) == (42, 1000)


@pytest.mark.parametrize(
    ("props", "dirs"),
    [
        ({}, ["/tmp/kafka-logs"]),
        ({"log.dir": "/data/one"}, ["/data/one"]),
        ({"log.dirs": "/a,/b", "log.dir": "/data/one"}, ["/a", "/b"]),
        ({"log.dirs": " /a , /b "}, ["/a", "/b"]),
    ],
)
def test_log_dirs_wins_over_log_dir(props: dict[str, object], dirs: list[str]) -> None:
    """Kafka: log.dirs if set, else log.dir (default /tmp/kafka-logs)."""
    assert log_dirs(BROKER_LOG_CONFIG_DEF.parse(props)) == dirs


# -- defaults -----------------------------------------------------------------------------


KAFKA_TOPIC_DEFAULTS = [
    ("segment_bytes", 1_073_741_824),
    ("segment_ms", 604_800_000),
    ("segment_jitter_ms", 0),
    ("segment_index_bytes", 10_485_760),
    ("index_interval_bytes", 4096),
    ("retention_ms", 604_800_000),
    ("retention_bytes", -1),
    ("cleanup_policy", ("delete",)),
    ("delete_retention_ms", 86_400_000),
    ("min_cleanable_dirty_ratio", 0.5),
    ("min_compaction_lag_ms", 0),
    ("max_compaction_lag_ms", INT64_MAX),
    ("file_delete_delay_ms", 60_000),
    ("flush_messages", INT64_MAX),
    ("flush_ms", INT64_MAX),
    ("max_message_bytes", 1_048_588),
    ("message_timestamp_type", "CreateTime"),
    ("message_timestamp_difference_max_ms", INT64_MAX),
    ("preallocate", False),
    ("compression_type", "producer"),
    ("min_insync_replicas", 1),
    ("unclean_leader_election_enable", False),
]


@pytest.mark.parametrize(("attribute", "kafka_default"), KAFKA_TOPIC_DEFAULTS)
def test_topic_defaults_equal_kafkas_documented_defaults(
    attribute: str, kafka_default: object
) -> None:
    """Users tune kafkasim from Kafka's documentation: the defaults must be the same."""
    assert getattr(LogConfig.from_props({}), attribute) == kafka_default


@pytest.mark.parametrize(("attribute", "kafka_default"), KAFKA_TOPIC_DEFAULTS)
def test_a_default_broker_config_implies_the_same_topic_defaults(
    attribute: str, kafka_default: object
) -> None:
    """The broker-level defaults (log.*) must agree with the topic-level ones."""
    config = LogConfig.from_props({}, defaults=broker_topic_defaults({}))
    assert getattr(config, attribute) == kafka_default


def test_every_topic_key_has_a_default_test() -> None:
    """A new key must get its Kafka default checked above."""
    assert {a for a, _ in KAFKA_TOPIC_DEFAULTS} == {f.name for f in dataclasses.fields(LogConfig)}


@pytest.mark.parametrize(
    ("key", "kafka_default"),
    [
        ("log.retention.check.interval.ms", 300_000),
        ("log.retention.hours", 168),
        ("log.roll.hours", 168),
        ("log.segment.bytes", 1_073_741_824),
        ("log.segment.delete.delay.ms", 60_000),
        ("log.cleaner.backoff.ms", 15_000),
        ("log.cleaner.dedupe.buffer.size", 134_217_728),
        ("log.cleaner.delete.retention.ms", 86_400_000),
        ("log.cleaner.min.cleanable.ratio", 0.5),
        ("log.flush.offset.checkpoint.interval.ms", 60_000),
        ("message.max.bytes", 1_048_588),
    ],
)
def test_broker_defaults_equal_kafkas_documented_defaults(key: str, kafka_default: object) -> None:
    assert BROKER_LOG_CONFIG_DEF.defaults()[key] == kafka_default


def test_a_log_config_is_frozen_after_load() -> None:
    """Configs are shared between logs; a change goes through a new LogConfig."""
    config = LogConfig.from_props({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.retention_ms = 1  # type: ignore[misc]


def test_to_props_round_trips() -> None:
    """What a log reports as its config (describe-configs) parses back to the same config."""
    config = LogConfig.from_props({"cleanup.policy": "compact,delete", "retention.ms": 5})
    assert LogConfig.from_props(config.to_props()) == config
