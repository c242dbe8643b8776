"""Helpers for node tests that run on a plain asyncio loop."""

from __future__ import annotations

import asyncio


async def turns() -> None:
    """Let the loop run the callbacks and wake-ups a completion schedules (a purgatory's waiter
    resumes a couple of loop iterations after its operation completes)."""
    for _ in range(3):
        await asyncio.sleep(0)
