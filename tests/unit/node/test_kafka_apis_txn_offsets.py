"""TxnOffsetCommit (api key 28, v0-v3) and OffsetFetch's ``require_stable`` (v7+) on the
Kafka front door, without sockets: kio requests answered by a real group coordinator, each
response encoded as its version to prove it is writable. The gRPC translations of the same
requests are checked at the end."""

from __future__ import annotations

from typing import Any

import pytest

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node import apis_group
from kafkasim.node import kafka_apis_group as kg
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.group_types import (
    CommittedOffset,
    OffsetCommitEntry,
    OffsetFetchResult,
    TxnOffsetCommitParams,
)
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import ControlRecordType
from tests.unit.node.test_group_coordinator import GROUP
from tests.unit.node.test_kafka_apis_group import Door, code, commit_errors, commit_topics, run

PID, EPOCH = 77, 0


def txn_fields(version: int, topics: list[dict[str, Any]], **member: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "transactional_id": "tx",
        "group_id": GROUP,
        "producer_id": PID,
        "producer_epoch": EPOCH,
        "topics": topics,
    }
    if version >= 3:
        fields.update({"generation_id": -1, "member_id": "", "group_instance_id": None})
        fields.update(member)
    return fields


async def fetch(door: Door, version: int, stable: bool) -> list[tuple[int, int, int]]:
    asked = {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]}
    fields: dict[str, Any] = {"groups": [asked]} if version >= 8 else dict(asked)
    if version >= 7:
        fields["require_stable"] = stable
    answer = await door.ask(kg.OFFSET_FETCH, version, **fields)
    topics = answer.groups[0].topics if version >= 8 else answer.topics
    return [
        (p.partition_index, p.committed_offset, p.error_code) for t in topics for p in t.partitions
    ]


def complete(door: Door, result: ControlRecordType) -> None:
    tp = TopicPartition(OFFSETS_TOPIC, door.partition)
    door.coordinator.on_txn_markers_written(PID, result, [tp])


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_txn_offset_commit_is_pending_until_the_marker_in_every_version(version: int) -> None:
    async def body() -> None:
        door = Door()
        topics = commit_topics("t", (0, 12)) + commit_topics("ghost", (0, 1))
        answer = await door.ask(kg.TXN_OFFSET_COMMIT, version, **txn_fields(version, topics))
        assert commit_errors(answer) == [
            ("t", 0, 0),
            ("ghost", 0, code("UNKNOWN_TOPIC_OR_PARTITION")),
        ]
        assert await fetch(door, 7, stable=True) == [(0, -1, code("UNSTABLE_OFFSET_COMMIT"))]
        assert await fetch(door, 6, stable=False) == [(0, -1, 0)]
        complete(door, ControlRecordType.COMMIT)
        assert await fetch(door, 8 if version == 3 else 7, stable=True) == [(0, 12, 0)]

    run(body)


def test_v3_checks_the_named_member() -> None:
    async def body() -> None:
        door = Door()
        member_id, generation = await door.member()
        topics = commit_topics("t", (0, 3))
        stale = txn_fields(3, topics, generation_id=generation + 1, member_id=member_id)
        answer = await door.ask(kg.TXN_OFFSET_COMMIT, 3, **stale)
        assert commit_errors(answer) == [("t", 0, code("ILLEGAL_GENERATION"))]
        stranger = txn_fields(3, topics, generation_id=generation, member_id="nobody")
        answer = await door.ask(kg.TXN_OFFSET_COMMIT, 3, **stranger)
        assert commit_errors(answer) == [("t", 0, code("UNKNOWN_MEMBER_ID"))]
        current = txn_fields(3, topics, generation_id=generation, member_id=member_id)
        answer = await door.ask(kg.TXN_OFFSET_COMMIT, 3, **current)
        assert commit_errors(answer) == [("t", 0, 0)]

    run(body)


@pytest.mark.parametrize(("version", "expected"), [(1, "COORDINATOR_NOT_AVAILABLE"), (2, None)])
def test_old_versions_hear_a_loading_coordinator_as_not_available(
    version: int, expected: str | None
) -> None:
    async def body() -> None:
        door = Door()
        door.coordinator.manager.loading.add(door.partition)
        door.coordinator.manager.owned.pop(door.partition)
        topics = commit_topics("t", (0, 3))
        answer = await door.ask(kg.TXN_OFFSET_COMMIT, version, **txn_fields(version, topics))
        assert commit_errors(answer) == [("t", 0, code(expected or "COORDINATOR_LOAD_IN_PROGRESS"))]

    run(body)


def test_the_grpc_translations_carry_the_member_and_require_stable() -> None:
    request = pb.TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id=GROUP,
        producer_id=PID,
        producer_epoch=3,
        generation_id=2,
        member_id="m",
        partitions=[pb.OffsetCommitPartition(topic="t", partition=1, committed_offset=9)],
    )
    params = apis_group.txn_offset_commit_request(request)
    assert params == TxnOffsetCommitParams(
        "tx", GROUP, PID, 3, (OffsetCommitEntry(TopicPartition("t", 1), 9, 0, ""),), 2, "m", None
    )
    named = pb.TxnOffsetCommitRequest(group_instance_id="i-1")
    assert apis_group.txn_offset_commit_request(named).group_instance_id == "i-1"
    fetch_params = apis_group.offset_fetch_request(
        pb.OffsetFetchRequest(group_id=GROUP, require_stable=True)
    )
    assert fetch_params.require_stable and fetch_params.partitions is None
    unstable = error_for_name("UNSTABLE_OFFSET_COMMIT")
    response = apis_group.offset_fetch_response(
        OffsetFetchResult(partitions=(CommittedOffset(TopicPartition("t", 0), error=unstable),))
    )
    assert [(p.committed_offset, p.error_code) for p in response.partitions] == [
        (-1, unstable.code)
    ]
