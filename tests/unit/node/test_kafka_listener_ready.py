"""A broker that has just (re)started answers Kafka's clients only once the controller has
told it about the cluster: its metadata cache is ready at the first UpdateMetadata that lists
the broker itself, and the Kafka listener holds each connection's first request until then
(bounded). Without it, a restarted broker answered Metadata with no brokers and no topics,
and librdkafka forgot every broker it knew (found by tests/interop/test_idempotence.py)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from kafkasim.node.kafka_apis import KafkaProtocolApis
from kafkasim.node.kafka_server import KafkaListener
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.proto import kafkasim_pb2 as pb
from tests.kafka_wire import API_VERSIONS, read_response, request_frame, sized
from tests.unit.node.test_kafka_apis import FakeBroker


def update(cache: MetadataCache, *broker_ids: int) -> None:
    cache.update(
        pb.UpdateMetadataRequest(
            controller_id=1,
            controller_epoch=1,
            live_brokers=[pb.BrokerEndpoint(node_id=b, host="h", port=b) for b in broker_ids],
        )
    )


def test_the_cache_is_ready_at_the_first_update_that_lists_this_broker() -> None:
    async def main() -> list[bool]:
        cache = MetadataCache(2)
        seen = [cache.ready, await cache.wait_ready(0.01)]
        update(cache, 1, 3)  # other brokers only: still not told about itself
        seen.append(await cache.wait_ready(0.01))
        waiting = asyncio.ensure_future(cache.wait_ready(5.0))
        await asyncio.sleep(0)
        update(cache, 1, 2, 3)
        seen.append(await waiting)
        return [*seen, cache.ready]

    assert asyncio.run(main()) == [False, False, False, True, True]


def test_the_listener_answers_a_connection_only_once_the_broker_is_ready() -> None:
    async def main() -> tuple[bool, int]:
        gate = asyncio.Event()
        listener = KafkaListener(
            "127.0.0.1",
            0,
            KafkaProtocolApis(cast(Any, FakeBroker()), "KAFKA"),
            max_request_bytes=1 << 20,
            idle_timeout_ms=10_000,
            ready=gate.wait,
        )
        await listener.start()
        try:
            host, port = listener.address.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(sized(request_frame(API_VERSIONS, 3, 7)))
            await writer.drain()
            try:
                await asyncio.wait_for(reader.readexactly(4), 0.3)
                answered_early = True
            except TimeoutError:
                answered_early = False
            gate.set()
            size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 5.0), "big")
            correlation_id, _ = read_response(await reader.readexactly(size), API_VERSIONS, 3)
            writer.close()
            return answered_early, correlation_id
        finally:
            await listener.stop()

    assert asyncio.run(main()) == (False, 7)
