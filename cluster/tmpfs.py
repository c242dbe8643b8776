"""Size-limited log dirs for local brokers: a tmpfs mounted on each log dir, filled on demand.

A full disk on a real broker (the ``disk_full`` fault of ``cluster.root_backend``): each
broker's log dir is a small tmpfs (``TMPFS_SIZE_BYTES``), and ``fill`` writes a ballast file
into it until the filesystem answers ENOSPC. From then on the broker's next write that needs
a new page fails as on a full disk (``write``/``pwritev`` raise ENOSPC; the broker answers
KAFKA_STORAGE_ERROR and halts, see ``node.broker.Broker._on_log_dir_failure``). ``free``
removes the ballast.

Mounting needs root with CAP_SYS_ADMIN (``mount_refusal`` says in one clause why it cannot).
Everything mounted here is unmounted by ``unmount_all`` (the backend's close, also on failure
paths), and at interpreter exit should a run end without it: a tmpfs's files live in memory,
so before unmounting, its contents (the ballast excluded) are copied back onto the real
directory under it, where a run on plain directories leaves them.
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Final

from kafkasim.cluster.host_tools import ToolError, run_tool
from kafkasim.common.errors import KafkasimError

logger = logging.getLogger(__name__)

TMPFS_SIZE_BYTES: Final = 64 * 1024 * 1024
BALLAST_FILE: Final = ".kafkasim-ballast"
CAP_SYS_ADMIN: Final = 21  # linux/capability.h
_MOUNT_TIMEOUT_S: Final = 30.0
_CHUNK: Final = bytes(1024 * 1024)
_SAVED_SUFFIX: Final = ".tmpfs-saved"
_OCTAL_ESCAPE: Final = re.compile(r"\\([0-7]{3})")

# Every mount point of this process not yet unmounted (for the exit hook).
_active: set[Path] = set()


class TmpfsError(KafkasimError):
    """A mount or unmount that failed (the message names the path and the tool's error)."""


def mount_refusal(euid: int | None = None, cap_eff: int | None = None) -> str | None:
    """Why this process cannot mount a tmpfs (one clause), None when it can: it must run as
    root with CAP_SYS_ADMIN in its effective set (root in a container may lack it), and
    ``mount``/``umount`` must be installed. ``euid``/``cap_eff``: this process's when None."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return f"mounting a tmpfs needs root, and this process runs as uid {euid}"
    caps = effective_capabilities() if cap_eff is None else cap_eff
    if not caps >> CAP_SYS_ADMIN & 1:
        return "mounting a tmpfs needs CAP_SYS_ADMIN, which this root process lacks"
    missing = [tool for tool in ("mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"mounting a tmpfs needs {' and '.join(missing)}, not installed here"
    return None


def effective_capabilities() -> int:
    """This process's effective capabilities (CapEff of /proc/self/status; 0 if unreadable)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def mounted(path: Path) -> bool:
    """Whether a filesystem is mounted exactly on ``path`` (per /proc/self/mountinfo)."""
    target = str(path.resolve())
    return target in mount_points()


def mount_points() -> set[str]:
    """Every mount point of this process's mount namespace."""
    found: set[str] = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        # Field 5 is the mount point, with spaces and the like escaped as octal (\040).
        found.add(_OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4]))
    return found


class TmpfsLogDirs:
    """The tmpfs mounts of one cluster's log dirs."""

    def __init__(self, size_bytes: int = TMPFS_SIZE_BYTES) -> None:
        self.size_bytes = size_bytes
        self._mounts: list[Path] = []

    @property
    def mounts(self) -> tuple[Path, ...]:
        return tuple(self._mounts)

    def mount(self, path: Path) -> None:
        """Mount a fresh tmpfs of ``size_bytes`` on ``path`` (made if missing; it must be
        empty: a broker's data there would be hidden under the mount)."""
        path = path.resolve()
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise TmpfsError(f"cannot mount a tmpfs on {path}: the directory is not empty")
        options = f"size={self.size_bytes},mode=0755"
        _run(["mount", "-t", "tmpfs", "-o", options, "kafkasim-logs", str(path)], path, "mount")
        self._mounts.append(path)
        _active.add(path)
        logger.info("mounted a tmpfs of %d bytes on %s", self.size_bytes, path)

    def _ours(self, path: Path) -> Path:
        resolved = path.resolve()
        if resolved not in self._mounts:
            # Never fill a directory on a real disk.
            raise TmpfsError(f"{path} is not a tmpfs this cluster mounted: it is not filled")
        return resolved

    def fill(self, path: Path) -> int:
        """Write a ballast file into the tmpfs on ``path`` until it answers ENOSPC; returns
        the ballast's size. Idempotent (a full disk stays full)."""
        ballast = self._ours(path) / BALLAST_FILE
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while True:
                try:
                    if os.write(fd, _CHUNK) == 0:
                        break
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def free(self, path: Path) -> None:
        """Remove the ballast from the tmpfs on ``path`` (room again)."""
        (self._ours(path) / BALLAST_FILE).unlink(missing_ok=True)

    def unmount_all(self) -> None:
        """Unmount every tmpfs mounted here, each one's files first copied back onto the
        directory under it (the ballast left out). Every mount is tried even when one fails;
        the first failure is raised after. Idempotent."""
        failure: Exception | None = None
        while self._mounts:
            path = self._mounts.pop()
            try:
                _unmount_keeping_files(path)
            except (TmpfsError, OSError) as e:
                logger.error("%s", e)
                failure = failure or e
        if failure is not None:
            raise failure


def _unmount_keeping_files(path: Path) -> None:
    saved = path.with_name(path.name + _SAVED_SUFFIX)
    try:
        (path / BALLAST_FILE).unlink(missing_ok=True)
        shutil.rmtree(saved, ignore_errors=True)
        shutil.copytree(path, saved, symlinks=True)
    finally:
        _unmount(path)
    path.rmdir()
    saved.rename(path)


def _unmount(path: Path) -> None:
    """Unmount ``path``; when it is busy (a process still holds a file), detach it lazily:
    it leaves the mount table at once and goes when the last file is closed."""
    try:
        _run(["umount", str(path)], path, "unmount")
    except TmpfsError:
        if not mounted(path):
            raise
        logger.warning("%s is busy: unmounting it lazily", path)
        _run(["umount", "--lazy", str(path)], path, "unmount")
    finally:
        if not mounted(path):
            _active.discard(path)


def _run(command: list[str], path: Path, what: str) -> None:
    try:
        run_tool(command, _MOUNT_TIMEOUT_S)
    except ToolError as e:
        raise TmpfsError(f"cannot {what} a tmpfs on {path}: {e.error}") from e


@atexit.register
def _unmount_leftovers() -> None:
    """A run that ended without its backend's close (an interpreter exiting on an error)
    leaves no mount behind."""
    for path in sorted(_active):
        try:
            _unmount(path)
        except TmpfsError as e:
            logger.error("%s", e)
