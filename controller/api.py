"""What the controller's callers hand it and get back: its configuration, the admin calls'
values and results, and the errors it answers with.

Values only (frozen dataclasses and error classes); the controller itself is
:class:`controller.controller.Controller`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType
from typing import Any

from kafkasim.common.config import Config
from kafkasim.common.errors import KafkasimError, error_for_name
from kafkasim.controller import zk_data
from kafkasim.controller.topic_configs import AlterConfigOp

# Kafka's Topic.isInternal: the group coordinator's and the transaction coordinator's topics.
# Only brokers create them (on first use); a CreateTopics request naming one is refused.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

NotControllerError = error_for_name("NOT_CONTROLLER")
StaleBrokerEpochError = error_for_name("STALE_BROKER_EPOCH")
BrokerNotAvailableError = error_for_name("BROKER_NOT_AVAILABLE")
TopicAlreadyExistsError = error_for_name("TOPIC_ALREADY_EXISTS")
InvalidTopicError = error_for_name("INVALID_TOPIC_EXCEPTION")
InvalidRequestError = error_for_name("INVALID_REQUEST")
InvalidPartitionsError = error_for_name("INVALID_PARTITIONS")
UnknownTopicOrPartitionError = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
RequestTimedOutError = error_for_name("REQUEST_TIMED_OUT")


class ControllerMovedError(KafkasimError):
    """A newer controller exists (the epoch znode moved, or a state carries a newer epoch).

    Raised inside event handling; the controller resigns. Callers of the admin API see
    NOT_CONTROLLER instead.
    """


class ElectionType(IntEnum):
    """ElectLeaders' election types (Kafka's ``ElectionType``)."""

    PREFERRED = 0
    UNCLEAN = 1


# -- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The broker settings the controller reads (Kafka's names in each field's comment)."""

    unclean_leader_election_enable: bool = False  # unclean.leader.election.enable
    delete_topic_enable: bool = True  # delete.topic.enable
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    controller_socket_timeout_ms: int = 30_000  # controller.socket.timeout.ms
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_seconds: int = 300  # leader.imbalance.check.interval.seconds
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    request_backoff_ms: int = 100  # first retry of a controller request
    request_backoff_max_ms: int = 1_000  # the retry backoff doubles up to this
    zk_attempts_max: int = 10  # attempts of one ZooKeeper operation on connection loss
    zk_backoff_max_ms: int = 2_000
    cluster_id: str = ""  # used when /cluster/id is absent
    # inter.broker.listener.name: the listener of each registration the controller sends to
    # (and tells brokers to replicate over); resolved by BrokerConfig.inter_broker_listener.
    inter_broker_listener_name: str = "PLAINTEXT"

    _BROKER_KEYS = MappingProxyType(
        {
            "unclean.leader.election.enable": "unclean_leader_election_enable",
            "delete.topic.enable": "delete_topic_enable",
            "num.partitions": "num_partitions",
            "default.replication.factor": "default_replication_factor",
            "controller.socket.timeout.ms": "controller_socket_timeout_ms",
            "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
            "leader.imbalance.check.interval.seconds": "leader_imbalance_check_interval_seconds",
            "leader.imbalance.per.broker.percentage": "leader_imbalance_per_broker_percentage",
        }
    )

    @classmethod
    def from_broker_config(cls, config: Config, **overrides: Any) -> ControllerConfig:
        """The controller's view of a parsed broker config (keys it lacks keep defaults)."""
        values: dict[str, Any] = {}
        for key, attr in cls._BROKER_KEYS.items():
            if key in config.definition.keys:
                values[attr] = config[key]
        values.update(overrides)
        return cls(**values)


# -- admin API values -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. -1 means the broker default (``num.partitions``,
    ``default.replication.factor``); ``assignments`` (partition → replicas) excludes both."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow ``topic`` to ``count`` partitions; ``assignments`` lists the new ones' replicas."""

    topic: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class TopicConfigAlteration:
    """IncrementalAlterConfigs for one topic: its operations, applied in order."""

    topic: str
    ops: Sequence[AlterConfigOp]


@dataclass(frozen=True, slots=True)
class TopicResult:
    """The outcome for one topic of an admin call (error code 0: NONE)."""

    name: str
    error_code: int = 0
    error_message: str = ""

    @property
    def ok(self) -> bool:
        return self.error_code == 0


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """The outcome of an ElectLeaders request for one partition."""

    error_code: int = 0
    error_message: str = ""
    leader: int = zk_data.NO_LEADER
