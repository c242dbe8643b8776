"""One processing pass at a time over a ZooKeeper notification path (Kafka's
``ZkNodeChangeNotificationListener`` loop), shared by the topic config listener
(``node.config_changes``) and the ACL authorizer (``node.acl_authorizer``).

Watches are one-shot and a lost connection drops them: a watch event, a reconnection
(CONNECTED) or a new session each :meth:`request` a pass; the pass re-reads the children and
sets the watch again. Passes never overlap; requests arriving during a pass cause exactly one
more. A pass that fails with one of ``retried`` errors is logged and retried at the next
request. Not thread-safe: runs on the broker's event loop; callbacks only schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from kafkasim.common.coordination import Coordination, SessionState, WatchEvent

logger = logging.getLogger(__name__)


class SerialPasses:
    def __init__(
        self,
        name: str,
        process: Callable[[], Awaitable[None]],
        retried: tuple[type[Exception], ...],
    ) -> None:
        self.name = name
        self._process = process
        self._retried = retried
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self.running = False

    def listen(self, coordination: Coordination, current: Callable[[], Coordination]) -> None:
        """A pass whenever ``coordination`` (re)connects while it is still ``current()``."""

        def listener(state: SessionState) -> None:
            if coordination is current() and state is SessionState.CONNECTED:
                self.request()

        coordination.add_session_listener(listener)

    def on_watch(self, _event: WatchEvent) -> None:
        self.request()

    def request(self) -> None:
        if not self.running:
            return
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        self._again = True
        while self._again and self.running:
            self._again = False
            try:
                await self._process()
            except self._retried as e:
                logger.warning("%s: processing notifications failed: %s", self.name, e)

    async def stop(self) -> None:
        self.running = False
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_idle(self) -> None:
        """Until no pass is running or pending (for tests)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)
