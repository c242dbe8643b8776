"""The controller's logger: one name for every part of it, lines prefixed as Kafka's are."""

from __future__ import annotations

import logging
from collections.abc import Callable

# The controller's log lines keep one logger name whichever part writes them.
logger = logging.getLogger("controller.controller")


class ControllerLog:
    """Log lines prefixed ``[Controller id=1 epoch=3]``; the epoch is read at each line."""

    def __init__(self, broker_id: int, epoch: Callable[[], int]) -> None:
        self._broker_id = broker_id
        self._epoch = epoch

    def _prefix(self) -> str:
        return f"[Controller id={self._broker_id} epoch={self._epoch()}] "

    def debug(self, msg: str, *args: object) -> None:
        logger.debug(self._prefix() + msg, *args)

    def info(self, msg: str, *args: object) -> None:
        logger.info(self._prefix() + msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        logger.warning(self._prefix() + msg, *args)

    def error(self, msg: str, *args: object) -> None:
        logger.error(self._prefix() + msg, *args)

    def exception(self, msg: str, *args: object) -> None:
        logger.exception(self._prefix() + msg, *args)
