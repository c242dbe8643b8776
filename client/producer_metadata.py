"""When the producer's metadata (``client.metadata.ClusterMetadata``) is refreshed.

:class:`MetadataRefresher` decides when to ask and asks (rule 6 of :mod:`client.producer`):
on request (an invalid-metadata error, a broken connection, a partition without a leader, a
topic not known yet) at most once per ``retry.backoff.ms``, and every ``metadata.max.age.ms``.
It also sends the producer's other requests that any broker can answer (InitProducerId).

Not thread-safe: the producer's event loop owns both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping

from google.protobuf.message import Message
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential

from kafkasim import proto
from kafkasim.client.metadata import ClusterMetadata
from kafkasim.client.network import RETRY_BACKOFF_MAX_MS, ConnectionWarnings
from kafkasim.client.producer_config import NEVER_MS, ProducerConfig
from kafkasim.client.producer_errors import log_task_error, logger, retriable
from kafkasim.client.requests import metadata_request
from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkaError
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = ["MetadataRefresher"]


class MetadataRefresher:
    """Keeps a :class:`ClusterMetadata` fresh: one refresh task at a time, started by
    :meth:`maybe_refresh` from the sender loop when one is wanted or due.

    ``waiting`` holds the topics of records that wait for their metadata (they are asked for
    too); ``on_update`` gets each successful refresh's topic errors (the producer releases or
    fails those records); ``wake`` wakes the sender loop; ``stopped`` ends the retries (a
    forced close).
    """

    def __init__(
        self,
        metadata: ClusterMetadata,
        config: ProducerConfig,
        *,
        transport: ClientTransport,
        clock: Clock,
        waiting: Collection[str],
        on_update: Callable[[Mapping[str, int]], None],
        wake: Callable[[], None],
        stopped: Callable[[], bool],
    ) -> None:
        self._metadata = metadata
        self._config = config
        self._transport = transport
        self._clock = clock
        self._waiting = waiting
        self._on_update = on_update
        self._wake = wake
        self._stopped = stopped
        self.wanted = False
        self.task: asyncio.Task[None] | None = None
        self._connection_warnings = ConnectionWarnings(clock)

    def request(self) -> None:
        """Refresh as soon as allowed (at most one per retry.backoff.ms); wakes the sender
        only if no refresh was wanted yet."""
        if self.wanted:
            return
        self.wanted = True
        self._wake()

    def maybe_refresh(self, now_ms: int) -> int:
        """Start a metadata refresh when one is wanted or due (at most one per
        retry.backoff.ms); ms until the periodic one is due."""
        config = self._config
        last = self._metadata.last_refresh_ms
        if last >= 0 and now_ms - last >= config.metadata_max_age_ms:
            self.wanted = True
        if not (self.task is None or self.task.done()):
            return NEVER_MS  # its end wakes us
        if self.wanted:
            since_ms = now_ms - last if last >= 0 else config.retry_backoff_ms
            if since_ms < config.retry_backoff_ms:
                return config.retry_backoff_ms - since_ms
            self.wanted = False
            self.task = asyncio.get_running_loop().create_task(
                self._refresh(), name=f"{config.client_id}-metadata"
            )
            self.task.add_done_callback(log_task_error)
            return NEVER_MS
        if last < 0 or not self._metadata.topics:
            return NEVER_MS
        return max(last + config.metadata_max_age_ms - now_ms, 0)

    async def _refresh(self) -> None:
        topics = sorted(set(self._metadata.topics) | set(self._waiting))
        if not topics:
            return
        # As Kafka's producer: the broker creates unknown topics if auto.create.topics.enable.
        request = metadata_request(topics, allow_auto_topic_creation=True)
        errors: dict[str, int] = {}
        try:
            async for attempt in self.retrying():
                with attempt:
                    response = await self.call_any_broker(proto.METHOD_METADATA, request)
                    assert isinstance(response, pb.MetadataResponse)
                    errors = self._metadata.update(response, self._clock.monotonic_ms())
        except (RpcError, KafkaError) as e:
            logger.warning("%s: metadata refresh failed: %s", self._config.client_id, e)
            self.wanted = True
            self._wake()
            return
        if errors:
            self.wanted = True  # topics being created, or not there (yet)
        if any(-1 in t.leaders for t in self._metadata.topics.values()):
            self.wanted = True
        self._on_update(errors)
        if self._waiting:  # records still wait (a partition not shown yet): ask again
            self.wanted = True
        self._wake()

    def retrying(self) -> AsyncRetrying:
        """Metadata and InitProducerId: retry retriable errors with exponential backoff from
        retry.backoff.ms, until they succeed or the producer is closed forcefully."""
        stopped = self._stopped

        def stop(_state: RetryCallState) -> bool:
            return stopped()

        return AsyncRetrying(
            retry=retry_if_exception(retriable),
            wait=wait_exponential(
                multiplier=self._config.retry_backoff_ms / 1000,
                max=RETRY_BACKOFF_MAX_MS / 1000,
            ),
            stop=stop,
            reraise=True,
        )

    async def call_any_broker(self, method: str, request: Message) -> Message:
        """The first broker that answers: known brokers (starting at a rotating one, so a dead
        broker is not always asked first), then the bootstrap servers."""
        metadata = self._metadata
        known = sorted(metadata.brokers)
        if known:
            shift = metadata.refreshes % len(known)
            known = known[shift:] + known[:shift]
        nodes = ConnectionWarnings.candidates(
            {b: metadata.brokers[b] for b in known}, self._config.bootstrap_servers
        )
        last: RpcError | None = None
        for address, node_id in nodes.items():
            try:
                return await self._transport.call(
                    address, method, request, timeout_s=self._config.request_timeout_ms / 1000
                )
            except RpcError as e:
                self._connection_warnings.failed(node_id, address, e)
                last = e
        assert last is not None
        raise last
