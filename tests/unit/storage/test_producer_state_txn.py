"""ProducerStateManager's transactions (KIP-98): transactional batches open a transaction,
markers complete it, the first unstable offset and the LSO under interleaved producers, the
epoch rules for markers, and snapshots that carry an open transaction."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from kafkasim.storage.log_transactions import last_stable_offset
from kafkasim.storage.producer_state import (
    AppendOrigin,
    CompletedTxn,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
)
from kafkasim.storage.records.batch import ControlRecordType, EndTransactionMarker

T0 = 1_700_000_000_000
COMMIT = EndTransactionMarker(ControlRecordType.COMMIT, 0)
ABORT = EndTransactionMarker(ControlRecordType.ABORT, 0)


class Partition:
    """Offsets, producer sequences and the completion step as the log does them."""

    def __init__(self, state: ProducerStateManager) -> None:
        self.state = state
        self.next_offset = 0
        self.seqs: dict[int, int] = {}
        self.completed: list[tuple[CompletedTxn, int]] = []

    def data(self, pid: int, count: int = 1, *, txn: bool = True, epoch: int = 0) -> int:
        first = self.next_offset
        seq = self.seqs.get(pid, 0)
        self.state.check_and_update(
            pid,
            epoch,
            seq,
            seq + count - 1,
            first + count - 1,
            T0,
            is_from_client=True,
            is_transactional=txn,
        )
        self.seqs[pid] = seq + count
        self.next_offset += count
        return first

    def marker(
        self, pid: int, marker: EndTransactionMarker = COMMIT, *, epoch: int = 0
    ) -> CompletedTxn | None:
        offset = self.next_offset
        done = self.state.append_end_txn_marker(
            pid, epoch, marker, offset, T0, origin=AppendOrigin.COORDINATOR
        )
        self.next_offset += 1
        if done is not None:
            self.completed.append((done, self.state.last_stable_offset_of(done)))
            self.state.complete_txn(done)
        return done

    def lso(self, hw: int | None = None) -> int:
        hw = self.next_offset if hw is None else hw
        self.state.on_high_watermark_updated(hw)
        return last_stable_offset(self.state, log_start_offset=0, high_watermark=hw)


@pytest.fixture
def part(tmp_path: Path) -> Partition:
    return Partition(ProducerStateManager(tmp_path))


def test_a_transactional_batch_opens_a_transaction_at_its_first_offset(part: Partition) -> None:
    part.data(1, 3, txn=False)
    first = part.data(1, 2)
    entry = part.state.last_entry(1)
    assert entry is not None and entry.current_txn_first_offset == first == 3
    part.data(1, 2)  # a second batch of the same transaction does not move it
    assert entry.current_txn_first_offset == 3
    assert [t.first_offset for t in part.state.ongoing_txns] == [3]


def test_the_marker_completes_the_transaction(part: Partition) -> None:
    part.data(1, 2)
    done = part.marker(1, ABORT)
    assert done == CompletedTxn(producer_id=1, first_offset=0, last_offset=2, is_aborted=True)
    entry = part.state.last_entry(1)
    assert entry is not None and entry.current_txn_first_offset is None
    assert part.state.ongoing_txns == []


def test_lso_moves_only_when_the_earliest_ongoing_transaction_completes(part: Partition) -> None:
    """Three producers interleave; the LSO is the first offset of the earliest open one."""
    assert part.lso() == 0
    a = part.data(1)  # 0
    b = part.data(2)  # 1
    part.data(1)  # 2
    c = part.data(3)  # 3
    assert (a, b, c) == (0, 1, 3)
    assert part.lso() == 0
    part.marker(2)  # B commits at 4: A (at 0) still holds the LSO
    assert part.lso() == 0
    part.marker(1, ABORT)  # A aborts at 5: C at 3 is now the earliest
    assert part.lso() == 3
    assert part.completed[-1] == (CompletedTxn(1, 0, 5, True), 3)  # LSO recorded: C's start
    part.marker(3)  # C commits at 6: nothing open
    assert part.lso() == 7 == part.next_offset


def test_a_completed_transaction_holds_the_lso_until_the_hw_passes_its_marker(
    part: Partition,
) -> None:
    """Kafka's unreplicated transactions: decided is not yet stable."""
    part.data(1)  # 0
    part.marker(1)  # 1
    assert part.lso(hw=1) == 0  # the marker is not replicated: offset 0 is not stable
    assert part.lso(hw=2) == 2
    assert part.state.unreplicated_txns == []


def test_lso_never_passes_the_high_watermark(part: Partition) -> None:
    part.data(1, txn=False, count=5)
    assert part.lso(hw=3) == 3


def test_a_non_transactional_batch_inside_a_transaction_is_invalid_txn_state(
    part: Partition,
) -> None:
    part.data(1)
    with pytest.raises(InvalidTxnStateError, match="Expected transactional write"):
        part.data(1, txn=False)


def test_a_marker_with_an_older_producer_epoch_is_invalid_producer_epoch(part: Partition) -> None:
    part.data(1, epoch=3)
    with pytest.raises(InvalidProducerEpochError, match="smaller than the last seen epoch 3"):
        part.marker(1, epoch=2)
    assert [t.producer_id for t in part.state.ongoing_txns] == [1]  # unchanged


def test_a_marker_from_an_older_coordinator_epoch_is_fenced(part: Partition) -> None:
    part.data(1)
    part.marker(1, EndTransactionMarker(ControlRecordType.COMMIT, 5))
    part.data(1)
    with pytest.raises(TransactionCoordinatorFencedError, match="4 \\(zombie\\), 5 \\(current\\)"):
        part.marker(1, EndTransactionMarker(ControlRecordType.ABORT, 4))


def test_replication_takes_stale_markers_as_they_are(part: Partition) -> None:
    part.data(1, epoch=3)
    done = part.state.append_end_txn_marker(
        1, 2, ABORT, part.next_offset, T0, origin=AppendOrigin.REPLICATION
    )
    assert done is not None and done.is_aborted


def test_a_marker_for_a_producer_without_an_open_transaction_completes_nothing(
    part: Partition,
) -> None:
    assert part.marker(9) is None  # unknown producer
    part.data(1, txn=False)
    assert part.marker(1) is None  # idempotent, no transaction
    entry = part.state.last_entry(9)
    assert entry is not None and entry.producer_epoch == 0 and entry.coordinator_epoch == 0


def test_a_marker_with_a_bumped_epoch_forgets_the_old_batches(part: Partition) -> None:
    part.data(1, 2)
    part.marker(1, ABORT, epoch=1)  # the coordinator fenced epoch 0 and aborted
    entry = part.state.last_entry(1)
    assert entry is not None and entry.producer_epoch == 1 and entry.is_empty


def test_failed_append_restores_the_transactions(part: Partition) -> None:
    part.data(1)
    saved = part.state.save_entries([1, 2])
    part.data(2)
    part.marker(1)
    part.state.restore_entries(saved)
    assert [t.producer_id for t in part.state.ongoing_txns] == [1]
    assert part.state.unreplicated_txns == []
    assert part.state.last_entry(2) is None


def test_snapshot_carries_the_open_transaction(tmp_path: Path, part: Partition) -> None:
    part.data(1, 2)
    part.data(2, txn=False)
    part.data(3)  # at 3
    part.state.update_map_end_offset(part.next_offset)
    path = part.state.take_snapshot()
    assert path is not None
    entries = {e.producer_id: e for e in decode_snapshot(path.read_bytes())}
    assert entries[1].current_txn_first_offset == 0
    assert entries[2].current_txn_first_offset is None
    assert entries[3].current_txn_first_offset == 3
    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.load_from_latest_snapshot(0, 100) == 4
    assert [(t.producer_id, t.first_offset) for t in reloaded.ongoing_txns] == [(1, 0), (3, 3)]
    assert reloaded.first_unstable_offset() == 0


def test_a_snapshot_written_before_transactions_were_tracked_still_reads(tmp_path: Path) -> None:
    """Such snapshots hold -1 in current_txn_first_offset (ProducerSnapshot v1 always had it)."""
    state = ProducerStateManager(tmp_path)
    state.check_and_update(1, 0, 0, 4, 4, T0, is_from_client=True)
    data = encode_snapshot([state.last_entry(1)])  # type: ignore[list-item]
    assert data[-8:] == b"\xff" * 8
    (tmp_path / "00000000000000000005.snapshot").write_bytes(data)
    reloaded = ProducerStateManager(tmp_path)
    reloaded.load_from_latest_snapshot(0, 5)
    assert reloaded.ongoing_txns == [] and reloaded.last_entry(1) is not None


# -- property: the LSO under random interleavings ------------------------------------------

_step = st.tuples(st.integers(0, 3), st.sampled_from(["data", "commit", "abort", "plain", "hw"]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_step, max_size=60))
def test_lso_is_the_first_offset_of_the_earliest_unstable_transaction(
    steps: list[tuple[int, str]],
) -> None:
    """A model: per producer, the first offset of its open transaction and, for decided ones,
    (first, marker) until the HW passes the marker. The LSO must equal min(first unstable, HW)
    after every step, and each ABORT's recorded LSO must be the earliest other open
    transaction's first offset (else marker + 1)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        part = Partition(ProducerStateManager(Path(d)))
        open_txns: dict[int, int] = {}
        decided: list[tuple[int, int]] = []
        hw = 0
        for pid, action in steps:
            if action == "data" or (action == "plain" and pid in open_txns):
                open_txns.setdefault(pid, part.next_offset)
                part.data(pid)
            elif action == "plain":
                part.data(pid, txn=False)
            elif action in ("commit", "abort"):
                others = [f for p, f in open_txns.items() if p != pid]
                marker_offset = part.next_offset
                done = part.marker(pid, ABORT if action == "abort" else COMMIT)
                if pid in open_txns:
                    first = open_txns.pop(pid)
                    assert done == CompletedTxn(pid, first, marker_offset, action == "abort")
                    assert part.completed[-1][1] == min(others, default=marker_offset + 1)
                    decided.append((first, marker_offset))
                else:
                    assert done is None
            else:
                hw = part.next_offset
            decided = [(f, m) for f, m in decided if m >= hw]
            unstable = [*open_txns.values(), *(f for f, _ in decided)]
            expected = min(*unstable, hw) if unstable else hw
            assert part.lso(hw=hw) == expected


def test_transactions_completed_out_of_order_keep_the_earliest_unstable(part: Partition) -> None:
    """The later-begun transaction completes first; with the HW behind both markers, the LSO
    is the earlier one's first offset (found by the property test above)."""
    part.data(0)  # 0
    part.data(1)  # 1
    part.marker(1)  # 2
    part.marker(0)  # 3
    assert part.lso(hw=1) == 0
    assert part.lso(hw=3) == 0  # the marker at 3 is not replicated yet
    assert part.lso(hw=4) == 4


def test_replication_refuses_a_non_transactional_batch_inside_a_transaction_too(
    part: Partition,
) -> None:
    """Kafka's appendDataBatch raises INVALID_TXN_STATE whatever the origin."""
    part.data(1)
    with pytest.raises(InvalidTxnStateError, match="Expected transactional write"):
        part.state.check_and_update(
            1, 0, 1, 1, part.next_offset, T0, is_from_client=False, is_transactional=False
        )
