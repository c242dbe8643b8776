"""The command line's process entry keeps hypothesis (a test-only library that kio hooks into
when it can import it) out of every ``kafkasim`` process: no start-up cost for it and no
``.hypothesis`` directory left where a command ran; the Kafka protocol's schemas still load."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import hypothesis
import pytest

from kafkasim.cli import entry
from tests.cli_run import python


def test_a_command_run_in_a_fresh_directory_leaves_no_hypothesis_directory(
    tmp_path: Path,
) -> None:
    done = python("-m", "kafkasim.cli", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "broker" in done.stdout
    assert list(tmp_path.iterdir()) == []


def test_the_entry_loads_the_command_line_and_the_protocol_without_hypothesis() -> None:
    probe = (
        "import sys\n"
        "from kafkasim.cli.entry import keep_test_only_modules_out\n"
        "keep_test_only_modules_out()\n"
        "import kafkasim.cli.main, kafkasim.node.kafka_apis\n"
        "kafkasim.cli.main.build_parser()  # every verb's module\n"
        "loaded = sorted(n for n, m in sys.modules.items() if n.startswith('hypothesis') and m)\n"
        "print(loaded)\n"
    )
    done = python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_process_that_already_loaded_hypothesis_keeps_it() -> None:
    entry.keep_test_only_modules_out()
    assert sys.modules["hypothesis"] is hypothesis


def test_sigterm_ends_a_command_through_its_clean_up_then_by_the_signal() -> None:
    """The entry turns SIGTERM into the Ctrl-C path: ``finally`` blocks run (the demo and
    chaos runs stop the processes they started there), a second SIGTERM does not cut them, and
    the process then ends by the signal, its output flushed."""
    probe = (
        "import os, signal, time\n"
        "from kafkasim.cli import entry\n"
        "entry.interrupt_on_sigterm()\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "except KeyboardInterrupt:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.1)\n"
        "    print('cleaned up')\n"
        "finally:\n"
        "    entry.end_as_terminated()\n"
        "print('not reached')\n"
    )
    done = python("-c", probe)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stdout.strip() == "cleaned up"


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_in_an_event_loop_cancels_the_main_task_at_its_next_await(sigint: str) -> None:
    """Under ``asyncio.run`` SIGTERM is delivered between two steps of the loop, as asyncio
    delivers Ctrl-C. Nothing is raised inside the code the main thread is running (grpc's
    channel set-up segfaulted when a KeyboardInterrupt landed in it, and the demo's brokers
    were left running): the synchronous work finishes, the cancellation arrives at the next
    ``await``, the ``finally`` runs, and the process ends by the signal. Also where SIGINT is
    ignored (a command a script starts in the background), where asyncio has no Ctrl-C
    handler of its own."""
    probe = (
        "import asyncio, os, signal, time\n"
        "from kafkasim.cli import entry\n"
        + ("signal.signal(signal.SIGINT, signal.SIG_IGN)\n" if sigint == "ignored" else "")
        + "entry.interrupt_on_sigterm()\n"
        "async def main():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        until = time.monotonic() + 0.3\n"
        "        while time.monotonic() < until:  # the signal's handler runs in here\n"
        "            pass\n"
        "        print('synchronous part done', flush=True)\n"
        "        await asyncio.sleep(30)\n"
        "    finally:\n"
        "        print('cleaned up', flush=True)\n"
        "try:\n"
        "    asyncio.run(main())\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted')\n"
        "finally:\n"
        "    entry.end_as_terminated()\n"
    )
    done = python("-c", probe)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stdout.split("\n")[:3] == ["synchronous part done", "cleaned up", "interrupted"]


def test_a_command_not_terminated_ends_as_it_returns() -> None:
    done = python("-c", "from kafkasim.cli import entry; entry.end_as_terminated(); print('on')")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "on"
