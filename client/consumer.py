"""The consumer: Kafka's ``KafkaConsumer`` over kafkasim's Rpc port.

Theory of operation
-------------------
The consumer owns a set of *assigned* partitions and, for each, a *position*: the offset of the
next record ``poll`` will return. Partitions are assigned either by the caller (``assign``) or
by the consumer group (``subscribe``). Everything runs on the caller's event loop; the only
background tasks are a group member's heartbeat and a join that outlasts a poll. Each ``poll``:

0. **Group.** With ``subscribe``, makes sure the member is in the current generation,
   rejoining after committing and telling the rebalance listener when the group rebalances,
   and auto commits every ``auto.commit.interval.ms`` (:mod:`client.consumer_coordinator`).
   ``close`` commits once more before leaving the group.
1. **Positions.** Gives each newly assigned partition a position. With a ``group.id`` it asks
   the coordinator for the committed offsets; partitions without one (or without a group)
   resolve per ``auto.offset.reset`` with a ListOffsets request to the leader: ``earliest`` is
   the log start offset, ``latest`` the high watermark. ``seek``, ``seek_to_beginning`` and
   ``seek_to_end`` set or reset a position directly. ListOffsets calls retry retriable errors
   until ``default.api.timeout.ms`` has passed on the injected clock. With
   ``isolation.level=read_committed`` the offsets are fetched stable (KIP-447: OffsetFetch
   ``require_stable``): while a transactional offset commit of a partition is pending the
   coordinator answers UNSTABLE_OFFSET_COMMIT, and the partitions wait without a position
   (``poll`` asks again after ``retry.backoff.ms``) until the transaction completes;
   ``committed()`` retries it until ``default.api.timeout.ms``, as Kafka's consumer.
2. **Fetching.** Sends one Fetch per leader for the partitions ready to be read, long-polling
   up to ``fetch.max.wait.ms``, and returns as soon as any fetch brings records; the others
   stay in flight for the next ``poll`` (as Kafka's fetcher does). Fetched entries of every
   message format (v0/v1 message sets of logs written before Kafka 0.11, v2 batches) are
   decoded, records below the position dropped; errors refresh the metadata or reset the
   position (:mod:`client.fetcher`). The broker never returns a record at or above the high
   watermark, so neither does the consumer.
3. **Returning records.** Returns at most ``max.poll.records``, per partition in offset order,
   and advances each position past the last record it returned; the rest stay buffered.
   Fetched records are decoded column by column (:mod:`client.record_columns`): ``poll``
   makes a ``ConsumerRecord`` of each record it returns, ``poll_batch`` returns the columns
   themselves, one ``RecordColumns`` per partition. Before returning, the next fetches are
   sent for the partitions whose buffer is empty (Kafka's poll does the same).

Error tree (all from :mod:`common.errors` except the last)::

    KafkasimError
    ├── KafkaError
    │   ├── OffsetOutOfRangeError     auto.offset.reset=none and no valid position
    │   ├── InvalidConfigError        a bad or unknown config key (named)
    │   ├── CorruptRecordError        a fetched entry whose checksum or layout does not hold
    │   └── ...                       a ListOffsets error after its retries
    ├── CommitFailedError             the group rebalanced before the commit (client.consumer_types)
    └── ConsumerClosedError           used after close

``isolation.level=read_committed`` reads up to the last stable offset and drops the batches of
aborted transactions (``client.completed_fetch``), as Kafka's consumer does.

Deviations from Kafka: ``position`` never blocks: it is None while a reset is pending (the next
``poll`` resolves it); no pattern subscriptions and no cooperative rebalancing.

Not thread-safe: one event loop owns a consumer.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Mapping

from kafkasim.client.consumer_config import CONSUMER_CONFIG, ISOLATION_LEVELS
from kafkasim.client.consumer_coordinator import ConsumerCoordinator
from kafkasim.client.consumer_types import (
    CommitCallback,
    CommitFailedError,
    ConsumerClosedError,
    ConsumerRebalanceListener,
    ConsumerRecord,
    RecordDeserializationError,
)
from kafkasim.client.fetcher import Fetcher
from kafkasim.client.network import NetworkClient, retriable
from kafkasim.client.record_columns import RecordColumns
from kafkasim.client.serde import split_serde
from kafkasim.client.subscription_state import PartitionState, SubscriptionState
from kafkasim.client.transaction_types import ConsumerGroupMetadata
from kafkasim.common.clock import Clock, SystemClock
from kafkasim.common.errors import (
    InvalidConfigError,
    InvalidGroupIdError,
    InvalidTopicError,
    KafkaError,
    KafkasimError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    UnstableOffsetCommitError,
)
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from kafkasim.common.types import TopicPartition

logger = logging.getLogger(__name__)

__all__ = [
    "CONSUMER_CONFIG",
    "CommitFailedError",
    "Consumer",
    "ConsumerClosedError",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "RecordColumns",
    "RecordDeserializationError",
]

_client_ids = itertools.count(1)


class Consumer:
    """Kafka's consumer, with manual assignment (``assign``) or a group (``subscribe``); see
    the module doc.

    ``config`` takes Kafka's key names (:data:`~client.consumer_config.CONSUMER_KEYS`;
    ``key.deserializer`` and ``value.deserializer`` a name or a callable, :mod:`client.serde`);
    ``transport`` is the Rpc port (gRPC or the simulation's network; default: a
    ``GrpcTransport`` of its own, closed with the consumer, while one given stays the caller's
    to close); ``clock`` measures every timeout (default the system clock). Use as
    ``async with Consumer(...) as c``, or call :meth:`close`.
    """

    def __init__(
        self,
        config: Mapping[str, object],
        *,
        transport: ClientTransport | None = None,
        clock: Clock | None = None,
    ) -> None:
        props, self._key_deserializer, self._value_deserializer = split_serde(
            config, "deserializer"
        )
        self.config = CONSUMER_CONFIG.parse(props)
        cfg = self.config
        # TLS and SASL credentials as the config's security keys say.
        self._transport = transport if transport is not None else client_transport(props)
        self._owns_transport = transport is None
        transport = self._transport
        if clock is None:
            clock = SystemClock()
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
        self._backoff_ms: int = cfg["retry.backoff.ms"]
        self._subscriptions = SubscriptionState()
        self._fetcher = Fetcher(self._subscriptions, self._client, clock, cfg, self.client_id)
        self._closed = False
        self._coordinator: ConsumerCoordinator | None = None
        if cfg["group.id"] is not None:
            if not cfg["group.id"]:
                raise InvalidConfigError("group.id must not be empty")
            self._coordinator = ConsumerCoordinator(
                cfg,
                self.client_id,
                self._client,
                clock,
                subscriptions=self._subscriptions,
                assign=self._set_assignment,
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
        if self._subscriptions.subscription is not None:
            raise KafkasimError(
                "Subscription to topics, partitions and pattern are mutually exclusive"
            )
        self._set_assignment(partitions)

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        self._subscriptions.set_assignment(partitions)
        self._fetcher.metadata_stale = True

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscriptions.assignment)

    def subscribe(
        self, topics: Iterable[str], listener: ConsumerRebalanceListener | None = None
    ) -> None:
        """Read the partitions the group assigns from ``topics`` (joining at the next poll).
        An empty list is ``unsubscribe`` (the next poll leaves the group)."""
        self._check_open()
        coordinator = self._require_coordinator()
        wanted = list(topics)
        for topic in wanted:
            if not isinstance(topic, str) or not topic.strip():
                raise InvalidTopicError(
                    f"Topic collection to subscribe to cannot contain null or empty topic: "
                    f"{wanted!r}"
                )
        subscriptions = self._subscriptions
        if subscriptions.subscription is None and subscriptions.assignment:
            raise KafkasimError(
                "Subscription to topics, partitions and pattern are mutually exclusive"
            )
        if not wanted:
            self.unsubscribe()
            return
        subscription = tuple(sorted(set(wanted)))
        if subscription != subscriptions.subscription:
            coordinator.group.need_rejoin = True
        subscriptions.subscription = subscription
        if listener is not None:
            coordinator.listener = listener

    def subscription(self) -> set[str]:
        return set(self._subscriptions.subscription or ())

    def unsubscribe(self) -> None:
        """Stop reading subscribed topics and leave the group (in the background)."""
        self._check_open()
        self._subscriptions.subscription = None
        self._set_assignment([])
        if self._coordinator is not None:
            self._coordinator.unsubscribe()

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
        await self._require_coordinator().commit(
            offsets, asynchronous=asynchronous, callback=callback
        )

    async def committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition (None where it has none)."""
        self._check_open()
        return await self._require_coordinator().group.committed(partitions)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """Kafka's ``groupMetadata()``: the group, its generation and this member's id, as
        the transactional producer's ``send_offsets_to_transaction`` takes them (the group
        coordinator refuses offsets from a member a rebalance fenced)."""
        self._check_open()
        group = self._require_coordinator().group
        return ConsumerGroupMetadata(
            group.settings.group_id, generation_id=group.generation, member_id=group.member_id
        )

    def _require_coordinator(self) -> ConsumerCoordinator:
        if self._coordinator is None:
            raise InvalidGroupIdError(
                "To use the group management or offset commit APIs, you must provide a valid "
                "group.id in the consumer configuration."
            )
        return self._coordinator

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The next poll returns records of ``tp`` from ``offset`` on."""
        if offset < 0:
            raise ValueError(f"seek offset must not be negative: {offset}")
        state = self._state(tp)
        self._subscriptions.set_position(tp, state, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Start from the log start offset (resolved by the next poll)."""
        self._check_open()
        self._subscriptions.request_reset(partitions, "earliest")

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Start from the high watermark (resolved by the next poll)."""
        self._check_open()
        self._subscriptions.request_reset(partitions, "latest")

    def position(self, tp: TopicPartition) -> int | None:
        """The offset of the next record poll returns for ``tp``; None while a reset is
        pending (no position yet, or after seek_to_beginning/end)."""
        return self._state(tp).position

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition numbers of ``topic``. As Kafka's consumer, the request lets the broker
        create the topic when ``allow.auto.create.topics`` (and the broker's
        ``auto.create.topics.enable``) say so. Retried until ``default.api.timeout.ms``, then
        Kafka's TimeoutException (REQUEST_TIMED_OUT, the last error its cause)."""
        self._check_open()
        allow_create = bool(self.config["allow.auto.create.topics"])
        try:
            async for attempt in self._client.retrying():
                with attempt:
                    response = await self._client.refresh_metadata(
                        [topic], allow_auto_topic_creation=allow_create
                    )
                    for t in response.topics:
                        if t.name == topic and t.partitions:
                            return sorted(p.partition for p in t.partitions)
                    raise UnknownTopicOrPartitionError(f"Topic {topic} not present in metadata")
        except (RpcError, KafkaError) as e:
            if not retriable(e):
                raise
            timeout_ms = self.config["default.api.timeout.ms"]
            raise RequestTimedOutError(
                f"Topic {topic} not present in metadata after {timeout_ms} ms."
            ) from e
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
        if not await self._await_records(timeout_ms):
            return []
        records = self._subscriptions.drain(self.config["max.poll.records"])
        self._fetch_ahead()
        if self._key_deserializer is None and self._value_deserializer is None:
            return records
        return self._deserialize(records)

    async def poll_batch(
        self, timeout_ms: int = 0, *, max_records: int | None = None
    ) -> list[RecordColumns]:
        """As :meth:`poll`, but the records as columns: one :class:`RecordColumns` per
        partition (offsets, timestamps, timestamp types, keys, values, headers), in the
        order ``poll`` would return them, up to ``max_records`` (default max.poll.records)
        in all; no object per record. Positions advance as ``poll`` advances them, and the
        two may be mixed. ``record_columns.to_arrow`` makes a pyarrow Table of the result.
        Deserializers apply per column; one that fails stops the answer before the record
        (RecordDeserializationError when it is the first), as in ``poll``."""
        limit = self.config["max.poll.records"] if max_records is None else max_records
        if limit <= 0:
            raise ValueError(f"max_records must be positive, got {max_records}")
        if not await self._await_records(timeout_ms):
            return []
        parts = self._subscriptions.drain_columns(limit)
        self._fetch_ahead()
        if self._key_deserializer is None and self._value_deserializer is None:
            return parts
        return self._deserialize_columns(parts)

    def _fetch_ahead(self) -> None:
        """Kafka's poll sends the next fetches before returning records (the partitions whose
        buffer it emptied), so that they travel while the caller works."""
        fetcher = self._fetcher
        fetcher.send_fetches(self.config["fetch.max.wait.ms"])

    async def _await_records(self, timeout_ms: int) -> bool:
        """Wait up to ``timeout_ms`` until some partition has buffered records (True)."""
        self._check_open()
        subscriptions = self._subscriptions
        if not subscriptions.assignment and subscriptions.subscription is None:
            raise KafkasimError(
                "Consumer is not subscribed to any topics or assigned any partitions"
            )
        fetcher = self._fetcher
        deadline = self.clock.monotonic_ms() + max(timeout_ms, 0)
        while True:
            if subscriptions.subscription is not None:
                assert self._coordinator is not None
                if not await self._coordinator.poll(deadline):
                    return False  # still joining the group: the next poll waits on
            fetcher.raise_error()
            if subscriptions.ready:
                return True
            await self._resolve_positions()
            await fetcher.maybe_refresh_metadata()
            remaining = deadline - self.clock.monotonic_ms()
            # Fetches outlive this poll if it times out first: the next poll finds their
            # records buffered (poll(0) thus returns what earlier polls fetched).
            fetcher.send_fetches(max(0, min(remaining, self.config["fetch.max.wait.ms"])))
            if remaining <= 0:
                return False
            if fetcher.in_flight:
                await asyncio.wait(
                    set(fetcher.in_flight),
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
        if self._coordinator is not None:
            await self._coordinator.close()
        self._closed = True
        await self._fetcher.close()
        if self._owns_transport:
            await self._transport.close()

    # -- internals --------------------------------------------------------------------------

    def _deserialize(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """``records`` with their keys and values deserialized (per record, as Kafka's fetcher
        does). A failure leaves each partition's position on its first record not returned
        (those before the failing one are returned; with none, the error raises)."""
        key_of, value_of = self._key_deserializer, self._value_deserializer
        out: list[ConsumerRecord] = []
        for i, r in enumerate(records):
            try:
                key = r.key if key_of is None or r.key is None else key_of(r.key)
                value = r.value if value_of is None or r.value is None else value_of(r.value)
            except Exception as e:
                rest: dict[TopicPartition, int] = {}
                for left in records[i:]:
                    rest.setdefault(left.topic_partition, left.offset)
                for tp, offset in rest.items():
                    self._subscriptions.set_position(tp, self._state(tp), offset)
                if out:
                    return out
                raise RecordDeserializationError(r.topic_partition, r.offset) from e
            out.append(
                ConsumerRecord(
                    r.topic,
                    r.partition,
                    r.offset,
                    r.timestamp,
                    r.timestamp_type,
                    key,
                    value,
                    r.headers,
                )
            )
        return out

    def _deserialize_columns(self, parts: list[RecordColumns]) -> list[RecordColumns]:
        """``parts`` with keys and values deserialized, column by column; a failure stops
        the answer at the failing record as :meth:`_deserialize` does."""
        key_of, value_of = self._key_deserializer, self._value_deserializer
        out: list[RecordColumns] = []
        for n, part in enumerate(parts):
            try:
                keys = part.keys
                if key_of is not None:
                    keys = [None if k is None else key_of(k) for k in keys]
                values = part.values
                if value_of is not None:
                    values = [None if v is None else value_of(v) for v in values]
            except Exception as e:
                good = self._deserializable_prefix(part)
                tp = TopicPartition(part.topic, part.partition)
                self._subscriptions.set_position(tp, self._state(tp), part.offsets[good])
                for later in parts[n + 1 :]:
                    later_tp = TopicPartition(later.topic, later.partition)
                    self._subscriptions.set_position(
                        later_tp, self._state(later_tp), later.offsets[0]
                    )
                if good:
                    out.append(self._deserialize_columns([part.slice(0, good)])[0])
                if out:
                    return out
                raise RecordDeserializationError(tp, part.offsets[good]) from e
            part.keys, part.values = keys, values
            out.append(part)
        return out

    def _deserializable_prefix(self, part: RecordColumns) -> int:
        """How many of ``part``'s first records deserialize (the rare failure path)."""
        key_of, value_of = self._key_deserializer, self._value_deserializer
        for i, (key, value) in enumerate(zip(part.keys, part.values, strict=True)):
            try:
                if key_of is not None and key is not None:
                    key_of(key)
                if value_of is not None and value is not None:
                    value_of(value)
            except Exception:
                return i
        return len(part)

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("This consumer has already been closed.")

    def _state(self, tp: TopicPartition) -> PartitionState:
        self._check_open()
        return self._subscriptions.state(tp)

    async def _resolve_positions(self) -> None:
        """Give every partition without a position one: the group's committed offset, else
        ListOffsets per the reset policy (Kafka's ``updateFetchPositions``)."""
        assignment = self._subscriptions.assignment
        pending = {tp: s for tp, s in assignment.items() if s.position is None}
        if not pending:
            return
        undefined = [tp for tp, s in pending.items() if s.reset_to is None]
        if undefined and self._coordinator is not None:
            try:
                committed = await self._coordinator.group.committed(
                    undefined, wait_for_stable=False
                )
            except UnstableOffsetCommitError as e:
                # A transactional offset commit is pending (read_committed): no position yet;
                # the poll backs off and asks again (Kafka's refreshCommittedOffsetsIfNeeded).
                logger.info("%s: committed offsets not stable yet: %s", self.client_id, e)
                return
            assignment = self._subscriptions.assignment
            for tp, offset in committed.items():
                state = assignment.get(tp)
                if offset is not None and state is not None and state.position is None:
                    state.position = offset
                    logger.info(
                        "%s: setting offset for %s to the committed offset %d",
                        self.client_id,
                        tp,
                        offset,
                    )
            pending = {tp: s for tp, s in assignment.items() if s.position is None}
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
            state = self._subscriptions.assignment.get(tp)
            if state is not None and state.position is None and offset >= 0:
                state.position = offset
                state.reset_to = None
                logger.info(
                    "%s: resetting offset for %s to position %d", self.client_id, tp, offset
                )

    async def _list_offsets(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets to each partition's leader; (offset, timestamp) per partition."""
        self._check_open()
        return await self._client.list_offsets(
            timestamps,
            isolation_level=ISOLATION_LEVELS[self.config["isolation.level"]],
            retrying=self._client.retrying(),
        )
