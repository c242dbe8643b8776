"""The records of ``__transaction_state`` byte for byte as Kafka 3.x writes them, version 1
as Kafka 4.0 writes it, garbage that must fail as CORRUPT_MESSAGE, tombstones, and the
transactional id's partition (Java's String.hashCode)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptRecordError
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BROKER_CONFIG_DEF
from kafkasim.node.group_records import java_string_hash
from kafkasim.node.txn_log import (
    TRANSACTION_STATE_TOPIC,
    TxnLogKey,
    TxnLogValue,
    UnknownTxnLogKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
    record_for,
    tombstone,
    transaction_topic_configs,
)
from kafkasim.node.txn_metadata import TransactionState, TxnTransitMetadata
from tests.unit.node.test_group_records import i16, i32, i64, s

S = TransactionState


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


ONGOING = TxnLogValue(
    producer_id=1000,
    producer_epoch=5,
    txn_timeout_ms=60_000,
    state=S.ONGOING,
    topic_partitions=frozenset(
        {TopicPartition("orders", 1), TopicPartition("orders", 0), TopicPartition("audit", 2)}
    ),
    txn_last_update_timestamp=1000,
    txn_start_timestamp=900,
)


def test_the_topic_is_kafkas() -> None:
    assert TRANSACTION_STATE_TOPIC == "__transaction_state"


# -- exact bytes -------------------------------------------------------------------------------


def test_a_key_is_version_0_and_the_id() -> None:
    assert encode_key("txn-1") == bytes.fromhex("0000000574786e2d31")
    assert decode_key(bytes.fromhex("0000000574786e2d31")) == TxnLogKey("txn-1")


def test_an_ongoing_value_is_kafkas_version_0_bytes() -> None:
    expected = bytes.fromhex(
        "0000"  # version 0
        "00000000000003e8"  # producer id 1000
        "0005"  # epoch 5
        "0000ea60"  # timeout 60000 ms
        "01"  # Ongoing
        "00000002"  # two topics, in name order
        "0005"
        "6175646974"
        "00000001"
        "00000002"  # audit [2]
        "0006"
        "6f7264657273"
        "00000002"
        "00000000"
        "00000001"  # orders [0, 1]
        "00000000000003e8"  # last update 1000
        "0000000000000384"  # start 900
    )
    assert encode_value(ONGOING) == expected
    assert decode_value(expected) == ONGOING


def test_an_empty_value_has_null_partitions() -> None:
    empty = TxnLogValue(7, 0, 60_000, S.EMPTY, frozenset(), 1000, -1)
    expected = i16(0) + i64(7) + i16(0) + i32(60_000) + i8(0) + i32(-1) + i64(1000) + i64(-1)
    assert encode_value(empty) == expected
    assert decode_value(expected) == empty


def test_a_complete_value_has_an_empty_partition_list() -> None:
    done = TxnLogValue(7, 1, 60_000, S.COMPLETE_COMMIT, frozenset(), 1000, 900)
    assert encode_value(done)[17:21] == i32(0)
    assert decode_value(encode_value(done)) == done


# -- version 1 (flexible) ----------------------------------------------------------------------


def test_version_1_is_read_and_its_tagged_fields_skipped() -> None:
    """Kafka 4.0 at transaction.version 1+: compact lengths (n + 1), a tagged-field section
    after each partition entry and after the value (here PreviousProducerId, tag 0, and
    ClientTransactionVersion, tag 2)."""
    data = (
        i16(1)
        + i64(1000)
        + i16(5)
        + i32(60_000)
        + i8(2)  # PrepareCommit
        + bytes([2])  # one topic
        + bytes([2])
        + b"t"  # compact string "t"
        + bytes([3])
        + i32(0)
        + i32(1)  # two partition ids
        + bytes([0])  # no tagged fields in the entry
        + i64(1000)
        + i64(900)
        + bytes([2, 0, 8])
        + i64(999)  # tag 0, 8 bytes
        + bytes([2, 2])
        + i16(2)  # tag 2, 2 bytes
    )
    assert decode_value(data) == TxnLogValue(
        1000,
        5,
        60_000,
        S.PREPARE_COMMIT,
        frozenset({TopicPartition("t", 0), TopicPartition("t", 1)}),
        1000,
        900,
    )


def test_version_1_null_partitions_for_empty() -> None:
    data = i16(1) + i64(7) + i16(0) + i32(10) + i8(0) + bytes([0]) + i64(5) + i64(-1) + bytes([0])
    assert decode_value(data) == TxnLogValue(7, 0, 10, S.EMPTY, frozenset(), 5, -1)


# -- round trips -------------------------------------------------------------------------------

topic_partitions = st.frozensets(
    st.builds(TopicPartition, st.text(min_size=1, max_size=10), st.integers(0, 2**31 - 1)),
    max_size=8,
)


def _value(
    state: TransactionState, partitions: frozenset[TopicPartition], **kw: int
) -> TxnLogValue:
    return TxnLogValue(
        state=state,
        topic_partitions=frozenset() if state is S.EMPTY else partitions,
        **kw,
    )


values = st.builds(
    _value,
    state=st.sampled_from([s for s in TransactionState if s is not S.DEAD]),
    partitions=topic_partitions,
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 2**15 - 1),
    txn_timeout_ms=st.integers(1, 2**31 - 1),
    txn_last_update_timestamp=st.integers(-1, 2**62),
    txn_start_timestamp=st.integers(-1, 2**62),
)


@given(values)
def test_values_round_trip(value: TxnLogValue) -> None:
    assert decode_value(encode_value(value)) == value


@given(st.text(max_size=50))
def test_keys_round_trip(transactional_id: str) -> None:
    assert decode_key(encode_key(transactional_id)) == TxnLogKey(transactional_id)


# -- what cannot be written, what must not be read ---------------------------------------------


def test_an_empty_transaction_with_partitions_is_not_written() -> None:
    bad = TxnLogValue(7, 0, 10, S.EMPTY, frozenset({TopicPartition("t", 0)}), 5, -1)
    with pytest.raises(ValueError, match="an Empty transaction has no partitions"):
        encode_value(bad)


def test_a_dead_id_is_written_as_a_tombstone() -> None:
    dead = TxnLogValue(7, 0, 10, S.DEAD, frozenset(), 5, -1)
    with pytest.raises(ValueError, match="tombstone"):
        encode_value(dead)
    transit = TxnTransitMetadata(7, 7, 0, -1, 10, S.DEAD, frozenset(), -1, 5)
    assert record_for("txn", transit) == (encode_key("txn"), None) == tombstone("txn")


def test_a_transition_is_written_as_its_value() -> None:
    transit = TxnTransitMetadata(
        1000, 1000, 5, 4, 60_000, S.ONGOING, ONGOING.topic_partitions, 900, 1000
    )
    assert record_for("txn", transit) == (encode_key("txn"), encode_value(ONGOING))


def test_an_unknown_key_version_is_named_not_read() -> None:
    assert decode_key(i16(1) + s("x")) == UnknownTxnLogKey(1)


def test_an_empty_value_listing_partitions_reads_as_none_like_kafka() -> None:
    data = i16(0) + i64(7) + i16(0) + i32(10) + i8(0)
    data += i32(1) + s("t") + i32(1) + i32(0) + i64(5) + i64(-1)
    assert decode_value(data).topic_partitions == frozenset()


GOOD = encode_value(ONGOING)


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (i16(2) + GOOD[2:], "unknown version 2 of a transaction log message value"),
        (GOOD[:16] + i8(8) + GOOD[17:], "unknown transaction state id 8"),
        (GOOD[:-1], "truncated at transaction_start_timestamp_ms"),
        (GOOD + b"\x00", "1 unexpected bytes after the last field"),
        (GOOD[:17] + i32(-1) + GOOD[-16:], "transaction_partitions is null in state Ongoing"),
        (GOOD[:17] + i32(1_000_000), "transaction_partitions claims 1000000 entries"),
        (GOOD[:21] + i16(-1) + GOOD[23:], r"transaction_partitions\[0\].topic has length -1"),
        (i16(1) + GOOD[2:17] + bytes([100]), "transaction_partitions claims 99 entries"),
        (
            i16(1) + GOOD[2:17] + bytes([0x80] * 6),
            "transaction_partitions count is an unsigned varint longer than 5 bytes",
        ),
    ],
)
def test_garbage_is_corrupt_message(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptRecordError, match=f"__transaction_state value: {problem}"):
        decode_value(data)


def test_a_truncated_key_is_corrupt_message() -> None:
    with pytest.raises(CorruptRecordError, match="__transaction_state key: truncated"):
        decode_key(encode_key("txn-1")[:-1])


# -- the id's partition ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("string", "hash_code"),
    [
        ("", 0),
        ("a", 97),
        ("\u00e9", 0xE9),  # one UTF-16 unit, two UTF-8 bytes
        ("\u65e5\u672c", 0x65E5 * 31 + 0x672C),  # 835047
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair
    ],
)
def test_java_string_hash_over_utf16_units(string: str, hash_code: int) -> None:
    assert java_string_hash(string) == hash_code


@pytest.mark.parametrize(
    ("transactional_id", "expected"),
    [
        ("", 0),
        ("a", 47),  # 97 % 50
        ("\u65e5\u672c", 47),  # 835047 % 50
        ("my-group", 12),  # hash -1906497762: Utils.abs, then % 50
        ("polygenelubricants", 0),  # hash Integer.MIN_VALUE: Utils.abs gives 0
    ],
)
def test_partition_for_is_kafkas(transactional_id: str, expected: int) -> None:
    assert partition_for(transactional_id, 50) == expected


def test_partition_for_names_the_topic_without_partitions() -> None:
    with pytest.raises(ValueError, match="__transaction_state must have at least one partition"):
        partition_for("txn", 0)


@given(st.text(max_size=30), st.integers(1, 200))
def test_partition_for_is_in_range(transactional_id: str, partitions: int) -> None:
    assert 0 <= partition_for(transactional_id, partitions) < partitions


# -- configs -----------------------------------------------------------------------------------


def test_broker_defaults_are_kafkas() -> None:
    config = BROKER_CONFIG_DEF.parse({"zookeeper.connect": "zk:2181"})
    assert config["transaction.state.log.num.partitions"] == 50
    assert config["transaction.state.log.replication.factor"] == 3
    assert config["transaction.state.log.min.isr"] == 2
    assert config["transaction.state.log.segment.bytes"] == 104_857_600
    assert config["transaction.state.log.load.buffer.size"] == 5_242_880
    assert config["transaction.max.timeout.ms"] == 900_000
    assert config["transactional.id.expiration.ms"] == 604_800_000
    assert config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] == 10_000
    assert config["transaction.remove.expired.transaction.cleanup.interval.ms"] == 3_600_000
    assert transaction_topic_configs(config) == {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": "2",
        "segment.bytes": "104857600",
    }
