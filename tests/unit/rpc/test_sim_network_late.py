"""SimNetwork's late delivery (``late_delivery``, a scenario's ``cluster.late_delivery``): a cut
holds the unary messages that cross it, as TCP retransmits them, and delivers them once it
heals, instead of losing them. Virtual time, so the instants asserted are exact: TCP's
retransmission schedule from the send (0.2 s, 0.6 s, 1.4 s, ...) plus one hop of latency."""

from __future__ import annotations

import asyncio

import pytest

from kafkasim import proto
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.tcp_retransmission import next_retransmission_s
from tests.unit.rpc.test_sim_network import LATENCY_MS, Cluster, simulate

HOP_S = LATENCY_MS / 1000


async def _timed_call(cluster: Cluster, src: str, dst: str, timeout_s: float) -> tuple[str, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    outcome = await cluster.call(src, dst, timeout_s=timeout_s)
    return outcome, loop.time() - started


async def _heal_later(cluster: Cluster, after_s: float, node: str) -> None:
    await asyncio.sleep(after_s)
    cluster.network.heal(node)


def test_tcp_retransmits_after_200_ms_then_doubles_and_gives_up_after_15_tries() -> None:
    assert next_retransmission_s(10.0, 10.0) == pytest.approx(10.2)
    assert next_retransmission_s(10.0, 10.3) == pytest.approx(10.6)
    assert next_retransmission_s(10.0, 11.0) == pytest.approx(11.4)
    # The waits stop growing at 120 s: the 15th and last retransmission is 804.6 s after the
    # send (0.2 * (2**10 - 1) + 5 * 120), and nothing is sent again after it.
    assert next_retransmission_s(0.0, 804.6) == pytest.approx(804.6)
    assert next_retransmission_s(0.0, 804.7) is None


def test_a_request_sent_into_a_short_cut_is_answered_after_the_heal() -> None:
    async def scenario(cluster: Cluster) -> tuple[str, float, int]:
        cluster.network.late_delivery = True
        cluster.network.isolate("b")
        healing = asyncio.create_task(_heal_later(cluster, 0.3, "b"))
        outcome = await _timed_call(cluster, "a", "b", timeout_s=5.0)
        await healing
        return *outcome, cluster.network.stats.held

    outcome, elapsed, held = simulate(scenario)
    # Held at 0 s; healed at 0.3 s; retransmitted at 0.6 s: one hop there, one back.
    assert (outcome, held) == ("b", 1)
    assert elapsed == pytest.approx(0.6 + 2 * HOP_S, abs=1e-9)


def test_without_late_delivery_the_same_cut_loses_the_request() -> None:
    async def scenario(cluster: Cluster) -> tuple[str, float]:
        cluster.network.isolate("b")
        healing = asyncio.create_task(_heal_later(cluster, 0.3, "b"))
        outcome = await _timed_call(cluster, "a", "b", timeout_s=5.0)
        await healing
        return outcome

    assert simulate(scenario) == ("DEADLINE_EXCEEDED", pytest.approx(5.0))


def test_a_request_whose_caller_gave_up_before_the_heal_is_never_run() -> None:
    async def scenario(cluster: Cluster) -> tuple[str, list[tuple[str, int]]]:
        cluster.network.late_delivery = True
        cluster.network.isolate("b")
        outcome, _ = await _timed_call(cluster, "a", "b", timeout_s=0.5)
        cluster.network.heal("b")  # at 0.5 s; the request would come at 0.6 s
        await asyncio.sleep(2.0)
        return outcome, list(cluster.handled)

    # The caller's RST_STREAM travels right behind the request: b never serves it.
    assert simulate(scenario) == ("DEADLINE_EXCEEDED", [])


def test_an_answer_held_by_a_one_way_cut_arrives_after_the_heal() -> None:
    async def scenario(cluster: Cluster) -> tuple[str, float, list[tuple[str, int]]]:
        network = cluster.network
        network.late_delivery = True
        network.one_way("b", "a")  # the request gets through, the answer does not

        async def heal() -> None:
            await asyncio.sleep(1.0)
            network.heal_one_way("b", "a")

        healing = asyncio.create_task(heal())
        outcome, elapsed = await _timed_call(cluster, "a", "b", timeout_s=5.0)
        await healing
        return outcome, elapsed, list(cluster.handled)

    outcome, elapsed, handled = simulate(scenario)
    assert (outcome, handled) == ("b", [("b", 0)])
    # The answer left b one hop in; healed at 1 s; TCP's retransmissions at +0.2, +0.6, +1.4.
    assert elapsed == pytest.approx(HOP_S + 1.4 + HOP_S, abs=1e-9)


def test_held_requests_on_one_link_arrive_in_the_order_they_were_sent() -> None:
    async def scenario(cluster: Cluster) -> list[tuple[str, int]]:
        network = cluster.network
        network.late_delivery = True
        network.isolate("b")
        client = cluster.transports["a"]

        async def metadata(topics: int) -> None:
            request = pb.MetadataRequest(topics=[f"t{i}" for i in range(topics)])
            await client.call("b:9092", proto.METHOD_METADATA, request, timeout_s=5.0)

        first = asyncio.create_task(metadata(1))
        await asyncio.sleep(0.35)
        # Sent at 0.35 s, its own first retransmission (0.55 s) would overtake the first
        # request's (0.6 s): the connection keeps them in order.
        second = asyncio.create_task(metadata(2))
        await asyncio.sleep(0.15)
        network.heal("b")
        await asyncio.gather(first, second)
        return list(cluster.handled)

    assert simulate(scenario) == [("b", 1), ("b", 2)]


def test_a_crash_drops_what_was_held_to_and_from_the_crashed_node() -> None:
    async def scenario(cluster: Cluster) -> tuple[str, list[tuple[str, int]], int, int]:
        network = cluster.network
        network.late_delivery = True
        network.isolate("b")
        call = asyncio.create_task(cluster.call("a", "b", timeout_s=5.0))
        await asyncio.sleep(0.1)
        network.crash("a")  # its connections die with it
        outcome = await call
        network.heal("b")
        await asyncio.sleep(2.0)
        return outcome, list(cluster.handled), network.stats.held, network.stats.dropped

    outcome, handled, held, dropped = simulate(scenario)
    assert outcome == "CANCELLED"
    assert handled == [] and held == 1 and dropped == 1
