"""The consumer's use of its group on ``poll`` (the hooks of Kafka's ``ConsumerCoordinator``):
rejoining when the group rebalances, auto commit, and the commit calls of the public API.

The group protocol itself (FindCoordinator, JoinGroup/SyncGroup, heartbeats, OffsetCommit and
OffsetFetch) is :class:`~client.consumer_group.GroupMembership`; this module decides when the
consumer uses it:

1. **Rebalancing.** When the heartbeat (or a failed commit) says the group is rebalancing,
   :meth:`ConsumerCoordinator.poll` commits the positions (with ``enable.auto.commit``), tells
   the rebalance listener the partitions are revoked, rejoins (a join outlasting the poll's
   timeout goes on in the background; a later poll picks up its result), and takes the new
   assignment (the eager protocol: every partition is revoked, positions start again from the
   committed offsets). Records ``poll`` returned before a rebalance are therefore committed
   before anyone else gets their partitions.
2. **Partition counts.** The group leader re-reads the subscribed topics every
   ``metadata.max.age.ms`` and asks for a new assignment when their partition counts changed.
3. **Auto commit** commits the positions every ``auto.commit.interval.ms`` from ``poll`` (in
   the background; a failure is logged), before a rebalance and on ``close``.

Not thread-safe: one event loop owns a consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any

from kafkasim.client.assignors import assignor_for
from kafkasim.client.consumer_group import GroupMembership, GroupSettings
from kafkasim.client.consumer_types import CommitCallback, ConsumerRebalanceListener
from kafkasim.client.network import NetworkClient
from kafkasim.client.subscription_state import SubscriptionState
from kafkasim.common.clock import Clock
from kafkasim.common.config import Config
from kafkasim.common.errors import KafkasimError
from kafkasim.common.rpc import RpcError
from kafkasim.common.types import TopicPartition

__all__ = ["ConsumerCoordinator"]

logger = logging.getLogger(__name__)


class ConsumerCoordinator:
    """The group side of one consumer with a ``group.id``; see the module doc.

    ``assign`` replaces the consumer's assignment (the consumer also marks its metadata stale).
    """

    def __init__(
        self,
        config: Config,
        client_id: str,
        client: NetworkClient,
        clock: Clock,
        *,
        subscriptions: SubscriptionState,
        assign: Callable[[Iterable[TopicPartition]], None],
    ) -> None:
        self._config = config
        self._client_id = client_id
        self._client = client
        self._clock = clock
        self._subscriptions = subscriptions
        self._assign = assign
        self.listener = ConsumerRebalanceListener()
        self._auto_commit: bool = config["enable.auto.commit"]
        self._next_auto_commit_ms = 0
        self._next_metadata_check_ms = 0
        self._tasks: set[asyncio.Task[None]] = set()  # commits and leaves in the background
        self._join: asyncio.Task[list[TopicPartition]] | None = None
        self.group = GroupMembership(
            GroupSettings(
                group_id=config["group.id"],
                client_id=client_id,
                session_timeout_ms=config["session.timeout.ms"],
                rebalance_timeout_ms=config["max.poll.interval.ms"],
                heartbeat_interval_ms=config["heartbeat.interval.ms"],
                retry_backoff_ms=config["retry.backoff.ms"],
                request_timeout_ms=config["request.timeout.ms"],
                assignors=tuple(
                    assignor_for(name) for name in config["partition.assignment.strategy"]
                ),
                require_stable=config["isolation.level"] == "read_committed",
            ),
            client,
            clock,
        )

    async def poll(self, deadline_ms: int) -> bool:
        """Rejoin when the group rebalances; auto commit; the leader watches partition counts.

        False while a join is under way past ``deadline_ms``: as Kafka's poll, ours returns at
        its timeout and the join goes on in the background until a later poll finds it done.
        """
        group = self.group
        subscription = self._subscriptions.subscription
        assert subscription is not None
        now = self._clock.monotonic_ms()
        group.last_poll_ms = now
        if group.is_leader and group.in_generation and now >= self._next_metadata_check_ms:
            self._next_metadata_check_ms = now + self._config["metadata.max.age.ms"]
            counts = await self._partition_counts(subscription)
            if counts != group.assigned_counts:
                logger.info(
                    "%s: subscribed topics changed (%s → %s); asking for a new assignment",
                    self._client_id,
                    group.assigned_counts,
                    counts,
                )
                group.need_rejoin = True
        if group.need_rejoin and self._join is None:
            if group.generation >= 0 and group.member_id:
                if self._auto_commit:
                    await self._commit_quietly("rebalance")
                await self.listener.on_partitions_revoked(sorted(self._subscriptions.assignment))
            self._assign([])
            self._join = asyncio.get_running_loop().create_task(
                group.join(subscription, self._partition_counts),
                name=f"{self._client_id}-join",
            )
        if self._join is not None:
            remaining_s = max(deadline_ms - self._clock.monotonic_ms(), 0) / 1000
            await asyncio.wait({self._join}, timeout=remaining_s)
            if not self._join.done():
                return False
            join, self._join = self._join, None
            partitions = join.result()  # a join error (e.g. INVALID_SESSION_TIMEOUT) raises
            self._assign(partitions)
            self._next_auto_commit_ms = (
                self._clock.monotonic_ms() + self._config["auto.commit.interval.ms"]
            )
            self._next_metadata_check_ms = (
                self._clock.monotonic_ms() + self._config["metadata.max.age.ms"]
            )
            await self.listener.on_partitions_assigned(list(partitions))
        elif self._auto_commit and now >= self._next_auto_commit_ms:
            self._next_auto_commit_ms = now + self._config["auto.commit.interval.ms"]
            self._auto_commit_async()
        return True

    def unsubscribe(self) -> None:
        """Stop any join under way and leave the group (in the background)."""
        if self._join is not None:
            self._join.cancel()
            self._join = None
        if self.group.member_id:
            self._spawn(self.group.leave())

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int] | None,
        *,
        asynchronous: bool,
        callback: CommitCallback | None,
    ) -> None:
        """Commit ``offsets`` (default: every position); see ``Consumer.commit``."""
        to_commit = dict(offsets) if offsets is not None else self._subscriptions.consumed()
        if not to_commit:
            return
        for tp, offset in to_commit.items():
            if offset < 0:
                raise ValueError(f"committed offset must not be negative: {tp} {offset}")
        group = self.group
        if not asynchronous:
            await group.commit(to_commit)
            return

        async def commit_in_background() -> None:
            error: BaseException | None = None
            try:
                await group.commit(to_commit)
            except (KafkasimError, RpcError) as e:
                error = e
                logger.info("%s: asynchronous commit failed: %s", self._client_id, e)
            if callback is not None:
                callback(to_commit, error)

        self._spawn(commit_in_background())

    async def close(self) -> None:
        """Stop a join under way, commit (with auto commit), tell the listener, stop the
        heartbeats, leave the group, and wait for the commits in the background."""
        group = self.group
        if self._join is not None:
            self._join.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkasimError, RpcError):
                await self._join
            self._join = None
        if self._auto_commit and group.in_generation:
            await self._commit_quietly("close")
        if self._subscriptions.subscription is not None and group.member_id:
            await self.listener.on_partitions_revoked(sorted(self._subscriptions.assignment))
        await group.stop_heartbeats()
        await group.leave()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, KafkasimError, RpcError):
                await task

    def _auto_commit_async(self) -> None:
        consumed = self._subscriptions.consumed()
        if consumed:
            group = self.group

            async def commit() -> None:
                try:
                    await group.commit(consumed)
                except (KafkasimError, RpcError) as e:
                    logger.info("%s: auto commit failed: %s", self._client_id, e)

            self._spawn(commit())

    async def _commit_quietly(self, why: str) -> None:
        """A synchronous commit of the positions before a rebalance or close; a failure is
        logged (the records since the last commit will be read again by someone)."""
        consumed = self._subscriptions.consumed()
        if not consumed:
            return
        try:
            await self.group.commit(consumed)
        except (KafkasimError, RpcError) as e:
            logger.warning("%s: commit before %s failed: %s", self._client_id, why, e)

    async def _partition_counts(self, topics: Sequence[str]) -> dict[str, int]:
        """Partition counts of the subscribed topics that exist (the leader's assignor input)."""
        response = await self._client.refresh_metadata(
            list(topics), allow_auto_topic_creation=self._config["allow.auto.create.topics"]
        )
        return {
            t.name: len(t.partitions) for t in response.topics if t.partitions and t.name in topics
        }

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
