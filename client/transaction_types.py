"""The transactional producer's values: what :class:`~client.transaction_manager.
TransactionManager` asks the sender to send (one request type per Kafka API, as plain frozen
values, wire-free: the sender translates them for the gRPC or the Kafka protocol front door),
what the sender feeds back (one response type per API, Kafka's error codes unchanged), the
queued request itself (:class:`TxnRequest`, Kafka's ``TxnRequestHandler`` without the
handler: the manager keeps the handling), and the result a user's call waits on
(:class:`TransactionalResult`, Kafka's ``TransactionalRequestResult``).

Nothing here does IO or reads a clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, Final

from kafkasim.common.types import TopicPartition

__all__ = [
    "ADD_PARTITIONS_RETRY_BACKOFF_MS",
    "NO_PRODUCER_ID_AND_EPOCH",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "ConsumerGroupMetadata",
    "CoordinatorNode",
    "CoordinatorType",
    "EndTxnRequest",
    "EndTxnResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "OffsetAndMetadata",
    "Priority",
    "ProducerIdAndEpoch",
    "TransactionalResult",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
    "TxnRequest",
    "TxnRequestBody",
    "TxnResponseBody",
]

# Kafka's TransactionManager lowers the backoff to this when the first AddPartitionsToTxn of a
# transaction meets CONCURRENT_TRANSACTIONS: the previous transaction is still completing and
# will be done soon (KAFKA-5477).
ADD_PARTITIONS_RETRY_BACKOFF_MS: Final = 20


class CoordinatorType(IntEnum):
    """FindCoordinator's ``key_type``: whose coordinator is asked for."""

    GROUP = 0
    TRANSACTION = 1


class Priority(IntEnum):
    """The order in which queued requests leave (Kafka's ``TransactionManager.Priority``): the
    coordinator first, then a producer id, then partitions and offsets, then EndTxn; an
    InitProducerId that bumps the epoch after an abort goes after the abort's EndTxn."""

    FIND_COORDINATOR = 0
    INIT_PRODUCER_ID = 1
    ADD_PARTITIONS_OR_OFFSETS = 2
    END_TXN = 3
    EPOCH_BUMP = 4


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """Kafka's ``ProducerIdAndEpoch``; :data:`NO_PRODUCER_ID_AND_EPOCH` before InitProducerId."""

    producer_id: int
    epoch: int

    @property
    def is_valid(self) -> bool:
        return self.producer_id >= 0

    def __str__(self) -> str:
        return f"(producerId={self.producer_id}, epoch={self.epoch})"


NO_PRODUCER_ID_AND_EPOCH: Final = ProducerIdAndEpoch(-1, -1)


@dataclass(frozen=True, slots=True)
class CoordinatorNode:
    """The broker a FindCoordinator answer names."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """The offset a consumer group commits for a partition (Kafka's ``OffsetAndMetadata``)."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """The consuming member whose offsets a transaction commits (Kafka's
    ``ConsumerGroupMetadata``): the coordinator refuses them from a member fenced by a
    rebalance (generation -1 and no member id skip that check)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


# -- requests -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    key_type: CoordinatorType
    key: str


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest:
    """A first InitProducerId carries no producer id (-1/-1); an epoch bump (KIP-360) carries
    the current pair so the coordinator can tell a retry from a zombie."""

    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """Sent to the group coordinator (not the transaction coordinator) after AddOffsetsToTxn."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: tuple[tuple[TopicPartition, OffsetAndMetadata], ...]


@dataclass(frozen=True, slots=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool


TxnRequestBody = (
    FindCoordinatorRequest
    | InitProducerIdRequest
    | AddPartitionsToTxnRequest
    | AddOffsetsToTxnRequest
    | TxnOffsetCommitRequest
    | EndTxnRequest
)

# -- responses ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    error_code: int = 0
    node_id: int = -1
    host: str = ""
    port: int = -1
    error_message: str = ""


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    error_code: int = 0
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnResponse:
    errors: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnResponse:
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitResponse:
    errors: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    error_code: int = 0


TxnResponseBody = (
    FindCoordinatorResponse
    | InitProducerIdResponse
    | AddPartitionsToTxnResponse
    | AddOffsetsToTxnResponse
    | TxnOffsetCommitResponse
    | EndTxnResponse
)

# -- the result a call waits on, and the queued request -------------------------------------------


class TransactionalResult:
    """What ``init_transactions``, ``send_offsets_to_transaction``, ``commit_transaction`` and
    ``abort_transaction`` return: completed once (:meth:`done` or :meth:`fail`) by the
    response that ends the operation. The producer waits for it (``max.block.ms``) and calls
    :meth:`ack` when it saw the outcome; a call whose result was never acknowledged (the wait
    timed out) must be retried before any other transactional call (Kafka's ``isAcked``)."""

    __slots__ = ("_acked", "_completed", "error", "operation")

    def __init__(self, operation: str) -> None:
        self.operation = operation
        self.error: BaseException | None = None
        self._completed = False
        self._acked = False

    @property
    def is_completed(self) -> bool:
        return self._completed

    @property
    def is_successful(self) -> bool:
        return self._completed and self.error is None

    @property
    def is_acked(self) -> bool:
        return self._acked

    def done(self) -> None:
        self._completed = True

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._completed = True

    def ack(self) -> None:
        """The caller saw the outcome (Kafka's ``await`` returning or raising the error).
        Refused while the result is still open: an unfinished call is not acknowledged."""
        if not self._completed:
            raise ValueError(f"{self.operation} has not completed: nothing to acknowledge")
        self._acked = True

    def __repr__(self) -> str:
        state = "pending" if not self._completed else ("failed" if self.error else "done")
        return f"TransactionalResult({self.operation}, {state})"


@dataclass(eq=False, slots=True)
class TxnRequest:
    """One queued request: its body, the queue priority, which coordinator it goes to (None:
    any broker, for FindCoordinator), the result it completes, and its retry state. The
    sender sends ``body`` to :meth:`TransactionManager.coordinator` of
    ``coordinator_type`` after waiting :attr:`send_delay_ms`, and feeds the answer back.

    ``request_id`` orders equal priorities first-in first-out, as the queue must: two
    AddPartitionsToTxn or an AddOffsetsToTxn and its TxnOffsetCommit keep their order."""

    _ids: ClassVar[itertools.count[int]] = itertools.count()

    body: TxnRequestBody
    priority: Priority
    coordinator_type: CoordinatorType | None
    result: TransactionalResult
    retry_backoff_ms: int
    is_retry: bool = False
    request_id: int = field(default_factory=lambda: next(TxnRequest._ids))

    @property
    def is_end_txn(self) -> bool:
        return isinstance(self.body, EndTxnRequest)

    @property
    def coordinator_key(self) -> str:
        """The FindCoordinator key: the group for TxnOffsetCommit, else the transactional id."""
        body = self.body
        if isinstance(body, TxnOffsetCommitRequest | AddOffsetsToTxnRequest) and (
            self.coordinator_type is CoordinatorType.GROUP
        ):
            return body.group_id
        if isinstance(body, FindCoordinatorRequest):
            return body.key
        return body.transactional_id

    @property
    def send_delay_ms(self) -> int:
        """How long the sender waits before sending: ``retry.backoff.ms`` on a retry (Kafka's
        Sender sleeps it just before the send), nothing on a first attempt."""
        return self.retry_backoff_ms if self.is_retry else 0

    def sort_key(self) -> tuple[int, int]:
        return (int(self.priority), self.request_id)
