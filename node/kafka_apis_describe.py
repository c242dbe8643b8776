"""The admin requests a broker answers itself on Kafka's protocol: DescribeConfigs,
DescribeCluster, DeleteRecords, DescribeLogDirs and DescribeProducers, translated into the
wire-free calls the gRPC front door makes too (``node.broker_admin``, the replica manager's
``delete_records``, the metadata cache) and back. Pure translations (``*_params``,
``*_response``) are module functions, unit-tested without a broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node import authz_replica, broker_admin
from kafkasim.node import replica_types as rt
from kafkasim.node.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafkasim.node.apis import BrokerServices
from kafkasim.node.apis_replica import error_code
from kafkasim.node.authz import ClusterAuthorizationFailed, request_auth
from kafkasim.node.kafka_codec import (
    AUTHORIZED_OPERATIONS_OMITTED,
    KafkaRequest,
    build,
    error_message,
    group_by_topic,
    millis,
    response_schema,
)
from kafkasim.node.metadata_cache import ClusterView

DELETE_RECORDS, DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS = 21, 32, 35
DESCRIBE_CLUSTER, DESCRIBE_PRODUCERS = 60, 61

ENDPOINT_TYPE_BROKER = 1  # DescribeCluster v1's endpoint_type (2: KRaft controllers)
UNSUPPORTED_ENDPOINT_TYPE = error_for_name("UNSUPPORTED_ENDPOINT_TYPE").code


# -- DescribeConfigs ----------------------------------------------------------------------------


def describe_configs_params(body: Any) -> list[broker_admin.ConfigResource]:
    """Null or empty ``configuration_keys``: every key (as Kafka)."""
    return [
        broker_admin.ConfigResource(
            int(r.resource_type),
            str(r.resource_name),
            None if r.configuration_keys is None else frozenset(r.configuration_keys),
        )
        for r in body.resources
    ]


def describe_configs_response(
    request: KafkaRequest, answers: Sequence[broker_admin.ResourceConfigs]
) -> Any:
    """Synonyms only when asked for (v1+), documentation only when asked for (v3+)."""
    body = request.body
    synonyms = bool(getattr(body, "include_synonyms", False))
    documentation = bool(getattr(body, "include_documentation", False))
    return build(
        response_schema(request),
        results=[
            {
                "error_code": error_code(a.error),
                "error_message": error_message(a.error),
                "resource_type": a.resource_type,
                "resource_name": a.resource_name,
                "configs": [
                    {
                        "name": c.name,
                        "value": c.value,
                        "read_only": c.read_only,
                        "config_source": c.source,
                        "is_sensitive": c.is_sensitive,
                        "synonyms": [
                            {"name": s.name, "value": s.value, "source": s.source}
                            for s in (c.synonyms if synonyms else ())
                        ],
                        "config_type": c.config_type,
                        "documentation": c.documentation if documentation else None,
                    }
                    for c in a.configs
                ],
            }
            for a in answers
        ],
    )


# -- DescribeCluster ----------------------------------------------------------------------------


def describe_cluster_response(
    request: KafkaRequest, view: ClusterView, operations: int = AUTHORIZED_OPERATIONS_OMITTED
) -> Any:
    """The live brokers on the asking listener and the controller (-1: unknown). A v1 request
    for KRaft controllers' endpoints is UNSUPPORTED_ENDPOINT_TYPE (a ZooKeeper-mode broker's
    answer)."""
    endpoint_type = int(getattr(request.body, "endpoint_type", ENDPOINT_TYPE_BROKER))
    schema = response_schema(request)
    if endpoint_type != ENDPOINT_TYPE_BROKER:
        return build(
            schema,
            error_code=UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"The broker does not support endpoint type {endpoint_type}",
            endpoint_type=endpoint_type,
            cluster_id=view.cluster_id,
            controller_id=-1,
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    return build(
        schema,
        error_code=0,
        error_message=None,
        endpoint_type=endpoint_type,
        cluster_id=view.cluster_id,
        controller_id=view.controller_id,
        brokers=[
            {"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in view.brokers
        ],
        cluster_authorized_operations=operations,
    )


# -- DeleteRecords ------------------------------------------------------------------------------


def delete_records_params(body: Any) -> rt.DeleteRecordsParams:
    """Offset -1 means the high watermark (Kafka's ``HIGH_WATERMARK``)."""
    return rt.DeleteRecordsParams(
        millis(body.timeout, 0),
        tuple(
            rt.DeleteRecordsPartition(TopicPartition(t.name, int(p.partition_index)), int(p.offset))
            for t in body.topics
            for p in t.partitions
        ),
    )


def delete_records_response(
    schema: type[Any], results: Sequence[rt.DeleteRecordsPartitionResult]
) -> Any:
    by_topic = group_by_topic(
        (
            r.tp.topic,
            {
                "partition_index": r.tp.partition,
                "low_watermark": r.low_watermark,
                "error_code": error_code(r.error),
            },
        )
        for r in results
    )
    return build(
        schema, topics=[{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    )


# -- DescribeLogDirs ----------------------------------------------------------------------------


def describe_log_dirs_params(body: Any) -> set[TopicPartition] | None:
    if body.topics is None:
        return None
    return {TopicPartition(t.topic, int(p)) for t in body.topics for p in t.partitions}


def describe_log_dirs_response(
    schema: type[Any], dirs: Sequence[broker_admin.LogDirDescription], top_error: int = 0
) -> Any:
    results = []
    for d in dirs:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for p in d.partitions:
            by_topic.setdefault(p.tp.topic, []).append(
                {
                    "partition_index": p.tp.partition,
                    "partition_size": p.size_bytes,
                    "offset_lag": p.offset_lag,
                    "is_future_key": False,
                }
            )
        results.append(
            {
                "error_code": error_code(d.error),
                "log_dir": d.path,
                "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()],
                "total_bytes": d.total_bytes,
                "usable_bytes": d.usable_bytes,
            }
        )
    return build(schema, error_code=top_error, results=results)


# -- DescribeProducers --------------------------------------------------------------------------


def describe_producers_params(body: Any) -> list[TopicPartition]:
    return [TopicPartition(t.name, int(p)) for t in body.topics for p in t.partition_indexes]


def describe_producers_response(
    schema: type[Any], answers: Sequence[broker_admin.PartitionProducers]
) -> Any:
    by_topic = group_by_topic(
        (
            a.tp.topic,
            {
                "partition_index": a.tp.partition,
                "error_code": error_code(a.error),
                "error_message": error_message(a.error),
                "active_producers": [
                    {
                        "producer_id": p.producer_id,
                        "producer_epoch": p.producer_epoch,
                        "last_sequence": p.last_sequence,
                        "last_timestamp": p.last_timestamp,
                        "coordinator_epoch": p.coordinator_epoch,
                        "current_txn_start_offset": p.current_txn_start_offset,
                    }
                    for p in a.producers
                ],
            },
        )
        for a in answers
    )
    return build(
        schema, topics=[{"name": name, "partitions": parts} for name, parts in by_topic.items()]
    )


# -- the handlers -------------------------------------------------------------------------------


class KafkaDescribeApis:
    """The admin requests one broker answers itself; ``listener``: the Kafka listener's name
    (DescribeCluster answers the brokers' addresses on it)."""

    def __init__(self, broker: BrokerServices, listener: str | None) -> None:
        self.broker = broker
        self.listener = listener

    def table(self) -> dict[int, tuple[int, int, Any]]:
        return {
            DESCRIBE_CONFIGS: (1, 4, self.describe_configs),
            DESCRIBE_CLUSTER: (0, 1, self.describe_cluster),
            DELETE_RECORDS: (0, 2, self.delete_records),
            DESCRIBE_LOG_DIRS: (1, 4, self.describe_log_dirs),
            DESCRIBE_PRODUCERS: (0, 0, self.describe_producers),
        }

    async def describe_configs(self, request: KafkaRequest) -> Any:
        answers = await broker_admin.describe_configs(
            self.broker, describe_configs_params(request.body)
        )
        return describe_configs_response(request, answers)

    async def describe_cluster(self, request: KafkaRequest) -> Any:
        """Anyone may ask; the cluster's authorized operations (when asked) need DESCRIBE on
        it (0 without), as Kafka's ``computeDescribeClusterResponse``."""
        operations = AUTHORIZED_OPERATIONS_OMITTED
        if getattr(request.body, "include_cluster_authorized_operations", False):
            auth = request_auth(self.broker, "DescribeCluster")
            operations = (
                auth.operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if auth.cluster(AclOperation.DESCRIBE)
                else 0
            )
        return describe_cluster_response(
            request, self.broker.metadata.describe([], self.listener), operations
        )

    async def delete_records(self, request: KafkaRequest) -> Any:
        results = await authz_replica.delete_records(
            self.broker, delete_records_params(request.body)
        )
        return delete_records_response(response_schema(request), results)

    async def describe_log_dirs(self, request: KafkaRequest) -> Any:
        """DESCRIBE on the cluster, else no log dirs and CLUSTER_AUTHORIZATION_FAILED (v3+
        carry it; older versions see an empty answer), as Kafka."""
        auth = request_auth(self.broker, "DescribeLogDirs")
        if not auth.cluster(AclOperation.DESCRIBE):
            return describe_log_dirs_response(
                response_schema(request), [], ClusterAuthorizationFailed.code
            )
        dirs = broker_admin.describe_log_dirs(self.broker, describe_log_dirs_params(request.body))
        return describe_log_dirs_response(response_schema(request), dirs)

    async def describe_producers(self, request: KafkaRequest) -> Any:
        answers = broker_admin.describe_producers(
            self.broker, describe_producers_params(request.body)
        )
        return describe_producers_response(response_schema(request), answers)
