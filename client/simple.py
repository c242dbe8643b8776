"""A simple client for tools, benchmarks, demos and tests: produce one batch, read a partition.

:class:`MinimalClient` is the network client (``client.network``) plus the few calls that drive
a cluster without the full producer and consumer: :meth:`~MinimalClient.produce` sends one
batch to a partition's leader and waits for its answer (no accumulator, no idempotence),
:meth:`~MinimalClient.fetch` and :meth:`~MinimalClient.read_all` read decoded records up to
the high watermark (every record, control records included) or, with ``read_committed``,
up to the last stable offset as a read_committed consumer sees them (no control records, no
records of aborted transactions: ``client.completed_fetch.consumed_entries``),
:meth:`~MinimalClient.create_topic` and :meth:`~MinimalClient.wait_for_leaders` set a topic
up. The simulation's workload, the Spark
tests, ``bench`` and the demo use it; applications use ``client.producer``,
``client.consumer`` and ``client.admin``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tenacity import AsyncRetrying, stop_after_attempt, wait_fixed

from kafkasim import proto
from kafkasim.client.completed_fetch import consumed_entries
from kafkasim.client.consumer_config import ISOLATION_LEVELS
from kafkasim.client.network import NetworkClient, retriable
from kafkasim.common.errors import KafkaError, KafkasimError, RequestTimedOutError, error_for_code
from kafkasim.common.rpc import RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import Record, RecordBatchBuilder
from kafkasim.storage.records.entry import decode_entries

__all__ = ["FetchResult", "MinimalClient", "ProduceResult"]


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
    """``next_offset``: where the next fetch starts (past every entry fetched, read or
    skipped); ``last_stable_offset``: the end of what read_committed may read."""

    records: list[Record]
    high_watermark: int
    log_start_offset: int
    next_offset: int = -1
    last_stable_offset: int = -1


def _retriable_produce(e: BaseException) -> bool:
    """Retry a produce on a retriable error, but never on a timeout of an acks=all wait:
    the batch may have been appended, and without idempotence a retry could duplicate it.
    (REQUEST_TIMED_OUT is retriable in Kafka; the idempotent producer retries it.)"""
    if isinstance(e, RequestTimedOutError):
        return False
    return retriable(e)


class MinimalClient(NetworkClient):
    """The network client plus one-batch produce, record reads and topic set-up."""

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
                    if self.metadata.leader(TopicPartition(topic, p)) < 0
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
            self.metadata.forget_leader(tp)
            raise
        assert isinstance(response, pb.ProduceResponse)
        part = response.partitions[0]
        if part.error_code:
            self.metadata.forget_leader(tp)
        return ProduceResult(tp, part.error_code, part.base_offset, part.error_message)

    async def fetch(
        self,
        tp: TopicPartition,
        offset: int,
        *,
        max_bytes: int = 1024 * 1024,
        max_wait_ms: int = 0,
        read_committed: bool = False,
    ) -> FetchResult:
        """Records from ``offset`` (as a consumer: only below the HW; any message format),
        from the leader; retried (a moved leader, a broker down) under this client's policy.
        ``read_committed``: only below the last stable offset, without control records and
        without the records of aborted transactions."""
        async for attempt in self.retrying():
            with attempt:
                part = await self.fetch_raw(
                    tp,
                    offset,
                    max_bytes=max_bytes,
                    max_wait_ms=max_wait_ms,
                    isolation_level=ISOLATION_LEVELS["read_committed"] if read_committed else 0,
                )
                next_offset = offset
                records: list[Record] = []
                if read_committed:
                    aborted = [(t.producer_id, t.first_offset) for t in part.aborted_transactions]
                    entries = consumed_entries(part.records, fetch_offset=offset, aborted=aborted)
                else:
                    entries = decode_entries(part.records, fetch_offset=offset)
                for header, entry_records in entries:
                    next_offset = max(next_offset, header.next_offset)
                    records.extend(entry_records)
                return FetchResult(
                    records,
                    part.high_watermark,
                    part.log_start_offset,
                    next_offset,
                    part.last_stable_offset,
                )
        raise AssertionError("unreachable")  # pragma: no cover

    async def read_all(
        self, tp: TopicPartition, start: int = 0, *, read_committed: bool = False
    ) -> list[Record]:
        """Everything from ``start`` up to the HW (``read_committed``: the last stable offset,
        committed records only) as of the last fetch."""
        out: list[Record] = []
        offset = start
        while True:
            result = await self.fetch(tp, offset, read_committed=read_committed)
            end = result.last_stable_offset if read_committed else result.high_watermark
            if result.next_offset <= offset:
                return out
            out.extend(result.records)
            offset = result.next_offset
            if offset >= end:
                return out
