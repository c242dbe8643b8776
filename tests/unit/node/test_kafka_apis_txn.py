"""The transactional requests on Kafka's protocol (``node.kafka_apis_txn``) and FindCoordinator
for transactional ids (``node.apis_cluster``), without sockets: request frames decoded by the
codec, answered by the handlers over a real transaction coordinator on in-memory fakes
(``txn_fakes``) and a real metadata cache, the answers encoded and read back as a client reads
them. Runs on the simulation's virtual-time loop (the markers go out in the background)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.kafka_apis import KafkaProtocolApis
from kafkasim.node.kafka_apis_txn import KafkaTxnApis
from kafkasim.node.kafka_codec import decode_request, encode_response, millis
from kafkasim.node.metadata_cache import CachedPartition, MetadataCache
from kafkasim.node.topic_creation import TopicCreator
from kafkasim.node.txn_coordinator import TransactionCoordinator
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.loop import run_simulation
from tests.kafka_wire import read_response, request_frame
from tests.unit.node.txn_fakes import TXN_PARTITIONS, Harness, config

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 10, 22, 24, 25, 26
DESCRIBE_TXNS, LIST_TXNS = 65, 66
TID = "tx-1"
TP0, TP1, U0 = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("u", 0)


def code(name: str) -> int:
    return error_for_name(name).code


class FakeProducerIds:
    broker_id = 1

    async def generate_producer_id(self) -> int:
        return 77


@dataclass
class FakeCreator:
    """Records the topics asked for; ``TopicCreator``'s own topic definitions."""

    real: TopicCreator
    created: list[pb.CreatableTopic] = field(default_factory=list)
    auto_create_enabled: bool = False

    def transaction_state_topic(self) -> pb.CreatableTopic:
        return self.real.transaction_state_topic()

    def offsets_topic(self) -> pb.CreatableTopic:
        return self.real.offsets_topic()

    async def create(self, topic: pb.CreatableTopic) -> tuple[int, str]:
        self.created.append(topic)
        return 0, ""


def unused(*_: Any) -> Awaitable[Any]:
    raise AssertionError("not called")


class FakeGroups:
    def partition_of(self, group_id: str) -> int:
        return 0


@dataclass
class TxnBroker:
    harness: Harness
    metadata: MetadataCache
    topic_creator: FakeCreator
    producer_ids: FakeProducerIds = field(default_factory=FakeProducerIds)
    groups: FakeGroups = field(default_factory=FakeGroups)
    broker_id: int = 1
    authorizer: None = None  # no authorizer: everything allowed

    @property
    def transactions(self) -> TransactionCoordinator:
        return self.harness.coordinator


def cached(leader: int = 1) -> CachedPartition:
    return CachedPartition(leader, 0, (leader,), (leader,), (), 0, 0)


def txn_broker(broker_config: BrokerConfig | None = None) -> TxnBroker:
    h = Harness(leaders={TP0: 2, TP1: 2, U0: 3})
    metadata = MetadataCache(1)
    metadata.add_brokers(
        [pb.BrokerEndpoint(node_id=b, host="127.0.0.1", port=9090 + b) for b in (1, 2, 3)]
    )
    for tp in (TP0, TP1, U0):
        metadata.partitions[tp] = cached()
    creator = TopicCreator(broker_config or config(), unused, unused)
    return TxnBroker(h, metadata, FakeCreator(creator))


async def call(
    broker: TxnBroker, api_key: int, version: int, *, read: bool = True, **values: Any
) -> Any:
    """The answer to the request frame built from ``values``, encoded and read back (without
    ``read``: encoded, then returned as built — kio's reader refuses a negative timestamp,
    which Kafka sends and its clients read)."""
    apis = KafkaProtocolApis(cast(Any, broker), "KAFKA", (KafkaTxnApis(cast(Any, broker)).table(),))
    request = decode_request(request_frame(api_key, version, 9, "c", **values), apis.versions)
    body = await apis.handle(request)
    frame = encode_response(request, body)
    if not read:
        return body
    answered_id, decoded = read_response(frame[4:], api_key, version)
    assert answered_id == 9
    return decoded


def run(body: Callable[[TxnBroker], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        broker = txn_broker()
        broker.harness.coordinator.start()
        await body(broker)
        await broker.harness.coordinator.stop()

    run_simulation(main())


async def init(broker: TxnBroker, version: int = 4, **values: Any) -> Any:
    values = {"transactional_id": TID, "transaction_timeout": 60_000, **values}
    return await call(broker, INIT_PRODUCER_ID, version, **values)


async def add(
    broker: TxnBroker, pid: int, epoch: int, *tps: TopicPartition, version: int = 3, tid: str = TID
) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    answer = await call(
        broker,
        ADD_PARTITIONS,
        version,
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[{"name": t, "partitions": p} for t, p in by_topic.items()],
    )
    return {
        (topic.name, p.partition_index): p.partition_error_code
        for topic in answer.results_by_topic_v3_and_below
        for p in topic.results_by_partition
    }


async def end(broker: TxnBroker, pid: int, epoch: int, committed: bool, version: int = 3) -> int:
    answer = await call(
        broker,
        END_TXN,
        version,
        transactional_id=TID,
        producer_id=pid,
        producer_epoch=epoch,
        committed=committed,
    )
    return int(answer.error_code)


async def describe(broker: TxnBroker, *tids: str) -> Any:
    answer = await call(broker, DESCRIBE_TXNS, 0, read=False, transactional_ids=list(tids))
    return answer.transaction_states


# -- the flow ----------------------------------------------------------------------------------


def test_init_add_commit_describe_and_list() -> None:
    async def body(broker: TxnBroker) -> None:
        h = broker.harness
        await h.lead(TID)
        first = await init(broker)
        assert (first.error_code, first.producer_id, first.producer_epoch) == (0, 1000, 0)
        assert await add(broker, 1000, 0, TP0, TP1, U0) == {
            ("orders", 0): 0,
            ("orders", 1): 0,
            ("u", 0): 0,
        }
        [state] = await describe(broker, TID)
        assert (state.error_code, state.transaction_state) == (0, "Ongoing")
        assert (state.producer_id, state.producer_epoch) == (1000, 0)
        assert millis(state.transaction_timeout) == 60_000
        assert millis(state.transaction_start_time) == h.clock.time_ms()
        assert {(t.topic, tuple(t.partitions)) for t in state.topics} == {
            ("orders", (0, 1)),
            ("u", (0,)),
        }
        assert await end(broker, 1000, 0, committed=True) == 0
        await h.settle()
        [state] = await describe(broker, TID)
        assert (state.transaction_state, state.topics) == ("CompleteCommit", ())
        assert {m.result.value for _, m in h.markers.sent} == {"COMMIT"}
        listed = await call(broker, LIST_TXNS, 0, state_filters=[], producer_id_filters=[])
        assert listed.error_code == 0
        assert [
            (t.transactional_id, t.producer_id, t.transaction_state)
            for t in listed.transaction_states
        ] == [(TID, 1000, "CompleteCommit")]

    run(body)


def test_an_abort_then_a_new_producer_fences_the_old_epoch() -> None:
    async def body(broker: TxnBroker) -> None:
        await broker.harness.lead(TID)
        await init(broker)
        assert await add(broker, 1000, 0, TP0) == {("orders", 0): 0}
        assert await end(broker, 1000, 0, committed=False) == 0
        await broker.harness.settle()
        second = await init(broker)
        assert (second.error_code, second.producer_id, second.producer_epoch) == (0, 1000, 1)
        # The old epoch is a zombie's: PRODUCER_FENCED from the versions that know it.
        assert await add(broker, 1000, 0, TP0, version=2) == {
            ("orders", 0): code("PRODUCER_FENCED")
        }
        assert await add(broker, 1000, 0, TP0, version=1) == {
            ("orders", 0): code("INVALID_PRODUCER_EPOCH")
        }
        assert await end(broker, 1000, 0, committed=True, version=2) == code("PRODUCER_FENCED")
        assert await end(broker, 1000, 0, committed=True, version=0) == code(
            "INVALID_PRODUCER_EPOCH"
        )
        offsets = {"transactional_id": TID, "producer_id": 1000, "producer_epoch": 0}
        answer = await call(broker, ADD_OFFSETS, 2, group_id="g", **offsets)
        assert answer.error_code == code("PRODUCER_FENCED")
        answer = await call(broker, ADD_OFFSETS, 1, group_id="g", **offsets)
        assert answer.error_code == code("INVALID_PRODUCER_EPOCH")
        # KIP-360: a client that names an epoch the coordinator moved past is fenced.
        stale = await init(broker, 4, producer_id=1000, producer_epoch=0)
        assert (stale.error_code, stale.producer_id) == (code("PRODUCER_FENCED"), -1)
        stale = await init(broker, 3, producer_id=1000, producer_epoch=0)
        assert stale.error_code == code("INVALID_PRODUCER_EPOCH")

    run(body)


# -- bad input ---------------------------------------------------------------------------------


def test_init_producer_id_bad_input_and_the_idempotent_path() -> None:
    async def body(broker: TxnBroker) -> None:
        await broker.harness.lead(TID)
        assert (await init(broker, transactional_id="")).error_code == code("INVALID_REQUEST")
        half = await init(broker, producer_id=1000, producer_epoch=-1)
        assert half.error_code == code("INVALID_REQUEST")
        too_long = await init(broker, transaction_timeout=10**9)
        assert too_long.error_code == code("INVALID_TRANSACTION_TIMEOUT")
        idempotent = await init(broker, 2, transactional_id=None)
        assert (idempotent.error_code, idempotent.producer_id, idempotent.producer_epoch) == (
            0,
            77,
            0,
        )

    run(body)


def test_add_partitions_refuses_unknown_and_internal_partitions_adding_none() -> None:
    async def body(broker: TxnBroker) -> None:
        await broker.harness.lead(TID)
        await init(broker)
        missing = TopicPartition("orders", 9)
        answer = await add(broker, 1000, 0, TP0, missing)
        assert answer == {
            ("orders", 0): code("OPERATION_NOT_ATTEMPTED"),
            ("orders", 9): code("UNKNOWN_TOPIC_OR_PARTITION"),
        }
        internal = TopicPartition("__consumer_offsets", 0)
        broker.metadata.partitions[internal] = cached()
        assert await add(broker, 1000, 0, internal) == {
            ("__consumer_offsets", 0): code("TOPIC_AUTHORIZATION_FAILED")
        }
        [state] = await describe(broker, TID)
        assert (state.transaction_state, state.topics) == ("Empty", ())
        assert millis(state.transaction_start_time) == -1  # Kafka's "never had a transaction"
        assert await add(broker, 1000, 0, TP0, tid="") == {("orders", 0): code("INVALID_REQUEST")}
        assert await end(broker, 1000, 0, committed=True) == code("INVALID_TXN_STATE")

    run(body)


def test_not_coordinator_load_in_progress_and_not_found() -> None:
    async def body(broker: TxnBroker) -> None:
        h = broker.harness
        assert (await init(broker)).error_code == code("NOT_COORDINATOR")
        assert await add(broker, 1, 0, TP0) == {("orders", 0): code("NOT_COORDINATOR")}
        assert await end(broker, 1, 0, committed=True) == code("NOT_COORDINATOR")
        [state] = await describe(broker, TID)
        assert state.error_code == code("NOT_COORDINATOR")
        assert (state.producer_id, millis(state.transaction_start_time)) == (0, 0)
        # A broker that leads no partition lists nothing, without an error (as Kafka).
        listed = await call(broker, LIST_TXNS, 0, state_filters=[], producer_id_filters=[])
        assert (listed.error_code, listed.transaction_states) == (0, ())
        partition = h.coordinator.partition_for(TID)
        h.log.logs[partition] = []
        h.coordinator.manager.begin_load(partition, 0)
        assert (await init(broker)).error_code == code("COORDINATOR_LOAD_IN_PROGRESS")
        [state] = await describe(broker, TID)
        assert state.error_code == code("COORDINATOR_LOAD_IN_PROGRESS")
        listed = await call(broker, LIST_TXNS, 0, state_filters=[], producer_id_filters=[])
        assert listed.error_code == code("COORDINATOR_LOAD_IN_PROGRESS")
        h.coordinator.resign(partition)
        await h.lead(TID)
        unknown, empty = await describe(broker, TID, "")
        assert unknown.error_code == code("TRANSACTIONAL_ID_NOT_FOUND")
        assert empty.error_code == code("INVALID_REQUEST")

    run(body)


def test_a_coordinator_not_started_is_not_available() -> None:
    async def main() -> None:
        broker = txn_broker()
        [state] = await describe(broker, TID)
        assert state.error_code == code("COORDINATOR_NOT_AVAILABLE")
        listed = await call(broker, LIST_TXNS, 0, state_filters=[], producer_id_filters=[])
        assert listed.error_code == code("COORDINATOR_NOT_AVAILABLE")

    run_simulation(main())


def test_list_transactions_filters() -> None:
    async def body(broker: TxnBroker) -> None:
        h = broker.harness
        other = next(
            f"tx-{n}"
            for n in range(2, 100)
            if h.coordinator.partition_for(f"tx-{n}") != h.coordinator.partition_for(TID)
        )
        await h.lead(TID)
        await h.lead(other)
        await init(broker)
        await init(broker, transactional_id=other)  # producer id 1001
        await add(broker, 1000, 0, TP0)  # TID Ongoing since now
        h.clock.advance(5_000)

        async def listed(version: int = 1, **filters: Any) -> tuple[Any, list[str]]:
            values = {"state_filters": [], "producer_id_filters": [], **filters}
            answer = await call(broker, LIST_TXNS, version, **values)
            assert answer.error_code == 0
            return answer.unknown_state_filters, [
                t.transactional_id for t in answer.transaction_states
            ]

        assert sorted((await listed(0))[1]) == sorted([TID, other])
        assert await listed(state_filters=["Ongoing", "Bogus"]) == (("Bogus",), [TID])
        assert await listed(state_filters=["Bogus"]) == (("Bogus",), [])
        assert await listed(producer_id_filters=[1001]) == ((), [other])
        # v1's duration filter: open longer than the duration (Empty ids have no start: -1,
        # so they pass any duration, as in Kafka).
        assert sorted((await listed(duration_filter=4_999))[1]) == sorted([TID, other])
        assert (await listed(duration_filter=5_000))[1] == [other]

    run(body)


# -- FindCoordinator ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 3, 4])
def test_find_coordinator_of_a_transactional_id(version: int) -> None:
    async def main() -> None:
        broker = txn_broker(
            config(
                **{
                    "transaction.state.log.replication.factor": 2,
                    "transaction.state.log.min.isr": 2,
                }
            )
        )

        async def find(key: str, key_type: int = 1) -> tuple[int, int]:
            if version >= 4:
                answer = await call(
                    broker, FIND_COORDINATOR, version, key_type=key_type, coordinator_keys=[key]
                )
                [found] = answer.coordinators
            else:
                found = await call(broker, FIND_COORDINATOR, version, key_type=key_type, key=key)
            return int(found.error_code), int(found.node_id)

        # First use: __transaction_state is created, and the client told to retry.
        assert await find(TID) == (code("COORDINATOR_NOT_AVAILABLE"), -1)
        [topic] = broker.topic_creator.created
        assert (topic.name, topic.num_partitions, topic.replication_factor) == (
            TRANSACTION_STATE_TOPIC,
            TXN_PARTITIONS,
            2,
        )
        assert topic.configs["cleanup.policy"] == "compact"
        assert topic.configs["min.insync.replicas"] == "2"
        partition = broker.transactions.partition_for(TID)
        for p in range(TXN_PARTITIONS):
            leader = 3 if p == partition else 2
            broker.metadata.partitions[TopicPartition(TRANSACTION_STATE_TOPIC, p)] = cached(leader)
        assert await find(TID) == (0, 3)
        assert await find("") == (code("INVALID_REQUEST"), -1)
        assert await find(TID, key_type=2) == (code("INVALID_REQUEST"), -1)
        broker.metadata.brokers.pop(3)  # the leader is not live
        assert await find(TID) == (code("COORDINATOR_NOT_AVAILABLE"), -1)
        # Groups keep their own topic and their own error for an empty key.
        assert await find("", key_type=0) == (code("INVALID_GROUP_ID"), -1)
        assert await find("g", key_type=0) == (code("COORDINATOR_NOT_AVAILABLE"), -1)
        assert [t.name for t in broker.topic_creator.created] == [
            TRANSACTION_STATE_TOPIC,
            "__consumer_offsets",
        ]

    run_simulation(main())
