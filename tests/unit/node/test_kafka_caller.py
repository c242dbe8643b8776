"""A Kafka-protocol connection sets its caller (common.security) once, for every request it
handles: the client's address, the listener's name, anonymous until authenticated."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kafkasim.common.security import ANONYMOUS, Caller, current_caller
from kafkasim.node.kafka_apis import KafkaProtocolApis
from kafkasim.node.kafka_server import KafkaListener
from tests.kafka_wire import API_VERSIONS, read_response, request_frame, sized
from tests.unit.node.test_kafka_apis import FakeBroker


def test_a_kafka_connection_sets_its_caller_for_its_requests() -> None:
    seen: list[Caller] = []

    class Recording(KafkaProtocolApis):
        async def handle(self, request: Any) -> Any:
            seen.append(current_caller())
            return await super().handle(request)

    async def main() -> int:
        listener = KafkaListener(
            "127.0.0.1",
            0,
            Recording(cast(Any, FakeBroker()), "KAFKA"),
            max_request_bytes=1 << 20,
            idle_timeout_ms=10_000,
            listener="KAFKA",
        )
        await listener.start()
        try:
            host, port = listener.address.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(sized(request_frame(API_VERSIONS, 3, 7)))
            await writer.drain()
            size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5.0), "big")
            correlation_id, _ = read_response(await reader.readexactly(size), API_VERSIONS, 3)
            writer.close()
            return correlation_id
        finally:
            await listener.stop()

    assert asyncio.run(main()) == 7
    assert seen == [Caller(ANONYMOUS, "127.0.0.1", "KAFKA")]
    assert current_caller() == Caller()  # the test's own context is untouched
