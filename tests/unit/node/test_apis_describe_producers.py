"""The gRPC DescribeProducers servicer (``node.apis_admin.describe_producers``): each
partition's producers from this broker's replica, in protobuf; a partition this broker does
not hold is NOT_LEADER_OR_FOLLOWER (cluster has it) or UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kafkasim.common.errors import NotLeaderOrFollowerError, UnknownTopicOrPartitionError
from kafkasim.common.types import TopicPartition
from kafkasim.node import apis_admin
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.log import AppendOrigin
from tests.txn_records import COMMIT, Producer
from tests.unit.storage.logtools import T0, open_log


def test_describe_producers_answers_from_the_local_replica(tmp_path: Path) -> None:
    log, _ = open_log(tmp_path)
    a, b = Producer(7, epoch=2), Producer(8)
    log.append_as_leader(a.batch(3), leader_epoch=0)  # 0-2, open
    log.append_as_leader(b.batch(), leader_epoch=0)  # 3
    log.append_as_leader(b.marker(COMMIT, 4), leader_epoch=0, origin=AppendOrigin.COORDINATOR)
    here, elsewhere = TopicPartition("topic", 0), TopicPartition("topic", 1)
    broker = SimpleNamespace(
        authorizer=None,
        broker_id=1,
        replica_manager=SimpleNamespace(partitions={here: SimpleNamespace(log=log)}),
        metadata=SimpleNamespace(partitions={here: None, elsewhere: None}),
    )
    request = pb.DescribeProducersRequest(
        partitions=[
            pb.TopicPartitionId(topic="topic", partition=0),
            pb.TopicPartitionId(topic="topic", partition=1),
            pb.TopicPartitionId(topic="nope", partition=0),
        ]
    )
    response = apis_admin.describe_producers(broker, request)  # type: ignore[arg-type]
    ok, not_here, unknown = response.partitions
    assert (ok.topic, ok.partition, ok.error_code) == ("topic", 0, 0)
    assert [
        (
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            p.last_timestamp,
            p.coordinator_epoch,
            p.current_txn_start_offset,
        )
        for p in ok.active_producers
    ] == [(7, 2, 2, T0, -1, 0), (8, 0, 0, T0, 4, -1)]
    assert not_here.error_code == NotLeaderOrFollowerError.code
    assert "holds no replica" in not_here.error_message
    assert unknown.error_code == UnknownTopicOrPartitionError.code
    log.close()
