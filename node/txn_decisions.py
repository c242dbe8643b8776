"""What the transaction coordinator does with each request, as Kafka's
``TransactionCoordinator`` decides it: pure functions of a :class:`TransactionMetadata` and the
request, returning a decision (``node.txn_types``) for the runtime to carry out.

No IO and no clock reads: the current time comes in as ``now_ms``. Deciding may *prepare* a
transition (set the metadata's pending state, see ``node.txn_metadata``); the runtime then
writes the transit to ``__transaction_state`` and completes it, or calls
:func:`on_append_failed`. Whether this broker is the coordinator of the id (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS) and whether its coordinator epoch changed during a write are
the runtime's checks, made before and after these.

The checks come in Kafka's order, and the first that fails answers:

InitProducerId (``handleInitProducerId``)
    exactly one of producer id and epoch given → INVALID_REQUEST; empty id → INVALID_REQUEST;
    timeout ≤ 0 or > ``transaction.max.timeout.ms`` → INVALID_TRANSACTION_TIMEOUT; unknown
    id → a fresh producer id at epoch -1, Empty (then as below); a transition pending →
    CONCURRENT_TRANSACTIONS; the client's producer id is neither this id's nor (with an
    exhausted epoch) its last one, while this id has an epoch → PRODUCER_FENCED; then by state:

    ==========================  ===============================================================
    PrepareCommit/PrepareAbort  CONCURRENT_TRANSACTIONS (the client retries after the markers)
    Empty, Complete*            exhausted epoch (and the client had this epoch, or none): a new
                                producer id at epoch 0; else the next epoch (KIP-360: a retry
                                with the last epoch gets the current one again; any other
                                client epoch → PRODUCER_FENCED)
    Ongoing                     fence: abort the open transaction at epoch + 1, then answer
                                CONCURRENT_TRANSACTIONS; the retry bumps once more
    ==========================  ===============================================================

AddPartitionsToTxn / AddOffsetsToTxn (``handleAddPartitionsToTransaction``)
    empty id → INVALID_REQUEST; unknown id or other producer id → INVALID_PRODUCER_ID_MAPPING;
    other epoch → PRODUCER_FENCED; pending or PrepareCommit/PrepareAbort →
    CONCURRENT_TRANSACTIONS; Ongoing with all partitions already in → success, no write; else
    Ongoing with them added. AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition.

EndTxn (``endTransaction``)
    empty id → INVALID_REQUEST; unknown id or other producer id → INVALID_PRODUCER_ID_MAPPING;
    from a client, any other epoch, from the coordinator itself, an older one →
    PRODUCER_FENCED; a pending transition other than a fence → CONCURRENT_TRANSACTIONS; then:
    Ongoing → PrepareCommit / PrepareAbort; CompleteCommit + commit and CompleteAbort + abort
    (a retry whose answer was lost) → success, no write; PrepareCommit + commit and
    PrepareAbort + abort → CONCURRENT_TRANSACTIONS; any other pairing, and Empty →
    INVALID_TXN_STATE.

A state the coordinator never settles in (Dead, PrepareEpochFence) found by a request raises
``IllegalTxnTransitionError``, as Kafka's coordinator throws.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafkasim.common.errors import IllegalTxnTransitionError, KafkaError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.group_records import partition_for as group_partition_for
from kafkasim.node.group_types import Error
from kafkasim.node.txn_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from kafkasim.node.txn_types import (
    AddOffsetsToTxnParams,
    AddPartitionsToTxnParams,
    EndTxnParams,
    InitProducerIdDecision,
    InitProducerIdParams,
    TimedOutTransaction,
    TransactionResult,
    TxnAbortThenRetry,
    TxnAppend,
    TxnDecision,
    TxnNeedsProducerId,
    TxnReply,
    TxnSendMarkers,
)

_S = TransactionState

INVALID_REQUEST = error_for_name("INVALID_REQUEST")
INVALID_TRANSACTION_TIMEOUT = error_for_name("INVALID_TRANSACTION_TIMEOUT")
INVALID_PRODUCER_ID_MAPPING = error_for_name("INVALID_PRODUCER_ID_MAPPING")
INVALID_TXN_STATE = error_for_name("INVALID_TXN_STATE")
CONCURRENT_TRANSACTIONS = error_for_name("CONCURRENT_TRANSACTIONS")
PRODUCER_FENCED = error_for_name("PRODUCER_FENCED")

# How a failed write to __transaction_state is answered (Kafka's appendTransactionToLog).
_WRITE_ERRORS: dict[type[KafkaError], type[KafkaError]] = {
    error_for_name(k): error_for_name(v)
    for k, v in {
        "UNKNOWN_TOPIC_OR_PARTITION": "COORDINATOR_NOT_AVAILABLE",
        "NOT_ENOUGH_REPLICAS": "COORDINATOR_NOT_AVAILABLE",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND": "COORDINATOR_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT": "COORDINATOR_NOT_AVAILABLE",
        "NOT_LEADER_OR_FOLLOWER": "NOT_COORDINATOR",
        "KAFKA_STORAGE_ERROR": "NOT_COORDINATOR",
        "MESSAGE_TOO_LARGE": "UNKNOWN_SERVER_ERROR",
        "RECORD_LIST_TOO_LARGE": "UNKNOWN_SERVER_ERROR",
    }.items()
}


def valid_transaction_timeout(timeout_ms: int, max_timeout_ms: int) -> bool:
    """``transaction.timeout.ms`` is positive and at most ``transaction.max.timeout.ms``."""
    return 0 < timeout_ms <= max_timeout_ms


def new_transaction_metadata(
    transactional_id: str, producer_id: int, txn_timeout_ms: int, now_ms: int
) -> TransactionMetadata:
    """A transactional id seen for the first time: its producer id, no epoch yet, Empty."""
    return TransactionMetadata(
        transactional_id=transactional_id,
        producer_id=producer_id,
        txn_timeout_ms=txn_timeout_ms,
        txn_last_update_timestamp=now_ms,
    )


# -- InitProducerId -----------------------------------------------------------------------


def init_producer_id(
    metadata: TransactionMetadata | None,
    params: InitProducerIdParams,
    max_timeout_ms: int,
    now_ms: int,
    fresh_producer_id: int | None = None,
) -> InitProducerIdDecision:
    """InitProducerId for a transactional id. ``metadata`` None: the id is unknown; the
    answer is then :class:`TxnNeedsProducerId` (create the metadata with
    :func:`new_transaction_metadata` and decide again). ``fresh_producer_id``: a producer id
    the runtime allocated after an earlier :class:`TxnNeedsProducerId`."""
    # Kafka's KafkaApis checks the producer id and epoch pair before the coordinator sees it.
    has_id = params.producer_id != NO_PRODUCER_ID
    has_epoch = params.producer_epoch != NO_PRODUCER_EPOCH
    if has_id != has_epoch:
        return TxnReply(INVALID_REQUEST)
    if not params.transactional_id:
        return TxnReply(INVALID_REQUEST)
    if not valid_transaction_timeout(params.transaction_timeout_ms, max_timeout_ms):
        return TxnReply(INVALID_TRANSACTION_TIMEOUT)
    if metadata is None:
        return TxnNeedsProducerId()
    expected = (params.producer_id, params.producer_epoch) if has_id else None
    if metadata.pending_transition_in_progress:
        return TxnReply(CONCURRENT_TRANSACTIONS)
    if expected is not None and not _valid_expected_producer(metadata, *expected):
        return TxnReply(PRODUCER_FENCED)
    state = metadata.state
    if state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
        return TxnReply(CONCURRENT_TRANSACTIONS)
    if state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
        if metadata.is_producer_epoch_exhausted and (
            expected is None or expected[1] == metadata.producer_epoch
        ):
            if fresh_producer_id is None:
                return TxnNeedsProducerId()
            return TxnAppend(
                metadata.prepare_producer_id_rotation(
                    fresh_producer_id,
                    params.transaction_timeout_ms,
                    now_ms,
                    record_last_epoch=expected is not None,
                )
            )
        transit = metadata.prepare_increment_producer_epoch(
            params.transaction_timeout_ms, None if expected is None else expected[1], now_ms
        )
        return TxnReply(PRODUCER_FENCED) if transit is None else TxnAppend(transit)
    if state is _S.ONGOING:
        # The epoch bumped here is never returned: the client is told to retry, and its
        # retry bumps again (rotating the producer id if this fence used the last epoch).
        return TxnAbortThenRetry(_fence_and_abort(metadata, now_ms))
    raise _never_settled(metadata)


def _valid_expected_producer(
    metadata: TransactionMetadata, producer_id: int, producer_epoch: int
) -> bool:
    # 1. No epoch yet: the metadata was just created (a client recovering from
    #    UNKNOWN_PRODUCER_ID gets the new id). 2. The current producer id: its epoch is checked
    #    when bumping. 3. The last producer id with an exhausted epoch: a retry of the rotation.
    return (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == metadata.producer_id
        or (producer_id == metadata.last_producer_id and is_epoch_exhausted(producer_epoch))
    )


# -- AddPartitionsToTxn, AddOffsetsToTxn --------------------------------------------------


def add_partitions_to_txn(
    metadata: TransactionMetadata | None, params: AddPartitionsToTxnParams, now_ms: int
) -> TxnDecision:
    if not params.transactional_id:
        return TxnReply(INVALID_REQUEST)
    if metadata is None or metadata.producer_id != params.producer_id:
        return TxnReply(INVALID_PRODUCER_ID_MAPPING)
    if metadata.producer_epoch != params.producer_epoch:
        return TxnReply(PRODUCER_FENCED)
    if metadata.pending_transition_in_progress:
        return TxnReply(CONCURRENT_TRANSACTIONS)
    if metadata.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
        return TxnReply(CONCURRENT_TRANSACTIONS)
    if metadata.state is _S.ONGOING and params.partitions <= metadata.topic_partitions:
        return TxnReply()
    return TxnAppend(metadata.prepare_add_partitions(params.partitions, now_ms))


def offsets_partition(group_id: str, offsets_topic_partitions: int) -> TopicPartition:
    """The ``__consumer_offsets`` partition that holds ``group_id``'s offsets."""
    return TopicPartition(OFFSETS_TOPIC, group_partition_for(group_id, offsets_topic_partitions))


def add_offsets_to_txn(
    metadata: TransactionMetadata | None,
    params: AddOffsetsToTxnParams,
    offsets_topic_partitions: int,
    now_ms: int,
) -> TxnDecision:
    """The group's offsets partition joins the transaction (Kafka's KafkaApis turns
    AddOffsetsToTxn into AddPartitionsToTxn of that partition); its marker later makes the
    transaction's TxnOffsetCommits visible, or drops them."""
    tp = offsets_partition(params.group_id, offsets_topic_partitions)
    return add_partitions_to_txn(
        metadata,
        AddPartitionsToTxnParams(
            params.transactional_id, params.producer_id, params.producer_epoch, frozenset({tp})
        ),
        now_ms,
    )


# -- EndTxn -------------------------------------------------------------------------------


def end_txn(metadata: TransactionMetadata | None, params: EndTxnParams, now_ms: int) -> TxnDecision:
    """EndTxn from a client. A :class:`TxnAppend` writes PrepareCommit or PrepareAbort; once
    written, :func:`markers_after_prepare` says what to answer and which markers to send."""
    if not params.transactional_id:
        return TxnReply(INVALID_REQUEST)
    return _end_transaction(
        metadata,
        params.producer_id,
        params.producer_epoch,
        params.result,
        from_client=True,
        now_ms=now_ms,
    )


def _end_transaction(
    metadata: TransactionMetadata | None,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    *,
    from_client: bool,
    now_ms: int,
) -> TxnDecision:
    if metadata is None or metadata.producer_id != producer_id:
        return TxnReply(INVALID_PRODUCER_ID_MAPPING)
    # A client must use the current epoch; the coordinator's own abort carries a fenced one.
    if (from_client and producer_epoch != metadata.producer_epoch) or (
        producer_epoch < metadata.producer_epoch
    ):
        return TxnReply(PRODUCER_FENCED)
    pending = metadata.pending_state
    if pending is not None and pending is not _S.PREPARE_EPOCH_FENCE:
        return TxnReply(CONCURRENT_TRANSACTIONS)
    state = metadata.state
    commit = result is TransactionResult.COMMIT
    if state is _S.ONGOING:
        next_state = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        epoch_fence = next_state is _S.PREPARE_ABORT and pending is _S.PREPARE_EPOCH_FENCE
        if epoch_fence:
            # Kafka takes the fenced epoch into the metadata before the write: a later fence
            # after a failed write reuses it (has_failed_epoch_fence) rather than bump twice.
            metadata.pending_state = None
            metadata.producer_epoch = producer_epoch
            metadata.last_producer_epoch = NO_PRODUCER_EPOCH
        return TxnAppend(metadata.prepare_abort_or_commit(next_state, now_ms), epoch_fence)
    if state in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
        retry = commit == (state is _S.COMPLETE_COMMIT)
        return TxnReply() if retry else TxnReply(INVALID_TXN_STATE)
    if state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
        same = commit == (state is _S.PREPARE_COMMIT)
        return TxnReply(CONCURRENT_TRANSACTIONS) if same else TxnReply(INVALID_TXN_STATE)
    if state is _S.EMPTY:
        return TxnReply(INVALID_TXN_STATE)
    raise _never_settled(metadata)


def markers_after_prepare(
    metadata: TransactionMetadata, written: TxnTransitMetadata, now_ms: int
) -> TxnReply | TxnSendMarkers:
    """The PrepareCommit or PrepareAbort ``written`` is in the log and completed: check the
    metadata is still that transaction and prepare its completion. The client is answered
    success as the markers go out; ``complete`` is written once every marker is."""
    if written.txn_state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
        raise IllegalTxnTransitionError(
            f"transactional id {metadata.transactional_id}: markers follow PrepareCommit or "
            f"PrepareAbort, not {written.txn_state.value}"
        )
    result = (
        TransactionResult.COMMIT
        if written.txn_state is _S.PREPARE_COMMIT
        else TransactionResult.ABORT
    )
    if metadata.producer_id != written.producer_id:
        return TxnReply(INVALID_PRODUCER_ID_MAPPING)
    if metadata.producer_epoch != written.producer_epoch:
        return TxnReply(PRODUCER_FENCED)
    if metadata.pending_transition_in_progress:
        return TxnReply(CONCURRENT_TRANSACTIONS)
    if metadata.state is not written.txn_state:
        if metadata.state in (_S.DEAD, _S.PREPARE_EPOCH_FENCE):
            raise _never_settled(metadata)
        return TxnReply(INVALID_TXN_STATE)
    partitions = frozenset(metadata.topic_partitions)
    return TxnSendMarkers(result, metadata.prepare_complete(now_ms), partitions)


def on_append_failed(
    metadata: TransactionMetadata, append: TxnAppend, error: type[KafkaError]
) -> type[KafkaError]:
    """The write of ``append`` failed with ``error``: drop the pending transition, remember a
    fence whose epoch never reached the log, and give the error to answer (Kafka maps the
    replica errors to coordinator errors the client knows how to retry)."""
    metadata.pending_state = None
    if append.epoch_fence:
        metadata.has_failed_epoch_fence = True
    return write_error(error)


def write_error(error: type[KafkaError]) -> type[KafkaError]:
    """The coordinator error a failed ``__transaction_state`` write is reported as."""
    return _WRITE_ERRORS.get(error, error)


# -- timeouts and expiration --------------------------------------------------------------


def timed_out_transactions(
    metadatas: Iterable[TransactionMetadata], now_ms: int
) -> list[TimedOutTransaction]:
    """Open transactions past their timeout at ``now_ms`` (Kafka's ``timedOutTransactions``):
    Ongoing, nothing pending, started more than ``txn_timeout_ms`` ago."""
    return [
        TimedOutTransaction(m.transactional_id, m.producer_id, m.producer_epoch)
        for m in metadatas
        if _is_timed_out(m, now_ms)
    ]


def _is_timed_out(metadata: TransactionMetadata, now_ms: int) -> bool:
    return (
        metadata.state is _S.ONGOING
        and not metadata.pending_transition_in_progress
        and metadata.txn_start_timestamp + metadata.txn_timeout_ms < now_ms
    )


def abort_timed_out(
    metadata: TransactionMetadata, timed_out: TimedOutTransaction, now_ms: int
) -> TxnAppend | None:
    """Abort a timed-out transaction as Kafka's ``abortTimedOutTransactions`` does: fence the
    producer (epoch + 1) and write PrepareAbort at that epoch; the producer's next request is
    PRODUCER_FENCED. None when the id changed since it was found (another producer id, a
    pending transition, or — checked here, Kafka would throw — no longer open and late)."""
    if metadata.producer_id != timed_out.producer_id:
        return None
    if not _is_timed_out(metadata, now_ms):
        return None
    return _fence_and_abort(metadata, now_ms)


def _fence_and_abort(metadata: TransactionMetadata, now_ms: int) -> TxnAppend:
    """Fence the open transaction's producer and abort it at the fenced epoch, as the
    coordinator's own EndTxn (Kafka's ``prepareFenceProducerEpoch`` + ``endTransaction`` with
    ``isFromClient = false``)."""
    fence = metadata.prepare_fence_producer_epoch()
    decision = _end_transaction(
        metadata,
        fence.producer_id,
        fence.producer_epoch,
        TransactionResult.ABORT,
        from_client=False,
        now_ms=now_ms,
    )
    if not isinstance(decision, TxnAppend):
        raise IllegalTxnTransitionError(
            f"transactional id {metadata.transactional_id}: the abort that fences an open "
            f"transaction was refused ({decision})"
        )
    return decision


def expire_transactional_ids(
    metadatas: Iterable[TransactionMetadata], now_ms: int, expiration_ms: int
) -> list[tuple[TransactionMetadata, TxnTransitMetadata]]:
    """Ids idle for ``transactional.id.expiration.ms`` (no open transaction, nothing pending,
    last update at or before ``now_ms - expiration_ms``), each prepared Dead: write their
    tombstones, then :func:`finish_expiration`."""
    return [
        (m, m.prepare_dead())
        for m in metadatas
        if m.pending_state is None
        and m.state.is_expiration_allowed
        and m.txn_last_update_timestamp <= now_ms - expiration_ms
    ]


def finish_expiration(
    metadata: TransactionMetadata, transit: TxnTransitMetadata, error: Error
) -> bool:
    """The tombstone write for ``transit`` is done: True to remove the id from the cache (the
    write succeeded and nothing touched the id meanwhile); otherwise it stays, un-pended."""
    if (
        error is None
        and metadata.pending_state is _S.DEAD
        and metadata.producer_epoch == transit.producer_epoch
    ):
        return True
    metadata.pending_state = None
    return False


def _never_settled(metadata: TransactionMetadata) -> IllegalTxnTransitionError:
    return IllegalTxnTransitionError(
        f"transactional id {metadata.transactional_id} is in state {metadata.state.value}, "
        "which a transaction never settles in"
    )
