"""Transactional record batches for tests: a producer's data batches (with its own sequence
numbers) and the COMMIT/ABORT markers a coordinator writes for it, as raw RecordBatch v2."""

from __future__ import annotations

from kafkasim.storage.records.batch import (
    ControlRecordType,
    RecordBatchBuilder,
    encode_control_batch,
)
from tests.unit.storage.logtools import T0

COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT


class Producer:
    """A transactional producer's batches, with its own sequence numbers."""

    def __init__(self, pid: int, epoch: int = 0) -> None:
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(
        self,
        count: int = 1,
        *,
        transactional: bool = True,
        base_offset: int = 0,
        timestamp: int = T0,
    ) -> bytes:
        """``count`` records with values ``p<pid>-<sequence>``."""
        builder = RecordBatchBuilder(
            base_offset=base_offset,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
            is_transactional=transactional,
        )
        for i in range(count):
            builder.append(timestamp, b"k%d" % i, b"p%d-%d" % (self.pid, self.seq + i))
        self.seq += count
        return builder.build()

    def marker(
        self, kind: ControlRecordType, coordinator_epoch: int = 0, *, base_offset: int = 0
    ) -> bytes:
        return encode_control_batch(
            kind,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            timestamp=T0,
            coordinator_epoch=coordinator_epoch,
            base_offset=base_offset,
        )
