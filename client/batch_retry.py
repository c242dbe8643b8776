"""When a failed batch of the producer may be sent again, and the error it fails with once
its time is up (rule 5 of :mod:`client.producer`): :class:`BatchRetryPolicy` (``retries``,
``retry.backoff.ms``, the batch's ``delivery.timeout.ms`` deadline, as tenacity strategies)
and :func:`delivery_timeout`. The sender (:mod:`client.sender`) asks them per batch."""

from __future__ import annotations

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, stop_any, wait_fixed
from tenacity.stop import stop_base

from kafkasim.client.accumulator import ProducerBatch
from kafkasim.client.producer_errors import DeliveryTimeoutError
from kafkasim.common.clock import Clock

__all__ = ["BatchRetryPolicy", "StopAtDeadline", "delivery_timeout"]


class BatchRetryPolicy:
    """When a failed batch may be sent again, and after how long: tenacity's stop and wait
    strategies, asked by the sender for one batch (the sender is event-driven, so it consults
    the policy instead of running a retry loop). Stops after ``retries`` retries or at the
    batch's deadline on the producer's clock; waits ``retry.backoff.ms`` (fixed, as Kafka
    before 3.7)."""

    def __init__(self, retries: int, retry_backoff_ms: int, clock: Clock) -> None:
        self._retrying = AsyncRetrying(
            stop=stop_any(stop_after_attempt(retries + 1), StopAtDeadline(clock)),
            wait=wait_fixed(retry_backoff_ms / 1000),
        )

    def backoff_ms(self, batch: ProducerBatch) -> int | None:
        """The wait before the next attempt, or None when the batch must not be retried."""
        state = RetryCallState(self._retrying, None, (), {"deadline_ms": batch.deadline_ms})
        state.attempt_number = batch.attempts
        if self._retrying.stop(state):
            return None
        return round(self._retrying.wait(state) * 1000)


class StopAtDeadline(stop_base):
    """Stop once the clock reaches the ``deadline_ms`` the attempt state carries."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def __call__(self, retry_state: RetryCallState) -> bool:
        deadline_ms: int = retry_state.kwargs["deadline_ms"]
        return self._clock.monotonic_ms() >= deadline_ms


def delivery_timeout(
    batch: ProducerBatch, now_ms: int, last_error: BaseException | None
) -> DeliveryTimeoutError:
    """Kafka's message, plus the error of the last attempt when there was one."""
    message = (
        f"Expiring {batch.record_count} record(s) for {batch.tp}:"
        f"{now_ms - batch.created_ms} ms has passed since batch creation"
    )
    if last_error is not None:
        message += f" (last error: {last_error})"
    error = DeliveryTimeoutError(message)
    error.__cause__ = last_error
    return error
