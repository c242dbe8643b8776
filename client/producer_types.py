"""What the producer hands back: a record's :class:`RecordMetadata`, Kafka's send callback,
and the shape of a record's headers (shared by ``send``, ``send_many`` and the accumulator)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kafkasim.common.frozen import fast_frozen_init

__all__ = ["Headers", "RecordMetadata", "SendCallback"]


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed.

    ``offset`` is -1 with acks=0 and for a batch known to be written only because a later one
    of the same producer was acknowledged (rule 4); ``timestamp`` is the broker's append time
    for LogAppendTime topics, else the record's own.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int


SendCallback = Callable[[RecordMetadata | None, BaseException | None], None]
"""Kafka's ``Callback.onCompletion(metadata, exception)``: exactly one of them is set."""

Headers = Sequence[tuple[str, bytes | None]]
