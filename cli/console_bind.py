"""Where the web console listens: the ``--bind`` flag of ``console``, ``cluster up --console``
and ``sim run --console``. Apart from ``cli/console.py``, which imports the console's server
(uvicorn, starlette) and the failure backends: ``cluster`` builds its parser from this and
loads the console only when ``--console`` asks for it."""

from __future__ import annotations

import argparse
from typing import Final

DEFAULT_BIND: Final = "127.0.0.1:9021"


def add_bind(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bind",
        default=DEFAULT_BIND,
        metavar="HOST:PORT",
        help=f"where the console listens (default {DEFAULT_BIND}; port 0: a free one)",
    )


def parse_bind(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--bind expects HOST:PORT (port 0-65535), got {text!r}")
    return host, int(port)
