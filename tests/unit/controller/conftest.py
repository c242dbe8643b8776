"""Controller tests must leave nothing behind: asyncio reports a task destroyed while pending
or an exception nobody retrieved through its logger, not as a warning, so ``-W error`` would
miss it; this fixture fails the test instead."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_asyncio_complaints(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    yield
    gc.collect()
    complaints = [
        r.getMessage()
        for r in caplog.get_records("call") + caplog.get_records("teardown")
        if r.name == "asyncio" and r.levelno >= logging.ERROR
    ]
    assert not complaints, complaints


@pytest.fixture(autouse=True)
def _no_controller_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """An ERROR from the controller is a bug in it (or a scenario it did not expect)."""
    yield
    errors = [
        r.getMessage()
        for r in caplog.get_records("call")
        if r.name.startswith("controller") and r.levelno >= logging.ERROR
    ]
    assert not errors, errors
