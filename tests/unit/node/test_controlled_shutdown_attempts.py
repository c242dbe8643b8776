"""A broker's controlled shutdown makes ``controlled.shutdown.max.retries`` attempts in all, as
Kafka's KafkaServer.controlledShutdown does (it counts the setting down, one per attempt), with
the backoff between attempts only; 0 attempts none and stops at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kafkasim.common.errors import error_for_name
from kafkasim.node.broker import Broker


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_controlled_shutdown_attempts_as_many_times_as_the_setting(
    retries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[int] = []
    sleeps: list[float] = []

    async def refused() -> list[object]:
        attempts.append(1)
        raise error_for_name("NOT_CONTROLLER")("no controller answers")

    broker = SimpleNamespace(
        broker_id=1,
        config={
            "controlled.shutdown.max.retries": retries,
            "controlled.shutdown.retry.backoff.ms": 5,
        },
        _request_controlled_shutdown=refused,
    )

    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    asyncio.run(Broker._controlled_shutdown(broker))  # type: ignore[arg-type]
    assert len(attempts) == retries
    assert sleeps == [0.005] * max(retries - 1, 0)
