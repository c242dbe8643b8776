"""Producer ids for idempotent producers: Kafka's ZkProducerIdManager (InitProducerId is
answered from it by ``node.apis.init_producer_id``).

Theory of operation
-------------------
Every broker answers InitProducerId (an idempotent producer asks any broker). Ids must be
unique across the cluster and across restarts, so brokers reserve them in blocks of
:data:`~controller.zk_data.PRODUCER_ID_BLOCK_SIZE` through one znode,
``/latest_producer_id_block``, holding the last block anyone reserved
(``{"version":1,"broker":B,"block_start":"s","block_end":"e"}``):

1. Read the znode and its version. Absent (or empty) means no block was ever reserved: the
   next block is ``[0, 999]``; otherwise it is ``[block_end + 1, block_end + 1000]``.
2. Write the new block conditionally: ``create`` when the znode was absent, ``set`` with the
   version read in step 1 otherwise. Another broker that reserved a block in between makes
   the write fail (NodeExists / BadVersion): go back to 1.
3. Hand out the ids of the block one by one, in increasing order; when it is exhausted,
   reserve the next block (1-3 again).

Invariants: blocks won by different managers (brokers, or one broker before and after a
restart) are disjoint, because each successful write replaces exactly the block it read; the
ids one manager hands out strictly increase. Nothing is kept on local disk: a restarted broker
reserves a fresh block and the rest of its old one is never used (ids are skipped, never
reused). A write whose answer was lost (ConnectionLoss) may have reserved a block nobody
uses — also only a skip.

Not thread-safe: one event loop; concurrent InitProducerId handlers on it are serialised by a
lock, so only one block is reserved at a time.
"""

from __future__ import annotations

import asyncio
import logging

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_none

from kafkasim.common.coordination import (
    BadVersionError,
    Coordination,
    NodeExistsError,
    NoNodeError,
)
from kafkasim.common.errors import KafkaError
from kafkasim.controller import zk_data
from kafkasim.controller.zk_data import ProducerIdBlock

logger = logging.getLogger(__name__)

INT64_MAX = 2**63 - 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

# Contention on the znode only comes from other brokers reserving blocks at the same moment:
# a handful of attempts is plenty; past this limit the request fails (retriable) instead of
# spinning.
BLOCK_WRITE_ATTEMPTS_MAX = 32

# The InitProducerId request itself is answered in the request layer (``node.apis``).


class ProducerIdsExhaustedError(KafkaError):
    """The next block would pass the largest int64: no producer id is left (never in practice)."""


class ProducerIdManager:
    """Reserves producer id blocks in ZooKeeper and hands out their ids (see the module doc)."""

    def __init__(
        self,
        broker_id: int,
        coordination: Coordination,
        *,
        block_size: int = zk_data.PRODUCER_ID_BLOCK_SIZE,
    ) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.broker_id = broker_id
        self.block_size = block_size
        self._zk = coordination
        self._block: ProducerIdBlock | None = None
        self._next_producer_id = 0
        self._lock = asyncio.Lock()
        self.blocks_reserved = 0
        self.block_write_conflicts = 0

    @property
    def current_block(self) -> ProducerIdBlock | None:
        """The block ids are handed out from (None before the first id)."""
        return self._block

    def replace_coordination(self, coordination: Coordination) -> None:
        """A new ZooKeeper session (after expiry): reserve blocks through it from now on.

        The current block stays valid: it was reserved in ZooKeeper, whatever session did it.
        """
        self._zk = coordination

    async def generate_producer_id(self) -> int:
        """The next id; reserves a new block first when the current one is used up.

        Raises CoordinationError when ZooKeeper cannot be reached or stays contended, and
        :class:`ProducerIdsExhaustedError` when int64 is used up.
        """
        async with self._lock:
            block = self._block
            if block is None or self._next_producer_id > block.block_end:
                block = await self._reserve_block()
                self._block = block
                self._next_producer_id = block.block_start
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            self.sanity_check()
            return producer_id

    def sanity_check(self) -> None:
        """The next id lies in (or just past) the current block, which has the agreed size."""
        block = self._block
        if block is None:
            return
        if block.block_end - block.block_start + 1 != self.block_size:
            raise AssertionError(f"producer id block {block} is not {self.block_size} ids long")
        if not block.block_start <= self._next_producer_id <= block.block_end + 1:
            raise AssertionError(
                f"next producer id {self._next_producer_id} is outside the block {block}"
            )

    async def _reserve_block(self) -> ProducerIdBlock:
        retrying = AsyncRetrying(
            retry=retry_if_exception_type((BadVersionError, NodeExistsError)),
            wait=wait_none(),
            stop=stop_after_attempt(BLOCK_WRITE_ATTEMPTS_MAX),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._try_reserve_block()
        raise AssertionError("unreachable: reraise=True")  # pragma: no cover

    async def _try_reserve_block(self) -> ProducerIdBlock:
        """One read-then-conditional-write round (steps 1 and 2 of the module doc)."""
        path = zk_data.LATEST_PRODUCER_ID_BLOCK
        try:
            data, stat = await self._zk.get(path)
        except NoNodeError:
            data, version = b"", None
        else:
            version = stat.version
        if data:
            latest = zk_data.decode_producer_id_block(data)
            if latest.block_end > INT64_MAX - self.block_size:
                raise ProducerIdsExhaustedError(
                    f"Have exhausted all producerIds (the last block ends at {latest.block_end})"
                )
            start = latest.block_end + 1
        else:
            start = 0
        block = ProducerIdBlock(self.broker_id, start, start + self.block_size - 1)
        encoded = zk_data.encode_producer_id_block(block)
        try:
            if version is None:
                await self._zk.create(path, encoded)
            else:
                await self._zk.set(path, encoded, version)
        except (BadVersionError, NodeExistsError):
            self.block_write_conflicts += 1  # another broker won this round: read again
            raise
        self.blocks_reserved += 1
        logger.info(
            "broker %d: acquired producer id block [%d, %d]",
            self.broker_id,
            block.block_start,
            block.block_end,
        )
        return block
