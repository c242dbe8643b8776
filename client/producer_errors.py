"""The producer's errors, which of them a retry may cure, and how a background task's failure
is reported. Re-exported by :mod:`client.producer`, where users import them from.

Error tree::

    KafkasimError
    ├── KafkaError                  an error with Kafka's code (common/errors.py), e.g.
    │   ├── NotLeaderOrFollowerError    the broker's answer, after the last allowed retry
    │   ├── NetworkError                NETWORK_EXCEPTION: "Disconnected from node N" (the
    │   │                               transport's RpcError is its __cause__)
    │   ├── RecordTooLargeError         MESSAGE_TOO_LARGE: bigger than max.request.size
    │   ├── OutOfOrderSequenceNumberError
    │   ├── InvalidConfigError          a bad or unknown config key (named)
    │   ├── DeliveryTimeoutError        REQUEST_TIMED_OUT: delivery.timeout.ms or max.block.ms
    │   │                               passed (the last attempt's error is its __cause__)
    │   └── ProducerFencedError, InvalidProducerEpochError, TransactionalIdAuthorizationFailed-
    │                                   Error, ...: a transactional call's failure, by Kafka's code
    ├── ProducerClosedError         send after close, or records dropped by a forced close
    ├── IllegalTransactionStateError  a transactional call refused in the producer's state
    │                               (Kafka's IllegalStateException): names the call and the state
    └── TransactionError            a transaction failed without one Kafka code to name it, or a
                                    call refused because an earlier error must be handled first
                                    (Kafka's plain KafkaException; the error is its __cause__)
        └── TransactionAbortedError   a batch failed because its transaction is being aborted
"""

from __future__ import annotations

import asyncio
import logging

from kafkasim.common.errors import KafkaError, KafkasimError, error_for_name
from kafkasim.common.rpc import RpcError

# Every producer module logs as "client.producer", the one name users filter on.
logger = logging.getLogger("client.producer")

__all__ = [
    "DeliveryTimeoutError",
    "IllegalTransactionStateError",
    "ProducerClosedError",
    "TransactionAbortedError",
    "TransactionError",
    "log_task_error",
    "retriable",
]


class DeliveryTimeoutError(KafkaError):
    """A record was not acknowledged within ``delivery.timeout.ms`` (or its topic did not
    appear in the metadata within ``max.block.ms``): Kafka's TimeoutException."""

    code = error_for_name("REQUEST_TIMED_OUT").code
    error_name = "REQUEST_TIMED_OUT"
    retriable = True


class ProducerClosedError(KafkasimError):
    """The producer is closed (``send`` after ``close``), or a forced close dropped records."""


class IllegalTransactionStateError(KafkasimError):
    """A transactional call the producer refuses in its current state (Kafka's
    ``IllegalStateException`` from its ``TransactionManager``), e.g. ``commit_transaction``
    before ``begin_transaction``. The message starts "Cannot call <operation> in state
    <STATE>: " and goes on with Kafka's reason; both are kept as attributes."""

    def __init__(self, operation: str, state: str, reason: str) -> None:
        super().__init__(f"Cannot call {operation} in state {state}: {reason}")
        self.operation = operation
        self.state = state
        self.reason = reason


class TransactionError(KafkasimError):
    """Kafka's plain ``KafkaException`` from the transactional producer: an error with no
    Kafka code of its own ("Unexpected error in EndTxnResponse: ..."), or a call refused
    because an earlier error put the producer in an error state (that error is the
    ``__cause__``)."""


class TransactionAbortedError(TransactionError):
    """Kafka's ``TransactionAbortedException``: a batch not yet sent when its transaction
    began to abort is failed with this (or with the error that forced the abort)."""

    def __init__(self, message: str = "Failing batch since transaction was aborted") -> None:
        super().__init__(message)


def retriable(e: BaseException) -> bool:
    """May the same request succeed if sent again (the error says so)?"""
    return isinstance(e, (RpcError, KafkaError)) and e.retriable


def log_task_error(task: asyncio.Task[None]) -> None:
    """A background task ended by an exception: a bug, logged rather than lost."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("producer task %s failed", task.get_name(), exc_info=task.exception())
