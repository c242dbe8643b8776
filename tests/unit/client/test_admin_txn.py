"""The admin client's transaction calls (``client.admin_txn``) against a scripted transport:
DescribeProducers to the leader (asked again after NOT_LEADER_OR_FOLLOWER) or to one named
broker (no retry), ListTransactions to every broker merged by broker id (LOAD_IN_PROGRESS
retried), DescribeTransactions to the id's coordinator (FindCoordinator key_type 1, looked up
again after NOT_COORDINATOR; TRANSACTIONAL_ID_NOT_FOUND raised naming the id)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.client.admin import AdminClient
from kafkasim.client.admin_txn import ProducerState, TransactionDescription, TransactionListing
from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import (
    NotLeaderOrFollowerError,
    TransactionalIdNotFoundError,
    error_for_name,
)
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

TP = TopicPartition("t", 0)
NOT_LEADER = NotLeaderOrFollowerError.code
NOT_COORDINATOR = error_for_name("NOT_COORDINATOR").code
LOADING = error_for_name("COORDINATOR_LOAD_IN_PROGRESS").code


class Cluster:
    """Brokers 1 and 2; t-0 led by 1 until broker 1 refused once, then by 2."""

    def __init__(self) -> None:
        self.moved = False
        self.calls: list[tuple[str, str, Message]] = []
        self.list_loading = 1
        self.coordinator = 1  # answers NOT_COORDINATOR once, then the coordinator is 2
        self.known_ids = {"app-1"}

    async def call(self, target: str, method: str, request: Message, *, timeout_s: float) -> Any:
        self.calls.append((target, method, request))
        if method == proto.METHOD_METADATA:
            response = pb.MetadataResponse(controller_id=1)
            response.brokers.add(node_id=1, host="b1", port=1)
            response.brokers.add(node_id=2, host="b2", port=2)
            topic = response.topics.add(name="t")
            topic.partitions.add(partition=0, leader=2 if self.moved else 1, replicas=[1, 2])
            return response
        if method == proto.METHOD_DESCRIBE_CLUSTER:
            response = pb.DescribeClusterResponse()
            response.brokers.add(node_id=2, host="b2", port=2)
            response.brokers.add(node_id=1, host="b1", port=1)
            return response
        if method == proto.METHOD_DESCRIBE_PRODUCERS:
            return self._producers(target)
        if method == proto.METHOD_LIST_TRANSACTIONS:
            if target == "b1:1" and self.list_loading:
                self.list_loading -= 1
                return pb.ListTransactionsResponse(error_code=LOADING)
            name = "app-1" if target == "b1:1" else "app-2"
            return pb.ListTransactionsResponse(
                transactions=[
                    pb.ListedTransaction(
                        transactional_id=name, producer_id=7, transaction_state="Ongoing"
                    )
                ]
            )
        if method == proto.METHOD_FIND_COORDINATOR:
            assert isinstance(request, pb.FindCoordinatorRequest)
            assert request.key_type == 1
            node = self.coordinator
            return pb.FindCoordinatorResponse(node_id=node, host=f"b{node}", port=node)
        assert method == proto.METHOD_DESCRIBE_TRANSACTIONS
        assert isinstance(request, pb.DescribeTransactionsRequest)
        (tid,) = request.transactional_ids
        if target == "b1:1":
            self.coordinator = 2
            return pb.DescribeTransactionsResponse(
                transactions=[
                    pb.TransactionDescription(transactional_id=tid, error_code=NOT_COORDINATOR)
                ]
            )
        if tid not in self.known_ids:
            return pb.DescribeTransactionsResponse(
                transactions=[
                    pb.TransactionDescription(
                        transactional_id=tid, error_code=TransactionalIdNotFoundError.code
                    )
                ]
            )
        return pb.DescribeTransactionsResponse(
            transactions=[
                pb.TransactionDescription(
                    transactional_id=tid,
                    transaction_state="Ongoing",
                    transaction_timeout_ms=60000,
                    transaction_start_time_ms=1000,
                    producer_id=7,
                    producer_epoch=2,
                    partitions=[pb.TopicPartitionId(topic="t", partition=0)],
                )
            ]
        )

    def _producers(self, target: str) -> pb.DescribeProducersResponse:
        result = pb.PartitionProducersResult(topic="t", partition=0)
        if target == "b1:1" and not self.moved:
            self.moved = True
            result.error_code = NOT_LEADER
            result.error_message = "Broker 1 is not the leader of t-0"
        else:
            result.active_producers.add(
                producer_id=7,
                producer_epoch=2,
                last_sequence=9,
                last_timestamp=1234,
                coordinator_epoch=-1,
                current_txn_start_offset=5,
            )
        return pb.DescribeProducersResponse(partitions=[result])

    async def close(self) -> None:
        pass


def admin(cluster: Cluster) -> AdminClient:
    return AdminClient(["b1:1"], transport=cluster, clock=ManualClock())  # type: ignore[arg-type]


def _targets(cluster: Cluster, method: str) -> list[str]:
    return [t for t, m, _ in cluster.calls if m == method]


def test_describe_producers_follows_the_leader() -> None:
    cluster = Cluster()
    result = asyncio.run(admin(cluster).describe_producers([TP]))
    assert result == {TP: [ProducerState(7, 2, 9, 1234, None, 5)]}
    assert _targets(cluster, proto.METHOD_DESCRIBE_PRODUCERS) == ["b1:1", "b2:2"]


def test_describe_producers_on_a_named_broker_takes_its_answer() -> None:
    cluster = Cluster()
    with pytest.raises(NotLeaderOrFollowerError, match="t-0"):
        asyncio.run(admin(cluster).describe_producers([TP], broker_id=1))
    assert _targets(cluster, proto.METHOD_DESCRIBE_PRODUCERS) == ["b1:1"]


def test_describe_producers_of_an_unknown_broker_is_broker_not_available() -> None:
    with pytest.raises(error_for_name("BROKER_NOT_AVAILABLE"), match="broker 9"):
        asyncio.run(admin(Cluster()).describe_producers([TP], broker_id=9))


def test_list_transactions_asks_every_broker_and_keeps_them_apart() -> None:
    cluster = Cluster()
    listings = asyncio.run(admin(cluster).list_transactions())
    assert listings == {
        1: [TransactionListing("app-1", 7, "Ongoing")],
        2: [TransactionListing("app-2", 7, "Ongoing")],
    }
    assert sorted(_targets(cluster, proto.METHOD_LIST_TRANSACTIONS)) == ["b1:1", "b1:1", "b2:2"]


def test_describe_transactions_looks_the_coordinator_up_again_after_not_coordinator() -> None:
    cluster = Cluster()
    (description,) = asyncio.run(admin(cluster).describe_transactions(["app-1"]))
    assert description == TransactionDescription(2, "Ongoing", 7, 2, 60000, 1000, (TP,))
    assert _targets(cluster, proto.METHOD_DESCRIBE_TRANSACTIONS) == ["b1:1", "b2:2"]


def test_an_unknown_transactional_id_is_transactional_id_not_found() -> None:
    cluster = Cluster()
    cluster.coordinator = 2
    with pytest.raises(TransactionalIdNotFoundError) as caught:
        asyncio.run(admin(cluster).describe_transactions(["nope"]))
    assert str(caught.value) == "TRANSACTIONAL_ID_NOT_FOUND: TransactionalId nope not found"
