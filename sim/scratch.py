"""Where a simulated run keeps its files when its caller names no directory.

The simulation's brokers write real segment, index and checkpoint files, and fsync them; the
files are thrown away after the run and a simulated crash loses unflushed bytes by itself
(``storage.log.Log`` tracks what was flushed), so the disk's durability buys nothing. On a RAM
filesystem (``/dev/shm``) the fsyncs cost nothing and a sweep does not wait on a shared disk. A
run's files take well under a megabyte of RAM there; a RAM dir with little room left (a
container's default 64 MB) is not used, so that a sweep of many processes never fills it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Final

RAM_DIR: Final = Path("/dev/shm")
MIN_FREE_BYTES: Final = 256 * 2**20


def scratch_dir(ram_dir: Path = RAM_DIR, min_free_bytes: int = MIN_FREE_BYTES) -> str | None:
    """``ram_dir`` when it is a writable directory with ``min_free_bytes`` free; else None (the
    system's temporary directory), as ``tempfile``'s ``dir`` argument takes it."""
    try:
        free = shutil.disk_usage(ram_dir).free
    except OSError:
        return None
    if not ram_dir.is_dir() or not os.access(ram_dir, os.W_OK) or free < min_free_bytes:
        return None
    return str(ram_dir)
