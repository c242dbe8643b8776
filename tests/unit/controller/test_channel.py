"""The controller's channel: per-broker order, retries until answered or the broker is
removed, and Kafka-style batching (one request of each kind per broker, in Kafka's order)."""

from __future__ import annotations

import asyncio

from google.protobuf.message import Message

from kafkasim.common.types import TopicPartition
from kafkasim.controller.channel import ControllerChannel, RequestBatch, partition_state
from kafkasim.controller.zk_data import BrokerInfo, LeaderAndIsr
from kafkasim.proto import METHOD_LEADER_AND_ISR, METHOD_STOP_REPLICA, METHOD_UPDATE_METADATA
from kafkasim.proto import kafkasim_pb2 as pb

from .harness import RecordingTransport, address, run

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


def broker(broker_id: int, epoch: int = 100) -> BrokerInfo:
    return BrokerInfo(broker_id, f"broker{broker_id}", 9092, epoch=epoch)


def test_requests_to_a_broker_arrive_in_order_despite_failures() -> None:
    """A failed call is retried before the next request to that broker leaves."""

    async def scenario() -> list[int]:
        transport = RecordingTransport()
        transport.fail_next[address(1)] = 3
        channel = ControllerChannel(transport, backoff_initial_s=0.1, backoff_max_s=0.4)
        channel.add_broker(broker(1))
        for epoch in range(5):
            channel.enqueue(
                1, METHOD_UPDATE_METADATA, pb.UpdateMetadataRequest(controller_epoch=epoch)
            )
        await channel.drain()
        await channel.close()
        assert len(transport.attempts) == 8
        return [r.controller_epoch for r in transport.update_metadata(1)]

    assert run(scenario) == [0, 1, 2, 3, 4]


def test_backoff_is_bounded() -> None:
    async def scenario() -> float:
        transport = RecordingTransport()
        transport.fail_next[address(1)] = 10
        channel = ControllerChannel(transport, backoff_initial_s=0.1, backoff_max_s=1.0)
        channel.add_broker(broker(1))
        loop = asyncio.get_running_loop()
        start = loop.time()
        channel.enqueue(1, METHOD_UPDATE_METADATA, pb.UpdateMetadataRequest())
        await channel.drain()
        await channel.close()
        return loop.time() - start

    # 0.1 + 0.2 + 0.4 + 0.8 + 1.0 * 6 = 7.5 s of backoff, never more than 1 s at a time
    assert run(scenario) == 7.5


def test_removed_broker_stops_being_retried() -> None:
    async def scenario() -> None:
        transport = RecordingTransport()
        transport.down.add(address(1))
        channel = ControllerChannel(transport, backoff_initial_s=0.1, backoff_max_s=0.5)
        channel.add_broker(broker(1))
        channel.add_broker(broker(2))
        channel.enqueue(1, METHOD_UPDATE_METADATA, pb.UpdateMetadataRequest())
        channel.enqueue(1, METHOD_UPDATE_METADATA, pb.UpdateMetadataRequest())
        channel.enqueue(2, METHOD_UPDATE_METADATA, pb.UpdateMetadataRequest())
        await asyncio.sleep(3)
        assert transport.update_metadata(2) and not transport.update_metadata(1)
        channel.remove_broker(1)
        attempts = len(transport.attempts)
        await asyncio.sleep(10)
        assert len(transport.attempts) == attempts
        assert not channel.enqueue(1, METHOD_UPDATE_METADATA, pb.UpdateMetadataRequest())
        assert sorted(channel.brokers) == [2]
        await channel.close()

    run(scenario)


def test_batch_sends_one_request_of_each_kind_per_broker_in_kafkas_order() -> None:
    async def scenario() -> None:
        transport = RecordingTransport()
        channel = ControllerChannel(transport)
        for b in (1, 2, 3):
            channel.add_broker(broker(b, epoch=10 * b))
        s0 = LeaderAndIsr(1, 4, (1, 2), 7, 3)
        s1 = LeaderAndIsr(2, 1, (2,), 7, 9)
        batch = RequestBatch()
        batch.add_leader_and_isr([1, 2, 9], T0, s0, [1, 2], is_new=True)
        batch.add_leader_and_isr([2], T1, s1, [2, 1], offline_replicas=[1])
        batch.add_leader_and_isr([2], T0, s0.with_(leader_epoch=5), [1, 2])  # newer state wins
        batch.add_update_metadata([1, 2, 3], [partition_state(T0, s0, [1, 2])])
        batch.add_update_metadata([3], [partition_state(T1, s1, [2, 1])])
        batch.add_deleted_topics([3], ["gone"])
        batch.add_stop_replica([3], TopicPartition("gone", 0), delete=True, leader_epoch=2)
        responses: list[tuple[int, Message]] = []
        batch.send(
            channel,
            controller_id=5,
            controller_epoch=7,
            cluster_id="c",
            on_stop_replica_response=lambda b, req, resp: responses.append((b, resp)),
        )
        assert batch.is_empty()
        await channel.drain()
        await channel.close()

        order = [(c.target, c.method) for c in transport.calls if c.target == address(3)]
        assert [m for _, m in order] == [METHOD_UPDATE_METADATA, METHOD_STOP_REPLICA]
        assert [c.method for c in transport.calls if c.target == address(2)] == [
            METHOD_LEADER_AND_ISR,
            METHOD_UPDATE_METADATA,
        ]
        (lai_2,) = transport.leader_and_isr(2)
        assert (lai_2.controller_id, lai_2.controller_epoch, lai_2.broker_epoch) == (5, 7, 20)
        states = {(s.topic, s.partition): s for s in lai_2.partition_states}
        assert states[("t", 0)].leader_epoch == 5 and states[("t", 0)].is_new  # is_new sticks
        assert list(states[("t", 1)].offline_replicas) == [1]
        assert sorted(e.node_id for e in lai_2.live_leaders) == [1, 2]
        for b in (1, 2, 3):
            (um,) = transport.update_metadata(b)
            assert um.broker_epoch == 10 * b and um.cluster_id == "c"
            assert [(s.topic, s.partition) for s in um.partition_states] == [("t", 0), ("t", 1)]
            assert list(um.deleted_topics) == ["gone"]
            assert sorted(e.node_id for e in um.live_brokers) == [1, 2, 3]
        (stop,) = transport.stop_replica(3)
        assert [
            (p.topic, p.partition, p.delete_partition, p.leader_epoch) for p in stop.partitions
        ] == [("gone", 0, True, 2)]
        assert [b for b, _ in responses] == [3]

    run(scenario)


def test_stop_replica_without_deletion_has_no_callback() -> None:
    async def scenario() -> None:
        transport = RecordingTransport()
        channel = ControllerChannel(transport)
        channel.add_broker(broker(1))
        batch = RequestBatch()
        batch.add_stop_replica([1], T0, delete=False)
        called: list[int] = []
        batch.send(
            channel,
            controller_id=1,
            controller_epoch=1,
            on_stop_replica_response=lambda b, req, resp: called.append(b),
        )
        await channel.drain()
        await channel.close()
        assert len(transport.stop_replica(1)) == 1 and called == []

    run(scenario)
