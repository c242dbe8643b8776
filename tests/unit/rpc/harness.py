"""Run one transport scenario over real gRPC or the framed transport on loopback, or over
SimNetwork on virtual time.

A scenario is ``async def scenario(env: Env) -> T``. ``run(kind, scenario)`` builds the world
for ``kind`` ("grpc", "framed" or "sim"), runs the scenario on the right event loop, and
closes every transport and server it made — so tests stay clean under ``-W error``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import Message

from kafkasim.common.rpc import RpcServer, StreamHandler, Transport, UnaryHandler
from kafkasim.node.rpc_framed import FramedTransport
from kafkasim.node.rpc_grpc import GrpcBrokerTransport
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.network import SimNetwork, SimTransport

T = TypeVar("T")

KINDS = ["grpc", "sim"]
# The transports that carry bidirectional streams: those two, and the framed replication one.
STREAM_KINDS = [*KINDS, "framed"]

# A real-network scenario must finish well within this; virtual time limit for the sim.
REAL_SCENARIO_TIMEOUT_S = 10.0
SIM_TIME_LIMIT_S = 3_600.0


@dataclass
class Env:
    """What a scenario gets: transports per node and started servers, all closed afterwards."""

    kind: str
    network: SimNetwork | None
    transports: list[Transport] = field(default_factory=list)
    servers: list[RpcServer] = field(default_factory=list)

    def transport(self, node: str) -> Transport:
        transport: Transport
        if self.network is not None:
            transport = SimTransport(self.network, node)
        elif self.kind == "framed":
            transport = FramedTransport()
        else:
            transport = GrpcBrokerTransport()
        self.transports.append(transport)
        return transport

    async def serve(
        self,
        node: str = "server",
        unary: Mapping[str, UnaryHandler] | None = None,
        streams: Mapping[str, StreamHandler] | None = None,
    ) -> RpcServer:
        """A started server on ``node`` bound to a fresh port."""
        host = "127.0.0.1" if self.network is None else node
        server = self.transport(node).server(f"{host}:0", unary or {}, streams or {})
        await server.start()
        self.servers.append(server)
        return server

    @property
    def sim(self) -> SimNetwork:
        assert self.network is not None, "a sim-only helper was used on the real network"
        return self.network

    async def aclose(self) -> None:
        for server in self.servers:
            await server.stop(0)
        for transport in self.transports:
            await transport.close()


def run(kind: str, scenario: Callable[[Env], Awaitable[T]], *, seed: int = 1) -> T:
    """Run ``scenario`` on a fresh world of ``kind``; returns the scenario's result."""
    if kind in ("grpc", "framed"):

        async def real_main() -> T:
            env = Env(kind, None)
            try:
                async with asyncio.timeout(REAL_SCENARIO_TIMEOUT_S):
                    return await scenario(env)
            finally:
                await env.aclose()

        return asyncio.run(real_main())

    async def sim_main() -> T:
        env = Env("sim", SimNetwork(asyncio.get_running_loop(), random.Random(seed)))
        try:
            return await scenario(env)
        finally:
            await env.aclose()

    return run_simulation(sim_main(), time_limit_s=SIM_TIME_LIMIT_S)


async def never_ending(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
    """A stream handler that reads and answers nothing until its requests end (they never do:
    the stream API has no half-close)."""
    async for _ in requests:
        pass
    yield pb.FetchResponse()
