"""The gRPC translation of the replica manager's requests (``node.apis_replica``): protobuf in,
domain values out, and back; and which node modules may speak protobuf at all.

Why: the replica manager must serve a second front door (Kafka's binary protocol) unchanged, so
every wire convention (error codes and messages, -1 sentinels, request order, echoed
correlation ids) lives in these pure functions, and nothing below them imports protobuf.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import (
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from kafkasim.common.types import TopicPartition
from kafkasim.node import apis_replica as apis
from kafkasim.node.replica_types import (
    AbortedTransaction,
    DeleteRecordsPartitionResult,
    DescribeReplicasResult,
    EpochEndOffset,
    FetchPartitionData,
    FetchPartitionParams,
    ListOffsetsPartitionResult,
    PartitionErrors,
    ProducePartitionResult,
    ReplicaDescription,
    TxnMarkerEntry,
    TxnMarkerResult,
    WriteTxnMarkersParams,
)
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import ControlRecordType

A0 = TopicPartition("a", 0)
B1 = TopicPartition("b", 1)
NODE = Path(__file__).resolve().parents[3] / "node"

# The node modules that may import protobuf: the gRPC request layer (apis*), the gRPC server
# adapter, the follower fetcher and the transaction coordinator's marker sender (wire clients of
# the partition leaders), the metrics (they count the
# gRPC handlers' request and response bytes), the metadata cache (it keeps the controller's
# UpdateMetadata and answers Metadata as they are), the topic creator (it asks the controller
# in CreateTopics form) and the broker (wiring, and its own ControlledShutdown request to a
# remote controller). Nothing else.
MAY_IMPORT_PROTO = {
    "apis.py",
    "apis_admin.py",
    "apis_group.py",
    "apis_replica.py",
    "apis_txn.py",
    "broker.py",
    "fetcher.py",
    "fetcher_wire.py",
    "metadata_cache.py",
    "metrics.py",
    "produce_wire.py",
    "rpc_framed.py",
    "rpc_grpc.py",
    "topic_creation.py",
    "txn_marker_sender.py",
}


def test_produce_request_becomes_per_partition_records_in_order() -> None:
    request = pb.ProduceRequest(
        acks=-1,
        timeout_ms=1_500,
        correlation_id=7,
        partitions=[
            pb.ProducePartitionData(topic="b", partition=1, records=b"x"),
            pb.ProducePartitionData(topic="a", partition=0, records=b"y"),
        ],
    )
    params = apis.produce_params(request)
    assert (params.acks, params.timeout_ms) == (-1, 1_500)
    assert [(p.tp, p.records) for p in params.partitions] == [(B1, b"x"), (A0, b"y")]


def test_produce_results_become_the_response_with_codes_messages_and_the_correlation_id() -> None:
    results = [
        ProducePartitionResult(A0, base_offset=10, log_append_time_ms=-1, log_start_offset=0),
        ProducePartitionResult(B1, RequestTimedOutError("acks=all not satisfied")),
    ]
    encoded = apis.produce_response(results, correlation_id=7)
    assert encoded.encodes is pb.ProduceResponse
    assert encoded.results == results  # what the request metrics count
    response = pb.ProduceResponse.FromString(encoded.SerializeToString())
    assert response.correlation_id == 7
    ok, failed = response.partitions
    assert (ok.topic, ok.partition, ok.error_code, ok.error_message) == ("a", 0, 0, "")
    assert (ok.base_offset, ok.log_append_time_ms, ok.log_start_offset) == (10, -1, 0)
    assert (failed.error_code, failed.error_message) == (7, "acks=all not satisfied")
    assert (failed.base_offset, failed.log_start_offset) == (-1, -1)


def test_fetch_request_becomes_fetch_params() -> None:
    request = pb.FetchRequest(
        replica_id=2,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1024,
        isolation_level=1,
        partitions=[
            pb.FetchPartition(
                topic="a",
                partition=0,
                current_leader_epoch=3,
                fetch_offset=42,
                log_start_offset=5,
                partition_max_bytes=512,
            )
        ],
    )
    params = apis.fetch_params(request)
    assert params.is_from_follower
    assert (params.replica_id, params.max_wait_ms, params.min_bytes, params.max_bytes) == (
        2,
        500,
        1,
        1024,
    )
    assert params.isolation_level == 1
    assert params.partitions == (
        FetchPartitionParams(
            A0, fetch_offset=42, current_leader_epoch=3, log_start_offset=5, partition_max_bytes=512
        ),
    )
    assert not apis.fetch_params(pb.FetchRequest(replica_id=-1)).is_from_follower


def decoded(answer: apis.EncodedFetchResponse) -> pb.FetchResponse:
    """The answer as its receiver reads it: protobuf parsing its wire bytes."""
    return pb.FetchResponse.FromString(answer.SerializeToString())


def test_fetch_partition_data_becomes_the_response() -> None:
    answer = apis.fetch_response(
        [
            FetchPartitionData(
                A0, high_watermark=9, last_stable_offset=9, log_start_offset=2, records=b"r"
            ),
            FetchPartitionData(B1, NotLeaderOrFollowerError("not here"), high_watermark=4),
        ]
    )
    assert answer.partitions == (apis.FetchedSize("a", 0, 1), apis.FetchedSize("b", 6, 0))
    ok, failed = decoded(answer).partitions
    assert (ok.error_code, ok.high_watermark, ok.last_stable_offset) == (0, 9, 9)
    assert (ok.log_start_offset, ok.records) == (2, b"r")
    assert (failed.topic, failed.error_code, failed.error_message) == ("b", 6, "not here")
    assert (failed.high_watermark, failed.log_start_offset, failed.records) == (4, -1, b"")
    assert list(ok.aborted_transactions) == list(failed.aborted_transactions) == []


def test_a_read_committed_answer_carries_its_lso_and_aborted_transactions() -> None:
    aborted = (AbortedTransaction(7, 3), AbortedTransaction(9, 5))
    (part,) = decoded(
        apis.fetch_response(
            [
                FetchPartitionData(
                    A0, high_watermark=9, last_stable_offset=6, aborted_transactions=aborted
                )
            ]
        )
    ).partitions
    assert (part.high_watermark, part.last_stable_offset) == (9, 6)
    assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(7, 3), (9, 5)]


def test_write_txn_markers_round_trip() -> None:
    request = pb.WriteTxnMarkersRequest(
        markers=[
            pb.WritableTxnMarker(
                producer_id=5,
                producer_epoch=2,
                transaction_result=True,
                coordinator_epoch=7,
                topics=[
                    pb.WritableTxnMarkerTopic(name="a", partition_indexes=[0]),
                    pb.WritableTxnMarkerTopic(name="b", partition_indexes=[1]),
                ],
            ),
            pb.WritableTxnMarker(producer_id=6, transaction_result=False, coordinator_epoch=7),
        ]
    )
    assert apis.write_txn_markers_params(request) == WriteTxnMarkersParams(
        (
            TxnMarkerEntry(5, 2, 7, ControlRecordType.COMMIT, (A0, B1)),
            TxnMarkerEntry(6, 0, 7, ControlRecordType.ABORT, ()),
        )
    )
    response = apis.write_txn_markers_response(
        [
            TxnMarkerResult(5, ((A0, None), (B1, NotLeaderOrFollowerError("no")))),
            TxnMarkerResult(6, ()),
        ]
    )
    first, second = response.markers
    assert first.producer_id == 5
    assert [(p.topic, p.partition, p.error_code) for p in first.partitions] == [
        ("a", 0, 0),
        ("b", 1, 6),
    ]
    assert (second.producer_id, list(second.partitions)) == (6, [])


def test_list_offsets_and_offsets_for_leader_epoch_round_trip() -> None:
    params = apis.list_offsets_params(
        pb.ListOffsetsRequest(
            replica_id=-1,
            partitions=[
                pb.ListOffsetsPartition(
                    topic="a", partition=0, current_leader_epoch=2, timestamp=-2
                )
            ],
        )
    )
    assert params.replica_id == -1
    [part] = params.partitions
    assert (part.tp, part.timestamp, part.current_leader_epoch) == (A0, -2, 2)
    listed = apis.list_offsets_response(
        [
            ListOffsetsPartitionResult(A0, offset=3, leader_epoch=1),
            ListOffsetsPartitionResult(B1, UnknownTopicOrPartitionError("no")),
        ]
    )
    assert [(p.offset, p.leader_epoch, p.timestamp, p.error_code) for p in listed.partitions] == [
        (3, 1, -1, 0),
        (-1, -1, -1, 3),
    ]
    [asked] = apis.offsets_for_leader_epoch_params(
        pb.OffsetsForLeaderEpochRequest(
            replica_id=2,
            partitions=[
                pb.OffsetForLeaderPartition(
                    topic="a", partition=0, current_leader_epoch=4, leader_epoch=3
                )
            ],
        )
    )
    assert (asked.tp, asked.leader_epoch, asked.current_leader_epoch) == (A0, 3, 4)
    answered = apis.offsets_for_leader_epoch_response(
        [EpochEndOffset(A0, leader_epoch=3, end_offset=17)]
    )
    [end] = answered.partitions
    assert (end.topic, end.error_code, end.leader_epoch, end.end_offset) == ("a", 0, 3, 17)


def test_delete_records_round_trip() -> None:
    params = apis.delete_records_params(
        pb.DeleteRecordsRequest(
            timeout_ms=300, partitions=[pb.DeleteRecordsPartition(topic="a", offset=-1)]
        )
    )
    assert params.timeout_ms == 300
    assert [(p.tp, p.offset) for p in params.partitions] == [(A0, -1)]
    response = apis.delete_records_response(
        [
            DeleteRecordsPartitionResult(A0, low_watermark=5),
            DeleteRecordsPartitionResult(B1, RequestTimedOutError("slow"), low_watermark=2),
        ]
    )
    assert [
        (p.topic, p.low_watermark, p.error_code, p.error_message) for p in response.partitions
    ] == [("a", 5, 0, ""), ("b", 2, 7, "slow")]


def test_describe_replicas_round_trip() -> None:
    assert apis.describe_replicas_params(pb.DescribeReplicasRequest()) == frozenset()
    wanted = apis.describe_replicas_params(
        pb.DescribeReplicasRequest(partitions=[pb.TopicPartitionId(topic="b", partition=1)])
    )
    assert wanted == frozenset({B1})
    described = ReplicaDescription(
        A0,
        broker_id=1,
        is_leader=True,
        leader=1,
        leader_epoch=2,
        high_watermark=5,
        log_end_offset=6,
        log_start_offset=1,
        isr=(1, 2),
        size_bytes=100,
        replicas=(1, 2, 3),
        fetched_leader_epoch=1,
    )
    response = apis.describe_replicas_response(DescribeReplicasResult(1234, (described,)), 77)
    assert response.monotonic_ms == 1234
    [r] = response.replicas
    assert r.broker_epoch == 77  # the answering broker's registration
    assert (r.topic, r.partition, r.broker_id, r.is_leader, r.leader) == ("a", 0, 1, True, 1)
    assert (r.high_watermark, r.log_end_offset, r.log_start_offset) == (5, 6, 1)
    assert (list(r.isr), list(r.replicas), r.size_bytes, r.leader_epoch) == (
        [1, 2],
        [1, 2, 3],
        100,
        2,
    )
    assert r.fetched_leader_epoch == 1


def test_leader_and_isr_and_stop_replica_round_trip() -> None:
    params = apis.leader_and_isr_params(
        pb.LeaderAndIsrRequest(
            controller_id=3,
            controller_epoch=4,
            broker_epoch=99,
            partition_states=[
                pb.PartitionState(
                    topic="a",
                    partition=0,
                    controller_epoch=4,
                    leader=2,
                    leader_epoch=5,
                    isr=[2, 1],
                    zk_version=6,
                    replicas=[1, 2],
                )
            ],
        )
    )
    assert (params.controller_id, params.controller_epoch) == (3, 4)
    [state] = params.partition_states
    assert (state.tp, state.leader, state.leader_epoch, state.isr) == (A0, 2, 5, (2, 1))
    assert (state.zk_version, state.replicas, state.controller_epoch) == (6, (1, 2), 4)
    response = apis.leader_and_isr_response(
        PartitionErrors(None, ((A0, None), (B1, UnknownTopicOrPartitionError("x"))))
    )
    assert response.error_code == 0
    assert [(e.topic, e.error_code) for e in response.partition_errors] == [("a", 0), ("b", 3)]
    stop = apis.stop_replica_params(
        pb.StopReplicaRequest(
            controller_epoch=4,
            partitions=[pb.StopReplicaPartition(topic="b", partition=1, delete_partition=True)],
        )
    )
    [part] = stop.partitions
    assert (part.tp, part.delete_partition) == (B1, True)
    stale = apis.stop_replica_response(PartitionErrors(RequestTimedOutError("x")))
    assert (stale.error_code, list(stale.partition_errors)) == (7, [])


def test_only_the_wire_modules_of_node_import_protobuf() -> None:
    importing = set()
    for path in sorted(NODE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n == "kafkasim.proto" or n.startswith("kafkasim.proto.") for n in names):
                importing.add(path.name)
    assert importing <= MAY_IMPORT_PROTO, sorted(importing - MAY_IMPORT_PROTO)
    for domain in ("replica_manager.py", "partition.py", "purgatory.py", "replica_types.py"):
        assert domain not in importing


def _protobuf_produce_response(
    results: list[ProducePartitionResult], correlation_id: int
) -> pb.ProduceResponse:
    """The answer built as protobuf's message, as the broker built it before it wrote the
    bytes by hand."""
    return pb.ProduceResponse(
        correlation_id=correlation_id,
        partitions=[
            pb.ProducePartitionResponse(
                topic=r.tp.topic,
                partition=r.tp.partition,
                error_code=apis.error_code(r.error),
                error_message=apis.message_of(r.error),
                base_offset=r.base_offset,
                log_append_time_ms=r.log_append_time_ms,
                log_start_offset=r.log_start_offset,
            )
            for r in results
        ],
    )


_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_ERRORS = st.sampled_from(
    [
        None,
        RequestTimedOutError("acks=all not satisfied"),
        UnknownTopicOrPartitionError("é"),
        RequestTimedOutError(""),
    ]
)
_RESULTS = st.builds(
    ProducePartitionResult,
    st.builds(TopicPartition, st.text(max_size=12), _INT32),
    _ERRORS,
    _INT64 | st.sampled_from([-1, 0, 1, 127, 128]),
    _INT64 | st.sampled_from([-1, 0]),
    _INT64 | st.sampled_from([-1, 0]),
)


@given(st.lists(_RESULTS, max_size=4), _INT64)
def test_the_produce_answer_is_protobufs_own_serialization_byte_for_byte(
    results: list[ProducePartitionResult], correlation_id: int
) -> None:
    expected = _protobuf_produce_response(results, correlation_id).SerializeToString()
    assert apis.produce_response(results, correlation_id).SerializeToString() == expected
