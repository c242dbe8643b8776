"""The active controller's ZooKeeper writer: every write fenced by the controller epoch.

Every write is one ``multi`` that starts with ``CheckOp("/controller_epoch", version)``, the
version the epoch znode got when this controller won its election. A deposed controller that
has not noticed yet (a zombie) therefore changes nothing: its write fails, and
:class:`~controller.api.ControllerMovedError` tells it to resign. Reads of partition state
check the controller epoch written in them for the same reason. One writer per term: the
controller makes a new one each time it wins.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafkasim.common.coordination import (
    BadVersionError,
    CheckOp,
    DeleteOp,
    NoNodeError,
    Op,
    SetOp,
    Stat,
)
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.api import ControllerMovedError
from kafkasim.controller.log import ControllerLog
from kafkasim.controller.zk_access import RetryingCoordination
from kafkasim.controller.zk_data import LeaderAndIsr

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"


def _parse_bool(value: str) -> bool | None:
    return {"true": True, "false": False}.get(value.strip().lower())


class FencedZkWriter:
    """Reads, and writes fenced by ``/controller_epoch`` at ``epoch_zk_version``.

    ``zk`` stays available for plain reads (and for watches).
    """

    def __init__(
        self, zk: RetryingCoordination, epoch: int, epoch_zk_version: int, log: ControllerLog
    ) -> None:
        self.zk = zk
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self._log = log

    async def fenced(self, ops: Sequence[Op]) -> list[str | Stat | None]:
        """``multi([CheckOp(/controller_epoch, our version), *ops])``; the results of ``ops``
        follow the check's (index 0).

        ControllerMovedError if the epoch znode moved (this controller is a zombie); otherwise
        the error of the failing op (BadVersion, NoNode, NodeExists...).
        """
        try:
            return await self.zk.multi(
                [CheckOp(zk_data.CONTROLLER_EPOCH, self.epoch_zk_version), *ops]
            )
        except BadVersionError:
            stat = await self.zk.exists(zk_data.CONTROLLER_EPOCH)
            if stat is None or stat.version != self.epoch_zk_version:
                raise ControllerMovedError(
                    f"/controller_epoch is at version "
                    f"{None if stat is None else stat.version}, not {self.epoch_zk_version}: "
                    f"epoch {self.epoch} is stale"
                ) from None
            raise

    async def fenced_delete(self, path: str) -> bool:
        """Fenced delete; False if the node was already gone."""
        try:
            await self.fenced([DeleteOp(path)])
        except NoNodeError:
            return False
        return True

    async def read_partition_state(self, tp: TopicPartition) -> LeaderAndIsr | None:
        """The state znode (None if absent or malformed); ControllerMovedError if a newer
        controller wrote it."""
        try:
            data, stat = await self.zk.get(zk_data.partition_state_path(tp))
        except NoNodeError:
            return None
        try:
            state = zk_data.decode_partition_state(data, stat.version)
        except (ValueError, KeyError, TypeError) as e:
            self._log.error("%s: ignoring malformed partition state: %s", tp, e)
            return None
        if state.controller_epoch > self.epoch:
            raise ControllerMovedError(
                f"{tp}: state written by controller epoch {state.controller_epoch} > {self.epoch}"
            )
        return state

    async def write_partition_state(self, tp: TopicPartition, state: LeaderAndIsr) -> LeaderAndIsr:
        """Conditional (``state.zk_version``), fenced write; the state with its new version."""
        results = await self.fenced(
            [
                SetOp(
                    zk_data.partition_state_path(tp),
                    zk_data.encode_partition_state(state),
                    state.zk_version,
                )
            ]
        )
        stat = results[1]
        assert isinstance(stat, Stat)
        return state.with_(zk_version=stat.version)

    async def unclean_allowed(self, topic: str, default: bool) -> bool:
        """The topic's ``unclean.leader.election.enable``, else ``default`` (the broker's);
        read at election time, as Kafka does (topic configs can change at runtime)."""
        try:
            data, _ = await self.zk.get(zk_data.topic_config_path(topic))
        except NoNodeError:
            return default
        try:
            value = zk_data.decode_topic_config(data).get(UNCLEAN_LEADER_ELECTION_ENABLE)
        except ValueError:
            return default
        parsed = None if value is None else _parse_bool(value)
        return default if parsed is None else parsed

    async def children_or_empty(self, path: str) -> list[str]:
        try:
            return await self.zk.get_children(path)
        except NoNodeError:
            return []
