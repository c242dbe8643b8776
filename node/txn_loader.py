"""Loading a partition of ``__transaction_state``: the transactional ids its records describe
and the transactions a new coordinator must finish (the reading half of Kafka's
``TransactionStateManager.loadTransactionsForTxnTopicPartition``).

Pure: records in, metadata out. The log is compacted, so the last record of each id wins and a
tombstone (a null value) removes the id. Control batches carry no transaction state and are
skipped; so is a record whose key has a version this broker does not know (Kafka 3.5+: the
leftover of an aborted upgrade). A record without a key, or whose key or value does not
decode, raises ``CORRUPT_MESSAGE``: the coordinator then does not take the partition over
rather than serve half of it (Kafka logs the error and keeps what it had read; we refuse, as
``node.group_loader`` does, so that a corrupt log cannot silently forget a decided commit).

After loading, every transaction in PrepareCommit or PrepareAbort was decided but its markers
may not all be written: :func:`pending_completions` prepares each one's completion, and the
coordinator writes its markers again (a partition accepts a marker for a transaction that
is no longer open there: it completes nothing) and then the Complete state. Ongoing
transactions are left to the timeout, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafkasim.common.errors import CorruptRecordError
from kafkasim.node.txn_log import TxnLogKey, decode_key, decode_value
from kafkasim.node.txn_metadata import TransactionMetadata, TransactionState
from kafkasim.node.txn_types import TransactionResult, TxnSendMarkers
from kafkasim.storage.records.batch import Record
from kafkasim.storage.records.entry import LogEntryHeader


def load_transactions(
    records: Iterable[tuple[bytes | None, bytes | None]],
) -> dict[str, TransactionMetadata]:
    """The transactional ids of one partition from its (key, value) records in log order, by
    id (in id order)."""
    loaded: dict[str, TransactionMetadata] = {}
    for offset, (key_bytes, value_bytes) in enumerate(records):
        if key_bytes is None:
            raise CorruptRecordError(
                f"__transaction_state record {offset} has a null key; every record names "
                "its transactional id"
            )
        key = decode_key(key_bytes)
        if not isinstance(key, TxnLogKey):
            continue
        if value_bytes is None:
            loaded.pop(key.transactional_id, None)
        else:
            loaded[key.transactional_id] = decode_value(value_bytes).to_metadata(
                key.transactional_id
            )
    return dict(sorted(loaded.items()))


def load_transactions_from_batches(
    batches: Iterable[tuple[LogEntryHeader, Sequence[Record]]],
) -> dict[str, TransactionMetadata]:
    """:func:`load_transactions` over a partition's batches (control batches skipped)."""
    return load_transactions(
        (record.key, record.value)
        for header, records in batches
        if not header.is_control
        for record in records
    )


def pending_completions(
    loaded: dict[str, TransactionMetadata], now_ms: int
) -> list[TxnSendMarkers]:
    """The decided but maybe unfinished transactions among ``loaded``, each with its
    completion prepared (pending CompleteCommit / CompleteAbort), in id order."""
    out: list[TxnSendMarkers] = []
    for metadata in loaded.values():
        if metadata.state is TransactionState.PREPARE_COMMIT:
            result = TransactionResult.COMMIT
        elif metadata.state is TransactionState.PREPARE_ABORT:
            result = TransactionResult.ABORT
        else:
            continue
        partitions = frozenset(metadata.topic_partitions)
        out.append(TxnSendMarkers(result, metadata.prepare_complete(now_ms), partitions))
    return out
