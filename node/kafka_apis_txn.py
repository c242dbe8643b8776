"""The transactional requests on Kafka's protocol: InitProducerId (0-4), AddPartitionsToTxn
(0-3), AddOffsetsToTxn (0-3), EndTxn (0-3), DescribeTransactions (0) and ListTransactions
(0-1), translated into the wire-free calls the gRPC door (``node.apis_txn``) makes too
(``node.apis_cluster``, ``node.txn_requests``, the coordinator's entry points) and back.

Versions: AddPartitionsToTxn v4+ is KIP-890's broker-to-broker batch form (many transactional
ids, verify-only), which this broker does not serve: not advertised; nor the KIP-890 versions
of the others (EndTxn v4+, InitProducerId v5+, AddOffsetsToTxn v4+). ListTransactions v1 adds
the duration filter (KIP-994). A request version older than Kafka's PRODUCER_FENCED (KIP-588:
InitProducerId v4, the others v2) is answered INVALID_PRODUCER_EPOCH instead, as Kafka does.
"""

from __future__ import annotations

import datetime
from typing import Any

from kafkasim.common.types import TopicPartition
from kafkasim.node import apis_cluster, authz_txn, txn_requests
from kafkasim.node.apis import BrokerServices
from kafkasim.node.apis_replica import error_code
from kafkasim.node.authz import request_auth
from kafkasim.node.kafka_codec import KafkaRequest, build, group_by_topic, millis, response_schema
from kafkasim.node.txn_types import (
    AddOffsetsToTxnParams,
    AddPartitionsToTxnParams,
    EndTxnParams,
    TransactionResult,
    TxnDescription,
)

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 22, 24, 25, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66

_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def init_producer_id_request(body: Any) -> apis_cluster.ProducerIdRequest:
    """Kafka's null transactional id is an idempotent producer; an empty one goes to the
    coordinator (INVALID_REQUEST). v0-2 carry no producer id or epoch: -1/-1."""
    return apis_cluster.ProducerIdRequest(
        body.transactional_id,
        millis(body.transaction_timeout, 0),
        int(getattr(body, "producer_id", -1)),
        int(getattr(body, "producer_epoch", -1)),
    )


def add_partitions_to_txn_request(body: Any) -> AddPartitionsToTxnParams:
    return AddPartitionsToTxnParams(
        body.v3_and_below_transactional_id,
        int(body.v3_and_below_producer_id),
        int(body.v3_and_below_producer_epoch),
        frozenset(
            TopicPartition(topic.name, int(index))
            for topic in body.v3_and_below_topics
            for index in topic.partitions
        ),
    )


def transaction_state(d: TxnDescription) -> dict[str, Any]:
    """One DescribeTransactions entry, as Kafka fills it: an entry with an error has only its
    id and error (every other field at its zero default); the start time of an id that never
    had a transaction is -1 (kio takes a datetime: one millisecond before the epoch)."""
    if d.error is not None:
        return {
            "error_code": error_code(d.error),
            "transactional_id": d.transactional_id,
            "transaction_state": "",
            "transaction_timeout": 0,
            "transaction_start_time": _EPOCH,
            "producer_id": 0,
            "producer_epoch": 0,
            "topics": [],
        }
    start = _EPOCH + datetime.timedelta(milliseconds=d.transaction_start_time_ms)
    return {
        "error_code": error_code(d.error),
        "transactional_id": d.transactional_id,
        "transaction_state": d.state,
        "transaction_timeout": d.transaction_timeout_ms,
        "transaction_start_time": start,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "topics": [
            {"topic": topic, "partitions": [p["partition"] for p in parts]}
            for topic, parts in group_by_topic(
                (tp.topic, {"partition": tp.partition}) for tp in d.partitions
            ).items()
        ],
    }


class KafkaTxnApis:
    def __init__(self, broker: BrokerServices) -> None:
        self.broker = broker

    def table(self) -> dict[int, tuple[int, int, Any]]:
        """{api key: (min version, max version, handler)} for ``node.kafka_apis``."""
        return {
            INIT_PRODUCER_ID: (0, 4, self.init_producer_id),
            ADD_PARTITIONS_TO_TXN: (0, 3, self.add_partitions_to_txn),
            ADD_OFFSETS_TO_TXN: (0, 3, self.add_offsets_to_txn),
            END_TXN: (0, 3, self.end_txn),
            DESCRIBE_TRANSACTIONS: (0, 0, self.describe_transactions),
            LIST_TRANSACTIONS: (0, 1, self.list_transactions),
        }

    async def init_producer_id(self, request: KafkaRequest) -> Any:
        answer = await apis_cluster.init_producer_id(
            self.broker,
            init_producer_id_request(request.body),
            request_auth(self.broker, "InitProducerId"),
        )
        error = txn_requests.fenced_for_version(answer.error, request.api_version, 4)
        return build(
            response_schema(request),
            error_code=error_code(error),
            producer_id=answer.producer_id,
            producer_epoch=answer.producer_epoch,
        )

    async def add_partitions_to_txn(self, request: KafkaRequest) -> Any:
        params = add_partitions_to_txn_request(request.body)
        refusals = authz_txn.add_partitions_refusals(
            request_auth(self.broker, "AddPartitionsToTxn"),
            params.transactional_id,
            params.partitions,
        )
        errors = await txn_requests.add_partitions_to_txn(self.broker, params, refusals)
        version = request.api_version
        by_topic = group_by_topic(
            (
                tp.topic,
                {
                    "partition_index": tp.partition,
                    "partition_error_code": error_code(
                        txn_requests.fenced_for_version(error, version, 2)
                    ),
                },
            )
            for tp, error in errors.items()
        )
        return build(
            response_schema(request),
            results_by_topic_v3_and_below=[
                {"name": name, "results_by_partition": parts} for name, parts in by_topic.items()
            ],
        )

    async def add_offsets_to_txn(self, request: KafkaRequest) -> Any:
        body = request.body
        params = AddOffsetsToTxnParams(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch), body.group_id
        )
        error = authz_txn.add_offsets_refusal(
            request_auth(self.broker, "AddOffsetsToTxn"), body.transactional_id, body.group_id
        ) or await self.broker.transactions.add_offsets_to_txn(params)
        error = txn_requests.fenced_for_version(error, request.api_version, 2)
        return build(response_schema(request), error_code=error_code(error))

    async def end_txn(self, request: KafkaRequest) -> Any:
        body = request.body
        result = TransactionResult.COMMIT if body.committed else TransactionResult.ABORT
        params = EndTxnParams(
            body.transactional_id, int(body.producer_id), int(body.producer_epoch), result
        )
        error = authz_txn.transactional_id_refusal(
            request_auth(self.broker, "EndTxn"), body.transactional_id
        ) or await self.broker.transactions.end_txn(params)
        error = txn_requests.fenced_for_version(error, request.api_version, 2)
        return build(response_schema(request), error_code=error_code(error))

    async def describe_transactions(self, request: KafkaRequest) -> Any:
        txns = self.broker.transactions
        auth = request_auth(self.broker, "DescribeTransactions")
        return build(
            response_schema(request),
            transaction_states=[
                transaction_state(authz_txn.described(auth, tid) or txns.describe_transaction(tid))
                for tid in request.body.transactional_ids
            ],
        )

    async def list_transactions(self, request: KafkaRequest) -> Any:
        body = request.body
        listing = self.broker.transactions.list_transactions(
            frozenset(int(p) for p in body.producer_id_filters),
            frozenset(body.state_filters),
            int(getattr(body, "duration_filter", -1)),
        )
        listing = authz_txn.listed(request_auth(self.broker, "ListTransactions"), listing)
        return build(
            response_schema(request),
            error_code=error_code(listing.error),
            unknown_state_filters=list(listing.unknown_state_filters),
            transaction_states=[
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "transaction_state": t.state,
                }
                for t in listing.transactions
            ],
        )
