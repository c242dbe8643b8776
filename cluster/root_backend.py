"""Failure runs on local processes with the faults that need root (``LOCAL_ROOT``, ``kafkasim
chaos run --backend local-root``): everything ``cluster.chaos.LOCAL`` injects, and

* ``disk_full``: each broker's log dir is a tmpfs of its own (``cluster.tmpfs``, 64 MiB),
  mounted before the brokers start. The fault writes a ballast file into the target's tmpfs
  until it answers ENOSPC; the broker's next append that needs a new page fails with it, the
  produce is answered KAFKA_STORAGE_ERROR, the log dir goes offline and the broker halts (exit
  status 1), as Kafka's does when its log dirs have failed and as the simulation's does. Healing
  removes the ballast, and the runner starts the broker again: it recovers its log (an append
  cut short by the full disk is truncated, its CRC no longer checks) and rejoins the ISR.

When the cluster stops, the brokers' files are copied from each tmpfs back onto the log dir
under it and every tmpfs is unmounted (on failure paths too): the run's directory then holds
what a run on plain directories holds. Without root (or without CAP_SYS_ADMIN), the backend
refuses ``disk_full`` before anything starts, in one line saying why; what ``LOCAL`` injects
it injects the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Final

from kafkasim.cluster.chaos import (
    INJECTABLE,
    LOSE_UNFLUSHED_REASON,
    NOT_INJECTABLE,
    ChaosError,
    LocalBackend,
    process_backend,
)
from kafkasim.cluster.tmpfs import TmpfsError, TmpfsLogDirs, mount_refusal
from kafkasim.faults.backend import BackendSpec
from kafkasim.faults.scenario import Scenario

__all__ = ["LOCAL_ROOT", "ROOT_RUNTIME", "RootLocalBackend", "local_root_spec"]

logger = logging.getLogger(__name__)

ROOT_RUNTIME: Final = "local processes as root"
_MIB: Final = 1024 * 1024


class RootLocalBackend(LocalBackend):
    """``LocalBackend`` with each broker's log dir on a tmpfs of its own (see the module
    doc)."""

    def __init__(self, scenario: Scenario | None, root: Path) -> None:
        super().__init__(scenario, root)
        self._tmpfs = TmpfsLogDirs()

    @property
    def spec(self) -> BackendSpec:
        return LOCAL_ROOT

    @property
    def mounts(self) -> tuple[Path, ...]:
        """The tmpfs mounts in place now."""
        return self._tmpfs.mounts

    def start(self) -> None:
        try:
            for broker_id in self.broker_ids:
                self._tmpfs.mount(self.log_dir(broker_id))
        except TmpfsError as e:
            self._unmount(quietly=True)
            raise ChaosError(str(e)) from e
        super().start()

    def describe(self) -> str:
        size_mib = self._tmpfs.size_bytes // _MIB
        return f"{super().describe()}; log dirs on {size_mib} MiB tmpfs mounts"

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._unmount(quietly=False)

    def _unmount(self, *, quietly: bool) -> None:
        try:
            self._tmpfs.unmount_all()
        except (TmpfsError, OSError) as e:
            if not quietly:
                raise ChaosError(str(e)) from e

    def fill_disk(self, broker_id: int) -> None:
        try:
            ballast = self._tmpfs.fill(self.log_dir(broker_id))
        except (TmpfsError, OSError) as e:
            raise ChaosError(f"cannot fill broker {broker_id}'s disk: {e}") from e
        logger.info(
            "broker %d: its log dir's tmpfs is full (%d bytes of ballast)", broker_id, ballast
        )

    def free_disk(self, broker_id: int) -> None:
        try:
            self._tmpfs.free(self.log_dir(broker_id))
        except (TmpfsError, OSError) as e:
            raise ChaosError(f"cannot free broker {broker_id}'s disk: {e}") from e


def local_root_spec(refusal: str | None) -> BackendSpec:
    """The root backend's spec: ``disk_full`` injectable when ``refusal`` is None (this
    process may mount), else refused with it."""
    root_actions = {"disk_full"}
    if refusal is None:
        not_injectable: Mapping[str, str] = MappingProxyType(
            {a: why for a, why in NOT_INJECTABLE.items() if a not in root_actions}
        )
        injectable = INJECTABLE | root_actions
    else:
        reason = f"a full disk needs a tmpfs mounted under each log dir: {refusal}"
        not_injectable = MappingProxyType({**NOT_INJECTABLE, "disk_full": reason})
        injectable = INJECTABLE
    return BackendSpec(
        name="local-root",
        runtime=ROOT_RUNTIME,
        injectable=injectable,
        not_injectable=not_injectable,
        lose_unflushed=LOSE_UNFLUSHED_REASON,
        create=process_backend(RootLocalBackend),
    )


LOCAL_ROOT: Final = local_root_spec(mount_refusal())
"""Local processes with root's faults (``RootLocalBackend``), as far as this process may."""
