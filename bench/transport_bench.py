"""What one replication round trip costs on each transport a follower could use (issue 19).

A follower's fetch is a small request answered by a small answer (nothing new, or one
one-record batch) or a large one (up to ``replica.fetch.max.bytes``, 1 MiB). On the acks=all
path two of the four cross-process messages are such a round trip, and at 1 KiB records the
leader hands each follower every MiB it took in. Today they go over a grpc.aio bidirectional
stream. This bench moves the same bytes, one round trip at a time, between this process and a
server process, over:

* ``grpc``: a grpc.aio bidirectional stream of raw bytes (no protobuf; the framework alone);
* ``streams``: a TCP connection with asyncio's ``StreamReader``/``StreamWriter``, each message
  framed by a 4-byte size, as ``node/kafka_server.py`` reads Kafka requests;
* ``buffered``: the same framing read by an ``asyncio.BufferedProtocol`` into one preallocated
  buffer (``recv_into``, no intermediate ``bytes``).

The two TCP transports share one server: it reads the small requests with ``StreamReader`` and
writes each answer as two writes, its size and then its bytes (on Python 3.11 ``writelines``
would join them, a copy of every answer, which a broker would not make); they differ in how the
client reads the answers, where the large reads are.

For each answer size (200 B, 16 KiB, 1 MiB) the three run in rotated order, round after round
(the machine is shared: only figures of one run side by side mean something); medians of the
rounds of the wall time per round trip and of the CPU each side spent per round trip (this
process's ``process_time``, the server's ``/proc/<pid>/stat``: 10 ms ticks, so a run lasts
long enough for them). Both processes use the broker's allocator settings
(``node.malloc_tuning``): with glibc's defaults every large read allocates fresh pages.

Run: ``python -m bench.transport_bench [--quick]`` or ``./dev bench transport``. Every process
started here is stopped here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from bench.cluster_bench import OPTIONS, cpu_seconds, serve_bare_stream
from kafkasim.cluster.local import REPO_ROOT
from kafkasim.controller.zk_process import free_loopback_port
from kafkasim.node.malloc_tuning import tune_malloc

MODES = ("grpc", "streams", "buffered")
SIZES = (200, 16 << 10, 1 << 20)
# Round trips per run: a run of each lasts about a second on this machine (CPU ticks are 10 ms).
COUNTS = {200: 4000, 16 << 10: 3000, 1 << 20: 800}
REQUEST_BYTES = 100  # a follower's fetch request for one partition, about
_SIZE = struct.Struct(">i")
_METHOD = "/bench.Replica/Fetch"
RoundTrip = Callable[[int], Awaitable[Any]]


def _request(size: int) -> bytes:
    """A request of ``REQUEST_BYTES`` asking for an answer of ``size`` bytes."""
    return _SIZE.pack(size) + bytes(REQUEST_BYTES - _SIZE.size)


# -- the server process -----------------------------------------------------------------------


async def _serve(mode: str, port: int) -> None:
    answers = {size: os.urandom(size) for size in SIZES}
    if mode == "grpc":

        async def stream(requests, _context):  # type: ignore[no-untyped-def]
            async for request in requests:
                yield answers[_SIZE.unpack_from(request)[0]]

        await serve_bare_stream(port, _METHOD, stream)
        return
    headers = {size: _SIZE.pack(size) for size in SIZES}

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (length,) = _SIZE.unpack(await reader.readexactly(4))
                request = await reader.readexactly(length)
                size = _SIZE.unpack_from(request)[0]
                writer.write(headers[size])
                writer.write(answers[size])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


# -- the client side ----------------------------------------------------------------------------


class _FramedAnswers(asyncio.BufferedProtocol):
    """Reads size-framed answers into one buffer; each completes the waiting future with a
    view of its bytes (valid until the next round trip)."""

    def __init__(self, capacity: int) -> None:
        self._buffer = bytearray(capacity)
        self._view = memoryview(self._buffer)
        self._filled = 0
        self.waiting: asyncio.Future[memoryview] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._filled < _SIZE.size:
            return
        (size,) = _SIZE.unpack_from(self._buffer)
        end = _SIZE.size + size
        if self._filled >= end and self.waiting is not None:
            self._filled = 0  # one answer in flight at a time: nothing follows it
            self.waiting.set_result(self._view[_SIZE.size : end])

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


async def _client(mode: str, port: int) -> tuple[RoundTrip, Callable[[], Awaitable[None]]]:
    """A round-trip function for ``mode`` and its close."""
    loop = asyncio.get_running_loop()
    requests = {size: _SIZE.pack(REQUEST_BYTES) + _request(size) for size in SIZES}
    if mode == "grpc":
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS)
        call = channel.stream_stream(_METHOD)()

        async def grpc_round_trip(size: int) -> Any:
            await call.write(requests[size][_SIZE.size :])
            return await call.read()

        async def grpc_close() -> None:
            await call.done_writing()
            await channel.close()

        return grpc_round_trip, grpc_close
    if mode == "streams":
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        async def streams_round_trip(size: int) -> Any:
            writer.write(requests[size])
            (length,) = _SIZE.unpack(await reader.readexactly(4))
            return await reader.readexactly(length)

        async def streams_close() -> None:
            writer.close()
            await writer.wait_closed()

        return streams_round_trip, streams_close
    protocol = _FramedAnswers(_SIZE.size + max(SIZES))
    transport, _ = await loop.create_connection(lambda: protocol, "127.0.0.1", port)

    async def buffered_round_trip(size: int) -> Any:
        protocol.waiting = loop.create_future()
        transport.write(requests[size])
        return await protocol.waiting

    async def buffered_close() -> None:
        transport.close()
        await protocol.lost

    return buffered_round_trip, buffered_close


def _start_server(mode: str, port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.transport_bench", "--serve", mode, str(port)],
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert server.stdout is not None
    if server.stdout.readline().strip() != b"ready":
        server.kill()
        server.wait(timeout=10)
        raise RuntimeError(f"the {mode} server did not start")
    return server


async def _measure(
    round_trip: RoundTrip, server_pid: int, size: int, count: int
) -> tuple[float, ...]:
    """Microseconds per round trip: wall, client CPU, server CPU."""
    server_cpu, client_cpu, wall = cpu_seconds(server_pid), time.process_time(), time.perf_counter()
    for _ in range(count):
        answer = await round_trip(size)
    wall = time.perf_counter() - wall
    client_cpu = time.process_time() - client_cpu
    server_cpu = cpu_seconds(server_pid) - server_cpu
    assert len(answer) == size, (len(answer), size)
    return tuple(1e6 * figure / count for figure in (wall, client_cpu, server_cpu))


async def run(rounds: int, scale: float) -> None:
    tune_malloc()
    servers: dict[str, subprocess.Popen[bytes]] = {}
    closers: list[Callable[[], Awaitable[None]]] = []
    figures: dict[tuple[str, int], list[tuple[float, ...]]] = {}
    try:
        round_trips: dict[str, RoundTrip] = {}
        for mode in MODES:
            port = free_loopback_port()
            servers[mode] = _start_server(mode, port)
            round_trips[mode], close = await _client(mode, port)
            closers.append(close)
            for size in SIZES:  # warm up: connections, buffers, allocator
                for _ in range(20):
                    await round_trips[mode](size)
        for index in range(rounds):
            for size in SIZES:
                count = max(50, int(COUNTS[size] * scale))
                order = MODES[index % len(MODES) :] + MODES[: index % len(MODES)]
                for mode in order:
                    measured = await _measure(round_trips[mode], servers[mode].pid, size, count)
                    figures.setdefault((mode, size), []).append(measured)
    finally:
        for close in closers:
            await close()
        for server in servers.values():
            os.kill(server.pid, signal.SIGTERM)
            server.wait(timeout=10)
    print(
        f"\none round trip ({REQUEST_BYTES} B request, answer of the size shown), medians of "
        f"{rounds} rotated rounds; microseconds"
    )
    print(f"   {'answer':>8} {'transport':>9} {'wall':>8} {'client CPU':>11} {'server CPU':>11}")
    for size in SIZES:
        medians = {
            mode: [statistics.median(run[i] for run in figures[mode, size]) for i in range(3)]
            for mode in MODES
        }
        for mode in MODES:
            wall, client, served = medians[mode]
            print(f"   {size:>8} {mode:>9} {wall:8.1f} {client:11.1f} {served:11.1f}")
        grpc_wall, grpc_client, grpc_server = medians["grpc"]
        for mode in ("streams", "buffered"):
            wall, client, served = medians[mode]
            print(
                f"   {size:>8} {mode + '/grpc':>18}: wall {wall / grpc_wall:.2f}, CPU of both "
                f"sides {(client + served) / (grpc_client + grpc_server):.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of a fifth the size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", nargs=2, metavar=("MODE", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        tune_malloc()
        mode, port = args.serve
        if mode not in MODES:
            parser.error(f"--serve: no transport {mode!r} (one of {', '.join(MODES)})")
        asyncio.run(_serve(mode, int(port)))
        return 0
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    rounds, scale = (2, 0.2) if args.quick else (args.rounds, 1.0)
    asyncio.run(run(rounds, scale))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
