"""The consumer's fetcher (Kafka's ``Fetcher``): builds the Fetch requests of the partitions
ready to be read, and turns their answers into buffered records or position changes.

1. **Sending.** :meth:`Fetcher.send_fetches` sends one Fetch (``replica_id=-1``) per leader
   for every assigned partition that has a position, no buffered records, no fetch in flight
   and no error backoff pending, carrying the leader epoch from the metadata (KIP-320) and
   long-polling up to the given wait for ``fetch.min.bytes``. Fetches outlive the poll that
   sent them: a later poll finds their records buffered.
2. **Records.** A fetch returns whole entries of any message format: v2 batches, and the v0/v1
   messages of a partition written before Kafka 0.11 (a compressed wrapper among them).
   :func:`~client.completed_fetch.consumed_entries` checks their checksums and drops the
   records below the position (the start of the batch or wrapper the position falls into);
   control batches give no record, nor, with ``isolation.level=read_committed``, the batches
   of the aborted transactions the answer names (the broker stops such a fetch at the last
   stable offset). When nothing is left (compacted-away batches, control batches, aborted
   batches), the position moves past what was fetched. An answer for an offset that is no longer the
   position (a ``seek`` happened meanwhile) is dropped.
3. **Errors.** NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
   UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, KAFKA_STORAGE_ERROR and a broken
   connection forget the leader and mark the metadata stale; the partition is fetched again
   after ``retry.backoff.ms``. OFFSET_OUT_OF_RANGE resets the position per
   ``auto.offset.reset`` (raised with ``none``). Any other error, or a record that does not
   decode, is raised by the next poll.

Not thread-safe: one event loop owns a consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Final

from kafkasim import proto
from kafkasim.client.consumer_config import ISOLATION_LEVELS
from kafkasim.client.network import INVALID_METADATA_CODES, NetworkClient
from kafkasim.client.record_columns import RecordColumns, consumed_columns
from kafkasim.client.requests import fetch_request
from kafkasim.client.subscription_state import PartitionState, SubscriptionState
from kafkasim.common.clock import Clock
from kafkasim.common.config import Config
from kafkasim.common.errors import (
    KafkaError,
    KafkasimError,
    OffsetOutOfRangeError,
    error_for_code,
)
from kafkasim.common.rpc import RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = ["Fetcher"]

logger = logging.getLogger(__name__)

_OFFSET_OUT_OF_RANGE: Final = OffsetOutOfRangeError.code


class Fetcher:
    """Fetches for the partitions of ``subscriptions`` over ``client``; see the module doc."""

    def __init__(
        self,
        subscriptions: SubscriptionState,
        client: NetworkClient,
        clock: Clock,
        config: Config,
        client_id: str,
    ) -> None:
        self._subscriptions = subscriptions
        self._client = client
        self._clock = clock
        self._config = config
        self._client_id = client_id
        self._auto_offset_reset: str = config["auto.offset.reset"]
        self._request_timeout_s = config["request.timeout.ms"] / 1000
        self._backoff_ms: int = config["retry.backoff.ms"]
        self._read_committed = config["isolation.level"] == "read_committed"
        self.in_flight: set[asyncio.Task[None]] = set()
        self.metadata_stale = True
        self._error: KafkasimError | None = None  # raised by the next poll

    def raise_error(self) -> None:
        """Raise (once) the error a completed fetch left for the caller."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    async def maybe_refresh_metadata(self) -> None:
        """Refresh the assigned topics' metadata when it is stale or a leader is unknown."""
        assignment = self._subscriptions.assignment
        missing = any(self._client.metadata.leader(tp) < 0 for tp in assignment)
        if not (self.metadata_stale or missing):
            return
        topics = sorted({tp.topic for tp in assignment})
        try:
            await self._client.refresh_metadata(topics)
            self.metadata_stale = False
        except (RpcError, KafkaError) as e:
            logger.info("%s: metadata refresh failed: %s", self._client_id, e)

    def send_fetches(self, max_wait_ms: int) -> None:
        """One Fetch per leader for the partitions ready to be fetched."""
        now_ms = self._clock.monotonic_ms()
        assignment = self._subscriptions.assignment
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp, state in assignment.items():
            if (
                state.position is None
                or state.buffered
                or state.in_flight
                or state.retry_at_ms > now_ms
            ):
                continue
            address = self._client.metadata.leader_address(tp)
            if address is None:
                self.metadata_stale = True
                continue
            by_leader.setdefault(address, []).append(tp)
        cfg = self._config
        metadata = self._client.metadata
        for address, tps in by_leader.items():
            offsets: dict[TopicPartition, int] = {}
            for tp in tps:
                state = assignment[tp]
                assert state.position is not None
                offsets[tp] = state.position
                state.in_flight = True
            request = fetch_request(
                offsets,
                max_wait_ms=max_wait_ms,
                min_bytes=cfg["fetch.min.bytes"],
                max_bytes=cfg["fetch.max.bytes"],
                partition_max_bytes=cfg["max.partition.fetch.bytes"],
                isolation_level=ISOLATION_LEVELS[cfg["isolation.level"]],
                leader_epochs={tp: metadata.leader_epoch(tp) for tp in tps},
            )
            task = asyncio.get_running_loop().create_task(
                self._fetch(address, request, offsets, max_wait_ms)
            )
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    async def close(self) -> None:
        """Stop the fetches in flight."""
        for task in self.in_flight:
            task.cancel()
        for task in list(self.in_flight):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.in_flight.clear()

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
            logger.info("%s: fetch from %s failed: %s", self._client_id, address, e)
            for tp in offsets:
                self._fetch_failed(tp)
            return
        finally:
            for tp in offsets:
                state = self._subscriptions.assignment.get(tp)
                if state is not None:
                    state.in_flight = False
        assert isinstance(response, pb.FetchResponse)
        assignment = self._subscriptions.assignment
        for part in response.partitions:
            tp = TopicPartition(part.topic, part.partition)
            state = assignment.get(tp)
            # Dropped: unassigned, or sought elsewhere while the fetch was in flight.
            if state is None or state.position != offsets.get(tp):
                continue
            try:
                if part.error_code:
                    self._partition_error(tp, state, part.error_code, part.error_message)
                else:
                    aborted = (
                        [(t.producer_id, t.first_offset) for t in part.aborted_transactions]
                        if self._read_committed
                        else None
                    )
                    self._buffer(tp, state, part.records, aborted)
            except KafkasimError as e:
                self._error = e

    def _buffer(
        self,
        tp: TopicPartition,
        state: PartitionState,
        data: bytes,
        aborted: Iterable[tuple[int, int]] | None = None,
    ) -> None:
        """Buffer the records of a fetch answer; ``aborted`` (read_committed): its aborted
        transactions as (producer id, first offset), whose batches are skipped."""
        position = state.position
        assert position is not None
        columns = RecordColumns(tp.topic, tp.partition)
        next_offset = consumed_columns(data, columns, fetch_offset=position, aborted=aborted)
        if columns:
            self._subscriptions.buffer(tp, state, columns)
        elif next_offset > position:
            # Only records below the position, or batches emptied by compaction: move on.
            state.position = next_offset

    def _fetch_failed(self, tp: TopicPartition) -> None:
        state = self._subscriptions.assignment.get(tp)
        if state is not None:
            state.retry_at_ms = self._clock.monotonic_ms() + self._backoff_ms
        self._client.metadata.forget_leader(tp)
        self.metadata_stale = True

    def _partition_error(
        self, tp: TopicPartition, state: PartitionState, code: int, message: str
    ) -> None:
        if code == _OFFSET_OUT_OF_RANGE:
            if self._auto_offset_reset == "none":
                raise OffsetOutOfRangeError(
                    f"Fetch position FetchPosition{{offset={state.position}}} is out of range "
                    f"for partition {tp}"
                )
            logger.info(
                "%s: fetch offset %s is out of range for %s, resetting (%s)",
                self._client_id,
                state.position,
                tp,
                self._auto_offset_reset,
            )
            self._subscriptions.set_position(tp, state, None)
            return
        if code in INVALID_METADATA_CODES:
            logger.info(
                "%s: %s for %s: %s", self._client_id, error_for_code(code).error_name, tp, message
            )
            self._fetch_failed(tp)
            return
        raise error_for_code(code)(message)
