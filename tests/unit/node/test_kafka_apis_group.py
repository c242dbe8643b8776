"""The group requests of the Kafka front door, without sockets: kio requests of several
versions answered by a real group coordinator (an in-memory ``__consumer_offsets``, a manual
clock), each response encoded as its version to prove it is writable, and read back."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kio.index import load_request_schema

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import error_for_name
from kafkasim.common.group_protocol import Subscription, encode_subscription
from kafkasim.common.types import TopicPartition
from kafkasim.node import kafka_apis_group as kg
from kafkasim.node.acl_authorizer import AclAuthorizer
from kafkasim.node.authz_groups import AuthorizedGroups
from kafkasim.node.group_coordinator import GroupCoordinator
from kafkasim.node.group_records import GroupKey, OffsetKey
from kafkasim.node.group_types import GroupState
from kafkasim.node.kafka_apis import kafka_handler_tables
from kafkasim.node.kafka_codec import KafkaRequest, build, encode_response
from tests.unit.node.test_group_coordinator import GROUP, MemoryOffsetsTopic, coordinator, leading

TOPIC = "t"
CONSUMER = encode_subscription(Subscription((TOPIC,)))


class Unsecured:
    """A broker without an authorizer (``authorizer.class.name`` empty)."""

    authorizer: AclAuthorizer | None = None


def code(name: str) -> int:
    return error_for_name(name).code


class Door:
    """A coordinator leading ``GROUP``'s partition behind the Kafka group handlers; the
    metadata cache knows every partition but those of topic ``ghost``."""

    def __init__(self, clock: ManualClock | None = None) -> None:
        self.topic = MemoryOffsetsTopic()
        self.clock = clock or ManualClock()
        self.coordinator: GroupCoordinator = coordinator(self.topic, self.clock)
        self.partition = leading(self.coordinator)
        self.apis = kg.KafkaGroupApis(
            AuthorizedGroups(self.coordinator, Unsecured()), lambda tp: tp.topic != "ghost"
        )
        self.table = self.apis.table()

    async def ask(self, key: int, version: int, **values: Any) -> Any:
        body = build(load_request_schema(key, version), **values)
        request = KafkaRequest(key, version, 7, "client-1", body, "/10.0.0.9")
        low, high, handler = self.table[key]
        assert low <= version <= high
        response = await handler(request)
        encode_response(request, response)  # writable as that version
        return response

    async def join(self, version: int, member_id: str = "", **values: Any) -> Any:
        fields: dict[str, Any] = {
            "group_id": GROUP,
            "session_timeout": 6000,
            "rebalance_timeout": 10_000,
            "member_id": member_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": CONSUMER}],
        }
        return await self.ask(kg.JOIN_GROUP, version, **{**fields, **values})

    async def member(self, version: int = 9) -> tuple[str, int]:
        """A member of a Stable generation (joined with MEMBER_ID_REQUIRED, synced)."""
        first = await self.join(version)
        joined = await self.join(version, first.member_id)
        await self.ask(
            kg.SYNC_GROUP,
            5,
            group_id=GROUP,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[{"member_id": joined.member_id, "assignment": b"A"}],
        )
        return joined.member_id, int(joined.generation_id)


def elsewhere(door: Door) -> str:
    """A group id whose ``__consumer_offsets`` partition the door's coordinator does not lead."""
    return next(
        g
        for g in (f"far-{i}" for i in range(100))
        if door.coordinator.partition_of(g) != door.partition
    )


def sibling(door: Door) -> str:
    """A group id other than ``GROUP`` that the door's coordinator also serves."""
    return next(
        g
        for g in (f"other-{i}" for i in range(100))
        if door.coordinator.partition_of(g) == door.partition
    )


def run(body: Any) -> None:
    asyncio.run(body())


def commit_topics(topic: str, *partitions: tuple[int, int]) -> list[dict[str, Any]]:
    return [
        {
            "name": topic,
            "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_metadata": "m"}
                for p, o in partitions
            ],
        }
    ]


def commit_errors(response: Any) -> list[tuple[str, int, int]]:
    return [
        (t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions
    ]


# -- JoinGroup, SyncGroup -------------------------------------------------------------------


def test_join_v4_asks_for_a_member_id_then_forms_the_generation() -> None:
    async def body() -> None:
        door = Door()
        first = await door.join(4)
        assert first.error_code == code("MEMBER_ID_REQUIRED")
        assert first.member_id.startswith("client-1-") and first.generation_id == -1
        assert GROUP not in door.coordinator.groups or not door.coordinator.groups[GROUP].members
        joined = await door.join(4, first.member_id)
        assert (joined.error_code, joined.generation_id, joined.member_id) == (
            0,
            1,
            first.member_id,
        )
        assert joined.leader == first.member_id and joined.protocol_name == "range"
        assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, CONSUMER)]
        (member,) = door.coordinator.groups[GROUP].members.values()
        assert (member.client_host, member.rebalance_timeout_ms) == ("/10.0.0.9", 10_000)

    run(body)


def test_join_v3_is_given_its_member_id_at_once_and_v0_rebalances_within_the_session() -> None:
    async def body() -> None:
        door = Door()
        joined = await door.join(3)
        assert (joined.error_code, joined.generation_id) == (0, 1)
        other = Door()
        old = await other.join(0)
        assert old.error_code == 0
        (member,) = other.coordinator.groups[GROUP].members.values()
        assert member.rebalance_timeout_ms == 6000  # v0 has no rebalance timeout

    run(body)


def test_join_v7_answers_null_protocol_fields_on_error_and_v6_empty_strings() -> None:
    async def body() -> None:
        door = Door()
        refused = await door.join(7, "ghost")
        assert refused.error_code == code("UNKNOWN_MEMBER_ID")
        assert (refused.protocol_type, refused.protocol_name) == (None, None)
        old = await door.join(6, "ghost")
        assert (old.error_code, old.protocol_name) == (code("UNKNOWN_MEMBER_ID"), "")
        member_id, _ = await door.member()
        again = await door.join(9, member_id)  # the leader rejoins a Stable group
        assert (again.protocol_type, again.protocol_name, again.generation_id) == (
            "consumer",
            "range",
            2,
        )

    run(body)


def test_a_pending_member_id_holds_up_the_join_phase_until_it_joins() -> None:
    async def body() -> None:
        door = Door()
        leader, _ = await door.member()
        pending = await door.join(5)
        assert pending.error_code == code("MEMBER_ID_REQUIRED")
        assert door.coordinator.groups[GROUP].state is GroupState.STABLE  # no rebalance yet
        rejoin = asyncio.ensure_future(door.join(5, leader))
        await asyncio.sleep(0.01)
        assert not rejoin.done()  # waits for the pending member
        second = await door.join(5, pending.member_id)
        first = await rejoin
        assert (first.generation_id, second.generation_id) == (2, 2)
        assert {m.member_id for m in first.members} == {leader, pending.member_id}

    run(body)


def test_a_pending_member_id_expires_after_its_session_and_may_leave() -> None:
    async def body() -> None:
        clock = ManualClock()
        door = Door(clock)
        pending = await door.join(4)
        group = door.coordinator.groups[GROUP]
        assert pending.member_id in group.pending_members
        clock.advance(6000)
        door.coordinator.expire(clock.monotonic_ms())
        assert not group.pending_members
        late = await door.join(4, pending.member_id)
        assert late.error_code == code("UNKNOWN_MEMBER_ID")
        again = await door.join(4)
        left = await door.ask(kg.LEAVE_GROUP, 0, group_id=GROUP, member_id=again.member_id)
        assert left.error_code == 0 and not group.pending_members

    run(body)


def test_static_membership_is_answered_as_a_broker_without_it() -> None:
    async def body() -> None:
        door = Door()
        static = await door.join(5, group_instance_id="instance-1")
        assert (static.error_code, static.member_id) == (code("UNSUPPORTED_VERSION"), "")
        member_id, generation = await door.member()
        beat = await door.ask(
            kg.HEARTBEAT,
            3,
            group_id=GROUP,
            generation_id=generation,
            member_id=member_id,
            group_instance_id="instance-1",
        )
        assert beat.error_code == code("UNSUPPORTED_VERSION")
        sync = await door.ask(
            kg.SYNC_GROUP,
            3,
            group_id=GROUP,
            generation_id=generation,
            member_id=member_id,
            group_instance_id="instance-1",
        )
        assert sync.error_code == code("UNSUPPORTED_VERSION")
        commit = await door.ask(
            kg.OFFSET_COMMIT,
            7,
            group_id=GROUP,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            group_instance_id="instance-1",
            topics=commit_topics(TOPIC, (0, 1)),
        )
        assert commit_errors(commit) == [(TOPIC, 0, code("UNSUPPORTED_VERSION"))]

    run(body)


def test_sync_group_v5_checks_the_protocol_and_answers_the_assignment() -> None:
    async def body() -> None:
        door = Door()
        first = await door.join(9)
        joined = await door.join(9, first.member_id)
        values: dict[str, Any] = {
            "group_id": GROUP,
            "generation_id": joined.generation_id,
            "member_id": joined.member_id,
            "protocol_type": "consumer",
            "assignments": [{"member_id": joined.member_id, "assignment": b"A"}],
        }
        wrong = await door.ask(kg.SYNC_GROUP, 5, protocol_name="roundrobin", **values)
        assert wrong.error_code == code("INCONSISTENT_GROUP_PROTOCOL")
        synced = await door.ask(kg.SYNC_GROUP, 5, protocol_name="range", **values)
        assert (synced.error_code, synced.assignment) == (0, b"A")
        assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")
        old = await door.ask(
            kg.SYNC_GROUP,
            0,
            group_id=GROUP,
            generation_id=joined.generation_id + 1,
            member_id=joined.member_id,
        )
        assert old.error_code == code("ILLEGAL_GENERATION")

    run(body)


# -- Heartbeat, LeaveGroup --------------------------------------------------------------------


def test_heartbeat_errors_are_kafkas() -> None:
    async def body() -> None:
        door = Door()
        member_id, generation = await door.member()

        async def beat(group: str, gen: int, member: str) -> int:
            answer = await door.ask(
                kg.HEARTBEAT, 4, group_id=group, generation_id=gen, member_id=member
            )
            return int(answer.error_code)

        assert await beat(GROUP, generation, member_id) == 0
        assert await beat(GROUP, generation, "stranger") == code("UNKNOWN_MEMBER_ID")
        assert await beat(GROUP, generation + 1, member_id) == code("ILLEGAL_GENERATION")
        assert await beat(elsewhere(door), 1, member_id) == code("NOT_COORDINATOR")

    run(body)


def test_leave_group_v0_answers_the_members_error_and_v3_one_entry_per_member() -> None:
    async def body() -> None:
        door = Door()
        old = await door.ask(kg.LEAVE_GROUP, 2, group_id=GROUP, member_id="nobody")
        assert old.error_code == code("UNKNOWN_MEMBER_ID")
        member_id, _ = await door.member()
        batch = await door.ask(
            kg.LEAVE_GROUP,
            5,
            group_id=GROUP,
            members=[
                {"member_id": "nobody", "group_instance_id": None},
                {"member_id": "", "group_instance_id": "instance-1"},
                {"member_id": member_id, "group_instance_id": None, "reason": "done"},
            ],
        )
        assert batch.error_code == 0
        assert [(m.member_id, m.group_instance_id, m.error_code) for m in batch.members] == [
            ("nobody", None, code("UNKNOWN_MEMBER_ID")),
            ("", "instance-1", code("UNKNOWN_MEMBER_ID")),
            (member_id, None, 0),
        ]
        assert door.coordinator.groups[GROUP].state is GroupState.EMPTY
        refused = await door.ask(kg.LEAVE_GROUP, 3, group_id="", members=[{"member_id": member_id}])
        assert (refused.error_code, refused.members) == (code("INVALID_GROUP_ID"), ())

    run(body)


# -- OffsetCommit, OffsetFetch, OffsetDelete ------------------------------------------------


def test_offset_commit_errors_are_kafkas() -> None:
    async def body() -> None:
        door = Door()
        stranger = await door.ask(
            kg.OFFSET_COMMIT,
            8,
            group_id=GROUP,
            generation_id_or_member_epoch=3,
            member_id="m",
            topics=commit_topics(TOPIC, (0, 1)) + commit_topics("ghost", (0, 1)),
        )
        # A member commit to a group this coordinator does not know; a topic it does not know.
        assert commit_errors(stranger) == [
            (TOPIC, 0, code("ILLEGAL_GENERATION")),
            ("ghost", 0, code("UNKNOWN_TOPIC_OR_PARTITION")),
        ]
        member_id, generation = await door.member()
        wrong = await door.ask(
            kg.OFFSET_COMMIT,
            2,
            group_id=GROUP,
            generation_id_or_member_epoch=generation,
            member_id="m",
            retention_time=-1,
            topics=commit_topics(TOPIC, (0, 1)),
        )
        assert commit_errors(wrong) == [(TOPIC, 0, code("UNKNOWN_MEMBER_ID"))]
        outsider = await door.ask(
            kg.OFFSET_COMMIT,
            6,
            group_id=GROUP,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=commit_topics(TOPIC, (0, 1)),
        )
        assert commit_errors(outsider) == [(TOPIC, 0, code("UNKNOWN_MEMBER_ID"))]
        ok = await door.ask(
            kg.OFFSET_COMMIT,
            6,
            group_id=GROUP,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=commit_topics(TOPIC, (0, 10), (1, 11)),
        )
        assert commit_errors(ok) == [(TOPIC, 0, 0), (TOPIC, 1, 0)]
        assert door.topic.keys(door.partition)[-2:] == [
            OffsetKey(GROUP, TOPIC, 0),
            OffsetKey(GROUP, TOPIC, 1),
        ]

    run(body)


def test_offsets_committed_from_outside_a_generation_read_back_in_every_version() -> None:
    async def body() -> None:
        door = Door()
        commit = await door.ask(
            kg.OFFSET_COMMIT,
            8,
            group_id=GROUP,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=commit_topics(TOPIC, (0, 10), (2, 12)),
        )
        assert commit_errors(commit) == [(TOPIC, 0, 0), (TOPIC, 2, 0)]
        asked = [{"name": TOPIC, "partition_indexes": [0, 1]}]
        v1 = await door.ask(kg.OFFSET_FETCH, 1, group_id=GROUP, topics=asked)
        assert [
            (p.partition_index, p.committed_offset, p.metadata) for p in v1.topics[0].partitions
        ] == [
            (0, 10, "m"),
            (1, -1, ""),
        ]
        every = await door.ask(kg.OFFSET_FETCH, 7, group_id=GROUP, topics=None)
        assert every.error_code == 0
        assert [(p.partition_index, p.committed_offset) for p in every.topics[0].partitions] == [
            (0, 10),
            (2, 12),
        ]
        v8 = await door.ask(
            kg.OFFSET_FETCH,
            8,
            groups=[
                {"group_id": GROUP, "topics": None},
                {"group_id": elsewhere(door), "topics": asked},
            ],
        )
        assert [(g.group_id, g.error_code) for g in v8.groups] == [
            (GROUP, 0),
            (elsewhere(door), code("NOT_COORDINATOR")),
        ]
        assert [p.committed_offset for p in v8.groups[0].topics[0].partitions] == [10, 12]

    run(body)


def test_offset_fetch_v1_puts_the_groups_error_in_each_partition() -> None:
    async def body() -> None:
        door = Door()
        asked = [{"name": TOPIC, "partition_indexes": [0, 1]}]
        v1 = await door.ask(kg.OFFSET_FETCH, 1, group_id=elsewhere(door), topics=asked)
        assert [(p.committed_offset, p.error_code) for p in v1.topics[0].partitions] == [
            (-1, code("NOT_COORDINATOR")),
            (-1, code("NOT_COORDINATOR")),
        ]
        v3 = await door.ask(kg.OFFSET_FETCH, 3, group_id=elsewhere(door), topics=asked)
        assert (v3.error_code, v3.topics) == (code("NOT_COORDINATOR"), ())

    run(body)


def test_offset_delete_refuses_subscribed_topics_and_deletes_an_empty_groups_offsets() -> None:
    async def body() -> None:
        door = Door()
        missing = await door.ask(
            kg.OFFSET_DELETE, 0, group_id=GROUP, topics=[{"name": TOPIC, "partitions": [{}]}]
        )
        assert missing.error_code == code("GROUP_ID_NOT_FOUND")
        member_id, generation = await door.member()
        await door.ask(
            kg.OFFSET_COMMIT,
            8,
            group_id=GROUP,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=commit_topics(TOPIC, (0, 5)) + commit_topics("other", (0, 6)),
        )
        asked = [
            {"name": TOPIC, "partitions": [{"partition_index": 0}]},
            {"name": "other", "partitions": [{"partition_index": 0}]},
            {"name": "ghost", "partitions": [{"partition_index": 0}]},
        ]
        busy = await door.ask(kg.OFFSET_DELETE, 0, group_id=GROUP, topics=asked)
        assert busy.error_code == 0
        assert commit_errors(busy) == [
            (TOPIC, 0, code("GROUP_SUBSCRIBED_TO_TOPIC")),
            ("other", 0, 0),
            ("ghost", 0, code("UNKNOWN_TOPIC_OR_PARTITION")),
        ]
        group = door.coordinator.groups[GROUP]
        assert set(group.offsets) == {TopicPartition(TOPIC, 0)}
        await door.ask(kg.LEAVE_GROUP, 0, group_id=GROUP, member_id=member_id)
        empty = await door.ask(kg.OFFSET_DELETE, 0, group_id=GROUP, topics=asked[:1])
        assert commit_errors(empty) == [(TOPIC, 0, 0)]
        # Its last offsets gone, the Empty group is deleted (tombstones for both).
        assert GROUP not in door.coordinator.groups
        assert door.topic.keys(door.partition)[-2:] == [OffsetKey(GROUP, TOPIC, 0), GroupKey(GROUP)]

    run(body)


# -- ListGroups, DescribeGroups, DeleteGroups ------------------------------------------------


def test_list_describe_and_delete_groups() -> None:
    async def body() -> None:
        door = Door()
        member_id, _ = await door.member()
        unknown_id = sibling(door)
        listed = await door.ask(kg.LIST_GROUPS, 0)
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [(GROUP, "consumer")]
        stable = await door.ask(kg.LIST_GROUPS, 4, states_filter=("Stable",))
        assert [(g.group_id, g.group_state) for g in stable.groups] == [(GROUP, "Stable")]
        empty = await door.ask(kg.LIST_GROUPS, 4, states_filter=("Empty",))
        assert empty.groups == ()
        described = await door.ask(
            kg.DESCRIBE_GROUPS, 5, groups=(GROUP, unknown_id), include_authorized_operations=True
        )
        ours, unknown = described.groups
        assert (ours.group_state, ours.protocol_type, ours.protocol_data) == (
            "Stable",
            "consumer",
            "range",
        )
        assert [
            (m.member_id, m.client_id, m.client_host, m.member_assignment) for m in ours.members
        ] == [(member_id, "client-1", "/10.0.0.9", b"A")]
        # READ (3), DELETE (6), DESCRIBE (8): every group operation without an authorizer.
        assert ours.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
        assert (unknown.error_code, unknown.group_state, unknown.members) == (0, "Dead", ())
        old = await door.ask(kg.DESCRIBE_GROUPS, 0, groups=(elsewhere(door),))
        assert (old.groups[0].error_code, old.groups[0].group_state) == (
            code("NOT_COORDINATOR"),
            "",
        )
        deleted = await door.ask(kg.DELETE_GROUPS, 2, groups_names=(GROUP, unknown_id))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (GROUP, code("NON_EMPTY_GROUP")),
            (unknown_id, code("GROUP_ID_NOT_FOUND")),
        ]
        await door.ask(kg.LEAVE_GROUP, 1, group_id=GROUP, member_id=member_id)
        gone = await door.ask(kg.DELETE_GROUPS, 0, groups_names=(GROUP,))
        assert [(r.group_id, r.error_code) for r in gone.results] == [(GROUP, 0)]
        assert GROUP not in door.coordinator.groups

    run(body)


def test_the_kafka_listener_serves_the_group_table() -> None:
    door = Door()
    broker: Any = SimpleNamespace(groups=door.coordinator, metadata=SimpleNamespace(partitions={}))
    table = kafka_handler_tables(broker)[0]  # the group table first, then the admin ones
    assert {key: (low, high) for key, (low, high, _) in table.items()} == {
        key: (low, high) for key, (low, high, _) in door.table.items()
    }
    assert set(table) == {8, 9, 11, 12, 13, 14, 15, 16, 28, 42, 47}
