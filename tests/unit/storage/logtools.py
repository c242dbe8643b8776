"""Helpers shared by the storage tests: build batches, open logs, read everything back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from kafkasim.storage.records.batch import Record, RecordBatchBuilder, decode_batch, iter_batches

T0 = 1_700_000_000_000


def make_batch(
    values: Sequence[bytes | None],
    *,
    timestamps: Sequence[int] | None = None,
    keys: Sequence[bytes | None] | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence
    )
    for i, value in enumerate(values):
        ts = timestamps[i] if timestamps is not None else T0
        key = keys[i] if keys is not None else None
        builder.append(ts, key, value)
    return builder.build()


def open_log(
    path: Path, clock: ManualClock | None = None, **props: object
) -> tuple[Log, ManualClock]:
    clock = clock or ManualClock(T0)
    config = LogConfig.from_props(props)
    log = Log.open(path / "topic-0", config, clock, topic_partition=TopicPartition("topic", 0))
    return log, clock


def reopen(log: Log, clock: ManualClock, *, clean: bool, **kwargs: object) -> Log:
    if clean:
        log.close()
    else:
        log.close_handlers()
    return Log.open(
        log.dir,
        log.config,
        clock,
        topic_partition=log.topic_partition,
        had_clean_shutdown=clean,
        **kwargs,  # type: ignore[arg-type]
    )


def read_all(log: Log, start: int | None = None, max_offset: int | None = None) -> list[Record]:
    """Every record from ``start`` (default: log start) to the end, via ``Log.read``. Each
    read goes on after the last batch read (its last offset delta's offset + 1, as a consumer
    does): a batch may end past its last record (compaction leaves such batches, a coordinator
    may append one), so the last record's offset + 1 would read the same batch forever."""
    out: list[Record] = []
    offset = log.log_start_offset if start is None else start
    while offset < (log.log_end_offset if max_offset is None else max_offset):
        info = log.read(offset, 64 * 1024, max_offset=max_offset)
        if not info.records:
            break
        after = offset + 1
        for position, header in iter_batches(info.records, verify_crc=True):
            _, records = decode_batch(info.records, position)
            out.extend(r for r in records if r.offset >= offset)
            after = max(after, header.next_offset)
        offset = after
    return out
