"""The gRPC front door of the admin calls (the admin part of Kafka's ``KafkaApis``): each
function translates a protobuf request into the wire-free calls of ``node.admin_calls`` (the
controller's entry points ``create_topics``, ``delete_topics``, ``create_partitions``,
``elect_leaders``; ``controlled_shutdown`` directly; config changes, which any broker serves
by writing ZooKeeper itself) and their results into the response; ``describe_producers``
answers from this broker's replicas (``node.broker_admin``). The controller never sees
these protobuf forms; Kafka's binary protocol (``node.kafka_apis_admin``) makes the same calls.

:func:`not_controller_response` answers for a broker that hosts no controller at all.
"""

from __future__ import annotations

from typing import Any

from kafkasim.common.coordination import Coordination
from kafkasim.common.errors import KafkaError
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import (
    NewPartitions,
    NewTopic,
    NotControllerError,
    TopicResult,
)
from kafkasim.controller.topic_configs import AlterConfigOp
from kafkasim.node import admin_calls, authz_admin, broker_admin
from kafkasim.node.admin_calls import AdminCalls, ConfigAlteration
from kafkasim.node.authz import RequestAuth
from kafkasim.node.config import BrokerConfig
from kafkasim.proto import kafkasim_pb2 as pb


async def create_topics(
    controller: AdminCalls, request: pb.CreateTopicsRequest, auth: RequestAuth | None = None
) -> pb.CreateTopicsResponse:
    """Clients send -1 for "broker default" (proto3 reads an unset count as 0, which is
    INVALID_PARTITIONS, except next to a manual assignment, where it counts as unset).
    Internal topics are refused (``node.admin_calls.create_topics``)."""
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
    results = await admin_calls.create_topics(
        controller,
        topics,
        validate_only=request.validate_only,
        timeout_ms=request.timeout_ms,
        auth=auth,
    )
    return pb.CreateTopicsResponse(topics=[_topic_result_pb(r) for r in results])


async def delete_topics(
    controller: AdminCalls, request: pb.DeleteTopicsRequest, auth: RequestAuth | None = None
) -> pb.DeleteTopicsResponse:
    results = await admin_calls.delete_topics(
        controller, list(request.topic_names), timeout_ms=request.timeout_ms, auth=auth
    )
    return pb.DeleteTopicsResponse(topics=[_topic_result_pb(r) for r in results])


async def create_partitions(
    controller: AdminCalls, request: pb.CreatePartitionsRequest, auth: RequestAuth | None = None
) -> pb.CreatePartitionsResponse:
    asks = [
        NewPartitions(
            t.name,
            t.count,
            [list(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition)] or None,
        )
        for t in request.topics
    ]
    results = await admin_calls.create_partitions(
        controller,
        asks,
        validate_only=request.validate_only,
        timeout_ms=request.timeout_ms,
        auth=auth,
    )
    return pb.CreatePartitionsResponse(results=[_topic_result_pb(r) for r in results])


async def incremental_alter_configs(
    zk: Coordination,
    request: pb.IncrementalAlterConfigsRequest,
    broker_config: BrokerConfig,
    auth: RequestAuth | None = None,
) -> pb.IncrementalAlterConfigsResponse:
    """Served by any broker: topic and broker resources are written to ZooKeeper through
    this broker's session ``zk`` (``node.topic_config_admin``, ``node.broker_config_admin``);
    other resource types are refused with INVALID_REQUEST."""
    results = await admin_calls.alter_configs(
        zk,
        [
            ConfigAlteration(
                r.resource_type,
                r.resource_name,
                [AlterConfigOp(c.name, c.config_operation, c.value) for c in r.configs],
            )
            for r in request.resources
        ],
        validate_only=request.validate_only,
        broker_config=broker_config,
        auth=auth,
    )
    return pb.IncrementalAlterConfigsResponse(
        responses=[
            pb.AlterConfigsResourceResponse(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_code=r.error_code,
                error_message=r.error_message,
            )
            for r in results
        ]
    )


async def controlled_shutdown(
    controller: AdminCalls, request: pb.ControlledShutdownRequest, auth: RequestAuth | None = None
) -> pb.ControlledShutdownResponse:
    """Refused (CLUSTER_AUTHORIZATION_FAILED) without CLUSTER_ACTION on the cluster."""
    refusal = None if auth is None else authz_admin.cluster_action_refusal(auth)
    if refusal is not None:
        return pb.ControlledShutdownResponse(error_code=refusal.code)
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
    controller: AdminCalls, request: pb.ElectLeadersRequest, auth: RequestAuth | None = None
) -> pb.ElectLeadersResponse:
    partitions = [TopicPartition(p.topic, p.partition) for p in request.partitions] or None
    outcomes = await admin_calls.elect_leaders(controller, request.election_type, partitions, auth)
    if isinstance(outcomes, KafkaError):
        return pb.ElectLeadersResponse(error_code=outcomes.code)
    return pb.ElectLeadersResponse(
        results=[
            pb.PartitionError(topic=tp.topic, partition=tp.partition, error_code=o.error_code)
            for tp, o in sorted(outcomes.items())
        ]
    )


def describe_producers(
    broker: broker_admin.AdminServices, request: pb.DescribeProducersRequest
) -> pb.DescribeProducersResponse:
    """Kafka's ``handleDescribeProducersRequest`` over gRPC: the producers this broker's
    replica of each partition remembers (``node.broker_admin.describe_producers``)."""
    answers = broker_admin.describe_producers(
        broker, [TopicPartition(p.topic, p.partition) for p in request.partitions]
    )
    response = pb.DescribeProducersResponse()
    for answer in answers:
        result = response.partitions.add(
            topic=answer.tp.topic,
            partition=answer.tp.partition,
            error_code=answer.error.code if answer.error is not None else 0,
            error_message=answer.error.message if answer.error is not None else "",
        )
        for p in answer.producers:
            result.active_producers.add(
                producer_id=p.producer_id,
                producer_epoch=p.producer_epoch,
                last_sequence=p.last_sequence,
                last_timestamp=p.last_timestamp,
                coordinator_epoch=p.coordinator_epoch,
                current_txn_start_offset=p.current_txn_start_offset,
            )
    return response


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
