"""Files that hold secrets (keys, passwords, JAAS credentials): readable by their owner only."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_MODE = 0o600


def write_private(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 from the first byte on: the file is created
    0600 (never world-readable, even for an instant, whatever the umask), and an existing file
    is truncated and set to 0600 before anything is written."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_MODE)
    try:
        os.fchmod(fd, PRIVATE_MODE)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
