"""The blocking facade (client.sync): the asyncio clients on a private loop thread, results
and errors in the caller's thread, closed cleanly with the thread joined."""

from __future__ import annotations

import threading

import pytest

from kafkasim.client.producer import ProducerClosedError
from kafkasim.client.sync import SyncAdminClient, SyncConsumer, SyncProducer
from kafkasim.common.errors import InvalidConfigError, error_for_name
from kafkasim.common.types import TopicPartition
from tests.unit.client.fake_brokers import BROKERS, FakeCluster, FakeTransport

CONFIG = {"bootstrap.servers": BROKERS[1]}


def loop_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kafkasim-")]


def test_send_returns_a_future_whose_get_blocks_for_the_metadata() -> None:
    cluster = FakeCluster()
    with SyncProducer(
        {**CONFIG, "value.serializer": "str"}, transport=FakeTransport(cluster)
    ) as producer:
        futures = [producer.send("a", f"v{i}") for i in range(3)]
        producer.flush(timeout=5)
        assert all(f.done() for f in futures)
        assert [f.get(timeout=5).offset for f in futures] == [0, 1, 2]
        assert producer.send("c", "x", partition=1).get(timeout=5).partition == 1
    assert loop_threads() == []  # closed: the loop's thread is joined


def test_errors_raise_in_the_callers_thread() -> None:
    cluster = FakeCluster()
    cluster.fail_next("Produce", "INVALID_RECORD")
    producer = SyncProducer(CONFIG, transport=FakeTransport(cluster))
    try:
        with pytest.raises(TypeError, match="value must be bytes"):
            producer.send("a", 42)  # misuse: raised by send itself
        future = producer.send("a", b"refused")
        with pytest.raises(error_for_name("INVALID_RECORD")) as raised:
            future.get(timeout=5)
        assert future.exception() is raised.value
    finally:
        producer.close()
    with pytest.raises(RuntimeError, match="closed"):
        producer.send("a", b"late")
    producer.close()  # idempotent


def test_a_config_error_raises_from_the_constructor_and_leaves_no_thread() -> None:
    with pytest.raises(InvalidConfigError, match="acks"):
        SyncProducer({**CONFIG, "acks": "most"})
    with pytest.raises(InvalidConfigError, match=r"bootstrap\.servers"):
        SyncConsumer({})
    with pytest.raises(InvalidConfigError, match="Unknown admin configuration key"):
        SyncAdminClient({**CONFIG, "linger.ms": 1})
    assert loop_threads() == []


def test_a_client_called_from_its_own_callbacks_refuses_instead_of_deadlocking() -> None:
    producer = SyncProducer(CONFIG, transport=FakeTransport(FakeCluster()))
    errors: list[BaseException] = []

    def on_done(_future: object) -> None:
        try:
            producer.flush()
        except RuntimeError as e:
            errors.append(e)

    try:
        producer.send("a", b"x").get(timeout=5)
        done = threading.Event()

        async def add_callback() -> None:
            future = producer.producer.send("a", b"y")
            future.add_done_callback(on_done)
            future.add_done_callback(lambda _: done.set())

        producer._thread.run(add_callback())
        assert done.wait(5)
        assert [str(e) for e in errors] == [
            "a blocking kafkasim client was called from its own thread"
        ]
    finally:
        producer.close()


def test_close_with_a_timeout_fails_what_could_not_be_sent() -> None:
    cluster = FakeCluster(hold_produce=True)
    producer = SyncProducer(CONFIG, transport=FakeTransport(cluster))
    future = producer.send("a", b"held")
    with pytest.raises(TimeoutError):
        producer.flush(timeout=0.05)
    producer.close(timeout=0.05)
    with pytest.raises(ProducerClosedError):
        future.get(timeout=5)
    assert loop_threads() == []


def test_consumer_methods_run_on_the_clients_loop() -> None:
    tp = TopicPartition("a", 0)
    with SyncConsumer(CONFIG, transport=FakeTransport(FakeCluster())) as consumer:
        consumer.assign([tp])
        assert consumer.assignment() == {tp}
        consumer.seek(tp, 7)
        assert consumer.position(tp) == 7
        consumer.seek_to_end()
        assert consumer.position(tp) is None
    assert loop_threads() == []
