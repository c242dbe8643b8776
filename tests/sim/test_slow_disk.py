"""A slow disk in the simulation (the ``slow_disk`` fault, ``sim.disk.SimDisk`` behind the
broker's ``node.disk_delay`` port), in virtual time: a slowed follower's fetcher is blocked by
its writes, falls behind and leaves the ISR after replica.lag.time.max.ms, and returns once the
disk is fast again; a slowed leader answers produces at least the write latency later and loses
nothing; a slow fsync delays the appends that flush (log.flush.interval.messages); one write at
a time per disk. The catalog's ``slow-disk`` scenario shows the ISR shrinking and expanding."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafkasim.common.types import TopicPartition
from kafkasim.faults import checker, reading, runner
from kafkasim.sim.backend import SIM
from kafkasim.sim.cluster import SimCluster
from kafkasim.sim.disk import SimDisk
from kafkasim.sim.loop import run_simulation
from tests.sim.helpers import create, leader_of, partition_on, produce_all, simulate

TP = TopicPartition("events", 0)


def _isr(cluster: SimCluster) -> set[int]:
    return set(partition_on(cluster, leader_of(cluster, TP), TP).isr)


async def _produce_for(cluster: SimCluster, seconds: float, prefix: bytes) -> dict[bytes, int]:
    """acks=all produces, one every 100 ms (virtual) for ``seconds``."""
    client = cluster.client(f"producer-{prefix.decode()}")
    acked: dict[bytes, int] = {}
    for i in range(int(seconds * 10)):
        acked.update(await produce_all(client, TP, [prefix + b"%d" % i]))
        await asyncio.sleep(0.1)
    return acked


def test_a_slowed_follower_leaves_the_isr_and_returns_once_its_disk_is_fast(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TP.topic, min_insync_replicas="2")
        leader = leader_of(cluster, TP)
        follower = max(b for b in cluster.broker_ids if b != leader)
        disk = SimDisk(12_000, 0)
        cluster.slow_disk(follower, disk)
        shrinks = cluster.brokers[leader].replica_manager.isr_shrinks
        producing = asyncio.ensure_future(_produce_for(cluster, 20, b"a"))
        await cluster.wait_for(lambda: follower not in _isr(cluster), what="the ISR shrink")
        assert cluster.brokers[leader].replica_manager.isr_shrinks > shrinks
        assert disk.writes > 0
        # The other follower keeps min.insync.replicas: acks=all goes on.
        assert len(_isr(cluster)) == 2
        cluster.slow_disk(follower, None)
        await cluster.wait_for(
            lambda: follower in _isr(cluster), timeout_s=40, what="the ISR expand"
        )
        acked = await producing
        # Only the produces waiting on the slowed follower before it left may time out.
        assert len(acked) >= 190
        read = {r.value: r.offset for r in await client.read_all(TP)}
        assert {v: read.get(v) for v in acked} == acked  # nothing acknowledged lost

    simulate(tmp_path, scenario)


def test_a_follower_with_a_normal_disk_stays_in_the_isr(tmp_path: Path) -> None:
    """The control for the test above: the same workload, no slow disk, no shrink."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TP.topic, min_insync_replicas="2")
        leader = leader_of(cluster, TP)
        await _produce_for(cluster, 20, b"a")
        assert _isr(cluster) == set(cluster.broker_ids)
        assert cluster.brokers[leader].replica_manager.isr_shrinks == 0

    simulate(tmp_path, scenario)


async def _timed_produce(cluster: SimCluster, value: bytes, acks: int = -1) -> tuple[int, int]:
    """(virtual ms the produce took, its offset) for one acknowledged record."""
    client = cluster.client(f"timed-{value.decode()}")
    began = cluster.clock.monotonic_ms()
    result = await client.produce(TP, [value], acks=acks, timeout_ms=30_000)
    assert result.ok, result
    return cluster.clock.monotonic_ms() - began, result.base_offset


def test_a_slowed_leader_answers_acks_all_at_least_the_write_latency_later(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, TP.topic, min_insync_replicas="2")
        leader = leader_of(cluster, TP)
        fast_ms, _ = await _timed_produce(cluster, b"fast")
        cluster.slow_disk(leader, SimDisk(2_000, 0))
        slow_ms, _ = await _timed_produce(cluster, b"slow")
        assert slow_ms >= fast_ms + 2_000
        cluster.slow_disk(leader, None)
        again_ms, _ = await _timed_produce(cluster, b"again")
        assert again_ms < 2_000
        assert leader_of(cluster, TP) == leader
        values = [r.value for r in await client.read_all(TP)]
        assert values == [b"fast", b"slow", b"again"]

    simulate(tmp_path, scenario)


def test_a_slow_fsync_delays_the_appends_that_flush(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TP.topic, min_insync_replicas="2", flush_messages="1")
        await create(cluster, "lazy", min_insync_replicas="2")  # default: never flushes
        leader = leader_of(cluster, TP)
        disk = SimDisk(0, 1_500)
        cluster.slow_disk(leader, disk)
        took_ms, _ = await _timed_produce(cluster, b"flushed", acks=1)
        assert took_ms >= 1_500
        assert disk.fsyncs >= 1
        # A partition whose appends do not flush pays nothing for a slow fsync.
        lazy = TopicPartition("lazy", 0)
        lazy_leader = leader_of(cluster, lazy)
        lazy_disk = SimDisk(0, 1_500)
        cluster.slow_disk(lazy_leader, lazy_disk)
        client = cluster.client("lazy")
        began = cluster.clock.monotonic_ms()
        assert (await client.produce(lazy, [b"unflushed"], acks=1)).ok
        assert cluster.clock.monotonic_ms() - began < 1_500
        assert lazy_disk.fsyncs == 0 and lazy_disk.writes == 1

    simulate(tmp_path, scenario)


def test_one_disk_serves_one_request_at_a_time_in_order() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        disk = SimDisk(100, 50)
        done: list[tuple[str, float]] = []

        async def one(name: str, fsyncs: int) -> None:
            await (disk.write() if fsyncs == 0 else disk.fsync(fsyncs))
            done.append((name, round(loop.time() * 1000)))

        start = loop.time()
        await asyncio.gather(one("w1", 0), one("f2", 2), one("w3", 0))
        return [(n, t - round(start * 1000)) for n, t in done]

    assert run_simulation(main(), time_limit_s=60) == [("w1", 100), ("f2", 200), ("w3", 300)]


def test_the_slow_disk_scenario_shrinks_and_expands_the_isr_and_is_safe(
    tmp_path: Path,
) -> None:
    chosen = reading.load(reading.find("slow-disk"))
    history = runner.run(chosen, SIM, tmp_path / "run", seed=1)
    report = checker.check(history)
    assert report.ok and report.acknowledged > 0 and report.lost == 0, report.verdict_lines()
    leaders = [s for s in history.samples if s.is_leader and s.topic == "events"]
    smallest = min(len(s.isr) for s in leaders)
    assert smallest == 2  # the slowed follower left
    shrunk = next(s.time_ms for s in leaders if len(s.isr) == 2)
    assert any(len(s.isr) == 3 and s.time_ms > shrunk for s in leaders)  # and came back
