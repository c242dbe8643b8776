"""The controller election in ZooKeeper (Kafka's ``registerControllerAndIncrementControllerEpoch``).

A broker campaigns by creating the ephemeral ``/controller`` and incrementing
``/controller_epoch`` in one ``multi`` (creating the epoch znode with 0 first if absent, so
the first controller has epoch 1). The epoch znode's version after that write is the fence of
the winner's writes (:class:`~controller.zk_writer.FencedZkWriter`).
"""

from __future__ import annotations

import contextlib

from kafkasim.common.coordination import (
    BadVersionError,
    CoordinationError,
    CreateOp,
    NodeExistsError,
    NoNodeError,
    SetOp,
    Stat,
    Watcher,
)
from kafkasim.controller import zk_data
from kafkasim.controller.log import ControllerLog
from kafkasim.controller.zk_access import RetryingCoordination


async def read_active_controller(zk: RetryingCoordination, watcher: Watcher) -> int:
    """Set the ``/controller`` watch again and read who is controller (-1: nobody)."""
    stat = await zk.exists(zk_data.CONTROLLER, watcher)
    if stat is None:
        return zk_data.NO_LEADER
    try:
        data, _ = await zk.get(zk_data.CONTROLLER)
    except NoNodeError:
        return zk_data.NO_LEADER
    return zk_data.decode_controller(data)


async def ensure_persistent_paths(zk: RetryingCoordination) -> None:
    for path in zk_data.PERSISTENT_PATHS:
        if await zk.exists(path) is None:
            with contextlib.suppress(NodeExistsError):
                await zk.create(path, makepath=True)


async def read_controller_epoch(zk: RetryingCoordination) -> tuple[int, int]:
    """(epoch, znode version) of ``/controller_epoch``, creating it with 0 if absent."""
    try:
        data, stat = await zk.get(zk_data.CONTROLLER_EPOCH)
        return zk_data.decode_controller_epoch(data), stat.version
    except NoNodeError:
        pass
    try:
        await zk.create(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(0))
        return 0, 0
    except NodeExistsError:
        data, stat = await zk.get(zk_data.CONTROLLER_EPOCH)
        return zk_data.decode_controller_epoch(data), stat.version


async def campaign(
    zk: RetryingCoordination, broker_id: int, now_ms: int
) -> tuple[tuple[int, int] | None, int]:
    """One attempt: create ``/controller`` and bump the epoch atomically.

    Returns ((epoch, epoch znode version) or None, the controller seen): the pair when won;
    None when lost, with the winner (or -1 if it is gone again: try again).
    """
    epoch, epoch_version = await read_controller_epoch(zk)
    new_epoch = epoch + 1
    payload = zk_data.encode_controller(broker_id, now_ms)
    try:
        results = await zk.multi(
            [
                CreateOp(zk_data.CONTROLLER, payload, ephemeral=True),
                SetOp(
                    zk_data.CONTROLLER_EPOCH,
                    zk_data.encode_controller_epoch(new_epoch),
                    epoch_version,
                ),
            ]
        )
    except (NodeExistsError, BadVersionError):
        pass
    else:
        stat = results[1]
        assert isinstance(stat, Stat)
        return (new_epoch, stat.version), broker_id
    # Lost the race, or our own attempt went through before a connection loss.
    try:
        data, controller_stat = await zk.get(zk_data.CONTROLLER)
    except NoNodeError:
        return None, zk_data.NO_LEADER
    controller_id = zk_data.decode_controller(data)
    ours = controller_id == broker_id and controller_stat.ephemeral_owner == zk.zk.session_id
    current_epoch, current_version = await read_controller_epoch(zk)
    if ours and current_epoch == new_epoch:
        return (new_epoch, current_version), controller_id
    return None, controller_id


async def delete_own_controller_znode(
    zk: RetryingCoordination, broker_id: int, log: ControllerLog
) -> None:
    """Delete ``/controller`` if it still names this broker and session (Kafka's
    ``triggerControllerMove``): another election then runs."""
    try:
        data, stat = await zk.get(zk_data.CONTROLLER)
        if (
            zk_data.decode_controller(data) == broker_id
            and stat.ephemeral_owner == zk.zk.session_id
        ):
            await zk.delete(zk_data.CONTROLLER, stat.version)
    except CoordinationError as e:
        log.debug("could not delete /controller: %s", e)


async def read_cluster_id(zk: RetryingCoordination, default: str) -> str:
    try:
        data, _ = await zk.get(zk_data.CLUSTER_ID)
        return zk_data.decode_cluster_id(data)
    except (NoNodeError, ValueError, KeyError):
        return default
