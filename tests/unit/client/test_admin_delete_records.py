"""The admin client's DeleteRecords routing, against a scripted transport.

Why: the call must reach each partition's *current* leader; when a leader answers
NOT_LEADER_OR_FOLLOWER (leadership moved after the client read the metadata) the client
refreshes the metadata and sends that partition again, and only that partition.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.client.admin import AdminClient
from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import NotLeaderOrFollowerError, OffsetOutOfRangeError
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
NOT_LEADER = NotLeaderOrFollowerError.code


class ScriptedTransport:
    """Brokers 1 and 2. Partition 0 is led by 1 until broker 1 has refused it once, then by
    2 (in the metadata too); partition 1 is led by 2 throughout."""

    def __init__(self, *, moves: bool = True, out_of_range: bool = False) -> None:
        self.moved = not moves
        self.out_of_range = out_of_range
        self.deletes: list[tuple[str, list[tuple[str, int, int]]]] = []

    async def call(self, target: str, method: str, request: Message, *, timeout_s: float) -> Any:
        if method == proto.METHOD_METADATA:
            response = pb.MetadataResponse(controller_id=1)
            response.brokers.add(node_id=1, host="b1", port=1)
            response.brokers.add(node_id=2, host="b2", port=2)
            topic = response.topics.add(name="t")
            topic.partitions.add(partition=0, leader=2 if self.moved else 1, replicas=[1, 2])
            topic.partitions.add(partition=1, leader=2, replicas=[1, 2])
            return response
        assert method == proto.METHOD_DELETE_RECORDS
        assert isinstance(request, pb.DeleteRecordsRequest)
        self.deletes.append(
            (target, [(p.topic, p.partition, p.offset) for p in request.partitions])
        )
        answer = pb.DeleteRecordsResponse()
        for p in request.partitions:
            result = answer.partitions.add(topic=p.topic, partition=p.partition)
            if target == "b1:1":
                self.moved = True
                result.error_code, result.low_watermark = NOT_LEADER, -1
            elif self.out_of_range:
                result.error_code = OffsetOutOfRangeError.code
                result.error_message = "larger than the high watermark 3"
            else:
                result.low_watermark = p.offset
        return answer

    async def close(self) -> None:
        pass


def admin(transport: ScriptedTransport) -> AdminClient:
    return AdminClient(["b1:1"], transport=transport, clock=ManualClock())  # type: ignore[arg-type]


def test_not_leader_refreshes_metadata_and_resends_only_that_partition() -> None:
    transport = ScriptedTransport()
    lows = asyncio.run(admin(transport).delete_records({TP0: 5, TP1: 7}))
    assert lows == {TP0: 5, TP1: 7}
    assert transport.deletes == [
        ("b1:1", [("t", 0, 5)]),
        ("b2:2", [("t", 1, 7)]),
        ("b2:2", [("t", 0, 5)]),
    ]


def test_a_partition_error_raises_its_class_naming_the_partition() -> None:
    transport = ScriptedTransport(moves=False, out_of_range=True)
    with pytest.raises(OffsetOutOfRangeError, match=r"partition t-1: larger than"):
        asyncio.run(admin(transport).delete_records({TP1: 9}))
