"""librdkafka's transactional producer (confluent-kafka) against kafkasim's transaction
coordinators: init_transactions, begin_transaction, records to two partitions of two topics,
commit_transaction (a read_committed consumer sees them all) and abort_transaction (it sees none,
a read_uncommitted one sees them); a second producer with the same ``transactional.id`` fences
the first (whose next call fails with a fatal fencing error); a transaction left open past its
``transaction.timeout.ms`` is aborted by the coordinator. One 3-broker cluster for the module,
with a small ``__transaction_state`` (5 partitions) and a 500 ms timeout-abort round.
``send_offsets_to_transaction`` needs TxnOffsetCommit, which is not here."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkPartition

from kafkasim import proto
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.proto import kafkasim_pb2 as pb
from tests.cli_run import local_cluster
from tests.interop.kafkasim_side import DEADLINE_S, create_topic

TOPIC_A, TOPIC_B = "txn-a", "txn-b"
PARTITIONS = [CkPartition(TOPIC_A, 0), CkPartition(TOPIC_B, 1)]
FENCING_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    props: dict[str, object] = {
        "transaction.state.log.num.partitions": 5,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    }
    with local_cluster(tmp_path_factory.mktemp("interop-txn"), 3, props) as cluster:
        create_topic(cluster, TOPIC_A, partitions=2)
        create_topic(cluster, TOPIC_B, partitions=2)
        yield cluster


def producer(cluster: LocalCluster, transactional_id: str, **config: object) -> Producer:
    return Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **config,
        }
    )


def send(p: Producer, *values: str) -> None:
    """Each value to both partitions (two topics), keyed by where it went."""
    for value in values:
        for tp in PARTITIONS:
            p.produce(tp.topic, value.encode(), partition=tp.partition)


def read(cluster: LocalCluster, isolation: str, until: set[str]) -> list[str]:
    """Every value of both partitions, from the beginning, until each of ``until`` was read
    from both partitions."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": f"reader-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        consumer.assign(
            [CkPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in PARTITIONS]
        )
        values: list[str] = []
        seen: set[tuple[str, int, str]] = set()
        wanted = {(tp.topic, tp.partition, v) for tp in PARTITIONS for v in until}
        deadline = time.monotonic() + DEADLINE_S
        while not wanted <= seen:
            assert time.monotonic() < deadline, f"{isolation}: read {values}, waiting for {until}"
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value = (message.value() or b"").decode()
            values.append(value)
            seen.add((message.topic(), message.partition(), value))
        return values
    finally:
        consumer.close()


def commit(p: Producer, *values: str) -> float:
    """One transaction of ``values``, committed; the commit_transaction call's seconds."""
    p.begin_transaction()
    send(p, *values)
    began = time.monotonic()
    p.commit_transaction(DEADLINE_S)
    return time.monotonic() - began


def test_commit_is_read_committed_and_abort_is_not(kafka_cluster: LocalCluster) -> None:
    p = producer(kafka_cluster, "tx-commit-abort")
    p.init_transactions(DEADLINE_S)
    latencies = [commit(p, f"c{n}-0", f"c{n}-1") for n in range(10)]
    committed = {f"c{n}-{i}" for n in range(10) for i in range(2)}
    p.begin_transaction()
    send(p, "a-0", "a-1", "a-2")
    p.flush(DEADLINE_S)  # written to both partitions, then aborted
    p.abort_transaction(DEADLINE_S)
    commit(p, "after-abort")
    read_committed = read(kafka_cluster, "read_committed", {"after-abort"})
    # Each committed value once in each partition, no aborted one.
    assert Counter(read_committed) == dict.fromkeys(committed | {"after-abort"}, 2)
    read_uncommitted = read(kafka_cluster, "read_uncommitted", {"after-abort"})
    assert {"a-0", "a-1", "a-2"} <= set(read_uncommitted)
    ms = sorted(1000 * s for s in latencies)
    print(
        f"\ncommit_transaction latency over {len(ms)} transactions (2 partitions, 2 topics): "
        f"p50 {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms"
    )


def test_a_second_producer_fences_the_first(kafka_cluster: LocalCluster) -> None:
    first = producer(kafka_cluster, "tx-fenced")
    first.init_transactions(DEADLINE_S)
    first.begin_transaction()
    send(first, "zombie-0")
    first.flush(DEADLINE_S)
    second = producer(kafka_cluster, "tx-fenced")
    second.init_transactions(DEADLINE_S)  # aborts the first's open transaction
    with pytest.raises(KafkaException) as raised:
        send(first, "zombie-1")
        first.commit_transaction(DEADLINE_S)
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() in FENCING_CODES, error
    commit(second, "fencer")
    values = read(kafka_cluster, "read_committed", {"fencer"})
    assert not {v for v in values if v.startswith("zombie")}


def describe(cluster: LocalCluster, transactional_id: str) -> pb.TransactionDescription | None:
    """The id as its coordinator describes it over gRPC (None: no broker coordinates it)."""

    async def main() -> pb.TransactionDescription | None:
        transport = GrpcTransport()
        try:
            for address in cluster.bootstrap:
                response = await transport.call(
                    address,
                    proto.METHOD_DESCRIBE_TRANSACTIONS,
                    pb.DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                    timeout_s=10,
                )
                assert isinstance(response, pb.DescribeTransactionsResponse)
                (description,) = response.transactions
                if description.error_code == 0:
                    return description
            return None
        finally:
            await transport.close()

    return asyncio.run(main())


def test_a_transaction_open_past_its_timeout_is_aborted(kafka_cluster: LocalCluster) -> None:
    p = producer(
        kafka_cluster, "tx-timeout", **{"transaction.timeout.ms": 3000, "message.timeout.ms": 3000}
    )
    p.init_transactions(DEADLINE_S)
    p.begin_transaction()
    send(p, "late-0", "late-1")
    p.flush(DEADLINE_S)
    open_ = describe(kafka_cluster, "tx-timeout")
    assert open_ is not None and open_.transaction_state == "Ongoing"
    deadline = time.monotonic() + DEADLINE_S
    while True:
        found = describe(kafka_cluster, "tx-timeout")
        if found is not None and found.transaction_state == "CompleteAbort":
            break
        assert time.monotonic() < deadline, f"still {found}"
        time.sleep(0.2)
    # Aborted at a bumped epoch: the producer is fenced (librdkafka reports it fatal or
    # abortable, by version; either way its commit fails).
    assert found.producer_epoch == open_.producer_epoch + 1
    with pytest.raises(KafkaException):
        p.commit_transaction(DEADLINE_S)
    other = producer(kafka_cluster, "tx-after-timeout")
    other.init_transactions(DEADLINE_S)
    commit(other, "after-timeout")
    assert not {
        v for v in read(kafka_cluster, "read_committed", {"after-timeout"}) if v.startswith("late-")
    }
    assert {"late-0", "late-1"} <= set(read(kafka_cluster, "read_uncommitted", {"after-timeout"}))
