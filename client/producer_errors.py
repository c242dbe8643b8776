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
    │   └── DeliveryTimeoutError        REQUEST_TIMED_OUT: delivery.timeout.ms or max.block.ms
    │                                   passed (the last attempt's error is its __cause__)
    └── ProducerClosedError         send after close, or records dropped by a forced close
"""

from __future__ import annotations

import asyncio
import logging

from kafkasim.common.errors import KafkaError, KafkasimError, error_for_name
from kafkasim.common.rpc import RpcError

# Every producer module logs as "client.producer", the one name users filter on.
logger = logging.getLogger("client.producer")

__all__ = ["DeliveryTimeoutError", "ProducerClosedError", "log_task_error", "retriable"]


class DeliveryTimeoutError(KafkaError):
    """A record was not acknowledged within ``delivery.timeout.ms`` (or its topic did not
    appear in the metadata within ``max.block.ms``): Kafka's TimeoutException."""

    code = error_for_name("REQUEST_TIMED_OUT").code
    error_name = "REQUEST_TIMED_OUT"
    retriable = True


class ProducerClosedError(KafkasimError):
    """The producer is closed (``send`` after ``close``), or a forced close dropped records."""


def retriable(e: BaseException) -> bool:
    """May the same request succeed if sent again (the error says so)?"""
    return isinstance(e, (RpcError, KafkaError)) and e.retriable


def log_task_error(task: asyncio.Task[None]) -> None:
    """A background task ended by an exception: a bug, logged rather than lost."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("producer task %s failed", task.get_name(), exc_info=task.exception())
