"""Serializers and deserializers (``key.serializer``, ``value.deserializer``, ...): by name or
callable, validated naming the key, applied by send and poll; and the clients' defaults (a
transport of their own, closed with them; one given left open; the system clock)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kafkasim.client.admin import AdminClient
from kafkasim.client.consumer import Consumer, RecordDeserializationError
from kafkasim.client.consumer_types import ConsumerRecord
from kafkasim.client.producer import Producer
from kafkasim.client.record_columns import RecordColumns
from kafkasim.common.clock import ManualClock, SystemClock
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.batch import TimestampType, decode_batch
from tests.unit.client.fake_brokers import BROKERS, FakeCluster, FakeTransport

A0 = TopicPartition("a", 0)


def produced(cluster: FakeCluster) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record the fake brokers were sent, in order."""
    out: list[tuple[bytes | None, bytes | None]] = []
    for sent in cluster.log:
        if isinstance(sent.request, pb.ProduceRequest):
            for part in sent.request.partitions:
                out.extend((r.key, r.value) for r in decode_batch(part.records)[1])
    return out


def send_all(config: dict[str, object], records: list[tuple[Any, Any]]) -> FakeCluster:
    cluster = FakeCluster()

    async def main() -> None:
        props = {"bootstrap.servers": BROKERS[1], **config}
        async with Producer(props, transport=FakeTransport(cluster), clock=ManualClock()) as p:
            for key, value in records:
                await p.send("a", value, key=key)

    asyncio.run(main())
    return cluster


def test_str_and_json_serializers_encode_keys_and_values() -> None:
    cluster = send_all(
        {"key.serializer": "str", "value.serializer": "json"},
        [("user-1", {"n": 1, "ok": True}), (None, None), ("k", [1, "x"])],
    )
    assert produced(cluster) == [
        (b"user-1", b'{"n":1,"ok":true}'),
        (None, None),  # no key, a tombstone: never passed to a serializer
        (b"k", b'[1,"x"]'),
    ]


def test_a_callable_serializer_is_called_as_kafka_pythons() -> None:
    cluster = send_all({"value.serializer": lambda v: str(v * 2).encode()}, [(b"raw-key", 21)])
    assert produced(cluster) == [(b"raw-key", b"42")]


def test_bytes_is_the_default_and_leaves_bytes_alone() -> None:
    cluster = send_all({"value.serializer": "bytes"}, [(b"k", b"\x00\xff")])
    assert produced(cluster) == [(b"k", b"\x00\xff")]


def test_a_value_the_serializer_cannot_take_raises_from_send_naming_the_key() -> None:
    async def main() -> None:
        props = {"bootstrap.servers": BROKERS[1], "key.serializer": "str"}
        async with Producer(props, transport=FakeTransport(FakeCluster())) as p:
            with pytest.raises(TypeError, match=r"key.serializer=str takes str, not int"):
                p.send("a", b"v", key=7)
            with pytest.raises(TypeError, match="value must be bytes"):
                p.send("a", "text needs value.serializer=str")

    asyncio.run(main())


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("value.serializer", "xml", "Invalid value xml for configuration value.serializer"),
        ("key.serializer", 5, "Invalid value 5 for configuration key.serializer"),
    ],
)
def test_a_bad_serializer_is_invalid_config_naming_the_key(
    key: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        Producer({"bootstrap.servers": BROKERS[1], key: value})


def test_a_bad_deserializer_is_invalid_config_naming_the_key() -> None:
    with pytest.raises(InvalidConfigError, match=r"configuration value\.deserializer"):
        Consumer({"bootstrap.servers": BROKERS[1], "value.deserializer": "yaml"})


def record(offset: int, key: bytes | None, value: bytes | None) -> ConsumerRecord:
    return ConsumerRecord("a", 0, offset, 0, TimestampType.CREATE_TIME, key, value)


def buffered(consumer: Consumer, records: list[ConsumerRecord]) -> None:
    """Put ``records`` in ``A0``'s buffer as a completed fetch would."""
    consumer.assign([A0])
    subscriptions = consumer._subscriptions
    state = subscriptions.state(A0)
    state.position = records[0].offset
    columns = RecordColumns(A0.topic, A0.partition)
    for r in records:
        columns.offsets.append(r.offset)
        columns.timestamps.append(r.timestamp)
        columns.timestamp_types.append(int(r.timestamp_type))
        columns.keys.append(r.key)
        columns.values.append(r.value)
        columns.headers.append(r.headers)
    subscriptions.buffer(A0, state, columns)


def test_poll_deserializes_keys_and_values() -> None:
    async def main() -> list[ConsumerRecord]:
        config = {
            "bootstrap.servers": BROKERS[1],
            "key.deserializer": "str",
            "value.deserializer": "json",
        }
        async with Consumer(config, transport=FakeTransport(FakeCluster())) as consumer:
            buffered(consumer, [record(3, b"k", b'{"n":1}'), record(4, None, None)])
            return await consumer.poll(0)

    first, second = asyncio.run(main())
    assert (first.offset, first.key, first.value) == (3, "k", {"n": 1})
    assert (second.key, second.value) == (None, None)


def test_a_failing_deserializer_names_the_record_and_keeps_the_position_on_it() -> None:
    async def main() -> None:
        config = {"bootstrap.servers": BROKERS[1], "value.deserializer": json.loads}
        async with Consumer(config, transport=FakeTransport(FakeCluster())) as consumer:
            buffered(consumer, [record(5, None, b"1"), record(6, None, b"{not json")])
            good = await consumer.poll(0)
            assert [(r.offset, r.value) for r in good] == [(5, 1)]
            assert consumer.position(A0) == 6  # the bad record is not skipped
            buffered(consumer, [record(6, None, b"{not json"), record(7, None, b"2")])
            with pytest.raises(RecordDeserializationError) as raised:
                await consumer.poll(0)
            assert str(raised.value).startswith(
                "Error deserializing key/value for partition a-0 at offset 6."
            )
            assert isinstance(raised.value.__cause__, json.JSONDecodeError)
            assert consumer.position(A0) == 6

    asyncio.run(main())


class ClosingTransport(FakeTransport):
    closed = False

    async def close(self) -> None:
        self.closed = True


def test_clients_default_to_a_grpc_transport_of_their_own_closed_with_them() -> None:
    async def main() -> None:
        config = {"bootstrap.servers": BROKERS[1]}
        producer = Producer(config)
        consumer = Consumer(config)
        admin = AdminClient(config)
        transports = [producer.transport, consumer._transport, admin.transport]
        assert all(isinstance(t, GrpcTransport) for t in transports)
        assert isinstance(producer.clock, SystemClock)
        assert isinstance(consumer.clock, SystemClock)
        await producer.close()
        await consumer.close()
        await admin.close()
        assert all(t._closed for t in transports)  # type: ignore[attr-defined]

    asyncio.run(main())


def test_a_transport_given_stays_open() -> None:
    async def main() -> None:
        config = {"bootstrap.servers": BROKERS[1]}
        given = [ClosingTransport(FakeCluster()) for _ in range(3)]
        await Producer(config, transport=given[0]).close()
        await Consumer(config, transport=given[1]).close()
        await AdminClient(config, transport=given[2]).close()
        assert not any(t.closed for t in given)

    asyncio.run(main())


def test_admin_takes_a_config_dict_and_the_older_keyword_form() -> None:
    admin = AdminClient(
        {"bootstrap.servers": "b1:1,b2:2", "request.timeout.ms": 500},
        transport=FakeTransport(FakeCluster()),
    )
    assert admin.request_timeout_ms == 500
    assert admin.config["bootstrap.servers"] == ["b1:1", "b2:2"]
    old = AdminClient(
        ["b1:1"], transport=FakeTransport(FakeCluster()), request_timeout_ms=700, timeout_ms=900
    )
    assert (old.request_timeout_ms, old.config["default.api.timeout.ms"]) == (700, 900)
    with pytest.raises(InvalidConfigError, match="Unknown admin configuration key: acks"):
        AdminClient({"bootstrap.servers": "b1:1", "acks": "all"})
    with pytest.raises(InvalidConfigError, match=r'"bootstrap\.servers"'):
        AdminClient({})
    with pytest.raises(TypeError, match=r"request\.timeout\.ms"):
        AdminClient({"bootstrap.servers": "b1:1"}, request_timeout_ms=5)
