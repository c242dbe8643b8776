"""Full disks for the simulation: log dirs whose file writes fail as a full disk's do.

A real disk that fills makes ``write``/``pwritev`` fail with ENOSPC; kafkasim's storage treats
that like any I/O error (KAFKA_STORAGE_ERROR, the log dir goes offline; see
``storage.log_manager.LogManager.on_dir_failure``). The deterministic simulation cannot fill a
real disk, so its ``disk_full`` fault names the broker's log dirs here and every append to a
file under them raises that same ``OSError(ENOSPC)`` until the fault is healed.

One process-wide set: the simulation runs every broker in one process, each with its own log
dirs. Nothing outside the simulation (and its tests) fills a dir.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from pathlib import Path

_full: set[Path] = set()


def fill(dirs: Iterable[Path]) -> None:
    """From now on, writes under each of ``dirs`` fail with ENOSPC."""
    _full.update(Path(d).resolve() for d in dirs)


def free(dirs: Iterable[Path]) -> None:
    """Writes under ``dirs`` succeed again."""
    _full.difference_update(Path(d).resolve() for d in dirs)


def free_all() -> None:
    _full.clear()


def check_space(path: Path) -> None:
    """Raise ENOSPC if ``path`` lies under a full dir (called once per append, not per
    record; an empty set costs one truth test)."""
    if _full and any(parent in _full for parent in path.resolve().parents):
        raise OSError(errno.ENOSPC, "No space left on device (simulated disk_full)", str(path))
