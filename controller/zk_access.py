"""The controller's ZooKeeper access: the Coordination port with connection loss retried.

Bounded attempts with exponential backoff; every other error goes to the caller. Retrying is
safe because every write the controller retries is conditional (see the class).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from kafkasim.common.coordination import ConnectionLossError, Coordination, Op, Stat, Watcher

_T = TypeVar("_T")


class RetryingCoordination:
    """The Coordination port with connection loss retried (bounded backoff, bounded attempts).

    Connection loss is ambiguous (the operation may have happened): every write the controller
    retries is conditional, so a repeat fails with BadVersion/NodeExists and is re-decided.
    """

    def __init__(self, zk: Coordination, attempts_max: int, backoff_max_s: float) -> None:
        self.zk = zk
        self._attempts_max = attempts_max
        self._backoff_max_s = backoff_max_s

    async def _call(self, op: Callable[[], Awaitable[_T]]) -> _T:
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(ConnectionLossError),
            wait=wait_exponential(multiplier=0.05, min=0.05, max=self._backoff_max_s),
            stop=stop_after_attempt(self._attempts_max),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await op()
        raise AssertionError("unreachable: reraise=True")  # pragma: no cover

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        return await self._call(lambda: self.zk.get(path, watch))

    async def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        return await self._call(lambda: self.zk.exists(path, watch))

    async def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        return await self._call(lambda: self.zk.get_children(path, watch))

    async def create(self, path: str, data: bytes = b"", *, makepath: bool = False) -> str:
        return await self._call(lambda: self.zk.create(path, data, makepath=makepath))

    async def multi(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        return await self._call(lambda: self.zk.multi(ops))

    async def delete(self, path: str, version: int = -1) -> None:
        await self._call(lambda: self.zk.delete(path, version))
