"""Standard output as a Unix tool treats it: when its reader goes away (``kafkasim ... | head``)
a tool stops quietly instead of reporting ``[Errno 32] Broken pipe``; a run whose real output
is files (``sim run --history --report``) keeps going and still writes them."""

from __future__ import annotations

import os
import sys

# The status of a process ended by SIGPIPE, as a shell reports it (128 + 13).
CLOSED_PIPE_STATUS = 141


def stdout_closed() -> None:
    """Point standard output at /dev/null after its reader went away, so that later writes
    and the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def say(line: str) -> None:
    """Print ``line`` and flush it; once the reader is gone, the line goes nowhere and the
    caller carries on."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        stdout_closed()
