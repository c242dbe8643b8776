"""The leader's ISR changes, written to ZooKeeper (Kafka's ZooKeeper-mode ``ZkIsrManager``).

A change is a :class:`~node.partition.PendingExpand` or :class:`~node.partition.PendingShrink`
the partition already holds as pending (so the HW counts the maximal ISR meanwhile). The write
is a version-checked update of the partition state znode (fenced by the partition's cached
``zk_version``), then an ``/isr_change_notification`` entry for the controller:

* accepted: the partition commits the proposed ISR with the new znode version;
* BadVersion (the controller or another leader wrote first) or no ZooKeeper: the pending change
  is dropped, and the next fetch or expiration check proposes again;
* a LeaderAndIsr that arrived while the write was in flight reset the partition: nothing more.

One task per write; :meth:`close` cancels the ones in flight. Not thread-safe: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from kafkasim.common.coordination import (
    BadVersionError,
    Coordination,
    CoordinationError,
    NoNodeError,
)
from kafkasim.controller import zk_data
from kafkasim.node.partition import Partition, PendingExpand, PendingIsrChange

logger = logging.getLogger(__name__)


class ZkIsrWriter:
    def __init__(self, broker_id: int, coordination: Coordination) -> None:
        self.broker_id = broker_id
        self._zk = coordination
        self.shrinks = 0  # ISR changes committed, for the metrics
        self.expands = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def set_coordination(self, coordination: Coordination) -> None:
        """A new ZooKeeper session (after expiry): writes go through it from now on."""
        self._zk = coordination

    def propose(self, partition: Partition, change: PendingIsrChange) -> None:
        """Mark ``change`` pending on ``partition`` and start writing it."""
        partition.propose_isr(change)
        kind = "expand" if isinstance(change, PendingExpand) else "shrink"
        task = asyncio.get_running_loop().create_task(
            self._write(partition, change), name=f"isr-{kind}-{partition.tp}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _write(self, partition: Partition, change: PendingIsrChange) -> None:
        """Version-checked write of the partition state znode, then the change notification."""
        tp = partition.tp
        proposed = change.proposed
        state = zk_data.LeaderAndIsr(
            self.broker_id,
            partition.leader_epoch,
            tuple(sorted(proposed)),
            partition.controller_epoch,
            partition.zk_version,
        )
        try:
            stat = await self._zk.set(
                zk_data.partition_state_path(tp),
                zk_data.encode_partition_state(state),
                version=partition.zk_version,
            )
        except BadVersionError:
            logger.info(
                "%s: cached zkVersion %d not equal to that in ZooKeeper, skip updating ISR",
                tp,
                partition.zk_version,
            )
            partition.abort_isr_change()
            return
        except (CoordinationError, NoNodeError) as e:
            logger.warning("%s: could not write ISR %s: %s", tp, sorted(proposed), e)
            partition.abort_isr_change()
            return
        if partition.pending_isr != change:
            return  # a LeaderAndIsr arrived meanwhile and reset the state
        if isinstance(change, PendingExpand):
            self.expands += 1
        else:
            self.shrinks += 1
        partition.commit_isr(proposed, stat.version)
        try:
            await self._zk.create(
                f"{zk_data.ISR_CHANGE_NOTIFICATION}/{zk_data.ISR_CHANGE_PREFIX}",
                zk_data.encode_isr_change([tp]),
                sequence=True,
                makepath=True,
            )
        except CoordinationError as e:
            logger.warning("%s: could not write the ISR change notification: %s", tp, e)
