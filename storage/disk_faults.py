"""Full disks for the simulation: log dirs whose file writes fail as a full disk's do.

A real disk that fills makes ``write``/``pwritev`` fail with ENOSPC; kafkasim's storage treats
that like any I/O error (KAFKA_STORAGE_ERROR, the log dir goes offline; see
``storage.log_manager.LogManager.on_dir_failure``). The deterministic simulation cannot fill a
real disk, so its ``disk_full`` fault names the broker's log dirs here and every append to a
file under them raises that same ``OSError(ENOSPC)`` until the fault is healed.

One process-wide set: the simulation runs every broker in one process, each with its own log
dirs. Nothing outside the simulation (and its tests) fills a dir.

Torn writes (``tear_last_batch``) are the simulation's power cut in the middle of an append.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafkasim.storage.log import Log

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


def tear_last_batch(log: Log, rng: random.Random) -> int | None:
    """A power cut in the middle of a write (the simulation's ``torn_write``): the last batch
    of ``log``'s active segment keeps only a random prefix, cut at a byte drawn with ``rng``
    between its first byte and its last (at least one byte missing), never inside what was
    fsynced. The new file size, or None when there is no batch or the last one was fsynced
    (nothing drawn then). Called on a crashing broker's logs; recovery at its next start must
    truncate the torn batch (its length or CRC no longer checks)."""
    segment = log.active_segment
    records = segment.log
    start = None
    position = segment.offset_index.lookup(segment.offset_index.last_offset).position
    for batch_start, _ in records.batch_headers(position):
        start = batch_start
    if start is None:
        return None
    low = max(start + 1, records.flushed_size)
    if low >= records.size:
        return None
    cut = rng.randrange(low, records.size)
    records.truncate_to(cut)
    return cut
