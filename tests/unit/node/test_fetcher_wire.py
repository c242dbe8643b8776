"""The follower's fetch answers read off the wire (``node.fetcher_wire``).

Why: the broker's follower no longer lets protobuf parse its fetch answers (two copies of
every MiB it replicates); what it reads instead must be what protobuf would have read, field
for field, and a malformed answer must fail as clearly as protobuf fails on one, never hand
the log wrong records.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.node.fetcher_wire import (
    FOLLOWER_DECODERS,
    FetchAnswer,
    FetchAnswerError,
    FetchedPartition,
    decode_fetch_answer,
)
from kafkasim.node.rpc_grpc import GrpcBrokerTransport
from kafkasim.proto import kafkasim_pb2 as pb
from tests.unit.rpc.harness import Env, run


def full_answer() -> pb.FetchResponse:
    response = pb.FetchResponse(error_code=0)
    response.partitions.add(
        topic="orders",
        partition=3,
        high_watermark=120,
        last_stable_offset=110,
        log_start_offset=7,
        records=bytes(range(256)) * 4096,  # 1 MiB
    )
    failed = response.partitions.add(
        topic="payments",
        partition=0,
        error_code=6,
        error_message="not the leader",
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
    )
    failed.aborted_transactions.add(producer_id=9, first_offset=42)
    return response


def expect_same(decoded: FetchAnswer, message: pb.FetchResponse) -> None:
    assert decoded.error_code == message.error_code
    assert len(decoded.partitions) == len(message.partitions)
    for got, want in zip(decoded.partitions, message.partitions, strict=True):
        assert (got.topic, got.partition, got.error_code, got.error_message) == (
            want.topic,
            want.partition,
            want.error_code,
            want.error_message,
        )
        assert (got.high_watermark, got.last_stable_offset, got.log_start_offset) == (
            want.high_watermark,
            want.last_stable_offset,
            want.log_start_offset,
        )
        assert bytes(got.records) == want.records
        assert got.aborted_transactions == list(want.aborted_transactions)


def test_every_field_reads_as_protobuf_reads_it_and_the_records_are_not_copied() -> None:
    message = full_answer()
    data = message.SerializeToString()
    decoded = decode_fetch_answer(data)
    expect_same(decoded, message)
    records = decoded.partitions[0].records
    assert isinstance(records, memoryview) and records.obj is data  # a view, no copy
    assert len(decoded.partitions[1].records) == 0


def test_protobuf_rules_hold_unknown_fields_skipped_and_the_last_records_field_wins() -> None:
    part = pb.FetchPartitionResponse(topic="t", partition=1, records=b"first").SerializeToString()
    # A second records field (8, length-delimited) and an unknown varint field 15.
    part += bytes([8 << 3 | 2, 6]) + b"second" + bytes([15 << 3, 1])
    data = (
        bytes([2 << 3 | 2, len(part)]) + part + bytes([1 << 3, 5]) + bytes([14 << 3 | 5]) + b"abcd"
    )
    expected = pb.FetchResponse.FromString(data)
    decoded = decode_fetch_answer(data)
    expect_same(decoded, expected)
    assert bytes(decoded.partitions[0].records) == b"second"
    assert decoded.error_code == 5


def test_an_empty_answer_has_no_partitions() -> None:
    assert decode_fetch_answer(b"") == FetchAnswer(0, [])


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (full_answer().SerializeToString()[:-1], "runs past its message"),
        (bytes([2 << 3 | 2, 0x80]), "varint runs past the end"),
        (bytes([1 << 3]) + b"\xff" * 11, "varint is longer than 10 bytes"),
        (bytes([2 << 3 | 3]), "wire type 3"),
        (bytes([0]), "field number 0"),
        (bytes([2 << 3 | 2, 3, 1 << 3 | 2, 9, 0]), "runs past its message"),
    ],
    ids=["truncated", "cut-varint", "long-varint", "group", "field-0", "bad-partition"],
)
def test_a_malformed_answer_is_refused_naming_what_is_wrong(data: bytes, named: str) -> None:
    with pytest.raises(FetchAnswerError, match=named):
        decode_fetch_answer(data)


def test_a_partition_protobuf_cannot_read_is_refused() -> None:
    # Field 1 (topic, a string) that is not UTF-8: protobuf refuses it, and so does the decoder.
    part = bytes([1 << 3 | 2, 2, 0xFF, 0xFE])
    with pytest.raises(FetchAnswerError, match="not a FetchPartitionResponse"):
        decode_fetch_answer(bytes([2 << 3 | 2, len(part)]) + part)


async def answer_each(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
    async for request in requests:
        assert isinstance(request, pb.FetchRequest)
        response = full_answer()
        response.partitions[0].high_watermark = request.replica_id
        yield response


def test_the_brokers_grpc_transport_hands_its_follower_decoded_answers() -> None:
    """With ``FOLLOWER_DECODERS`` a ReplicaFetch stream over real gRPC yields FetchAnswers;
    a transport without them still yields the protobuf message."""

    async def scenario(env: Env) -> None:
        server = await env.serve(streams={proto.METHOD_REPLICA_FETCH: answer_each})
        follower = GrpcBrokerTransport(response_decoders=FOLLOWER_DECODERS)
        env.transports.append(follower)
        stream = follower.open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        plain = env.transport("client").open_stream(server.address, proto.METHOD_REPLICA_FETCH)
        for seq in (1, 2):
            await stream.send(pb.FetchRequest(replica_id=seq))
            got = await asyncio.wait_for(stream.recv(), 10)
            assert isinstance(got, FetchAnswer)
            assert isinstance(got.partitions[0], FetchedPartition)
            assert got.partitions[0].high_watermark == seq
            expected = full_answer()
            expected.partitions[0].high_watermark = seq
            expect_same(got, expected)
        await plain.send(pb.FetchRequest(replica_id=3))
        assert isinstance(await asyncio.wait_for(plain.recv(), 10), pb.FetchResponse)
        await stream.close()
        await plain.close()

    run("grpc", scenario)
