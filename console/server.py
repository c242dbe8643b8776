"""The console's web application.

Starlette on uvicorn (both pinned in pyproject.toml): maintained, asyncio like the broker and
the clients it reuses (the poller's gRPC, kazoo and admin calls run on the server's own event
loop, no threads of ours), and Server-Sent Events are a plain ``StreamingResponse`` — one
long GET per page, which a browser's ``EventSource`` reconnects by itself, no WebSocket
protocol needed for a one-way feed. Everything the page loads (HTML, JS, CSS, and Plotly's
``plotly.min.js`` from the pinned plotly package, the same file the reports inline:
``faults.report.plotly_js_path``) is served from inside the installation.

Routes: ``GET /`` the page; ``GET /api/view`` the view model (JSON; a replay takes ``?t=MS``);
``GET /api/events`` the view as Server-Sent Events, once a second and at once when a
ZooKeeper watch fires; ``POST /api/fault`` ``{"action": ..., "broker": N}`` a fault button
(``console.faults``); ``POST /api/workload`` ``{"action": "start", "topic": ..., "rate": R,
"acks": ..., "consumer": true}`` or ``{"action": "stop"}`` the built-in workload
(``console.workload``), its live verdict in the view's ``workload``. Every refusal is a 4xx
JSON ``{"error": ...}`` saying what was wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kafkasim.console.faults import FaultRefusedError, Injector
from kafkasim.console.model import (
    UNKNOWN,
    UP,
    Event,
    RatePoint,
    Snapshot,
    events_between,
    rates_between,
    view,
)
from kafkasim.console.replay import Replay
from kafkasim.console.workload import ConsoleWorkload, parse_start
from kafkasim.faults.report import plotly_js_path

__all__ = ["LiveConsole", "ReplayConsole", "SnapshotSource", "create_app"]

logger = logging.getLogger(__name__)

STATIC: Final = Path(__file__).with_name("static")
TICK_S: Final = 1.0
TIMELINE_MAX: Final = 500
RATES_KEPT_MS: Final = 5 * 60 * 1000


class SnapshotSource(Protocol):
    """What the live console polls (``console.live.Poller``, or a test's fake)."""

    changed: asyncio.Event
    requests: int

    async def snapshot(self) -> Snapshot: ...

    async def close(self) -> None: ...


class LiveConsole:
    """The live state: the latest snapshot, the timeline and the rate series; ``version``
    counts the views computed (the event stream sends each once)."""

    def __init__(
        self,
        source: SnapshotSource,
        injector: Injector,
        clock_ms: Callable[[], int],
        workload: ConsoleWorkload | None = None,
    ):
        self.source = source
        self.injector = injector
        self.workload = workload
        self.clock_ms = clock_ms
        self.snapshot: Snapshot | None = None
        self.timeline: deque[Event] = deque(maxlen=TIMELINE_MAX)
        self.rates: deque[RatePoint] = deque()
        self.current: dict[str, Any] = {"brokers": [], "topics": [], "timeline": []}
        self.version = 0
        self.updated = asyncio.Condition()
        self.polls = 0
        self.error: str | None = None
        # Set when the server is asked to stop (cli.console.serve): every event stream ends
        # then, so that an open page does not hold the server's graceful shutdown forever.
        self.stopping = asyncio.Event()

    def topics(self) -> dict[str, int]:
        """The cluster's topics as last polled: name → number of partitions."""
        found: dict[str, int] = {}
        for p in () if self.snapshot is None else self.snapshot.partitions:
            found[p.topic] = max(found.get(p.topic, 0), p.partition + 1)
        return found

    def answering(self) -> list[str]:
        """The addresses of the brokers serving as last polled (up and registered)."""
        if self.snapshot is None:
            return []
        return [
            b.address for b in self.snapshot.brokers if b.process in (UP, UNKNOWN) and b.registered
        ]

    def note(self, kind: str, text: str) -> None:
        """An event from the console itself (a fault button, a broker serving again)."""
        self.timeline.append(Event(self.clock_ms(), kind, text))

    async def poll_once(self) -> None:
        try:
            snap = await self.source.snapshot()
            self.error = None
        except Exception as e:  # the page says why; the next tick tries again
            logger.warning("poll failed: %s", e)
            self.error = f"{type(e).__name__}: {e}"
            snap = None
        if snap is not None:
            self.timeline.extend(events_between(self.snapshot, snap))
            self.rates.extend(rates_between(self.snapshot, snap))
            while self.rates and self.rates[0].time_ms < snap.time_ms - RATES_KEPT_MS:
                self.rates.popleft()
            self.snapshot = snap
        self.polls += 1
        if self.workload is not None:
            self.workload.tick()
        if self.snapshot is not None:
            self.current = view(
                self.snapshot,
                list(self.timeline),
                list(self.rates),
                extra={
                    "live": True,
                    "error": self.error,
                    "console_requests": self.source.requests,
                    "faults_enabled": self.injector.backend is not None,
                    "workload": None if self.workload is None else self.workload.status(),
                },
            )
        async with self.updated:
            self.version += 1
            self.updated.notify_all()

    async def run(self) -> None:
        while True:
            await self.poll_once()
            self.source.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.source.changed.wait(), TICK_S)

    async def stream(self, request: Request) -> AsyncIterator[str]:
        seen = -1
        while not self.stopping.is_set() and not await request.is_disconnected():
            if seen != self.version:
                seen = self.version
                yield f"data: {json.dumps(self.current)}\n\n"
            async with self.updated:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.updated.wait(), TICK_S)


class ReplayConsole:
    def __init__(self, replay: Replay) -> None:
        self.replay = replay


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


LOOPBACK_NAMES: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def allowed_hosts_for(bind_host: str) -> frozenset[str] | None:
    """The Host header values a console bound to ``bind_host`` answers POSTs for: loopback names
    (and the bound address itself); None (any) when it listens on every interface, which the
    user chose."""
    if bind_host in ("0.0.0.0", "::", ""):
        return None
    return LOOPBACK_NAMES | {bind_host}


def _check_origin(request: Request, allowed_hosts: frozenset[str] | None) -> None:
    """A fault or workload button is reachable from the console's own page only: the body must
    be JSON (another site's page cannot send that without a CORS preflight, which this server
    never grants), an ``Origin`` must be the console itself, and the ``Host`` one of the names
    the console listens by (a DNS-rebound name is refused)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise FaultRefusedError(
            415, f"the body must be sent as application/json, got {content_type or 'no type'!r}"
        )
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if allowed_hosts is not None and name not in allowed_hosts:
        raise FaultRefusedError(403, f"refused: Host {host!r} is not this console's address")
    origin = request.headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != host:
        raise FaultRefusedError(403, f"refused: a page of {origin} may not act on this console")


async def _json_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FaultRefusedError(400, f"malformed JSON body: {e}") from None
    if not isinstance(body, dict):
        raise FaultRefusedError(400, f"the body must be a JSON object, got {type(body).__name__}")
    return body


def create_app(
    console: LiveConsole | ReplayConsole, allowed_hosts: frozenset[str] | None = LOOPBACK_NAMES
) -> Starlette:
    """The application over a live cluster or a replay; POSTs are answered for the Host names
    in ``allowed_hosts`` only (None: any; see ``allowed_hosts_for``)."""

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def plotly(request: Request) -> Response:
        return FileResponse(plotly_js_path(), media_type="text/javascript")

    async def api_view(request: Request) -> Response:
        if isinstance(console, ReplayConsole):
            raw = request.query_params.get("t", "0")
            try:
                t_ms = int(raw)
            except ValueError:
                return _error(400, f"t must be a whole number of milliseconds, got {raw!r}")
            if t_ms < 0:
                return _error(400, f"t must be 0 or more, got {t_ms}")
            return JSONResponse(console.replay.view_at(t_ms))
        return JSONResponse(console.current)

    async def api_events(request: Request) -> Response:
        if isinstance(console, ReplayConsole):
            return _error(409, "a replay has no live events: step it with /api/view?t=MS")
        return StreamingResponse(
            console.stream(request),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )

    async def api_fault(request: Request) -> Response:
        try:
            if isinstance(console, ReplayConsole):
                raise FaultRefusedError(409, "a replay has no cluster to inject faults into")
            _check_origin(request, allowed_hosts)
            body = await _json_body(request)
            unknown = sorted(set(body) - {"action", "broker"})
            if unknown:
                raise FaultRefusedError(
                    400, f"unknown fields {unknown}; expected action and broker"
                )
            message = await console.injector.apply(body.get("action"), body.get("broker"))
        except FaultRefusedError as e:
            return _error(e.status, str(e))
        await console.poll_once()
        return JSONResponse({"ok": True, "message": message})

    async def api_workload(request: Request) -> Response:
        try:
            if isinstance(console, ReplayConsole):
                raise FaultRefusedError(409, "a replay has no cluster to run a workload on")
            workload = console.workload
            if workload is None:
                raise FaultRefusedError(409, "this console has no workload")
            _check_origin(request, allowed_hosts)
            body = await _json_body(request)
            action = body.get("action")
            if action == "start":
                message = await workload.start(parse_start(body, console.topics()))
            elif action == "stop":
                extra = sorted(set(body) - {"action"})
                if extra:
                    raise FaultRefusedError(400, f"stop takes no other field, got {extra}")
                message = await workload.stop()
            else:
                raise FaultRefusedError(400, f"action must be start or stop, got {action!r}")
        except FaultRefusedError as e:
            return _error(e.status, str(e))
        await console.poll_once()
        return JSONResponse({"ok": True, "message": message})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            return JSONResponse(
                {"error": f"{request.method} is not allowed on {request.url.path}; use {allowed}"},
                status_code=405,
                headers=exc.headers,
            )
        if exc.status_code == 404:
            return _error(404, f"no such page: {request.url.path}")
        return _error(exc.status_code, str(exc.detail))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if isinstance(console, ReplayConsole):
            yield
            return
        task = asyncio.get_running_loop().create_task(console.run(), name="console poll")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if console.workload is not None:
                await console.workload.close()
            await console.injector.close()
            await console.source.close()

    routes = [
        Route("/", page),
        Route("/static/plotly.min.js", plotly),
        Route("/api/view", api_view),
        Route("/api/events", api_events),
        Route("/api/fault", api_fault, methods=["POST"]),
        Route("/api/workload", api_workload, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: http_error
    }
    return Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
