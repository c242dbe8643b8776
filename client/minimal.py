"""A minimal producer/consumer/admin client: enough to drive and test the cluster core.

It speaks the client API over any ``ClientTransport``: metadata from a bootstrap broker, produce to
and fetch from partition leaders (refreshing metadata on NOT_LEADER_OR_FOLLOWER and the like),
admin calls to the controller. The full clients (batching, idempotence, groups) build on the
same calls. Retries go through tenacity with a bounded count and backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_fixed,
)

from kafkasim import proto
from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkaError, KafkasimError, error_for_code, error_for_name
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import Record, RecordBatchBuilder, decode_batch, iter_batches

logger = logging.getLogger(__name__)

NOT_CONTROLLER = 41
# Kafka 3.7's retry.backoff.max.ms default: the cap of every client's exponential backoff.
RETRY_BACKOFF_MAX_MS = 1000
# Errors meaning "your view of the partition's leader is stale": refresh metadata, retry.
INVALID_METADATA_CODES = frozenset(
    error_for_name(name).code
    for name in (
        "UNKNOWN_TOPIC_OR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "KAFKA_STORAGE_ERROR",
        "NETWORK_EXCEPTION",
    )
)
# Metadata and admin reads go to whichever broker answers first; a broker that is down or cut
# off must not hold every caller for a whole request timeout before the next one is tried.
METADATA_PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class ProduceResult:
    topic_partition: TopicPartition
    error_code: int
    base_offset: int
    error_message: str = ""

    @property
    def ok(self) -> bool:
        return self.error_code == 0


@dataclass(frozen=True, slots=True)
class FetchResult:
    records: list[Record]
    high_watermark: int
    log_start_offset: int


def _retriable_produce(e: BaseException) -> bool:
    """Retry a produce on a retriable error, but never on a timeout of an acks=all wait:
    the batch may have been appended, and without idempotence a retry could duplicate it.
    (REQUEST_TIMED_OUT is retriable in Kafka; the idempotent producer of issue 4 retries it.)"""
    if isinstance(e, KafkaError) and e.code == 7:
        return False
    return _retriable(e)


def _retriable(e: BaseException) -> bool:
    if isinstance(e, RpcError):
        return e.retriable
    if isinstance(e, KafkaError):
        return e.retriable or e.code == NOT_CONTROLLER
    return False


class MinimalClient:
    def __init__(
        self,
        transport: ClientTransport,
        bootstrap: Sequence[str],
        clock: Clock,
        *,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        if not bootstrap:
            raise ValueError("bootstrap.servers is empty")
        self.transport = transport
        self.bootstrap = list(bootstrap)
        self.clock = clock
        self.timeout_s = request_timeout_ms / 1000
        self.delivery_timeout_ms = delivery_timeout_ms
        self.backoff_s = retry_backoff_ms / 1000
        self.backoff_max_s = retry_backoff_max_ms / 1000
        self.brokers: dict[int, str] = {}
        self.leaders: dict[TopicPartition, int] = {}
        self.leader_epochs: dict[TopicPartition, int] = {}
        self.controller_id = -1

    def retrying(self, *, retry_on: object = _retriable) -> AsyncRetrying:
        """Retry retriable errors with exponential backoff until ``delivery.timeout.ms`` has
        passed on the client's clock (virtual in the simulation, so the deadline holds)."""
        deadline = self.clock.monotonic_ms() + self.delivery_timeout_ms

        def past_deadline(_state: RetryCallState) -> bool:
            return self.clock.monotonic_ms() >= deadline

        return AsyncRetrying(
            stop=past_deadline,
            wait=wait_exponential(multiplier=self.backoff_s, max=self.backoff_max_s),
            retry=retry_if_exception(retry_on),  # type: ignore[arg-type]
            reraise=True,
        )

    # -- metadata ---------------------------------------------------------------------------

    async def call_any(self, method: str, request: object) -> object:
        """Call the first broker that answers (known brokers, then bootstrap)."""
        last: Exception | None = None
        probe_s = min(self.timeout_s, METADATA_PROBE_TIMEOUT_S)
        for address in [*self.brokers.values(), *self.bootstrap]:
            try:
                return await self.transport.call(
                    address,
                    method,
                    request,  # type: ignore[arg-type]
                    timeout_s=probe_s,
                )
            except RpcError as e:
                last = e
        assert last is not None
        raise last

    async def refresh_metadata(
        self, topics: Sequence[str] = (), *, allow_auto_topic_creation: bool = False
    ) -> pb.MetadataResponse:
        request = pb.MetadataRequest(
            topics=list(topics),
            all_topics=not topics,
            allow_auto_topic_creation=allow_auto_topic_creation and bool(topics),
        )
        response = await self.call_any(proto.METHOD_METADATA, request)
        assert isinstance(response, pb.MetadataResponse)
        self.brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
        self.controller_id = response.controller_id
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                self.leaders[tp] = p.leader
                self.leader_epochs[tp] = p.leader_epoch
        return response

    async def list_offsets(
        self,
        timestamps: Mapping[TopicPartition, int],
        *,
        isolation_level: int = 0,
        retrying: AsyncRetrying | None = None,
    ) -> dict[TopicPartition, tuple[int, int]]:
        """ListOffsets to each partition's leader: (offset, timestamp) per partition, for a
        timestamp, -1 (latest: the high watermark) or -2 (earliest: the log start offset).
        Retriable errors (a moved leader) refresh the metadata and ask again for the
        partitions still missing, under ``retrying`` (default: this client's policy)."""
        result: dict[TopicPartition, tuple[int, int]] = {}
        todo = dict(timestamps)
        async for attempt in retrying or self.retrying():
            with attempt:
                await self.refresh_metadata(sorted({tp.topic for tp in todo}))
                by_leader: dict[str, list[TopicPartition]] = {}
                for tp in todo:
                    address = self.brokers.get(self.leaders.get(tp, -1))
                    if address is None:
                        raise error_for_name("LEADER_NOT_AVAILABLE")(f"no leader known for {tp}")
                    by_leader.setdefault(address, []).append(tp)
                for address, tps in by_leader.items():
                    request = pb.ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level)
                    for tp in tps:
                        request.partitions.add(
                            topic=tp.topic,
                            partition=tp.partition,
                            current_leader_epoch=self.leader_epochs.get(tp, -1),
                            timestamp=todo[tp],
                        )
                    response = await self.transport.call(
                        address, proto.METHOD_LIST_OFFSETS, request, timeout_s=self.timeout_s
                    )
                    assert isinstance(response, pb.ListOffsetsResponse)
                    for part in response.partitions:
                        tp = TopicPartition(part.topic, part.partition)
                        if part.error_code:
                            raise error_for_code(part.error_code)(f"ListOffsets for {tp}")
                        result[tp] = (part.offset, part.timestamp)
                        todo.pop(tp, None)
                return result
        raise AssertionError("unreachable")  # pragma: no cover

    async def leader_address(self, tp: TopicPartition) -> str:
        leader = self.leaders.get(tp, -1)
        if leader < 0 or leader not in self.brokers:
            await self.refresh_metadata([tp.topic])
            leader = self.leaders.get(tp, -1)
        address = self.brokers.get(leader)
        if address is None:
            raise error_for_code(5)(f"no leader known for {tp}")  # LEADER_NOT_AVAILABLE
        return address

    # -- admin ------------------------------------------------------------------------------

    async def controller_call(self, method: str, request: object) -> object:
        async for attempt in self.retrying():
            with attempt:
                await self.refresh_metadata()
                address = self.brokers.get(self.controller_id)
                if address is None:
                    raise error_for_code(NOT_CONTROLLER)("no controller known yet")
                response = await self.transport.call(
                    address,
                    method,
                    request,  # type: ignore[arg-type]
                    timeout_s=self.timeout_s,
                )
                for item in [*getattr(response, "topics", []), *getattr(response, "results", [])]:
                    if item.error_code == NOT_CONTROLLER:
                        raise error_for_code(NOT_CONTROLLER)("controller moved")
                return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str] | None = None,
    ) -> None:
        request = pb.CreateTopicsRequest(timeout_ms=int(self.timeout_s * 1000))
        request.topics.add(
            name=name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            configs=configs or {},
        )
        response = await self.controller_call(proto.METHOD_CREATE_TOPICS, request)
        assert isinstance(response, pb.CreateTopicsResponse)
        for result in response.topics:
            if result.error_code:
                raise error_for_code(result.error_code)(result.error_message)

    async def wait_for_leaders(self, topic: str, partitions: int, *, attempts: int = 100) -> None:
        """Until every partition of ``topic`` has a live leader in the metadata."""
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(attempts), wait=wait_fixed(self.backoff_s), reraise=True
        ):
            with attempt:
                await self.refresh_metadata([topic])
                missing = [
                    p
                    for p in range(partitions)
                    if self.leaders.get(TopicPartition(topic, p), -1) < 0
                ]
                if missing:
                    raise KafkasimError(f"{topic}: no leader yet for partitions {missing}")

    # -- produce / fetch --------------------------------------------------------------------

    async def produce(
        self,
        tp: TopicPartition,
        values: Sequence[bytes],
        *,
        acks: int = -1,
        timeout_ms: int = 10_000,
        keys: Sequence[bytes | None] | None = None,
        retry: bool = True,
    ) -> ProduceResult:
        """Send one batch; retried on retriable errors unless ``retry`` is False."""
        builder = RecordBatchBuilder()
        now = self.clock.time_ms()
        for i, value in enumerate(values):
            builder.append(now, keys[i] if keys else None, value)
        batch = builder.build()
        request = pb.ProduceRequest(acks=acks, timeout_ms=timeout_ms)
        request.partitions.add(topic=tp.topic, partition=tp.partition, records=batch)
        if not retry:
            return await self._produce_once(tp, request, acks, timeout_ms)
        try:
            async for attempt in self.retrying(retry_on=_retriable_produce):
                with attempt:
                    result = await self._produce_once(tp, request, acks, timeout_ms)
                    if not result.ok and acks != 0 and error_for_code(result.error_code).retriable:
                        raise error_for_code(result.error_code)(result.error_message)
                    return result
        except (RpcError, KafkaError) as e:
            return ProduceResult(tp, getattr(e, "code", -1), -1, str(e))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _produce_once(
        self, tp: TopicPartition, request: pb.ProduceRequest, acks: int, timeout_ms: int
    ) -> ProduceResult:
        try:
            address = await self.leader_address(tp)
            response = await self.transport.call(
                address, proto.METHOD_PRODUCE, request, timeout_s=timeout_ms / 1000 + self.timeout_s
            )
        except (RpcError, KafkaError):
            self.leaders.pop(tp, None)
            raise
        assert isinstance(response, pb.ProduceResponse)
        part = response.partitions[0]
        if part.error_code:
            self.leaders.pop(tp, None)
        return ProduceResult(tp, part.error_code, part.base_offset, part.error_message)

    async def fetch(
        self,
        tp: TopicPartition,
        offset: int,
        *,
        max_bytes: int = 1024 * 1024,
        max_wait_ms: int = 0,
    ) -> FetchResult:
        """Records from ``offset`` (as a consumer: only below the HW), from the leader."""
        request = pb.FetchRequest(
            replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes
        )
        request.partitions.add(
            topic=tp.topic,
            partition=tp.partition,
            fetch_offset=offset,
            current_leader_epoch=-1,
            partition_max_bytes=max_bytes,
        )
        async for attempt in self.retrying():
            with attempt:
                address = await self.leader_address(tp)
                try:
                    response = await self.transport.call(
                        address,
                        proto.METHOD_FETCH,
                        request,
                        timeout_s=self.timeout_s + max_wait_ms / 1000,
                    )
                except RpcError:
                    self.leaders.pop(tp, None)  # the leader may be gone: ask again
                    raise

                assert isinstance(response, pb.FetchResponse)
                part = response.partitions[0]
                if part.error_code:
                    self.leaders.pop(tp, None)
                    raise error_for_code(part.error_code)(part.error_message)
                records: list[Record] = []
                for position, _ in iter_batches(part.records, verify_crc=True):
                    _, batch_records = decode_batch(part.records, position)
                    records.extend(r for r in batch_records if r.offset >= offset)
                return FetchResult(records, part.high_watermark, part.log_start_offset)
        raise AssertionError("unreachable")  # pragma: no cover

    async def read_all(self, tp: TopicPartition, start: int = 0) -> list[Record]:
        """Everything from ``start`` up to the HW as of the last fetch."""
        out: list[Record] = []
        offset = start
        while True:
            result = await self.fetch(tp, offset)
            if not result.records:
                return out
            out.extend(result.records)
            offset = result.records[-1].offset + 1
            if offset >= result.high_watermark:
                return out
