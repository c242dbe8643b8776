"""The cluster core on the virtual clock: replication, ISR, HW, acks, leader epochs.

Each test is one scenario from issue 3; they name the invariant they check (ARCHITECTURE.md).
"""

from __future__ import annotations

from pathlib import Path

from kafkasim.common.types import TopicPartition
from kafkasim.node.rules import ReplicationRules
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import (
    create,
    leader_of,
    leo_of,
    log_values,
    partition_on,
    produce_all,
    simulate,
)

TP = TopicPartition("events", 0)


def test_leader_crash_elects_an_isr_member_and_loses_no_acknowledged_record(
    tmp_path: Path,
) -> None:
    """Invariant 5: acks=all + min ISR 2 + clean election: nothing acknowledged is lost."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events", min_insync_replicas="2")
        acked = await produce_all(client, TP, [b"before-%d" % i for i in range(20)])
        old_leader = leader_of(cluster, TP)
        old_epoch = partition_on(cluster, old_leader, TP).leader_epoch
        isr_before = set(partition_on(cluster, old_leader, TP).isr)
        await cluster.crash(old_leader)
        await cluster.wait_for(
            lambda: leader_of(cluster, TP) not in (-1, old_leader), what="a new leader"
        )
        new_leader = leader_of(cluster, TP)
        assert new_leader in isr_before
        assert partition_on(cluster, new_leader, TP).leader_epoch > old_epoch
        acked.update(await produce_all(client, TP, [b"after-%d" % i for i in range(20)]))
        assert len(acked) == 40
        read = {r.value: r.offset for r in await client.read_all(TP)}
        assert read == acked
        # The crashed broker comes back, truncates to the epoch boundary and converges.
        await cluster.start_broker(old_leader)
        await cluster.wait_for(
            lambda: leo_of(cluster, old_leader, TP) == leo_of(cluster, new_leader, TP),
            what="the old leader to catch up",
        )
        hw = partition_on(cluster, new_leader, TP).high_watermark
        assert log_values(cluster, old_leader, TP, hw) == log_values(cluster, new_leader, TP, hw)

    simulate(tmp_path, scenario)


def _kip101_hw_lag_then_failover(tmp_path: Path, *, bug: bool) -> tuple[int, int]:
    """KIP-101 case 1: a follower re-enters truncation (as on any LeaderAndIsr) while its HW
    still lags the leader's by a fetch round trip, and the leader dies before the follower's
    next fetch. Returns (acknowledged, readable after failover)."""

    async def scenario(cluster: SimCluster) -> tuple[int, int]:
        client = await create(cluster, "events", rf=2)
        acked = await produce_all(client, TP, [b"m%d" % i for i in range(10)])
        leader = leader_of(cluster, TP)
        follower = next(b for b in cluster.brokers if b != leader)
        replica = partition_on(cluster, follower, TP)
        # The follower has every record, but learns the HW one fetch later.
        assert replica.log_end_offset == 10
        replica.log.update_high_watermark(6)
        cluster.brokers[follower].fetchers.add(replica, leader, replica.leader_epoch)
        await cluster.sleep(0.0001)  # the truncation step runs; no fetch completes yet
        await cluster.crash(leader)
        await cluster.wait_for(lambda: leader_of(cluster, TP) == follower, what="failover")
        read = {r.value: r.offset for r in await client.read_all(TP)}
        return len(acked), sum(1 for v, o in acked.items() if read.get(v) == o)

    rules = ReplicationRules(truncate_to_high_watermark=bug)
    return simulate(tmp_path, scenario, brokers=2, rules=rules)  # type: ignore[no-any-return]


REPLICATION_LISTENER = {
    "listeners": "PLAINTEXT://broker-{broker_id}:9092,REPLICATION://broker-{broker_id}:9093",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
    "listener.wire.protocol.map": "REPLICATION:replication",
    "replica.fetch.listener.name": "REPLICATION",
}


def test_followers_on_a_replication_listener_fail_over_as_over_the_inter_broker_one(
    tmp_path: Path,
) -> None:
    """``replica.fetch.listener.name`` in the simulation: SimNetwork carries the replication
    listener's stream (real brokers: node.rpc_framed), the followers' fetch streams go to each
    leader's REPLICATION address, and invariant 5 holds across a leader crash as before."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events", min_insync_replicas="2")
        acked = await produce_all(client, TP, [b"before-%d" % i for i in range(20)])
        old_leader = leader_of(cluster, TP)
        for broker_id, broker in cluster.brokers.items():
            assert "REPLICATION" in broker.servers
            if broker_id != old_leader:
                fetcher = broker.fetchers.fetchers[old_leader]
                assert fetcher._stream_target == f"broker-{old_leader}:9093"
        await cluster.crash(old_leader)
        await cluster.wait_for(
            lambda: leader_of(cluster, TP) not in (-1, old_leader), what="a new leader"
        )
        acked.update(await produce_all(client, TP, [b"after-%d" % i for i in range(20)]))
        read = {r.value: r.offset for r in await client.read_all(TP)}
        assert read == acked

    simulate(tmp_path, scenario, **REPLICATION_LISTENER)


def test_kip101_case1_hw_truncation_then_failover_loses_nothing(tmp_path: Path) -> None:
    acked, readable = _kip101_hw_lag_then_failover(tmp_path, bug=False)
    assert (acked, readable) == (10, 10)


def test_kip101_case1_is_caught_when_followers_truncate_to_their_hw(tmp_path: Path) -> None:
    """The same scenario with the pre-KIP-101 rule switched on loses acknowledged records:
    proof that the scenario can see the bug it guards against."""
    acked, readable = _kip101_hw_lag_then_failover(tmp_path, bug=True)
    assert acked == 10
    assert readable == 6


def _kip101_divergence_after_double_crash(tmp_path: Path, *, bug: bool) -> bool:
    """KIP-101 case 2: both replicas lose power; the one that lost more comes back first,
    becomes leader and writes at offsets the other still holds. Returns whether the two logs
    agree up to the HW after the other returns."""

    async def scenario(cluster: SimCluster) -> bool:
        client = await create(cluster, "events", rf=2)
        await produce_all(client, TP, [b"old-%d" % i for i in range(5)])
        leader = leader_of(cluster, TP)
        follower = next(b for b in cluster.brokers if b != leader)
        partition_on(cluster, follower, TP).log.flush()  # the follower keeps only old-0..4
        await produce_all(client, TP, [b"lost-%d" % i for i in range(5)])
        partition_on(cluster, leader, TP).log.flush()  # the leader keeps all ten
        await cluster.sleep(6)  # high watermarks checkpointed
        for broker_id in (leader, follower):
            broker = cluster.brokers.pop(broker_id)
            cluster.network.crash(f"broker-{broker_id}")
            zk = broker.zk
            zk.disconnect()  # type: ignore[attr-defined]
            await broker.crash(drop_unflushed=True)
        await cluster.sleep(10)  # both sessions expire
        await cluster.start_broker(follower)
        await cluster.wait_for(
            lambda: leader_of(cluster, TP) == follower, timeout_s=120, what="the follower to lead"
        )
        await produce_all(client, TP, [b"new-%d" % i for i in range(5)], acks=1)
        await cluster.start_broker(leader)
        await cluster.wait_for(
            lambda: (
                leo_of(cluster, leader, TP) == leo_of(cluster, follower, TP)
                and partition_on(cluster, follower, TP).high_watermark
                == leo_of(cluster, follower, TP)
            ),
            timeout_s=120,
            what="convergence",
        )
        hw = partition_on(cluster, follower, TP).high_watermark
        return log_values(cluster, leader, TP, hw) == log_values(cluster, follower, TP, hw)

    rules = ReplicationRules(truncate_to_high_watermark=bug)
    return simulate(tmp_path, scenario, brokers=2, rules=rules)  # type: ignore[no-any-return]


def test_kip101_case2_replicas_do_not_diverge_after_repeated_hard_crashes(
    tmp_path: Path,
) -> None:
    assert _kip101_divergence_after_double_crash(tmp_path, bug=False)


def test_kip101_case2_divergence_is_caught_with_hw_truncation(tmp_path: Path) -> None:
    assert not _kip101_divergence_after_double_crash(tmp_path, bug=True)


def test_acks_1_loses_exactly_the_records_the_leader_had_not_replicated(tmp_path: Path) -> None:
    """acks=1 answers after the leader's append: if the leader dies before its followers
    copy them, those acknowledged records are gone — and only those."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        safe = await produce_all(client, TP, [b"replicated-%d" % i for i in range(10)])
        leader = leader_of(cluster, TP)
        followers = [b for b in cluster.brokers if b != leader]
        # Cut the leader off from its followers (ZooKeeper and the client still reach it).
        cluster.network.partition(
            [{f"broker-{leader}", "client"}, {f"broker-{f}" for f in followers}]
        )
        unreplicated = await produce_all(
            client, TP, [b"only-on-leader-%d" % i for i in range(5)], acks=1
        )
        assert len(unreplicated) == 5
        await cluster.crash(leader)
        cluster.network.heal_all()
        await cluster.wait_for(lambda: leader_of(cluster, TP) in followers, what="failover")
        read = {r.value: r.offset for r in await client.read_all(TP)}
        assert read == safe, "exactly the acks=1 records not yet replicated are lost"
        assert not set(unreplicated) & set(read)

    simulate(tmp_path, scenario)


def test_min_insync_replicas_rejects_acks_all_with_one_live_replica(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events", min_insync_replicas="2")
        assert (await client.produce(TP, [b"ok"], acks=-1)).ok
        leader = leader_of(cluster, TP)
        for broker_id in [b for b in list(cluster.brokers) if b != leader]:
            await cluster.crash(broker_id)
        await cluster.wait_for(
            lambda: len(partition_on(cluster, leader, TP).isr) == 1,
            what="the ISR to shrink to the leader",
        )
        rejected = await client.produce(TP, [b"refused"], acks=-1, retry=False)
        assert rejected.error_code == 19  # NOT_ENOUGH_REPLICAS
        assert partition_on(cluster, leader, TP).log_end_offset == 1  # nothing appended
        assert (await client.produce(TP, [b"acks-1-still-works"], acks=1)).ok

    simulate(tmp_path, scenario)


def test_isr_shrinks_when_a_follower_stalls_and_expands_when_it_catches_up(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        await produce_all(client, TP, [b"a", b"b"])
        leader = leader_of(cluster, TP)
        stalled = next(b for b in cluster.brokers if b != leader)
        cluster.network.isolate(f"broker-{stalled}")  # its ZooKeeper session stays alive
        start = cluster.loop.time()
        await produce_all(client, TP, [b"c"], acks=1)
        await cluster.wait_for(
            lambda: stalled not in partition_on(cluster, leader, TP).isr, what="the ISR to shrink"
        )
        # Not before replica.lag.time.max.ms (10 s in the test cluster).
        assert cluster.loop.time() - start >= 10
        assert cluster.brokers[leader].replica_manager.isr_shrinks == 1
        cluster.network.heal(f"broker-{stalled}")
        await cluster.wait_for(
            lambda: stalled in partition_on(cluster, leader, TP).isr, what="the ISR to expand"
        )
        assert cluster.brokers[leader].replica_manager.isr_expands == 1
        assert leo_of(cluster, stalled, TP) == leo_of(cluster, leader, TP) == 3

    simulate(tmp_path, scenario)


def test_consumers_never_see_offsets_at_or_above_the_high_watermark(tmp_path: Path) -> None:
    """Invariant 3: with the followers cut off, the leader's log grows but the HW does not,
    and a consumer reads only below the HW."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        await produce_all(client, TP, [b"x%d" % i for i in range(3)])
        leader = leader_of(cluster, TP)
        followers = [b for b in cluster.brokers if b != leader]
        cluster.network.partition(
            [{f"broker-{leader}", "client"}, {f"broker-{f}" for f in followers}]
        )
        await produce_all(client, TP, [b"y%d" % i for i in range(4)], acks=1)
        partition = partition_on(cluster, leader, TP)
        assert (partition.high_watermark, partition.log_end_offset) == (3, 7)
        result = await client.fetch(TP, 0)
        assert [r.offset for r in result.records] == [0, 1, 2]
        assert all(r.offset < result.high_watermark for r in result.records)
        assert (await client.fetch(TP, 3)).records == []
        cluster.network.heal_all()
        await cluster.wait_for(lambda: partition.high_watermark == 7, what="the HW to move")
        assert [r.offset for r in await client.read_all(TP)] == list(range(7))

    simulate(tmp_path, scenario)


def test_a_stale_controller_is_ignored(tmp_path: Path) -> None:
    """A LeaderAndIsr from an older controller epoch changes nothing on the broker."""
    from kafkasim import proto
    from kafkasim.proto import kafkasim_pb2 as pb
    from kafkasim.sim.cluster import broker_address
    from kafkasim.sim.network import SimTransport

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, "events")
        leader = leader_of(cluster, TP)
        follower = next(b for b in cluster.brokers if b != leader)
        current = cluster.brokers[follower].replica_manager.controller_epoch
        assert current >= 1
        zombie = SimTransport(cluster.network, "zombie-controller")
        # A deposed controller knows the broker's epoch: the controller epoch refuses it.
        request = pb.LeaderAndIsrRequest(
            controller_id=99,
            controller_epoch=current - 1,
            broker_epoch=cluster.brokers[follower].broker_epoch,
        )
        request.partition_states.add(
            topic="events",
            partition=0,
            controller_epoch=current - 1,
            leader=follower,
            leader_epoch=100,
            isr=[follower],
            replicas=list(cluster.brokers),
        )
        response = await zombie.call(
            broker_address(follower), proto.METHOD_LEADER_AND_ISR, request, timeout_s=5
        )
        assert isinstance(response, pb.LeaderAndIsrResponse)
        assert response.error_code == 11  # STALE_CONTROLLER_EPOCH
        assert not partition_on(cluster, follower, TP).is_leader
        assert leader_of(cluster, TP) == leader
        await zombie.close()

    simulate(tmp_path, scenario)


def test_produce_stream_answers_in_request_order(tmp_path: Path) -> None:
    """A producer's pipelined connection: several requests in flight, answered one by one in
    order with their correlation ids, appended in order."""
    from kafkasim import proto
    from kafkasim.proto import kafkasim_pb2 as pb
    from kafkasim.storage.records.batch import encode_batch

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        address = await client.leader_address(TP)
        stream = client.transport.open_stream(address, proto.METHOD_PRODUCE_STREAM)
        try:
            for i in range(10):
                request = pb.ProduceRequest(acks=-1, timeout_ms=10_000, correlation_id=100 + i)
                request.partitions.add(
                    topic="events", partition=0, records=encode_batch([(0, None, b"p%d" % i)])
                )
                await stream.send(request)
            answers = []
            for _ in range(10):
                response = await stream.recv(30)
                assert isinstance(response, pb.ProduceResponse)
                answers.append(
                    (
                        response.correlation_id,
                        response.partitions[0].base_offset,
                        response.partitions[0].error_code,
                    )
                )
        finally:
            await stream.close()
        assert answers == [(100 + i, i, 0) for i in range(10)]
        assert [r.value for r in await client.read_all(TP)] == [b"p%d" % i for i in range(10)]

    simulate(tmp_path, scenario)


def test_an_idempotent_duplicate_with_acks_all_waits_for_replication(tmp_path: Path) -> None:
    """A retry of a batch the leader has but has not replicated is a duplicate: it must not
    be acknowledged (acks=all) before the HW passes it, or an acknowledged record could be lost."""
    from kafkasim.storage.records.batch import RecordBatchBuilder

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        leader = leader_of(cluster, TP)
        followers = [b for b in cluster.brokers if b != leader]
        builder = RecordBatchBuilder(producer_id=77, producer_epoch=0, base_sequence=0)
        builder.append(0, None, b"once")
        batch = builder.build()
        cluster.network.partition(
            [{f"broker-{leader}", "client"}, {f"broker-{f}" for f in followers}]
        )
        from kafkasim import proto
        from kafkasim.proto import kafkasim_pb2 as pb

        request = pb.ProduceRequest(acks=-1, timeout_ms=1000)
        request.partitions.add(topic="events", partition=0, records=batch)
        address = await client.leader_address(TP)
        for _attempt in range(2):  # the original, then its retry (a duplicate)
            response = await client.transport.call(
                address, proto.METHOD_PRODUCE, request, timeout_s=10
            )
            assert isinstance(response, pb.ProduceResponse)
            assert response.partitions[0].error_code == 7  # REQUEST_TIMED_OUT, not success
        assert partition_on(cluster, leader, TP).log_end_offset == 1  # appended once
        cluster.network.heal_all()
        response = await client.transport.call(address, proto.METHOD_PRODUCE, request, timeout_s=30)
        assert isinstance(response, pb.ProduceResponse)
        assert (response.partitions[0].error_code, response.partitions[0].base_offset) == (0, 0)

    simulate(tmp_path, scenario)
