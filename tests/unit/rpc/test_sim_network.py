"""SimNetwork's faults: each looks to the caller as the same fault looks over a real network.

All of these run on virtual time, so the times asserted are exact hop counts of the configured
latency, and a seed replays a run exactly.
"""

from __future__ import annotations

import asyncio
import gc
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.common.rpc import RpcError, RpcServer, RpcStatus, Transport
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.loop import VirtualTimeLoop, run_simulation
from kafkasim.sim.network import SimNetwork, SimTransport

T = TypeVar("T")

LATENCY_MS = 1.0
DETECTION_MS = 1_000.0
TIMEOUT_S = 0.5


class Cluster:
    """Nodes on one SimNetwork, each with a transport and a Metadata + ReplicaFetch server.

    ``handled`` records (node, cluster_id of the request) for each Metadata call served.
    """

    def __init__(self, network: SimNetwork) -> None:
        self.network = network
        self.transports: dict[str, Transport] = {}
        self.servers: dict[str, RpcServer] = {}
        self.handled: list[tuple[str, int]] = []
        self.stream_handlers_cancelled: list[str] = []

    async def add(self, node: str) -> None:
        transport = SimTransport(self.network, node)

        async def metadata(request: Message) -> Message:
            assert isinstance(request, pb.MetadataRequest)
            self.handled.append((node, len(request.topics)))
            return pb.MetadataResponse(cluster_id=node)

        async def replica_fetch(requests: AsyncIterator[Message]) -> AsyncIterator[Message]:
            try:
                async for request in requests:
                    assert isinstance(request, pb.FetchRequest)
                    yield pb.FetchResponse(
                        partitions=[pb.FetchPartitionResponse(high_watermark=request.replica_id)]
                    )
            except asyncio.CancelledError:
                self.stream_handlers_cancelled.append(node)
                raise

        server = transport.server(
            f"{node}:9092",
            {proto.METHOD_METADATA: metadata},
            {proto.METHOD_REPLICA_FETCH: replica_fetch},
        )
        await server.start()
        self.transports[node] = transport
        self.servers[node] = server

    async def call(self, src: str, dst: str, *, timeout_s: float = TIMEOUT_S) -> str:
        """Metadata from ``src`` to ``dst``: the answering node, or the RpcStatus name."""
        try:
            response = await self.transports[src].call(
                f"{dst}:9092", proto.METHOD_METADATA, pb.MetadataRequest(), timeout_s=timeout_s
            )
        except RpcError as exc:
            return exc.status.value
        assert isinstance(response, pb.MetadataResponse)
        return response.cluster_id

    async def close(self) -> None:
        for server in self.servers.values():
            await server.stop(0)
        for transport in self.transports.values():
            await transport.close()


def simulate(
    scenario: Callable[[Cluster], Awaitable[T]],
    *,
    nodes: tuple[str, ...] = ("a", "b"),
    seed: int = 1,
    jitter_ms: float = 0.0,
) -> T:
    async def main() -> T:
        network = SimNetwork(
            asyncio.get_running_loop(),
            random.Random(seed),
            latency_ms=LATENCY_MS,
            jitter_ms=jitter_ms,
            break_detection_ms=DETECTION_MS,
        )
        cluster = Cluster(network)
        for node in nodes:
            await cluster.add(node)
        try:
            return await scenario(cluster)
        finally:
            await cluster.close()

    return run_simulation(main(), time_limit_s=10_000.0)


def fetch(seq: int) -> pb.FetchRequest:
    return pb.FetchRequest(replica_id=seq)


def hw_of(message: Message) -> int:
    assert isinstance(message, pb.FetchResponse)
    return message.partitions[0].high_watermark


def test_a_round_trip_takes_two_hops_of_latency() -> None:
    async def scenario(cluster: Cluster) -> float:
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await cluster.call("a", "b") == "b"
        return loop.time() - started

    assert simulate(scenario) == pytest.approx(2 * LATENCY_MS / 1000, abs=1e-12)


def test_an_address_nobody_bound_is_unavailable_after_a_round_trip() -> None:
    async def scenario(cluster: Cluster) -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        outcome = await cluster.call("a", "nowhere")
        return outcome, loop.time() - started

    outcome, elapsed = simulate(scenario)
    assert outcome == "UNAVAILABLE"
    assert elapsed == pytest.approx(2 * LATENCY_MS / 1000, abs=1e-12)


def test_an_isolated_node_is_cut_both_ways_until_healed() -> None:
    async def scenario(cluster: Cluster) -> list[str]:
        cluster.network.isolate("b")
        outcomes = [
            await cluster.call("a", "b"),
            await cluster.call("b", "a"),
            await cluster.call("b", "b"),  # a node always reaches itself
        ]
        cluster.network.heal("b")
        outcomes += [await cluster.call("a", "b"), await cluster.call("b", "a")]
        return outcomes

    assert simulate(scenario) == ["DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", "b", "b", "a"]


def test_a_partition_splits_the_sides_and_leaves_unlisted_nodes_connected() -> None:
    async def scenario(cluster: Cluster) -> dict[str, str]:
        cluster.network.partition([{"a", "b"}, {"c"}])
        outcomes = {
            f"{src}->{dst}": await cluster.call(src, dst)
            for src, dst in [("a", "b"), ("a", "c"), ("c", "b"), ("d", "a"), ("d", "c")]
        }
        cluster.network.heal_all()
        outcomes["a->c healed"] = await cluster.call("a", "c")
        return outcomes

    assert simulate(scenario, nodes=("a", "b", "c", "d")) == {
        "a->b": "b",
        "a->c": "DEADLINE_EXCEEDED",
        "c->b": "DEADLINE_EXCEEDED",
        "d->a": "a",
        "d->c": "c",
        "a->c healed": "c",
    }


def test_partition_groups_must_be_disjoint_and_non_empty() -> None:
    async def scenario(cluster: Cluster) -> None:
        with pytest.raises(ValueError, match="two partition groups"):
            cluster.network.partition([{"a", "b"}, {"b"}])
        with pytest.raises(ValueError, match="empty"):
            cluster.network.partition([{"a"}, set()])

    simulate(scenario)


def test_a_one_way_cut_drops_only_what_src_sends_to_dst() -> None:
    """b's request still reaches a (its handler runs) but the answer is lost: b times out."""

    async def scenario(cluster: Cluster) -> tuple[list[str], list[str]]:
        cluster.network.one_way("a", "b")
        outcomes = [await cluster.call("a", "b"), await cluster.call("b", "a")]
        served_by = [node for node, _ in cluster.handled]
        cluster.network.heal("a")
        outcomes.append(await cluster.call("a", "b"))
        return outcomes, served_by

    outcomes, served_by = simulate(scenario)
    assert outcomes == ["DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED", "b"]
    assert served_by == ["a"]


def test_loss_turns_some_calls_into_timeouts() -> None:
    async def scenario(cluster: Cluster) -> tuple[list[str], list[str], list[str], int]:
        cluster.network.set_loss(0.3)
        lossy = [await cluster.call("a", "b", timeout_s=0.05) for _ in range(100)]
        cluster.network.set_loss(1.0)
        lost = [await cluster.call("a", "b", timeout_s=0.05) for _ in range(5)]
        cluster.network.set_loss(0.0)
        clean = [await cluster.call("a", "b", timeout_s=0.05) for _ in range(20)]
        return lossy, lost, clean, cluster.network.stats.dropped

    lossy, lost, clean, dropped = simulate(scenario)
    # Each call survives with probability 0.7 ** 2 (request and response legs).
    assert 30 <= lossy.count("b") <= 70
    assert lossy.count("b") + lossy.count("DEADLINE_EXCEEDED") == 100
    assert lost == ["DEADLINE_EXCEEDED"] * 5
    assert clean == ["b"] * 20
    assert dropped == lossy.count("DEADLINE_EXCEEDED") + 5


def test_independent_calls_may_overtake_but_a_stream_keeps_its_order() -> None:
    async def scenario(cluster: Cluster) -> tuple[list[int], list[int]]:
        cluster.network.set_latency(5.0, 4.0)
        await asyncio.gather(
            *(
                cluster.transports["a"].call(
                    "b:9092",
                    proto.METHOD_METADATA,
                    pb.MetadataRequest(topics=["t"] * seq),
                    timeout_s=TIMEOUT_S,
                )
                for seq in range(50)
            )
        )
        arrival = [topics for _, topics in cluster.handled]
        stream = cluster.transports["a"].open_stream("b:9092", proto.METHOD_REPLICA_FETCH)
        for seq in range(200):
            await stream.send(fetch(seq))
        received = [hw_of(await stream.recv(TIMEOUT_S)) for _ in range(200)]
        await stream.close()
        return arrival, received

    arrival, received = simulate(scenario, jitter_ms=0.0)
    assert sorted(arrival) == list(range(50))
    assert arrival != list(range(50)), "with jitter, independent calls should reorder"
    assert received == list(range(200))


def test_a_stream_crossing_a_new_partition_breaks_after_the_detection_delay() -> None:
    async def scenario(cluster: Cluster) -> tuple[float, RpcStatus, list[str]]:
        loop = asyncio.get_running_loop()
        stream = cluster.transports["a"].open_stream("b:9092", proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 1
        cut_at = loop.time()
        cluster.network.partition([{"a"}, {"b"}])
        await stream.send(fetch(2))  # silently lost: the break is not detected yet
        cluster.network.heal_all()  # too late: the stream is already doomed
        with pytest.raises(RpcError) as raised:
            await stream.recv(None)
        broke_after = loop.time() - cut_at
        await stream.close()
        return broke_after, raised.value.status, cluster.stream_handlers_cancelled

    broke_after, status, cancelled = simulate(scenario)
    assert status is RpcStatus.UNAVAILABLE
    assert broke_after == pytest.approx(DETECTION_MS / 1000)
    assert cancelled == ["b"]


def test_a_stream_opened_into_a_partition_fails_after_the_detection_delay() -> None:
    async def scenario(cluster: Cluster) -> tuple[float, RpcStatus]:
        loop = asyncio.get_running_loop()
        cluster.network.isolate("b")
        stream = cluster.transports["a"].open_stream("b:9092", proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        with pytest.raises(RpcError) as raised:
            await stream.recv(None)
        await stream.close()
        return loop.time(), raised.value.status

    failed_at, status = simulate(scenario)
    assert status is RpcStatus.UNAVAILABLE
    assert failed_at == pytest.approx(DETECTION_MS / 1000)


def test_a_lost_stream_message_breaks_the_stream_instead_of_leaving_a_gap() -> None:
    async def scenario(cluster: Cluster) -> tuple[list[int], RpcStatus]:
        stream = cluster.transports["a"].open_stream("b:9092", proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(0))
        received = [hw_of(await stream.recv(TIMEOUT_S))]
        cluster.network.set_loss(0.2)
        for seq in range(1, 100):
            await stream.send(fetch(seq))
        with pytest.raises(RpcError) as raised:
            while True:
                received.append(hw_of(await stream.recv(None)))
        await stream.close()
        return received, raised.value.status

    received, status = simulate(scenario)
    assert status is RpcStatus.UNAVAILABLE
    assert received == list(range(len(received))), "a prefix, in order, without gaps"
    assert len(received) < 100


def test_a_crashed_server_node_fails_its_callers_and_streams_one_hop_later() -> None:
    async def scenario(cluster: Cluster) -> tuple[str, RpcStatus, float, str]:
        loop = asyncio.get_running_loop()
        stream = cluster.transports["a"].open_stream("b:9092", proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 1
        crashed_at = loop.time()
        cluster.network.crash("b")
        with pytest.raises(RpcError) as raised:
            await stream.recv(None)
        noticed_after = loop.time() - crashed_at
        await stream.close()
        down = await cluster.call("a", "b")
        # b restarts: a new transport binds the same address again.
        del cluster.servers["b"]
        await cluster.add("b")
        return down, raised.value.status, noticed_after, await cluster.call("a", "b")

    down, status, noticed_after, after_restart = simulate(scenario)
    assert status is RpcStatus.UNAVAILABLE
    assert noticed_after == pytest.approx(LATENCY_MS / 1000)
    assert down == "UNAVAILABLE"
    assert after_restart == "b"


def test_a_crashed_client_node_fails_its_own_calls_at_once_and_its_streams_go_away() -> None:
    async def scenario(cluster: Cluster) -> tuple[RpcStatus, RpcStatus, float, list[str]]:
        loop = asyncio.get_running_loop()
        slow_started = asyncio.Event()

        async def slow(request: Message) -> Message:
            slow_started.set()
            await asyncio.sleep(60)
            return pb.ProduceResponse()

        server = cluster.transports["b"].server("b:9093", {proto.METHOD_PRODUCE: slow}, {})
        await server.start()
        stream = cluster.transports["a"].open_stream("b:9092", proto.METHOD_REPLICA_FETCH)
        await stream.send(fetch(1))
        assert hw_of(await stream.recv(TIMEOUT_S)) == 1
        pending = asyncio.ensure_future(
            cluster.transports["a"].call(
                "b:9093", proto.METHOD_PRODUCE, pb.ProduceRequest(), timeout_s=30
            )
        )
        await slow_started.wait()
        crashed_at = loop.time()
        cluster.network.crash("a")
        with pytest.raises(RpcError) as call_error:
            await pending
        failed_after = loop.time() - crashed_at
        with pytest.raises(RpcError) as stream_error:
            await stream.recv(None)
        await asyncio.sleep(0.01)  # the server hears of it one hop later
        await server.stop(0)
        return (
            call_error.value.status,
            stream_error.value.status,
            failed_after,
            cluster.stream_handlers_cancelled,
        )

    call_status, stream_status, failed_after, cancelled = simulate(scenario)
    assert (call_status, stream_status) == (RpcStatus.CANCELLED, RpcStatus.CANCELLED)
    assert failed_after == 0.0
    assert cancelled == ["b"]


def test_fault_controls_validate_their_arguments() -> None:
    async def scenario(cluster: Cluster) -> None:
        network = cluster.network
        with pytest.raises(ValueError, match="loss"):
            network.set_loss(1.5)
        with pytest.raises(ValueError, match="latency"):
            network.set_latency(-1.0)
        with pytest.raises(ValueError, match="itself"):
            network.one_way("a", "a")
        with pytest.raises(ValueError, match="host:port"):
            await cluster.transports["a"].server("nohost", {}, {}).start()

    simulate(scenario)


# ---------------------------------------------------------------- determinism


def traced_run(seed: int) -> list[tuple[float, str]]:
    """A busy little cluster with jitter, loss and a partition; returns what happened when."""

    async def scenario(cluster: Cluster) -> list[tuple[float, str]]:
        loop = asyncio.get_running_loop()
        rng = random.Random(seed * 31)
        trace: list[tuple[float, str]] = []
        cluster.network.set_loss(0.05)
        cluster.network.set_latency(2.0, 1.5)

        async def client(src: str) -> None:
            for _ in range(30):
                dst = rng.choice(["a", "b", "c"])
                outcome = await cluster.call(src, dst, timeout_s=0.05)
                trace.append((loop.time(), f"{src}->{dst}:{outcome}"))

        async def streamer() -> None:
            stream = cluster.transports["c"].open_stream("a:9092", proto.METHOD_REPLICA_FETCH)
            try:
                for seq in range(50):
                    await stream.send(fetch(seq))
                    trace.append((loop.time(), f"stream:{hw_of(await stream.recv(None))}"))
            except RpcError as exc:
                trace.append((loop.time(), f"stream:{exc.status.value}"))
            finally:
                await stream.close()

        async def faults() -> None:
            await asyncio.sleep(0.2)
            cluster.network.partition([{"a"}, {"b", "c"}])
            trace.append((loop.time(), "partition"))
            await asyncio.sleep(0.3)
            cluster.network.heal_all()
            trace.append((loop.time(), "heal"))

        await asyncio.gather(client("a"), client("b"), streamer(), faults())
        return trace

    return simulate(scenario, nodes=("a", "b", "c"), seed=seed, jitter_ms=1.0)


def test_a_seeded_run_replays_exactly_and_another_seed_differs() -> None:
    first = traced_run(seed=7)
    assert len(first) > 60
    assert traced_run(seed=7) == first
    assert traced_run(seed=8) != first


def test_a_slowed_link_delays_only_its_own_direction_until_made_normal() -> None:
    """a's answers to b take 100 ms more: b's calls to a take the extra once (the answer),
    a's calls to b too (b's answer is not slowed, a's request is not either: only a to b)."""

    async def scenario(cluster: Cluster) -> list[float]:
        loop = asyncio.get_running_loop()
        cluster.network.slow_link("a", "b", 100.0)
        spans = []
        for src, dst in (("b", "a"), ("a", "b")):
            started = loop.time()
            assert await cluster.call(src, dst) == dst
            spans.append(loop.time() - started)
        cluster.network.slow_link("a", "b", 0.0)
        started = loop.time()
        await cluster.call("b", "a")
        spans.append(loop.time() - started)
        return spans

    hop = LATENCY_MS / 1000
    assert simulate(scenario) == [
        pytest.approx(2 * hop + 0.1, abs=1e-9),
        pytest.approx(2 * hop + 0.1, abs=1e-9),
        pytest.approx(2 * hop, abs=1e-9),
    ]


def test_a_one_way_cut_heals_alone() -> None:
    async def scenario(cluster: Cluster) -> list[str]:
        cluster.network.one_way("a", "b")
        cluster.network.one_way("b", "a")
        cluster.network.heal_one_way("a", "b")
        return [await cluster.call("b", "a"), await cluster.call("c", "a")]

    assert simulate(scenario, nodes=("a", "b", "c")) == ["DEADLINE_EXCEEDED", "a"]


def test_a_slowed_link_validates_its_delay() -> None:
    async def scenario(cluster: Cluster) -> None:
        with pytest.raises(ValueError, match="link delay"):
            cluster.network.slow_link("a", "b", -1.0)

    simulate(scenario)


def test_a_caller_cancelled_once_its_error_came_has_read_it() -> None:
    async def scenario(cluster: Cluster) -> list[str]:
        loop = asyncio.get_running_loop()
        reported: list[str] = []
        loop.set_exception_handler(lambda _, context: reported.append(context["message"]))
        pending = asyncio.ensure_future(
            cluster.transports["a"].call(
                "b:9092", proto.METHOD_METADATA, pb.MetadataRequest(), timeout_s=30
            )
        )
        await asyncio.sleep(0)  # the call is in flight
        cluster.network.crash("a")  # resolves the call's future with CANCELLED ...
        pending.cancel()  # ... and its caller goes away before reading it
        with pytest.raises(asyncio.CancelledError):
            await pending
        del pending
        gc.collect()
        return reported

    assert simulate(scenario) == []


def test_a_served_call_leaves_no_timer_armed() -> None:
    async def scenario(cluster: Cluster) -> int:
        loop = asyncio.get_running_loop()
        assert await cluster.call("a", "b") == "b"
        assert isinstance(loop, VirtualTimeLoop)
        return sum(not timer.cancelled() for timer in loop.scheduled_timers())

    assert simulate(scenario) == 0


def test_a_stream_send_queues_without_yielding_to_the_loop() -> None:
    """A send costs no loop step (buffers are unbounded): nothing else runs during it."""

    async def scenario(cluster: Cluster) -> list[str]:
        events: list[str] = []
        stream = cluster.transports["a"].open_stream("b:9092", proto.METHOD_REPLICA_FETCH)
        asyncio.get_running_loop().call_soon(events.append, "other callback")
        await stream.send(fetch(1))
        events.append("sent")
        assert hw_of(await stream.recv(TIMEOUT_S)) == 1
        await stream.close()
        return events

    assert simulate(scenario) == ["sent", "other callback"]
