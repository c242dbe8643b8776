"""The network client every kafkasim client stands on: bootstrap, metadata, retries.

:class:`NetworkClient` speaks the client API over any ``ClientTransport``. It keeps the one
:class:`~client.metadata.ClusterMetadata` of its client (brokers, controller, partition
leaders and their epochs, never going back to an older epoch), found from the bootstrap
servers and refreshed on request; it sends calls to any broker (:meth:`call_any`), to the
controller (:meth:`controller_call`, retried on NOT_CONTROLLER) and to partition leaders
(:meth:`list_offsets`, :meth:`fetch_raw`); and it owns the retry policy: retriable errors are
retried with exponential backoff (``retry.backoff.ms`` up to ``retry.backoff.max.ms``) until
``delivery.timeout.ms`` has passed on the client's clock (virtual in the simulation).

The admin client, the consumer and its group membership build on it. The producer keeps its
own refresher of the same metadata view (``client.producer_metadata``); the simple
produce/read helpers for tools and tests are ``client.simple``.

Not thread-safe: one event loop owns a client.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from kafkasim import proto
from kafkasim.client.metadata import ClusterMetadata
from kafkasim.client.requests import fetch_request, list_offsets_request, metadata_request
from kafkasim.common.clock import Clock
from kafkasim.common.errors import (
    KafkaError,
    LeaderNotAvailableError,
    NotControllerError,
    OffsetOutOfRangeError,
    error_for_code,
    error_for_name,
)
from kafkasim.common.rpc import ClientTransport, RpcError, RpcStatus
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = [
    "INVALID_METADATA_CODES",
    "RECONNECT_BACKOFF_MAX_MS",
    "RETRY_BACKOFF_MAX_MS",
    "ConnectionWarnings",
    "NetworkClient",
    "retriable",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Kafka 3.7's retry.backoff.max.ms default: the cap of every client's exponential backoff.
RETRY_BACKOFF_MAX_MS = 1000
# Kafka's reconnect.backoff.max.ms default: a Kafka client tries a broker that refuses it at
# most about this often, and warns each time; ours warn at most this often per address.
RECONNECT_BACKOFF_MAX_MS = 1000
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


def retriable(e: BaseException) -> bool:
    """The network client's retry rule: transport faults except bugs, and retriable Kafka
    errors (NOT_CONTROLLER among them: the controller moved, ask the metadata again)."""
    if isinstance(e, RpcError | KafkaError):
        return e.retriable
    return False


class ConnectionWarnings:
    """Kafka's NetworkClient warning when a broker cannot be reached ("Connection to node -1
    (host:port) could not be established. Broker may not be available."), so that a client
    whose brokers are all down says so while it waits. At most one per address per
    ``RECONNECT_BACKOFF_MAX_MS`` on the client's clock. Node ids as Kafka's: a known broker's
    id, -1, -2, ... for the bootstrap servers in order."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._last_ms: dict[str, int] = {}

    def failed(self, node_id: int, address: str, error: RpcError) -> None:
        """A call to ``address`` failed with ``error``; warns if it could not connect."""
        if error.status is not RpcStatus.UNAVAILABLE:
            return
        now_ms = self._clock.monotonic_ms()
        last_ms = self._last_ms.get(address)
        if last_ms is not None and now_ms - last_ms < RECONNECT_BACKOFF_MAX_MS:
            return
        self._last_ms[address] = now_ms
        logger.warning(
            "Connection to node %d (%s) could not be established. Broker may not be available.",
            node_id,
            address,
        )

    @staticmethod
    def candidates(known: Mapping[int, str], bootstrap: Sequence[str]) -> dict[str, int]:
        """The addresses to try, in order (``known`` brokers first, each once), each with its
        node id."""
        nodes = {address: broker_id for broker_id, address in known.items()}
        for i, address in enumerate(bootstrap):
            nodes.setdefault(address, -1 - i)
        return nodes


class NetworkClient:
    def __init__(
        self,
        transport: ClientTransport,
        bootstrap: Sequence[str],
        clock: Clock,
        *,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS,
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
        self.metadata = ClusterMetadata()
        self.connection_warnings = ConnectionWarnings(clock)

    def retrying(self, *, retry_on: object = retriable) -> AsyncRetrying:
        """Retry ``retry_on`` errors with exponential backoff until ``delivery.timeout.ms``
        has passed on the client's clock (virtual in the simulation, so the deadline holds).
        :meth:`retry` is the same policy without tenacity's per-use cost (the hot paths)."""
        deadline = self.clock.monotonic_ms() + self.delivery_timeout_ms

        def past_deadline(_state: RetryCallState) -> bool:
            return self.clock.monotonic_ms() >= deadline

        def wait(state: RetryCallState) -> float:
            return self._backoff_s(state.attempt_number, deadline)

        return AsyncRetrying(
            stop=past_deadline,
            wait=wait,
            retry=retry_if_exception(retry_on),  # type: ignore[arg-type]
            reraise=True,
        )

    async def retry(
        self,
        attempt: Callable[[], Awaitable[_T]],
        *,
        retry_on: Callable[[BaseException], bool] = retriable,
    ) -> _T:
        """``attempt()`` under :meth:`retrying`'s policy, step for step (the same checks, the
        same sleeps), as a plain loop: building and driving tenacity's machinery per call
        costs more than a simulated fetch round trip. The last error is raised as it is."""
        deadline = self.clock.monotonic_ms() + self.delivery_timeout_ms
        attempts = 0
        while True:
            attempts += 1
            try:
                return await attempt()
            except BaseException as e:
                if not retry_on(e) or self.clock.monotonic_ms() >= deadline:
                    raise
            await asyncio.sleep(self._backoff_s(attempts, deadline))

    def _backoff_s(self, attempts: int, deadline_ms: int) -> float:
        """The pause after ``attempts`` failed attempts: ``retry.backoff.ms`` doubled per
        attempt up to ``retry.backoff.max.ms`` (tenacity's ``wait_exponential``), and never
        past the deadline: the last attempt is made at it."""
        try:
            backoff = self.backoff_s * 2.0 ** (attempts - 1)
        except OverflowError:
            backoff = self.backoff_max_s
        backoff = max(0.0, min(backoff, self.backoff_max_s))
        return min(backoff, max(deadline_ms - self.clock.monotonic_ms(), 0) / 1000)

    # -- any broker -------------------------------------------------------------------------

    async def call_any(self, method: str, request: object) -> object:
        """Call the first broker that answers (known brokers, then bootstrap)."""
        last: Exception | None = None
        probe_s = min(self.timeout_s, METADATA_PROBE_TIMEOUT_S)
        nodes = ConnectionWarnings.candidates(self.metadata.brokers, self.bootstrap)
        for address, node_id in nodes.items():
            try:
                return await self.transport.call(
                    address,
                    method,
                    request,  # type: ignore[arg-type]
                    timeout_s=probe_s,
                )
            except RpcError as e:
                self.connection_warnings.failed(node_id, address, e)
                last = e
        assert last is not None
        raise last

    async def refresh_metadata(
        self, topics: Sequence[str] = (), *, allow_auto_topic_creation: bool = False
    ) -> pb.MetadataResponse:
        """Metadata of ``topics`` (every topic when none is named), applied to the view."""
        request = metadata_request(topics, allow_auto_topic_creation=allow_auto_topic_creation)
        response = await self.call_any(proto.METHOD_METADATA, request)
        assert isinstance(response, pb.MetadataResponse)
        self.metadata.update(response, self.clock.monotonic_ms())
        return response

    # -- the controller ---------------------------------------------------------------------

    async def controller_call(self, method: str, request: object) -> object:
        """Call the controller, found in fresh metadata; retried (with this client's policy)
        while there is none or a per-item NOT_CONTROLLER says it moved."""
        async for attempt in self.retrying():
            with attempt:
                await self.refresh_metadata()
                address = self.metadata.controller_address()
                if address is None:
                    raise NotControllerError("no controller known yet")
                response = await self.transport.call(
                    address,
                    method,
                    request,  # type: ignore[arg-type]
                    timeout_s=self.timeout_s,
                )
                for item in [*getattr(response, "topics", []), *getattr(response, "results", [])]:
                    if item.error_code == NotControllerError.code:
                        raise NotControllerError("controller moved")
                return response
        raise AssertionError("unreachable")  # pragma: no cover

    # -- partition leaders ------------------------------------------------------------------

    async def leader_address(self, tp: TopicPartition) -> str:
        """``host:port`` of the leader of ``tp``, refreshing the metadata if it is unknown;
        LEADER_NOT_AVAILABLE when there is none."""
        address = self.metadata.leader_address(tp)
        if address is None:
            await self.refresh_metadata([tp.topic])
            address = self.metadata.leader_address(tp)
        if address is None:
            raise LeaderNotAvailableError(f"no leader known for {tp}")
        return address

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
                by_leader: dict[str, dict[TopicPartition, int]] = {}
                for tp, timestamp in todo.items():
                    address = self.metadata.leader_address(tp)
                    if address is None:
                        raise LeaderNotAvailableError(f"no leader known for {tp}")
                    by_leader.setdefault(address, {})[tp] = timestamp
                for address, targets in by_leader.items():
                    request = list_offsets_request(
                        targets,
                        isolation_level=isolation_level,
                        leader_epochs={tp: self.metadata.leader_epoch(tp) for tp in targets},
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

    async def fetch_raw(
        self,
        tp: TopicPartition,
        offset: int,
        *,
        max_bytes: int = 1024 * 1024,
        max_wait_ms: int = 0,
        isolation_level: int = 0,
    ) -> pb.FetchPartitionResponse:
        """One Fetch of ``tp`` at ``offset`` from its leader, as a consumer (only below the
        HW; with ``isolation_level`` 1, read_committed, only below the last stable offset, and
        the answer names the aborted transactions): the partition's answer with its raw
        batches (headers included), or the Kafka error it carried, raised. A transport fault
        or an error other than OFFSET_OUT_OF_RANGE forgets the leader, so the next call looks
        it up again. One attempt: the caller retries under :meth:`retrying`."""
        request = fetch_request(
            {tp: offset},
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
            partition_max_bytes=max_bytes,
            isolation_level=isolation_level,
        )
        address = await self.leader_address(tp)
        try:
            response = await self.transport.call(
                address,
                proto.METHOD_FETCH,
                request,
                timeout_s=self.timeout_s + max_wait_ms / 1000,
            )
        except RpcError:
            self.metadata.forget_leader(tp)  # the leader may be gone: ask again
            raise
        assert isinstance(response, pb.FetchResponse)
        part = response.partitions[0]
        if part.error_code:
            if part.error_code != OffsetOutOfRangeError.code:
                self.metadata.forget_leader(tp)
            raise error_for_code(part.error_code)(f"fetch {tp} at {offset}: {part.error_message}")
        return part
