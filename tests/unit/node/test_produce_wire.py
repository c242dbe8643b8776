"""Produce requests read off the wire (``node.produce_wire``).

Why: the broker no longer lets protobuf parse its produce requests (three copies of every
batch a producer sends); what it reads instead must be what protobuf would have read, field
for field, and a malformed request must be refused as clearly as protobuf refuses one, never
hand the log wrong records.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.node.apis_replica import produce_params
from kafkasim.node.produce_wire import (
    PRODUCE_DECODERS,
    WIRE_DECODE_MIN_BYTES,
    ProducePartitionView,
    ProduceRequestError,
    ProduceRequestView,
    decode_produce_request,
    read_produce_request,
)
from kafkasim.node.rpc_grpc import GrpcBrokerTransport
from kafkasim.proto import METHOD_PRODUCE, METHOD_PRODUCE_STREAM
from kafkasim.proto import kafkasim_pb2 as pb

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


def expect_same(decoded: ProduceRequestView, message: pb.ProduceRequest) -> None:
    assert (decoded.acks, decoded.timeout_ms) == (message.acks, message.timeout_ms)
    assert decoded.correlation_id == message.correlation_id
    assert decoded.transactional_id == message.transactional_id
    assert len(decoded.partitions) == len(message.partitions)
    for got, want in zip(decoded.partitions, message.partitions, strict=True):
        assert (got.topic, got.partition) == (want.topic, want.partition)
        assert isinstance(got.records, memoryview)
        assert bytes(got.records) == want.records


def reads_as_protobuf_reads(data: bytes) -> None:
    """``data`` decodes to what protobuf parses from it, or both refuse it."""
    try:
        expected = pb.ProduceRequest.FromString(data)
    except DecodeError:
        with pytest.raises(ProduceRequestError):
            decode_produce_request(data)
    else:
        expect_same(decode_produce_request(data), expected)


def full_request() -> pb.ProduceRequest:
    request = pb.ProduceRequest(
        acks=-1, timeout_ms=30_000, correlation_id=2**40 + 7, transactional_id="tx-é"
    )
    request.partitions.add(topic="orders", partition=3, records=bytes(range(256)) * 64)
    request.partitions.add(topic="payments", partition=-2)  # no records
    return request


def test_every_field_reads_as_protobuf_reads_it_and_the_records_are_not_copied() -> None:
    message = full_request()
    data = message.SerializeToString()
    decoded = decode_produce_request(data)
    expect_same(decoded, message)
    records = decoded.partitions[0].records
    assert records.obj is data  # a view into the request's bytes, no copy
    assert len(decoded.partitions[1].records) == 0


def test_the_view_reads_as_the_message_for_the_produce_path() -> None:
    data = full_request().SerializeToString()
    from_view = produce_params(decode_produce_request(data))
    from_protobuf = produce_params(pb.ProduceRequest.FromString(data))
    assert (from_view.acks, from_view.timeout_ms) == (from_protobuf.acks, from_protobuf.timeout_ms)
    assert [(p.tp, bytes(p.records)) for p in from_view.partitions] == [
        (p.tp, p.records) for p in from_protobuf.partitions
    ]


def test_an_empty_request_is_all_defaults() -> None:
    assert decode_produce_request(b"") == ProduceRequestView()
    assert decode_produce_request(bytes([3 << 3 | 2, 0])).partitions == [ProducePartitionView()]


def test_both_produce_methods_are_read_large_requests_walked_small_ones_parsed() -> None:
    assert {
        METHOD_PRODUCE: read_produce_request,
        METHOD_PRODUCE_STREAM: read_produce_request,
    } == PRODUCE_DECODERS
    small = full_request()
    large = full_request()
    large.partitions[0].records = b"r" * WIRE_DECODE_MIN_BYTES
    small_read = read_produce_request(small.SerializeToString())
    assert isinstance(small_read, pb.ProduceRequest) and small_read == small
    data = large.SerializeToString()
    large_read = read_produce_request(data)
    assert isinstance(large_read, ProduceRequestView)
    expect_same(large_read, large)
    assert large_read.partitions[0].records.obj is data
    with pytest.raises(DecodeError):  # what the gRPC server answers INVALID_ARGUMENT for
        read_produce_request(b"\xff\xff")


def test_the_fields_read_have_the_types_the_decoder_assumes() -> None:
    """The decoder reads int32/int64/string/bytes by hand: a change of the .proto must fail
    here, not decode wrong values."""
    types = pb.ProduceRequest.DESCRIPTOR.fields_by_name
    parts = pb.ProducePartitionData.DESCRIPTOR.fields_by_name
    fd = types["acks"]
    assert [types[n].type for n in ("acks", "timeout_ms", "correlation_id")] == [
        fd.TYPE_INT32,
        fd.TYPE_INT32,
        fd.TYPE_INT64,
    ]
    assert types["transactional_id"].type == fd.TYPE_STRING
    assert [parts[n].type for n in ("topic", "partition", "records")] == [
        fd.TYPE_STRING,
        fd.TYPE_INT32,
        fd.TYPE_BYTES,
    ]


# -- byte-compatible with protobuf -------------------------------------------------------------

partitions = st.builds(
    pb.ProducePartitionData,
    topic=st.text(max_size=20),
    partition=INT32,
    records=st.binary(max_size=300),
)
requests = st.builds(
    pb.ProduceRequest,
    acks=INT32,
    timeout_ms=INT32,
    partitions=st.lists(partitions, max_size=4),
    correlation_id=INT64,
    transactional_id=st.text(max_size=20),
)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        if value < 0x80:
            out.append(value)
            return bytes(out)
        out.append(value & 0x7F | 0x80)
        value >>= 7


# A field protobuf skips: an unknown number (6..40) of any non-group wire type, or a known
# number with a wire type that is not its own (protobuf keeps both as unknown fields).
unknown_fields = st.one_of(
    st.tuples(st.integers(6, 40), st.integers(0, 2**64 - 1)).map(
        lambda f: _varint(f[0] << 3) + _varint(f[1])
    ),
    st.tuples(st.integers(1, 40), st.binary(max_size=30)).map(
        lambda f: (
            _varint(f[0] << 3 | 2) + _varint(len(f[1])) + f[1]
            if f[0] not in (3, 5)
            else _varint(f[0] << 3 | 5) + f[1][:4].ljust(4, b"\0")
        )
    ),
    st.tuples(st.integers(1, 40), st.binary(min_size=8, max_size=8)).map(
        lambda f: _varint(f[0] << 3 | 1) + f[1]
    ),
)


@given(requests)
def test_any_request_protobuf_writes_reads_the_same(message: pb.ProduceRequest) -> None:
    expect_same(decode_produce_request(message.SerializeToString()), message)


@given(st.lists(st.one_of(requests.map(pb.ProduceRequest.SerializeToString), unknown_fields)))
def test_concatenations_and_unknown_fields_read_as_protobuf_reads_them(
    pieces: list[bytes],
) -> None:
    """Concatenated messages merge (a scalar's last value wins, partitions add up), unknown
    fields anywhere are skipped: what protobuf's parser does."""
    reads_as_protobuf_reads(b"".join(pieces))


@given(requests, st.lists(unknown_fields, max_size=3), st.data())
def test_fields_inside_a_partition_read_as_protobuf_reads_them(
    message: pb.ProduceRequest, extra: list[bytes], data: st.DataObject
) -> None:
    body = b""
    for p in message.partitions:
        part = p.SerializeToString()
        at = data.draw(st.sampled_from([0, len(part)]))
        part = part[:at] + b"".join(extra) + part[at:]
        body += bytes([3 << 3 | 2]) + _varint(len(part)) + part
    reads_as_protobuf_reads(body)


@given(requests.filter(lambda m: m.ByteSize() > 0), st.data())
def test_a_cut_request_is_refused_exactly_when_protobuf_refuses_it(
    message: pb.ProduceRequest, data: st.DataObject
) -> None:
    wire = message.SerializeToString()
    reads_as_protobuf_reads(wire[: data.draw(st.integers(0, len(wire) - 1))])


@given(st.binary(max_size=60))
def test_arbitrary_bytes_read_as_protobuf_reads_them_or_are_refused(data: bytes) -> None:
    """Any bytes: the same request as protobuf's, or refused where protobuf refuses them
    (groups aside: protobuf skips an unknown group, the decoder refuses it)."""
    try:
        expected = pb.ProduceRequest.FromString(data)
    except DecodeError:
        with pytest.raises(ProduceRequestError):
            decode_produce_request(data)
        return
    try:
        decoded = decode_produce_request(data)
    except ProduceRequestError as e:
        assert "groups are not used" in str(e)
        return
    expect_same(decoded, expected)


# -- malformed requests ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (full_request().SerializeToString()[:-1], "runs past its message"),
        (bytes([3 << 3 | 2, 0x80]), "varint cut short"),
        (bytes([1 << 3]) + b"\xff" * 11, "varint longer than 10 bytes"),
        (bytes([3 << 3 | 3]), "wire type 3"),
        (bytes([7 << 3 | 4]), "wire type 4"),
        (bytes([0]), "field number 0"),
        (bytes([3 << 3 | 2, 3, 1 << 3 | 2, 9, 0]), "field 1 at byte 2 runs past its message"),
        (bytes([3 << 3 | 2, 4, 1 << 3 | 2, 2, 0xFF, 0xFE]), "topic is not valid UTF-8"),
        (bytes([5 << 3 | 2, 1, 0xC0]), "transactional id is not valid UTF-8"),
        (bytes([6 << 3 | 1, 1, 2]), "field 6 at byte 0 runs past its message"),
        (b"\xff\xff\xff\xff\x7f", "field key out of range"),
    ],
    ids=[
        "truncated",
        "cut-varint",
        "long-varint",
        "group-start",
        "group-end",
        "field-0",
        "bad-partition",
        "topic-not-utf8",
        "txn-id-not-utf8",
        "cut-fixed64",
        "key-out-of-range",
    ],
)
def test_a_malformed_request_is_refused_naming_what_is_wrong(data: bytes, named: str) -> None:
    with pytest.raises(ProduceRequestError, match=named):
        decode_produce_request(data)
    with pytest.raises(DecodeError):  # protobuf refuses each of them too
        pb.ProduceRequest.FromString(data)


# -- on the broker's gRPC server -----------------------------------------------------------------


async def _serve_and_send(
    body: bytes, *, streaming: bool
) -> tuple[grpc.StatusCode, str, list[str]]:
    """Serve both produce methods with ``PRODUCE_DECODERS``; send ``body`` as raw bytes; the
    status, its details and the type of each request the handlers were handed."""
    seen: list[str] = []

    async def produce(request: Any) -> Message:
        seen.append(type(request).__name__)
        return pb.ProduceResponse(correlation_id=request.correlation_id)

    async def produce_stream(requests: AsyncIterator[Any]) -> AsyncIterator[Message]:
        async for request in requests:
            seen.append(type(request).__name__)
            yield pb.ProduceResponse(correlation_id=request.correlation_id)

    server = GrpcBrokerTransport(request_decoders=PRODUCE_DECODERS).server(
        "127.0.0.1:0", {METHOD_PRODUCE: produce}, {METHOD_PRODUCE_STREAM: produce_stream}
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            try:
                if streaming:
                    call = channel.stream_stream(METHOD_PRODUCE_STREAM)()
                    await call.write(body)
                    answer = await call.read()
                    if answer is not grpc.aio.EOF:
                        assert pb.ProduceResponse.FromString(answer).correlation_id == 7
                        await call.done_writing()
                        call.cancel()
                        return grpc.StatusCode.OK, "", seen
                    return await call.code(), await call.details() or "", seen
                answer = await channel.unary_unary(METHOD_PRODUCE)(body, timeout=10)
                assert pb.ProduceResponse.FromString(answer).correlation_id == 7
            except grpc.aio.AioRpcError as e:
                return e.code(), e.details() or "", seen
            return grpc.StatusCode.OK, "", seen
    finally:
        await server.stop(0)


def large_request() -> pb.ProduceRequest:
    request = pb.ProduceRequest(acks=1, correlation_id=7)
    request.partitions.add(topic="t", records=b"r" * WIRE_DECODE_MIN_BYTES)
    return request


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "stream"])
def test_the_brokers_server_hands_produce_handlers_requests_read_off_the_wire(
    streaming: bool,
) -> None:
    small = pb.ProduceRequest(acks=1, correlation_id=7).SerializeToString()
    for body, kind in (
        (large_request().SerializeToString(), "ProduceRequestView"),
        (small, "ProduceRequest"),
    ):
        code, _, seen = asyncio.run(_serve_and_send(body, streaming=streaming))
        assert (code, seen) == (grpc.StatusCode.OK, [kind])


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "stream"])
def test_a_request_the_decoder_refuses_is_invalid_argument_naming_why(
    streaming: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    request = large_request()
    data = request.SerializeToString()
    # The topic "t" becomes a byte that is not UTF-8.
    bad = data.replace(bytes([1 << 3 | 2, 1]) + b"t", bytes([1 << 3 | 2, 1, 0xFF]), 1)
    assert bad != data
    code, details, seen = asyncio.run(_serve_and_send(bad, streaming=streaming))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid kafkasim.ProduceRequest message" in details
    assert "topic is not valid UTF-8" in details
    assert seen == []
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
