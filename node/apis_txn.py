"""The gRPC front door of the transaction coordinator: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions and ListTransactions as protobuf, translated into
the wire-free calls of ``node.apis_cluster`` / ``node.txn_requests`` and the coordinator's
entry points (``node.txn_coordinator``), and the answers back. Kafka's door is
``node.kafka_apis_txn``; both call the same domain functions.

Wire conventions kept here: proto3 has no null string, so an empty ``transactional_id`` in
InitProducerId is an idempotent producer's (Kafka's null); ``has_producer_id`` false is
KIP-360's -1/-1 pair (zero is a valid producer id). PRODUCER_FENCED is always answered as it
is (every gRPC client knows it). TxnOffsetCommit and DescribeProducers are served elsewhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kafkasim import proto
from kafkasim.common.types import TopicPartition
from kafkasim.node import apis_cluster, authz_txn, txn_requests
from kafkasim.node.apis_replica import error_code
from kafkasim.node.authz import request_auth
from kafkasim.node.txn_metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from kafkasim.node.txn_types import (
    AddOffsetsToTxnParams,
    AddPartitionsToTxnParams,
    EndTxnParams,
    TransactionResult,
    TxnDescription,
    TxnListing,
)
from kafkasim.proto import kafkasim_pb2 as pb

# -- InitProducerId --------------------------------------------------------------------------


def init_producer_id_request(request: pb.InitProducerIdRequest) -> apis_cluster.ProducerIdRequest:
    has_id = request.has_producer_id
    return apis_cluster.ProducerIdRequest(
        request.transactional_id or None,
        request.transaction_timeout_ms,
        request.producer_id if has_id else NO_PRODUCER_ID,
        request.producer_epoch if has_id else NO_PRODUCER_EPOCH,
    )


async def init_producer_id(
    broker: apis_cluster.ClusterServices, request: pb.InitProducerIdRequest
) -> pb.InitProducerIdResponse:
    """InitProducerId over gRPC (``node.apis_cluster.init_producer_id``)."""
    answer = await apis_cluster.init_producer_id(
        broker, init_producer_id_request(request), request_auth(broker, "InitProducerId")
    )
    return pb.InitProducerIdResponse(
        error_code=error_code(answer.error),
        producer_id=answer.producer_id,
        producer_epoch=answer.producer_epoch,
    )


# -- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn ---------------------------------------------


def add_partitions_to_txn_request(
    request: pb.AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnParams:
    return AddPartitionsToTxnParams(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        frozenset(TopicPartition(p.topic, p.partition) for p in request.partitions),
    )


def end_txn_request(request: pb.EndTxnRequest) -> EndTxnParams:
    result = TransactionResult.COMMIT if request.committed else TransactionResult.ABORT
    return EndTxnParams(
        request.transactional_id, request.producer_id, request.producer_epoch, result
    )


# -- DescribeTransactions, ListTransactions --------------------------------------------------


def transaction_description(d: TxnDescription) -> pb.TransactionDescription:
    return pb.TransactionDescription(
        error_code=error_code(d.error),
        transactional_id=d.transactional_id,
        transaction_state=d.state,
        transaction_timeout_ms=d.transaction_timeout_ms,
        transaction_start_time_ms=d.transaction_start_time_ms,
        producer_id=d.producer_id,
        producer_epoch=d.producer_epoch,
        partitions=[
            pb.TopicPartitionId(topic=tp.topic, partition=tp.partition) for tp in d.partitions
        ],
    )


def list_transactions_response(listing: TxnListing) -> pb.ListTransactionsResponse:
    return pb.ListTransactionsResponse(
        error_code=error_code(listing.error),
        unknown_state_filters=listing.unknown_state_filters,
        transactions=[
            pb.ListedTransaction(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=t.state,
            )
            for t in listing.transactions
        ],
    )


def txn_handlers(
    broker: apis_cluster.ClusterServices,
) -> dict[str, Callable[[Any], Awaitable[Any]]]:
    """The transactional methods of the broker's gRPC table (joined by ``node.apis``)."""
    txns = broker.transactions

    async def handle_init_producer_id(
        request: pb.InitProducerIdRequest,
    ) -> pb.InitProducerIdResponse:
        return await init_producer_id(broker, request)

    async def add_partitions(
        request: pb.AddPartitionsToTxnRequest,
    ) -> pb.AddPartitionsToTxnResponse:
        params = add_partitions_to_txn_request(request)
        refusals = authz_txn.add_partitions_refusals(
            request_auth(broker, "AddPartitionsToTxn"), params.transactional_id, params.partitions
        )
        errors = await txn_requests.add_partitions_to_txn(broker, params, refusals)
        return pb.AddPartitionsToTxnResponse(
            partitions=[
                pb.PartitionError(topic=tp.topic, partition=tp.partition, error_code=error_code(e))
                for tp, e in errors.items()
            ]
        )

    async def add_offsets(request: pb.AddOffsetsToTxnRequest) -> pb.AddOffsetsToTxnResponse:
        params = AddOffsetsToTxnParams(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
        refusal = authz_txn.add_offsets_refusal(
            request_auth(broker, "AddOffsetsToTxn"), request.transactional_id, request.group_id
        )
        return pb.AddOffsetsToTxnResponse(
            error_code=error_code(refusal or await txns.add_offsets_to_txn(params))
        )

    async def end_txn(request: pb.EndTxnRequest) -> pb.EndTxnResponse:
        refusal = authz_txn.transactional_id_refusal(
            request_auth(broker, "EndTxn"), request.transactional_id
        )
        return pb.EndTxnResponse(
            error_code=error_code(refusal or await txns.end_txn(end_txn_request(request)))
        )

    async def describe(
        request: pb.DescribeTransactionsRequest,
    ) -> pb.DescribeTransactionsResponse:
        auth = request_auth(broker, "DescribeTransactions")
        return pb.DescribeTransactionsResponse(
            transactions=[
                transaction_description(
                    authz_txn.described(auth, tid) or txns.describe_transaction(tid)
                )
                for tid in request.transactional_ids
            ]
        )

    async def list_(request: pb.ListTransactionsRequest) -> pb.ListTransactionsResponse:
        listing = txns.list_transactions(
            frozenset(request.producer_id_filters), frozenset(request.state_filters)
        )
        return list_transactions_response(
            authz_txn.listed(request_auth(broker, "ListTransactions"), listing)
        )

    return {
        proto.METHOD_INIT_PRODUCER_ID: handle_init_producer_id,
        proto.METHOD_ADD_PARTITIONS_TO_TXN: add_partitions,
        proto.METHOD_ADD_OFFSETS_TO_TXN: add_offsets,
        proto.METHOD_END_TXN: end_txn,
        proto.METHOD_DESCRIBE_TRANSACTIONS: describe,
        proto.METHOD_LIST_TRANSACTIONS: list_,
    }
