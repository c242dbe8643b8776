"""``kafkasim demo cluster``: replication at work on a local cluster of real processes.

1. Start Debian's ZooKeeper and three brokers on loopback.
2. acks=all: a topic with RF=3 and min.insync.replicas=2; produce continuously; SIGKILL the
   partition's leader; watch the controller move leadership and the ISR shrink; restart the
   broker and watch the ISR expand again; consume everything; verdict.
3. acks=1: pause the followers (SIGSTOP) so that only the leader has the newest records,
   which it acknowledges at once; SIGKILL the leader; resume the followers; one of them, still
   in the ISR, becomes leader without those records; consume; verdict: exactly those are lost.
4. Stop everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafkasim.client.producer import Producer, RecordMetadata
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.coordination import NoNodeError
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination

# The brokers' replica.fetch.wait.max.ms (Kafka's default, which LocalCluster keeps).
REPLICA_FETCH_WAIT_MAX_S = 0.5


@dataclass
class Verdict:
    acknowledged: dict[bytes, int] = field(default_factory=dict)
    failed: int = 0
    read: list[tuple[int, bytes]] = field(default_factory=list)
    leader_only: int = 0  # acknowledged while the followers were paused

    @property
    def lost(self) -> list[bytes]:
        seen = {v for _, v in self.read}
        return [v for v in self.acknowledged if v not in seen]

    @property
    def duplicated(self) -> int:
        values = [v for _, v in self.read]
        return len(values) - len(set(values))

    def line(self, label: str) -> str:
        return (
            f"{label}: acknowledged {len(self.acknowledged)}, not acknowledged "
            f"{self.failed}, read {len(self.read)}, lost {len(self.lost)}, duplicated "
            f"{self.duplicated}"
        )


class Narrator:
    def __init__(self) -> None:
        self.start = time.monotonic()

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f}s] {text}", flush=True)


async def _watch_partition(
    zk: KazooCoordination, tp: TopicPartition, say: Narrator, stop: asyncio.Event
) -> None:
    """Print every change of the partition's leader, epoch and ISR as ZooKeeper shows it."""
    last: tuple[int, int, tuple[int, ...]] | None = None
    while not stop.is_set():
        with contextlib.suppress(NoNodeError):
            data, stat = await zk.get(zk_data.partition_state_path(tp))
            state = zk_data.decode_partition_state(data, stat.version)
            now = (state.leader, state.leader_epoch, state.isr)
            if now != last:
                say.say(
                    f"  {tp}: leader {state.leader}, leader epoch {state.leader_epoch}, "
                    f"ISR {list(state.isr)}"
                )
                last = now
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


async def _produce_forever(
    producer: Producer,
    tp: TopicPartition,
    *,
    prefix: str,
    verdict: Verdict,
    stop: asyncio.Event,
) -> None:
    """Send a record every few milliseconds; each future records its outcome."""
    n = 0
    while not stop.is_set():
        value = f"{prefix}-{n}".encode()
        n += 1
        future = producer.send(tp.topic, value, partition=tp.partition)
        future.add_done_callback(lambda f, v=value: _record(verdict, v, f))  # type: ignore[misc]
        await asyncio.sleep(0.005)
    await producer.flush()


def _record(verdict: Verdict, value: bytes, future: asyncio.Future[RecordMetadata]) -> None:
    if future.cancelled() or future.exception() is not None:
        verdict.failed += 1
    else:
        verdict.acknowledged[value] = future.result().offset


async def _leader(zk: KazooCoordination, tp: TopicPartition) -> tuple[int, tuple[int, ...]]:
    data, stat = await zk.get(zk_data.partition_state_path(tp))
    state = zk_data.decode_partition_state(data, stat.version)
    return state.leader, state.isr


async def _wait(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"timed out waiting for {what}")


async def _acks_all(
    cluster: LocalCluster, client: MinimalClient, zk: KazooCoordination, say: Narrator, pace: float
) -> Verdict:
    tp = TopicPartition("demo-acks-all", 0)
    say.say("acks=all: topic demo-acks-all, RF=3, min.insync.replicas=2")
    await client.create_topic(tp.topic, 1, 3, {"min.insync.replicas": "2"})
    await client.wait_for_leaders(tp.topic, 1)
    verdict = Verdict()
    stop_watch, stop_produce = asyncio.Event(), asyncio.Event()
    watcher = asyncio.create_task(_watch_partition(zk, tp, say, stop_watch))
    idempotent = Producer(
        {
            "bootstrap.servers": ",".join(cluster.bootstrap),
            "acks": "all",
            "enable.idempotence": "true",
            "linger.ms": "5",
        },
        transport=GrpcTransport(),
        clock=SystemClock(),
    )
    producer = asyncio.create_task(
        _produce_forever(idempotent, tp, prefix="acks-all", verdict=verdict, stop=stop_produce)
    )
    await asyncio.sleep(2 * pace)
    leader, _ = await _leader(zk, tp)
    say.say(
        f"producing with acks=all ({len(verdict.acknowledged)} acknowledged so far); "
        f"SIGKILL the leader, broker {leader}"
    )
    cluster.kill(leader)
    await _wait(lambda: _new_leader(zk, tp, leader), 60, "a new leader")
    say.say("the controller moved leadership to a broker in the ISR; producing goes on")
    await asyncio.sleep(2 * pace)
    say.say(f"restart broker {leader}: it truncates to the leader-epoch boundary and catches up")
    cluster.start_broker(leader)
    cluster.wait_serving(leader)
    await _wait(lambda: _in_isr(zk, tp, leader), 90, f"broker {leader} back in the ISR")
    await asyncio.sleep(0.3)  # let the watcher print the expanded ISR first
    say.say(f"broker {leader} is back in the ISR")
    stop_produce.set()
    await producer
    await idempotent.close()
    stop_watch.set()
    await watcher
    verdict.read = [(r.offset, r.value or b"") for r in await client.read_all(tp)]
    return verdict


async def _new_leader(zk: KazooCoordination, tp: TopicPartition, old: int) -> bool:
    leader, _ = await _leader(zk, tp)
    return leader not in (-1, old)


async def _in_isr(zk: KazooCoordination, tp: TopicPartition, broker: int) -> bool:
    _, isr = await _leader(zk, tp)
    return broker in isr


async def _acks_1(
    cluster: LocalCluster, client: MinimalClient, zk: KazooCoordination, say: Narrator, pace: float
) -> Verdict:
    tp = TopicPartition("demo-acks-1", 0)
    say.say("acks=1: topic demo-acks-1, RF=3")
    await client.create_topic(tp.topic, 1, 3, {})
    await client.wait_for_leaders(tp.topic, 1)
    verdict = Verdict()
    plain = Producer(
        {
            "bootstrap.servers": ",".join(cluster.bootstrap),
            "acks": "1",
            "enable.idempotence": "false",
            "max.in.flight.requests.per.connection": "1",
        },
        transport=GrpcTransport(),
        clock=SystemClock(),
    )
    try:
        for n in range(int(50 * pace) + 10):
            value = f"replicated-{n}".encode()
            verdict.acknowledged[value] = (await plain.send(tp.topic, value, partition=0)).offset
        await asyncio.sleep(1)  # the followers copy these
        leader, isr = await _leader(zk, tp)
        followers = [b for b in isr if b != leader]
        say.say(
            f"{len(verdict.acknowledged)} records replicated; pause the followers {followers} "
            "(SIGSTOP) and keep producing with acks=1"
        )
        for broker in followers:
            cluster.pause(broker)
        # A paused follower's fetch may still be waiting on the leader (a long poll of up to
        # replica.fetch.wait.max.ms): the first record produced would complete it, the answer
        # would wait in the paused process's socket, and it would append that record when it
        # resumes, so one "leader-only" record would survive. Let those polls expire, empty.
        await asyncio.sleep(2 * REPLICA_FETCH_WAIT_MAX_S)
        unreplicated = 0
        for n in range(int(20 * pace) + 5):
            value = f"only-on-leader-{n}".encode()
            verdict.acknowledged[value] = (await plain.send(tp.topic, value, partition=0)).offset
            unreplicated += 1
        verdict.leader_only = unreplicated
    finally:
        await plain.close()
    say.say(
        f"the leader acknowledged {unreplicated} more records alone; SIGKILL it "
        f"(broker {leader}) and resume the followers"
    )
    cluster.kill(leader)
    for broker in followers:
        cluster.resume(broker)
    await _wait(lambda: _new_leader(zk, tp, leader), 60, "a new leader")
    new_leader, new_isr = await _leader(zk, tp)
    say.say(f"broker {new_leader} leads (it was in the ISR: a clean election), ISR {list(new_isr)}")
    verdict.read = [(r.offset, r.value or b"") for r in await client.read_all(tp)]
    cluster.start_broker(leader)
    cluster.wait_serving(leader)
    return verdict


async def run_demo(root: Path, *, quick: bool) -> int:
    say = Narrator()
    pace = 0.5 if quick else 1.5
    say.say(f"starting ZooKeeper and 3 brokers in {root}")
    cluster = LocalCluster(root, brokers=3)
    try:
        cluster.start()
        for broker in cluster.brokers.values():
            say.say(f"  broker {broker.broker_id} on {broker.address} (pid {broker.pid})")
        zk = KazooCoordination(cluster.zookeeper.connect_string, 10_000)
        await zk.start()
        client = MinimalClient(GrpcTransport(), cluster.bootstrap, SystemClock())
        try:
            all_verdict = await _acks_all(cluster, client, zk, say, pace)
            acks1_verdict = await _acks_1(cluster, client, zk, say, pace)
        finally:
            await client.transport.close()
            await zk.close()
    finally:
        say.say("stopping everything")
        cluster.stop()
    print()
    print(all_verdict.line("verdict acks=all"))
    print(acks1_verdict.line("verdict acks=1  "))
    safe = not all_verdict.lost
    print(
        "acks=all with min.insync.replicas=2 lost nothing acknowledged."
        if safe
        else f"acks=all LOST {len(all_verdict.lost)} acknowledged records: {all_verdict.lost[:5]}"
    )
    lost, alone = len(acks1_verdict.lost), acks1_verdict.leader_only
    print(
        f"acks=1 lost {lost} acknowledged records: the {alone} the killed leader "
        "acknowledged alone."
        if lost == alone
        else f"acks=1 lost {lost} of the {alone} records the killed leader acknowledged alone "
        "(the others had reached a follower before it stopped)."
    )
    return 0 if safe else 3


def run(root: Path | None, quick: bool) -> int:
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
        return asyncio.run(run_demo(root, quick=quick))
    with tempfile.TemporaryDirectory(prefix="kafkasim-demo-") as tmp:
        return asyncio.run(run_demo(Path(tmp), quick=quick))
