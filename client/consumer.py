"""The consumer: Kafka's ``KafkaConsumer`` over kafkasim's Rpc port.

Theory of operation
-------------------
The consumer owns a set of *assigned* partitions and, for each, a *position*: the offset of the
next record ``poll`` will return. Partitions are assigned either by the caller (``assign``) or
by the consumer group (``subscribe``; ``client.consumer_group`` has the protocol). Everything
runs on the caller's event loop; the only background tasks are a group member's heartbeat
and a join that outlasts a poll.

0. **Groups.** With ``subscribe``, each ``poll`` first makes sure the member is in the current
   generation: when the heartbeat (or a failed commit) says the group is rebalancing, ``poll``
   commits the positions (with ``enable.auto.commit``), tells the rebalance listener the
   partitions are revoked, rejoins (a join outlasting the poll's timeout goes on in the
   background; a later poll picks up its result), and takes the new assignment (the eager
   protocol: every partition is revoked, positions start again from the committed offsets).
   Auto commit also commits the positions every ``auto.commit.interval.ms`` from ``poll``,
   and ``close`` commits once more before leaving the group. Records ``poll`` returned before
   a rebalance are therefore committed before anyone else gets their partitions.
1. **Positions.** A newly assigned partition has no position. With a ``group.id`` the first
   ``poll`` asks the coordinator for the committed offsets; partitions without one (or
   without a group) resolve per ``auto.offset.reset`` with a ListOffsets request to the
   leader: ``earliest`` is the log start offset, ``latest`` the high watermark. ``seek``,
   ``seek_to_beginning`` and ``seek_to_end`` set or reset a position directly.
2. **Fetching.** ``poll`` sends one Fetch (``replica_id=-1``) per leader for every assigned
   partition that has a position, no buffered records and no fetch in flight, carrying the
   leader epoch from the metadata (KIP-320) and long-polling up to ``fetch.max.wait.ms`` for
   ``fetch.min.bytes``. It returns as soon as any fetch brings records; the others stay in
   flight for the next ``poll`` (as Kafka's fetcher does). The broker never returns a record
   at or above the high watermark, so neither does the consumer.
3. **Returning records.** A fetch returns whole batches: records below the position (the start
   of a batch the position falls into) are skipped. ``poll`` returns at most
   ``max.poll.records``, per partition in offset order, and advances each position past the
   last record it returned; the rest stay buffered. A fetch answered for an offset that is no
   longer the position (a ``seek`` happened meanwhile) is dropped.
4. **Errors.** NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
   UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, KAFKA_STORAGE_ERROR and a broken
   connection refresh the metadata before the partition is fetched again (after
   ``retry.backoff.ms``). OFFSET_OUT_OF_RANGE resets the position per ``auto.offset.reset``;
   with ``none`` it is raised to the caller. ListOffsets calls retry retriable errors through
   tenacity until ``default.api.timeout.ms`` has passed on the injected clock.

Error tree (all from :mod:`common.errors` except the last)::

    KafkasimError
    ├── KafkaError
    │   ├── OffsetOutOfRangeError     auto.offset.reset=none and no valid position
    │   ├── InvalidConfigError        a bad or unknown config key (named)
    │   └── ...                       a ListOffsets error after its retries
    ├── CommitFailedError             the group rebalanced before the commit (client.consumer_group)
    └── ConsumerClosedError           used after close

Deviations from Kafka: ``isolation.level`` is sent but both levels read up to the high
watermark, because kafkasim has no transactions (the last stable offset *is* the high
watermark); ``position`` never blocks: it is None while a reset is pending (the next ``poll``
resolves it); no pattern subscriptions and no cooperative rebalancing.

Not thread-safe: one event loop owns a consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kafkasim import proto
from kafkasim.client.assignors import assignor_for
from kafkasim.client.consumer_group import CommitFailedError, GroupMembership, GroupSettings
from kafkasim.client.network import INVALID_METADATA_CODES, NetworkClient
from kafkasim.client.requests import fetch_request
from kafkasim.common.clock import Clock
from kafkasim.common.config import Config, ConfigDef, ConfigKey, ConfigType
from kafkasim.common.errors import (
    InvalidConfigError,
    InvalidGroupIdError,
    InvalidTopicError,
    KafkaError,
    KafkasimError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import TimestampType, decode_batch, iter_batches

logger = logging.getLogger(__name__)

__all__ = [
    "CONSUMER_CONFIG",
    "CommitFailedError",
    "Consumer",
    "ConsumerClosedError",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
]

_OFFSET_OUT_OF_RANGE: Final = OffsetOutOfRangeError.code
_ISOLATION_LEVELS: Final = {"read_uncommitted": 0, "read_committed": 1}
_client_ids = itertools.count(1)

_I, _L, _S, _LST, _B = (
    ConfigType.INT,
    ConfigType.LONG,
    ConfigType.STRING,
    ConfigType.LIST,
    ConfigType.BOOLEAN,
)

CONSUMER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("bootstrap.servers", _LST, None, "host:port of brokers to ask for metadata."),
    ConfigKey("client.id", _S, "", "A name for logs; default consumer-N."),
    ConfigKey(
        "group.id",
        _S,
        None,
        "The consumer group: needed by subscribe(), commit() and committed().",
    ),
    ConfigKey(
        "session.timeout.ms",
        _I,
        10_000,
        "A member silent this long is removed from the group (within the broker's "
        "group.min/max.session.timeout.ms).",
        low=1,
    ),
    ConfigKey("heartbeat.interval.ms", _I, 3000, "Time between heartbeats.", low=1),
    ConfigKey(
        "max.poll.interval.ms",
        _I,
        300_000,
        "Longest time between polls before the member leaves the group; also the rebalance "
        "timeout.",
        low=1,
    ),
    ConfigKey("enable.auto.commit", _B, True, "Commit positions from poll() and close()."),
    ConfigKey("auto.commit.interval.ms", _I, 5000, "Time between auto commits.", low=0),
    ConfigKey(
        "partition.assignment.strategy",
        _LST,
        ["range"],
        "Assignors offered to the group, most preferred first: range, roundrobin (or "
        "Kafka's class names).",
    ),
    ConfigKey(
        "metadata.max.age.ms",
        _L,
        300_000,
        "The group leader re-reads the subscribed topics this often and asks for a new "
        "assignment when their partition counts changed.",
        low=0,
    ),
    ConfigKey(
        "allow.auto.create.topics",
        _B,
        True,
        "Let the broker create subscribed topics that do not exist "
        "(with its auto.create.topics.enable).",
    ),
    ConfigKey(
        "auto.offset.reset",
        _S,
        "latest",
        "Where to start without a valid position: earliest (log start), latest (high "
        "watermark) or none (raise OFFSET_OUT_OF_RANGE).",
        choices=("latest", "earliest", "none"),
    ),
    ConfigKey("fetch.min.bytes", _I, 1, "Bytes a fetch waits for (up to the wait).", low=0),
    ConfigKey("fetch.max.wait.ms", _I, 500, "Longest a fetch waits for fetch.min.bytes.", low=0),
    ConfigKey(
        "fetch.max.bytes",
        _I,
        52_428_800,
        "Most bytes per fetch response (one batch more if the first is larger).",
        low=0,
    ),
    ConfigKey(
        "max.partition.fetch.bytes",
        _I,
        1_048_576,
        "Most bytes per partition in a fetch response (one batch more if the first is larger).",
        low=0,
    ),
    ConfigKey("max.poll.records", _I, 500, "Most records one poll() returns.", low=1),
    ConfigKey(
        "isolation.level",
        _S,
        "read_uncommitted",
        "Sent to the broker; without transactions both levels read up to the high watermark.",
        choices=tuple(_ISOLATION_LEVELS),
    ),
    ConfigKey("request.timeout.ms", _I, 30_000, "How long to wait for an answer.", low=0),
    ConfigKey(
        "default.api.timeout.ms",
        _I,
        60_000,
        "Bound of offset lookups (beginning/end offsets, offsets_for_times), retries included.",
        low=0,
    ),
    ConfigKey("retry.backoff.ms", _L, 100, "Wait before a failed request is retried.", low=0),
)


def _check_required(config: Config) -> None:
    if not config["bootstrap.servers"]:
        raise InvalidConfigError(
            'Missing required configuration "bootstrap.servers" which has no default value.'
        )


CONSUMER_CONFIG = ConfigDef(CONSUMER_KEYS, rules=(_check_required,), kind="consumer configuration")


class ConsumerRebalanceListener:
    """Told of partitions taken away before a rebalance and given after it (Kafka's
    ``ConsumerRebalanceListener``); override either coroutine."""

    async def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        return None

    async def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        return None


CommitCallback = Callable[[dict[TopicPartition, int], BaseException | None], object]


class ConsumerClosedError(KafkasimError):
    """The consumer was used after ``close``."""


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as ``poll`` returns it (Kafka's ``ConsumerRecord``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(slots=True)
class _PartitionState:
    """An assigned partition. ``position`` is None while a reset (to ``reset_to``) is pending;
    ``buffered`` holds fetched records at and above ``position``, in offset order."""

    position: int | None = None
    reset_to: str | None = None  # "earliest" / "latest"; None: auto.offset.reset decides
    buffered: deque[ConsumerRecord] | None = None
    in_flight: bool = False
    retry_at_ms: int = 0  # after an error, not fetched again before this (monotonic)


class Consumer:
    """Kafka's consumer with manual assignment (``assign``); see the module doc.

    ``config`` takes Kafka's key names (:data:`CONSUMER_KEYS`); ``transport`` is the Rpc port
    (gRPC or the simulation's network) and stays the caller's to close; ``clock`` measures
    every timeout. Use as ``async with Consumer(...) as c``, or call :meth:`close`.
    """

    def __init__(
        self, config: Mapping[str, object], *, transport: ClientTransport, clock: Clock
    ) -> None:
        self.config = CONSUMER_CONFIG.parse(config)
        cfg = self.config
        self.client_id: str = cfg["client.id"] or f"consumer-{next(_client_ids)}"
        self.clock = clock
        # Its retry policy is the consumer's: retry.backoff.ms until default.api.timeout.ms.
        self._client = NetworkClient(
            transport,
            cfg["bootstrap.servers"],
            clock,
            request_timeout_ms=cfg["request.timeout.ms"],
            delivery_timeout_ms=cfg["default.api.timeout.ms"],
            retry_backoff_ms=cfg["retry.backoff.ms"],
        )
        self._auto_offset_reset: str = cfg["auto.offset.reset"]
        self._request_timeout_s = cfg["request.timeout.ms"] / 1000
        self._backoff_ms: int = cfg["retry.backoff.ms"]
        self._assignment: dict[TopicPartition, _PartitionState] = {}
        self._ready: deque[TopicPartition] = deque()  # partitions with buffered records
        self._fetches: set[asyncio.Task[None]] = set()
        self._metadata_stale = True
        self._fetch_error: KafkasimError | None = None  # raised by the next poll
        self._closed = False
        self._subscription: tuple[str, ...] | None = None
        self._listener = ConsumerRebalanceListener()
        self._auto_commit: bool = cfg["enable.auto.commit"] and cfg["group.id"] is not None
        self._next_auto_commit_ms = 0
        self._next_metadata_check_ms = 0
        self._commits: set[asyncio.Task[None]] = set()
        self._group: GroupMembership | None = None
        self._join: asyncio.Task[list[TopicPartition]] | None = None
        if cfg["group.id"] is not None:
            if not cfg["group.id"]:
                raise InvalidConfigError("group.id must not be empty")
            self._group = GroupMembership(
                GroupSettings(
                    group_id=cfg["group.id"],
                    client_id=self.client_id,
                    session_timeout_ms=cfg["session.timeout.ms"],
                    rebalance_timeout_ms=cfg["max.poll.interval.ms"],
                    heartbeat_interval_ms=cfg["heartbeat.interval.ms"],
                    retry_backoff_ms=cfg["retry.backoff.ms"],
                    request_timeout_ms=cfg["request.timeout.ms"],
                    assignors=tuple(
                        assignor_for(name) for name in cfg["partition.assignment.strategy"]
                    ),
                ),
                self._client,
                clock,
            )

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    # -- assignment and positions -----------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing the previous assignment; partitions kept
        from it keep their positions)."""
        self._check_open()
        if self._subscription is not None:
            raise KafkasimError(
                "Subscription to topics, partitions and pattern are mutually exclusive"
            )
        self._set_assignment(partitions)

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        self._assignment = {tp: self._assignment.get(tp) or _PartitionState() for tp in wanted}
        self._ready = deque(tp for tp in self._ready if tp in self._assignment)
        self._metadata_stale = True

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def subscribe(
        self, topics: Iterable[str], listener: ConsumerRebalanceListener | None = None
    ) -> None:
        """Read the partitions the group assigns from ``topics`` (joining at the next poll).
        An empty list is ``unsubscribe`` (the next poll leaves the group)."""
        self._check_open()
        group = self._require_group()
        wanted = list(topics)
        for topic in wanted:
            if not isinstance(topic, str) or not topic.strip():
                raise InvalidTopicError(
                    f"Topic collection to subscribe to cannot contain null or empty topic: "
                    f"{wanted!r}"
                )
        if self._subscription is None and self._assignment:
            raise KafkasimError(
                "Subscription to topics, partitions and pattern are mutually exclusive"
            )
        if not wanted:
            self.unsubscribe()
            return
        subscription = tuple(sorted(set(wanted)))
        if subscription != self._subscription:
            group.need_rejoin = True
        self._subscription = subscription
        if listener is not None:
            self._listener = listener

    def subscription(self) -> set[str]:
        return set(self._subscription or ())

    def unsubscribe(self) -> None:
        """Stop reading subscribed topics and leave the group (in the background)."""
        self._check_open()
        self._subscription = None
        self._set_assignment([])
        if self._join is not None:
            self._join.cancel()
            self._join = None
        if self._group is not None and self._group.member_id:
            self._spawn(self._group.leave())

    async def commit(
        self,
        offsets: Mapping[TopicPartition, int] | None = None,
        *,
        asynchronous: bool = False,
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition) for the
        group. Synchronous commits raise CommitFailedError when the group has rebalanced;
        ``asynchronous`` returns at once and reports to ``callback(offsets, error)``."""
        self._check_open()
        group = self._require_group()
        to_commit = dict(offsets) if offsets is not None else self._consumed()
        if not to_commit:
            return
        for tp, offset in to_commit.items():
            if offset < 0:
                raise ValueError(f"committed offset must not be negative: {tp} {offset}")
        if not asynchronous:
            await group.commit(to_commit)
            return

        async def commit_in_background() -> None:
            error: BaseException | None = None
            try:
                await group.commit(to_commit)
            except (KafkasimError, RpcError) as e:
                error = e
                logger.info("%s: asynchronous commit failed: %s", self.client_id, e)
            if callback is not None:
                callback(to_commit, error)

        self._spawn(commit_in_background())

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition (None where it has none)."""
        self._check_open()
        return await self._require_group().committed(partitions)

    def _require_group(self) -> GroupMembership:
        if self._group is None:
            raise InvalidGroupIdError(
                "To use the group management or offset commit APIs, you must provide a valid "
                "group.id in the consumer configuration."
            )
        return self._group

    def _consumed(self) -> dict[TopicPartition, int]:
        return {
            tp: state.position
            for tp, state in self._assignment.items()
            if state.position is not None
        }

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._commits.add(task)
        task.add_done_callback(self._commits.discard)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next poll returns records of ``tp`` from ``offset`` on."""
        if offset < 0:
            raise ValueError(f"seek offset must not be negative: {offset}")
        state = self._state(tp)
        self._set_position(tp, state, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Start from the log start offset (resolved by the next poll)."""
        self._request_reset(partitions, "earliest")

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Start from the high watermark (resolved by the next poll)."""
        self._request_reset(partitions, "latest")

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record poll returns for ``tp``; None while a reset is
        pending (no position yet, or after seek_to_beginning/end)."""
        return self._state(tp).position

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (UNKNOWN_TOPIC_OR_PARTITION if it has none)."""
        self._check_open()
        async for attempt in self._client.retrying():
            with attempt:
                response = await self._client.refresh_metadata([topic])
                for t in response.topics:
                    if t.name == topic and t.partitions:
                        return sorted(p.partition for p in t.partitions)
                raise UnknownTopicOrPartitionError(f"Topic {topic} not present in metadata")
        raise AssertionError("unreachable")  # pragma: no cover

    # -- offset lookups ---------------------------------------------------------------------

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        found = await self._list_offsets({tp: EARLIEST_TIMESTAMP for tp in partitions})
        return {tp: offset for tp, (offset, _) in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark of each partition (the offset the next record will get)."""
        found = await self._list_offsets({tp: LATEST_TIMESTAMP for tp in partitions})
        return {tp: offset for tp, (offset, _) in found.items()}

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """Per partition, the earliest (offset, timestamp) whose timestamp is at least the one
        given, or None if every record below the high watermark is older."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}. It must be >= 0")
        found = await self._list_offsets(dict(timestamps))
        return {tp: (None if offset < 0 else (offset, ts)) for tp, (offset, ts) in found.items()}

    # -- poll -------------------------------------------------------------------------------

    async def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records, waiting up to ``timeout_ms`` for some."""
        self._check_open()
        if not self._assignment and self._subscription is None:
            raise KafkasimError(
                "Consumer is not subscribed to any topics or assigned any partitions"
            )
        deadline = self.clock.monotonic_ms() + max(timeout_ms, 0)
        while True:
            if self._subscription is not None and not await self._poll_group(deadline):
                return []  # still joining the group: the next poll waits on
            self._raise_fetch_error()
            records = self._drain()
            if records:
                return records
            await self._resolve_positions()
            await self._maybe_refresh_metadata()
            remaining = deadline - self.clock.monotonic_ms()
            # Fetches outlive this poll if it times out first: the next poll finds their
            # records buffered (poll(0) thus returns what earlier polls fetched).
            self._send_fetches(max(0, min(remaining, self.config["fetch.max.wait.ms"])))
            if remaining <= 0:
                return []
            if self._fetches:
                await asyncio.wait(
                    set(self._fetches),
                    timeout=remaining / 1000,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            else:  # every partition is backing off after an error
                await asyncio.sleep(min(remaining, max(self._backoff_ms, 1)) / 1000)

    async def close(self) -> None:
        """Commit (with auto commit), leave the group, stop in-flight fetches; the consumer
        cannot be used afterwards."""
        if self._closed:
            return
        group = self._group
        if self._join is not None:
            self._join.cancel()
            with contextlib.suppress(asyncio.CancelledError, KafkasimError, RpcError):
                await self._join
            self._join = None
        if group is not None:
            if self._auto_commit and group.in_generation:
                await self._commit_quietly("close")
            if self._subscription is not None and group.member_id:
                await self._listener.on_partitions_revoked(sorted(self._assignment))
            await group.stop_heartbeats()
            await group.leave()
        for task in list(self._commits):
            with contextlib.suppress(asyncio.CancelledError, KafkasimError, RpcError):
                await task
        self._closed = True
        for task in self._fetches:
            task.cancel()
        for task in list(self._fetches):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fetches.clear()

    # -- the group --------------------------------------------------------------------------

    async def _poll_group(self, deadline_ms: int) -> bool:
        """Rejoin when the group rebalances; auto commit; the leader watches partition counts.

        False while a join is under way past ``deadline_ms``: as Kafka's poll, ours returns at
        its timeout and the join goes on in the background until a later poll finds it done.
        """
        group = self._group
        assert group is not None and self._subscription is not None
        now = self.clock.monotonic_ms()
        group.last_poll_ms = now
        if group.is_leader and group.in_generation and now >= self._next_metadata_check_ms:
            self._next_metadata_check_ms = now + self.config["metadata.max.age.ms"]
            counts = await self._partition_counts(self._subscription)
            if counts != group.assigned_counts:
                logger.info(
                    "%s: subscribed topics changed (%s → %s); asking for a new assignment",
                    self.client_id,
                    group.assigned_counts,
                    counts,
                )
                group.need_rejoin = True
        if group.need_rejoin and self._join is None:
            if group.generation >= 0 and group.member_id:
                if self._auto_commit:
                    await self._commit_quietly("rebalance")
                await self._listener.on_partitions_revoked(sorted(self._assignment))
            self._set_assignment([])
            self._join = asyncio.get_running_loop().create_task(
                group.join(self._subscription, self._partition_counts),
                name=f"{self.client_id}-join",
            )
        if self._join is not None:
            remaining_s = max(deadline_ms - self.clock.monotonic_ms(), 0) / 1000
            await asyncio.wait({self._join}, timeout=remaining_s)
            if not self._join.done():
                return False
            join, self._join = self._join, None
            partitions = join.result()  # a join error (e.g. INVALID_SESSION_TIMEOUT) raises
            self._set_assignment(partitions)
            self._next_auto_commit_ms = (
                self.clock.monotonic_ms() + self.config["auto.commit.interval.ms"]
            )
            self._next_metadata_check_ms = (
                self.clock.monotonic_ms() + self.config["metadata.max.age.ms"]
            )
            await self._listener.on_partitions_assigned(list(partitions))
        elif self._auto_commit and now >= self._next_auto_commit_ms:
            self._next_auto_commit_ms = now + self.config["auto.commit.interval.ms"]
            self._auto_commit_async()
        return True

    def _auto_commit_async(self) -> None:
        consumed = self._consumed()
        if consumed and self._group is not None:
            group = self._group

            async def commit() -> None:
                try:
                    await group.commit(consumed)
                except (KafkasimError, RpcError) as e:
                    logger.info("%s: auto commit failed: %s", self.client_id, e)

            self._spawn(commit())

    async def _commit_quietly(self, why: str) -> None:
        """A synchronous commit of the positions before a rebalance or close; a failure is
        logged (the records since the last commit will be read again by someone)."""
        consumed = self._consumed()
        if not consumed or self._group is None:
            return
        try:
            await self._group.commit(consumed)
        except (KafkasimError, RpcError) as e:
            logger.warning("%s: commit before %s failed: %s", self.client_id, why, e)

    async def _partition_counts(self, topics: Sequence[str]) -> dict[str, int]:
        """Partition counts of the subscribed topics that exist (the leader's assignor input)."""
        response = await self._client.refresh_metadata(
            list(topics), allow_auto_topic_creation=self.config["allow.auto.create.topics"]
        )
        return {
            t.name: len(t.partitions) for t in response.topics if t.partitions and t.name in topics
        }

    # -- internals --------------------------------------------------------------------------

    def _raise_fetch_error(self) -> None:
        error, self._fetch_error = self._fetch_error, None
        if error is not None:
            raise error

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("This consumer has already been closed.")

    def _state(self, tp: TopicPartition) -> _PartitionState:
        self._check_open()
        state = self._assignment.get(tp)
        if state is None:
            raise KafkasimError(f"No current assignment for partition {tp}")
        return state

    def _set_position(self, tp: TopicPartition, state: _PartitionState, offset: int | None) -> None:
        state.position = offset
        state.buffered = None
        state.retry_at_ms = 0
        with contextlib.suppress(ValueError):
            self._ready.remove(tp)

    def _request_reset(self, partitions: Iterable[TopicPartition] | None, to: str) -> None:
        tps = list(self._assignment) if partitions is None else list(partitions)
        for tp in tps:
            state = self._state(tp)
            self._set_position(tp, state, None)
            state.reset_to = to

    async def _resolve_positions(self) -> None:
        """Give every partition without a position one (ListOffsets per the reset policy)."""
        pending = {tp: s for tp, s in self._assignment.items() if s.position is None}
        if not pending:
            return
        undefined = [tp for tp, s in pending.items() if s.reset_to is None]
        if undefined and self._group is not None:
            committed = await self._group.committed(undefined)
            for tp, offset in committed.items():
                state = self._assignment.get(tp)
                if offset is not None and state is not None and state.position is None:
                    state.position = offset
                    logger.info(
                        "%s: setting offset for %s to the committed offset %d",
                        self.client_id,
                        tp,
                        offset,
                    )
            pending = {tp: s for tp, s in self._assignment.items() if s.position is None}
            if not pending:
                return
            undefined = [tp for tp, s in pending.items() if s.reset_to is None]
        if undefined and self._auto_offset_reset == "none":
            raise OffsetOutOfRangeError(
                "Undefined offset with no reset policy for partitions: "
                f"[{', '.join(str(tp) for tp in sorted(undefined))}]"
            )
        targets = {
            tp: EARLIEST_TIMESTAMP
            if (s.reset_to or self._auto_offset_reset) == "earliest"
            else LATEST_TIMESTAMP
            for tp, s in pending.items()
        }
        found = await self._list_offsets(targets)
        for tp, (offset, _) in found.items():
            state = self._assignment.get(tp)
            if state is not None and state.position is None and offset >= 0:
                state.position = offset
                state.reset_to = None
                logger.info(
                    "%s: resetting offset for %s to position %d", self.client_id, tp, offset
                )

    async def _maybe_refresh_metadata(self) -> None:
        missing = any(self._client.metadata.leader(tp) < 0 for tp in self._assignment)
        if not (self._metadata_stale or missing):
            return
        topics = sorted({tp.topic for tp in self._assignment})
        try:
            await self._client.refresh_metadata(topics)
            self._metadata_stale = False
        except (RpcError, KafkaError) as e:
            logger.info("%s: metadata refresh failed: %s", self.client_id, e)

    def _send_fetches(self, max_wait_ms: int) -> None:
        """One Fetch per leader for the partitions ready to be fetched."""
        now_ms = self.clock.monotonic_ms()
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp, state in self._assignment.items():
            if (
                state.position is None
                or state.buffered
                or state.in_flight
                or state.retry_at_ms > now_ms
            ):
                continue
            address = self._client.metadata.leader_address(tp)
            if address is None:
                self._metadata_stale = True
                continue
            by_leader.setdefault(address, []).append(tp)
        cfg = self.config
        metadata = self._client.metadata
        for address, tps in by_leader.items():
            offsets: dict[TopicPartition, int] = {}
            for tp in tps:
                state = self._assignment[tp]
                assert state.position is not None
                offsets[tp] = state.position
                state.in_flight = True
            request = fetch_request(
                offsets,
                max_wait_ms=max_wait_ms,
                min_bytes=cfg["fetch.min.bytes"],
                max_bytes=cfg["fetch.max.bytes"],
                partition_max_bytes=cfg["max.partition.fetch.bytes"],
                isolation_level=_ISOLATION_LEVELS[cfg["isolation.level"]],
                leader_epochs={tp: metadata.leader_epoch(tp) for tp in tps},
            )
            task = asyncio.get_running_loop().create_task(
                self._fetch(address, request, offsets, max_wait_ms)
            )
            self._fetches.add(task)
            task.add_done_callback(self._fetches.discard)

    async def _fetch(
        self,
        address: str,
        request: pb.FetchRequest,
        offsets: dict[TopicPartition, int],
        max_wait_ms: int,
    ) -> None:
        try:
            response = await self._client.transport.call(
                address,
                proto.METHOD_FETCH,
                request,
                timeout_s=self._request_timeout_s + max_wait_ms / 1000,
            )
        except RpcError as e:
            logger.info("%s: fetch from %s failed: %s", self.client_id, address, e)
            for tp in offsets:
                self._fetch_failed(tp)
            return
        finally:
            for tp in offsets:
                state = self._assignment.get(tp)
                if state is not None:
                    state.in_flight = False
        assert isinstance(response, pb.FetchResponse)
        for part in response.partitions:
            tp = TopicPartition(part.topic, part.partition)
            state = self._assignment.get(tp)
            # Dropped: unassigned, or sought elsewhere while the fetch was in flight.
            if state is None or state.position != offsets.get(tp):
                continue
            try:
                if part.error_code:
                    self._partition_error(tp, state, part.error_code, part.error_message)
                else:
                    self._buffer(tp, state, part.records)
            except KafkasimError as e:
                self._fetch_error = e

    def _buffer(self, tp: TopicPartition, state: _PartitionState, data: bytes) -> None:
        position = state.position
        assert position is not None
        records: deque[ConsumerRecord] = deque()
        next_offset = position
        for pos, _ in iter_batches(data, verify_crc=True):
            header, batch_records = decode_batch(data, pos)
            next_offset = max(next_offset, header.next_offset)
            if header.is_control:
                continue
            timestamp_type = header.timestamp_type
            for r in batch_records:
                if r.offset < position:
                    continue  # the batch began before the position
                records.append(
                    ConsumerRecord(
                        tp.topic,
                        tp.partition,
                        r.offset,
                        r.timestamp,
                        timestamp_type,
                        r.key,
                        r.value,
                        tuple((h.key, h.value) for h in r.headers),
                    )
                )
        if records:
            state.buffered = records
            self._ready.append(tp)
        elif next_offset > position:
            # Only records below the position, or batches emptied by compaction: move on.
            state.position = next_offset

    def _fetch_failed(self, tp: TopicPartition) -> None:
        state = self._assignment.get(tp)
        if state is not None:
            state.retry_at_ms = self.clock.monotonic_ms() + self._backoff_ms
        self._client.metadata.forget_leader(tp)
        self._metadata_stale = True

    def _partition_error(
        self, tp: TopicPartition, state: _PartitionState, code: int, message: str
    ) -> None:
        if code == _OFFSET_OUT_OF_RANGE:
            if self._auto_offset_reset == "none":
                raise OffsetOutOfRangeError(
                    f"Fetch position FetchPosition{{offset={state.position}}} is out of range "
                    f"for partition {tp}"
                )
            logger.info(
                "%s: fetch offset %s is out of range for %s, resetting (%s)",
                self.client_id,
                state.position,
                tp,
                self._auto_offset_reset,
            )
            self._set_position(tp, state, None)
            return
        if code in INVALID_METADATA_CODES:
            logger.info(
                "%s: %s for %s: %s", self.client_id, error_for_code(code).error_name, tp, message
            )
            self._fetch_failed(tp)
            return
        raise error_for_code(code)(message)

    def _drain(self) -> list[ConsumerRecord]:
        """Up to max.poll.records buffered records, partition by partition, advancing positions."""
        limit: int = self.config["max.poll.records"]
        out: list[ConsumerRecord] = []
        while self._ready and len(out) < limit:
            tp = self._ready[0]
            state = self._assignment[tp]
            buffered = state.buffered
            while buffered and len(out) < limit:
                record = buffered.popleft()
                out.append(record)
                state.position = record.offset + 1
            if not buffered:
                state.buffered = None
                self._ready.popleft()
        return out

    async def _list_offsets(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets to each partition's leader; (offset, timestamp) per partition."""
        self._check_open()
        return await self._client.list_offsets(
            timestamps,
            isolation_level=_ISOLATION_LEVELS[self.config["isolation.level"]],
            retrying=self._client.retrying(),
        )
