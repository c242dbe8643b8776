"""OffsetDelete over gRPC (``AdminClient.delete_consumer_group_offsets``), against an
in-process cluster on the virtual clock: an empty group's offsets go, a live group keeps those
of the topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC), unknown partitions and
groups get Kafka's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.client.admin import AdminClient
from kafkasim.common.errors import error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.sim.network import SimTransport
from tests.sim.helpers import create, simulate
from tests.sim.test_groups import FAST_GROUPS, GROUP, TOPIC, member

OTHER = "refunds"


def test_offset_delete_removes_what_no_member_subscribes_to(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, TOPIC, partitions=2)
        await create(cluster, OTHER, partitions=1)
        transport = SimTransport(cluster.network, "admin")
        admin = AdminClient(
            {"bootstrap.servers": [broker_address(b) for b in cluster.broker_ids]},
            transport=transport,
            clock=cluster.clock,
        )
        t0, t1, r0 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1), TopicPartition(OTHER, 0)
        with pytest.raises(error_for_name("GROUP_ID_NOT_FOUND")):
            await admin.delete_consumer_group_offsets(GROUP, [t0])
        await admin.alter_group_offsets(GROUP, {t0: 3, t1: 4, r0: 5})

        # An empty group: any partition's offset goes; an unknown partition is named.
        missing = TopicPartition(TOPIC, 9)
        result = await admin.delete_consumer_group_offsets(GROUP, [t0, missing])
        assert result[t0] is None
        assert isinstance(result[missing], error_for_name("UNKNOWN_TOPIC_OR_PARTITION"))
        assert await admin.list_group_offsets(GROUP) == {t1: 4, r0: 5}

        # A live member subscribed to TOPIC: its offsets stay, OTHER's go.
        async with member(cluster, "a") as consumer:
            consumer.subscribe([TOPIC])
            while not consumer.assignment():
                await consumer.poll(200)
            result = await admin.delete_consumer_group_offsets(GROUP, [t1, r0])
            subscribed = error_for_name("GROUP_SUBSCRIBED_TO_TOPIC")
            assert isinstance(result[t1], subscribed)
            assert result[r0] is None
            assert await admin.list_group_offsets(GROUP) == {t1: 4}
        await admin.close()
        await transport.close()

    simulate(tmp_path, scenario, **FAST_GROUPS)
