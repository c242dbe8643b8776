"""The consumer's OffsetFetch (``GroupMembership.committed``) against a scripted coordinator:
``require_stable`` is sent as the settings say (read_committed, KIP-447); UNSTABLE_OFFSET_COMMIT
is retried until the offsets are stable, or raised at once when the caller will ask again
(the positions of ``poll``)."""

from __future__ import annotations

import asyncio
from collections import deque

import pytest
from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.client.consumer_group import GroupMembership, GroupSettings
from kafkasim.client.network import NetworkClient
from kafkasim.common.clock import SystemClock
from kafkasim.common.errors import UnstableOffsetCommitError, error_for_name
from kafkasim.common.rpc import BidiStream
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

TP = TopicPartition("orders", 0)
UNSTABLE = error_for_name("UNSTABLE_OFFSET_COMMIT").code


class Coordinator:
    """FindCoordinator names itself; OffsetFetch answers ``answers`` in turn (an error code,
    or the offset once stable), recording every request."""

    def __init__(self, *answers: int) -> None:
        self.answers = deque(answers)
        self.fetches: list[pb.OffsetFetchRequest] = []

    async def call(
        self, target: str, method: str, request: Message, *, timeout_s: float | None = None
    ) -> Message:
        if method == proto.METHOD_FIND_COORDINATOR:
            return pb.FindCoordinatorResponse(node_id=1, host="b1", port=9092)
        assert method == proto.METHOD_OFFSET_FETCH and isinstance(request, pb.OffsetFetchRequest)
        self.fetches.append(request)
        unstable = self.answers.popleft() == UNSTABLE
        part = pb.OffsetFetchPartition(
            topic=TP.topic,
            partition=TP.partition,
            committed_offset=-1 if unstable else 7,
            error_code=UNSTABLE if unstable else 0,
        )
        return pb.OffsetFetchResponse(partitions=[part])

    def open_stream(self, target: str, method: str) -> BidiStream:
        raise NotImplementedError

    async def close(self) -> None:
        return None


def membership(coordinator: Coordinator, *, require_stable: bool) -> GroupMembership:
    client = NetworkClient(coordinator, ["b1:9092"], SystemClock(), retry_backoff_ms=1)
    settings = GroupSettings(
        group_id="g",
        client_id="c",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
        retry_backoff_ms=1,
        request_timeout_ms=1_000,
        assignors=(),
        require_stable=require_stable,
    )
    return GroupMembership(settings, client, SystemClock())


@pytest.mark.parametrize("require_stable", [True, False])
def test_require_stable_is_sent_as_the_settings_say(require_stable: bool) -> None:
    coordinator = Coordinator(0)
    group = membership(coordinator, require_stable=require_stable)
    assert asyncio.run(group.committed([TP])) == {TP: 7}
    [fetch] = coordinator.fetches
    assert fetch.require_stable is require_stable


def test_unstable_offsets_are_retried_until_stable() -> None:
    coordinator = Coordinator(UNSTABLE, UNSTABLE, 0)
    group = membership(coordinator, require_stable=True)
    assert asyncio.run(group.committed([TP])) == {TP: 7}
    assert len(coordinator.fetches) == 3


def test_unstable_offsets_are_raised_at_once_when_not_waited_for() -> None:
    coordinator = Coordinator(UNSTABLE, 0)
    group = membership(coordinator, require_stable=True)
    with pytest.raises(UnstableOffsetCommitError, match="orders-0"):
        asyncio.run(group.committed([TP], wait_for_stable=False))
    assert len(coordinator.fetches) == 1
