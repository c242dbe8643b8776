"""The acks=all path wakes every waiter as soon as it can go on, in virtual time (issue 19).

Why: an acks=all produce on RF=3 completes only after the leader's parked fetch answers wake,
each follower appends and fetches again, and the high watermark that this next fetch moves
completes the parked produce. A waiter registered after the event it waits for (a follower's
long-poll parked after the append, a produce watched after the HW moved), or an event that
forgets to check a waiter, costs a whole ``replica.fetch.wait.max.ms`` or the produce's timeout:
the latency spikes of a lost wakeup. Here the long-poll waits 30 s, and produces land at every
phase of the followers' fetch cycle (several producers, staggered by fractions of a network
hop, at once and one by one): each must complete in a few hops (the network's latency is
0.5 ms), never anywhere near a timeout.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, simulate

TP = TopicPartition("events", 0)
LONG_POLL_MS = 30_000
# Four hops (producer -> leader -> follower -> leader -> producer) of 0.5 ms, the appends and
# the loop's turns: a few ms. A lost wakeup costs LONG_POLL_MS or the produce's timeout.
BOUND_MS = 50


async def _timed_produces(
    cluster: SimCluster, name: str, offset_ms: float, count: int
) -> list[int]:
    """``count`` one-record acks=all produces, one after another, the first ``offset_ms`` in;
    the virtual ms each took."""
    client = cluster.client(name)
    await asyncio.sleep(offset_ms / 1000)
    took: list[int] = []
    for i in range(count):
        began = cluster.clock.monotonic_ms()
        result = await client.produce(
            TP, [b"%s-%d" % (name.encode(), i)], acks=-1, timeout_ms=60_000
        )
        assert result.ok, result
        took.append(cluster.clock.monotonic_ms() - began)
        # Stagger the next produce against the followers' fetch cycle (0 to 1.3 ms).
        await asyncio.sleep((i % 14) / 10_000)
    return took


def test_acks_all_produces_at_every_phase_of_the_fetch_cycle_complete_in_a_few_hops(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> list[int]:
        client = await create(cluster, TP.topic, min_insync_replicas="2")
        # The first acknowledged record: every follower fetches from the leader (a follower
        # whose first fetch raced ahead of the leader's LeaderAndIsr backs off
        # replica.fetch.backoff.ms first, as in Kafka; not what this test is about).
        warm = await client.produce(TP, [b"warm-up"], acks=-1, timeout_ms=60_000)
        assert warm.ok, warm
        alone = await _timed_produces(cluster, "alone", 0.0, 40)
        together = await asyncio.gather(
            *(_timed_produces(cluster, f"p{k}", k * 0.13, 40) for k in range(4))
        )
        return alone + [ms for each in together for ms in each]

    took = simulate(tmp_path, scenario, **{"replica.fetch.wait.max.ms": LONG_POLL_MS})
    assert len(took) == 200
    assert max(took) < BOUND_MS, sorted(took)[-10:]
