"""The group requests of the Kafka-protocol front door: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and
OffsetDelete (kio structs of any served version) translated into the group coordinator's
domain values (``node.group_types``) — the same calls the gRPC front door makes
(``node.apis_group``) — and its results into Kafka's responses of the version asked.

What the versions change, and how each is answered here:

* JoinGroup v0 has no rebalance timeout: the session timeout is used, as in Kafka. v4+: a
  first join (no member id) is answered MEMBER_ID_REQUIRED with a member id to join with.
  v7+: protocol type and name are null when unknown; before v7 empty strings.
* OffsetCommit v2-v4 carry a retention time and OffsetCommit v1 a commit timestamp: ignored
  (committed offsets do not expire here). v0 (offsets in ZooKeeper) and v1 are not served.
* OffsetFetch v1 answers a group's error in each partition; v2+ at the top; v8 batches
  groups (each with its own error). Null topics (v2+) ask for every committed partition.
  v7+ carry ``require_stable`` (KIP-447): a partition with a pending commit answers
  UNSTABLE_OFFSET_COMMIT.
* TxnOffsetCommit (KIP-98) v0-v3: v2 adds the committed leader epoch, v3 the member
  (generation, member id, group instance id; KIP-447), checked by the coordinator. A partition
  the metadata cache does not know is UNKNOWN_TOPIC_OR_PARTITION without asking the
  coordinator; v0-v1 answer COORDINATOR_LOAD_IN_PROGRESS as COORDINATOR_NOT_AVAILABLE (older
  producers did not expect it), as Kafka does.
* LeaveGroup v0-v2 answer the one member's error at the top; v3+ one entry per member.
* DescribeGroups v3+ asked for authorized operations: the caller's among those a group
  supports (READ, DELETE, DESCRIBE; all three without an authorizer), for a group described
  without error (the others: omitted), as Kafka.
* OffsetCommit and OffsetDelete answer UNKNOWN_TOPIC_OR_PARTITION for a partition the
  metadata cache does not know, without asking the coordinator (as Kafka's request layer),
  once its topic is authorized (``node.authz_groups``).

Static membership (``group.instance.id``, JoinGroup v5+, SyncGroup and Heartbeat v3+,
OffsetCommit v7+) is not implemented by the coordinator: a request naming an instance id is
answered UNSUPPORTED_VERSION, as a Kafka broker with inter.broker.protocol.version < 2.3
answers it, and a LeaveGroup entry naming one UNKNOWN_MEMBER_ID (no such static member).
TxnOffsetCommit v3 passes its instance id to the coordinator, which checks it against the
static members of a group loaded from a log (UNKNOWN_MEMBER_ID when none has it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.apis import BrokerServices
from kafkasim.node.apis_replica import error_code
from kafkasim.node.authz_groups import AuthorizedGroups
from kafkasim.node.group_types import (
    NO_GENERATION,
    NO_LEADER_EPOCH,
    DeleteGroupsParams,
    DescribeGroupsParams,
    Error,
    GroupProtocol,
    HeartbeatParams,
    JoinGroupParams,
    LeaveGroupParams,
    ListGroupsParams,
    MemberAssignment,
    OffsetCommitEntry,
    OffsetCommitParams,
    OffsetDeleteParams,
    OffsetFetchParams,
    OffsetFetchResult,
    SyncGroupParams,
    TxnOffsetCommitParams,
)
from kafkasim.node.kafka_codec import (
    AUTHORIZED_OPERATIONS_OMITTED,
    KafkaRequest,
    build,
    group_by_topic,
    millis,
    response_schema,
)

OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
TXN_OFFSET_COMMIT = 28

UNSUPPORTED_VERSION = error_for_name("UNSUPPORTED_VERSION")
UNKNOWN_MEMBER_ID = error_for_name("UNKNOWN_MEMBER_ID")
UNKNOWN_TOPIC_OR_PARTITION = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
COORDINATOR_LOAD_IN_PROGRESS = error_for_name("COORDINATOR_LOAD_IN_PROGRESS")
COORDINATOR_NOT_AVAILABLE = error_for_name("COORDINATOR_NOT_AVAILABLE")

GroupHandler = Callable[[KafkaRequest], Awaitable[Any]]


def _by_topic(entries: Iterable[tuple[TopicPartition, dict[str, Any]]]) -> dict[str, list[Any]]:
    """Per-partition answers grouped by topic, in the order the topics first appear."""
    return group_by_topic(
        (tp.topic, {"partition_index": tp.partition, **values}) for tp, values in entries
    )


def _commit_entries(topics: Iterable[Any]) -> list[OffsetCommitEntry]:
    """The partitions of an OffsetCommit or TxnOffsetCommit request (no leader epoch before
    OffsetCommit v6 / TxnOffsetCommit v2)."""
    return [
        OffsetCommitEntry(
            TopicPartition(topic.name, int(p.partition_index)),
            offset=int(p.committed_offset),
            leader_epoch=int(getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH)),
            metadata=p.committed_metadata or "",
        )
        for topic in topics
        for p in topic.partitions
    ]


def _commit_response(
    request: KafkaRequest,
    entries: Iterable[OffsetCommitEntry],
    errors: Mapping[TopicPartition, Error],
) -> Any:
    """An OffsetCommit or TxnOffsetCommit response: each entry's error, by topic."""
    topics = _by_topic((e.tp, {"error_code": error_code(errors[e.tp])}) for e in entries)
    return build(
        response_schema(request),
        topics=[{"name": name, "partitions": parts} for name, parts in topics.items()],
    )


class KafkaGroupApis:
    """The group requests, answered by ``coordinator``; ``known`` tells whether the metadata
    cache knows a partition (OffsetCommit and OffsetDelete refuse the others)."""

    def __init__(
        self, coordinator: AuthorizedGroups, known: Callable[[TopicPartition], bool]
    ) -> None:
        self.coordinator = coordinator
        self.known = known

    def table(self) -> dict[int, tuple[int, int, GroupHandler]]:
        """{api key: (min version, max version, handler)} for ``node.kafka_apis``."""
        return {
            JOIN_GROUP: (0, 9, self.join_group),
            SYNC_GROUP: (0, 5, self.sync_group),
            HEARTBEAT: (0, 4, self.heartbeat),
            LEAVE_GROUP: (0, 5, self.leave_group),
            OFFSET_COMMIT: (2, 8, self.offset_commit),
            OFFSET_FETCH: (1, 8, self.offset_fetch),
            LIST_GROUPS: (0, 4, self.list_groups),
            DESCRIBE_GROUPS: (0, 5, self.describe_groups),
            DELETE_GROUPS: (0, 2, self.delete_groups),
            OFFSET_DELETE: (0, 0, self.offset_delete),
            TXN_OFFSET_COMMIT: (0, 3, self.txn_offset_commit),
        }

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ------------------------------------------

    async def join_group(self, request: KafkaRequest) -> Any:
        body, version = request.body, request.api_version
        schema = response_schema(request)
        nullable = version >= 7  # protocol type and name: null when unknown

        def text(value: str) -> str | None:
            return (value or None) if nullable else value

        if getattr(body, "group_instance_id", None) is not None:
            return build(
                schema,
                error_code=UNSUPPORTED_VERSION.code,
                generation_id=-1,
                protocol_type=None,
                protocol_name=text(""),
            )
        session_ms = millis(body.session_timeout)
        params = JoinGroupParams(
            group_id=body.group_id,
            member_id=body.member_id,
            client_id=request.client_id or "",
            client_host=request.client_host,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=millis(getattr(body, "rebalance_timeout", None), session_ms),
            protocol_type=body.protocol_type,
            protocols=tuple(GroupProtocol(p.name, bytes(p.metadata)) for p in body.protocols),
            require_known_member_id=version >= 4,
        )
        result = await self.coordinator.join_group(params)
        return build(
            schema,
            error_code=error_code(result.error),
            generation_id=result.generation_id,
            protocol_type=text(result.protocol_type),
            protocol_name=text(result.protocol_name),
            leader=result.leader_id,
            skip_assignment=False,  # only for static leaders
            member_id=result.member_id,
            members=[
                {"member_id": m.member_id, "group_instance_id": None, "metadata": m.metadata}
                for m in result.members
            ],
        )

    async def sync_group(self, request: KafkaRequest) -> Any:
        body = request.body
        schema = response_schema(request)
        if getattr(body, "group_instance_id", None) is not None:
            return build(schema, error_code=UNSUPPORTED_VERSION.code, assignment=b"")
        params = SyncGroupParams(
            group_id=body.group_id,
            generation_id=int(body.generation_id),
            member_id=body.member_id,
            protocol_type=getattr(body, "protocol_type", None) or "",
            protocol_name=getattr(body, "protocol_name", None) or "",
            assignments=tuple(
                MemberAssignment(a.member_id, bytes(a.assignment)) for a in body.assignments
            ),
        )
        result = await self.coordinator.sync_group(params)
        return build(
            schema,
            error_code=error_code(result.error),
            protocol_type=result.protocol_type or None,
            protocol_name=result.protocol_name or None,
            assignment=result.assignment,
        )

    async def heartbeat(self, request: KafkaRequest) -> Any:
        body = request.body
        if getattr(body, "group_instance_id", None) is not None:
            return build(response_schema(request), error_code=UNSUPPORTED_VERSION.code)
        result = self.coordinator.heartbeat(
            HeartbeatParams(body.group_id, int(body.generation_id), body.member_id)
        )
        return build(response_schema(request), error_code=error_code(result.error))

    async def leave_group(self, request: KafkaRequest) -> Any:
        body = request.body
        if request.api_version < 3:
            result = self.coordinator.leave_group(
                LeaveGroupParams(body.group_id, (body.member_id,))
            )
            return build(response_schema(request), error_code=error_code(result.error))
        dynamic = tuple(m.member_id for m in body.members if m.group_instance_id is None)
        result = self.coordinator.leave_group(LeaveGroupParams(body.group_id, dynamic))
        if not result.members and result.error is not None:
            # The group's error (not this coordinator, ...): no member entries.
            return build(response_schema(request), error_code=error_code(result.error))
        outcomes = iter(result.members)
        members = []
        for m in body.members:
            # No static member exists, so one named by instance id is unknown.
            error = UNKNOWN_MEMBER_ID if m.group_instance_id is not None else next(outcomes).error
            members.append(
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "error_code": error_code(error),
                }
            )
        return build(response_schema(request), error_code=0, members=members)

    # -- OffsetCommit, OffsetFetch, OffsetDelete --------------------------------------------

    def _known_only(
        self, entries: Iterable[OffsetCommitEntry]
    ) -> tuple[dict[TopicPartition, Error], tuple[OffsetCommitEntry, ...]]:
        """UNKNOWN_TOPIC_OR_PARTITION for the partitions the metadata cache does not know (as
        Kafka's request layer answers them), and the entries to commit."""
        errors: dict[TopicPartition, Error] = {
            e.tp: UNKNOWN_TOPIC_OR_PARTITION for e in entries if not self.known(e.tp)
        }
        return errors, tuple(e for e in entries if e.tp not in errors)

    async def offset_commit(self, request: KafkaRequest) -> Any:
        body = request.body
        entries = _commit_entries(body.topics)
        if getattr(body, "group_instance_id", None) is not None:
            errors, committing = self._known_only(entries)
            errors.update({e.tp: UNSUPPORTED_VERSION for e in committing})
        else:
            result = await self.coordinator.offset_commit(
                OffsetCommitParams(
                    body.group_id,
                    int(body.generation_id_or_member_epoch),
                    body.member_id,
                    tuple(entries),
                ),
                self.known,
            )
            errors = {p.tp: p.error for p in result.partitions}
        return _commit_response(request, entries, errors)

    async def txn_offset_commit(self, request: KafkaRequest) -> Any:
        body = request.body
        entries = _commit_entries(body.topics)
        result = await self.coordinator.txn_offset_commit(
            TxnOffsetCommitParams(
                transactional_id=body.transactional_id,
                group_id=body.group_id,
                producer_id=int(body.producer_id),
                producer_epoch=int(body.producer_epoch),
                offsets=tuple(entries),
                generation_id=int(getattr(body, "generation_id", NO_GENERATION)),
                member_id=getattr(body, "member_id", ""),
                group_instance_id=getattr(body, "group_instance_id", None),
            ),
            self.known,
        )
        errors = {p.tp: p.error for p in result.partitions}
        if request.api_version < 2:
            errors = {
                tp: COORDINATOR_NOT_AVAILABLE if e is COORDINATOR_LOAD_IN_PROGRESS else e
                for tp, e in errors.items()
            }
        return _commit_response(request, entries, errors)

    async def offset_fetch(self, request: KafkaRequest) -> Any:
        body, version = request.body, request.api_version
        schema = response_schema(request)
        if version >= 8:
            groups = []
            for group in body.groups:
                result = self._fetch(group.group_id, group.topics, body.require_stable)
                groups.append(
                    {
                        "group_id": group.group_id,
                        "topics": self._fetched_topics(result),
                        "error_code": error_code(result.error),
                    }
                )
            return build(schema, groups=groups)
        result = self._fetch(body.group_id, body.topics, getattr(body, "require_stable", False))
        if version < 2 and result.error is not None:
            # v1 has no top-level error: each partition asked carries the group's.
            return build(
                schema,
                topics=[
                    {
                        "name": topic.name,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": -1,
                                "metadata": "",
                                "error_code": error_code(result.error),
                            }
                            for p in topic.partition_indexes
                        ],
                    }
                    for topic in body.topics
                ],
            )
        return build(
            schema, topics=self._fetched_topics(result), error_code=error_code(result.error)
        )

    def _fetch(self, group_id: str, topics: Any, require_stable: bool) -> OffsetFetchResult:
        partitions = (
            None
            if topics is None
            else tuple(TopicPartition(t.name, int(p)) for t in topics for p in t.partition_indexes)
        )
        return self.coordinator.offset_fetch(
            OffsetFetchParams(group_id, partitions, bool(require_stable))
        )

    @staticmethod
    def _fetched_topics(result: OffsetFetchResult) -> list[dict[str, Any]]:
        topics = _by_topic(
            (
                c.tp,
                {
                    "committed_offset": c.offset,
                    "committed_leader_epoch": c.leader_epoch,
                    "metadata": c.metadata,
                    "error_code": error_code(c.error),
                },
            )
            for c in result.partitions
        )
        return [{"name": name, "partitions": parts} for name, parts in topics.items()]

    async def offset_delete(self, request: KafkaRequest) -> Any:
        body = request.body
        asked = [
            TopicPartition(topic.name, int(p.partition_index))
            for topic in body.topics
            for p in topic.partitions
        ]
        result = await self.coordinator.offset_delete(
            OffsetDeleteParams(body.group_id, tuple(asked)), self.known
        )
        if result.error is not None:
            return build(response_schema(request), error_code=error_code(result.error))
        errors: dict[TopicPartition, Error] = {p.tp: p.error for p in result.partitions}
        topics = _by_topic((tp, {"error_code": error_code(errors[tp])}) for tp in asked)
        return build(
            response_schema(request),
            error_code=0,
            topics=[{"name": name, "partitions": parts} for name, parts in topics.items()],
        )

    # -- ListGroups, DescribeGroups, DeleteGroups ---------------------------------------------

    async def list_groups(self, request: KafkaRequest) -> Any:
        states = getattr(request.body, "states_filter", ())
        result = self.coordinator.list_groups(ListGroupsParams(frozenset(states)))
        return build(
            response_schema(request),
            error_code=error_code(result.error),
            groups=[
                {
                    "group_id": g.group_id,
                    "protocol_type": g.protocol_type,
                    "group_state": g.state.value,
                }
                for g in result.groups
            ],
        )

    async def describe_groups(self, request: KafkaRequest) -> Any:
        body = request.body
        with_operations = bool(getattr(body, "include_authorized_operations", False))
        result = self.coordinator.describe_groups(DescribeGroupsParams(tuple(body.groups)))
        return build(
            response_schema(request),
            groups=[
                {
                    "error_code": error_code(g.error),
                    "group_id": g.group_id,
                    "group_state": g.state.value if g.state is not None else "",
                    "protocol_type": g.protocol_type,
                    "protocol_data": g.protocol,
                    "members": [
                        {
                            "member_id": m.member_id,
                            "group_instance_id": None,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata,
                            "member_assignment": m.assignment,
                        }
                        for m in g.members
                    ],
                    "authorized_operations": (
                        self.coordinator.group_operations(g.group_id)
                        if with_operations and g.error is None
                        else AUTHORIZED_OPERATIONS_OMITTED
                    ),
                }
                for g in result.groups
            ],
        )

    async def delete_groups(self, request: KafkaRequest) -> Any:
        result = await self.coordinator.delete_groups(
            DeleteGroupsParams(tuple(request.body.groups_names))
        )
        return build(
            response_schema(request),
            results=[
                {"group_id": g.group_id, "error_code": error_code(g.error)} for g in result.groups
            ],
        )


def group_table(broker: BrokerServices) -> Mapping[int, tuple[int, int, GroupHandler]]:
    """The group requests' handler table of ``broker``'s Kafka listeners."""
    return KafkaGroupApis(
        AuthorizedGroups(broker.groups, broker), lambda tp: tp in broker.metadata.partitions
    ).table()
