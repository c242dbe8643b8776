"""Failures a cluster of containers suffers, judged by the history checker (issue 6).

Each test creates its own topic (1 partition, RF 3, min ISR 2) on the compose cluster, runs
the simulation's workload (``faults.workload.Workload``: an idempotent acks=all producer and a
consumer, from the host through the external listeners, on GrpcTransport and the wall
clock), injects one fault with the docker CLI while it writes, heals it, waits until every
replica is back in the ISR, reads the partition to its high watermark, copies each broker's
partition directory out of its container, and hands the history to ``faults.checker``: no
acknowledged record may be lost (nor duplicated, reordered or read beyond the HW).

Every wait is bounded; none is an assertion on how fast something happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.compose.conftest import (
    BROKER_IDS,
    ComposeCluster,
    compose_unavailable,
    replication_connections,
)

_REASON = compose_unavailable()
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

from confluent_kafka import Consumer, KafkaError, Message, Producer  # noqa: E402 - after the skip
from confluent_kafka import TopicPartition as KafkaTopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from kafkasim import proto  # noqa: E402 - after the skip: nothing below runs without an engine
from kafkasim.client.simple import MinimalClient  # noqa: E402
from kafkasim.cluster.chaos import read_replica_log  # noqa: E402
from kafkasim.common.clock import SystemClock  # noqa: E402
from kafkasim.common.rpc import RpcError  # noqa: E402
from kafkasim.common.rpc_grpc_client import GrpcTransport  # noqa: E402
from kafkasim.common.types import TopicPartition  # noqa: E402
from kafkasim.faults import checker  # noqa: E402
from kafkasim.faults.history import FaultEvent, History, Op, OpType, ReplicaSample  # noqa: E402
from kafkasim.faults.scenario import (  # noqa: E402
    ClusterSpec,
    ConsumerSpec,
    ProducerSpec,
    Scenario,
    TopicSpec,
    WorkloadSpec,
)
from kafkasim.faults.workload import Workload  # noqa: E402
from kafkasim.proto import kafkasim_pb2 as pb  # noqa: E402
from kafkasim.storage.records.batch import RecordBatchBuilder  # noqa: E402

logger = logging.getLogger(__name__)

pytestmark = pytest.mark.slow

PRODUCE_RATE = 40.0  # records/s: enough to be writing through every fault, light on 2 cores
WARM_UP_S = 3.0  # writing before the fault
COOL_DOWN_S = 3.0  # writing after it healed
# Bounds for waits on the cluster (a new leader, an ISR change, a broker back): generous,
# since a shared machine may be slow; exceeding one fails the test with what was awaited.
CHANGE_TIMEOUT_S = 120.0
POLL_S = 0.5


@dataclass
class FaultRun:
    """One workload on one topic, with the fault the test injects while it runs."""

    cluster: ComposeCluster
    topic: str
    work_dir: Path
    history: History = field(default_factory=History)
    clock: SystemClock = field(default_factory=SystemClock)
    # Brokers the sampler should not ask (paused: they only time out).
    unreachable: set[int] = field(default_factory=set)
    transports: list[GrpcTransport] = field(default_factory=list)
    start_ms: int = 0

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, 0)

    def transport_for(self, name: str) -> GrpcTransport:
        del name  # one channel set per client, as separate processes would have
        transport = GrpcTransport()
        self.transports.append(transport)
        return transport

    def now_ms(self) -> int:
        return self.clock.monotonic_ms() - self.start_ms

    def answering(self) -> list[str]:
        return [self.cluster.address(b) for b in BROKER_IDS if b not in self.unreachable]

    def fault(self, action: str, broker_id: int) -> Callable[[], None]:
        """Record a fault window starting now; the returned function ends it."""
        event = FaultEvent(self.now_ms(), action, f"broker {broker_id}")
        self.history.faults.append(event)
        index = len(self.history.faults) - 1

        def end() -> None:
            self.history.faults[index] = FaultEvent(
                event.start_ms, event.action, event.target, self.now_ms()
            )

        return end

    # -- what the brokers say ------------------------------------------------------------------

    async def states(self, brokers: tuple[int, ...] = BROKER_IDS) -> list[ReplicaSample]:
        transport = self.transport_for("lookup")
        return await self.cluster.samples(transport, self.topic, brokers)

    async def leader(self, brokers: tuple[int, ...] = BROKER_IDS) -> ReplicaSample | None:
        """The leader's own report at the highest leader epoch any broker reports."""
        states = [s for s in await self.states(brokers) if s.is_leader and s.leader == s.broker]
        return max(states, key=lambda s: s.leader_epoch, default=None)

    async def wait_for(
        self, what: str, probe: Callable[[], Awaitable[ReplicaSample | None]]
    ) -> ReplicaSample:
        """Poll ``probe`` until it returns a sample (bounded by CHANGE_TIMEOUT_S)."""
        deadline = self.clock.monotonic_ms() + CHANGE_TIMEOUT_S * 1000
        while self.clock.monotonic_ms() < deadline:
            found = await probe()
            if found is not None:
                logger.info("%s: %s", what, found)
                return found
            await asyncio.sleep(POLL_S)
        raise AssertionError(f"{self.topic}: {what}: not within {CHANGE_TIMEOUT_S:g} s")

    async def wait_isr(self, members: set[int]) -> ReplicaSample:
        """Until the leader reports exactly ``members`` in sync, HW = its LEO."""

        async def probe() -> ReplicaSample | None:
            leader = await self.leader(tuple(b for b in BROKER_IDS if b not in self.unreachable))
            if leader is None or set(leader.isr) != members:
                return None
            return leader

        return await self.wait_for(f"ISR {sorted(members)}", probe)

    async def wait_new_leader(self, old: ReplicaSample, among: tuple[int, ...]) -> ReplicaSample:
        async def probe() -> ReplicaSample | None:
            leader = await self.leader(among)
            if leader is None or leader.leader_epoch <= old.leader_epoch:
                return None
            return leader

        return await self.wait_for(f"a leader after broker {old.leader}", probe)

    # -- the run -------------------------------------------------------------------------------

    def scenario(self) -> Scenario:
        return Scenario(
            name=self.topic,
            description="compose failure test",
            expect="safe",
            cluster=ClusterSpec(brokers=len(BROKER_IDS), topics=(TopicSpec(self.topic),)),
            workload=WorkloadSpec(
                producers=(ProducerSpec("producer-1", self.topic, rate=PRODUCE_RATE),),
                consumers=(ConsumerSpec("consumer-1", self.topic),),
                duration_s=0.0,  # ours to end: the fault decides
                settle_s=0.0,
            ),
        )

    async def run(self, inject: Callable[[FaultRun], Awaitable[None]]) -> checker.CheckReport:
        scenario = self.scenario()
        admin = MinimalClient(self.transport_for("admin"), self.cluster.bootstrap, self.clock)
        workload: Workload | None = None
        try:
            await admin.create_topic(self.topic, 1, 3, {"min.insync.replicas": "2"})
            await admin.wait_for_leaders(self.topic, 1)
            await self.wait_isr(set(BROKER_IDS))
            self.start_ms = self.clock.monotonic_ms()
            self.history.meta = {"scenario": self.topic, "seed": None, "runtime": "compose"}
            workload = Workload(
                scenario=scenario,
                history=self.history,
                clock=self.clock,
                transport_for=self.transport_for,
                bootstrap=self.cluster.bootstrap,
                start_ms=self.start_ms,
                broker_addresses=self.answering,
            )
            workload.start()
            await asyncio.sleep(WARM_UP_S)
            await inject(self)
            await asyncio.sleep(COOL_DOWN_S)
            await workload.stop_producers()
            await self.wait_isr(set(BROKER_IDS))
            await workload.final_read()
        finally:
            if workload is not None:
                await workload.stop()
            for transport in self.transports:
                await transport.close()
            self.transports.clear()
        await self.read_final_logs()
        self.history.write(self.work_dir / "history.jsonl")
        return checker.check(self.history)

    async def read_final_logs(self) -> None:
        leader = await self.leader()
        assert leader is not None, f"{self.topic}: no leader at the end"
        self.history.final_hw[(self.topic, 0)] = leader.high_watermark
        for broker_id in BROKER_IDS:
            copied = self.cluster.copy_partition(
                broker_id, self.topic, 0, self.work_dir / f"broker-{broker_id}"
            )
            if copied is None:
                continue
            entries, problem = read_replica_log(copied)
            assert problem is None, f"broker {broker_id}: {problem}"
            self.history.final_logs[(self.topic, 0, broker_id)] = entries
        for transport in self.transports:
            await transport.close()
        self.transports.clear()


def judge(run: FaultRun, report: checker.CheckReport) -> None:
    """Zero acknowledged records lost, and nothing else the checker objects to."""
    lines = "\n".join(report.verdict_lines())
    assert report.acknowledged > 0, f"nothing was acknowledged:\n{lines}"
    assert report.lost == 0, lines
    assert report.ok, lines
    logger.info("%s: %s", run.topic, lines)


def leader_epochs(history: History) -> set[int]:
    return {s.leader_epoch for s in history.samples if s.is_leader}


def run_fault(
    cluster: ComposeCluster,
    tmp_path: Path,
    topic: str,
    inject: Callable[[FaultRun], Awaitable[None]],
) -> FaultRun:
    run = FaultRun(cluster, topic, tmp_path)
    judge(run, asyncio.run(run.run(inject)))
    return run


# -- the tests -------------------------------------------------------------------------------------


def test_cluster_starts_from_the_compose_file_and_serves_the_host(
    compose_cluster: ComposeCluster,
) -> None:
    """Each broker's external listener answers from the host with all three brokers, named
    by their external (host) addresses: the listener a client came in on."""

    async def main() -> pb.MetadataResponse:
        transport = GrpcTransport()
        try:
            client = MinimalClient(transport, [compose_cluster.address(2)], SystemClock())
            return await client.refresh_metadata()
        finally:
            await transport.close()

    response = asyncio.run(main())
    assert {b.node_id: f"{b.host}:{b.port}" for b in response.brokers} == {
        b: compose_cluster.address(b) for b in BROKER_IDS
    }


def test_a_kafka_client_on_the_host_round_trips_records_through_the_kafka_listener(
    compose_cluster: ComposeCluster,
) -> None:
    """confluent-kafka (librdkafka) on the host, bootstrapped on the published KAFKA_EXTERNAL
    listeners: metadata names every broker by its host-published Kafka address (the listener
    the client came in on), and what it produces with acks=all and idempotence it consumes
    back, in order. The followers fetch over the brokers' REPLICATION listeners."""
    topic, count = "kafka-client-round-trip", 200

    async def create() -> None:
        transport = GrpcTransport()
        try:
            admin = MinimalClient(transport, compose_cluster.bootstrap, SystemClock())
            await admin.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
            await admin.wait_for_leaders(topic, 1)
        finally:
            await transport.close()

    asyncio.run(create())
    bootstrap = compose_cluster.kafka_bootstrap
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60)
    assert {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()} == {
        b: f"127.0.0.1:{compose_cluster.kafka_ports[b]}" for b in BROKER_IDS
    }

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    offsets: list[int] = []
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failures.append(err)
        else:
            offset = msg.offset()
            assert offset is not None
            offsets.append(offset)

    sent = [f"record-{i}".encode() for i in range(count)]
    for value in sent:
        producer.produce(topic, value, partition=0, on_delivery=delivered)
    assert producer.flush(120) == 0, "records still undelivered after 120 s"
    assert not failures and offsets == list(range(count)), failures
    # acks=all waited for the followers, which fetch from the leader's REPLICATION listener.
    assert replication_connections(compose_cluster) >= 2

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "round-trip", "enable.auto.commit": False}
    )
    received: list[bytes] = []
    try:
        consumer.assign([KafkaTopicPartition(topic, 0, 0)])
        clock = SystemClock()
        deadline = clock.monotonic_ms() + 120_000
        while len(received) < count and clock.monotonic_ms() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            payload = message.value()
            assert isinstance(payload, bytes)
            received.append(payload)
    finally:
        consumer.close()
    assert received == sent


def test_killed_leader_is_replaced_and_no_acknowledged_record_is_lost(
    compose_cluster: ComposeCluster, tmp_path: Path
) -> None:
    """docker kill (SIGKILL) of the partition's leader: another in-sync replica takes over
    with a higher leader epoch; the killed broker, started again, rejoins the ISR."""
    seen: dict[str, ReplicaSample] = {}

    async def kill_leader(run: FaultRun) -> None:
        old = await run.wait_for("the leader", run.leader)
        seen["old"] = old
        end = run.fault("kill", old.leader)
        run.cluster.kill(old.leader)
        run.unreachable.add(old.leader)
        try:
            others = tuple(b for b in BROKER_IDS if b != old.leader)
            seen["new"] = await run.wait_new_leader(old, others)
            await asyncio.sleep(2.0)  # writing to the new leader with the old one down
        finally:
            run.cluster.start(old.leader)
            run.unreachable.discard(old.leader)
            end()

    run = run_fault(compose_cluster, tmp_path, "kill-leader", kill_leader)
    assert seen["new"].leader != seen["old"].leader
    assert max(leader_epochs(run.history)) > seen["old"].leader_epoch


def test_paused_follower_leaves_the_isr_and_rejoins_it(
    compose_cluster: ComposeCluster, tmp_path: Path
) -> None:
    """docker pause (the cgroup freezer) of a follower for longer than
    replica.lag.time.max.ms (3 s here): the leader shrinks the ISR to the two others, which
    still satisfy min ISR 2, so acks=all writes go on; after docker unpause it catches up and
    the leader adds it back."""
    seen: dict[str, ReplicaSample] = {}

    async def pause_follower(run: FaultRun) -> None:
        leader = await run.wait_for("the leader", run.leader)
        follower = min(b for b in leader.isr if b != leader.leader)
        end = run.fault("pause", follower)
        run.cluster.pause(follower)
        run.unreachable.add(follower)
        try:
            seen["shrunk"] = await run.wait_isr(set(leader.isr) - {follower})
            await asyncio.sleep(1.0)
        finally:
            run.cluster.unpause(follower)
            run.unreachable.discard(follower)
            end()
        seen["expanded"] = await run.wait_isr(set(BROKER_IDS))

    run = run_fault(compose_cluster, tmp_path, "pause-follower", pause_follower)
    follower = next(iter(set(BROKER_IDS) - set(seen["shrunk"].isr)))
    leader_isrs = [set(s.isr) for s in run.history.samples if s.is_leader]
    assert any(follower not in isr for isr in leader_isrs), "the sampler never saw the shrink"
    assert follower in set(seen["expanded"].isr)


def test_partitioned_leader_stops_acknowledging_and_truncates_on_return(
    compose_cluster: ComposeCluster, tmp_path: Path
) -> None:
    """docker network disconnect of the leader from the cluster network (its host listener
    stays up): it can reach neither ZooKeeper nor its followers, so an acks=all write sent
    to it is not acknowledged; the others elect a new leader; reconnected, the old leader
    truncates what only it had (the probe's record) and follows the new one."""
    seen: dict[str, object] = {}
    probe_value = "probe-isolated-leader"

    async def probe(run: FaultRun, broker_id: int) -> tuple[int, str]:
        """One acks=all produce straight to ``broker_id``'s host listener, recorded in the
        history as a send whose outcome is unknown unless acknowledged."""
        builder = RecordBatchBuilder()
        builder.append(run.clock.time_ms(), None, probe_value.encode())
        request = pb.ProduceRequest(acks=-1, timeout_ms=3000)
        request.partitions.add(topic=run.topic, partition=0, records=builder.build())
        op = Op(OpType.INVOKE, "send", "probe", run.now_ms(), run.topic, 0, probe_value)
        run.history.add(op)
        transport = run.transport_for("probe")
        try:
            response = await transport.call(
                run.cluster.address(broker_id), proto.METHOD_PRODUCE, request, timeout_s=10.0
            )
        except RpcError as e:
            outcome = (-1, f"rpc: {e}")
        else:
            assert isinstance(response, pb.ProduceResponse)
            part = response.partitions[0]
            outcome = (part.error_code, part.error_message)
        if outcome[0] == 0:
            run.history.add(
                Op(OpType.OK, "send", "probe", run.now_ms(), run.topic, 0, probe_value, offset=0)
            )
        else:
            run.history.add(
                Op(
                    OpType.INFO,
                    "send",
                    "probe",
                    run.now_ms(),
                    run.topic,
                    0,
                    probe_value,
                    error=outcome[1],
                )
            )
        return outcome

    async def partition_leader(run: FaultRun) -> None:
        old = await run.wait_for("the leader", run.leader)
        seen["old"] = old
        end = run.fault("isolate", old.leader)
        run.cluster.disconnect(old.leader)
        try:
            seen["probe_early"] = await probe(run, old.leader)
            others = tuple(b for b in BROKER_IDS if b != old.leader)
            seen["new"] = await run.wait_new_leader(old, others)
            seen["probe_late"] = await probe(run, old.leader)
            await asyncio.sleep(2.0)
        finally:
            with contextlib.suppress(RuntimeError):
                run.cluster.connect(old.leader)
            end()

    run = run_fault(compose_cluster, tmp_path, "isolate-leader", partition_leader)
    old = seen["old"]
    new = seen["new"]
    assert isinstance(old, ReplicaSample) and isinstance(new, ReplicaSample)
    assert new.leader != old.leader and new.leader_epoch > old.leader_epoch
    for key in ("probe_early", "probe_late"):
        code, message = seen[key]  # type: ignore[misc]
        assert code != 0, f"{key}: the isolated leader acknowledged an acks=all write"
        logger.info("%s refused: %s %s", key, code, message)
    for (_, _, broker_id), entries in run.history.final_logs.items():
        assert probe_value not in {v for _, v in entries}, (
            f"broker {broker_id} kept the isolated leader's unreplicated record"
        )


def test_restarted_broker_keeps_its_log_in_its_volume(
    compose_cluster: ComposeCluster, tmp_path: Path
) -> None:
    """A follower's container stopped (a controlled shutdown), removed and created again by
    compose: the new container mounts the same named volume, loads the partition's log from
    it (it never logs creating the log anew) and catches up from where it stopped."""
    seen: dict[str, object] = {}

    async def recreate_follower(run: FaultRun) -> None:
        leader = await run.wait_for("the leader", run.leader)
        follower = max(b for b in leader.isr if b != leader.leader)
        service = f"broker-{follower}"
        seen["follower"] = follower
        seen["old_container"] = run.cluster.container(follower)
        end = run.fault("recreate", follower)
        run.unreachable.add(follower)
        try:
            await asyncio.to_thread(run.cluster.compose, "stop", service)
            copied = run.cluster.copy_partition(follower, run.topic, 0, run.work_dir / "stopped")
            assert copied is not None, f"{service} had no log for {run.topic} when stopped"
            seen["stopped_log"], problem = read_replica_log(copied)
            assert problem is None, problem
            await asyncio.to_thread(run.cluster.compose, "rm", "-f", service)
            await asyncio.sleep(1.0)  # writing while it is gone
        finally:
            await asyncio.to_thread(
                run.cluster.compose, "up", "-d", "--no-deps", "--no-build", service
            )
            run.unreachable.discard(follower)
            end()
        seen["new_container"] = run.cluster.container(follower)

    run = run_fault(compose_cluster, tmp_path, "recreate-follower", recreate_follower)
    follower = seen["follower"]
    assert isinstance(follower, int)
    assert seen["new_container"] != seen["old_container"]
    assert f"created log for {run.tp}" not in compose_cluster.logs(follower)
    stopped = seen["stopped_log"]
    assert isinstance(stopped, list) and stopped, "nothing was written before the stop"
    final = run.history.final_logs[(run.topic, 0, follower)]
    hw = run.history.final_hw[(run.topic, 0)]
    committed = [entry for entry in stopped if entry[0] < hw]
    assert final[: len(committed)] == committed
