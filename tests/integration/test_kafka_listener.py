"""The Kafka listener of a real broker process against bad input, over raw sockets: a frame
over socket.request.max.bytes, an unknown API key, an unsupported Produce version, a garbled
request and a client leaving mid-request each close that connection with one log line, store
nothing, and leave the broker serving every other connection; ApiVersions of an unknown
version is answered v0; an idle connection is closed after connections.max.idle.ms; pipelined
requests are answered in request order."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from kafkasim.cluster.local import BrokerProcess, LocalCluster
from kafkasim.controller.zk_process import zookeeper_available
from tests.kafka_wire import API_VERSIONS, METADATA, PRODUCE, read_response, request_frame, sized
from tests.unit.storage.logtools import make_batch

LIST_OFFSETS = 2
TOPIC = "bad-input"
MAX_REQUEST_BYTES = 1024 * 1024
IDLE_MS = 1500
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    cluster = LocalCluster(
        tmp_path_factory.mktemp("kafka-listener"),
        brokers=1,
        broker_props={
            "socket.request.max.bytes": MAX_REQUEST_BYTES,
            "connections.max.idle.ms": IDLE_MS,
        },
    )
    try:
        cluster.start()
        produce_and_consume(cluster, [b"first", b"second"])
        yield cluster
    finally:
        cluster.stop()


def produce_and_consume(cluster: LocalCluster, values: list[bytes]) -> None:
    """A confluent-kafka (librdkafka) round trip: ``values`` acknowledged with acks=all and
    read back from where they were written."""
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "acks": "all"})
    offsets: list[int] = []

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        offsets.append(message.offset())

    for value in values:
        producer.produce(TOPIC, value, partition=0, on_delivery=delivered)
    assert producer.flush(DEADLINE_S) == 0
    assert len(offsets) == len(values)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "check",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([KafkaTopicPartition(TOPIC, 0, min(offsets))])
        got: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.value())
        assert got == values
    finally:
        consumer.close()


# -- a raw client -----------------------------------------------------------------------------


def broker_of(cluster: LocalCluster) -> BrokerProcess:
    return cluster.brokers[1]


def connect(cluster: LocalCluster) -> socket.socket:
    host, port = broker_of(cluster).kafka_address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=DEADLINE_S)


def receive(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"the broker closed the connection after {len(data)} of {size} bytes"
        data += chunk
    return data


def receive_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", receive(sock, 4))
    return receive(sock, size)


def call(
    sock: socket.socket, api_key: int, version: int, correlation_id: int, **values: Any
) -> Any:
    sock.sendall(sized(request_frame(api_key, version, correlation_id, "raw", **values)))
    answered_id, body = read_response(receive_frame(sock), api_key, version)
    assert answered_id == correlation_id
    return body


def api_versions_ok(sock: socket.socket) -> None:
    body = call(sock, API_VERSIONS, 3, 71, client_software_name="raw", client_software_version="1")
    assert body.error_code == 0
    assert {k.api_key for k in body.api_keys} >= {PRODUCE, METADATA, API_VERSIONS}


def end_offset(cluster: LocalCluster) -> int:
    with connect(cluster) as sock:
        body = call(
            sock,
            LIST_OFFSETS,
            1,
            5,
            replica_id=-1,
            topics=[{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        )
    (partition,) = body.topics[0].partitions
    assert partition.error_code == 0
    return int(partition.offset)


def closed_by_broker(sock: socket.socket) -> bool:
    """True once the broker closes ``sock`` (EOF or reset) within the deadline."""
    sock.settimeout(DEADLINE_S)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def log_text(cluster: LocalCluster) -> str:
    return broker_of(cluster).log_path.read_text(errors="replace")


def lines_about(cluster: LocalCluster, mark: int, local_port: int) -> list[str]:
    """The broker's log lines since ``mark`` naming the client connection on ``local_port``,
    waiting (within the deadline) until there is at least one."""
    needle = f"127.0.0.1:{local_port}"
    deadline = time.monotonic() + DEADLINE_S
    while True:
        lines = [line for line in log_text(cluster)[mark:].splitlines() if needle in line]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


# -- bad connections --------------------------------------------------------------------------


def produce_v9_frame() -> bytes:
    return request_frame(
        PRODUCE,
        9,
        7,
        "raw",
        acks=1,
        timeout=1000,
        topic_data=[
            {"name": TOPIC, "partition_data": [{"index": 0, "records": make_batch([b"bad"])}]}
        ],
    )


def oversize(sock: socket.socket) -> None:
    # Only the size prefix: the broker must refuse it without waiting for the body.
    sock.sendall(struct.pack(">i", MAX_REQUEST_BYTES + 1))


def unknown_api_key(sock: socket.socket) -> None:
    sock.sendall(sized(struct.pack(">hhih", 999, 0, 7, 3) + b"raw"))


def unsupported_produce_version(sock: socket.socket) -> None:
    # A well-formed Produce v10 (Kafka 3.7's) with a valid batch: over the served 3-9.
    records = make_batch([b"newer"])
    topic_data = [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]
    frame = request_frame(PRODUCE, 10, 7, "raw", acks=1, timeout=1000, topic_data=topic_data)
    sock.sendall(sized(frame))


def garbled_produce(sock: socket.socket) -> None:
    frame = produce_v9_frame()
    header = len(struct.pack(">hhih", 0, 9, 7, 3) + b"raw") + 1  # header v2 and its tag byte
    sock.sendall(sized(frame[:header] + b"\xff" * (len(frame) - header)))


def garbled_array_length(sock: socket.socket) -> None:
    # Metadata v11 declaring ~2^31 topics in a 28-byte frame: kio's native reader reserved
    # memory for all of them and aborted the broker process.
    sock.sendall(sized(bytes.fromhex("0003000b0000ae36ffff00f5a8c2937e815ef4c247980ea6d9ab51da")))


def leaves_mid_request(sock: socket.socket) -> None:
    frame = produce_v9_frame()
    sock.sendall(struct.pack(">i", len(frame)) + frame[: len(frame) // 2])


BAD: dict[str, tuple[Callable[[socket.socket], None], bool, str]] = {
    # name: (what the client does, whether the broker closes, what the log line says)
    "oversize": (oversize, True, "over socket.request.max.bytes"),
    "unknown api key": (unknown_api_key, True, "UNSUPPORTED_VERSION"),
    "unsupported produce version": (unsupported_produce_version, True, "UNSUPPORTED_VERSION"),
    "garbled request": (garbled_produce, True, "INVALID_REQUEST"),
    "garbled array length": (garbled_array_length, True, "INVALID_REQUEST"),
    "client leaves mid-request": (leaves_mid_request, False, "closed inside a request"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_connection_is_closed_alone_with_one_log_line_and_nothing_stored(
    cluster: LocalCluster, case: str
) -> None:
    action, broker_closes, logged = BAD[case]
    before = end_offset(cluster)
    mark = len(log_text(cluster))
    with connect(cluster) as other, connect(cluster) as bad:
        api_versions_ok(other)
        local_port = bad.getsockname()[1]
        action(bad)
        if broker_closes:
            assert closed_by_broker(bad), f"{case}: the broker kept the connection open"
        else:
            bad.close()
        api_versions_ok(other)  # the connection opened before is unaffected
    lines = lines_about(cluster, mark, local_port)
    assert len(lines) == 1, lines
    assert logged in lines[0]
    with connect(cluster) as fresh:
        api_versions_ok(fresh)
    assert end_offset(cluster) == before


def test_api_versions_of_an_unknown_version_is_answered_v0_and_the_connection_stays(
    cluster: LocalCluster,
) -> None:
    with connect(cluster) as sock:
        # A v99 request in header v2 layout with a body this broker cannot know.
        sock.sendall(sized(struct.pack(">hhih", API_VERSIONS, 99, 42, 3) + b"raw\x00\x01\x02"))
        answered_id, body = read_response(receive_frame(sock), API_VERSIONS, 0)
        assert answered_id == 42
        assert body.error_code == 35  # UNSUPPORTED_VERSION
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 3)]
        api_versions_ok(sock)


def test_pipelined_requests_are_answered_in_request_order(cluster: LocalCluster) -> None:
    requests = [
        (METADATA, 1, 101, {"topics": [{"name": TOPIC}]}),
        (API_VERSIONS, 2, 102, {}),
        (METADATA, 9, 103, {"topics": None}),
    ]
    with connect(cluster) as sock:
        sock.sendall(
            b"".join(sized(request_frame(k, v, c, "raw", **values)) for k, v, c, values in requests)
        )
        answers = [read_response(receive_frame(sock), k, v) for k, v, _, _ in requests]
    assert [correlation_id for correlation_id, _ in answers] == [101, 102, 103]
    assert [t.name for t in answers[0][1].topics] == [TOPIC]
    assert answers[1][1].error_code == 0
    assert TOPIC in {t.name for t in answers[2][1].topics}


def test_an_idle_connection_is_closed_after_connections_max_idle_ms(cluster: LocalCluster) -> None:
    mark = len(log_text(cluster))
    with connect(cluster) as sock:
        api_versions_ok(sock)
        quiet_since = time.monotonic()
        local_port = sock.getsockname()[1]
        assert closed_by_broker(sock)
        # Not before the idle time (a lower bound: a loaded machine only makes it later).
        assert time.monotonic() - quiet_since >= IDLE_MS / 1000 * 0.66
    lines = lines_about(cluster, mark, local_port)
    assert len(lines) == 1, lines
    assert "connections.max.idle.ms" in lines[0]


def test_a_real_client_still_produces_and_consumes_after_the_bad_connections(
    cluster: LocalCluster,
) -> None:
    before = end_offset(cluster)
    produce_and_consume(cluster, [b"third", b"fourth", b"fifth"])
    assert end_offset(cluster) == before + 3
