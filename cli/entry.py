"""The ``kafkasim`` command's process entry (the console script and ``python -m kafkasim.cli``).

Before the command line's modules load, it keeps hypothesis out of the process. kio, the
Kafka protocol's schema library, registers a hypothesis strategy for each of its types
whenever hypothesis can be imported; only property tests use them. hypothesis is there in the
development environment (``./dev`` installs the test extras), where every ``kafkasim`` process
— each broker of a local cluster, each tool — paid ~0.3 s of CPU for it at start, and, in a
directory it had not run in before, ~1.5 s more and a ``.hypothesis`` directory left behind
(hypothesis' cache of Unicode categories). A ``None`` in ``sys.modules`` makes
``import hypothesis`` raise ImportError, the case kio handles when hypothesis is not installed.
Code that imports the command line's modules itself (the tests) is left as it is.

It also makes SIGTERM end a command as Ctrl-C does (:func:`interrupt_on_sigterm`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
from types import FrameType
from typing import NoReturn

TEST_ONLY_MODULES = ("hypothesis",)


def keep_test_only_modules_out() -> None:
    """Make the test-only modules unimportable in this process, unless one is loaded already."""
    for name in TEST_ONLY_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None blocks the import


class _Terminated:
    """Whether SIGTERM interrupted the command (then the process ends by that signal)."""

    signalled = False


def interrupt_on_sigterm() -> None:
    """SIGTERM (``timeout``, a service manager, a test's kill) ends a command as Ctrl-C does:
    through its ``finally`` blocks, so the processes it started (the demo's and a chaos run's
    ZooKeeper and brokers) are stopped. Python's default ends the process at once and left
    them running. Verbs with a shutdown of their own (the broker, the console consumer, the
    web console) install their own handler over this one; :func:`end_as_terminated` then ends
    the process by the signal, so its exit status still says it was terminated.

    Inside an event loop (a command run by ``asyncio.run``) the KeyboardInterrupt is raised by
    a callback of the loop, between two of its steps, as asyncio's runner delivers Ctrl-C: the
    runner then cancels the tasks, and each one's ``finally`` runs at its ``await``. Raised by
    the handler itself it landed wherever the main thread was, inside a C extension too: the
    demo, terminated while it made its first gRPC channel, died of a segmentation fault in
    grpc's channel set-up before its ``finally`` ran, and left ZooKeeper and its three brokers
    running (13 of 31 runs on a loaded machine). Handing SIGTERM to asyncio's own SIGINT
    handler was not enough: asyncio installs none where SIGINT is ignored, as in any command
    a non-interactive shell starts in the background (CI's test lanes). Outside an event loop
    the handler raises KeyboardInterrupt at once, as Python does for Ctrl-C."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up
        _Terminated.signalled = True
        asyncio = sys.modules.get("asyncio")  # not imported: no event loop runs
        loop = asyncio.events._get_running_loop() if asyncio is not None else None
        if loop is None:
            _raise_interrupt(signum)
        loop.call_soon_threadsafe(_raise_interrupt, signum)

    signal.signal(signal.SIGTERM, interrupt)


def _raise_interrupt(signum: int) -> NoReturn:
    raise KeyboardInterrupt(f"signal {signum}")


def end_as_terminated() -> None:
    """After the clean-up of a command SIGTERM interrupted: end by SIGTERM's default action
    (exit status 128+15 to a shell, -15 to Popen), as a process the signal ended, what is
    printed flushed first. Returns when SIGTERM did not interrupt the command."""
    if not _Terminated.signalled:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.raise_signal(signal.SIGTERM)


def main() -> int:
    keep_test_only_modules_out()
    interrupt_on_sigterm()
    from kafkasim.cli.main import main as run_command  # noqa: PLC0415 - after the block

    try:
        return run_command()
    finally:
        end_as_terminated()
