"""Finishing a decided transaction: its COMMIT or ABORT marker written to every partition it
touched, then its CompleteCommit or CompleteAbort written to ``__transaction_state`` (Kafka's
``TransactionMarkerChannelManager`` and ``TransactionMarkerRequestCompletionHandler``).

Theory of operation
-------------------
One task per transaction (:meth:`TxnMarkerChannel.complete`) runs rounds until no partition is
left in the metadata:

1. Each remaining partition's leader is looked up (:data:`PartitionLeaders`). A partition the
   cluster no longer has (its topic deleted) leaves the transaction: nothing can be written
   there and nobody can read it. A partition without a live leader now waits for the next
   round.
2. The markers go to each leader at once through the :class:`MarkerSender` port (Kafka's
   WriteTxnMarkers: producer id, producer epoch, coordinator epoch, result, partitions).
   Per partition, the answer decides:

   ======================================  =================================================
   none                                    written: the partition leaves the transaction
   UNKNOWN_TOPIC_OR_PARTITION,             retriable: sent again next round (to the leader
   NOT_LEADER_OR_FOLLOWER,                 the metadata then names)
   NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
   REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR
   UNSUPPORTED_FOR_MESSAGE_FORMAT,         the partition cannot hold a marker, so its
   UNSUPPORTED_VERSION                     producer could not write there: it leaves
   INVALID_PRODUCER_EPOCH,                 the producer or this coordinator was fenced: a
   TRANSACTION_COORDINATOR_FENCED          newer coordinator finishes it; stop here
   anything else (CORRUPT_MESSAGE, ...)    Kafka's coordinator throws (IllegalStateException)
                                           and never finishes the transaction here; so do we,
                                           logging it as an error
   ======================================  =================================================

   A send that fails as a whole (the connection, a timeout) is retried next round, as Kafka
   re-enqueues a disconnected request's markers.
3. Between rounds the task waits ``retry_backoff_ms``.
4. With every marker written, the Complete state is written (acks=all); a write answered
   COORDINATOR_NOT_AVAILABLE (a replica error Kafka maps to it) is retried with the pending
   state kept; any other error clears the pending state (``txn_decisions.on_append_failed``).

Before each round and after each await, the task checks that this broker still coordinates
the id at the same coordinator epoch with the same metadata object; if not (resigned,
reloaded), it stops silently: the new coordinator resends the markers from its log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kafkasim.common.errors import KafkaError, error_for_name
from kafkasim.common.rpc import RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_types import Error
from kafkasim.node.txn_decisions import on_append_failed, write_error
from kafkasim.node.txn_log import record_for
from kafkasim.node.txn_metadata import TransactionMetadata
from kafkasim.node.txn_state_manager import TransactionStateManager
from kafkasim.node.txn_types import TransactionResult, TxnAppend, TxnSendMarkers

logger = logging.getLogger(__name__)

NO_LEADER = -1

PartitionLeaders = Callable[[TopicPartition], int | None]
"""The leader of a partition as this broker's metadata knows it: a broker id, :data:`NO_LEADER`
when it has none alive now, None when the cluster has no such partition (its topic is gone)."""


def _names(*names: str) -> frozenset[type[KafkaError]]:
    return frozenset(error_for_name(n) for n in names)


RETRIABLE = _names(
    "UNKNOWN_TOPIC_OR_PARTITION",
    "NOT_LEADER_OR_FOLLOWER",
    "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "REQUEST_TIMED_OUT",
    "KAFKA_STORAGE_ERROR",
)
FENCED = _names("INVALID_PRODUCER_EPOCH", "TRANSACTION_COORDINATOR_FENCED")
NOT_WRITABLE = _names("UNSUPPORTED_FOR_MESSAGE_FORMAT", "UNSUPPORTED_VERSION")
COORDINATOR_NOT_AVAILABLE = error_for_name("COORDINATOR_NOT_AVAILABLE")


@dataclass(frozen=True, slots=True)
class TxnMarkerEntry:
    """The markers of one transaction for one leader (Kafka's ``TxnMarkerEntry``): a
    ``result`` control record for ``producer_id`` at ``producer_epoch`` in each of
    ``partitions``, stamped with the coordinator's epoch."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: TransactionResult
    partitions: frozenset[TopicPartition]


class MarkerSender(Protocol):
    """The WriteTxnMarkers port: write ``marker`` to its partitions, all led by
    ``leader_id``; the error of each partition (None: written). Raises on a failure of the
    whole send (:class:`~common.rpc.RpcError`, :class:`OSError`, :class:`TimeoutError`)."""

    async def __call__(
        self, leader_id: int, marker: TxnMarkerEntry
    ) -> Mapping[TopicPartition, Error]: ...


class _AbandonedError(Exception):
    """The transaction cannot be finished here (fenced, or an unexpected marker error)."""


class TxnMarkerChannel:
    """Sends the markers of decided transactions and completes them (see the module doc)."""

    def __init__(
        self,
        manager: TransactionStateManager,
        send: MarkerSender,
        leaders: PartitionLeaders,
        retry_backoff_ms: int,
    ) -> None:
        self._manager = manager
        self._send = send
        self._leaders = leaders
        self._retry_backoff_s = max(retry_backoff_ms, 0) / 1000

    async def complete(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        metadata: TransactionMetadata,
        send: TxnSendMarkers,
    ) -> bool:
        """Write every marker of ``send``, then its Complete state; True once completed,
        False when it stopped (no longer the coordinator, fenced, an unexpected error)."""
        try:
            await self._write_markers(transactional_id, coordinator_epoch, metadata, send.result)
        except _AbandonedError as e:
            logger.error("transactional id %s: markers abandoned: %s", transactional_id, e)
            return False
        if metadata.topic_partitions:
            return False  # no longer the coordinator: the new one finishes it
        return await self._write_complete(transactional_id, coordinator_epoch, metadata, send)

    def _current(self, transactional_id: str, epoch: int, metadata: TransactionMetadata) -> bool:
        return self._manager.metadata_at(transactional_id, epoch) is metadata

    async def _write_markers(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        metadata: TransactionMetadata,
        result: TransactionResult,
    ) -> None:
        first = True
        while metadata.topic_partitions:
            if not first:
                await asyncio.sleep(self._retry_backoff_s)
            first = False
            if not self._current(transactional_id, coordinator_epoch, metadata):
                return
            by_leader: dict[int, set[TopicPartition]] = {}
            for tp in sorted(metadata.topic_partitions):
                leader = self._leaders(tp)
                if leader is None:
                    logger.info(
                        "transactional id %s: %s is gone; no marker to write there",
                        transactional_id,
                        tp,
                    )
                    metadata.remove_partition(tp)
                elif leader != NO_LEADER:
                    by_leader.setdefault(leader, set()).add(tp)
            if not by_leader:
                continue
            leaders = sorted(by_leader)
            answers = await asyncio.gather(
                *(
                    self._send(
                        leader,
                        TxnMarkerEntry(
                            metadata.producer_id,
                            metadata.producer_epoch,
                            coordinator_epoch,
                            result,
                            frozenset(by_leader[leader]),
                        ),
                    )
                    for leader in leaders
                ),
                return_exceptions=True,
            )
            if not self._current(transactional_id, coordinator_epoch, metadata):
                return
            for leader, answer in zip(leaders, answers, strict=True):
                self._apply(transactional_id, metadata, leader, by_leader[leader], answer)

    def _apply(
        self,
        transactional_id: str,
        metadata: TransactionMetadata,
        leader: int,
        sent: set[TopicPartition],
        answer: Mapping[TopicPartition, Error] | BaseException,
    ) -> None:
        if isinstance(answer, (RpcError, OSError, TimeoutError, KafkaError)):
            logger.info(
                "transactional id %s: markers to broker %d failed (%s); retrying",
                transactional_id,
                leader,
                answer,
            )
            return
        if isinstance(answer, BaseException):
            raise answer
        for tp in sorted(sent):
            if tp not in answer:
                logger.warning(
                    "transactional id %s: broker %d did not answer for %s; retrying",
                    transactional_id,
                    leader,
                    tp,
                )
                continue
            error = answer[tp]
            if error is None or error in NOT_WRITABLE:
                metadata.remove_partition(tp)
            elif error in RETRIABLE:
                logger.info(
                    "transactional id %s: marker for %s failed with %s; retrying",
                    transactional_id,
                    tp,
                    error.error_name,
                )
            elif error in FENCED:
                raise _AbandonedError(f"{tp} answered {error.error_name}: fenced")
            else:
                raise _AbandonedError(f"unexpected {error.error_name} writing a marker to {tp}")

    async def _write_complete(
        self,
        transactional_id: str,
        coordinator_epoch: int,
        metadata: TransactionMetadata,
        send: TxnSendMarkers,
    ) -> bool:
        partition = self._manager.partition_for(transactional_id)
        while self._current(transactional_id, coordinator_epoch, metadata):
            error = await self._manager.write(
                partition, [record_for(transactional_id, send.complete)]
            )
            if not self._current(transactional_id, coordinator_epoch, metadata):
                break
            if error is None:
                metadata.complete_transition_to(send.complete)
                return True
            if write_error(error) is not COORDINATOR_NOT_AVAILABLE:
                mapped = on_append_failed(metadata, TxnAppend(send.complete), error)
                logger.error(
                    "transactional id %s: could not write %s: %s",
                    transactional_id,
                    send.complete.txn_state.value,
                    mapped.error_name,
                )
                return False
            await asyncio.sleep(self._retry_backoff_s)
        logger.info(
            "transactional id %s: no longer its coordinator at epoch %d; the new one completes it",
            transactional_id,
            coordinator_epoch,
        )
        return False
