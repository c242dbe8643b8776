"""The transactional requests of both front doors as domain calls, where the request layer
does more than hand them to the transaction coordinator (``node.txn_coordinator``); the gRPC
door (``node.apis_txn``) and Kafka's (``node.kafka_apis_txn``) translate their own structs
into these and the answers back. Wire-free.

AddPartitionsToTxn (Kafka's ``handleAddPartitionsToTxnRequest``, client versions 0-3) checks
the partitions before the coordinator sees them: an internal topic's partition is
TOPIC_AUTHORIZATION_FAILED (Kafka never lets a client write one), a partition the metadata
cache does not know is UNKNOWN_TOPIC_OR_PARTITION, and if any partition fails, every other one
is answered OPERATION_NOT_ATTEMPTED and nothing is added. Otherwise every partition is
answered the coordinator's one error.
"""

from __future__ import annotations

from typing import Protocol

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.controller.api import INTERNAL_TOPICS
from kafkasim.node.group_types import Error
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.node.txn_coordinator import TransactionCoordinator
from kafkasim.node.txn_types import AddPartitionsToTxnParams

TOPIC_AUTHORIZATION_FAILED = error_for_name("TOPIC_AUTHORIZATION_FAILED")
UNKNOWN_TOPIC_OR_PARTITION = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
OPERATION_NOT_ATTEMPTED = error_for_name("OPERATION_NOT_ATTEMPTED")
PRODUCER_FENCED = error_for_name("PRODUCER_FENCED")
INVALID_PRODUCER_EPOCH = error_for_name("INVALID_PRODUCER_EPOCH")


class TxnServices(Protocol):
    """What the transactional requests read of the broker (``node.apis.BrokerServices``)."""

    metadata: MetadataCache
    transactions: TransactionCoordinator


def refused_partitions(
    metadata: MetadataCache, partitions: frozenset[TopicPartition]
) -> dict[TopicPartition, Error]:
    """The partitions AddPartitionsToTxn may not add, with their errors (see the module
    doc); empty when all may be added."""
    refused: dict[TopicPartition, Error] = {}
    for tp in sorted(partitions):
        if tp.topic in INTERNAL_TOPICS:
            refused[tp] = TOPIC_AUTHORIZATION_FAILED
        elif tp not in metadata.partitions:
            refused[tp] = UNKNOWN_TOPIC_OR_PARTITION
    return refused


async def add_partitions_to_txn(
    broker: TxnServices,
    params: AddPartitionsToTxnParams,
    refusals: dict[TopicPartition, Error] | None = None,
) -> dict[TopicPartition, Error]:
    """AddPartitionsToTxn: each partition's error, in partition order (``refusals``: the
    authorization's answer, ``node.authz_txn``, when it refuses)."""
    if refusals:
        return refusals
    refused = refused_partitions(broker.metadata, params.partitions)
    if refused:
        return {tp: refused.get(tp, OPERATION_NOT_ATTEMPTED) for tp in sorted(params.partitions)}
    error = await broker.transactions.add_partitions_to_txn(params)
    return {tp: error for tp in sorted(params.partitions)}


def fenced_for_version(error: Error, version: int, fenced_since: int) -> Error:
    """Kafka answers PRODUCER_FENCED (KIP-588) only to request versions that know it
    (InitProducerId v4+, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2+); older ones get
    INVALID_PRODUCER_EPOCH, which their clients handle the same way."""
    if error is PRODUCER_FENCED and version < fenced_since:
        return INVALID_PRODUCER_EPOCH
    return error
