"""The console's fault buttons, through the same backends as ``kafkasim chaos`` and
``kafkasim cluster kill|pause|...`` (``cluster.chaos.ChaosBackend``: ``LocalBackend`` for the
processes of ``cluster up``, ``ComposeBackend.over`` for a compose project that runs).

Each request is checked before anything happens, and a refused one injects nothing: an
unknown action or broker, a broker in the wrong state for it (kill a broker that is down,
resume one that is not paused), an action the backend cannot inject (``isolate`` on loopback
processes: the backend's own reason, ``BackendSpec.not_injectable``), or a console with no
backend at all (brokers reached by address only). The buttons map onto the chaos actions as
the runner applies them: ``kill`` is ``crash`` (SIGKILL), ``shutdown`` is
``controlled_shutdown`` (SIGTERM and a wait for the exit), ``pause``/``resume`` are SIGSTOP and
SIGCONT (``docker pause``/``unpause``, the cgroup freezer, on a compose cluster), ``restart``
starts a broker that is down and reports when it serves again (after its old registration is
gone, up to the ZooKeeper session timeout), ``isolate``/``reconnect`` cut and restore its
links where the backend can. The brokers' states are the backend's as they are when the
request is checked (``refresh`` first: for a compose cluster, the engine's). A backend step
that fails (a docker command refused) answers 502 with its reason, also on the timeline.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
from collections.abc import Callable
from typing import Final

from kafkasim.cluster.chaos import ChaosBackend, ChaosError
from kafkasim.common.errors import KafkasimError

__all__ = ["BUTTONS", "FaultRefusedError", "Injector"]

logger = logging.getLogger(__name__)

# Button → the runner's action name (``faults.actions.ACTIONS``), for the backend's spec.
BUTTONS: Final = {
    "kill": "crash",
    "shutdown": "controlled_shutdown",
    "pause": "pause",
    "resume": "pause",
    "restart": "restart",
    "isolate": "isolate",
    "reconnect": "isolate",
}
_SERVING_POLL_S: Final = 0.5


class FaultRefusedError(KafkasimError):
    """A fault request that was refused before anything was injected, or that the backend
    failed to inject; ``status`` is the HTTP status it answers with (400 malformed, 404
    unknown, 409 wrong state, 422 not injectable here, 502 the backend's step failed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Injector:
    """Applies button presses to ``backend`` (None: the console has no backend). ``paused``:
    which brokers the console paused (a paused process still runs)."""

    def __init__(
        self,
        backend: ChaosBackend | None,
        on_event: Callable[[str, str], None],
        *,
        is_paused: Callable[[int], bool] | None = None,
        on_started: Callable[[int], None] | None = None,
        serving_limit_s: float = 60.0,
    ) -> None:
        self.backend = backend
        self._on_started = on_started
        self.on_event = on_event
        self._is_paused = is_paused
        self._paused: set[int] = set()
        self._isolated: set[int] = set()
        self._serving_limit_s = serving_limit_s
        self._tasks: set[asyncio.Task[None]] = set()
        self.lock = asyncio.Lock()

    def paused(self, broker_id: int) -> bool:
        if self._is_paused is not None:
            return self._is_paused(broker_id)
        return broker_id in self._paused

    def check(self, action: object, broker: object) -> tuple[str, int, ChaosBackend]:
        """The validated request (or FaultRefusedError saying what is wrong)."""
        name, n, backend = self._request(action, broker)
        return self._in_state(name, n, backend)

    def _request(self, action: object, broker: object) -> tuple[str, int, ChaosBackend]:
        """What can be checked without asking the backend for its brokers' states."""
        if not isinstance(action, str) or action not in BUTTONS:
            raise FaultRefusedError(
                400, f"unknown action {action!r}; known: {', '.join(sorted(BUTTONS))}"
            )
        if isinstance(broker, bool) or not isinstance(broker, int):
            raise FaultRefusedError(400, f"broker must be a broker id (an integer), got {broker!r}")
        backend = self.backend
        if backend is None:
            raise FaultRefusedError(
                409,
                "this console reaches brokers by address only: no backend to inject faults "
                "through (start it with --dir on a local cluster)",
            )
        if broker not in backend.broker_ids:
            known = ", ".join(map(str, backend.broker_ids))
            raise FaultRefusedError(404, f"unknown broker {broker} (brokers {known})")
        spec_action = BUTTONS[action]
        reason = backend.spec.not_injectable.get(spec_action)
        if reason is not None:
            raise FaultRefusedError(
                422, f"{backend.spec.runtime} cannot {action} broker {broker}: {reason}"
            )
        return action, broker, backend

    def _in_state(
        self, action: str, broker: int, backend: ChaosBackend
    ) -> tuple[str, int, ChaosBackend]:
        """The request checked against the brokers' states as the backend knows them."""
        running = backend.running(broker)
        if action == "restart" and running:
            raise FaultRefusedError(409, f"broker {broker} is already running")
        if action != "restart" and not running:
            raise FaultRefusedError(409, f"broker {broker} is not running (restart it first)")
        if action == "pause" and self.paused(broker):
            raise FaultRefusedError(409, f"broker {broker} is already paused")
        if action == "resume" and not self.paused(broker):
            raise FaultRefusedError(409, f"broker {broker} is not paused")
        if action == "reconnect" and broker not in self._isolated:
            raise FaultRefusedError(409, f"broker {broker} is not isolated")
        return action, broker, backend

    async def apply(self, action: object, broker: object) -> str:
        """Inject the fault once checked; what was done (also written on the timeline)."""
        async with self.lock:  # one fault at a time: each is checked against the state it finds
            name, n, backend = self._request(action, broker)
            # The states as they are now (a compose cluster's: the engine's, in one call).
            await self._step(f"{name} broker {n}", backend.refresh)
            self._in_state(name, n, backend)
            self.on_event("fault", f"console: {name} broker {n}")
            try:
                await self._inject(name, n, backend)
            except FaultRefusedError as e:
                self.on_event("fault", f"console: {e}")
                raise
        done = {
            "kill": "killed (SIGKILL)",
            "shutdown": "shut down (controlled)",
            "pause": "paused",
            "resume": "resumed",
            "isolate": "isolated",
            "reconnect": "reconnected",
            "restart": "started; waiting for it to serve",
        }[name]
        return f"broker {n} {done}"

    async def _step(self, what: str, step: Callable[..., None], *args: object) -> None:
        """One backend call in a thread; its failure (a docker command refused, a process
        gone) answers as 502 naming it, instead of an error page."""
        try:
            await asyncio.to_thread(step, *args)
        except (ChaosError, RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            raise FaultRefusedError(502, f"{what} failed: {e}") from e

    async def _inject(self, name: str, n: int, backend: ChaosBackend) -> None:
        what = f"{name} broker {n}"
        if name == "kill":
            await self._step(what, backend.kill, n, signal.SIGKILL)
            self._paused.discard(n)
        elif name == "shutdown":
            if self.paused(n):  # a stopped process holds SIGTERM until it runs
                await self._step(what, backend.resume, n)
                self._paused.discard(n)
            await self._step(what, backend.kill, n, signal.SIGTERM)
        elif name == "pause":
            await self._step(what, backend.pause, n)
            self._paused.add(n)
        elif name == "resume":
            await self._step(what, backend.resume, n)
            self._paused.discard(n)
        elif name == "isolate":
            await self._step(what, backend.isolate, n)
            self._isolated.add(n)
        elif name == "reconnect":
            await self._step(what, backend.reconnect, n)
            self._isolated.discard(n)
        else:
            await self._step(what, backend.start_broker, n)
            if self._on_started is not None:  # e.g. the new pid on the cluster's record
                self._on_started(n)
            task = asyncio.get_running_loop().create_task(self._wait_serving(backend, n))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _wait_serving(self, backend: ChaosBackend, broker_id: int) -> None:
        waited = 0.0
        while not await asyncio.to_thread(backend.serving_again, broker_id):
            if not backend.running(broker_id) or waited > self._serving_limit_s:
                self.on_event(
                    "fault", f"broker {broker_id} did not serve ({backend.exit_note(broker_id)})"
                )
                return
            await asyncio.sleep(_SERVING_POLL_S)
            waited += _SERVING_POLL_S
        self.on_event("process", f"broker {broker_id} serving again")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
