"""The gRPC front door of the controller's admin calls (the admin part of Kafka's
``KafkaApis``): each function translates a protobuf request into the domain entry points of
:class:`~controller.controller.Controller` (``create_topics``, ``delete_topics``,
``create_partitions``, ``alter_topic_configs``, ``elect_leaders``, ``controlled_shutdown``: the
domain values of ``controller.api``) and their results, or the error they raise, into the
response. The controller never sees these protobuf forms; another front door (Kafka's binary
protocol) calls the same entry points.

:func:`not_controller_response` answers for a broker that hosts no controller at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from kafkasim.common.errors import KafkaError
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import (
    INTERNAL_TOPICS,
    ElectionOutcome,
    ElectionType,
    InvalidRequestError,
    NewPartitions,
    NewTopic,
    NotControllerError,
    TopicConfigAlteration,
    TopicResult,
)
from kafkasim.controller.topic_admin import error_result
from kafkasim.controller.topic_configs import AlterConfigOp
from kafkasim.proto import kafkasim_pb2 as pb

RESOURCE_TYPE_TOPIC = 2  # Kafka's ConfigResource.Type.TOPIC


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

    async def alter_topic_configs(
        self, alterations: Sequence[TopicConfigAlteration], *, validate_only: bool = False
    ) -> list[TopicResult]: ...

    async def controlled_shutdown(
        self, broker_id: int, broker_epoch: int
    ) -> list[TopicPartition]: ...

    async def elect_leaders(
        self,
        election_type: ElectionType,
        partitions: Sequence[TopicPartition] | None = None,
    ) -> dict[TopicPartition, ElectionOutcome]: ...


async def create_topics(
    controller: AdminCalls, request: pb.CreateTopicsRequest
) -> pb.CreateTopicsResponse:
    """Clients send -1 for "broker default" (proto3 reads an unset count as 0, which is
    INVALID_PARTITIONS, except next to a manual assignment, where it counts as unset).

    An internal topic (``__consumer_offsets``, ``__transaction_state``) is refused with
    INVALID_REQUEST: only the brokers create it, with the partition count their
    coordinator hashes over (a client's one-partition ``__consumer_offsets`` left every
    group hashing elsewhere without a coordinator). ZooKeeper-mode Kafka has no such
    check (its brokers create the topic by writing ZooKeeper themselves, as kafkasim's do,
    see :mod:`node.topic_creation`); the refusal and its message are those of Kafka's
    KRaft controller for its internal topic."""
    internal = [t.name for t in request.topics if t.name in INTERNAL_TOPICS]
    if internal:
        refused = {
            name: TopicResult(
                name,
                InvalidRequestError.code,
                f"Creation of internal topic {name} is prohibited.",
            )
            for name in internal
        }
        rest = pb.CreateTopicsRequest()
        rest.CopyFrom(request)
        del rest.topics[:]
        rest.topics.extend(t for t in request.topics if t.name not in INTERNAL_TOPICS)
        created = iter((await create_topics(controller, rest)).topics if rest.topics else [])
        return pb.CreateTopicsResponse(
            topics=[
                _topic_result_pb(refused[t.name]) if t.name in refused else next(created)
                for t in request.topics
            ]
        )
    topics = [
        NewTopic(
            t.name,
            -1 if t.assignments and t.num_partitions == 0 else t.num_partitions,
            -1 if t.assignments and t.replication_factor == 0 else t.replication_factor,
            {a.partition: list(a.broker_ids) for a in t.assignments} or None,
            # Sorted: a protobuf map iterates in a per-process order (the simulation's
            # traces, and the log line naming the configs, must not depend on it).
            dict(sorted(t.configs.items())),
        )
        for t in request.topics
    ]
    try:
        results = await controller.create_topics(
            topics, validate_only=request.validate_only, timeout_ms=request.timeout_ms
        )
    except KafkaError as e:
        results = [error_result(t.name, e) for t in topics]
    return pb.CreateTopicsResponse(topics=[_topic_result_pb(r) for r in results])


async def delete_topics(
    controller: AdminCalls, request: pb.DeleteTopicsRequest
) -> pb.DeleteTopicsResponse:
    names = list(request.topic_names)
    try:
        results = await controller.delete_topics(names, timeout_ms=request.timeout_ms)
    except KafkaError as e:
        results = [error_result(n, e) for n in names]
    return pb.DeleteTopicsResponse(topics=[_topic_result_pb(r) for r in results])


async def create_partitions(
    controller: AdminCalls, request: pb.CreatePartitionsRequest
) -> pb.CreatePartitionsResponse:
    asks = [
        NewPartitions(
            t.name,
            t.count,
            [list(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition)] or None,
        )
        for t in request.topics
    ]
    try:
        results = await controller.create_partitions(
            asks, validate_only=request.validate_only, timeout_ms=request.timeout_ms
        )
    except KafkaError as e:
        results = [error_result(a.topic, e) for a in asks]
    return pb.CreatePartitionsResponse(results=[_topic_result_pb(r) for r in results])


async def incremental_alter_configs(
    controller: AdminCalls, request: pb.IncrementalAlterConfigsRequest
) -> pb.IncrementalAlterConfigsResponse:
    """Topic resources go to :meth:`Controller.alter_topic_configs`; other resource types are
    refused with INVALID_REQUEST (kafkasim has no dynamic broker configs)."""
    response = pb.IncrementalAlterConfigsResponse()
    alterations = [
        TopicConfigAlteration(
            r.resource_name,
            [AlterConfigOp(c.name, c.config_operation, c.value) for c in r.configs],
        )
        for r in request.resources
        if r.resource_type == RESOURCE_TYPE_TOPIC
    ]
    try:
        results = await controller.alter_topic_configs(
            alterations, validate_only=request.validate_only
        )
    except KafkaError as e:
        results = [error_result(a.topic, e) for a in alterations]
    by_topic = iter(results)
    for r in request.resources:
        answer = response.responses.add(
            resource_type=r.resource_type, resource_name=r.resource_name
        )
        if r.resource_type != RESOURCE_TYPE_TOPIC:
            answer.error_code = InvalidRequestError.code
            answer.error_message = (
                f"resource type {r.resource_type} cannot be altered here: only topics (2)"
            )
            continue
        result = next(by_topic)
        answer.error_code, answer.error_message = result.error_code, result.error_message
    return response


async def controlled_shutdown(
    controller: AdminCalls, request: pb.ControlledShutdownRequest
) -> pb.ControlledShutdownResponse:
    try:
        remaining = await controller.controlled_shutdown(request.broker_id, request.broker_epoch)
    except KafkaError as e:
        return pb.ControlledShutdownResponse(error_code=e.code)
    return pb.ControlledShutdownResponse(
        remaining_partitions=[
            pb.TopicPartitionId(topic=tp.topic, partition=tp.partition) for tp in remaining
        ]
    )


async def elect_leaders(
    controller: AdminCalls, request: pb.ElectLeadersRequest
) -> pb.ElectLeadersResponse:
    try:
        election_type = ElectionType(request.election_type)
    except ValueError:
        return pb.ElectLeadersResponse(error_code=InvalidRequestError.code)
    partitions = [TopicPartition(p.topic, p.partition) for p in request.partitions] or None
    try:
        outcomes = await controller.elect_leaders(election_type, partitions)
    except KafkaError as e:
        return pb.ElectLeadersResponse(error_code=e.code)
    return pb.ElectLeadersResponse(
        results=[
            pb.PartitionError(topic=tp.topic, partition=tp.partition, error_code=o.error_code)
            for tp, o in sorted(outcomes.items())
        ]
    )


def _topic_result_pb(result: TopicResult) -> pb.TopicResult:
    return pb.TopicResult(
        name=result.name, error_code=result.error_code, error_message=result.error_message
    )


def not_controller_response(request: Any, response_cls: type[Any]) -> Any:
    """An admin response saying NOT_CONTROLLER for every item (or at the top level)."""
    response = response_cls()
    if hasattr(response, "error_code"):
        response.error_code = NotControllerError.code
        return response
    if isinstance(request, pb.IncrementalAlterConfigsRequest):
        for resource in request.resources:
            response.responses.add(
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                error_code=NotControllerError.code,
                error_message="This is not the controller",
            )
        return response
    items = getattr(request, "topics", None) or getattr(request, "topic_names", [])
    field = "topics" if hasattr(response, "topics") else "results"
    for item in items:
        name = item if isinstance(item, str) else item.name
        getattr(response, field).add(
            name=name,
            error_code=NotControllerError.code,
            error_message="This is not the controller",
        )
    return response
