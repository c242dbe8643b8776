"""The topic deletion manager on its own, on a hand-made term: queueing from
``/admin/delete_topics``, StopReplica(delete) to every replica, completion on the answers,
waiting for dead replicas."""

from __future__ import annotations

import dataclasses

from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.partition_state_machine import PartitionState, PartitionStateMachine
from kafkasim.controller.topic_deletion import TopicDeletionManager
from kafkasim.proto import kafkasim_pb2 as pb

from .harness import QUIET_CONFIG, run
from .term_bench import TermBench, term_bench

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


async def _online_topic(bench: TermBench) -> tuple[PartitionStateMachine, TopicDeletionManager]:
    psm = PartitionStateMachine(bench.term)
    psm.add_new(bench.term.ctx.partitions_of("t"))
    batch = RequestBatch()
    await psm.initialize(bench.term.ctx.partitions_of("t"), batch)
    bench.term.send(batch)
    await bench.sent()
    bench.transport.clear()
    await bench.zk.create(zk_data.delete_topic_path("t"))
    return psm, TopicDeletionManager(bench.term, psm)


async def _answer_stop_replicas(bench: TermBench, deletion: TopicDeletionManager) -> None:
    await bench.sent()
    answers, bench.stop_replica_answers[:] = list(bench.stop_replica_answers), []
    for broker_id, request, response in answers:
        assert isinstance(request, pb.StopReplicaRequest)
        assert isinstance(response, pb.StopReplicaResponse)
        await deletion.on_stop_replica_response(broker_id, request, response)


def test_deletion_stops_every_replica_then_removes_the_znodes() -> None:
    async def scenario() -> None:
        bench = await term_bench([1, 2], {"t": {0: [1, 2], 1: [2, 1]}})
        psm, deletion = await _online_topic(bench)
        await deletion.process_deletion_requests()
        assert psm.state(T0) is PartitionState.NON_EXISTENT
        transport = await bench.sent()
        for b in (1, 2):
            [stop] = transport.stop_replica(b)
            assert {(p.partition, p.delete_partition) for p in stop.partitions} == {
                (0, True),
                (1, True),
            }
            assert any(list(u.deleted_topics) == ["t"] for u in transport.update_metadata(b))
        assert "t" in bench.term.ctx.assignments  # not before the replicas answered
        await _answer_stop_replicas(bench, deletion)
        assert "t" not in bench.term.ctx.assignments
        for path in (
            zk_data.topic_path("t"),
            zk_data.partitions_path("t"),
            zk_data.delete_topic_path("t"),
        ):
            assert await bench.zk.exists(path) is None
        await bench.close()

    run(scenario)


def test_deletion_waits_for_a_dead_replica_and_resumes_when_it_returns() -> None:
    async def scenario() -> None:
        bench = await term_bench([1, 2], {"t": {0: [1, 2]}})
        _, deletion = await _online_topic(bench)
        ctx = bench.term.ctx
        info = ctx.live_brokers.pop(2)
        await deletion.process_deletion_requests()
        assert ctx.topics_to_delete == {"t"} and "t" not in ctx.deletion_pending
        assert not (await bench.sent()).stop_replica()
        ctx.live_brokers[2] = info
        await deletion.resume({2})
        assert {b for b in (1, 2) if (await bench.sent()).stop_replica(b)} == {1, 2}
        await _answer_stop_replicas(bench, deletion)
        assert "t" not in ctx.assignments
        await bench.close()

    run(scenario)


def test_a_failed_replica_deletion_is_asked_again_when_its_broker_restarts() -> None:
    async def scenario() -> None:
        bench = await term_bench([1], {"t": {0: [1]}})
        _, deletion = await _online_topic(bench)
        await deletion.process_deletion_requests()
        await bench.sent()
        [(broker_id, request, _)] = bench.stop_replica_answers
        bench.stop_replica_answers.clear()
        assert isinstance(request, pb.StopReplicaRequest)
        failed = pb.StopReplicaResponse(error_code=56)  # KAFKA_STORAGE_ERROR
        await deletion.on_stop_replica_response(broker_id, request, failed)
        assert bench.term.ctx.deletion_pending["t"] == {(T0, 1)}
        bench.transport.clear()
        await deletion.resume({1})
        assert (await bench.sent()).stop_replica(1)
        await _answer_stop_replicas(bench, deletion)
        assert "t" not in bench.term.ctx.assignments
        await bench.close()

    run(scenario)


def test_requests_for_unknown_topics_or_with_deletion_off_are_removed() -> None:
    async def scenario() -> None:
        config = dataclasses.replace(QUIET_CONFIG, delete_topic_enable=False)
        bench = await term_bench([1], {"t": {0: [1]}}, config=config)
        _, deletion = await _online_topic(bench)
        await deletion.process_deletion_requests()
        assert await bench.zk.exists(zk_data.delete_topic_path("t")) is None
        assert "t" in bench.term.ctx.assignments and not bench.term.ctx.topics_to_delete
        await bench.close()
        bench = await term_bench([1])
        deletion = TopicDeletionManager(bench.term, PartitionStateMachine(bench.term))
        await bench.zk.create(zk_data.delete_topic_path("ghost"))
        await deletion.process_deletion_requests()
        assert await bench.zk.exists(zk_data.delete_topic_path("ghost")) is None
        await bench.close()

    run(scenario)
