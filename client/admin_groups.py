"""The admin client's consumer-group calls (part of :class:`client.admin.AdminClient`): list
groups, describe them with their members' assignments, read and delete their committed
offsets, and the end offsets that give each partition's lag.

Group calls go to the group's coordinator (FindCoordinator to any broker), ListGroups to every
live broker (each knows only the groups it coordinates), ListOffsets to each partition's
leader. Coordinator errors (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS) and unreachable brokers are retried under the admin client's
policy (``NetworkClient.retrying``); anything else raises the Kafka error class naming the
group.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kafkasim import proto
from kafkasim.client.consumer_group import (
    COORDINATOR_ERRORS,
    find_coordinator,
    offset_commit_request,
)
from kafkasim.client.network import NetworkClient
from kafkasim.common.errors import KafkaError, error_for_code
from kafkasim.common.group_protocol import PROTOCOL_TYPE, decode_assignment
from kafkasim.common.sentinels import LATEST_TIMESTAMP
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead
    protocol_type: str
    assignor: str
    members: tuple[MemberDescription, ...]
    coordinator: int


@dataclass(frozen=True, slots=True)
class PartitionLag:
    committed: int
    log_end_offset: int
    lag: int


class GroupAdmin:
    """Mixed into ``AdminClient``, which provides ``_client``."""

    _client: NetworkClient

    async def _coordinator_call(self, group_id: str, method: str, request: object) -> object:
        """One call to ``group_id``'s coordinator, looked up again after a coordinator error."""
        async for attempt in self._client.retrying():
            with attempt:
                _, address = await find_coordinator(self._client, group_id)
                response = await self._client.transport.call(
                    address,
                    method,
                    request,  # type: ignore[arg-type]
                    timeout_s=self._client.timeout_s,
                )
                code = _first_error(response)
                if code in COORDINATOR_ERRORS:
                    raise error_for_code(code)(f"group {group_id}")
                return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def list_groups(self) -> list[GroupListing]:
        """Every group any live broker coordinates, sorted by id."""
        response = await self._client.call_any(
            proto.METHOD_DESCRIBE_CLUSTER, pb.DescribeClusterRequest()
        )
        assert isinstance(response, pb.DescribeClusterResponse)
        found: dict[str, GroupListing] = {}
        for broker in response.brokers:
            async for attempt in self._client.retrying():
                with attempt:
                    answer = await self._client.transport.call(
                        f"{broker.host}:{broker.port}",
                        proto.METHOD_LIST_GROUPS,
                        pb.ListGroupsRequest(),
                        timeout_s=self._client.timeout_s,
                    )
            assert isinstance(answer, pb.ListGroupsResponse)
            if answer.error_code:
                raise error_for_code(answer.error_code)(f"ListGroups on broker {broker.node_id}")
            for g in answer.groups:
                found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state)
        return [found[g] for g in sorted(found)]

    async def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """Each group's state, assignor and members with their partitions (a group nobody
        knows is described as Dead, as Kafka does)."""
        out: list[GroupDescription] = []
        for group_id in group_ids:
            coordinator, _ = await self._find(group_id)
            response = await self._coordinator_call(
                group_id, proto.METHOD_DESCRIBE_GROUPS, pb.DescribeGroupsRequest(groups=[group_id])
            )
            assert isinstance(response, pb.DescribeGroupsResponse)
            g = response.groups[0]
            if g.error_code:
                raise error_for_code(g.error_code)(f"describe group {group_id}")
            members = tuple(
                MemberDescription(
                    m.member_id,
                    m.client_id,
                    m.client_host,
                    tuple(sorted(decode_assignment(m.member_assignment).partitions))
                    if m.member_assignment and g.protocol_type == PROTOCOL_TYPE
                    else (),
                )
                for m in g.members
            )
            out.append(
                GroupDescription(
                    group_id, g.group_state, g.protocol_type, g.protocol_data, members, coordinator
                )
            )
        return out

    async def _find(self, group_id: str) -> tuple[int, str]:
        async for attempt in self._client.retrying():
            with attempt:
                return await find_coordinator(self._client, group_id)
        raise AssertionError("unreachable")  # pragma: no cover

    async def list_group_offsets(
        self, group_id: str, *, require_stable: bool = False
    ) -> dict[TopicPartition, int]:
        """Every committed offset of ``group_id``. ``require_stable`` (KIP-447, Kafka's
        ``ListConsumerGroupOffsetsOptions.requireStable``): a partition with a pending
        transactional commit raises UNSTABLE_OFFSET_COMMIT (retriable) instead of answering
        the offset it may be about to replace."""
        response = await self._coordinator_call(
            group_id,
            proto.METHOD_OFFSET_FETCH,
            pb.OffsetFetchRequest(group_id=group_id, require_stable=require_stable),
        )
        assert isinstance(response, pb.OffsetFetchResponse)
        if response.error_code:
            raise error_for_code(response.error_code)(f"offsets of group {group_id}")
        out: dict[TopicPartition, int] = {}
        for p in response.partitions:
            if p.error_code:
                raise error_for_code(p.error_code)(f"offset of {p.topic}-{p.partition}")
            if p.committed_offset >= 0:
                out[TopicPartition(p.topic, p.partition)] = p.committed_offset
        return dict(sorted(out.items()))

    async def group_lag(self, group_id: str) -> dict[TopicPartition, PartitionLag]:
        """For every partition the group has committed: the committed offset, the high
        watermark (the end a consumer can read to) and the lag between them."""
        committed = await self.list_group_offsets(group_id)
        ends = await self.list_offsets(list(committed)) if committed else {}
        return {
            tp: PartitionLag(offset, ends[tp], max(0, ends[tp] - offset))
            for tp, offset in committed.items()
        }

    async def alter_group_offsets(self, group_id: str, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets`` for ``group_id`` from outside the group (generation -1, as
        Kafka's tools do): only while the group has no members (else UNKNOWN_MEMBER_ID)."""
        request = offset_commit_request(group_id, offsets)
        response = await self._coordinator_call(group_id, proto.METHOD_OFFSET_COMMIT, request)
        assert isinstance(response, pb.OffsetCommitResponse)
        for part in response.partitions:
            if part.error_code:
                raise error_for_code(part.error_code)(
                    f"committing {part.topic}-{part.partition} for group '{group_id}'"
                )

    async def delete_groups(self, group_ids: Iterable[str]) -> None:
        """Delete empty groups and their offsets (NON_EMPTY_GROUP while members remain,
        GROUP_ID_NOT_FOUND for an unknown group)."""
        for group_id in group_ids:
            response = await self._coordinator_call(
                group_id,
                proto.METHOD_DELETE_GROUPS,
                pb.DeleteGroupsRequest(groups_names=[group_id]),
            )
            assert isinstance(response, pb.DeleteGroupsResponse)
            for r in response.results:
                if r.error_code:
                    raise error_for_code(r.error_code)(f"group '{r.group_id}'")

    async def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaError | None]:
        """Kafka's ``deleteConsumerGroupOffsets``: remove the group's committed offsets of
        ``partitions``. Per partition: None when deleted (or none was committed), else its
        error (GROUP_SUBSCRIBED_TO_TOPIC while a member of the group consumes the topic,
        UNKNOWN_TOPIC_OR_PARTITION). A group-level error raises (GROUP_ID_NOT_FOUND,
        NON_EMPTY_GROUP for a group of another protocol with members)."""
        request = pb.OffsetDeleteRequest(group_id=group_id)
        for tp in partitions:
            request.partitions.add(topic=tp.topic, partition=tp.partition)
        response = await self._coordinator_call(group_id, proto.METHOD_OFFSET_DELETE, request)
        assert isinstance(response, pb.OffsetDeleteResponse)
        if response.error_code:
            raise error_for_code(response.error_code)(f"group '{group_id}'")
        return {
            TopicPartition(p.topic, p.partition): (
                error_for_code(p.error_code)(f"{p.topic}-{p.partition} of group '{group_id}'")
                if p.error_code
                else None
            )
            for p in response.partitions
        }

    async def list_offsets(
        self, partitions: Sequence[TopicPartition], timestamp: int = LATEST_TIMESTAMP
    ) -> dict[TopicPartition, int]:
        """The offset per partition for ``timestamp`` (-1 latest: the high watermark; -2
        earliest: the log start offset), from each leader."""
        found = await self._client.list_offsets(dict.fromkeys(partitions, timestamp))
        return {tp: offset for tp, (offset, _) in found.items()}


def _first_error(response: object) -> int:
    """The first error code in a group response (top level, per group, or per partition)."""
    code = getattr(response, "error_code", 0)
    if code:
        return int(code)
    for field in ("groups", "results", "partitions"):
        for item in getattr(response, field, ()):
            item_code = getattr(item, "error_code", 0)
            if item_code:
                return int(item_code)
    return 0


__all__ = [
    "GroupAdmin",
    "GroupDescription",
    "GroupListing",
    "MemberDescription",
    "PartitionLag",
]
