"""Transactional offset commits in the group coordinator (TxnOffsetCommit, KIP-98 and
KIP-447), over domain values with an in-memory ``__consumer_offsets``: what is written, what
OffsetFetch sees before and after the transaction's marker, each check's error, and what a
coordinator that loads the partition makes of committed, aborted and open transactions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

import pytest

from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_records import (
    OFFSETS_TOPIC,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
)
from kafkasim.node.group_types import (
    Error,
    GroupState,
    OffsetCommitEntry,
    OffsetCommitParams,
    OffsetFetchParams,
    TxnOffsetCommitParams,
)
from kafkasim.node.replica_markers import write_txn_markers
from kafkasim.node.replica_types import (
    ProduceParams,
    ProducePartitionResult,
    TxnMarkerEntry,
    WriteTxnMarkersParams,
)
from kafkasim.storage.records.batch import ControlRecordType, encode_batch, encode_control_batch
from tests.unit.node.test_group_coordinator import (
    GROUP,
    MemoryOffsetsTopic,
    coordinator,
    join,
    leading,
)

TP = TopicPartition("t", 0)
PID, EPOCH = 4000, 2
COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT


def error(name: str) -> type[KafkaError]:
    return error_for_name(name)


def run(awaitable: Awaitable[object]) -> object:
    async def body() -> object:
        return await awaitable

    return asyncio.run(body())


def txn_commit(
    offset: int,
    *,
    pid: int = PID,
    group: str = GROUP,
    tp: TopicPartition = TP,
    metadata: str = "",
    **member: object,
) -> TxnOffsetCommitParams:
    return TxnOffsetCommitParams(
        "tx",
        group,
        pid,
        EPOCH,
        (OffsetCommitEntry(tp, offset, metadata=metadata),),
        **member,  # type: ignore[arg-type]
    )


def errors(c: GroupCoordinator, params: TxnOffsetCommitParams) -> list[Error]:
    async def body() -> list[Error]:
        return [p.error for p in (await c.txn_offset_commit(params)).partitions]

    return asyncio.run(body())


def fetched(c: GroupCoordinator, *, stable: bool = False) -> tuple[int, Error]:
    [answer] = c.offset_fetch(OffsetFetchParams(GROUP, (TP,), require_stable=stable)).partitions
    return answer.offset, answer.error


def marker(
    c: GroupCoordinator, topic: MemoryOffsetsTopic, result: ControlRecordType, pid: int = PID
) -> None:
    """The transaction coordinator's marker written to the group's partition, as
    WriteTxnMarkers writes it, and the group coordinator told."""
    partition = c.partition_of(GROUP)
    batch = encode_control_batch(result, producer_id=pid, producer_epoch=EPOCH, timestamp=1)
    topic.write(partition, batch)
    c.on_txn_markers_written(pid, result, [TopicPartition(OFFSETS_TOPIC, partition)])


def setup() -> tuple[GroupCoordinator, MemoryOffsetsTopic]:
    topic = MemoryOffsetsTopic()
    c = coordinator(topic)
    leading(c)
    return c, topic


def plain_commit(c: GroupCoordinator, offset: int) -> None:
    async def body() -> None:
        result = await c.offset_commit(
            OffsetCommitParams(GROUP, -1, "", (OffsetCommitEntry(TP, offset),))
        )
        assert [p.error for p in result.partitions] == [None]

    asyncio.run(body())


def test_the_offsets_are_written_as_a_transactional_batch_of_the_producer() -> None:
    c, topic = setup()
    assert errors(c, txn_commit(42, metadata="m")) == [None]
    [(header, records)] = topic.batches(c.partition_of(GROUP))
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, 0)
    [record] = records
    assert decode_key(record.key or b"") == OffsetKey(GROUP, "t", 0)
    assert decode_offset_value(record.value or b"").offset == 42


def test_pending_offsets_are_invisible_until_the_commit_marker_then_committed() -> None:
    c, topic = setup()
    plain_commit(c, 5)
    assert errors(c, txn_commit(42)) == [None]
    assert fetched(c) == (5, None)
    assert fetched(c, stable=True) == (-1, error("UNSTABLE_OFFSET_COMMIT"))
    marker(c, topic, COMMIT)
    assert fetched(c) == (42, None) and fetched(c, stable=True) == (42, None)
    assert c.manager.producer_groups == {}


def test_an_abort_marker_drops_the_pending_offsets() -> None:
    c, topic = setup()
    plain_commit(c, 5)
    errors(c, txn_commit(42))
    marker(c, topic, ABORT)
    assert fetched(c, stable=True) == (5, None)


def test_a_plain_commit_written_after_the_transactional_one_wins_over_it() -> None:
    c, topic = setup()
    errors(c, txn_commit(42))
    plain_commit(c, 50)
    marker(c, topic, COMMIT)
    assert fetched(c) == (50, None)


def test_a_marker_of_another_producer_or_partition_completes_nothing() -> None:
    c, topic = setup()
    errors(c, txn_commit(42))
    partition = c.partition_of(GROUP)
    c.on_txn_markers_written(PID, COMMIT, [TopicPartition("t", partition)])  # not offsets
    c.on_txn_markers_written(PID, COMMIT, [TopicPartition(OFFSETS_TOPIC, partition + 1)])
    marker(c, topic, COMMIT, pid=PID + 1)
    assert fetched(c, stable=True) == (-1, error("UNSTABLE_OFFSET_COMMIT"))


def test_a_group_the_coordinator_does_not_know_is_created_empty_by_the_commit() -> None:
    c, _topic = setup()
    assert errors(c, txn_commit(1)) == [None]
    assert GROUP in c.groups and c.groups[GROUP].state.value == "Empty"


def test_too_long_metadata_is_refused_alone() -> None:
    c, topic = setup()
    long = "x" * 5000
    params = TxnOffsetCommitParams(
        "tx",
        GROUP,
        PID,
        EPOCH,
        (OffsetCommitEntry(TP, 1, metadata=long), OffsetCommitEntry(TopicPartition("t", 1), 2)),
    )
    assert errors(c, params) == [error("OFFSET_METADATA_TOO_LARGE"), None]
    only_too_long = txn_commit(1, metadata=long)
    before = len(topic.logs[c.partition_of(GROUP)])
    assert errors(c, only_too_long) == [error("OFFSET_METADATA_TOO_LARGE")]
    assert len(topic.logs[c.partition_of(GROUP)]) == before  # nothing written


def test_a_failed_write_is_mapped_and_leaves_nothing_pending() -> None:
    c, topic = setup()
    topic.fail_with = error("NOT_ENOUGH_REPLICAS")("isr too small")
    assert errors(c, txn_commit(1)) == [error("COORDINATOR_NOT_AVAILABLE")]
    assert fetched(c, stable=True) == (-1, None) and c.manager.producer_groups == {}


def test_a_group_this_broker_does_not_coordinate_is_refused() -> None:
    topic = MemoryOffsetsTopic()
    c = coordinator(topic)
    assert errors(c, txn_commit(1)) == [error("NOT_COORDINATOR")]
    assert errors(c, txn_commit(1, group="")) == [error("INVALID_GROUP_ID")]


def member_and_generation(c: GroupCoordinator) -> tuple[str, int]:
    async def body() -> tuple[str, int]:
        joined = await c.join_group(join())
        return joined.member_id, joined.generation_id

    return asyncio.run(body())


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        ({"generation_id": 1, "member_id": "{member}"}, None),
        ({"generation_id": 2, "member_id": "{member}"}, "ILLEGAL_GENERATION"),
        ({"generation_id": 1, "member_id": "someone"}, "UNKNOWN_MEMBER_ID"),
        ({"generation_id": -1, "member_id": "someone"}, "UNKNOWN_MEMBER_ID"),
        ({"member_id": "{member}", "group_instance_id": "i-1"}, "UNKNOWN_MEMBER_ID"),
        ({}, None),  # v0-v2: no member named, not checked even with members
    ],
)
def test_kip_447_checks_a_named_member_against_the_group(
    member: dict[str, object], expected: str | None
) -> None:
    c, _topic = setup()
    member_id, generation = member_and_generation(c)
    assert generation == 1
    fields = {k: (member_id if v == "{member}" else v) for k, v in member.items()}
    assert errors(c, txn_commit(1, **fields)) == [error(expected) if expected else None]


def static_group_log(topic: MemoryOffsetsTopic, partition: int) -> None:
    """A Stable group of generation 3 whose member ``m-1`` is static member ``i-1``, as a
    broker with static membership writes it."""
    value = GroupValue(
        "consumer",
        3,
        "range",
        "m-1",
        0,
        (MemberValue("m-1", "i-1", "c", "/h", 10_000, 6000, b"", b""),),
    )
    batch = encode_batch([(0, encode_group_key(GroupKey(GROUP)), encode_group_value(value))])
    topic.logs[partition] = []
    topic.write(partition, batch)


@pytest.mark.parametrize(
    ("member_id", "instance_id", "expected"),
    [
        ("m-1", "i-1", None),
        ("m-0", "i-1", "FENCED_INSTANCE_ID"),  # the instance has another member id now
        ("m-1", "i-9", "UNKNOWN_MEMBER_ID"),
    ],
)
def test_a_static_member_is_fenced_by_its_instance_id(
    member_id: str, instance_id: str, expected: str | None
) -> None:
    topic = MemoryOffsetsTopic()
    c = coordinator(topic)
    partition = c.partition_of(GROUP)
    static_group_log(topic, partition)
    c.elect(partition, leader_epoch=0)
    params = txn_commit(1, generation_id=3, member_id=member_id, group_instance_id=instance_id)
    assert errors(c, params) == [error(expected) if expected else None]


def test_a_dead_group_is_coordinator_not_available() -> None:
    c, _topic = setup()
    errors(c, txn_commit(1))
    c.groups[GROUP].transition(GroupState.DEAD, 0)
    assert errors(c, txn_commit(2)) == [error("COORDINATOR_NOT_AVAILABLE")]


# -- loading ------------------------------------------------------------------------------------


def reload(topic: MemoryOffsetsTopic) -> GroupCoordinator:
    """A new coordinator taking the partition over from the same log."""
    c = coordinator(topic)
    c.elect(c.partition_of(GROUP), leader_epoch=1)
    return c


def test_a_loading_coordinator_keeps_committed_drops_aborted_and_holds_open_transactions() -> None:
    c, topic = setup()
    plain_commit(c, 5)
    other = TopicPartition("t", 1)
    third = TopicPartition("t", 2)
    errors(c, txn_commit(10, pid=1))
    errors(c, txn_commit(20, pid=2, tp=other))
    errors(c, txn_commit(30, pid=3, tp=third))
    marker(c, topic, COMMIT, pid=1)
    marker(c, topic, ABORT, pid=2)
    loaded = reload(topic)
    group = loaded.groups[GROUP]
    assert dict(group.offsets) == {TP: group.offsets[TP]} and group.offsets[TP].offset == 10
    assert group.offsets.has_pending(third) and not group.offsets.has_pending(other)
    assert loaded.manager.producer_groups == {3: {GROUP}}
    # The open transaction's marker arrives at the new coordinator: it commits there.
    marker(loaded, topic, COMMIT, pid=3)
    assert loaded.groups[GROUP].offsets[third].offset == 30


def test_loading_orders_a_plain_commit_after_the_transactional_one_as_the_live_path() -> None:
    c, topic = setup()
    errors(c, txn_commit(42))
    plain_commit(c, 50)
    marker(c, topic, COMMIT)
    assert fetched(reload(topic)) == (50, None)
    c2, topic2 = setup()
    plain_commit(c2, 50)
    errors(c2, txn_commit(42))
    marker(c2, topic2, COMMIT)
    assert fetched(reload(topic2)) == (42, None)


def test_a_group_with_only_an_open_transaction_loads_empty_with_it_pending() -> None:
    c, topic = setup()
    errors(c, txn_commit(7))
    loaded = reload(topic)
    assert fetched(loaded) == (-1, None)
    assert fetched(loaded, stable=True) == (-1, error("UNSTABLE_OFFSET_COMMIT"))


def test_resigning_forgets_the_producers_of_the_partition() -> None:
    c, _topic = setup()
    errors(c, txn_commit(7))
    c.resign(c.partition_of(GROUP))
    assert c.manager.producer_groups == {}


# -- WriteTxnMarkers completes them -------------------------------------------------------------


def test_the_marker_write_tells_the_coordinator_and_a_failure_to_complete_is_unknown() -> None:
    offsets = TopicPartition(OFFSETS_TOPIC, 3)
    data = TopicPartition("t", 0)
    heard: list[tuple[int, ControlRecordType, list[TopicPartition]]] = []

    async def append(params: ProduceParams) -> list[ProducePartitionResult]:
        return [ProducePartitionResult(p.tp) for p in params.partitions]

    def on_written(pid: int, result: ControlRecordType, tps: Sequence[TopicPartition]) -> None:
        heard.append((pid, result, list(tps)))
        if pid == 9:
            raise RuntimeError("boom")

    params = WriteTxnMarkersParams(
        (
            TxnMarkerEntry(PID, EPOCH, 0, COMMIT, (data, offsets)),
            TxnMarkerEntry(9, EPOCH, 0, ABORT, (offsets,)),
        )
    )
    results = run(write_txn_markers(append, params, now_ms=0, timeout_ms=10, on_written=on_written))
    assert heard == [(PID, COMMIT, [data, offsets]), (9, ABORT, [offsets])]
    ok, failed = results  # type: ignore[misc]
    assert [e for _, e in ok.partitions] == [None, None]
    [(tp, unknown)] = failed.partitions
    assert tp == offsets and isinstance(unknown, KafkaError) and unknown.code == -1


def test_a_loaded_group_keeps_the_values_of_its_offsets() -> None:
    c, topic = setup()
    errors(c, txn_commit(11, metadata="meta"))
    marker(c, topic, COMMIT)
    value = reload(topic).groups[GROUP].offsets[TP]
    assert (value.offset, value.metadata) == (11, "meta") and isinstance(value, OffsetValue)
