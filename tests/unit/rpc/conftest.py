"""Every rpc test must leave nothing behind: no pending task, no unretrieved exception.

asyncio reports those through its logger rather than as warnings, so ``-W error`` alone would
not catch them; this fixture fails the test instead.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_asyncio_leaks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    yield
    gc.collect()  # tasks and futures dropped without cleanup complain when collected
    leaks = [
        record.getMessage()
        for record in caplog.get_records("call") + caplog.get_records("teardown")
        if record.name == "asyncio" and record.levelno >= logging.ERROR
    ]
    assert not leaks, f"asyncio reported leaks: {leaks}"
