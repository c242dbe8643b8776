"""The transactional producer's states and Kafka's legal transitions between them
(``TransactionManager.State.isTransitionValid``, Kafka 3.7), and how each response error is
classified.

States::

    UNINITIALIZED ──init_transactions──▶ INITIALIZING ──InitProducerId ok──▶ READY
    READY ──begin_transaction──▶ IN_TRANSACTION
    IN_TRANSACTION ──commit_transaction──▶ COMMITTING_TRANSACTION ──EndTxn ok──▶ READY
    IN_TRANSACTION | ABORTABLE_ERROR ──abort_transaction──▶ ABORTING_TRANSACTION ──EndTxn ok──▶
        READY, or INITIALIZING when the epoch must be bumped first (KIP-360), then READY
    IN_TRANSACTION | COMMITTING_TRANSACTION | INITIALIZING ──abortable error──▶ ABORTABLE_ERROR
    any ──fatal error──▶ FATAL_ERROR (never left: the producer can only be closed)
    ABORTABLE_ERROR ──authorization error on InitProducerId──▶ UNINITIALIZED (KAFKA-13668:
        init_transactions may be called again once the ACLs are fixed)

Errors, as Kafka's handlers sort them (each handler in :mod:`client.transaction_manager`
lists its own):

* **retriable** — NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE forget the coordinator, queue
  a FindCoordinator and send the request again; any other retriable code
  (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT, ...) sends it
  again after ``retry.backoff.ms``;
* **abortable** — the transaction cannot commit, ``abort_transaction`` recovers: a produce
  error inside a transaction, TOPIC_AUTHORIZATION_FAILED or a failed partition in
  AddPartitionsToTxn, GROUP_AUTHORIZATION_FAILED, a fenced consumer member in
  TxnOffsetCommit; UNKNOWN_PRODUCER_ID and INVALID_PRODUCER_ID_MAPPING on a transactional
  request are abortable *with an epoch bump* when the coordinator supports KIP-360
  (InitProducerId v3+), fatal otherwise;
* **fatal** — PRODUCER_FENCED (and INVALID_PRODUCER_EPOCH from a transaction coordinator,
  which older coordinators send instead), TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  INVALID_TXN_STATE, UNSUPPORTED_VERSION, CLUSTER_AUTHORIZATION_FAILED on produce, and every
  error a handler does not expect.

Pure: no IO, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Final

from kafkasim.common.errors import KafkaError, error_for_code, error_for_name

__all__ = [
    "ABORTABLE_WITH_BUMP_CODES",
    "COORDINATOR_MOVED_CODES",
    "FATAL_PRODUCE_ERRORS",
    "FENCED_CODES",
    "NO_ERROR",
    "TxnState",
    "error_of",
    "is_retriable",
    "is_transition_valid",
    "valid_sources",
]


class TxnState(Enum):
    """Kafka's ``TransactionManager.State``."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


_S = TxnState
# target -> the states it may be entered from; FATAL_ERROR may be entered from any state.
_VALID_SOURCES: Final[Mapping[TxnState, frozenset[TxnState]]] = {
    _S.UNINITIALIZED: frozenset({_S.READY, _S.ABORTABLE_ERROR}),
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED, _S.ABORTING_TRANSACTION}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING_TRANSACTION, _S.ABORTING_TRANSACTION}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING_TRANSACTION: frozenset({_S.IN_TRANSACTION}),
    _S.ABORTING_TRANSACTION: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR}),
    _S.ABORTABLE_ERROR: frozenset(
        {_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION, _S.ABORTABLE_ERROR, _S.INITIALIZING}
    ),
    _S.FATAL_ERROR: frozenset(TxnState),
}


def valid_sources(target: TxnState) -> frozenset[TxnState]:
    """The states from which ``target`` may be entered."""
    return _VALID_SOURCES[target]


def is_transition_valid(source: TxnState, target: TxnState) -> bool:
    return source in _VALID_SOURCES[target]


def _codes(*names: str) -> frozenset[int]:
    return frozenset(error_for_name(name).code for name in names)


def error_of(code: int, message: str = "") -> KafkaError:
    """The error a response code stands for (UNKNOWN_SERVER_ERROR for codes we do not know)."""
    return error_for_code(code)(message)


def is_retriable(code: int) -> bool:
    """Kafka's ``RetriableException``: the same request may succeed if sent again."""
    return error_for_code(code).retriable


NO_ERROR: Final = 0


# The coordinator moved or is not there yet: look it up again, then retry.
COORDINATOR_MOVED_CODES: Final = _codes("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE")
# Another producer with the same transactional id has a newer epoch. Old coordinators answer
# INVALID_PRODUCER_EPOCH where newer ones say PRODUCER_FENCED: both are fencing.
FENCED_CODES: Final = _codes("INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED")
# The coordinator lost or never had this producer id: abort, then bump the epoch (KIP-360).
ABORTABLE_WITH_BUMP_CODES: Final = _codes("UNKNOWN_PRODUCER_ID", "INVALID_PRODUCER_ID_MAPPING")
# A produce error that ends the producer rather than the transaction (maybeTransitionToErrorState).
FATAL_PRODUCE_ERRORS: Final = tuple(
    error_for_name(name)
    for name in (
        "CLUSTER_AUTHORIZATION_FAILED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "PRODUCER_FENCED",
        "UNSUPPORTED_VERSION",
    )
)
