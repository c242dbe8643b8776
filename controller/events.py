"""The controller's event queue (Kafka's ``ControllerEventManager``).

ZooKeeper watches, admin calls, controlled shutdowns and broker answers become
:class:`ControllerEvent` s, handled one at a time by one asyncio task, so no two decisions
interleave. What handling means (who must be active, what an error does) is the owner's
``process`` function; this queue only orders, runs and accounts for events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kafkasim.controller.api import NotControllerError

_T = TypeVar("_T")


@dataclass(eq=False)
class ControllerEvent:
    """One unit of work; ``future`` (if any) receives its result or error."""

    name: str
    handler: Callable[[], Awaitable[Any]]
    future: asyncio.Future[Any] | None = None
    requires_active: bool = True

    def fail(self, error: BaseException) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_exception(error)

    def succeed(self, result: Any) -> None:
        if self.future is not None and not self.future.done():
            self.future.set_result(result)


class ControllerEventManager:
    """One queue, one task: events are processed in order, one at a time.

    While stopped, an enqueued event fails at once with NOT_CONTROLLER (watches of an old
    term may still fire). :attr:`changed` is set after every event (and replaced), for callers
    that wait until the controller's picture satisfies something.
    """

    def __init__(self, name: str, process: Callable[[ControllerEvent], Awaitable[None]]) -> None:
        self._name = name
        self._process = process
        self._queue: asyncio.Queue[ControllerEvent] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.changed = asyncio.Event()

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("the controller is already started")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    async def stop(self) -> bool:
        """Cancel the task (the event being handled fails) and fail every queued event with
        NOT_CONTROLLER. False if it was not running."""
        task, self._task = self._task, None
        if task is None:
            return False
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        while not self._queue.empty():
            self._queue.get_nowait().fail(NotControllerError("controller stopped"))
            self._queue.task_done()
        return True

    def put(self, event: ControllerEvent) -> None:
        if self._task is None:
            event.fail(NotControllerError("controller stopped"))
            return
        self._queue.put_nowait(event)

    async def submit(
        self,
        name: str,
        handler: Callable[[], Awaitable[_T]],
        *,
        requires_active: bool = True,
        not_running: str = "controller not running",
    ) -> _T:
        """Enqueue and wait for the result (raises the handler's error)."""
        if self._task is None:
            raise NotControllerError(not_running)
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self.put(ControllerEvent(name, handler, future, requires_active))
        return await future

    def idle(self) -> bool:
        return self._queue.empty()

    async def join(self) -> None:
        await self._queue.join()

    def notify_changed(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._process(event)
            finally:
                self._queue.task_done()
                self.notify_changed()
