"""The transactional producer end to end against a scripted cluster (tests/unit/client/
fake_brokers.py): the sender drives the TransactionManager over the gRPC contract — the order
of Kafka's requests, AddPartitionsToTxn before a new partition's first batch, one
transactional request in flight, EndTxn only once no batch is in flight, the empty transaction
never sent, fencing, abortable errors, a coordinator that moved, the KIP-360 epoch bump and
its restarted sequences, and timeouts that the same call retries (KAFKA-13412)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kafkasim.client.consumer import Consumer
from kafkasim.client.producer import DeliveryTimeoutError, Producer
from kafkasim.client.producer_errors import (
    IllegalTransactionStateError,
    TransactionAbortedError,
    TransactionError,
)
from kafkasim.client.transaction_types import ConsumerGroupMetadata, OffsetAndMetadata
from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import (
    InvalidGroupIdError,
    InvalidRecordError,
    ProducerFencedError,
    error_for_name,
)
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from tests.unit.client.fake_brokers import BROKERS, PID, FakeCluster, FakeTransport, Sent

TopicAuthorizationFailedError = error_for_name("TOPIC_AUTHORIZATION_FAILED")
A0 = TopicPartition("a", 0)
B0 = TopicPartition("b", 0)
TID = "tx-1"


def transactional(cluster: FakeCluster, **props: object) -> Producer:
    config: dict[str, object] = {
        "bootstrap.servers": BROKERS[1],
        "transactional.id": TID,
        "retry.backoff.ms": 0,  # the manual clock never moves: no backoff to wait out
        **props,
    }
    return Producer(config, transport=FakeTransport(cluster), clock=ManualClock())


def run(
    scenario: Callable[[FakeCluster], Awaitable[None]], cluster: FakeCluster | None = None
) -> FakeCluster:
    cluster = cluster or FakeCluster()

    async def main() -> None:
        async with asyncio.timeout(5):
            await scenario(cluster)

    asyncio.run(main())
    return cluster


async def ready(producer: Producer) -> Producer:
    await producer.init_transactions()
    return producer


def sent(cluster: FakeCluster, method: str) -> list[Sent]:
    return [s for s in cluster.log if s.method == method]


def index_of(cluster: FakeCluster, predicate: Callable[[Sent], bool]) -> int:
    return next(i for i, s in enumerate(cluster.log) if predicate(s))


def adds(s: Sent, tp: TopicPartition) -> bool:
    request = s.request
    return isinstance(request, pb.AddPartitionsToTxnRequest) and any(
        (p.topic, p.partition) == tp for p in request.partitions
    )


def produces(s: Sent, tp: TopicPartition) -> bool:
    request = s.request
    return isinstance(request, pb.ProduceRequest) and any(
        (p.topic, p.partition) == tp for p in request.partitions
    )


async def settle(rounds: int = 200) -> None:
    """Let every task run until nothing more can happen without an answer."""
    for _ in range(rounds):
        await asyncio.sleep(0)


# -- the order of a transaction ---------------------------------------------------------------


def test_a_committed_transaction_sends_kafkas_requests_in_order() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster, **{"transaction.timeout.ms": 30_000}) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            records = [producer.send("a", b"1"), producer.send("b", b"2")]
            await producer.commit_transaction()
            assert all(r.done() and r.exception() is None for r in records)

    cluster = run(scenario)
    assert cluster.transactional() == [
        "FindCoordinator",
        "InitProducerId",
        "AddPartitionsToTxn",
        "EndTxn",
    ]
    find, init = sent(cluster, "FindCoordinator")[0], sent(cluster, "InitProducerId")[0]
    assert (find.request.key, find.request.key_type) == (TID, 1)  # type: ignore[attr-defined]
    assert init.target == BROKERS[1]  # the coordinator FindCoordinator named
    assert init.request == pb.InitProducerIdRequest(
        transactional_id=TID, transaction_timeout_ms=30_000, producer_id=-1, producer_epoch=-1
    )
    end = sent(cluster, "EndTxn")[0].request
    assert end == pb.EndTxnRequest(
        transactional_id=TID, producer_id=PID, producer_epoch=0, committed=True
    )
    for tp in (A0, B0):
        assert index_of(cluster, lambda s, tp=tp: adds(s, tp)) < index_of(
            cluster, lambda s, tp=tp: produces(s, tp)
        )
        (header,) = cluster.batches[tp]
        assert header.attributes & 0x10, "the transactional bit"
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, 0, 0)
    for produce in sent(cluster, "Produce"):
        assert produce.request.transactional_id == TID  # type: ignore[attr-defined]
        assert produce.request.acks == -1  # type: ignore[attr-defined]
    assert index_of(cluster, lambda s: s.method == "EndTxn") > max(
        i for i, s in enumerate(cluster.log) if s.method == "Produce"
    )


def test_add_partitions_to_txn_comes_before_each_new_partitions_first_batch_only() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            await producer.send("a", b"1")
            await producer.send("a", b"2")  # a is in the transaction already
            await producer.send("b", b"3")
            await producer.commit_transaction()

    cluster = run(scenario)
    add_requests = [s.request for s in sent(cluster, "AddPartitionsToTxn")]
    assert [[(p.topic, p.partition) for p in r.partitions] for r in add_requests] == [  # type: ignore[attr-defined]
        [("a", 0)],
        [("b", 0)],
    ]
    assert cluster.methods()[-5:] == [
        "Produce",
        "Produce",
        "AddPartitionsToTxn",
        "Produce",
        "EndTxn",
    ]
    assert [h.base_sequence for h in cluster.batches[A0]] == [0, 1]


def test_one_transactional_request_is_in_flight_at_a_time() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            for topic in ("a", "b", "c", "c"):
                producer.send(topic, b"x")
            group = ConsumerGroupMetadata("g", generation_id=2, member_id="m-1")
            await producer.send_offsets_to_transaction({A0: 7}, group)
            await producer.commit_transaction()

    cluster = run(scenario)
    assert cluster.max_txn_calls_in_flight == 1
    assert "TxnOffsetCommit" in cluster.transactional()


def test_end_txn_waits_until_no_batch_is_in_flight() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            cluster.hold_produce = True
            record = producer.send("a", b"1")
            while producer.batches_sent == 0:
                await asyncio.sleep(0)
            commit = asyncio.ensure_future(producer.commit_transaction())
            await settle()
            assert "EndTxn" not in cluster.methods()
            assert not record.done() and not commit.done()
            cluster.release()
            await commit
            assert (await record).offset == 0

    cluster = run(scenario)
    assert cluster.methods()[-2:] == ["Produce", "EndTxn"]


def test_an_empty_transaction_is_never_sent() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            await producer.commit_transaction()
            producer.begin_transaction()
            await producer.abort_transaction()
            producer.begin_transaction()  # READY again after each

    cluster = run(scenario)
    assert cluster.transactional() == ["FindCoordinator", "InitProducerId"]


def test_offsets_go_to_the_groups_coordinator_with_the_transaction() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            group = ConsumerGroupMetadata("g", generation_id=2, member_id="m-1")
            offsets = {A0: OffsetAndMetadata(7, "meta"), B0: 3}
            await producer.send_offsets_to_transaction(offsets, group)
            await producer.commit_transaction()

    cluster = run(scenario)
    assert cluster.transactional()[2:] == [
        "AddOffsetsToTxn",
        "FindCoordinator",
        "TxnOffsetCommit",
        "EndTxn",
    ]
    find = sent(cluster, "FindCoordinator")[1].request
    assert (find.key, find.key_type) == ("g", 0)  # type: ignore[attr-defined]
    add = sent(cluster, "AddOffsetsToTxn")[0].request
    assert add.group_id == "g" and add.producer_id == PID  # type: ignore[attr-defined]
    commit = sent(cluster, "TxnOffsetCommit")[0].request
    assert isinstance(commit, pb.TxnOffsetCommitRequest)
    assert (commit.transactional_id, commit.group_id, commit.generation_id, commit.member_id) == (
        TID,
        "g",
        2,
        "m-1",
    )
    assert {
        (p.topic, p.partition, p.committed_offset, p.committed_metadata) for p in commit.partitions
    } == {
        ("a", 0, 7, "meta"),
        ("b", 0, 3, ""),
    }


# -- errors -----------------------------------------------------------------------------------


def test_a_fenced_producer_is_done_for_good() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            cluster.fail_next("Produce", "PRODUCER_FENCED")
            with pytest.raises(ProducerFencedError):
                await producer.send("a", b"1")
            for call in (producer.commit_transaction, producer.abort_transaction):
                with pytest.raises(ProducerFencedError, match=f"transactionalId '{TID}'"):
                    await call()
            with pytest.raises(ProducerFencedError):
                producer.begin_transaction()
            with pytest.raises(ProducerFencedError):
                await producer.send("b", b"2")

    cluster = run(scenario)
    assert "EndTxn" not in cluster.methods()


def test_end_txn_fenced_by_a_newer_producer_is_fatal() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            await producer.send("a", b"1")
            cluster.fail_next("EndTxn", "PRODUCER_FENCED")
            with pytest.raises(ProducerFencedError):
                await producer.commit_transaction()
            with pytest.raises(ProducerFencedError):
                producer.begin_transaction()

    run(scenario)


def test_after_an_abortable_error_only_abort_is_allowed() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            cluster.fail_next("AddPartitionsToTxn", "TOPIC_AUTHORIZATION_FAILED")
            with pytest.raises(TopicAuthorizationFailedError):
                await producer.send("a", b"1")  # never sent: failed with the abort's cause
            with pytest.raises(TransactionError, match="in an error state"):
                await producer.commit_transaction()
            with pytest.raises(TransactionError):
                producer.begin_transaction()
            with pytest.raises(TransactionError):
                producer.send("b", b"2")
            await producer.abort_transaction()
            producer.begin_transaction()  # a new transaction works
            await producer.send("b", b"3")
            await producer.commit_transaction()

    cluster = run(scenario)
    assert [s.request.committed for s in sent(cluster, "EndTxn")] == [True]  # type: ignore[attr-defined]
    assert A0 not in cluster.batches


def test_a_failed_batch_aborts_and_the_epoch_bump_restarts_sequences() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            await producer.send("a", b"1")  # sequence 0
            cluster.fail_next("Produce", "INVALID_RECORD")
            with pytest.raises(InvalidRecordError):
                await producer.send("a", b"2")  # sequence 1, refused
            with pytest.raises(TransactionError, match="in an error state"):
                producer.send("b", b"3")  # only an abort is allowed now
            with pytest.raises(TransactionError):
                await producer.commit_transaction()
            await producer.abort_transaction()
            assert (producer.producer_id, producer.producer_epoch) == (PID, 1)
            producer.begin_transaction()
            await producer.send("a", b"4")
            await producer.commit_transaction()

    cluster = run(scenario)
    assert cluster.transactional()[-4:] == [
        "EndTxn",
        "InitProducerId",
        "AddPartitionsToTxn",
        "EndTxn",
    ]
    ends = [s.request for s in sent(cluster, "EndTxn")]
    assert [(e.committed, e.producer_epoch) for e in ends] == [(False, 0), (True, 1)]  # type: ignore[attr-defined]
    bump = sent(cluster, "InitProducerId")[1].request
    assert (bump.producer_id, bump.producer_epoch) == (PID, 0)  # type: ignore[attr-defined]
    assert [(h.producer_epoch, h.base_sequence) for h in cluster.batches[A0]] == [(0, 0), (1, 0)]


def test_not_coordinator_looks_the_coordinator_up_again() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            await producer.send("a", b"1")
            cluster.fail_next("EndTxn", "NOT_COORDINATOR")
            cluster.coordinator = 2
            await producer.commit_transaction()

    cluster = run(scenario)
    assert cluster.transactional()[-3:] == ["EndTxn", "FindCoordinator", "EndTxn"]
    assert [s.target for s in sent(cluster, "EndTxn")] == [BROKERS[1], BROKERS[2]]


def test_an_unreachable_coordinator_is_looked_up_again() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        producer = transactional(cluster)
        transport = producer.transport
        assert isinstance(transport, FakeTransport)
        async with producer:
            await ready(producer)
            producer.begin_transaction()
            await producer.send("a", b"1")
            transport.unreachable.add(BROKERS[1])
            cluster.coordinator = 2
            await producer.commit_transaction()

    cluster = run(scenario)
    assert cluster.transactional()[-2:] == ["FindCoordinator", "EndTxn"]
    assert sent(cluster, "EndTxn")[0].target == BROKERS[2]


def test_a_transaction_timeout_above_the_brokers_maximum_is_fatal() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        cluster.fail_next("InitProducerId", "INVALID_TRANSACTION_TIMEOUT")
        async with transactional(cluster, **{"transaction.timeout.ms": 10_000_000}) as producer:
            with pytest.raises(TransactionError, match="INVALID_TRANSACTION_TIMEOUT"):
                await producer.init_transactions()
            with pytest.raises(TransactionError):
                producer.begin_transaction()

    run(scenario)


def test_a_commit_that_timed_out_is_finished_by_calling_it_again() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            cluster.hold_produce = True
            producer.send("a", b"1")
            # Topic a's metadata arrives within a few loop steps: the timeout below then falls
            # on EndTxn however slow the machine (on a loaded one 10 ms once passed before).
            await settle()
            with pytest.raises(DeliveryTimeoutError, match=r"while awaiting EndTxn\(true\)"):
                await producer.commit_transaction(timeout_s=0.01)
            with pytest.raises(IllegalTransactionStateError, match="must be retried"):
                await producer.abort_transaction()  # KAFKA-13412: not an abort instead
            cluster.release()
            await producer.commit_transaction()
            producer.begin_transaction()

    cluster = run(scenario)
    assert [s.request.committed for s in sent(cluster, "EndTxn")] == [True]  # type: ignore[attr-defined]


def test_a_commit_that_timed_out_awaiting_a_topic_has_not_begun() -> None:
    """Records still waiting for their topic's metadata hold the commit back (Kafka's send
    blocks until it is known); a timeout then names that wait, and, no EndTxn being pending,
    abort_transaction is allowed and fails those records."""

    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            record: asyncio.Future[Any] = producer.send("unknown-topic", b"1")
            with pytest.raises(
                DeliveryTimeoutError,
                match=r"while awaiting the metadata of topic\(s\) unknown-topic before EndTxn",
            ):
                await producer.commit_transaction(timeout_s=0.01)
            await producer.abort_transaction()
            with pytest.raises(TransactionAbortedError):
                await record

    cluster = run(scenario)
    assert not sent(cluster, "EndTxn")  # nothing was sent to the partition: nothing to end


# -- the calls' preconditions and close ---------------------------------------------------------


def test_send_outside_a_transaction_is_refused() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            with pytest.raises(IllegalTransactionStateError, match="initTransactions"):
                producer.send("a", b"1")
            await ready(producer)
            with pytest.raises(IllegalTransactionStateError, match="state READY"):
                producer.send("a", b"1")

    run(scenario)


def test_transactional_calls_need_a_transactional_id() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        producer = Producer(
            {"bootstrap.servers": BROKERS[1]}, transport=FakeTransport(cluster), clock=ManualClock()
        )
        async with producer:
            with pytest.raises(IllegalTransactionStateError, match="non-transactional producer"):
                await producer.init_transactions()

    run(scenario)


def test_close_aborts_an_open_transaction() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            await producer.send("a", b"1")

    cluster = run(scenario)
    assert [s.request.committed for s in sent(cluster, "EndTxn")] == [False]  # type: ignore[attr-defined]


def test_abort_fails_records_still_waiting_for_their_topic() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        async with transactional(cluster) as producer:
            await ready(producer)
            producer.begin_transaction()
            record: asyncio.Future[Any] = producer.send("unknown-topic", b"1")
            await producer.abort_transaction()
            with pytest.raises(TransactionAbortedError):
                await record

    run(scenario)


def test_the_consumer_names_its_group_for_send_offsets_to_transaction() -> None:
    async def scenario(cluster: FakeCluster) -> None:
        transport = FakeTransport(cluster)
        config = {"bootstrap.servers": BROKERS[1], "group.id": "g"}
        async with Consumer(config, transport=transport, clock=ManualClock()) as consumer:
            assert consumer.group_metadata() == ConsumerGroupMetadata("g", -1, "")
        async with Consumer(
            {"bootstrap.servers": BROKERS[1]}, transport=transport, clock=ManualClock()
        ) as consumer:
            with pytest.raises(InvalidGroupIdError):
                consumer.group_metadata()

    run(scenario)
