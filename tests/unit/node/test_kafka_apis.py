"""The Kafka front door's request layer (``node.kafka_apis``) without sockets: request frames
decoded by the codec, handed to the handlers over a small in-memory broker that records the
domain calls it gets, and the answers encoded and read back as a client reads them. The real
replica manager behind these calls is covered by the integration and interop tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node import replica_types as rt
from kafkasim.node.kafka_apis import CloseConnectionError, KafkaProtocolApis
from kafkasim.node.kafka_codec import (
    UnsupportedVersionError,
    decode_request,
    encode_response,
)
from kafkasim.node.metadata_cache import BrokerAddress, ClusterView, PartitionView, TopicView
from kafkasim.storage.records.batch import ControlRecordType
from tests.kafka_wire import API_VERSIONS, METADATA, PRODUCE, read_response, request_frame

FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, WRITE_TXN_MARKERS = 1, 2, 23, 27
T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
NOT_LEADER = error_for_name("NOT_LEADER_OR_FOLLOWER")
UNKNOWN_TOPIC = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
CODE = {
    name: error_for_name(name).code
    for name in (
        "UNSUPPORTED_VERSION",
        "TOPIC_AUTHORIZATION_FAILED",
        "FETCH_SESSION_ID_NOT_FOUND",
        "NOT_LEADER_OR_FOLLOWER",
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
}


@dataclass
class FakeReplicaManager:
    """Only what the partition handlers call; each call is recorded, each answer scripted."""

    produce: Callable[[rt.ProduceParams], list[rt.ProducePartitionResult]] = lambda p: []
    fetch: Callable[[rt.FetchParams], list[rt.FetchPartitionData]] = lambda p: []
    offsets: Callable[[rt.ListOffsetsParams], list[rt.ListOffsetsPartitionResult]] = lambda p: []
    epochs: Callable[[tuple[rt.EpochRequest, ...]], list[rt.EpochEndOffset]] = lambda w: []
    markers: Callable[[rt.WriteTxnMarkersParams], list[rt.TxnMarkerResult]] = lambda p: []
    calls: list[Any] = field(default_factory=list)

    async def append_records(self, params: rt.ProduceParams) -> list[rt.ProducePartitionResult]:
        self.calls.append(params)
        return self.produce(params)

    async def fetch_messages(self, params: rt.FetchParams) -> list[rt.FetchPartitionData]:
        self.calls.append(params)
        return self.fetch(params)

    def list_offsets(self, params: rt.ListOffsetsParams) -> list[rt.ListOffsetsPartitionResult]:
        self.calls.append(params)
        return self.offsets(params)

    def offsets_for_leader_epoch(
        self, wanted: tuple[rt.EpochRequest, ...]
    ) -> list[rt.EpochEndOffset]:
        self.calls.append(wanted)
        return self.epochs(wanted)

    async def write_txn_markers(self, params: rt.WriteTxnMarkersParams) -> list[rt.TxnMarkerResult]:
        self.calls.append(params)
        return self.markers(params)


VIEW = ClusterView(
    cluster_id="cluster-1",
    controller_id=1,
    brokers=(BrokerAddress(1, "127.0.0.1", 9092, "r1"),),
    topics=(
        TopicView(
            "t",
            None,
            False,
            (PartitionView(0, None, 1, 4, (1, 2), (1,), (2,)),),
        ),
    ),
)


@dataclass
class FakeMetadata:
    asked: list[tuple[list[str] | None, str | None]] = field(default_factory=list)

    def describe(self, topics: list[str] | None, listener: str | None = None) -> ClusterView:
        self.asked.append((topics, listener))
        return VIEW


@dataclass
class FakeTopicCreator:
    auto_create_enabled: bool = False


@dataclass
class FakeBroker:
    replica_manager: FakeReplicaManager = field(default_factory=FakeReplicaManager)
    metadata: FakeMetadata = field(default_factory=FakeMetadata)
    topic_creator: FakeTopicCreator = field(default_factory=FakeTopicCreator)
    broker_id: int = 1
    authorizer: Any = None  # no authorizer: everything allowed


def serve(
    broker: FakeBroker, api_key: int, version: int, correlation_id: int = 9, **values: Any
) -> Any:
    """The handler's answer to the request frame built from ``values``, encoded and read back
    as a client reads it (None: no response)."""
    apis = KafkaProtocolApis(cast(Any, broker), "KAFKA")
    request = decode_request(
        request_frame(api_key, version, correlation_id, "c", **values), apis.versions
    )
    body = asyncio.run(apis.handle(request))
    if body is None:
        return None
    answered_id, decoded = read_response(encode_response(request, body)[4:], api_key, version)
    assert answered_id == correlation_id
    return decoded


def by_partition(topics: Any, topic_name: str, partitions: str) -> dict[tuple[str, int], Any]:
    return {
        (getattr(t, topic_name), getattr(p, "partition_index", getattr(p, "index", None))): p
        for t in topics
        for p in getattr(t, partitions)
    }


# -- ApiVersions ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_advertises_exactly_the_handler_table(version: int) -> None:
    broker = FakeBroker()
    extra = {50: (0, 1, KafkaProtocolApis(cast(Any, broker), "KAFKA").api_versions)}
    apis = KafkaProtocolApis(cast(Any, broker), "KAFKA", (extra,))
    values = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
    request = decode_request(request_frame(API_VERSIONS, version, 4, "c", **values), apis.versions)
    body = asyncio.run(apis.handle(request))
    _, answer = read_response(encode_response(request, body)[4:], API_VERSIONS, version)
    assert answer.error_code == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert advertised == {k: (low, high) for k, (low, high, _) in apis.handlers.items()}
    assert advertised[50] == (0, 1)
    assert [k.api_key for k in answer.api_keys] == sorted(advertised)


def test_an_unknown_api_versions_version_is_answered_v0_with_its_own_range() -> None:
    apis = KafkaProtocolApis(cast(Any, FakeBroker()), "KAFKA")
    body = apis.unsupported_api_versions(UnsupportedVersionError(API_VERSIONS, 99, 5, "c"))
    assert body.error_code == CODE["UNSUPPORTED_VERSION"]
    # As Kafka since 2.4 (KIP-511): only ApiVersions' own range, for the client's retry.
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 3)]


# -- Metadata ---------------------------------------------------------------------------------


def test_metadata_v0_with_no_topics_asks_for_every_topic() -> None:
    broker = FakeBroker()
    answer = serve(broker, METADATA, 0, topics=[])
    assert broker.metadata.asked == [(None, "KAFKA")]
    assert [t.name for t in answer.topics] == ["t"]


def test_metadata_v1_with_no_topics_asks_for_none_and_null_for_every_topic() -> None:
    broker = FakeBroker()
    serve(broker, METADATA, 1, topics=[])
    serve(broker, METADATA, 1, topics=None)
    serve(broker, METADATA, 12, topics=[{"name": "t"}])
    assert broker.metadata.asked == [([], "KAFKA"), (None, "KAFKA"), (["t"], "KAFKA")]


@pytest.mark.parametrize("version", [0, 1, 9, 12])
def test_metadata_translates_the_cluster_view(version: int) -> None:
    answer = serve(FakeBroker(), METADATA, version, topics=None if version else [])
    (broker,) = answer.brokers
    assert (broker.node_id, broker.host, broker.port) == (1, "127.0.0.1", 9092)
    (partition,) = answer.topics[0].partitions
    assert (partition.partition_index, partition.leader_id) == (0, 1)
    assert (partition.replica_nodes, partition.isr_nodes) == ((1, 2), (1,))
    if version >= 1:
        assert answer.controller_id == 1
    if version >= 2:
        assert answer.cluster_id == "cluster-1"
    if version >= 5:
        assert partition.offline_replicas == (2,)
    if version >= 7:
        assert partition.leader_epoch == 4


# -- Produce ----------------------------------------------------------------------------------

TOPIC_DATA = [
    {"name": "t", "partition_data": [{"index": 0, "records": b"a"}, {"index": 1, "records": b"b"}]},
    {"name": "u", "partition_data": [{"index": 0, "records": None}]},
]


def produced(params: rt.ProduceParams) -> list[rt.ProducePartitionResult]:
    return [
        rt.ProducePartitionResult(T0, base_offset=10, log_start_offset=2),
        rt.ProducePartitionResult(T1, NOT_LEADER("moved")),
        rt.ProducePartitionResult(U0, base_offset=0, log_append_time_ms=1_700_000_000_000),
    ]


@pytest.mark.parametrize("version", [3, 5, 8, 9])
def test_produce_becomes_one_append_and_its_results_the_response(version: int) -> None:
    broker = FakeBroker(FakeReplicaManager(produce=produced))
    answer = serve(broker, PRODUCE, version, acks=-1, timeout=1500, topic_data=TOPIC_DATA)
    (params,) = broker.replica_manager.calls
    assert (params.acks, params.timeout_ms) == (-1, 1500)
    assert [(p.tp, p.records) for p in params.partitions] == [(T0, b"a"), (T1, b"b"), (U0, b"")]
    parts = by_partition(answer.responses, "name", "partition_responses")
    assert (parts["t", 0].error_code, parts["t", 0].base_offset) == (0, 10)
    assert parts["t", 1].error_code == CODE["NOT_LEADER_OR_FOLLOWER"]
    assert parts["t", 0].log_append_time is None
    assert parts["u", 0].log_append_time is not None
    if version >= 5:
        assert parts["t", 0].log_start_offset == 2
    if version >= 8:
        assert parts["t", 1].error_message == "moved"
        assert parts["t", 0].error_message is None


def test_an_acks_0_produce_is_not_answered() -> None:
    ok = FakeBroker(FakeReplicaManager(produce=lambda p: [rt.ProducePartitionResult(T0)]))
    assert serve(ok, PRODUCE, 9, acks=0, timeout=0, topic_data=TOPIC_DATA[:1]) is None
    assert len(ok.replica_manager.calls) == 1


def test_a_failed_acks_0_produce_closes_the_connection() -> None:
    broker = FakeBroker(FakeReplicaManager(produce=produced))
    with pytest.raises(CloseConnectionError, match="acks=0 produce to t-1 failed"):
        serve(broker, PRODUCE, 9, acks=0, timeout=0, topic_data=TOPIC_DATA)


# -- Fetch ------------------------------------------------------------------------------------

FETCH_TOPICS = [
    {
        "topic": "t",
        "partitions": [
            {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1024},
            {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1024},
        ],
    }
]


def fetched(params: rt.FetchParams) -> list[rt.FetchPartitionData]:
    return [
        rt.FetchPartitionData(T0, None, high_watermark=9, last_stable_offset=9, records=b"rb"),
        rt.FetchPartitionData(T1, UNKNOWN_TOPIC()),
    ]


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_fetch_becomes_fetch_params_and_partition_data(version: int) -> None:
    broker = FakeBroker(FakeReplicaManager(fetch=fetched))
    answer = serve(
        broker,
        FETCH,
        version,
        max_wait=500,
        min_bytes=1,
        max_bytes=4096,
        isolation_level=1,
        topics=FETCH_TOPICS,
    )
    (params,) = broker.replica_manager.calls
    assert (params.replica_id, params.max_wait_ms, params.min_bytes, params.max_bytes) == (
        -1,
        500,
        1,
        4096,
    )
    assert params.isolation_level == 1
    assert [(p.tp, p.fetch_offset, p.partition_max_bytes) for p in params.partitions] == [
        (T0, 5, 1024),
        (T1, 0, 1024),
    ]
    parts = by_partition(answer.responses, "topic", "partitions")
    assert (parts["t", 0].high_watermark, bytes(parts["t", 0].records)) == (9, b"rb")
    assert parts["t", 1].error_code == CODE["UNKNOWN_TOPIC_OR_PARTITION"]
    if version >= 7:
        assert (answer.error_code, answer.session_id) == (0, 0)


@pytest.mark.parametrize("version", [4, 11, 12])
def test_a_read_committed_fetch_answers_its_aborted_transactions(version: int) -> None:
    def read_committed(params: rt.FetchParams) -> list[rt.FetchPartitionData]:
        aborted = (rt.AbortedTransaction(7, 3), rt.AbortedTransaction(9, 5))
        return [
            rt.FetchPartitionData(
                T0,
                high_watermark=9,
                last_stable_offset=6,
                records=b"rb",
                aborted_transactions=aborted,
            ),
            rt.FetchPartitionData(
                T1, high_watermark=2, last_stable_offset=2, aborted_transactions=()
            ),
        ]

    broker = FakeBroker(FakeReplicaManager(fetch=read_committed))
    answer = serve(
        broker, FETCH, version, max_wait=0, min_bytes=1, isolation_level=1, topics=FETCH_TOPICS
    )
    parts = by_partition(answer.responses, "topic", "partitions")
    first, second = parts["t", 0], parts["t", 1]
    assert (first.high_watermark, first.last_stable_offset) == (9, 6)
    assert [(t.producer_id, t.first_offset) for t in first.aborted_transactions] == [
        (7, 3),
        (9, 5),
    ]
    assert second.aborted_transactions == ()


def test_a_read_uncommitted_fetch_answers_null_aborted_transactions() -> None:
    broker = FakeBroker(FakeReplicaManager(fetch=fetched))
    answer = serve(broker, FETCH, 12, max_wait=0, min_bytes=1, topics=FETCH_TOPICS)
    parts = by_partition(answer.responses, "topic", "partitions")
    assert parts["t", 0].aborted_transactions is None
    assert parts["t", 1].aborted_transactions is None


def test_a_fetch_from_a_replica_id_is_refused_without_reading() -> None:
    broker = FakeBroker(FakeReplicaManager(fetch=fetched))
    answer = serve(broker, FETCH, 12, replica_id=2, max_wait=0, min_bytes=1, topics=FETCH_TOPICS)
    assert broker.replica_manager.calls == []
    codes = {
        k: p.error_code for k, p in by_partition(answer.responses, "topic", "partitions").items()
    }
    assert codes == {("t", 0): 29, ("t", 1): 29}  # TOPIC_AUTHORIZATION_FAILED


def test_an_incremental_fetch_answers_fetch_session_id_not_found() -> None:
    broker = FakeBroker(FakeReplicaManager(fetch=fetched))
    answer = serve(
        broker, FETCH, 12, session_id=77, session_epoch=3, max_wait=0, min_bytes=1, topics=[]
    )
    assert (answer.error_code, answer.session_id) == (CODE["FETCH_SESSION_ID_NOT_FOUND"], 0)
    assert answer.responses == ()
    assert broker.replica_manager.calls == []


@pytest.mark.parametrize(("session_id", "epoch"), [(0, 0), (0, -1), (77, -1)])
def test_a_full_fetch_is_served_sessionless(session_id: int, epoch: int) -> None:
    # Epoch 0 opens a session, -1 closes the one named (KIP-227): both are full fetches.
    broker = FakeBroker(FakeReplicaManager(fetch=fetched))
    answer = serve(
        broker,
        FETCH,
        12,
        session_id=session_id,
        session_epoch=epoch,
        max_wait=0,
        min_bytes=1,
        topics=FETCH_TOPICS,
    )
    assert (answer.error_code, answer.session_id) == (0, 0)
    assert len(broker.replica_manager.calls) == 1


# -- ListOffsets, OffsetForLeaderEpoch --------------------------------------------------------

LIST_TOPICS = [
    {
        "name": "t",
        "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": 4}],
    }
]


@pytest.mark.parametrize("version", [1, 2, 4, 7])
def test_list_offsets_translates_both_ways(version: int) -> None:
    broker = FakeBroker(
        FakeReplicaManager(
            offsets=lambda p: [
                rt.ListOffsetsPartitionResult(T0, None, timestamp=-1, offset=42, leader_epoch=4)
            ]
        )
    )
    answer = serve(
        broker, LIST_OFFSETS, version, replica_id=-1, isolation_level=1, topics=LIST_TOPICS
    )
    (params,) = broker.replica_manager.calls
    (partition,) = params.partitions
    assert (partition.tp, partition.timestamp) == (T0, -1)
    assert partition.current_leader_epoch == (4 if version >= 4 else rt.NO_EPOCH)
    assert params.isolation_level == (1 if version >= 2 else rt.READ_UNCOMMITTED)
    (result,) = answer.topics[0].partitions
    assert (result.error_code, result.offset) == (0, 42)
    if version >= 4:
        assert result.leader_epoch == 4


def test_list_offsets_from_a_replica_id_passes_the_replica_id_on() -> None:
    # As Kafka: a replica id is not refused; it lets the answer reach past the HW.
    broker = FakeBroker()
    serve(broker, LIST_OFFSETS, 7, replica_id=3, topics=LIST_TOPICS)
    (call,) = broker.replica_manager.calls
    assert call.replica_id == 3


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch_translates_both_ways(version: int) -> None:
    broker = FakeBroker(
        FakeReplicaManager(
            epochs=lambda w: [rt.EpochEndOffset(T0, None, leader_epoch=3, end_offset=17)]
        )
    )
    topics = [
        {
            "topic": "t",
            "partitions": [{"partition": 0, "leader_epoch": 3, "current_leader_epoch": 5}],
        }
    ]
    answer = serve(broker, OFFSET_FOR_LEADER_EPOCH, version, topics=topics)
    assert broker.replica_manager.calls == [(rt.EpochRequest(T0, 3, 5),)]
    (result,) = answer.topics[0].partitions
    assert (result.error_code, result.partition, result.leader_epoch, result.end_offset) == (
        0,
        0,
        3,
        17,
    )


# -- WriteTxnMarkers --------------------------------------------------------------------------


def test_write_txn_markers_translates_both_ways() -> None:
    def written(params: rt.WriteTxnMarkersParams) -> list[rt.TxnMarkerResult]:
        return [
            rt.TxnMarkerResult(5, ((T0, None), (T1, NOT_LEADER()), (U0, None))),
            rt.TxnMarkerResult(6, ((U0, UNKNOWN_TOPIC()),)),
        ]

    broker = FakeBroker(FakeReplicaManager(markers=written))
    answer = serve(
        broker,
        WRITE_TXN_MARKERS,
        1,
        markers=[
            {
                "producer_id": 5,
                "producer_epoch": 2,
                "transaction_result": True,
                "coordinator_epoch": 7,
                "topics": [
                    {"name": "t", "partition_indexes": [0, 1]},
                    {"name": "u", "partition_indexes": [0]},
                ],
            },
            {
                "producer_id": 6,
                "producer_epoch": 0,
                "transaction_result": False,
                "coordinator_epoch": 7,
                "topics": [{"name": "u", "partition_indexes": [0]}],
            },
        ],
    )
    (params,) = broker.replica_manager.calls
    assert params == rt.WriteTxnMarkersParams(
        (
            rt.TxnMarkerEntry(5, 2, 7, ControlRecordType.COMMIT, (T0, T1, U0)),
            rt.TxnMarkerEntry(6, 0, 7, ControlRecordType.ABORT, (U0,)),
        )
    )
    first, second = answer.markers
    assert first.producer_id == 5
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in first.topics
    ] == [("t", [(0, 0), (1, CODE["NOT_LEADER_OR_FOLLOWER"])]), ("u", [(0, 0)])]
    assert second.producer_id == 6
    assert [(p.partition_index, p.error_code) for p in second.topics[0].partitions] == [
        (0, CODE["UNKNOWN_TOPIC_OR_PARTITION"])
    ]
