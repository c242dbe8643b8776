"""Running the host's system tools (mount, ip, iptables, tc) for the root backend's faults."""

from __future__ import annotations

import subprocess

from kafkasim.common.errors import KafkasimError

__all__ = ["ToolError", "run_tool"]


class ToolError(KafkasimError):
    """A tool that could not run or failed; ``error`` is its own message, on one line."""

    def __init__(self, argv: list[str], error: str) -> None:
        super().__init__(f"`{' '.join(argv)}` failed: {error}")
        self.error = error


def run_tool(argv: list[str], timeout_s: float) -> str:
    """Run ``argv``; its stdout, or ``ToolError`` with its stderr (else stdout, else status)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(argv, str(e)) from e
    if done.returncode != 0:
        error = " ".join((done.stderr or done.stdout).split()) or f"status {done.returncode}"
        raise ToolError(argv, error)
    return done.stdout
