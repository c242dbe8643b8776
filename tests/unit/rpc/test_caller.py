"""The caller of a request (common.security) as the request layer sees it: a real gRPC call's
handler reads the client's address and an anonymous principal; nothing set is the anonymous
default (the Kafka listener's side: tests/unit/node/test_kafka_caller.py)."""

from __future__ import annotations

import asyncio

import grpc
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.common.rpc_grpc_client import GrpcOptions
from kafkasim.common.security import ANONYMOUS, Caller, current_caller
from kafkasim.node.rpc_grpc import GrpcServer, peer_host
from kafkasim.proto import kafkasim_pb2 as pb


def test_the_default_caller_is_anonymous() -> None:
    assert current_caller() == Caller(ANONYMOUS, "", "")


def test_peer_host_reads_grpcs_peer_strings() -> None:
    assert peer_host("ipv4:127.0.0.1:5000") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:5000") == "::1"
    assert peer_host("unix:/tmp/s") == ""


def test_a_grpc_handler_sees_its_caller() -> None:
    async def main() -> list[Caller]:
        seen: list[Caller] = []

        async def produce(request: Message) -> Message:
            seen.append(current_caller())
            return pb.ProduceResponse()

        server = GrpcServer("127.0.0.1:0", {proto.METHOD_PRODUCE: produce}, {}, GrpcOptions())
        await server.start()
        try:
            async with grpc.aio.insecure_channel(server.address) as channel:
                call = channel.unary_unary(
                    proto.METHOD_PRODUCE, request_serializer=pb.ProduceRequest.SerializeToString
                )
                await call(pb.ProduceRequest(), timeout=10)
        finally:
            await server.stop()
        return seen

    assert asyncio.run(main()) == [Caller(ANONYMOUS, "127.0.0.1", "")]
