"""The partition requests of both front doors, authorized as Kafka's ``KafkaApis`` does, then
handed to the replica manager: the request layers (``node.kafka_apis``, ``node.apis``) call
these instead of the replica manager. A refused partition is answered its error without the
replica manager seeing it (so a refused request changes nothing); the answers come back in
the request's order.

Kafka's decisions:

* Produce: records of a transaction need WRITE on the transactional id, else every partition
  is TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka 3.x: no IDEMPOTENT_WRITE check here, KIP-679;
  InitProducerId checks it); then WRITE on each topic, else TOPIC_AUTHORIZATION_FAILED.
* Fetch: a follower (replica id ≥ 0) needs CLUSTER_ACTION on the cluster, else every partition
  is TOPIC_AUTHORIZATION_FAILED; a consumer needs READ on each topic.
* ListOffsets, DescribeProducers: DESCRIBE, resp. READ on each topic.
* OffsetsForLeaderEpoch: CLUSTER_ACTION on the cluster (a follower, not logged when denied)
  or else DESCRIBE on each topic.
* DeleteRecords: DELETE on each topic.
* WriteTxnMarkers: CLUSTER_ACTION on the cluster, else every partition
  CLUSTER_AUTHORIZATION_FAILED (Kafka's error response for the request).
* DescribeReplicas (kafkasim's, gRPC only: replica states, offsets and ISRs): DESCRIBE on the
  cluster shows every replica, else only those of the topics the caller may DESCRIBE — the
  others are left out, as unknown ones (no error field), like Metadata's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from kafkasim.common.errors import CorruptRecordError, KafkaError
from kafkasim.common.types import TopicPartition
from kafkasim.node import replica_types as rt
from kafkasim.node.acl import AclOperation, ResourceType
from kafkasim.node.acl_authorizer import AclAuthorizer
from kafkasim.node.authz import (
    ClusterAuthorizationFailed,
    RequestAuth,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
    request_auth,
)
from kafkasim.node.replica_manager import ReplicaManager
from kafkasim.storage.records.batch import iter_batches


class ReplicaServices(Protocol):
    @property
    def authorizer(self) -> AclAuthorizer | None: ...

    @property
    def replica_manager(self) -> ReplicaManager: ...


class _HasTp(Protocol):
    @property
    def tp(self) -> TopicPartition: ...


Item = TypeVar("Item", bound=_HasTp)
Result = TypeVar("Result", bound=_HasTp)


def topic_refusals(
    auth: RequestAuth,
    operation: AclOperation,
    tps: Iterable[TopicPartition],
    error: type[KafkaError] = TopicAuthorizationFailed,
    *,
    log_if_denied: bool = True,
) -> dict[TopicPartition, KafkaError]:
    """``error`` for each partition whose topic the caller may not ``operation``."""
    if not auth.enabled:
        return {}
    tps = list(tps)
    allowed = auth.allowed_names(
        operation, ResourceType.TOPIC, (tp.topic for tp in tps), log_if_denied=log_if_denied
    )
    return {tp: error() for tp in tps if tp.topic not in allowed}


def every_partition(
    tps: Iterable[TopicPartition], error: KafkaError
) -> dict[TopicPartition, KafkaError]:
    return dict.fromkeys(tps, error)


async def _merged(
    items: Sequence[Item],
    refused: dict[TopicPartition, KafkaError],
    call: Callable[[tuple[Item, ...]], Awaitable[Sequence[Result]]],
    answer: Callable[[TopicPartition, KafkaError], Result],
) -> list[Result]:
    """The replica manager's answers for the items not refused, the refused ones' errors, in
    the request's order."""
    if not refused:
        return list(await call(tuple(items)))
    wanted = tuple(i for i in items if i.tp not in refused)
    done = {r.tp: r for r in (await call(wanted) if wanted else ())}
    return [answer(i.tp, refused[i.tp]) if i.tp in refused else done[i.tp] for i in items]


def has_transactional_records(partitions: Iterable[rt.PartitionRecords]) -> bool:
    """Whether any batch is transactional (Kafka's ``hasTransactionalRecords``); records that
    do not parse are left to the replica manager (CORRUPT_MESSAGE)."""
    for p in partitions:
        with contextlib.suppress(CorruptRecordError):
            if any(header.is_transactional for _, header in iter_batches(p.records)):
                return True
    return False


async def append_records(
    broker: ReplicaServices, params: rt.ProduceParams, transactional_id: str | None
) -> list[rt.ProducePartitionResult]:
    if broker.authorizer is None:  # nothing to refuse: per request, skip building the auth
        return await broker.replica_manager.append_records(params)
    auth = request_auth(broker, "Produce")
    tps = [p.tp for p in params.partitions]
    refused: dict[TopicPartition, KafkaError] = {}
    if (
        auth.enabled
        and has_transactional_records(params.partitions)
        and not (
            transactional_id
            and auth.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
        )
    ):
        refused = every_partition(tps, TransactionalIdAuthorizationFailed())
    if not refused:
        refused = topic_refusals(auth, AclOperation.WRITE, tps)
    if not refused:  # the common case, without _merged's two coroutines (per request)
        return await broker.replica_manager.append_records(params)

    async def call(wanted: tuple[rt.PartitionRecords, ...]) -> list[rt.ProducePartitionResult]:
        return list(
            await broker.replica_manager.append_records(
                rt.ProduceParams(params.acks, params.timeout_ms, wanted, params.origin)
            )
        )

    return await _merged(params.partitions, refused, call, rt.ProducePartitionResult)


async def fetch_messages(
    broker: ReplicaServices, params: rt.FetchParams
) -> list[rt.FetchPartitionData]:
    auth = request_auth(broker, "Fetch")
    tps = (p.tp for p in params.partitions)
    if params.replica_id != rt.CONSUMER_REPLICA_ID:
        refused = (
            {}
            if auth.cluster(AclOperation.CLUSTER_ACTION)
            else every_partition(tps, TopicAuthorizationFailed())
        )
    else:
        refused = topic_refusals(auth, AclOperation.READ, tps)
    if not refused:  # the common case, without _merged's two coroutines (per request)
        return await broker.replica_manager.fetch_messages(params)

    async def call(wanted: tuple[rt.FetchPartitionParams, ...]) -> list[rt.FetchPartitionData]:
        return list(
            await broker.replica_manager.fetch_messages(
                rt.FetchParams(
                    params.replica_id,
                    params.max_wait_ms,
                    params.min_bytes,
                    params.max_bytes,
                    wanted,
                    params.isolation_level,
                )
            )
        )

    return await _merged(params.partitions, refused, call, rt.FetchPartitionData)


async def list_offsets(
    broker: ReplicaServices, params: rt.ListOffsetsParams
) -> list[rt.ListOffsetsPartitionResult]:
    auth = request_auth(broker, "ListOffsets")
    refused = topic_refusals(auth, AclOperation.DESCRIBE, (p.tp for p in params.partitions))

    async def call(
        wanted: tuple[rt.ListOffsetsPartition, ...],
    ) -> Sequence[rt.ListOffsetsPartitionResult]:
        return list(
            broker.replica_manager.list_offsets(
                rt.ListOffsetsParams(params.replica_id, wanted, params.isolation_level)
            )
        )

    return await _merged(params.partitions, refused, call, rt.ListOffsetsPartitionResult)


async def offsets_for_leader_epoch(
    broker: ReplicaServices, wanted: tuple[rt.EpochRequest, ...]
) -> list[rt.EpochEndOffset]:
    auth = request_auth(broker, "OffsetForLeaderEpoch")
    refused = (
        {}
        if auth.cluster(AclOperation.CLUSTER_ACTION, log_if_denied=False)
        else topic_refusals(auth, AclOperation.DESCRIBE, (w.tp for w in wanted))
    )

    async def call(asked: tuple[rt.EpochRequest, ...]) -> Sequence[rt.EpochEndOffset]:
        return list(broker.replica_manager.offsets_for_leader_epoch(asked))

    return await _merged(wanted, refused, call, rt.EpochEndOffset)


async def delete_records(
    broker: ReplicaServices, params: rt.DeleteRecordsParams
) -> list[rt.DeleteRecordsPartitionResult]:
    auth = request_auth(broker, "DeleteRecords")
    refused = topic_refusals(auth, AclOperation.DELETE, (p.tp for p in params.partitions))

    async def call(
        wanted: tuple[rt.DeleteRecordsPartition, ...],
    ) -> list[rt.DeleteRecordsPartitionResult]:
        return list(
            await broker.replica_manager.delete_records(
                rt.DeleteRecordsParams(params.timeout_ms, wanted)
            )
        )

    return await _merged(params.partitions, refused, call, rt.DeleteRecordsPartitionResult)


async def write_txn_markers(
    broker: ReplicaServices, params: rt.WriteTxnMarkersParams
) -> list[rt.TxnMarkerResult]:
    auth = request_auth(broker, "WriteTxnMarkers")
    if not auth.cluster(AclOperation.CLUSTER_ACTION):
        return [
            rt.TxnMarkerResult(
                m.producer_id, tuple((tp, ClusterAuthorizationFailed()) for tp in m.partitions)
            )
            for m in params.markers
        ]
    return list(await broker.replica_manager.write_txn_markers(params))


def described_replicas(
    broker: ReplicaServices, wanted: frozenset[TopicPartition]
) -> rt.DescribeReplicasResult:
    """What the caller may see of the broker's replicas of ``wanted`` (empty: all)."""
    result = broker.replica_manager.describe_replicas(wanted)
    auth = request_auth(broker, "DescribeReplicas")
    if auth.cluster(AclOperation.DESCRIBE, log_if_denied=False):
        return result
    shown = auth.allowed_names(
        AclOperation.DESCRIBE,
        ResourceType.TOPIC,
        (r.tp.topic for r in result.replicas),
        log_if_denied=bool(wanted),  # an all-replicas ask only filters, as Metadata's
    )
    return rt.DescribeReplicasResult(
        result.monotonic_ms, tuple(r for r in result.replicas if r.tp.topic in shown)
    )
