"""The transaction coordinator's domain values: what each transactional request asks
(``*Params``), what it answers (``*Result``) and what the coordinator decided to do about it
(``Txn*`` decisions), free of any wire format.

The front doors translate their requests into these; the decisions (``node.txn_decisions``)
take and return nothing else. An ``error`` is the class of a Kafka error from
``common.errors`` (``None``: no error); its ``code`` is what goes on a wire.

A decision tells the runtime what to do next:

``TxnReply``
    Answer the request now with ``error``; nothing is written.
``TxnAppend``
    Write ``transit`` to ``__transaction_state`` (acks all), then complete the transition
    (``TransactionMetadata.complete_transition_to``) and answer; on a failed write, clear the
    pending state (``txn_decisions.on_append_failed``) and answer the mapped error.
``TxnNeedsProducerId``
    InitProducerId needs a fresh producer id (a new transactional id, or an exhausted
    epoch): allocate one (``node.producer_ids``) and decide again with it.
``TxnAbortThenRetry``
    InitProducerId found an open transaction: write ``transit`` (PrepareAbort at the fenced
    epoch) as a ``TxnAppend``, send the abort markers, and answer the client
    CONCURRENT_TRANSACTIONS so that it retries once the abort is complete.
``TxnSendMarkers``
    A PrepareCommit or PrepareAbort is in the log (just written, or found by a loading
    coordinator): answer the client (if any), write the ``result`` marker to every one of
    ``partitions``, then write ``complete`` (the pending CompleteCommit or CompleteAbort).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kafkasim.common.types import TopicPartition
from kafkasim.node.group_types import Error
from kafkasim.node.txn_metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnTransitMetadata


class TransactionResult(enum.Enum):
    """How a transaction ends (EndTxn's ``committed``; the marker's control record type)."""

    COMMIT = "COMMIT"
    ABORT = "ABORT"


# -- requests and answers ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitProducerIdParams:
    """InitProducerId with a transactional id. ``producer_id``/``producer_epoch`` are what the
    client had (KIP-360, InitProducerId v3+), both -1 for a fresh client."""

    transactional_id: str
    transaction_timeout_ms: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: Error = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnParams:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnParams:
    """The group whose offsets the transaction will commit (TxnOffsetCommit)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@dataclass(frozen=True, slots=True)
class EndTxnParams:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    result: TransactionResult


@dataclass(frozen=True, slots=True)
class TimedOutTransaction:
    """An open transaction past its timeout, as seen when the coordinator looked (Kafka's
    ``TransactionalIdAndProducerIdEpoch``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


# -- decisions -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnReply:
    error: Error = None


@dataclass(frozen=True, slots=True)
class TxnAppend:
    """``epoch_fence``: this write carries a fenced epoch (an abort for a timeout or for an
    InitProducerId); if it fails, the next fence reuses that epoch."""

    transit: TxnTransitMetadata
    epoch_fence: bool = False


@dataclass(frozen=True, slots=True)
class TxnNeedsProducerId:
    pass


@dataclass(frozen=True, slots=True)
class TxnAbortThenRetry:
    append: TxnAppend


@dataclass(frozen=True, slots=True)
class TxnSendMarkers:
    result: TransactionResult
    complete: TxnTransitMetadata
    partitions: frozenset[TopicPartition]


InitProducerIdDecision = TxnReply | TxnAppend | TxnNeedsProducerId | TxnAbortThenRetry
TxnDecision = TxnReply | TxnAppend


# -- DescribeTransactions and ListTransactions ---------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnDescription:
    """DescribeTransactions' answer for one id (Kafka's ``TransactionState`` of the response):
    with an error, only ``transactional_id`` is meaningful. ``state`` is Kafka's name
    (``TransactionState.value``)."""

    transactional_id: str
    error: Error = None
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class ListedTxn:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TxnListing:
    """ListTransactions' answer: the ids of every loaded partition that pass the filters
    (none with an error), and the state filters that name no state."""

    error: Error = None
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTxn, ...] = ()
