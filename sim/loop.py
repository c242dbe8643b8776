"""A deterministic virtual-time asyncio event loop for the simulation.

Theory of operation
-------------------
asyncio's loop runs ready callbacks, then asks its selector for IO events, waiting at most until
the next timer. :class:`VirtualTimeLoop` swaps both ends of that:

1. ``time()`` reads a virtual clock that starts at ``start_time`` (0.0 by default) and only moves
   when the loop is idle. Running callbacks takes no virtual time.
2. The selector never blocks and never reports IO. Asked to wait ``t`` seconds (nothing ready,
   next timer ``t`` away), it advances the clock by ``t`` instead, so the timer is due at once.
3. Asked to wait forever (nothing ready, no timer, ``run_until_complete`` not done) it raises
   :class:`SimulationDeadlock`, naming every pending task and what it waits for: nothing can
   ever wake them, since in a simulation no IO or thread does.
4. No real IO: after construction the selector refuses to watch any file descriptor (only the
   loop's own self-pipe, registered during ``__init__``, is allowed), and ``run_in_executor``
   (hence ``getaddrinfo``, ``asyncio.to_thread``) raises — threads are not deterministic.

Determinism: the same program gives the same sequence of callbacks at the same virtual times on
every run — asyncio runs ready callbacks in FIFO order and timers by time, and nothing outside
the program feeds the loop. What the program itself must avoid: iterating sets of objects
(hash by address) or of strings (``PYTHONHASHSEED``) where order matters (``asyncio.wait``
returns sets), reading the wall clock, unseeded randomness, and dropping async generators
without closing them (their finalizers run when the garbage collector decides).

Error tree::

    KafkasimError
    └── SimulationError              the simulation runtime cannot go on
        ├── SimulationDeadlock           nothing ready, no timer, the main coroutine not done
        └── SimulationTimeLimitError  virtual time would pass ``time_limit_s``

(One module, ~620 lines: the loop, its timers and handles and the virtual clock share the
loop's private asyncio state; the per-callback and per-timer paths are inlined, measured hot.)
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import gc
import heapq
import logging
import math
import selectors
import weakref
from asyncio import format_helpers
from collections.abc import Callable, Coroutine, Generator, Iterator, Mapping, Sequence
from typing import Any, TypeVar, TypeVarTuple

from kafkasim.common.errors import KafkasimError

_log = logging.getLogger(__name__)
_heappush = heapq.heappush  # a global lookup, not a module attribute's, per timer

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

_PENDING_TASKS_REPORTED_MAX = 20
# asyncio's thresholds for sweeping cancelled timers out of the heap (base_events.py).
_MIN_SCHEDULED_TIMER_HANDLES = 100
_MAX_CANCELLED_FRACTION = 0.5
# The youngest generation's collection threshold during a run (Python's default: 700).
_GC_YOUNG_THRESHOLD = 10_000


class SimulationError(KafkasimError):
    """The simulation runtime cannot go on (a bug in the simulated program or its set-up)."""


class SimulationDeadlock(SimulationError):  # noqa: N818 -- the name the design uses
    """Nothing is ready and no timer is set, yet the main coroutine has not finished."""


class SimulationTimeLimitError(SimulationError):
    """Virtual time would pass the loop's ``time_limit_s`` (a livelock, or a too-long run)."""


class _VirtualSelector(selectors.BaseSelector):
    """A selector that reports no IO and turns every wait into a jump of virtual time.

    ``on_wait(timeout)`` is called instead of blocking: ``timeout`` is seconds until the next
    timer, 0 when callbacks are ready, ``None`` when the loop has nothing left to wait for.
    """

    def __init__(self, on_wait: Callable[[float | None], None]) -> None:
        self._on_wait = on_wait
        self._keys: dict[int, selectors.SelectorKey] = {}
        self._sealed = False

    def seal(self) -> None:
        """From now on refuse new registrations: the simulation does no real IO."""
        self._sealed = True

    @staticmethod
    def _fd(fileobj: Any) -> int:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        if not isinstance(fd, int) or fd < 0:
            raise ValueError(f"invalid file object {fileobj!r}")
        return fd

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = self._fd(fileobj)
        if self._sealed:
            raise SimulationError(
                f"real IO in the simulation: something tried to watch {fileobj!r} (fd {fd}); "
                "use SimNetwork and the simulated stores instead of sockets and files"
            )
        if fd in self._keys:
            raise KeyError(f"{fileobj!r} (fd {fd}) is already registered")
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._keys.pop(self._fd(fileobj))

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = self._keys[self._fd(fileobj)]
        key = key._replace(events=events, data=data)
        self._keys[key.fd] = key
        return key

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._keys[self._fd(fileobj)]

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        self._on_wait(timeout)
        return []

    def close(self) -> None:
        self._keys.clear()


class _Due(float):
    """A timer's place on the loop's heap: its time, compared as a float (in C), and the timer.

    asyncio's heap holds the TimerHandles themselves, whose ``__lt__`` is Python (about a fifth
    of a simulation's heap work was those calls). A float subclass compares exactly as they do,
    by time alone, equal times neither before the other: every comparison gives the same answer,
    so the heap moves as asyncio's would and timers of the same instant run in the same order.
    A slot, not an instance dict, holds the timer (one allocation less per timer).
    """

    __slots__ = ("handle",)
    handle: asyncio.TimerHandle


class _Handle(asyncio.Handle):
    """asyncio's Handle built in one call: its ``__init__`` asks the loop for debug mode, which
    the loop already knows is off when it makes one of these. Same fields, same behaviour."""

    __slots__ = ()

    def __init__(
        self,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None = None,
    ) -> None:
        base: Any = self  # asyncio's private fields (not all in typeshed)
        base._context = contextvars.copy_context() if context is None else context
        base._loop = loop
        base._callback = callback
        base._args = args
        base._cancelled = False
        base._repr = None
        base._source_traceback = None


class _Timer(asyncio.TimerHandle):
    """asyncio's TimerHandle built and cancelled in one call each: its ``__init__`` goes
    through Handle's and asks for debug mode, its ``cancel`` through the loop's notification
    and Handle's. Same fields, same effects (the loop's count of cancelled timers on its
    heap included); made only while debug mode is off, and cancelled as asyncio's when it
    has been turned on since (debug keeps the handle's repr)."""

    __slots__ = ()

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: Sequence[Any],
        loop: asyncio.AbstractEventLoop,
        context: contextvars.Context | None = None,
    ) -> None:
        base: Any = self
        base._context = contextvars.copy_context() if context is None else context
        base._loop = loop
        base._callback = callback
        base._args = args
        base._cancelled = False
        base._repr = None
        base._source_traceback = None
        base._when = when
        base._scheduled = False

    def cancel(self) -> None:
        base: Any = self
        if base._cancelled:
            return
        loop = base._loop
        if loop._debug:
            super().cancel()
            return
        if base._scheduled:
            loop._timer_cancelled_count += 1
        base._cancelled = True
        base._callback = None
        base._args = None


# Reports and reprs name them as asyncio's own (``Handle.__repr__`` prints the class name).
_Handle.__name__ = _Handle.__qualname__ = "Handle"
_Timer.__name__ = _Timer.__qualname__ = "TimerHandle"


def _report_callback_error(
    loop: asyncio.AbstractEventLoop, handle: asyncio.Handle, exc: BaseException
) -> None:
    """What ``asyncio.Handle._run`` reports when its callback raises: the exception, the
    handle and the callback named, to the loop's exception handler."""
    base: Any = handle
    source = format_helpers._format_callback_source(base._callback, base._args)
    context: dict[str, Any] = {
        "message": f"Exception in callback {source}",
        "exception": exc,
        "handle": handle,
    }
    if base._source_traceback:
        context["source_traceback"] = base._source_traceback
    loop.call_exception_handler(context)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual time that never blocks (see the module doc).

    Invariants: ``time()`` never decreases and changes only between iterations of the loop,
    by exactly the wait the loop asked for; no file descriptor other than the loop's own
    self-pipe is ever watched. Not thread-safe (no event loop is).

    ``call_soon``, ``call_later`` and ``call_at`` are asyncio's minus the checks of debug mode
    when it is off (a few Python calls each, and a run schedules some 120 000 callbacks), and
    make :class:`_Handle` and :class:`_Timer`, asyncio's handles built (and cancelled) in one
    call; the timers' heap holds :class:`_Due` entries (see there), not the TimerHandles.
    """

    def __init__(self, start_time: float = 0.0, *, time_limit_s: float | None = None) -> None:
        self._now = float(start_time)
        self._time_limit_s = time_limit_s
        # Creation order of tasks, for reports and for a teardown in a reproducible order
        # (asyncio.all_tasks() is a set).
        self._tasks: weakref.WeakKeyDictionary[asyncio.Task[Any], None] = (
            weakref.WeakKeyDictionary()
        )
        selector = _VirtualSelector(self._on_idle)
        super().__init__(selector)
        selector.seal()
        # Checked after the base init: a half-built loop would fail again in __del__.
        if not math.isfinite(start_time) or (
            time_limit_s is not None and time_limit_s < start_time
        ):
            self.close()
            raise ValueError(
                f"need a finite start_time and time_limit_s >= start_time, "
                f"got {start_time} and {time_limit_s}"
            )

    def time(self) -> float:
        """Virtual seconds; only the loop moves them."""
        return self._now

    @property
    def time_limit_s(self) -> float | None:
        return self._time_limit_s

    @time_limit_s.setter
    def time_limit_s(self, value: float | None) -> None:
        self._time_limit_s = value

    def call_soon(
        self,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        base: Any = self
        if base._debug:
            return super().call_soon(callback, *args, context=context)
        if base._closed:
            raise RuntimeError("Event loop is closed")
        handle = _Handle(callback, args, self, context)
        base._ready.append(handle)
        return handle

    def call_later(
        self,
        delay: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        if delay is None:
            raise TypeError("delay must not be None")
        return self._timer_at(self._now + delay, callback, args, context)

    def call_at(
        self,
        when: float,
        callback: Callable[[*_Ts], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        if when is None:
            raise TypeError("when cannot be None")
        return self._timer_at(when, callback, args, context)

    def _timer_at(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context | None,
    ) -> asyncio.TimerHandle:
        """call_at's work, the arguments as they came (call_later passes its own on without
        packing them again)."""
        base: Any = self
        if base._closed:
            raise RuntimeError("Event loop is closed")
        if base._debug:
            base._check_thread()
            base._check_callback(callback, "call_at")
            timer = asyncio.TimerHandle(when, callback, args, self, context)
        else:
            timer = _Timer(when, callback, args, self, context)
        due = _Due(when)
        due.handle = timer
        _heappush(base._scheduled, due)
        timer._scheduled = True  # type: ignore[attr-defined]  # asyncio's own flag
        return timer

    def scheduled_timers(self) -> list[asyncio.TimerHandle]:
        """The timers on the heap (cancelled ones not swept yet included), in heap order."""
        base: Any = self
        return [due.handle for due in base._scheduled]

    def _on_idle(self, timeout: float | None) -> None:
        if timeout is None:
            raise SimulationDeadlock(self._deadlock_report())
        if timeout > 0:
            self._advance_to(self._now + timeout)

    def _advance_to(self, now: float) -> None:
        if self._time_limit_s is not None and now > self._time_limit_s:
            raise SimulationTimeLimitError(
                f"virtual time would reach {now:.6f} s, past the limit of "
                f"{self._time_limit_s:.6f} s; {len(self.pending_tasks())} task(s) pending"
            )
        self._now = now

    def _run_once(self) -> None:
        """Iterations of the loop, as asyncio's own minus what a simulation never needs, one
        after another until ``stop()``.

        ``run_forever`` calls ``_run_once`` and checks ``_stopping`` after it, again and again;
        here that check ends the loop inside (a method call and its set-up less per iteration,
        some 60 000 of them a run): ``run_forever`` calls this once and finds ``_stopping`` set.

        Each iteration: same steps and order as ``BaseEventLoop._run_once``: drop cancelled
        timers (all of them once they are many), wait (here: move virtual time, or report a
        deadlock), move due timers to the ready queue, run the callbacks that were ready when
        the iteration began. Skipped: the selector round trip and its event processing (it
        never reports IO), the clock resolution slack (virtual time is exact) and debug mode's
        slow-callback reports (callbacks take no virtual time: none is ever slow).
        """
        base: Any = self  # asyncio's private loop state (untyped in typeshed)
        ready: collections.deque[Any] = base._ready  # never replaced
        popleft = ready.popleft
        heappop = heapq.heappop
        while True:
            scheduled: list[_Due] = base._scheduled  # a heap by time (replaced by a sweep)
            count = len(scheduled)
            if (
                count > _MIN_SCHEDULED_TIMER_HANDLES
                and base._timer_cancelled_count / count > _MAX_CANCELLED_FRACTION
            ):
                kept = []
                for due in scheduled:
                    if due.handle._cancelled:
                        due.handle._scheduled = False  # type: ignore[attr-defined]
                    else:
                        kept.append(due)
                heapq.heapify(kept)
                base._scheduled = scheduled = kept
                base._timer_cancelled_count = 0
            else:
                while scheduled and scheduled[0].handle._cancelled:
                    base._timer_cancelled_count -= 1
                    heappop(scheduled).handle._scheduled = False  # type: ignore[attr-defined]
            if not ready and not base._stopping:
                if not scheduled:
                    raise SimulationDeadlock(self._deadlock_report())
                when = float(scheduled[0])
                if when > self._now:
                    self._advance_to(when)
            now = self._now
            while scheduled and scheduled[0] <= now:
                timer: Any = heappop(scheduled).handle
                timer._scheduled = False
                ready.append(timer)
            if base._debug:  # exception reports name the handle that was running
                for _ in range(len(ready)):
                    handle = popleft()
                    if not handle._cancelled:
                        base._current_handle = handle
                        try:
                            handle._run()
                        finally:
                            base._current_handle = None
            else:
                # Handle._run inline (its Python frame was a tenth of the loop's own cost): the
                # same call in the handle's context, the same report of what a callback raises.
                for _ in range(len(ready)):
                    handle = popleft()
                    if handle._cancelled:
                        continue
                    try:
                        handle._context.run(handle._callback, *handle._args)
                    except (SystemExit, KeyboardInterrupt):
                        raise
                    except BaseException as exc:  # reported as asyncio's Handle does
                        _report_callback_error(self, handle, exc)
            if base._stopping:
                return

    def create_task(
        self,
        coro: Coroutine[Any, Any, _T] | Generator[Any, None, _T],
        *,
        name: object = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[_T]:
        task = super().create_task(coro, name=name, context=context)
        self._tasks[task] = None
        return task

    def pending_tasks(self) -> list[asyncio.Task[Any]]:
        """Tasks not done yet, oldest first."""
        return [task for task in list(self._tasks) if not task.done()]

    def run_in_executor(
        self,
        executor: concurrent.futures.Executor | None,
        func: Callable[[*_Ts], _T],
        *args: *_Ts,
    ) -> asyncio.Future[_T]:
        raise SimulationError(
            f"run_in_executor({func!r}) in the simulation: threads are not deterministic"
        )

    def _deadlock_report(self) -> str:
        pending = self.pending_tasks()
        lines = [
            f"simulation deadlock at virtual time {self._now:.6f} s: nothing is ready, no timer "
            f"is set, and {len(pending)} task(s) wait forever:"
        ]
        lines += [f"  {task!r}" for task in pending[:_PENDING_TASKS_REPORTED_MAX]]
        if len(pending) > _PENDING_TASKS_REPORTED_MAX:
            lines.append(f"  ... and {len(pending) - _PENDING_TASKS_REPORTED_MAX} more")
        return "\n".join(lines)

    def cancel_pending_tasks(self) -> None:
        """Cancel every pending task, oldest first, and run the loop until they are done.

        Time limits do not apply to this teardown. Raises :class:`SimulationDeadlock` if a task
        swallows its cancellation and then waits forever.
        """
        pending = self.pending_tasks()
        if not pending:
            return
        for task in pending:
            task.cancel()
        limit, self._time_limit_s = self._time_limit_s, None
        try:
            self.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            self._time_limit_s = limit
        for task in pending:
            if not task.cancelled() and task.exception() is not None:
                self.call_exception_handler(
                    {
                        "message": "unhandled exception in a task during simulation teardown",
                        "exception": task.exception(),
                        "task": task,
                    }
                )


class VirtualClock:
    """``common.clock.Clock`` read from an event loop's (virtual) time.

    ``monotonic_ms`` is loop time in whole milliseconds, ``time_ms`` adds ``epoch_ms``. Loop time
    is rounded to the microsecond before flooring to the millisecond, so binary float noise
    (``1.001 * 1000 == 1000.9999999999999``) cannot lose a millisecond. Both only grow, unless
    a simulated clock jump (``jump_ms``) moves ``time_ms``.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, epoch_ms: int = 1_700_000_000_000) -> None:
        self._loop = loop
        self._loop_time = loop.time  # read ~100 000 times a run: bound once
        # On the simulation's own loop its time is read as the attribute ``time()`` returns
        # (a call less per reading); any other loop through ``time()``.
        self._virtual = loop if isinstance(loop, VirtualTimeLoop) else None
        self._epoch_ms = epoch_ms
        # The last conversion: loop time moves only between callbacks, and the brokers and
        # clients read the clock many times in each one.
        self._at = -1.0
        self._at_ms = 0

    def monotonic_ms(self) -> int:
        virtual = self._virtual
        now = virtual._now if virtual is not None else self._loop_time()
        if now != self._at:
            self._at_ms = round(now * 1_000_000) // 1_000
            self._at = now
        return self._at_ms

    def time_ms(self) -> int:
        virtual = self._virtual  # monotonic_ms inline (read ~30 000 times a run)
        now = virtual._now if virtual is not None else self._loop_time()
        if now != self._at:
            self._at_ms = round(now * 1_000_000) // 1_000
            self._at = now
        return self._epoch_ms + self._at_ms

    def jump_ms(self, delta_ms: int) -> None:
        """A wall-clock jump (an NTP step, a bad clock): ``time_ms`` moves by ``delta_ms``
        (backwards if negative); ``monotonic_ms`` does not."""
        self._epoch_ms += delta_ms


def _close(loop: VirtualTimeLoop, *, raise_errors: bool) -> None:
    """Cancel what is left, finish async generators, close the loop.

    With ``raise_errors`` false (the run already failed) teardown errors are logged, so they do
    not hide the run's own exception.
    """
    try:
        loop.cancel_pending_tasks()
        loop.run_until_complete(loop.shutdown_asyncgens())
    except Exception:
        if raise_errors:
            raise
        _log.exception("simulation teardown failed after the run had failed")
    finally:
        loop.close()


@contextlib.contextmanager
def _collector_tuned_for_a_run() -> Iterator[None]:
    """The garbage collector set for a run, and back as it was afterwards.

    A run allocates millions of short-lived objects (handles, futures, frames, batches) over a
    heap of long-lived ones (modules, the cluster). With the defaults a leader-crash run made
    about 180 young collections, and the older ones re-traced the same survivors: what exists
    before the run is frozen (left out of collections until the run ends) and the youngest
    generation is collected every ``_GC_YOUNG_THRESHOLD`` allocations instead of 700 (about 2%
    of a run's CPU time, measured with ``./dev bench sim``). Cycles are still collected during
    the run (memory stays flat), and at the same points in every replay of it.

    Where something is frozen already (Python 3.12.1 starts with a few hundred objects frozen;
    a program may freeze before forking) freezing is left alone: ``gc.unfreeze`` cannot undo
    only the run's part, and a freeze never undone would keep every cycle made before each
    run of a sweep from being collected.
    """
    freeze = gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    if freeze:
        gc.freeze()
    gc.set_threshold(max(_GC_YOUNG_THRESHOLD, thresholds[0]), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if freeze:
            gc.unfreeze()


def run_simulation(
    main: Coroutine[Any, Any, _T],
    *,
    start_time: float = 0.0,
    time_limit_s: float | None = None,
) -> _T:
    """Run ``main`` on a fresh :class:`VirtualTimeLoop` and return its result.

    Like ``asyncio.run``: afterwards every task still pending is cancelled (oldest first),
    async generators are closed and the loop is closed. Raises :class:`SimulationDeadlock` if
    the program can make no more progress and :class:`SimulationTimeLimitError` if virtual
    time would pass ``time_limit_s`` (absolute, on the loop's clock).
    """
    try:
        loop = VirtualTimeLoop(start_time, time_limit_s=time_limit_s)
    except BaseException:
        main.close()
        raise
    with _collector_tuned_for_a_run():
        try:
            result = loop.run_until_complete(main)
        except BaseException:
            _close(loop, raise_errors=False)
            raise
        _close(loop, raise_errors=True)
    return result
