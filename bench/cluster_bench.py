"""Cluster benchmarks (issue 3), printing ratios measured side by side in one run.

1. One broker, acks=1, 1 KiB records batched 16 to a request: produce MB/s against a bare
   grpc.aio bidirectional stream moving the same bytes between a client process and a
   server process (the framework ceiling). Aim: >= 0.8 on the stream (issue 19). The sink,
   unary Produce and the ProduceStream run interleaved, medians of the repetitions (a shared
   machine swings the MB/s of one run by 2x). Beside the ratios, the CPU time each server
   process spent per MB moved (the sink's, the broker's), and the client's: the CPU cost of a
   MB swings much less than the MB/s, so it shows what the broker's request path adds to the
   sink's handler, and what kafkasim's client transport (protobuf requests, GrpcBidiStream)
   adds to the bare client's raw bytes. Same sizes (one 16-record batch, plus ~20 bytes of
   protobuf framing on the broker's side), same 8 messages in flight, both clients in this
   process. ``--front-door`` runs this section only.
2. Three brokers, RF=3, acks=all, min.insync.replicas=2: throughput relative to the
   single-broker acks=1 figure (Kafka's own benchmark shows about 0.5), and p50/p99 produce
   latency at a fixed moderate rate.
3. Leader failover after SIGKILL: time until produces succeed again, split into detection
   plus election (until the controller has written the new leader to ZooKeeper) and the
   client's recovery (until its next produce succeeds).
4. Broker-bound, 100 B records (issue 19): ready-made batches of 1,000 records on one
   ProduceStream, so that the client costs little and the brokers set the pace. One broker
   acks=1 and three brokers RF=3 acks=all (min ISR 2) run side by side, interleaved,
   medians of the repetitions; the ratio is the aim's (>= 0.6). A stream's requests are
   answered one at a time (a Kafka connection's are too), so with acks=all each waits for the
   one before it to replicate: the RF=3 figure is a batch per acks=all round trip (each
   follower fetches once per request, the CPUs half idle). The same requests over 4 streams
   at once show the pipelined figure beside it. Then the latency of
   one-record acks=all unary requests at 200/s: at 1,000 unary calls/s the four Python
   processes on two cores saturate and the figure measures the queue, not the path (the
   producer at 1,000 records/s batches under load: ``producer-perf-test --throughput 1000``).
5. The acks=all path (issue 19's latency aim), ``--latency``: where a one-record request's
   time goes, at a rate that leaves the machine idle between requests. Side by side,
   interleaved, medians of the repetitions: a bare grpc.aio round trip to a server process
   (the floor of any request), one broker acks=1 (that round trip plus an append), and three
   brokers RF=3 acks=all, min ISR 2 (plus the replication round trip: the leader's fetch
   answer to each follower, each follower's next fetch carrying its LEO, and a follower
   append between). Traced end to end (issue 19), no timer, long-poll or flush waits on that
   path: every step runs as soon as the one before it ends, and the p50 is the sum of four
   cross-process grpc.aio messages (client to leader, leader to follower, follower to leader,
   leader to client), each costing more than a bare one for the Python around it, plus the
   two appends.

Real processes on loopback (Debian's ZooKeeper, ``kafkasim broker`` processes); every
process started here is stopped here. Run: ``python -m bench.cluster_bench [--quick]``.

(One module, ~645 lines: the five sections share the cluster, sink and timing helpers and
print one report.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import grpc

from kafkasim import proto
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import REPO_ROOT, LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.controller.zk_process import free_loopback_port
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import RecordBatchBuilder

RECORD = b"r" * 1024
PER_BATCH = 16
SMALL_RECORD = b"r" * 100
SMALL_PER_BATCH = 1000
LATENCY_RATE = 200.0  # one-record requests a second (see section 4 above)
# Section 4's second figure: the same requests over this many ProduceStreams at once.
PIPELINED_STREAMS = 4
SINK_METHOD = "/bench.Sink/Stream"
OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (Linux's /proc/<pid>/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # pid (comm) state ...: comm may hold spaces and parentheses, so split after the last ')'.
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_ms_per_mb(pid: int, since_s: float, moved_bytes: int) -> float:
    return (cpu_seconds(pid) - since_s) * 1000 / (moved_bytes / 1e6)


def _batch() -> bytes:
    builder = RecordBatchBuilder()
    for _ in range(PER_BATCH):
        builder.append(1_700_000_000_000, None, RECORD)
    return builder.build()


# -- the bare gRPC ceiling ---------------------------------------------------------------------


async def serve_bare_stream(port: int, method: str, stream: Any) -> None:
    """A grpc.aio server of raw bytes on 127.0.0.1:``port`` whose one bidirectional method
    ``/service/Name`` is ``stream``; says "ready" on stdout once it listens, then serves until
    it is stopped."""
    service, name = method.strip("/").split("/")
    server = grpc.aio.server(options=OPTIONS)
    handler = grpc.method_handlers_generic_handler(
        service, {name: grpc.stream_stream_rpc_method_handler(stream)}
    )
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()


async def _sink(port: int) -> None:
    async def stream(requests, _context):  # type: ignore[no-untyped-def]
        async for message in requests:
            yield len(message).to_bytes(8, "big")

    await serve_bare_stream(port, SINK_METHOD, stream)


async def _bare_stream(port: int, payload: bytes, count: int, window: int) -> float:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
        call = channel.stream_stream(SINK_METHOD)()
        start = time.perf_counter()
        sent = received = 0
        while sent < min(window, count):
            await call.write(payload)
            sent += 1
        while received < count:
            await call.read()
            received += 1
            if sent < count:
                await call.write(payload)
                sent += 1
        elapsed = time.perf_counter() - start
        await call.done_writing()
    return count * len(payload) / elapsed / 1e6


# -- produce through the cluster ---------------------------------------------------------------


async def _produce_unary(
    client: MinimalClient, tp: TopicPartition, batch: bytes, *, count: int, window: int, acks: int
) -> float:
    """``window`` concurrent unary Produce calls; MB/s of record bytes appended."""
    address = await client.leader_address(tp)
    request = pb.ProduceRequest(acks=acks, timeout_ms=30_000)
    request.partitions.add(topic=tp.topic, partition=tp.partition, records=batch)
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            response = await client.transport.call(
                address, proto.METHOD_PRODUCE, request, timeout_s=30
            )
            assert isinstance(response, pb.ProduceResponse)
            assert response.partitions[0].error_code == 0, response

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(window)))
    return count * len(batch) / (time.perf_counter() - start) / 1e6


async def _produce_load(
    client: MinimalClient, tp: TopicPartition, batch: bytes, *, count: int, window: int, acks: int
) -> float:
    """``window`` requests in flight on one ProduceStream; MB/s of record bytes appended."""
    address = await client.leader_address(tp)
    stream = client.transport.open_stream(address, proto.METHOD_PRODUCE_STREAM)
    try:
        start = time.perf_counter()
        sent = received = 0

        async def send() -> None:
            nonlocal sent
            request = pb.ProduceRequest(acks=acks, timeout_ms=30_000, correlation_id=sent)
            request.partitions.add(topic=tp.topic, partition=tp.partition, records=batch)
            await stream.send(request)
            sent += 1

        while sent < min(window, count):
            await send()
        while received < count:
            response = await stream.recv(30)
            assert isinstance(response, pb.ProduceResponse)
            assert response.correlation_id == received, "answers come in request order"
            assert response.partitions[0].error_code == 0, response
            received += 1
            if sent < count:
                await send()
        return count * len(batch) / (time.perf_counter() - start) / 1e6
    finally:
        await stream.close()


async def _produce_over_streams(
    client: MinimalClient, tp: TopicPartition, batch: bytes, *, count: int, streams: int, acks: int
) -> float:
    """``count`` requests split over ``streams`` ProduceStreams at once (8 in flight on each);
    MB/s of record bytes appended, all streams together."""
    start = time.perf_counter()
    await asyncio.gather(
        *(
            _produce_load(client, tp, batch, count=count // streams, window=8, acks=acks)
            for _ in range(streams)
        )
    )
    return (count // streams) * streams * len(batch) / (time.perf_counter() - start) / 1e6


async def _latency_at_rate(
    client: MinimalClient, tp: TopicPartition, batch: bytes, rate: float, seconds: float
) -> tuple[float, float]:
    address = await client.leader_address(tp)
    request = pb.ProduceRequest(acks=-1, timeout_ms=30_000)
    request.partitions.add(topic=tp.topic, partition=tp.partition, records=batch)
    latencies: list[float] = []

    async def one() -> None:
        start = time.perf_counter()
        response = await client.transport.call(address, proto.METHOD_PRODUCE, request, timeout_s=30)
        assert isinstance(response, pb.ProduceResponse)
        assert response.partitions[0].error_code == 0
        latencies.append(time.perf_counter() - start)

    tasks = []
    begin = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        delay = begin + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    latencies.sort()
    return latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000


async def _cluster(
    root: Path,
    brokers: int,
    topic: str,
    rf: int,
    configs: dict[str, str],
    *,
    framed_replication: bool | None = None,
) -> tuple[LocalCluster, MinimalClient]:
    cluster = LocalCluster(root, brokers=brokers, framed_replication=framed_replication)
    cluster.start()
    client = MinimalClient(GrpcTransport(), cluster.bootstrap, SystemClock())
    await client.create_topic(topic, 1, rf, configs)
    await client.wait_for_leaders(topic, 1)
    return cluster, client


def _start_sink(port: int) -> subprocess.Popen[bytes]:
    """The bare grpc.aio server (this module's ``--sink``) in a process of its own, once it
    says it listens on ``port``; the caller stops it (SIGTERM)."""
    sink = subprocess.Popen(
        [sys.executable, "-m", "bench.cluster_bench", "--sink", str(port)],
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    try:
        assert sink.stdout is not None
        sink.stdout.readline()
    except BaseException:
        sink.kill()
        sink.wait(timeout=10)
        raise
    return sink


@contextlib.asynccontextmanager
async def _one_and_three(
    root: Path,
) -> AsyncIterator[tuple[MinimalClient, MinimalClient, MinimalClient]]:
    """Three clusters up at once, each with the topic "bench" of one partition: one broker,
    and twice three brokers with RF=3 and min ISR 2, whose followers fetch over gRPC in the
    one and over replication listeners (framed TCP, ``node.rpc_framed``) in the other; their
    clients; all stopped on the way out."""
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for name, brokers, configs, framed in (
            ("one", 1, {}, False),
            ("three", 3, {"min.insync.replicas": "2"}, False),
            ("framed", 3, {"min.insync.replicas": "2"}, True),
        ):
            cluster, client = await _cluster(
                root / name, brokers, "bench", brokers, configs, framed_replication=framed
            )
            stack.callback(cluster.stop)
            stack.push_async_callback(client.transport.close)
            clients.append(client)
        yield clients[0], clients[1], clients[2]


async def _failover(
    cluster: LocalCluster, client: MinimalClient, tp: TopicPartition, batch_values: list[bytes]
) -> tuple[float, float]:
    leader = client.metadata.leader(tp)
    zk = KazooCoordination(cluster.zookeeper.connect_string, 6000)
    await zk.start()
    try:
        killed = time.monotonic()
        cluster.kill(leader)
        while True:
            data, stat = await zk.get(zk_data.partition_state_path(tp))
            state = zk_data.decode_partition_state(data, stat.version)
            if state.leader not in (-1, leader):
                elected = time.monotonic()
                break
            await asyncio.sleep(0.01)
        result = await client.produce(tp, batch_values, acks=-1)
        assert result.ok, result
        recovered = time.monotonic()
    finally:
        await zk.close()
    return elected - killed, recovered - elected


async def _measured(
    server_pid: int, moved_bytes: int, run: Coroutine[Any, Any, float]
) -> tuple[float, float, float]:
    """MB/s of ``run``, and the CPU per MB moved (ms) of the server process and of this one
    (the client: its event loop and gRPC's threads)."""
    server_before, client_before = cpu_seconds(server_pid), time.process_time()
    mb_per_s = await run
    client_ms = (time.process_time() - client_before) * 1000 / (moved_bytes / 1e6)
    return mb_per_s, _cpu_ms_per_mb(server_pid, server_before, moved_bytes), client_ms


async def _front_door(batch: bytes, quick: bool, window: int) -> float:
    """Section 1: the bare sink, unary Produce and one ProduceStream, interleaved run by run
    (the sink and the broker up at once), medians of the repetitions; the median
    unary MB/s is returned (section 2's reference)."""
    count, reps = (1000, 3) if quick else (3000, 8)
    moved = count * len(batch)
    tp = TopicPartition("bench", 0)
    runs: dict[str, list[tuple[float, float, float]]] = {"bare": [], "unary": [], "stream": []}
    port = free_loopback_port()
    sink = _start_sink(port)
    try:
        with tempfile.TemporaryDirectory(prefix="kafkasim-bench-") as tmp:
            cluster, client = await _cluster(Path(tmp), 1, "bench", 1, {})
            broker_pid = next(iter(cluster.brokers.values())).pid
            assert broker_pid is not None
            try:
                await _bare_stream(port, batch, 50, window)  # warm up
                await _produce_load(client, tp, batch, count=50, window=window, acks=1)
                for _ in range(reps):
                    runs["bare"].append(
                        await _measured(sink.pid, moved, _bare_stream(port, batch, count, window))
                    )
                    unary = _produce_unary(client, tp, batch, count=count, window=window, acks=1)
                    runs["unary"].append(await _measured(broker_pid, moved, unary))
                    stream = _produce_load(client, tp, batch, count=count, window=window, acks=1)
                    runs["stream"].append(await _measured(broker_pid, moved, stream))
            finally:
                await client.transport.close()
                cluster.stop()
    finally:
        os.kill(sink.pid, signal.SIGTERM)
        sink.wait(timeout=10)
    bare, single, single_stream = (
        statistics.median(r[0] for r in runs[k]) for k in ("bare", "unary", "stream")
    )
    (bare_cpu, unary_cpu, stream_cpu), (bare_client, unary_client, stream_client) = (
        [statistics.median(r[i] for r in runs[k]) for k in ("bare", "unary", "stream")]
        for i in (1, 2)
    )
    print(
        f"\n1. one broker, acks=1, against a bare grpc.aio stream of the same bytes "
        f"({count} requests a run, medians of {reps} interleaved runs)"
    )
    print(f"   bare grpc.aio stream          {bare:8.1f} MB/s")
    print(f"   produce, {window} unary calls    {single:8.1f} MB/s   ratio {single / bare:.2f}")
    print(
        f"   produce, one ProduceStream    {single_stream:8.1f} MB/s   ratio "
        f"{single_stream / bare:.2f}   (each run: "
        + " ".join(f"{s[0] / b[0]:.2f}" for b, s in zip(runs["bare"], runs["stream"], strict=True))
        + ")"
    )
    print(
        f"   server CPU per MB: sink {bare_cpu:.1f} ms, broker unary {unary_cpu:.1f} ms "
        f"({unary_cpu / bare_cpu:.1f}x), broker stream {stream_cpu:.1f} ms "
        f"({stream_cpu / bare_cpu:.1f}x)"
    )
    print(
        f"   client CPU per MB: bare {bare_client:.1f} ms, unary {unary_client:.1f} ms, "
        f"stream {stream_client:.1f} ms"
    )
    return single


async def run(quick: bool) -> None:
    batch = _batch()
    count = 300 if quick else 3000
    window = 8
    tp = TopicPartition("bench", 0)
    print(
        f"kafkasim cluster benchmark{' (quick)' if quick else ''}: {PER_BATCH} x 1 KiB "
        f"records a request ({len(batch)} bytes), {window} requests in flight"
    )

    # 1. bare gRPC ceiling against one broker with acks=1
    single = await _front_door(batch, quick, window)

    # 2. three brokers, RF=3, acks=all, min ISR 2
    with tempfile.TemporaryDirectory(prefix="kafkasim-bench-") as tmp:
        cluster, client = await _cluster(Path(tmp), 3, "bench", 3, {"min.insync.replicas": "2"})
        try:
            replicated = await _produce_unary(
                client, tp, batch, count=count, window=window, acks=-1
            )
            p50, p99 = await _latency_at_rate(
                client, tp, batch, rate=50.0, seconds=3 if quick else 10
            )
            print("\n2. three brokers, RF=3, acks=all, min.insync.replicas=2")
            print(
                f"   produce {replicated:8.1f} MB/s   relative to one broker acks=1: "
                f"{replicated / single:.2f}"
            )
            print(
                f"   latency at 50 requests/s ({50 * len(batch) / 1e6:.1f} MB/s): "
                f"p50 {p50:.1f} ms, p99 {p99:.1f} ms"
            )
            detection, recovery = await _failover(cluster, client, tp, [b"after-failover"])
            print("\n3. leader failover after SIGKILL (zookeeper.session.timeout.ms=6000)")
            print(
                f"   detection + election {detection:.2f} s, client recovery "
                f"{recovery:.2f} s, total {detection + recovery:.2f} s"
            )
        finally:
            await client.transport.close()
            cluster.stop()
    await _broker_bound(quick)


async def _broker_bound(quick: bool) -> None:
    """Section 4: both clusters up at once, runs interleaved, medians."""
    builder = RecordBatchBuilder()
    for _ in range(SMALL_PER_BATCH):
        builder.append(1_700_000_000_000, None, SMALL_RECORD)
    batch = builder.build()
    single_record = RecordBatchBuilder()
    single_record.append(1_700_000_000_000, None, SMALL_RECORD)
    one = single_record.build()
    count, reps = (100, 3) if quick else (600, 5)
    tp = TopicPartition("bench", 0)
    with tempfile.TemporaryDirectory(prefix="kafkasim-bench-") as tmp:
        async with _one_and_three(Path(tmp)) as (k1, k3, kf):
            clients = {"one": (k1, 1), "grpc": (k3, -1), "framed": (kf, -1)}
            for client, acks in clients.values():  # warm up
                await _produce_load(client, tp, batch, count=20, window=8, acks=acks)
            one_stream: dict[str, list[float]] = {key: [] for key in clients}
            streams: dict[str, list[float]] = {key: [] for key in clients}
            latency: dict[str, list[tuple[float, float]]] = {"grpc": [], "framed": []}
            for _ in range(reps):
                for key, (client, acks) in clients.items():
                    one_stream[key].append(
                        await _produce_load(client, tp, batch, count=count, window=8, acks=acks)
                    )
                    streams[key].append(
                        await _produce_over_streams(
                            client, tp, batch, count=count, streams=PIPELINED_STREAMS, acks=acks
                        )
                    )
            for _ in range(1 if quick else 3):
                for key, runs in latency.items():
                    runs.append(
                        await _latency_at_rate(
                            clients[key][0], tp, one, rate=LATENCY_RATE, seconds=2 if quick else 5
                        )
                    )
    per_mb = SMALL_PER_BATCH * 1e6 / len(batch)  # records per MB of batches
    print(
        f"\n4. broker-bound: {SMALL_PER_BATCH} x {len(SMALL_RECORD)} B records a request "
        f"({len(batch)} bytes), 8 in flight on one ProduceStream, medians of {reps} interleaved"
    )
    print(
        "   (three brokers RF=3 acks=all twice: followers fetching over gRPC, and over "
        "replication listeners)"
    )
    single, single_n = statistics.median(one_stream["one"]), statistics.median(streams["one"])
    print(f"   one broker, acks=1                     {single * per_mb:10,.0f} records/s")
    for key in ("grpc", "framed"):
        three, three_n = statistics.median(one_stream[key]), statistics.median(streams[key])
        p50, p99 = _medians(latency[key])
        print(
            f"   RF=3 acks=all, replication over {key:6} {three * per_mb:10,.0f} records/s   "
            f"ratio {three / single:.2f} (aim >= 0.6; Kafka's own benchmark 0.51)"
        )
        print(
            f"      over {PIPELINED_STREAMS} ProduceStreams: {three_n * per_mb:,.0f} records/s, "
            f"ratio {three_n / single_n:.2f} to one broker's {single_n * per_mb:,.0f}; "
            f"1-record acks=all at {LATENCY_RATE:.0f}/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms"
        )
    print(
        "   (one stream answers one request at a time, as a Kafka connection: RF=3 is bound "
        "there by the acks=all round trip)"
    )


async def _bare_round_trips(port: int, rate: float, seconds: float) -> tuple[float, float]:
    """p50, p99 (ms) of one small message and its answer on a bare grpc.aio stream, one at a
    time at ``rate`` a second (the sink answers 8 bytes)."""
    payload = SMALL_RECORD + bytes(70)  # a one-record batch's size
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OPTIONS) as channel:
        call = channel.stream_stream(SINK_METHOD)()
        begin = time.perf_counter()
        for i in range(int(rate * seconds)):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            start = time.perf_counter()
            await call.write(payload)
            await call.read()
            latencies.append(time.perf_counter() - start)
        await call.done_writing()
    latencies.sort()
    return latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000


async def _latency_path(quick: bool, rate: float) -> None:
    """Section 5: bare round trip, acks=1 and RF=3 acks=all, interleaved, medians."""
    single_record = RecordBatchBuilder()
    single_record.append(1_700_000_000_000, None, SMALL_RECORD)
    one = single_record.build()
    reps, seconds = (3, 2.0) if quick else (5, 8.0)
    tp = TopicPartition("bench", 0)
    port = free_loopback_port()
    sink = _start_sink(port)
    runs: dict[str, list[tuple[float, float]]] = {
        "bare": [],
        "acks1": [],
        "all": [],
        "framed": [],
    }
    try:
        with tempfile.TemporaryDirectory(prefix="kafkasim-bench-") as tmp:
            async with _one_and_three(Path(tmp)) as (k1, k3, kf):
                await _bare_round_trips(port, rate, 1.0)  # warm up
                brokers = {"acks1": k1, "all": k3, "framed": kf}
                for client in brokers.values():
                    await _latency_at_rate(client, tp, one, rate=rate, seconds=1.0)
                for _ in range(reps):
                    runs["bare"].append(await _bare_round_trips(port, rate, seconds))
                    for key, client in brokers.items():
                        runs[key].append(
                            await _latency_at_rate(client, tp, one, rate=rate, seconds=seconds)
                        )
    finally:
        os.kill(sink.pid, signal.SIGTERM)
        sink.wait(timeout=10)
    print(
        f"\n5. the acks=all path: one {len(one)}-byte record a request at {rate:.0f}/s, "
        f"{seconds:.0f} s a run, medians of {reps} interleaved runs (each run's p50/p99 in ms)"
    )
    labels = {
        "bare": "bare grpc.aio round trip",
        "acks1": "one broker, acks=1",
        "all": "three brokers, RF=3, acks=all",
        "framed": "  the same, replication listeners",
    }
    medians = {k: _medians(v) for k, v in runs.items()}
    for key, label in labels.items():
        each = "  ".join(f"{a:.2f}/{b:.2f}" for a, b in runs[key])
        p50, p99 = medians[key]
        print(f"   {label:30} p50 {p50:6.2f}  p99 {p99:7.2f}   ({each})")
    bare, acks1, acks_all = (medians[k][0] for k in ("bare", "acks1", "all"))
    print(
        f"   acks=all over acks=1: +{acks_all - acks1:.2f} ms at the p50 "
        f"({(acks_all - acks1) / bare:.1f} bare round trips); the aim: p50 <= 2 ms"
    )
    framed = medians["framed"][0]
    print(
        f"   over replication listeners: +{framed - acks1:.2f} ms "
        f"({(framed - acks1) / bare:.1f} bare round trips)"
    )


def _medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p50 for p50, _ in runs), statistics.median(p99 for _, p99 in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--broker-bound", action="store_true", help="run section 4 only (issue 19's figures)"
    )
    parser.add_argument(
        "--front-door", action="store_true", help="run section 1 only (gRPC against the sink)"
    )
    parser.add_argument(
        "--latency", action="store_true", help="run section 5 only (the acks=all latency path)"
    )
    parser.add_argument(
        "--rate", type=float, default=LATENCY_RATE, help="section 5's requests a second"
    )
    parser.add_argument("--sink", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sink is not None:
        asyncio.run(_sink(args.sink))
        return 0
    if args.broker_bound:
        asyncio.run(_broker_bound(args.quick))
        return 0
    if args.latency:
        asyncio.run(_latency_path(args.quick, args.rate))
        return 0
    if args.front_door:
        asyncio.run(_front_door(_batch(), args.quick, 8))
        return 0
    asyncio.run(run(args.quick))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
