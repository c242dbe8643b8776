"""The one metadata view of the clients: leader lookups, KIP-320's refusal to go back to an
older leader epoch, forgetting a leader until the next refresh, and the request builders."""

from __future__ import annotations

from kafkasim.client.metadata import ClusterMetadata
from kafkasim.client.requests import fetch_request, list_offsets_request, metadata_request
from kafkasim.common.sentinels import EARLIEST_TIMESTAMP
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

TP = TopicPartition("events", 0)


def metadata_response(
    leader: int, epoch: int, *, controller: int = 1, partitions: int = 1
) -> pb.MetadataResponse:
    response = pb.MetadataResponse(controller_id=controller)
    for node in (1, 2, 3):
        response.brokers.add(node_id=node, host=f"b{node}", port=9092)
    topic = response.topics.add(name="events")
    for p in range(partitions):
        topic.partitions.add(partition=p, leader=leader, leader_epoch=epoch)
    return response


def test_the_view_answers_leader_epoch_and_controller_lookups() -> None:
    view = ClusterMetadata()
    assert view.leader(TP) == -1 and view.leader_address(TP) is None
    assert view.leader_epoch(TP) == -1 and not view.has_partition(TP)
    view.update(metadata_response(leader=2, epoch=5, controller=3, partitions=2), now_ms=10)
    assert view.leader(TP) == 2
    assert view.leader_address(TP) == "b2:9092"
    assert view.leader_epoch(TP) == 5
    assert view.controller_address() == "b3:9092"
    assert view.has_partition(TopicPartition("events", 1))
    assert not view.has_partition(TopicPartition("events", 2))


def test_a_stale_brokers_older_epoch_does_not_move_the_leader_back() -> None:
    view = ClusterMetadata()
    view.update(metadata_response(leader=2, epoch=5), now_ms=10)
    view.update(metadata_response(leader=1, epoch=4), now_ms=20)  # a deposed leader's view
    assert (view.leader(TP), view.leader_epoch(TP)) == (2, 5)
    view.update(metadata_response(leader=3, epoch=6), now_ms=30)
    assert (view.leader(TP), view.leader_epoch(TP)) == (3, 6)


def test_a_forgotten_leader_is_unknown_until_a_refresh_gives_it_back() -> None:
    view = ClusterMetadata()
    view.update(metadata_response(leader=2, epoch=5), now_ms=10)
    view.forget_leader(TP)
    assert view.leader(TP) == -1 and view.leader_address(TP) is None
    assert view.leader_epoch(TP) == 5  # the epoch stays: an older answer is still refused
    assert view.topics["events"].available == []
    view.update(metadata_response(leader=1, epoch=4), now_ms=20)
    assert view.leader(TP) == -1
    view.update(metadata_response(leader=2, epoch=5), now_ms=30)
    assert view.leader(TP) == 2 and view.topics["events"].available == [0]


def test_metadata_request_names_topics_or_asks_for_all() -> None:
    every = metadata_request(allow_auto_topic_creation=True)
    assert every.all_topics and not every.allow_auto_topic_creation
    named = metadata_request(["a", "b"], allow_auto_topic_creation=True)
    assert list(named.topics) == ["a", "b"] and not named.all_topics
    assert named.allow_auto_topic_creation


def test_fetch_request_is_a_consumers_fenced_by_known_epochs() -> None:
    other = TopicPartition("events", 1)
    request = fetch_request(
        {TP: 7, other: 9},
        max_wait_ms=50,
        max_bytes=1000,
        partition_max_bytes=100,
        min_bytes=10,
        isolation_level=1,
        leader_epochs={TP: 4},
    )
    assert (request.replica_id, request.max_wait_ms, request.min_bytes) == (-1, 50, 10)
    assert (request.max_bytes, request.isolation_level) == (1000, 1)
    assert [
        (p.partition, p.fetch_offset, p.current_leader_epoch, p.partition_max_bytes)
        for p in request.partitions
    ] == [(0, 7, 4, 100), (1, 9, -1, 100)]


def test_list_offsets_request_carries_timestamps_and_epochs() -> None:
    request = list_offsets_request({TP: EARLIEST_TIMESTAMP}, leader_epochs={TP: 3})
    assert request.replica_id == -1
    [part] = request.partitions
    assert (part.topic, part.partition, part.timestamp, part.current_leader_epoch) == (
        "events",
        0,
        -2,
        3,
    )
