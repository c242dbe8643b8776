"""The records of ``__transaction_state``, byte for byte as Kafka's ``TransactionLog`` writes
them, and the partition that holds a transactional id.

Pure: values in, values out.

The topic is compacted: each record's key is a transactional id, its value the id's latest
metadata, and a null value (a tombstone) deletes an expired id. Key (``TransactionLogKey.json``,
version 0)::

    version:int16 = 0  transactional_id:string

Value (``TransactionLogValue.json``)::

    version:int16  producer_id:int64  producer_epoch:int16  transaction_timeout_ms:int32
    transaction_status:int8
    transaction_partitions:nullable [topic:string partition_ids:[int32]]
    transaction_last_update_timestamp_ms:int64  transaction_start_timestamp_ms:int64

Version 0 uses the classic encoding (``common.wire_format``). Version 1 (KIP-915) is the same
fields in Kafka's flexible encoding: unsigned-varint lengths and counts, each plus one (0 is
null), and a tagged-field section after every struct. Kafka 3.x writes version 0 (version 1
only once ``transaction.version`` 1 is enabled, Kafka 4.0): so do we; we read both, skipping
every tagged field, as a 3.5+ broker reads the records of a newer one. The partitions are
null for an Empty transaction (which has none) and grouped by topic otherwise; we write the
topics and their partitions in sorted order so that equal metadata gives equal bytes (Kafka's
order is its hash set's). The status byte is :attr:`TransactionState.id`.

Not stored: the last producer id and epoch. A loaded id starts them at -1 (as Kafka's
``readTxnRecordValue`` does).

Errors: truncated or garbage bytes, an unknown value version or status, a non-Empty
transaction without partitions and trailing bytes raise ``CORRUPT_MESSAGE`` naming what was
wrong. A key of an unknown version decodes to :class:`UnknownTxnLogKey` (Kafka 3.5+ skips such
records while loading: the leftovers of an aborted upgrade). Encoding what the format cannot
hold (an Empty transaction with partitions, a Dead one — which is written as a tombstone)
raises ``ValueError``.

Which partition holds a transactional id: :func:`partition_for`, Kafka's
``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from kafkasim.common.types import TopicPartition
from kafkasim.common.wire_format import WireReader, WireWriter
from kafkasim.node import group_records
from kafkasim.node.txn_metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)

TRANSACTION_STATE_TOPIC = "__transaction_state"

KEY_VERSION = 0
VALUE_VERSION = 0
VALUE_VERSION_FLEXIBLE = 1


@dataclass(frozen=True, slots=True)
class TxnLogKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class UnknownTxnLogKey:
    """A key of a version this broker does not know; its record is skipped."""

    version: int


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """A transactional id's metadata as stored; ``txn_start_timestamp`` -1 without an open
    transaction."""

    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_last_update_timestamp: int
    txn_start_timestamp: int

    @classmethod
    def from_transit(cls, transit: TxnTransitMetadata) -> TxnLogValue:
        """What Kafka's ``appendTransactionToLog`` writes for a prepared transition."""
        return cls(
            producer_id=transit.producer_id,
            producer_epoch=transit.producer_epoch,
            txn_timeout_ms=transit.txn_timeout_ms,
            state=transit.txn_state,
            topic_partitions=transit.topic_partitions,
            txn_last_update_timestamp=transit.txn_last_update_timestamp,
            txn_start_timestamp=transit.txn_start_timestamp,
        )

    def to_metadata(self, transactional_id: str) -> TransactionMetadata:
        """The metadata a loading coordinator builds (no last producer id or epoch)."""
        return TransactionMetadata(
            transactional_id=transactional_id,
            producer_id=self.producer_id,
            last_producer_id=NO_PRODUCER_ID,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=self.txn_timeout_ms,
            state=self.state,
            topic_partitions=set(self.topic_partitions),
            txn_start_timestamp=self.txn_start_timestamp,
            txn_last_update_timestamp=self.txn_last_update_timestamp,
        )


# --- keys -----------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    w = WireWriter()
    w.int16(KEY_VERSION, "version")
    w.string(transactional_id, "transactional_id")
    return w.getvalue()


def decode_key(data: bytes) -> TxnLogKey | UnknownTxnLogKey:
    r = WireReader(data, "__transaction_state key")
    version = r.int16("version")
    if version != KEY_VERSION:
        return UnknownTxnLogKey(version)
    key = TxnLogKey(r.string("transactional_id"))
    r.done()
    return key


# --- values ---------------------------------------------------------------------------------


def encode_value(value: TxnLogValue) -> bytes:
    """A value, version 0."""
    if value.state is TransactionState.DEAD:
        raise ValueError("a Dead transactional id is written as a tombstone, not as a value")
    if value.state is TransactionState.EMPTY and value.topic_partitions:
        raise ValueError(
            "an Empty transaction has no partitions, got "
            f"{sorted((tp.topic, tp.partition) for tp in value.topic_partitions)}"
        )
    w = WireWriter()
    w.int16(VALUE_VERSION, "version")
    w.int64(value.producer_id, "producer_id")
    w.int16(value.producer_epoch, "producer_epoch")
    w.int32(value.txn_timeout_ms, "transaction_timeout_ms")
    w.int8(value.state.id, "transaction_status")
    if value.state is TransactionState.EMPTY:
        w.nullable_count(None, "transaction_partitions")
    else:
        by_topic = _group_by_topic(value.topic_partitions)
        w.count(len(by_topic), "transaction_partitions")
        for topic, partitions in by_topic.items():
            w.string(topic, "transaction_partitions.topic")
            w.count(len(partitions), "transaction_partitions.partition_ids")
            for p in partitions:
                w.int32(p, "transaction_partitions.partition_ids[]")
    w.int64(value.txn_last_update_timestamp, "transaction_last_update_timestamp_ms")
    w.int64(value.txn_start_timestamp, "transaction_start_timestamp_ms")
    return w.getvalue()


def _group_by_topic(tps: frozenset[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for tp in sorted(tps, key=lambda tp: (tp.topic, tp.partition)):
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


# The smallest entry of transaction_partitions: an empty topic and no partitions.
_PARTITIONS_ENTRY_MIN = 2 + 4
_PARTITIONS_ENTRY_MIN_FLEXIBLE = 1 + 1 + 1


def decode_value(data: bytes) -> TxnLogValue:
    """Parse a value, version 0 or 1."""
    r = _Reader(data, "__transaction_state value")
    version = r.int16("version")
    if version not in (VALUE_VERSION, VALUE_VERSION_FLEXIBLE):
        raise r.corrupt(f"unknown version {version} of a transaction log message value")
    flexible = version == VALUE_VERSION_FLEXIBLE
    producer_id = r.int64("producer_id")
    producer_epoch = r.int16("producer_epoch")
    txn_timeout_ms = r.int32("transaction_timeout_ms")
    status = r.int8("transaction_status")
    state = TransactionState.from_id(status)
    if state is None:
        raise r.corrupt(f"unknown transaction state id {status}")
    partitions: list[TopicPartition] = []
    if flexible:
        n = r.compact_count("transaction_partitions", _PARTITIONS_ENTRY_MIN_FLEXIBLE)
    else:
        n = r.nullable_count("transaction_partitions", _PARTITIONS_ENTRY_MIN)
    for i in range(n or 0):
        field = f"transaction_partitions[{i}]"
        if flexible:
            topic = r.compact_string(f"{field}.topic")
            count = r.compact_count(f"{field}.partition_ids", 4)
            if count is None:
                raise r.corrupt(f"{field}.partition_ids is null; it cannot be")
        else:
            topic = r.string(f"{field}.topic")
            count = r.count(f"{field}.partition_ids", 4)
        partitions.extend(
            TopicPartition(topic, r.int32(f"{field}.partition_ids[{j}]")) for j in range(count)
        )
        if flexible:
            r.skip_tagged_fields(field)
    last_update = r.int64("transaction_last_update_timestamp_ms")
    start = r.int64("transaction_start_timestamp_ms")
    if flexible:
        r.skip_tagged_fields("value")
    r.done()
    if state is TransactionState.EMPTY:
        # Kafka ignores whatever an Empty record lists: such a transaction has no partitions.
        partitions = []
    elif n is None:
        raise r.corrupt(f"transaction_partitions is null in state {state.value}")
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        txn_timeout_ms=txn_timeout_ms,
        state=state,
        topic_partitions=frozenset(partitions),
        txn_last_update_timestamp=last_update,
        txn_start_timestamp=start,
    )


def record_for(transactional_id: str, transit: TxnTransitMetadata) -> tuple[bytes, bytes | None]:
    """The (key, value) a transition writes: a tombstone (null value) for Dead, an expired
    id; the value of ``transit`` otherwise."""
    if transit.txn_state is TransactionState.DEAD:
        return tombstone(transactional_id)
    return encode_key(transactional_id), encode_value(TxnLogValue.from_transit(transit))


def tombstone(transactional_id: str) -> tuple[bytes, None]:
    """The record that deletes an expired transactional id once compaction runs."""
    return encode_key(transactional_id), None


# --- the id's partition and the topic -------------------------------------------------------


def partition_for(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id: Kafka's
    ``Utils.abs(transactionalId.hashCode) % partitions`` (Java's ``String.hashCode``)."""
    return group_records.partition_for(transactional_id, partitions, TRANSACTION_STATE_TOPIC)


class _ConfigLookup(Protocol):
    def __getitem__(self, key: str, /) -> Any: ...


def transaction_topic_configs(broker_config: _ConfigLookup) -> dict[str, str]:
    """The topic configs ``__transaction_state`` is created with (Kafka's
    ``transactionTopicConfigs``): compacted, uncompressed, no unclean election, the broker's
    ``transaction.state.log.min.isr`` and ``.segment.bytes``."""
    return {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": str(broker_config["transaction.state.log.min.isr"]),
        "segment.bytes": str(broker_config["transaction.state.log.segment.bytes"]),
    }


# --- the flexible encoding's primitives -----------------------------------------------------


class _Reader(WireReader):
    """The shared cursor plus the flexible versions' unsigned varints, compact strings and
    arrays, and tagged fields."""

    def uvarint(self, field: str) -> int:
        value = 0
        for i in range(5):
            (byte,) = self._take(1, field)
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                return value
        raise self.corrupt(f"{field} is an unsigned varint longer than 5 bytes")

    def compact_count(self, field: str, entry_size_min: int) -> int | None:
        """A compact array's count (stored plus one), None when null; checked against the
        bytes left as :meth:`count` is."""
        n = self.uvarint(f"{field} count") - 1
        return None if n < 0 else self.check_entries(n, field, entry_size_min)

    def compact_string(self, field: str) -> str:
        length = self.uvarint(f"{field} length") - 1
        if length < 0:
            raise self.corrupt(f"{field} is null; it cannot be")
        return self._utf8(length, field)

    def skip_tagged_fields(self, field: str) -> None:
        for i in range(self.uvarint(f"{field} tagged field count")):
            self.uvarint(f"{field} tagged field {i} tag")
            size = self.uvarint(f"{field} tagged field {i} size")
            self._take(size, f"{field} tagged field {i}")
