"""WriteTxnMarkers on a partition leader (Kafka's ``KafkaApis.handleWriteTxnMarkersRequest``):
the transaction coordinator asks the leader of each partition of a finished transaction to
append its COMMIT or ABORT marker.

For each marker of the request, one control batch (Kafka's ``withEndTransactionMarker``:
transactional + control, the producer's id and epoch, one record holding the result and the
coordinator epoch, timestamped now) goes to each of its partitions through the replica
manager's produce path with the COORDINATOR origin and acks=all, waiting in the produce
purgatory until the HW passes it, as Kafka appends markers with ``requiredAcks = -1`` and
``request.timeout.ms``. The markers' appends are started in request order and awaited
together (Kafka answers once every marker's append has answered).

Every partition answers its own error: UNKNOWN_TOPIC_OR_PARTITION (not hosted here),
NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, and the log's refusals of a
stale marker (INVALID_PRODUCER_EPOCH for an older producer epoch,
TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch). A marker whose partitions all
fail still answers, partition by partition. kafkasim has no message-format downgrade, so
Kafka's UNSUPPORTED_FOR_MESSAGE_FORMAT never applies.

Once a marker's appends have answered, ``on_written`` is told the partitions that took it (the
broker's group coordinator then completes the producer's transactional offset commits on its
``__consumer_offsets`` partitions, as Kafka's handler calls ``onTransactionCompleted``); if it
raises, those partitions answer UNKNOWN_SERVER_ERROR, as Kafka's do.

Answers come one per marker, in the order asked (Kafka keys its answer by producer id; a
coordinator never sends two markers of one producer in a request, so both agree).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.replica_types import (
    PartitionRecords,
    ProduceParams,
    ProducePartitionResult,
    TxnMarkerEntry,
    TxnMarkerResult,
    WriteTxnMarkersParams,
)
from kafkasim.storage.producer_state import AppendOrigin
from kafkasim.storage.records.batch import ControlRecordType, encode_control_batch

logger = logging.getLogger(__name__)

AppendRecords = Callable[[ProduceParams], Awaitable[list[ProducePartitionResult]]]
# (producer id, COMMIT or ABORT, the partitions whose append of the marker succeeded)
MarkersWritten = Callable[[int, ControlRecordType, Sequence[TopicPartition]], None]


def marker_produce_params(marker: TxnMarkerEntry, *, now_ms: int, timeout_ms: int) -> ProduceParams:
    """The acks=all append, as the coordinator, of ``marker``'s batch to each partition."""
    batch = encode_control_batch(
        marker.result,
        producer_id=marker.producer_id,
        producer_epoch=marker.producer_epoch,
        timestamp=now_ms,
        coordinator_epoch=marker.coordinator_epoch,
    )
    return ProduceParams(
        acks=-1,
        timeout_ms=timeout_ms,
        partitions=tuple(PartitionRecords(tp, batch) for tp in marker.partitions),
        origin=AppendOrigin.COORDINATOR,
    )


async def write_txn_markers(
    append_records: AppendRecords,
    params: WriteTxnMarkersParams,
    *,
    now_ms: int,
    timeout_ms: int,
    on_written: MarkersWritten | None = None,
) -> list[TxnMarkerResult]:
    """Append every marker of ``params`` through ``append_records`` (the replica manager's)
    and answer each partition's outcome; ``on_written`` hears of each marker's successful
    partitions."""

    async def write(marker: TxnMarkerEntry) -> TxnMarkerResult:
        if not marker.partitions:
            return TxnMarkerResult(marker.producer_id, ())
        results = await append_records(
            marker_produce_params(marker, now_ms=now_ms, timeout_ms=timeout_ms)
        )
        outcomes = {r.tp: r.error for r in results}
        written = [r.tp for r in results if r.error is None]
        if on_written is not None and written:
            try:
                on_written(marker.producer_id, marker.result, written)
            except Exception:
                logger.exception(
                    "completing producer %d's transaction on %s failed", marker.producer_id, written
                )
                unknown = error_for_name("UNKNOWN_SERVER_ERROR")(
                    f"the marker was written but completing the transaction of producer "
                    f"{marker.producer_id} failed"
                )
                outcomes.update(dict.fromkeys(written, unknown))
        return TxnMarkerResult(marker.producer_id, tuple(outcomes.items()))

    return list(await asyncio.gather(*(write(marker) for marker in params.markers)))
