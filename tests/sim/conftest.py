"""Deterministic in-process cluster tests: brokers, controller, SimZooKeeper and SimNetwork on
the virtual-time loop (one process, one thread; time jumps when nothing is ready)."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
