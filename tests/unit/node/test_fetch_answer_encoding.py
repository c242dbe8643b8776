"""A fetch answer written in wire form by the leader (``node.apis_replica.fetch_response``).

Why: building a ``pb.FetchResponse`` and serializing it copied every fetched MiB twice on the
leader (issue 19); the answer is now written as bytes with the records placed once. Those bytes
must be exactly what protobuf writes for the same message — the simulation's histories depend
on the bytes, and every receiver parses them with protobuf — and both transports must carry
them to consumers (unary Fetch) and followers (ReplicaFetch streams) alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim import proto
from kafkasim.common.errors import (
    FencedLeaderEpochError,
    KafkaError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from kafkasim.common.rpc import RpcError, RpcStatus
from kafkasim.common.sentinels import INT32_MAX, INT64_MAX, INT64_MIN
from kafkasim.common.types import TopicPartition
from kafkasim.node.apis_replica import EncodedFetchResponse, FetchedSize, fetch_response
from kafkasim.node.fetcher_wire import FOLLOWER_DECODERS, FetchAnswer
from kafkasim.node.replica_types import AbortedTransaction, FetchPartitionData
from kafkasim.node.rpc_grpc import GrpcBrokerTransport
from kafkasim.proto import EncodedMessage
from kafkasim.proto import kafkasim_pb2 as pb
from tests.unit.rpc.harness import KINDS, Env, run

TIMEOUT_S = 10.0


def protobufs_own(results: list[FetchPartitionData]) -> pb.FetchResponse:
    """The same answer built as a protobuf message, field by field (the reference)."""
    response = pb.FetchResponse()
    for r in results:
        part = response.partitions.add(
            topic=r.tp.topic,
            partition=r.tp.partition,
            error_code=0 if r.error is None else r.error.code,
            error_message="" if r.error is None else r.error.message,
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset,
            log_start_offset=r.log_start_offset,
            records=r.records,
        )
        for t in r.aborted_transactions or ():
            part.aborted_transactions.add(producer_id=t.producer_id, first_offset=t.first_offset)
    return response


def data(
    topic: str = "orders",
    partition: int = 0,
    records: bytes = b"",
    *,
    error: KafkaError | None = None,
    hw: int = 0,
    lso: int = 0,
    log_start: int = 0,
    aborted: tuple[AbortedTransaction, ...] | None = None,
) -> FetchPartitionData:
    return FetchPartitionData(
        TopicPartition(topic, partition),
        error,
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=log_start,
        records=records,
        aborted_transactions=aborted,
    )


CASES = {
    "no partitions": [],
    "all defaults (nothing but the key and a zero length)": [data("", 0)],
    "1 MiB of records": [data(records=bytes(range(256)) * 4096, hw=120, lso=110, log_start=7)],
    # Lengths on each side of a varint's 1-, 2- and 3-byte boundaries.
    "record lengths 127/128/16383/16384/2097152": [
        data("t", n % 5, b"\x01" * n, hw=n) for n in (127, 128, 16383, 16384, 1 << 21)
    ],
    "sentinels (-1: ten-byte varints) and an error message": [
        data(error=NotLeaderOrFollowerError("not the leader"), hw=-1, lso=-1, log_start=-1),
        data(error=OffsetOutOfRangeError("offset 9 is past 4"), hw=4),
        data(error=FencedLeaderEpochError("epoch 3 < 5")),
    ],
    "extremes": [data("x" * 300, INT32_MAX, b"r", hw=INT64_MAX, lso=INT64_MIN)],
    "a topic name outside ASCII": [data("заказы-注文", 2, b"abc", hw=3)],
    "aborted transactions with and without records": [
        data(records=b"batch", hw=9, lso=6, aborted=(AbortedTransaction(7, 3),)),
        data("t", 1, aborted=(AbortedTransaction(9, 5), AbortedTransaction(-1, 0))),
        data("t", 2, b"x", aborted=()),
    ],
}


@pytest.mark.parametrize("results", list(CASES.values()), ids=list(CASES))
def test_the_answer_is_byte_for_byte_what_protobuf_writes(
    results: list[FetchPartitionData],
) -> None:
    answer = fetch_response(results)
    reference = protobufs_own(results)
    assert answer.SerializeToString() == reference.SerializeToString()
    assert pb.FetchResponse.FromString(answer.SerializeToString()) == reference
    assert answer.partitions == tuple(
        FetchedSize(p.topic, p.error_code, len(p.records)) for p in reference.partitions
    )


_int64 = st.integers(INT64_MIN, INT64_MAX)
_partition_data = st.builds(
    data,
    topic=st.text(max_size=20),
    partition=st.integers(0, INT32_MAX),
    records=st.binary(max_size=300),
    hw=_int64,
    lso=_int64,
    log_start=_int64,
    aborted=st.none()
    | st.lists(st.builds(AbortedTransaction, _int64, _int64), max_size=3).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_partition_data, max_size=4))
def test_any_answer_is_byte_for_byte_what_protobuf_writes(
    results: list[FetchPartitionData],
) -> None:
    assert fetch_response(results).SerializeToString() == (
        protobufs_own(results).SerializeToString()
    )


def test_the_records_are_placed_once_into_the_answers_bytes() -> None:
    """The answer holds its wire bytes and the sizes, not the records or a message of them."""
    records = bytes(range(256)) * 4096
    answer = fetch_response([data(records=records, hw=1)])
    assert type(answer.data) is bytes and records in answer.data
    assert answer.SerializeToString() is answer.data
    assert not any(isinstance(getattr(answer, s), Message) for s in ("data", "partitions"))


def test_a_method_accepts_an_encoded_answer_only_of_its_own_response_type() -> None:
    answer = fetch_response([data(records=b"r")])
    assert proto.METHODS[proto.METHOD_FETCH].check_response(answer) is answer
    assert proto.METHODS[proto.METHOD_REPLICA_FETCH].check_response(answer) is answer
    with pytest.raises(TypeError, match="must answer ProduceResponse, got EncodedFetchResponse"):
        proto.METHODS[proto.METHOD_PRODUCE].check_response(answer)
    with pytest.raises(TypeError, match="encoding ProduceResponse"):
        proto.METHODS[proto.METHOD_FETCH].check_response(EncodedMessage(pb.ProduceResponse, b""))


ANSWER = [
    data(records=bytes(range(256)) * 4096, hw=120, lso=110, log_start=7),
    data("payments", 0, error=NotLeaderOrFollowerError("not the leader"), hw=-1, log_start=-1),
    data("t", 1, b"x", aborted=(AbortedTransaction(9, 42),)),
]


async def fetch_unary(request: Message) -> EncodedFetchResponse:
    assert isinstance(request, pb.FetchRequest)
    return fetch_response(ANSWER)


async def fetch_stream(requests: AsyncIterator[Message]) -> AsyncIterator[EncodedFetchResponse]:
    async for request in requests:
        assert isinstance(request, pb.FetchRequest)
        yield fetch_response([data(records=b"r" * request.replica_id, hw=request.replica_id)])


@pytest.mark.parametrize("kind", KINDS)
def test_consumers_and_followers_read_an_encoded_answer_over_either_transport(kind: str) -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(
            unary={proto.METHOD_FETCH: fetch_unary},
            streams={proto.METHOD_REPLICA_FETCH: fetch_stream},
        )
        client = env.transport("client")
        got = await client.call(
            server.address, proto.METHOD_FETCH, pb.FetchRequest(), timeout_s=TIMEOUT_S
        )
        assert got == protobufs_own(ANSWER)
        stream = client.open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        for seq in (1, 300):
            await stream.send(pb.FetchRequest(replica_id=seq))
            answer = await asyncio.wait_for(stream.recv(), TIMEOUT_S)
            assert answer == protobufs_own([data(records=b"r" * seq, hw=seq)])
        await stream.close()

    run(kind, scenario)


def test_a_follower_decodes_an_encoded_answer_off_real_grpc() -> None:
    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: fetch_stream})
        follower = GrpcBrokerTransport(response_decoders=FOLLOWER_DECODERS)
        env.transports.append(follower)
        stream = follower.open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        await stream.send(pb.FetchRequest(replica_id=5))
        got = await asyncio.wait_for(stream.recv(), TIMEOUT_S)
        assert isinstance(got, FetchAnswer)
        (part,) = got.partitions
        assert (part.topic, part.high_watermark, bytes(part.records)) == ("orders", 5, b"r" * 5)
        await stream.close()

    run("grpc", scenario)


@pytest.mark.parametrize("kind", KINDS)
def test_an_encoded_answer_of_another_type_surfaces_as_internal(kind: str) -> None:
    async def wrong(request: Message) -> EncodedMessage:
        return EncodedMessage(pb.ProduceResponse, b"")

    async def scenario(env: Env) -> None:
        server = await env.serve(unary={proto.METHOD_FETCH: wrong})
        with pytest.raises(RpcError) as raised:
            await env.transport("client").call(
                server.address, proto.METHOD_FETCH, pb.FetchRequest(), timeout_s=TIMEOUT_S
            )
        assert raised.value.status is RpcStatus.INTERNAL

    run(kind, scenario)
