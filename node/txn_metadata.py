"""One transactional id as its transaction coordinator holds it: Kafka's ``TransactionState``
and ``TransactionMetadata``.

Theory of operation
-------------------
A transactional id has one producer id and epoch and at most one open transaction. Every
change is made in two steps, because the new state must be in ``__transaction_state`` (acks
all) before anyone may act on it:

1. ``prepare_*`` checks that the change is legal, sets :attr:`TransactionMetadata.pending_state`
   to the target state and returns the target as a :class:`TxnTransitMetadata` value. While a
   state is pending, no other change may be prepared (the request layer answers
   CONCURRENT_TRANSACTIONS first; a second prepare is our own bug and raises).
2. The coordinator writes the transit value to the log. On success it calls
   :meth:`TransactionMetadata.complete_transition_to`, which checks the transit against the
   current metadata once more and applies it; on failure it clears ``pending_state``.

The states and the only states each may be entered from (Kafka's ``validPreviousStates``)::

    Empty              ◄─ Empty, CompleteCommit, CompleteAbort       (InitProducerId)
    Ongoing            ◄─ Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitions/Offsets)
    PrepareCommit      ◄─ Ongoing                                   (EndTxn commit)
    PrepareAbort       ◄─ Ongoing, PrepareEpochFence                (EndTxn abort, timeout)
    CompleteCommit     ◄─ PrepareCommit                             (all markers written)
    CompleteAbort      ◄─ PrepareAbort                              (all markers written)
    PrepareEpochFence  ◄─ Ongoing                                   (fencing an open txn)
    Dead               ◄─ Empty, CompleteCommit, CompleteAbort       (transactional id expired)

Epochs (KIP-360): an InitProducerId bumps the epoch; the client may pass the producer id and
epoch it had, and a retry of an InitProducerId that already succeeded is answered with the
same epoch (``last_producer_epoch`` remembers the one before it). The coordinator never hands
out ``Short.MaxValue``: from ``Short.MaxValue - 1`` on the epoch is *exhausted* and the next
InitProducerId rotates to a fresh producer id at epoch 0, keeping the last one in
``last_producer_id``; that way a fence (one more bump) is always possible.

Pure bookkeeping on values: no IO, no clock reads (times come in as arguments). Not thread-safe:
one event loop. Illegal transitions raise :class:`~common.errors.IllegalTxnTransitionError`
naming the transactional id and both states (Kafka's ``IllegalStateException``).

``last_producer_id`` and ``last_producer_epoch`` are not in the log record (value version 0):
a coordinator that loads the log starts them at -1, exactly as Kafka 3.x does, so a retried
InitProducerId across a coordinator move is fenced rather than answered.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kafkasim.common.errors import IllegalTxnTransitionError
from kafkasim.common.sentinels import INT16_MAX
from kafkasim.common.types import TopicPartition

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_TIMESTAMP = -1


class TransactionState(enum.Enum):
    """Kafka's transaction states; the values are the names DescribeTransactions shows."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        """The byte ``__transaction_state`` stores (``TransactionStatus``)."""
        return _STATE_IDS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState | None:
        """The state with byte ``state_id``, None for a byte Kafka never wrote."""
        return _STATES_BY_ID.get(state_id)

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        """The state named ``name`` exactly (ListTransactions filters), None if none is."""
        try:
            return cls(name)
        except ValueError:
            return None

    @property
    def valid_previous_states(self) -> frozenset[TransactionState]:
        return VALID_PREVIOUS_STATES[self]

    @property
    def is_expiration_allowed(self) -> bool:
        """A transactional id in this state may expire (``transactional.id.expiration.ms``)."""
        return self in _EXPIRABLE

    @property
    def has_pending_transaction(self) -> bool:
        """A transaction is open or being completed: its producer id must not change."""
        return self in _PENDING_TRANSACTION


_S = TransactionState

_STATE_IDS: dict[TransactionState, int] = {
    _S.EMPTY: 0,
    _S.ONGOING: 1,
    _S.PREPARE_COMMIT: 2,
    _S.PREPARE_ABORT: 3,
    _S.COMPLETE_COMMIT: 4,
    _S.COMPLETE_ABORT: 5,
    _S.DEAD: 6,
    _S.PREPARE_EPOCH_FENCE: 7,
}
_STATES_BY_ID = {state_id: state for state, state_id in _STATE_IDS.items()}

VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
_EXPIRABLE = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_PENDING_TRANSACTION = frozenset({_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT})


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """No more epochs for this producer id: Kafka keeps ``Short.MaxValue`` for fencing, so
    ``Short.MaxValue - 1`` is the last epoch a client is given."""
    return producer_epoch >= INT16_MAX - 1


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The target of a prepared transition: what goes to ``__transaction_state`` and, once
    written, into the :class:`TransactionMetadata`. ``last_producer_id`` is the producer id
    before the transition (set on a producer id rotation's target, informational otherwise)."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    txn_state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int


@dataclass
class TransactionMetadata:
    """A transactional id's producer, epoch and open transaction (Kafka's
    ``TransactionMetadata``). ``txn_start_timestamp`` is when the first partition joined the
    open transaction (-1 without one); ``txn_last_update_timestamp`` is the last write's time,
    which drives transactional id expiration."""

    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 0
    state: TransactionState = TransactionState.EMPTY
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = NO_TIMESTAMP
    txn_last_update_timestamp: int = NO_TIMESTAMP
    pending_state: TransactionState | None = None
    # A fence whose log write failed already bumped the epoch in memory (never shown to a
    # client); the next fence reuses that epoch instead of bumping again.
    has_failed_epoch_fence: bool = False

    # -- queries ---------------------------------------------------------------------------

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    # -- preparing transitions (step 1) ---------------------------------------------------

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Fence the open transaction's producer: one epoch up (or the epoch a failed fence
        already took), state PrepareEpochFence; the abort that follows writes that epoch."""
        if self.producer_epoch == INT16_MAX:
            raise self._illegal(
                _S.PREPARE_EPOCH_FENCE,
                f"cannot fence producer epoch {INT16_MAX} (Short.MaxValue): it would overflow",
            )
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare_transition_to(
            _S.PREPARE_EPOCH_FENCE,
            new_producer_id=self.producer_id,
            new_epoch=bumped,
            new_last_epoch=NO_PRODUCER_EPOCH,
            new_txn_timeout_ms=self.txn_timeout_ms,
            new_topic_partitions=frozenset(self.topic_partitions),
            new_txn_start_timestamp=self.txn_start_timestamp,
            now_ms=self.txn_last_update_timestamp,
        )

    def prepare_increment_producer_epoch(
        self, new_txn_timeout_ms: int, expected_producer_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | None:
        """InitProducerId on an idle id: Empty with the next epoch. ``expected_producer_epoch``
        is the epoch the client had (KIP-360), None for a fresh client. None: the client's
        epoch is neither the current nor the last one, it is fenced (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise self._illegal(
                _S.EMPTY,
                f"cannot allocate any more producer epochs for producer id {self.producer_id}",
            )
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            # A new client: bump and forget the last epoch (-1 + 1 = 0 for a new id).
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch in (NO_PRODUCER_EPOCH, expected_producer_epoch):
            # The current client recovering from an error: bump, remembering its epoch.
            next_epoch, last_epoch = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            # A retry of a bump that succeeded but whose answer was lost: answer it again.
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare_transition_to(
            _S.EMPTY,
            new_producer_id=self.producer_id,
            new_epoch=next_epoch,
            new_last_epoch=last_epoch,
            new_txn_timeout_ms=new_txn_timeout_ms,
            new_topic_partitions=frozenset(),
            new_txn_start_timestamp=NO_TIMESTAMP,
            now_ms=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, new_txn_timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """InitProducerId on an exhausted epoch: a fresh producer id at epoch 0. With
        ``record_last_epoch`` (the client passed its epoch) the old epoch is remembered, so a
        retry carrying the old id and epoch is recognised."""
        if self.state.has_pending_transaction:
            raise self._illegal(_S.EMPTY, "cannot rotate producer ids while a transaction is open")
        return self._prepare_transition_to(
            _S.EMPTY,
            new_producer_id=new_producer_id,
            new_epoch=0,
            new_last_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            new_txn_timeout_ms=new_txn_timeout_ms,
            new_topic_partitions=frozenset(),
            new_txn_start_timestamp=NO_TIMESTAMP,
            now_ms=now_ms,
        )

    def prepare_add_partitions(
        self, added: frozenset[TopicPartition], now_ms: int
    ) -> TxnTransitMetadata:
        """AddPartitionsToTxn / AddOffsetsToTxn: Ongoing with ``added`` joined; the first
        partition of a transaction starts its clock."""
        idle = self.state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)
        return self._prepare_same_producer(
            _S.ONGOING,
            frozenset(self.topic_partitions) | added,
            now_ms if idle else self.txn_start_timestamp,
            now_ms,
        )

    def prepare_abort_or_commit(
        self, new_state: TransactionState, now_ms: int
    ) -> TxnTransitMetadata:
        """EndTxn: PrepareCommit or PrepareAbort, same producer and partitions."""
        if new_state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise self._illegal(new_state, "EndTxn prepares PrepareCommit or PrepareAbort only")
        return self._prepare_same_producer(
            new_state, frozenset(self.topic_partitions), self.txn_start_timestamp, now_ms
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """Every marker written: CompleteCommit after PrepareCommit, else CompleteAbort; the
        partitions are cleared."""
        new_state = _S.COMPLETE_COMMIT if self.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        # The prepare state reached the log, so a failed fence before it no longer matters.
        self.has_failed_epoch_fence = False
        return self._prepare_same_producer(new_state, frozenset(), self.txn_start_timestamp, now_ms)

    def prepare_dead(self) -> TxnTransitMetadata:
        """Expiration: Dead (written as a tombstone; the id then leaves the cache)."""
        return self._prepare_same_producer(
            _S.DEAD, frozenset(), self.txn_start_timestamp, self.txn_last_update_timestamp
        )

    def _prepare_same_producer(
        self,
        new_state: TransactionState,
        new_topic_partitions: frozenset[TopicPartition],
        new_txn_start_timestamp: int,
        now_ms: int,
    ) -> TxnTransitMetadata:
        """A transition that keeps the producer id, epochs and timeout."""
        return self._prepare_transition_to(
            new_state,
            new_producer_id=self.producer_id,
            new_epoch=self.producer_epoch,
            new_last_epoch=self.last_producer_epoch,
            new_txn_timeout_ms=self.txn_timeout_ms,
            new_topic_partitions=new_topic_partitions,
            new_txn_start_timestamp=new_txn_start_timestamp,
            now_ms=now_ms,
        )

    def _prepare_transition_to(
        self,
        new_state: TransactionState,
        *,
        new_producer_id: int,
        new_epoch: int,
        new_last_epoch: int,
        new_txn_timeout_ms: int,
        new_topic_partitions: frozenset[TopicPartition],
        new_txn_start_timestamp: int,
        now_ms: int,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise self._illegal(new_state, f"{self.pending_state.value} is already pending")
        if new_producer_id < 0:
            raise self._illegal(new_state, f"illegal new producer id {new_producer_id}")
        # A new id keeps epoch -1 until its first InitProducerId, and may die so.
        if new_state is not _S.DEAD and new_epoch < 0:
            raise self._illegal(new_state, f"illegal new producer epoch {new_epoch}")
        if self.state not in new_state.valid_previous_states:
            raise self._illegal(new_state, "not a valid previous state")
        self.pending_state = new_state
        return TxnTransitMetadata(
            producer_id=new_producer_id,
            last_producer_id=self.producer_id,
            producer_epoch=new_epoch,
            last_producer_epoch=new_last_epoch,
            txn_timeout_ms=new_txn_timeout_ms,
            txn_state=new_state,
            topic_partitions=new_topic_partitions,
            txn_start_timestamp=new_txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
        )

    # -- completing transitions (step 2) --------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Apply ``transit`` once its record is in the log. It must be the pending state's;
        the producer and epoch must be the same (or, for InitProducerId, the next epoch or a
        new producer id at epoch 0); an Ongoing transit may only add partitions."""
        to_state = self.pending_state
        if to_state is None:
            raise self._illegal(transit.txn_state, "no transition is pending")
        if to_state is not transit.txn_state:
            raise self._unexpected(transit, f"the pending state is {to_state.value}")
        if to_state is _S.EMPTY:
            same_epoch = self.producer_epoch == transit.producer_epoch
            if not same_epoch and not self._valid_producer_epoch_bump(transit):
                raise self._unexpected(transit, "its epoch is not this one or the next")
            if transit.topic_partitions or transit.txn_start_timestamp != NO_TIMESTAMP:
                raise self._unexpected(transit, "an Empty transaction has no partitions")
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif to_state is _S.ONGOING:
            if (
                not self._valid_producer_epoch(transit)
                or not self.topic_partitions <= transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
            ):
                raise self._unexpected(transit, "it must only add partitions")
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions |= transit.topic_partitions
        elif to_state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            if (
                not self._valid_producer_epoch(transit)
                or self.topic_partitions != transit.topic_partitions
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or self.txn_start_timestamp != transit.txn_start_timestamp
            ):
                raise self._unexpected(transit, "it must keep the transaction as it is")
        elif to_state in (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            if (
                not self._valid_producer_epoch(transit)
                or self.txn_timeout_ms != transit.txn_timeout_ms
                or transit.txn_start_timestamp == NO_TIMESTAMP
            ):
                raise self._unexpected(transit, "it must complete this transaction")
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions.clear()
        elif to_state is _S.PREPARE_EPOCH_FENCE:
            # A fence is always followed at once by the abort that writes it: never completed.
            raise self._unexpected(transit, "a fence is completed by its PrepareAbort")
        else:
            # An expired id leaves the cache after its tombstone; it is never Dead in memory.
            raise self._unexpected(transit, "an expired id is removed, not completed")
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None
        self.state = to_state

    def remove_partition(self, tp: TopicPartition) -> None:
        """A partition whose marker is written (or whose leader is gone for good) leaves the
        transaction being completed."""
        if self.state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            raise IllegalTxnTransitionError(
                f"transactional id {self.transactional_id}: cannot remove partition {tp} in "
                f"state {self.state.value} (pending "
                f"{self.pending_state.value if self.pending_state else None}): only a "
                "transaction being completed has markers to write"
            )
        self.topic_partitions.discard(tp)

    def _valid_producer_epoch(self, transit: TxnTransitMetadata) -> bool:
        return (
            transit.producer_epoch == self.producer_epoch
            and transit.producer_id == self.producer_id
        )

    def _valid_producer_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        return transit.producer_epoch == self.producer_epoch + 1 or (
            transit.producer_epoch == 0 and transit.producer_id != self.producer_id
        )

    def _illegal(self, to_state: TransactionState, why: str) -> IllegalTxnTransitionError:
        return IllegalTxnTransitionError(
            f"transactional id {self.transactional_id}: cannot prepare a transition from "
            f"{self.state.value} to {to_state.value}: {why}"
        )

    def _unexpected(self, transit: TxnTransitMetadata, why: str) -> IllegalTxnTransitionError:
        return IllegalTxnTransitionError(
            f"transactional id {self.transactional_id}: cannot complete a transition from "
            f"{self.state.value} to {transit.txn_state.value}: {why} ({transit})"
        )
