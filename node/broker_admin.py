"""The admin requests a broker answers itself, wire-free: DescribeConfigs (a topic's effective
config with its sources and synonyms, or this broker's config), DescribeLogDirs and
DescribeProducers. The gRPC request layer (``node.apis``) and Kafka's
(``node.kafka_apis_admin``) translate their structs into these calls and the values back.

Config sources and synonyms follow Kafka's ZooKeeper-mode ``ConfigHelper``: a topic key's
value comes from its override (DYNAMIC_TOPIC_CONFIG), else from the first broker key that
defaults it and is set in ``server.properties`` (STATIC_BROKER_CONFIG), else from that broker
key's default (DEFAULT_CONFIG); the synonyms list them in that order. The dynamic broker
configs in force on this broker (``node.broker_config_admin``) come before the static ones:
DYNAMIC_BROKER_CONFIG (its own), then DYNAMIC_DEFAULT_BROKER_CONFIG (the cluster default).
A broker key is read-only unless it can change dynamically.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kafkasim.common.config import ConfigKey, ConfigType
from kafkasim.common.coordination import Coordination, NoNodeError
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.node import authz_admin, authz_replica
from kafkasim.node.acl import AclOperation
from kafkasim.node.acl_authorizer import AclAuthorizer
from kafkasim.node.admin_calls import RESOURCE_TYPE_BROKER, RESOURCE_TYPE_TOPIC
from kafkasim.node.authz import request_auth
from kafkasim.node.broker_config_admin import DYNAMIC_BROKER_KEYS
from kafkasim.node.config import BrokerConfig
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.node.replica_manager import ReplicaManager
from kafkasim.storage.config import LOG_CONFIG_DEF, broker_synonyms

# Kafka's DescribeConfigsResponse.ConfigSource numbers.
TOPIC_CONFIG = 1  # DYNAMIC_TOPIC_CONFIG
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Kafka's DescribeConfigsResponse.ConfigType numbers.
_CONFIG_TYPES = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
}

InvalidRequestError = error_for_name("INVALID_REQUEST")
UnknownTopicOrPartitionError = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
NotLeaderOrFollowerError = error_for_name("NOT_LEADER_OR_FOLLOWER")
KafkaStorageError = error_for_name("KAFKA_STORAGE_ERROR")


class AdminServices(Protocol):
    """What these calls read of the broker (``node.apis.BrokerServices`` has it)."""

    broker_id: int
    config: BrokerConfig
    zk: Coordination
    metadata: MetadataCache
    replica_manager: ReplicaManager

    @property
    def authorizer(self) -> AclAuthorizer | None: ...


# -- DescribeConfigs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """One resource to describe; ``names`` None or empty: every key (as Kafka)."""

    resource_type: int
    resource_name: str
    names: Collection[str] | None = None


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    """One key: its effective value (None: unset), where it comes from, and its synonyms
    (highest precedence first; the first one is where the value comes from)."""

    name: str
    value: str | None
    source: int
    read_only: bool
    config_type: int
    documentation: str
    synonyms: tuple[ConfigSynonym, ...] = ()
    is_sensitive: bool = False


@dataclass(frozen=True, slots=True)
class ResourceConfigs:
    resource_type: int
    resource_name: str
    error: KafkaError | None = None
    configs: tuple[DescribedConfig, ...] = ()


def config_text(value: Any) -> str | None:
    """A parsed config value as Kafka's ``ConfigDef.convertToString`` writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


async def describe_configs(
    broker: AdminServices, resources: Sequence[ConfigResource]
) -> list[ResourceConfigs]:
    """One answer per resource, in order: topics (their effective configs), this broker (its
    id as the name) or the cluster-wide dynamic broker defaults (an empty name); another
    broker's id or another type is INVALID_REQUEST. Each resource needs DESCRIBE_CONFIGS on
    the topic, or on the cluster for a broker (``node.authz_admin``)."""
    auth = request_auth(broker, "DescribeConfigs")
    answers: list[ResourceConfigs] = []
    for resource in resources:
        kind, name = resource.resource_type, resource.resource_name
        refusal = authz_admin.config_refusal(auth, AclOperation.DESCRIBE_CONFIGS, kind, name)
        if refusal is not None:
            answers.append(ResourceConfigs(kind, name, refusal))
            continue
        try:
            if kind == RESOURCE_TYPE_TOPIC:
                configs = await _topic_configs(broker, name)
            elif kind == RESOURCE_TYPE_BROKER:
                configs = _broker_configs(broker, name)
            else:
                raise InvalidRequestError(
                    f"Unsupported resource type {kind}: topics (2) and brokers (4) only"
                )
        except KafkaError as e:
            answers.append(ResourceConfigs(kind, name, e))
            continue
        wanted = resource.names
        answers.append(
            ResourceConfigs(
                kind, name, None, tuple(c for c in configs if not wanted or c.name in wanted)
            )
        )
    return answers


async def _topic_configs(broker: AdminServices, topic: str) -> list[DescribedConfig]:
    try:
        data, _ = await broker.zk.get(zk_data.topic_config_path(topic))
    except NoNodeError:
        raise UnknownTopicOrPartitionError(f"Topic {topic} does not exist") from None
    return topic_config_entries(broker.config, zk_data.decode_topic_config(data))


def topic_config_entries(config: BrokerConfig, overrides: dict[str, str]) -> list[DescribedConfig]:
    """Every topic key of a topic with ``overrides`` on a broker with ``config``, sorted by
    name (also CreateTopics' answer from v5)."""
    values = config.log_config(overrides).to_props()
    broker = config.config
    entries = []
    for name in sorted(values):
        synonyms = [ConfigSynonym(name, overrides[name], TOPIC_CONFIG)] if name in overrides else []
        for broker_key in broker_synonyms(name):
            synonyms += _broker_synonyms(config, broker.definition.keys[broker_key])
        key = LOG_CONFIG_DEF.keys[name]
        entries.append(
            DescribedConfig(
                name,
                config_text(values[name]),
                synonyms[0].source if synonyms else DEFAULT_CONFIG,
                read_only=False,
                config_type=_CONFIG_TYPES[key.type],
                documentation=key.doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def _broker_synonyms(config: BrokerConfig, key: ConfigKey) -> list[ConfigSynonym]:
    """The broker-level sources of ``key``, highest precedence first."""
    broker = config.config
    synonyms = [
        ConfigSynonym(key.name, layer[key.name], source)
        for layer, source in (
            (config.dynamic.own, DYNAMIC_BROKER_CONFIG),
            (config.dynamic.cluster_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
        )
        if key.name in layer
    ]
    if broker.is_set(key.name):
        synonyms.append(
            ConfigSynonym(key.name, config_text(broker.values[key.name]), STATIC_BROKER_CONFIG)
        )
    if key.default is not None:
        synonyms.append(ConfigSynonym(key.name, config_text(key.default), DEFAULT_CONFIG))
    return synonyms


def _broker_configs(broker: AdminServices, name: str) -> list[DescribedConfig]:
    config = broker.config.config
    if name == "":  # the cluster-wide dynamic defaults
        defaults = broker.config.dynamic.cluster_default
        return [
            DescribedConfig(
                key_name,
                value,
                DYNAMIC_DEFAULT_BROKER_CONFIG,
                read_only=False,
                config_type=_CONFIG_TYPES[config.definition.keys[key_name].type],
                documentation=config.definition.keys[key_name].doc,
                synonyms=(ConfigSynonym(key_name, value, DYNAMIC_DEFAULT_BROKER_CONFIG),),
            )
            for key_name, value in sorted(defaults.items())
        ]
    try:
        broker_id = int(name)
    except ValueError:
        raise InvalidRequestError(f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != broker.broker_id:
        raise InvalidRequestError(
            f"Unexpected broker id, expected {broker.broker_id} or empty string, but received "
            f"{name}"
        )
    effective = broker.config.dynamic.effective or config
    entries = []
    for key_name in sorted(config.values):
        key = config.definition.keys[key_name]
        synonyms = _broker_synonyms(broker.config, key)
        entries.append(
            DescribedConfig(
                key_name,
                config_text(effective.values[key_name]),
                synonyms[0].source if synonyms else DEFAULT_CONFIG,
                read_only=key_name not in DYNAMIC_BROKER_KEYS,
                config_type=_CONFIG_TYPES[key.type],
                documentation=key.doc,
                synonyms=tuple(synonyms),
            )
        )
    return entries


# -- DescribeLogDirs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogDirPartition:
    tp: TopicPartition
    size_bytes: int
    offset_lag: int


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir (its absolute path): KAFKA_STORAGE_ERROR when offline; the partitions it
    holds; the file system's total and usable bytes (-1: unknown)."""

    path: str
    error: KafkaError | None = None
    partitions: tuple[LogDirPartition, ...] = ()
    total_bytes: int = -1
    usable_bytes: int = -1


def describe_log_dirs(
    broker: AdminServices, wanted: Collection[TopicPartition] | None
) -> list[LogDirDescription]:
    """Kafka's ``describeLogDirs``: every log dir of this broker in ``log.dirs`` order, with
    the partitions of ``wanted`` (None: all) it holds. The offset lag is that of the current
    replica (high watermark minus log end offset, at least 0): kafkasim has no future
    replicas (no reassignment between log dirs)."""
    manager = broker.replica_manager.log_manager
    logs = manager.logs
    out = []
    for directory in manager.dirs:
        path = str(Path(directory).absolute())
        if directory in manager.offline_dirs:
            out.append(
                LogDirDescription(path, KafkaStorageError(f"Log directory {path} is offline"))
            )
            continue
        try:
            usage = shutil.disk_usage(directory)
        except OSError:
            total = usable = -1
        else:
            total, usable = usage.total, usage.free
        held = [
            LogDirPartition(tp, log.size_in_bytes, max(log.high_watermark - log.log_end_offset, 0))
            for tp, log in sorted(logs.items())
            if manager.dir_of(tp) == directory and (wanted is None or tp in wanted)
        ]
        out.append(LogDirDescription(path, None, tuple(held), total, usable))
    return out


# -- DescribeProducers ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class PartitionProducers:
    tp: TopicPartition
    error: KafkaError | None = None
    producers: tuple[ActiveProducer, ...] = ()


def describe_producers(
    broker: AdminServices, partitions: Sequence[TopicPartition]
) -> list[PartitionProducers]:
    """The producers each partition's log remembers (Kafka's ``activeProducerState``): any
    replica on this broker answers; a partition it does not hold is NOT_LEADER_OR_FOLLOWER
    when the cluster has it, else UNKNOWN_TOPIC_OR_PARTITION; one whose topic the caller may
    not READ, TOPIC_AUTHORIZATION_FAILED (as Kafka)."""
    out = []
    hosted = broker.replica_manager.partitions
    refused = authz_replica.topic_refusals(
        request_auth(broker, "DescribeProducers"), AclOperation.READ, partitions
    )
    for tp in partitions:
        partition = hosted.get(tp)
        if tp in refused:
            out.append(PartitionProducers(tp, refused[tp]))
            continue
        if partition is None:
            error: KafkaError = (
                NotLeaderOrFollowerError(f"Broker {broker.broker_id} holds no replica of {tp}")
                if tp in broker.metadata.partitions
                else UnknownTopicOrPartitionError(f"{tp} does not exist")
            )
            out.append(PartitionProducers(tp, error))
            continue
        entries = partition.log.producer_state.active_producers
        out.append(
            PartitionProducers(
                tp,
                None,
                tuple(
                    ActiveProducer(
                        pid,
                        e.producer_epoch,
                        e.last_seq,
                        e.last_timestamp,
                        e.coordinator_epoch,
                        -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
                    )
                    for pid, e in sorted(entries.items())
                ),
            )
        )
    return out
