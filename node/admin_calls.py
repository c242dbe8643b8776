"""The admin calls as both front doors make them, wire-free: the gRPC request layer
(``node.apis_admin``) and Kafka's (``node.kafka_apis_admin``) build these domain values from
their own structs, call these functions, and translate the results back.

Topic changes (CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders) call one entry
point of :class:`~controller.controller.Controller` (the values of ``controller.api``) and turn
an error raised for the whole call (NOT_CONTROLLER) into one result per item, as Kafka
answers: Kafka's clients send them to the controller. Config changes (AlterConfigs,
IncrementalAlterConfigs) are served by any broker, which writes ZooKeeper itself
(``node.topic_config_admin``), as Kafka's brokers do. What is checked here rather than further
in is what Kafka checks in its request layer: internal topics, null config values, the
resource types a config alteration may name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kafkasim.common.coordination import Coordination
from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import (
    INTERNAL_TOPICS,
    ElectionOutcome,
    ElectionType,
    InvalidRequestError,
    NewPartitions,
    NewTopic,
    TopicConfigAlteration,
    TopicResult,
)
from kafkasim.controller.topic_admin import error_result
from kafkasim.controller.topic_configs import AlterConfigOp, OpType
from kafkasim.node import authz_admin, topic_config_admin
from kafkasim.node.acl import AclOperation
from kafkasim.node.authz import RequestAuth
from kafkasim.node.broker_config_admin import alter_broker_config
from kafkasim.node.config import BrokerConfig
from kafkasim.storage.config import LOG_CONFIG_DEF

# Kafka's ConfigResource.Type numbers.
RESOURCE_TYPE_TOPIC = 2
RESOURCE_TYPE_BROKER = 4
RESOURCE_TYPE_BROKER_LOGGER = 8

NotControllerError = error_for_name("NOT_CONTROLLER")


class AdminCalls(Protocol):
    """The controller's admin entry points these functions call."""

    async def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout_ms: int = 0
    ) -> list[TopicResult]: ...

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 0
    ) -> list[TopicResult]: ...

    async def create_partitions(
        self,
        requests: Sequence[NewPartitions],
        *,
        validate_only: bool = False,
        timeout_ms: int = 0,
    ) -> list[TopicResult]: ...

    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> list[TopicPartition]: ...

    async def elect_leaders(
        self,
        election_type: ElectionType,
        partitions: Sequence[TopicPartition] | None = None,
    ) -> dict[TopicPartition, ElectionOutcome]: ...


def _active(controller: AdminCalls | None) -> AdminCalls:
    """``controller``, or NOT_CONTROLLER when this broker hosts none (Kafka's message)."""
    if controller is None:
        raise NotControllerError("This is not the correct controller for this cluster.")
    return controller


async def create_topics(
    controller: AdminCalls | None,
    topics: Sequence[NewTopic],
    *,
    validate_only: bool = False,
    timeout_ms: int = 0,
    refused: Mapping[str, TopicResult] | None = None,
    auth: RequestAuth | None = None,
) -> list[TopicResult]:
    """One result per topic, in order. ``refused``: topics the front door already refused
    (a bad request field), answered as given and not sent on. ``auth``: the request's
    authorization, checked as ``node.authz_admin`` says (None: the broker's own calls).

    An internal topic (``__consumer_offsets``, ``__transaction_state``) is refused with
    INVALID_REQUEST: only the brokers create it, with the partition count their
    coordinator hashes over (a client's one-partition ``__consumer_offsets`` left every
    group hashing elsewhere without a coordinator). ZooKeeper-mode Kafka has no such
    check (its brokers create the topic by writing ZooKeeper themselves, as kafkasim's do,
    see :mod:`node.topic_creation`); the refusal and its message are those of Kafka's
    KRaft controller for its internal topic."""
    answers = dict(refused or {})
    if auth is not None:
        names = [t.name for t in topics if t.name not in answers]
        answers.update(authz_admin.create_topic_refusals(auth, names))
    for topic in topics:
        if topic.name in INTERNAL_TOPICS and topic.name not in answers:
            answers[topic.name] = TopicResult(
                topic.name,
                InvalidRequestError.code,
                f"Creation of internal topic {topic.name} is prohibited.",
            )
    rest = [t for t in topics if t.name not in answers]
    results: list[TopicResult] = []
    if rest:
        try:
            results = await _active(controller).create_topics(
                rest, validate_only=validate_only, timeout_ms=timeout_ms
            )
        except KafkaError as e:
            results = [error_result(t.name, e) for t in rest]
    created = iter(results)
    return [answers[t.name] if t.name in answers else next(created) for t in topics]


async def delete_topics(
    controller: AdminCalls | None,
    names: Sequence[str],
    *,
    timeout_ms: int = 0,
    auth: RequestAuth | None = None,
) -> list[TopicResult]:
    refused = {} if auth is None else authz_admin.delete_topic_refusals(auth, names)
    rest = [n for n in names if n not in refused]
    results: list[TopicResult] = []
    if rest:
        try:
            results = await _active(controller).delete_topics(rest, timeout_ms=timeout_ms)
        except KafkaError as e:
            results = [error_result(n, e) for n in rest]
    done = iter(results)
    return [refused[n] if n in refused else next(done) for n in names]


async def create_partitions(
    controller: AdminCalls | None,
    asks: Sequence[NewPartitions],
    *,
    validate_only: bool = False,
    timeout_ms: int = 0,
    auth: RequestAuth | None = None,
) -> list[TopicResult]:
    refused = (
        {}
        if auth is None
        else authz_admin.create_partitions_refusals(auth, [a.topic for a in asks])
    )
    rest = [a for a in asks if a.topic not in refused]
    results: list[TopicResult] = []
    if rest:
        try:
            results = await _active(controller).create_partitions(
                rest, validate_only=validate_only, timeout_ms=timeout_ms
            )
        except KafkaError as e:
            results = [error_result(a.topic, e) for a in rest]
    done = iter(results)
    return [refused[a.topic] if a.topic in refused else next(done) for a in asks]


@dataclass(frozen=True, slots=True)
class ConfigAlteration:
    """The alteration of one config resource (``resource_type``: Kafka's number)."""

    resource_type: int
    resource_name: str
    ops: Sequence[AlterConfigOp]


@dataclass(frozen=True, slots=True)
class ResourceResult:
    resource_type: int
    resource_name: str
    error_code: int = 0
    error_message: str = ""


def replace_all_ops(configs: Sequence[tuple[str, str | None]]) -> list[AlterConfigOp]:
    """Legacy AlterConfigs as incremental operations: the given keys are SET, every other
    topic config is DELETEd, so that the new overrides are exactly the ones given (Kafka
    replaces the whole set). A null value drops the key (as Kafka's Properties do); a key
    given twice keeps its last value."""
    given: dict[str, str] = {}
    for name, value in configs:
        given.pop(name, None)
        if value is not None:
            given[name] = value
    ops = [AlterConfigOp(name, OpType.SET, value) for name, value in given.items()]
    ops += [AlterConfigOp(name, OpType.DELETE) for name in LOG_CONFIG_DEF.keys if name not in given]
    return ops


async def alter_configs(
    zk: Coordination,
    alterations: Sequence[ConfigAlteration],
    *,
    validate_only: bool,
    refused: Mapping[int, ResourceResult] | None = None,
    broker_config: BrokerConfig | None = None,
    auth: RequestAuth | None = None,
) -> list[ResourceResult]:
    """IncrementalAlterConfigs (and legacy AlterConfigs, see :func:`replace_all_ops`) on any
    broker: topic resources are written to ZooKeeper through this broker's session ``zk``
    (:func:`node.topic_config_admin.alter_topic_configs`); broker resources are refused with
    INVALID_REQUEST (kafkasim has no dynamic broker configs: every broker config is
    read-only, Kafka's answer for a key that cannot be updated dynamically), other types too.
    One result per resource, in order; ``refused`` (by index): answered as given."""
    answers: dict[int, ResourceResult] = dict(refused or {})
    topics: list[tuple[int, TopicConfigAlteration]] = []
    for index, alteration in enumerate(alterations):
        if index in answers:
            continue
        kind, name = alteration.resource_type, alteration.resource_name
        denied = (
            None
            if auth is None
            else authz_admin.config_refusal(auth, AclOperation.ALTER_CONFIGS, kind, name)
        )
        if denied is not None:
            answers[index] = ResourceResult(kind, name, denied.code, denied.message)
            continue
        if kind == RESOURCE_TYPE_TOPIC:
            topics.append((index, TopicConfigAlteration(name, alteration.ops)))
            continue
        if kind == RESOURCE_TYPE_BROKER and broker_config is not None:
            error = await alter_broker_config(
                zk, broker_config, name, alteration.ops, validate_only=validate_only
            )
            answers[index] = ResourceResult(
                kind, name, error.code if error else 0, error.message if error else ""
            )
            continue
        if kind in (RESOURCE_TYPE_BROKER, RESOURCE_TYPE_BROKER_LOGGER):
            keys = ", ".join(op.name for op in alteration.ops)
            message = f"Cannot update these configs dynamically: {keys}"
        else:
            message = (
                f"AlterConfigs is only supported for topics and brokers, but resource type "
                f"is {kind}"
            )
        answers[index] = ResourceResult(kind, name, InvalidRequestError.code, message)
    if topics:
        results = await topic_config_admin.alter_topic_configs(
            zk, [a for _, a in topics], validate_only=validate_only
        )
        for (index, topic_alteration), result in zip(topics, results, strict=True):
            answers[index] = ResourceResult(
                RESOURCE_TYPE_TOPIC,
                topic_alteration.topic,
                result.error_code,
                result.error_message,
            )
    return [answers[i] for i in range(len(alterations))]


async def elect_leaders(
    controller: AdminCalls | None,
    election_type: int,
    partitions: Sequence[TopicPartition] | None,
    auth: RequestAuth | None = None,
) -> dict[TopicPartition, ElectionOutcome] | KafkaError:
    """The outcome per partition, or the error of the whole call (ALTER on the cluster
    refused: CLUSTER_AUTHORIZATION_FAILED; an unknown election type: INVALID_REQUEST;
    NOT_CONTROLLER)."""
    refusal = None if auth is None else authz_admin.cluster_refusal(auth, AclOperation.ALTER)
    if refusal is not None:
        return refusal
    try:
        kind = ElectionType(election_type)
    except ValueError:
        return InvalidRequestError(
            f"Unknown election type {election_type}: 0 (preferred) or 1 (unclean)"
        )
    try:
        return await _active(controller).elect_leaders(kind, partitions)
    except KafkaError as e:
        return e
