"""cluster.id (Kafka's ZooKeeper-mode start-up): the first broker generates ``/cluster/id``,
every broker writes it to its log dirs' meta.properties and refuses to start on log dirs of
another cluster; Metadata and DescribeCluster report it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kafkasim import proto
from kafkasim.controller import zk_data
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.storage.checkpoints import (
    InconsistentClusterIdError,
    read_meta_properties,
    write_meta_properties,
)
from tests.sim.helpers import simulate

OTHER_CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"


def test_cluster_id_is_generated_stored_reported_and_checked(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        data, _ = await cluster.brokers[1].zk.get(zk_data.CLUSTER_ID)
        znode = json.loads(data)
        assert znode["version"] == "1" and set(znode) == {"version", "id"}
        cluster_id = znode["id"]
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)  # a UUID in URL-safe base64
        for broker_id in cluster.brokers:
            for d in cluster.log_dirs(broker_id):
                props = read_meta_properties(d)
                assert props is not None and props["cluster.id"] == cluster_id
        client = cluster.client()
        described = await client.transport.call(
            broker_address(2),
            proto.METHOD_DESCRIBE_CLUSTER,
            pb.DescribeClusterRequest(),
            timeout_s=5,
        )
        metadata = await client.transport.call(
            broker_address(3), proto.METHOD_METADATA, pb.MetadataRequest(), timeout_s=5
        )
        assert described.cluster_id == metadata.cluster_id == cluster_id

        # Broker 2's log dir now claims another cluster: it does not start.
        await cluster.crash(2)
        (log_dir,) = cluster.log_dirs(2)
        write_meta_properties(log_dir, 2, OTHER_CLUSTER)
        with pytest.raises(InconsistentClusterIdError) as info:
            await cluster.start_broker(2)
        assert cluster_id in str(info.value) and OTHER_CLUSTER in str(info.value)
        cluster.brokers.pop(2)
        # Its own id back: it starts and rejoins; the stored id is unchanged.
        write_meta_properties(log_dir, 2, cluster_id)
        await cluster.start_broker(2)
        await cluster.wait_for(
            lambda: 2 in cluster.brokers[1].metadata.brokers, what="broker 2 to rejoin"
        )
        props = read_meta_properties(log_dir)
        assert props is not None and props["cluster.id"] == cluster_id

    simulate(tmp_path, scenario)
